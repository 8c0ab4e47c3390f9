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
static inline __attribute__((always_inline)) void wq4x2(const uint8_t *p, vf *lo, vf *hi) {
    *lo = wq4(p);
    *hi = wq4(p + VL / 2);
}
static inline __attribute__((always_inline)) float sbf16(uint16_t h) { return dd_f16_to_f32(h); }
typedef int32_t vi32 __attribute__((vector_size(VL * sizeof(int32_t))));
static inline __attribute__((always_inline)) vf vdiv(vf a, vf b) { return a / b; }
static inline __attribute__((always_inline)) vf vsel(vi32 m, vf x, vf y) {
    vi32 xi, yi;
    memcpy(&xi, &x, sizeof x);
    memcpy(&yi, &y, sizeof y);
    vi32 r = (xi & m) | (yi & ~m);
    vf o;
    memcpy(&o, &r, sizeof o);
    return o;
}
static inline __attribute__((always_inline)) vf vmin(vf a, vf b) { return vsel(a < b, a, b); }
static inline __attribute__((always_inline)) vf vmax(vf a, vf b) { return vsel(a > b, a, b); }
static inline __attribute__((always_inline)) vf vabs(vf a) { return vsel(a < 0, -a, a); }
/* round to nearest (ties away; |a| < 2^22 here) */
static inline __attribute__((always_inline)) vf vround(vf a) {
    vf h = vsel(a < 0, vset(-0.5f), vset(0.5f));
    return __builtin_convertvector(__builtin_convertvector(a + h, vi32), vf);
}
/* 2^n for integral n in [-126, 127] */
static inline __attribute__((always_inline)) vf vpow2i(vf n) {
    vi32 e = (__builtin_convertvector(n, vi32) + 127) << 23;
    vf o;
    memcpy(&o, &e, sizeof o);
    return o;
}
/* a < 0 ? x : y */
static inline __attribute__((always_inline)) vf vselneg(vf a, vf x, vf y) { return vsel(a < 0, x, y); }

#include "cpu_kern_impl.h"
