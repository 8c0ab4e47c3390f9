/* AVX2 + FMA + F16C instantiation of the CPU leaf kernels (cpu_kern_impl.h): 8-lane float vectors, fused
 * multiply-add, hardware half->float. Compiled with -mavx2 -mfma -mf16c (Makefile); used only after
 * dd_cpu_isa_supported(DD_CPU_AVX2) has checked the CPU. Without those flags it builds an empty table. */
#include "cpu.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#define VL 8
typedef __m256 vf;
#define KERN_NR 4
#define KERN_TR 2
#define KERN_TABLE dd_cpu_kern_avx2
#define KERN_NAME "avx2"

static inline __attribute__((always_inline)) vf vz(void) { return _mm256_setzero_ps(); }
static inline __attribute__((always_inline)) vf vset(float f) { return _mm256_set1_ps(f); }
static inline __attribute__((always_inline)) vf vld(const float *p) { return _mm256_loadu_ps(p); }
static inline __attribute__((always_inline)) void vst(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline __attribute__((always_inline)) vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline __attribute__((always_inline)) vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline __attribute__((always_inline)) vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline __attribute__((always_inline)) vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline __attribute__((always_inline)) float vhsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __attribute__((always_inline)) vf wf32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
static inline __attribute__((always_inline)) vf wbf16(const uint8_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
static inline __attribute__((always_inline)) vf wf16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __attribute__((always_inline)) vf wq8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline __attribute__((always_inline)) vf wq4(const uint8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    const __m128i m = _mm_set1_epi8(15), b = _mm_cvtsi32_si128(w);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}
/* 2 VL 4-bit codes from VL bytes at p: lo gets codes 0..VL-1, hi codes VL..2VL-1 */
static inline __attribute__((always_inline)) void wq4x2(const uint8_t *p, vf *lo, vf *hi) {
    const __m128i m = _mm_set1_epi8(15), b = _mm_loadl_epi64((const __m128i *)p);
    __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m), il = _mm_unpacklo_epi8(l, h);
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(il));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(il, 8)));
}
static inline __attribute__((always_inline)) float sbf16(uint16_t h) { return _cvtsh_ss(h); }
static inline __attribute__((always_inline)) vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline __attribute__((always_inline)) vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline __attribute__((always_inline)) vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline __attribute__((always_inline)) vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline __attribute__((always_inline)) vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for integral n in [-126, 127] */
static inline __attribute__((always_inline)) vf vpow2i(vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
/* a < 0 ? x : y */
static inline __attribute__((always_inline)) vf vselneg(vf a, vf x, vf y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ)); }

#include "cpu_kern_impl.h"
#else
const dd_cpu_kern dd_cpu_kern_avx2 = {.name = NULL};
#endif
