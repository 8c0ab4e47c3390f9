/* Internal sampling API (SPEC §3), shared by the reference, fast CPU and CUDA backends.
 *
 * The public pieces (dd_philox4x32_10, dd_sample_logits) are declared in depthdec.h; this header adds the noise,
 * the exact top-k threshold and a check-free sampling core for backends that have already validated their
 * arguments. The scalar pieces every backend must compute bit for bit alike (Philox rounds, the noise mapping, u and
 * g, order keys, the score, the tie rule) are static inline functions of sample_math.h, compiled for host and
 * device alike. Everything here is pure, allocation-free and thread-safe (no global state).
 */
#ifndef DD_SAMPLE_H
#define DD_SAMPLE_H

#include "depthdec.h"
#include "sample_math.h" /* the scalar arithmetic shared with the device: Philox, u, g, order keys, score, ties */

#include <stdint.h>

/* Gumbel noise g_i of SPEC §3 point 3 for logit index i of (seed, frame, level):
 *   key = {lo32(seed), hi32(seed)}, ctr = {i >> 2, (uint32_t)level, lo32(frame), hi32(frame)},
 *   x = philox(ctr, key)[i & 3], u = (float)((x >> 8) | 1) * 0x1p-24f  (u in [2^-24, 1 - 2^-24], never 0 or 1),
 *   g = (float)(-log(-log((double)u))).
 * Always finite (|g| < 17). dd_noise_words and dd_gumbel_word of sample_math.h, as one call. */
float dd_gumbel(uint64_t seed, uint64_t frame, int level, uint32_t i);

/* The four noise values of indices 4*i4 .. 4*i4+3 from one Philox call: g[j] == dd_gumbel(seed, frame, level,
 * 4*i4 + j) bit for bit. g must hold 4 floats. */
void dd_gumbel_block(uint64_t seed, uint64_t frame, int level, uint32_t i4, float g[4]);

/* Order key of the K-th largest value of z[0..V) (1 <= K <= V; NaN counts as -inf), found exactly by radix select:
 * four passes of 8-bit histograms over the keys, recomputed from z each pass (no allocation, 1 KiB of stack). */
uint32_t dd_topk_key(const float *z, int V, int K);

/* dd_topk_key as a float: the K-th largest value of z (-0.0 comes back as +0.0, NaN-only inputs give -inf). */
float dd_topk_threshold(const float *z, int V, int K);

/* SPEC §3 sampling without argument checks. Requires z != NULL, V >= 1, T finite and >= 0, K >= 0.
 * Returns the code in [0, V), or -1 when no logit is finite. See sample.c for the exact rule on ties and
 * non-finite values. */
int32_t dd_sample_core(const float *z, int V, float T, int K, uint64_t seed, uint64_t frame, int level);

#endif
