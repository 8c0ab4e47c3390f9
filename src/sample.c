/* Sampling, SPEC §3: Philox4x32-10 noise, exact top-k threshold by radix select, Gumbel-max.
 *
 * This file is the single definition of the sampling rule. Every backend either calls dd_sample_core or
 * reproduces it bit for bit: the CUDA sampler (src/cuda/cu_sample.cuh) runs the same scalar arithmetic, the static
 * inline functions of sample_math.h compiled for the device, inside its block-parallel loops. The tests in
 * tests/test_sample.c check it against a sort-based brute-force sampler written independently.
 *
 * Nothing here allocates, prints or keeps state: every function is thread-safe.
 */
#include "sample.h"

#include "util.h"

#include <math.h>
#include <string.h>

/* ---- Philox4x32-10 and the noise (the arithmetic is sample_math.h's, shared with the device) --------------- */

/* out = Philox4x32-10(ctr, key); see dd_philox10. ctr, key, out may not overlap except out == ctr. */
void dd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    dd_philox10(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], out);
}

/* g_i of SPEC §3 point 3; see sample.h for the formula. */
float dd_gumbel(uint64_t seed, uint64_t frame, int level, uint32_t i) {
    uint32_t x[4];
    dd_noise_words(seed, frame, level, i >> 2, x);
    return dd_gumbel_word(x[i & 3]);
}

/* g[j] = g_(4*i4 + j), j = 0..3, from one Philox call (the 4 words of counter i4). */
void dd_gumbel_block(uint64_t seed, uint64_t frame, int level, uint32_t i4, float g[4]) {
    uint32_t x[4];
    dd_noise_words(seed, frame, level, i4, x);
    for (int j = 0; j < 4; j++) g[j] = dd_gumbel_word(x[j]);
}

/* ---- the exact top-k threshold ------------------------------------------------------------------------------ */

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
            if (dd_logit_dead(zi)) continue;
            if (dd_sample_better(zi, i, bz, best)) {
                best = i;
                bz = zi;
            }
        }
        return best;
    }

    uint32_t thr = 0; /* keep everything: every key is >= 0 */
    if (K > 0 && K < V) thr = dd_topk_key(z, V, K);
    const float invT = dd_inv_temperature(T);

    float bs = -INFINITY;
    float g4[4];
    uint32_t cached = UINT32_MAX; /* i >> 2 of the noise block in g4; V < 2^31 so no real block has this index */
    for (int i = 0; i < V; i++) {
        float zi = z[i];
        if (dd_logit_dropped(zi, thr)) continue;
        uint32_t blk = (uint32_t)i >> 2;
        if (blk != cached) {
            dd_gumbel_block(seed, frame, level, blk, g4);
            cached = blk;
        }
        float si = dd_sample_score(zi, invT, g4[i & 3]); /* fl32(fl32(z * invT) + g), never fused */
        if (dd_sample_better(si, i, bs, best)) {
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
