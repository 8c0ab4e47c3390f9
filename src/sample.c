/* Sampling, SPEC §3: Philox4x32-10 noise, exact top-k threshold by radix select, Gumbel-max.
 *
 * This file is the single definition of the sampling rule. Every backend either calls dd_sample_core or
 * reproduces it bit for bit (the CUDA kernels use the same formulas with __fmul_rn/__fadd_rn); the tests in
 * tests/test_sample.c check it against a sort-based brute-force sampler written independently.
 *
 * Nothing here allocates, prints or keeps state: every function is thread-safe.
 */
#include "sample.h"

#include "util.h"

#include <math.h>
#include <string.h>

/* ---- Philox4x32-10 ------------------------------------------------------------------------------------------ */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* out = Philox4x32 with 10 rounds (Random123's philox4x32_R(10, ...), the generator cuRAND's Philox uses).
 * One round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 as 64-bit products,
 *            c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0};
 * the key is bumped by (W0, W1) between rounds (9 bumps). ctr, key, out may not overlap except out == ctr. */
void dd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* ---- Gumbel noise ------------------------------------------------------------------------------------------- */

/* One Philox word x -> Gumbel(0, 1) sample.
 * u = (float)((x >> 8) | 1) * 2^-24: the top 24 bits of x, forced odd, so u lies in [2^-24, 1 - 2^-24] and both
 * logs are finite; the int -> float conversion and the power-of-two scale are exact.
 * The logs are in double on purpose: float logf is not correctly rounded, and glibc's and CUDA's logf disagree
 * in the last bit on ~14% of these inputs, which would make backends pick different codes. log() in double is
 * far more accurate than float needs, and rounding the double result once to float was checked to give the same
 * bits on glibc and CUDA for every u. */
static inline float gumbel_from_word(uint32_t x) {
    float u = (float)((x >> 8) | 1u) * 0x1p-24f;
    return (float)(-log(-log((double)u)));
}

static inline void noise_key_ctr(uint64_t seed, uint64_t frame, int level, uint32_t i4, uint32_t ctr[4],
                                 uint32_t key[2]) {
    key[0] = (uint32_t)seed;
    key[1] = (uint32_t)(seed >> 32);
    ctr[0] = i4;
    ctr[1] = (uint32_t)level;
    ctr[2] = (uint32_t)frame;
    ctr[3] = (uint32_t)(frame >> 32);
}

/* g_i of SPEC §3 point 3; see sample.h for the formula. */
float dd_gumbel(uint64_t seed, uint64_t frame, int level, uint32_t i) {
    uint32_t ctr[4], key[2], x[4];
    noise_key_ctr(seed, frame, level, i >> 2, ctr, key);
    dd_philox4x32_10(ctr, key, x);
    return gumbel_from_word(x[i & 3]);
}

/* g[j] = g_(4*i4 + j), j = 0..3, from one Philox call (the 4 words of counter i4). */
void dd_gumbel_block(uint64_t seed, uint64_t frame, int level, uint32_t i4, float g[4]) {
    uint32_t ctr[4], key[2], x[4];
    noise_key_ctr(seed, frame, level, i4, ctr, key);
    dd_philox4x32_10(ctr, key, x);
    for (int j = 0; j < 4; j++) g[j] = gumbel_from_word(x[j]);
}

/* ---- order keys and the exact top-k threshold --------------------------------------------------------------- */

#define KEY_NEG_INF 0x007FFFFFu /* dd_order_key(-inf) = ~0xFF800000 */

/* Standard sign-flip map: non-negative floats get the sign bit set (so they sort above every negative one),
 * negative floats are bit-inverted (so a larger magnitude sorts lower). Two fix-ups make it match float
 * comparison with NaN as -inf: -0.0 is canonicalized to +0.0 first (they compare equal; torch's `z < kth` keeps
 * both), and NaN (any sign, any payload) gets the key of -inf. Without the NaN fix-up negative NaNs would sort
 * below -inf and positive NaNs above +inf. */
uint32_t dd_order_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return KEY_NEG_INF; /* NaN */
    if (u == 0x80000000u) u = 0;                             /* -0.0 -> +0.0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

float dd_order_key_to_float(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Radix select, most significant byte first. After pass p the top 8*(p+1) bits of the answer are fixed in
 * `prefix`; each pass histograms the next byte of the keys that share the prefix, walks the 256 buckets from the
 * top and stops at the bucket holding the K-th largest, reducing K by the count above it. The keys are
 * recomputed from z in every pass (4 * V dd_order_key calls) so that nothing is allocated.
 * Invariant: exactly K' >= 1 keys with the current prefix are >= the answer among those sharing the prefix,
 * so a bucket is always found. Requires 1 <= K <= V. */
uint32_t dd_topk_key(const float *z, int V, int K) {
    uint32_t prefix = 0, mask = 0;
    uint32_t k = (uint32_t)K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t hist[256];
        memset(hist, 0, sizeof hist);
        for (int i = 0; i < V; i++) {
            uint32_t key = dd_order_key(z[i]);
            if ((key & mask) == prefix) hist[(key >> shift) & 0xFFu]++;
        }
        int b = 255;
        for (; b > 0; b--) {
            if (hist[b] >= k) break;
            k -= hist[b];
        }
        prefix |= (uint32_t)b << shift;
        mask |= 0xFFu << shift;
    }
    return prefix;
}

float dd_topk_threshold(const float *z, int V, int K) { return dd_order_key_to_float(dd_topk_key(z, V, K)); }

/* ---- the sampler -------------------------------------------------------------------------------------------- */

/* SPEC §3 on z[0..V) with no argument checks (see sample.h for the preconditions).
 *
 * The rule, exactly (every backend must reproduce it):
 *  - NaN logits count as -inf. If no logit is finite, return -1 (the caller reports DD_ENUMERIC).
 *  - Candidates: indices whose logit is finite or +inf (a -inf or NaN logit is never returned; with at least one
 *    finite logit the candidate set below is never empty).
 *  - T == 0 (or -0.0): greedy, the lowest candidate index with the largest z_i. No noise is drawn.
 *  - Else keep set S = all candidates if K == 0 or K >= V, else the candidates with key(z_i) >= key(z_(K)):
 *    every value tied with the K-th largest is kept. S always contains a candidate: if fewer than K logits are
 *    above -inf, z_(K) is -inf and every candidate is kept; otherwise the top K values are candidates.
 *  - s_i = fl32(fl32(z_i * invT) + g_i) with invT = fl32(1.0f / T) computed once; an s_i that is NaN (only
 *    possible when invT overflows to +inf and z_i == 0) counts as -inf. The result is the lowest index in S with
 *    the largest s_i (scan upward, replace on strictly greater; the first candidate is always taken).
 * The noise is only drawn for indices in S, one Philox call per group of 4 indices. */
int32_t dd_sample_core(const float *z, int V, float T, int K, uint64_t seed, uint64_t frame, int level) {
    int any_finite = 0;
    for (int i = 0; i < V; i++) {
        if (isfinite(z[i])) {
            any_finite = 1;
            break;
        }
    }
    if (!any_finite) return -1;

    int32_t best = -1;
    if (T == 0.0f) {
        float bz = -INFINITY;
        for (int i = 0; i < V; i++) {
            float zi = z[i];
            if (isnan(zi) || zi == -INFINITY) continue;
            if (best < 0 || zi > bz) {
                best = i;
                bz = zi;
            }
        }
        return best;
    }

    uint32_t thr = 0; /* keep everything: every key is >= 0 */
    if (K > 0 && K < V) thr = dd_topk_key(z, V, K);
    const float invT = 1.0f / T;

    float bs = -INFINITY;
    float g4[4];
    uint32_t cached = UINT32_MAX; /* i >> 2 of the noise block in g4; V < 2^31 so no real block has this index */
    for (int i = 0; i < V; i++) {
        float zi = z[i];
        if (isnan(zi) || zi == -INFINITY) continue;
        if (dd_order_key(zi) < thr) continue;
        uint32_t blk = (uint32_t)i >> 2;
        if (blk != cached) {
            dd_gumbel_block(seed, frame, level, blk, g4);
            cached = blk;
        }
        /* Two separate float statements, each rounded to float: s must be fl32(fl32(z*invT) + g) on every
         * backend. A fused multiply-add (one rounding) would change the last bit on some inputs and with it,
         * occasionally, the argmax. The build passes -ffp-contract=off (CUDA: -fmad=false, __fmul_rn/__fadd_rn);
         * keeping the statements apart makes the intent visible even if a compiler flag is lost. */
        float scaled = zi * invT;
        float si = scaled + g4[i & 3];
        if (isnan(si)) si = -INFINITY;
        if (best < 0 || si > bs) {
            best = i;
            bs = si;
        }
    }
    return best;
}

/* Public entry point: validates, then dd_sample_core. On any error *code is not written. err may be NULL;
 * on success it is left untouched. */
dd_status dd_sample_logits(const float *logits, int V, const dd_sampling *s, uint64_t seed, uint64_t frame,
                           int level, int32_t *code, dd_error *err) {
    if (!s) return dd_fail(err, DD_EINVAL, "dd_sample_logits: sampling parameters are NULL");
    if (!logits) return dd_fail(err, DD_EINVAL, "dd_sample_logits: logits is NULL");
    if (!code) return dd_fail(err, DD_EINVAL, "dd_sample_logits: code is NULL");
    if (V < 1) return dd_fail(err, DD_EINVAL, "dd_sample_logits: V must be >= 1, got %d", V);
    if (!isfinite(s->temperature) || s->temperature < 0.0f)
        return dd_fail(err, DD_EINVAL, "temperature must be finite and >= 0, got %g", (double)s->temperature);
    if (s->top_k < 0) return dd_fail(err, DD_EINVAL, "top_k must be >= 0, got %d", s->top_k);
    int32_t c = dd_sample_core(logits, V, s->temperature, s->top_k, seed, frame, level);
    if (c < 0) return dd_fail(err, DD_ENUMERIC, "level %d: no finite logit", level);
    *code = c;
    return DD_OK;
}
