/* The fused kernel contracts shared by the fast backends (cpu, cuda). One contract, several implementations: the
 * reference semantics are written here and checked by tests/test_kernels.c against plain double-precision math
 * (the ref backend's numerics) for every backend that implements them.
 *
 * All activations are float32, row-major, T <= 32 rows per call per stream-batch row group (T counts rows of one
 * matrix-vector product: B streams x new positions). Weights are dd_weight views (f32 / f16 / bf16 / MLX q8 / q4),
 * dequantized in registers, never into a dequantized copy of a matrix.
 */
#ifndef DD_KERNELS_H
#define DD_KERNELS_H

#include "model/model.h"

enum { DD_NORM_NONE = 0, DD_NORM_LAYER = 1, DD_NORM_RMS = 2 };
enum { DD_ACT_NONE = 0, DD_ACT_GELU = 1, DD_ACT_SWIGLU = 2 };

/* linear — y (T, N) = epilogue( prologue(x) (T, K) @ W^T (K, N) ), W the rows of up to DD_LINEAR_SEGS weight segments
 *   concatenated along N (q, k and v as three views in one pass): segment i owns output columns
 *   [sum_{j<i} rows_j, + rows_i) and brings its own bias and, for SwiGLU, its paired up matrix and bias; all
 *   segments have K columns.
 *   prologue: norm == DD_NORM_LAYER: n = (x - mean) / sqrt(var + eps) * norm_w + norm_b (norm_b may be NULL)
 *             norm == DD_NORM_RMS:   n = x / sqrt(mean(x^2) + eps) * norm_w
 *             norm == DD_NORM_NONE:  n = x
 *             computed per row inside the kernel (no separate normalisation pass over x in memory).
 *   product:  a[t, j] = n[t, :] . W[j, :]  (+ bias[j] when bias != NULL)
 *   act:      DD_ACT_NONE   h = a
 *             DD_ACT_GELU   h = 0.5 a (1 + erf(a / sqrt 2))          (exact GELU)
 *             DD_ACT_SWIGLU h = silu(a) * (n[t, :] . W2[j, :] + bias2[j]) with W2 the paired "up" matrix (N, K)
 *   epilogue: y[t, j] = h + (residual ? residual[t, j] : 0) + (add ? add[t, j] : 0)
 * residual may alias y (in-place residual add); x must not alias y. ldx/ldy/ldr/lda are row strides in floats.
 * Shapes: any T in [1, 32] (fast paths may process more rows in chunks of 32), any N >= 1, K >= 1 with
 * K % group == 0 for quantized weights. Accumulation is float32 (or wider). Overwrites y. */
#define DD_LINEAR_SEGS 3
typedef struct dd_linear_seg {
    const dd_weight *w, *w2; /* w2: the paired "up" matrix of DD_ACT_SWIGLU, else NULL */
    const float *bias, *bias2;
} dd_linear_seg;

typedef struct dd_linear_args {
    float *y;
    int ldy;
    const float *x;
    int ldx;
    int T;
    int nseg; /* 1 .. DD_LINEAR_SEGS */
    dd_linear_seg seg[DD_LINEAR_SEGS];
    int norm;
    const float *norm_w, *norm_b;
    float eps;
    int act;
    const float *residual;
    int ldr;
    const float *add;
    int lda;
} dd_linear_args;

/* attend — for each of B streams, append its P new positions' K/V to the stream's frame cache and attend causally.
 *   qkv (B P, (H + 2 KVH) HD), row stride ldq: row s P + t is stream s's position p0 + t; q heads, then k heads,
 *         then v heads
 *   rope: when inv_freq != NULL, q and k heads are rotated HF "rotate half" style (pairs j, j + HD/2) by angle
 *         p * inv_freq[j] before use (k is stored rotated).
 *   kcache, vcache: stream s's cache at + s ldc, (Q, KVH HD) rows: positions 0 .. p0-1 already filled; rows
 *         p0 .. p0+P-1 are written here.
 *   out (B P, H HD), row stride ldo: out[r, h] = sum_{j <= p} softmax_j(q[r,h] . k[j,kh] / sqrt HD) v[j,kh],
 *         p the row's position, kh = h / (H/KVH)
 * Keys per query: at most 32 (the frame's positions). Overwrites out. */
typedef struct dd_attend_args {
    float *out;
    int ldo;
    float *kcache, *vcache;
    size_t ldc;
    const float *qkv;
    int ldq;
    int B, P, p0;
    int H, KVH, HD;
    const double *inv_freq;
    const float *q_norm, *k_norm; /* Qwen3: when not NULL, each q / k head is RMS-normed over HD (x rsqrt(mean x^2 +
                                   * qk_eps) w, w the HD weights) before RoPE */
    float qk_eps;
} dd_attend_args;

/* sample + gather — the SPEC §3 rule (src/sample.h, shared by every backend) applied to a row of logits, then the
 * drawn code's embedding row gathered as the next pass's input (done by the backend with the model's embed view;
 * CSM tables also go through in()). Contract: code = dd_sample_core(logits, V, T, K, seed, frame, level). */

/* Each backend's entry points that run these contracts once on host buffers, for the tests, are hooks of its row in
 * the backend registry (registry.h: dd_backend_test). */

#endif
