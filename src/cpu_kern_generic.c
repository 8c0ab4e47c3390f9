/* Generic C instantiation of the CPU leaf kernels (cpu_kern_impl.h): portable GCC/Clang vector extensions of
 * 4 floats (one SSE register on baseline x86-64, one NEON register on arm64), separate multiply and add (no
 * FMA is assumed). The fallback everywhere; also tested on machines that have the faster paths. */
#include "cpu.h"
#include "util.h"

#include <string.h>

#define VL 4
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef uint16_t vu16 __attribute__((vector_size(VL * sizeof(uint16_t))));
typedef uint32_t vu32 __attribute__((vector_size(VL * sizeof(uint32_t))));
typedef uint8_t vu8 __attribute__((vector_size(VL)));

#define KERN_NR 4
#define KERN_TR 2
#define KERN_TABLE dd_cpu_kern_generic
#define KERN_NAME "generic"

static inline __attribute__((always_inline)) vf vz(void) { return (vf){0}; }
static inline __attribute__((always_inline)) vf vset(float f) { return (vf){0} + f; }
static inline __attribute__((always_inline)) vf vld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline __attribute__((always_inline)) vf vadd(vf a, vf b) { return a + b; }
static inline __attribute__((always_inline)) vf vsub(vf a, vf b) { return a - b; }
static inline __attribute__((always_inline)) vf vmul(vf a, vf b) { return a * b; }
/* two roundings: the build uses -ffp-contract=off, so this is never contracted into an fma */
static inline __attribute__((always_inline)) vf vfma(vf a, vf b, vf c) { return a * b + c; }
static inline __attribute__((always_inline)) float vhsum(vf v) {
    return (v[0] + v[2]) + (v[1] + v[3]);
}
static inline __attribute__((always_inline)) vf wf32(const uint8_t *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) vf wbf16(const uint8_t *p) {
    vu16 h;
    memcpy(&h, p, sizeof h);
    vu32 u = __builtin_convertvector(h, vu32) << 16;
    vf v;
    memcpy(&v, &u, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) vf wf16(const uint8_t *p) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = dd_f16_to_f32(dd_ld16(p + 2 * i));
    return v;
}
static inline __attribute__((always_inline)) vf wq8(const uint8_t *p) {
    vu8 b;
    memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, vf);
}
static inline __attribute__((always_inline)) vf wq4(const uint8_t *p) {
    vu8 b;
    for (int i = 0; i < VL / 2; i++) {
        b[2 * i] = p[i] & 15;
        b[2 * i + 1] = p[i] >> 4;
    }
    return __builtin_convertvector(b, vf);
}
static inline __attribute__((always_inline)) float sbf16(uint16_t h) { return dd_f16_to_f32(h); }

#include "cpu_kern_impl.h"
