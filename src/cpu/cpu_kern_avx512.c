/* AVX-512 (F, BW, VL, DQ) instantiation of the CPU leaf kernels (cpu_kern_impl.h): 16-lane float vectors,
 * fused multiply-add, 32 vector registers — a 4 x 6 tile (24 accumulators + 4 weight vectors + 1 activation).
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c (Makefile); used only after
 * dd_cpu_isa_supported(DD_CPU_AVX512).
 *
 * Not used, on purpose: AVX512_BF16 (vdpbf16ps), AVX512_FP16 arithmetic, AVX512_VNNI / AVX_VNNI and AMX. Their
 * dot products take bf16, fp16 or int8 *activations*, so using them would round the float32 activations before
 * the multiply — the contract (SPEC §2) keeps activations float32 and accumulates exact products in float32.
 * Weight widening (bf16 -> f32 is a 16-bit shift, f16 -> f32 is vcvtph2ps, q8/q4 -> f32 a zero-extension and
 * vcvtdq2ps) needs only AVX-512F/BW, and at batch 1 the kernel is bound by memory bandwidth, not by arithmetic. */
#include "cpu.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#include <immintrin.h>

#define VL 16
typedef __m512 vf;
#ifndef AVX512_NR
#define AVX512_NR 4
#endif
#ifndef AVX512_TR
#define AVX512_TR 6
#endif
#define KERN_NR AVX512_NR
#define KERN_TR AVX512_TR
#define KERN_TABLE dd_cpu_kern_avx512
#define KERN_NAME "avx512"

static inline __attribute__((always_inline)) vf vz(void) { return _mm512_setzero_ps(); }
static inline __attribute__((always_inline)) vf vset(float f) { return _mm512_set1_ps(f); }
static inline __attribute__((always_inline)) vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline __attribute__((always_inline)) void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline __attribute__((always_inline)) vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline __attribute__((always_inline)) vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline __attribute__((always_inline)) vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline __attribute__((always_inline)) vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
/* fixed tree: 256-bit halves, then 128-bit halves, then within the lane */
static inline __attribute__((always_inline)) float vhsum(vf v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __attribute__((always_inline)) vf wf32(const uint8_t *p) { return _mm512_loadu_ps((const float *)p); }
static inline __attribute__((always_inline)) vf wbf16(const uint8_t *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
static inline __attribute__((always_inline)) vf wf16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __attribute__((always_inline)) vf wq8(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline __attribute__((always_inline)) vf wq4(const uint8_t *p) {
    const __m128i m = _mm_set1_epi8(15), b = _mm_loadl_epi64((const __m128i *)p);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}
/* 2 VL 4-bit codes from VL bytes at p: lo gets codes 0..VL-1, hi codes VL..2VL-1 */
static inline __attribute__((always_inline)) void wq4x2(const uint8_t *p, vf *lo, vf *hi) {
    const __m128i m = _mm_set1_epi8(15), b = _mm_loadu_si128((const __m128i *)p);
    __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    *lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(l, h)));
    *hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(l, h)));
}
/* q4 by a 16-entry table: vpermps reads only the low 4 bits of each index lane, so the codes need no masking */
#define KERN_Q4_LUT 1
static inline __attribute__((always_inline)) vf wq4iota(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
static inline __attribute__((always_inline)) void wq4x2lut(const uint8_t *p, vf tab, vf *lo, vf *hi) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p), h = _mm_srli_epi16(b, 4);
    *lo = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, h)), tab);
    *hi = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(b, h)), tab);
}
static inline __attribute__((always_inline)) float sbf16(uint16_t h) { return _cvtsh_ss(h); }
static inline __attribute__((always_inline)) vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline __attribute__((always_inline)) vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline __attribute__((always_inline)) vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline __attribute__((always_inline)) vf vabs(vf a) { return _mm512_abs_ps(a); }
static inline __attribute__((always_inline)) vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for integral n in [-126, 127] */
static inline __attribute__((always_inline)) vf vpow2i(vf n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
/* a < 0 ? x : y */
static inline __attribute__((always_inline)) vf vselneg(vf a, vf x, vf y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ), y, x); }

#define KERN_HAS_MASKED 1
static inline __attribute__((always_inline)) vf vldn(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
static inline __attribute__((always_inline)) void vstn(float *p, vf v, int n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
}
#include "cpu_kern_impl.h"
#else
const dd_cpu_kern dd_cpu_kern_avx512 = {.name = NULL};
#endif
