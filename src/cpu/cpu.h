/* The fast CPU backend's internal interface: the per-instruction-set kernel table, the thread pool, and the
 * drivers that run the fused kernels of src/kernels.h over the pool.
 *
 * Layers, from the bottom:
 *   dd_cpu_kern    a small table of leaf kernels (one register-blocked dot tile, one row norm, one attention
 *                  row), one table per instruction set (cpu_kern_generic.c, cpu_kern_avx2.c, cpu_kern_avx512.c,
 *                  all three generated from the one template cpu_kern_impl.h). Chosen once at start from CPUID.
 *   dd_cpu_pool    a persistent pthread pool: dd_cpu_pool_run is one fork-join (the caller is worker 0). No
 *                  thread is created after dd_cpu_pool_create; a run allocates nothing.
 *   drivers        dd_cpu_linear_run / dd_cpu_attend_run (cpu_ops.c): the kernels.h contracts, split over the
 *                  pool's threads by output rows (linear) or by (stream, kv head) (attend), one join each.
 *   backend        cpu.c: the frame loop (dd_cpu_backend).
 *
 * Exactness: every output element is computed by the same sequence of float operations whatever the thread
 * count, the batch size or the stream's row in the batch (the tile kernels give each (row, output) pair its own
 * accumulator and walk K in one fixed order), so a stream's logits — not only its codes — are bit-identical
 * across batch sizes and thread counts for one instruction set. Different instruction sets round differently
 * (vector width, fused multiply-add); each stays within float32 accumulation error of the reference.
 */
#ifndef DD_CPU_H
#define DD_CPU_H

#include "kernels.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* ---- instruction sets ------------------------------------------------------------------------------------- */

typedef enum dd_cpu_isa { DD_CPU_GENERIC = 0, DD_CPU_AVX2 = 1, DD_CPU_AVX512 = 2, DD_CPU_NISA = 3 } dd_cpu_isa;

/* Leading dimension of a tile's accumulator block: acc[t * DD_CPU_ACC_LD + r]. */
#define DD_CPU_ACC_LD 8
#define DD_CPU_TR_MAX 8

typedef struct dd_cpu_kern {
    const char *name; /* "generic", "avx2", "avx512"; NULL when this build lacks the instruction set */
    int nr;           /* weight rows per dot tile (<= DD_CPU_ACC_LD) */
    int tr;           /* activation rows per dot tile, at most (<= DD_CPU_TR_MAX) */

    /* dot tile — acc[t * DD_CPU_ACC_LD + r] = sum_k x[t * ldx + k] * W[n0 + r, k]   for t < tr, r < nr
     *   x (tr, K) float32 rows with stride ldx; W any dd_weight type, dequantized in registers (MLX affine:
     *   w = fl(fl(scale * q) + bias), exactly as dd_weight_row_f32). 1 <= tr <= kern.tr, 1 <= nr <= kern.nr.
     *   Every (t, r) pair has its own accumulator and sees K in the same order for any tr, nr: the result of a
     *   pair does not depend on which tile it was computed in. Overwrites acc.
     *   pf_tiles > 0: while it runs, a full tile (nr == kern.nr) software-prefetches the bytes of the tile
     *   pf_tiles tiles further down W (rows n0 + nr*pf_tiles ..), at the rate it consumes its own (a hint only:
     *   prefetches never fault, so reading past the end of W is harmless). 0 = no prefetch. */
    void (*dot)(float *acc, const float *x, size_t ldx, int tr, const dd_weight *w, int64_t n0, int nr,
                int pf_tiles);

    /* row norm — out[0..K) = LayerNorm (norm == DD_NORM_LAYER, b may be NULL) or RMSNorm (DD_NORM_RMS) of
     *   x[0..K) with weight w: (x - mean) * rstd * w (+ b), rstd = 1/sqrt(var + eps) (RMS: mean taken as 0).
     *   Statistics are two-pass in float32 vector partial sums; out may not alias x. */
    void (*norm_row)(float *out, const float *x, int K, int norm, const float *w, const float *b, float eps);

    /* attention row — out[0..HD) = sum_{j < n} softmax_j(scale * q . k_j) v_j with k_j = kc + j * ld,
     *   v_j = vc + j * ld (1 <= n <= DD_MAX_LEVELS). Scores and the weighted sum in float32. Overwrites out. */
    void (*attend_row)(float *out, const float *q, const float *kc, const float *vc, size_t ld, int n, int HD,
                       float scale);

    /* activations in place over v[0..n): exact (erf-form) GELU 0.5 a (1 + erf(a / sqrt 2)), and SwiGLU
     *   g[i] = silu(g[i]) * u[i], silu(g) = g / (1 + exp(-g)). Vectorized float32 (erfc/exp approximations,
     *   error <= 2.2e-7 |a| for GELU and <= 2e-7 relative for SiLU; see cpu_kern_impl.h and test_kernels). */
    void (*gelu)(float *v, int n);
    void (*swiglu)(float *g, const float *u, int n);
} dd_cpu_kern;

extern const dd_cpu_kern dd_cpu_kern_generic, dd_cpu_kern_avx2, dd_cpu_kern_avx512;

/* 1 when the instruction set is compiled in and this CPU (and OS) supports it. */
int dd_cpu_isa_supported(dd_cpu_isa isa);
const char *dd_cpu_isa_name(dd_cpu_isa isa);
/* The table for `isa`, or NULL when unsupported here. */
const dd_cpu_kern *dd_cpu_kernels_for(dd_cpu_isa isa);
/* The table a decoder created now uses: $DD_CPU_ISA (generic|avx2|avx512) when it names a supported set, else the
 * widest supported one (from CPUID, through __builtin_cpu_supports). The variable is read at each call. */
const dd_cpu_kern *dd_cpu_kernels(void);

/* ---- thread pool ------------------------------------------------------------------------------------------ */

typedef struct dd_cpu_pool dd_cpu_pool;
typedef void (*dd_cpu_job)(void *ctx, int tid, int nth);

/* A pool of nthreads workers (>= 1; the caller of dd_cpu_pool_run is worker 0, so nthreads - 1 pthreads are
 * started here and live until dd_cpu_pool_free). Idle workers spin briefly, then sleep on a condition variable. */
dd_status dd_cpu_pool_create(dd_cpu_pool **out, int nthreads, dd_error *err);
void dd_cpu_pool_free(dd_cpu_pool *p); /* NULL is a no-op */
int dd_cpu_pool_threads(const dd_cpu_pool *p);
/* Run job(ctx, tid, nth) for tid = 0..nth-1 in parallel (tid 0 on the calling thread) and return when all are
 * done: one fork-join. Allocation-free. One caller at a time. */
void dd_cpu_pool_run(dd_cpu_pool *p, dd_cpu_job job, void *ctx);
/* Threads a decoder gets for `requested` (0 = one per online CPU this process may run on). */
int dd_cpu_default_threads(int requested);

/* ---- drivers (cpu_ops.c) ---------------------------------------------------------------------------------- */

/* One fused linear: the dd_linear_args contract of src/kernels.h (up to 3 weight segments concatenated along N, q/k/v
 * as three views in one pass) with this backend's kernels and scratch, plus:
 *   T may exceed 32 (rows go through the tiles in chunks of kern.tr, weights stay in cache across chunks);
 *   lda == 0 broadcasts one `add` row to every t (learned positions).
 * The norm prologue normalizes the T rows of x into the calling thread's scratch (scratch[tid], T * K floats,
 * L1/L2-resident), inside the kernel: each thread normalizes for itself, so there is no extra pass, buffer in
 * shared memory or barrier. norm == DD_NORM_NONE reads x in place. */

typedef struct dd_cpu_linear {
    dd_linear_args a;
    const dd_cpu_kern *kern;
    float *const *scratch; /* [threads] each >= T * K floats; only read when norm != DD_NORM_NONE */
} dd_cpu_linear;

void dd_cpu_linear_run(dd_cpu_pool *pool, const dd_cpu_linear *L);

/* Attention over a batch: the dd_attend_args contract of src/kernels.h, with RoPE from the float tables cos/sin
 * [positions][HD/2] (dd_cpu_rope_tables of the contract's inv_freq) when cos != NULL. Work is split over (stream,
 * kv head) units, each of which writes its kv head's new cache rows and then attends the query heads that read
 * them. */
typedef struct dd_cpu_attend {
    dd_attend_args a;
    const float *cos, *sin;
    const dd_cpu_kern *kern;
} dd_cpu_attend;

void dd_cpu_attend_run(dd_cpu_pool *pool, const dd_cpu_attend *A);

/* RoPE tables: cos/sin[p * (HD/2) + j] = (float)cos/sin(p * inv_freq[j]), p < npos: dd_rope_table's double
 * table rounded to float. Allocates a temporary (init and test paths only); DD_ENOMEM. */
dd_status dd_cpu_rope_tables(float *cos_t, float *sin_t, const double *inv_freq, int HD, int npos, dd_error *err);

/* ---- test entry points (they allocate: tests only) -------------------------------------------------------- */

/* Run the kernels.h contracts through the given instruction set and thread count (threads 0 = default). */
dd_status dd_cpu_linear_host(const dd_linear_args *a, int isa, int threads, dd_error *err);
dd_status dd_cpu_attend_host(const dd_attend_args *a, int isa, int threads, dd_error *err);
/* Make the cpu decoder d run the kernels of `isa` from now on (tests compare the instruction sets).
 * DD_EINVAL when d is not a cpu decoder, DD_EUNSUPPORTED when this CPU lacks `isa`. */
dd_status dd_cpu_decoder_use_isa(dd_decoder *d, dd_cpu_isa isa, dd_error *err);

#endif
