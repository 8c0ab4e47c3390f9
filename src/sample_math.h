/* SPEC §3's scalar arithmetic, written once and compiled twice: as C11 for the host samplers (src/sample.c, used by
 * the ref and cpu backends) and as CUDA C++ for the device sampler (src/cuda/cu_sample.cuh). Everything that must be
 * bit-identical between them lives here: the Philox4x32-10 rounds, the (seed, frame, level, index) -> (counter,
 * key, word) mapping, u and the Gumbel transform, 1/T and the score, the order key, which logits may be drawn, and
 * the tie rule. The loops around them (the host's sequential radix select and scan, the device's block-parallel
 * histograms and warp reductions) stay with each sampler.
 *
 * Rules for this file: only the common subset of C11 and CUDA C++ (no references, templates, overloads, compound
 * literals or designated initializers); every function is `static DD_HD`, pure, and allocation-free. Every float
 * rounding is spelled with the dd_*_rn helpers below, one IEEE operation each: on the device they are the __f*_rn
 * intrinsics, which nvcc never fuses into a multiply-add; on the host they are plain operators, and what keeps gcc
 * from fusing them (across the inlined calls too) is -ffp-contract=off, which the Makefile always passes (nvcc
 * also gets -fmad=false). Do not change the order of any operation without re-running tests/test_sample.c and
 * test_cuda's sample test on a device.
 */
#ifndef DD_SAMPLE_MATH_H
#define DD_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* DD_HD: a function compiled for both sides. Under nvcc __host__ __device__ __forceinline__ (the device sampler
 * inlined these before they were shared, and its loops are written for it); in C plain inline. Use as
 * `static DD_HD type name(...)`. DD_HD_UNROLL: `#pragma unroll` in nvcc's device pass only (gcc, also as nvcc's host
 * compiler, would warn about it under -Wall). */
#ifdef __CUDACC__
#define DD_HD __host__ __device__ __forceinline__
#else
#define DD_HD inline
#endif
#ifdef __CUDA_ARCH__
#define DD_HD_UNROLL _Pragma("unroll")
#else
#define DD_HD_UNROLL
#endif

/* ---- one IEEE operation each, round to nearest even ------------------------------------------------------- */

static DD_HD float dd_fmul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static DD_HD float dd_fadd_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

static DD_HD float dd_fdiv_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* double -> float, round to nearest even */
static DD_HD float dd_d2f_rn(double x) {
#ifdef __CUDA_ARCH__
    return __double2float_rn(x);
#else
    return (float)x;
#endif
}

static DD_HD uint32_t dd_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

static DD_HD float dd_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* ---- Philox4x32-10 ------------------------------------------------------------------------------------------ */

#define DD_PHILOX_M0 0xD2511F53u
#define DD_PHILOX_M1 0xCD9E8D57u
#define DD_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define DD_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* out = Philox4x32 with 10 rounds of counter {c0, c1, c2, c3} and key {k0, k1} (Random123's philox4x32_R(10, ...),
 * the generator cuRAND's Philox uses). One round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 as 64-bit products,
 *   c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0};
 * the key is bumped by (W0, W1) between rounds (9 bumps). The device takes the high words with __umulhi, the host
 * from a 64-bit product: the same integers. The inputs are values, so out may alias the caller's counter. */
static DD_HD void dd_philox10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                              uint32_t out[4]) {
    DD_HD_UNROLL
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += DD_PHILOX_W0;
            k1 += DD_PHILOX_W1;
        }
#ifdef __CUDA_ARCH__
        uint32_t hi0 = __umulhi(DD_PHILOX_M0, c0), lo0 = DD_PHILOX_M0 * c0;
        uint32_t hi1 = __umulhi(DD_PHILOX_M1, c2), lo1 = DD_PHILOX_M1 * c2;
#else
        uint64_t p0 = (uint64_t)DD_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)DD_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
#endif
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* ---- Gumbel noise (SPEC §3 point 3) ------------------------------------------------------------------------- */

/* x[j] = the Philox word of logit index 4*i4 + j for (seed, frame, level): key {lo32(seed), hi32(seed)}, counter
 * {i4, level, lo32(frame), hi32(frame)}; index i uses word i & 3 of counter i >> 2. */
static DD_HD void dd_noise_words(uint64_t seed, uint64_t frame, int level, uint32_t i4, uint32_t x[4]) {
    dd_philox10(i4, (uint32_t)level, (uint32_t)frame, (uint32_t)(frame >> 32), (uint32_t)seed,
                (uint32_t)(seed >> 32), x);
}

/* One Philox word x -> Gumbel(0, 1) sample.
 * u = (float)((x >> 8) | 1) * 2^-24: the top 24 bits of x, forced odd, so u lies in [2^-24, 1 - 2^-24] and both
 * logs are finite; the int -> float conversion and the power-of-two scale are exact.
 * The logs are in double on purpose: float logf is not correctly rounded, and glibc's and CUDA's logf disagree
 * in the last bit on ~14% of these inputs, which would make backends pick different codes. log() in double is
 * far more accurate than float needs, and rounding the double result once to float was checked to give the same
 * bits on glibc and CUDA for every u. Always finite (|g| < 17). */
static DD_HD float dd_gumbel_word(uint32_t x) {
    float u = dd_fmul_rn((float)((x >> 8) | 1u), 0x1p-24f);
    return dd_d2f_rn(-log(-log((double)u)));
}

/* ---- order keys --------------------------------------------------------------------------------------------- */

#define DD_KEY_NEG_INF 0x007FFFFFu /* dd_order_key(-inf) = ~0xFF800000 */

/* Order-preserving map float -> uint32: a < b (as floats) <=> key(a) < key(b), with -0.0 and +0.0 mapped to the
 * same key (they are equal floats) and every NaN mapped to the key of -inf (NaN counts as -inf).
 * Standard sign-flip map: non-negative floats get the sign bit set (so they sort above every negative one),
 * negative floats are bit-inverted (so a larger magnitude sorts lower). Two fix-ups make it match float
 * comparison with NaN as -inf: -0.0 is canonicalized to +0.0 first (they compare equal; torch's `z < kth` keeps
 * both), and NaN (any sign, any payload) gets the key of -inf. Without the NaN fix-up negative NaNs would sort
 * below -inf and positive NaNs above +inf. */
static DD_HD uint32_t dd_order_key(float f) {
    uint32_t u = dd_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return DD_KEY_NEG_INF; /* NaN */
    if (u == 0x80000000u) u = 0;                                /* -0.0 -> +0.0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Inverse of dd_order_key on its image: the float whose key is k (+0.0 for the zero key, -inf for the NaN key). */
static DD_HD float dd_order_key_to_float(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    return dd_bits_f32(u);
}

/* ---- which logits can be drawn, the score, the tie rule (SPEC §3 points 1, 2, 4, 5) ------------------------- */

/* A logit that is never returned: NaN (counts as -inf) or -inf. */
static DD_HD int dd_logit_dead(float z) { return isnan(z) || z == -INFINITY; }

/* Outside the keep set S of threshold key thr (0 keeps every live logit; else the order key of the K-th largest
 * logit, so every value tied with it is kept). */
static DD_HD int dd_logit_dropped(float z, uint32_t thr) { return dd_logit_dead(z) || dd_order_key(z) < thr; }

/* fl32(1 / T), computed once per level (T > 0). */
static DD_HD float dd_inv_temperature(float T) { return dd_fdiv_rn(1.0f, T); }

/* s = fl32(fl32(z * invT) + g): two roundings, never a fused multiply-add (one rounding would change the last bit
 * on some inputs and with it, occasionally, the argmax). An s that is NaN (only possible when invT overflows to
 * +inf and z == 0) counts as -inf. */
static DD_HD float dd_sample_score(float z, float invT, float g) {
    float s = dd_fadd_rn(dd_fmul_rn(z, invT), g);
    if (isnan(s)) s = -INFINITY;
    return s;
}

/* Does (t, j) beat the best so far (s, i)? Larger score wins, ties go to the lower index; index -1 means "none",
 * so a real candidate always beats it (a level whose candidates all score -inf returns the lowest one) and a
 * "none" never wins. Greedy (T == 0) uses it with the logit as the score. */
static DD_HD int dd_sample_better(float t, int j, float s, int i) {
    return j >= 0 && (i < 0 || t > s || (t == s && j < i));
}

#endif
