/* CUDA backend: what the host side and the device side share — the device weight layout, the op program the
 * persistent frame kernel interprets, the scratch it needs, and the launch entry point.
 *
 * Structure of the backend (src/cuda/):
 *   cu_common.cuh  this file: types and constants, host/device helpers
 *   cu_mma.cuh     device: bf16 split of activations, weight fragments (f32/f16/bf16/q8/q4), mma.sync
 *   cu_linear.cuh  device: the fused norm-prologue linear (small-batch and large-batch schedules)
 *   cu_attend.cuh  device: KV append + causal attention (MHA/GQA/RoPE)
 *   cu_sample.cuh  device: the block-parallel sampler (exact top-k by radix select, block-wide Gumbel-max; its
 *                  scalar arithmetic is src/sample_math.h, shared with the host), embedding gather
 *   frame.cu       the persistent frame kernel (op interpreter + grid barrier) and its launcher
 *   upload.cu      dd_weight views -> device fragment layout (kept in the stored type)
 *   backend.cu     the dd_cuda_backend vtable: decoder state, frame programs, decode/score
 *   host_entry.cu  dd_cuda_*_host test entry points, dd_cuda_copy_bandwidth, device presence
 *
 * Numerics contract of every linear (it is what makes a stream's results independent of the batch size):
 *   activations n (float32, after the norm prologue) are split n = hi + lo with hi = bf16(n), lo = bf16(n - hi)
 *   (|n - hi - lo| < 2^-17 |n|, about float32 accumulation error), weights enter the tensor cores exactly
 *   (bf16 as is; f16 as two bf16 terms, exact; f32 and small-group quantized as three bf16 terms; MLX q8/q4 with
 *   group % 16 == 0 as the integer q, exact, with the group's scale and bias applied in float32 after each
 *   group: s * sum(q n) + b * sum(n)). For output (row j, token t) the products are accumulated by
 *   mma.sync.m16n8k16 (fp32 accumulate) k-tile by k-tile in a fixed term order into a partial p_c per chunk of
 *   CU_CKT k-tiles (starting from 0); the chunks form slabs of CU_SLC chunks (1024 columns; the last may be
 *   shorter), slab i's sum s_i = ((0 + p_8i) + p_8i+1) + ... in chunk order, and acc = (s_0 + s_1) + s_2 ... in
 *   slab order (K <= 1024: one slab, acc = ((0 + p_0) + p_1) + ...). Slabs let a schedule that splits K keep one
 *   sum a slab instead of one a chunk (CUDA_V2.md: "split-K in fixed slabs"). Every schedule (small or large
 *   batch, any grid, any executor) computes exactly this, and an MMA's output column depends only on its own
 *   input column, so each stream's logits are bit-identical whatever the batch size or its row in the batch.
 */
#ifndef DD_CU_COMMON_CUH
#define DD_CU_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* host/device functions (SPEC §3's scalar arithmetic): included here, outside the extern "C" block, so that
 * sample.h's include of it below finds it done */
#include "sample_math.h"

extern "C" {
#include "backend.h"
#include "depthdec.h"
#include "kernels.h"
#include "model/model.h"
#include "sample.h"
#include "util.h"
}

#ifndef CU_THREADS
#define CU_THREADS 512 /* threads per block of the frame kernel, one block per SM */
#endif
#define CU_WARPS (CU_THREADS / 32)
#define CU_CKT 8 /* k-tiles (of 16 columns) per accumulation chunk */
#define CU_SLC 8 /* chunks per slab (the contract above) */

/* shared memory of the frame kernel (dynamic), in bytes */
#define CU_ACT_BYTES (144 * 1024) /* staged activations (small schedule) / B tiles (large) / attention, sampler */
#define CU_PART_SLOTS 64          /* chunk partials of one round, 512 B each */
#define CU_ACC_SLOTS 32           /* running accumulators (unit, half), 512 B each */
#define CU_ASUM_FLOATS 2048       /* group sums of the staged activations (quantized weights) */
#define CU_MISC_BYTES 10240 /* flags, sampler scratch, norm statistics, two sets of three op slots */
#define CU_SMEM_BYTES                                                                                              \
    (CU_ACT_BYTES + CU_PART_SLOTS * 512 + CU_ACC_SLOTS * 512 + CU_ASUM_FLOATS * 4 + CU_MISC_BYTES)

#define CU_SMALL_T 8 /* at most this many tokens (rows of x) per linear for the small-batch schedule */
#define CU_BIG_UNITS (CU_WARPS / 4) /* large schedule: units (m-tiles or gate/up pairs) per block tile */
#define CU_BIG_NT 16   /* large schedule: n-tiles (8 tokens) per block tile */

/* how weights enter the tensor cores */
enum { WM_BF16 = 0, WM_F16 = 1, WM_F32 = 2, WM_QINT = 3, WM_QDEQ = 4 };

/* A weight matrix on the device in m16n8k16 A-fragment order: for m-tile mt (16 rows) and k-tile kt (16 columns)
 * one tile of 32 lanes x 8 elements, lane = 4 g + c holding rows (g, g+8) x columns (2c, 2c+1, 2c+8, 2c+9) in the
 * order (g,2c) (g,2c+1) (g+8,2c) (g+8,2c+1) (g,2c+8) (g,2c+9) (g+8,2c+8) (g+8,2c+9); tiles m-tile major. Elements
 * keep the stored type (f32 4 B, f16/bf16 2 B, q8 1 B, q4 one nibble, low nibble first). Rows and columns past
 * the matrix are zero. Quantized: scales/biases per (mt, group, row of 16) as (s, b) pairs in the stored type.
 * pair: SwiGLU gate and up matrices interleaved by m-tile (device m-tile 2i = gate tile i, 2i+1 = up tile i). */
typedef struct cu_mat {
    int type;       /* dd_dtype */
    int wm;         /* WM_* */
    int N, K;       /* rows (of one half when pair), columns */
    int MT, KT;     /* device m-tiles (both halves when pair), k-tiles */
    int pair;
    int group, NG, sbtype;
    int tile_bytes; /* per (mt, kt) */
    int lane_bytes; /* tile_bytes / 32 */
    int sb_bytes;   /* bytes of one (s, b) pair */
    const uint8_t *frag;
    const uint8_t *sb;
} cu_mat;

/* A row-major table on the device for gathers (embeddings, hidden copies): dense rows or MLX rows. */
typedef struct cu_raw {
    int type, rows, cols;
    const uint8_t *data;
    size_t pitch; /* bytes per row of data */
    const uint8_t *scales, *biases;
    int sbtype, group;
    size_t sb_pitch;
} cu_raw;

enum { CU_OP_LINEAR = 1, CU_OP_ATTEND = 2, CU_OP_SAMPLE = 3 };

typedef struct cu_linear {
    cu_mat w;
    const float *bias, *bias2;
    int norm;
    const float *norm_w, *norm_b;
    float eps;
    int act;
    const float *x;
    int ldx;
    float *y;
    int ldy;
    const float *res;
    int ldr;
    const float *add;
    int lda;
    int tmul; /* T = n * tmul */
    int fuse; /* index of the ATTEND or SAMPLE op this linear runs inline on the small schedule, or -1 */
} cu_linear;

typedef struct cu_attend {
    const float *qkv; /* [T][(H + 2 KVH) HD], token t = s P + i */
    float *out;       /* [T][H HD] */
    float *kc, *vc;   /* stream s, position p: kc + s cstride + p (KVH HD) */
    size_t cstride;
    int P, p0, H, KVH, HD;
    const double *rope; /* [Qmax][HD/2][2] cos, sin (double), or NULL */
    const float *qn, *kn; /* Qwen3: per-head RMSNorm weights [HD] of q and k (before RoPE), or NULL */
    float qk_eps;
} cu_attend;

typedef struct cu_sample {
    const float *logits; /* stream s: logits + s ldl, V values */
    int ldl, V, level;
    int forced;          /* 1: the code is given (code_in) or is the stream index (code_is_stream): no sampling */
    const int32_t *code_in;
    int ldi;
    int code_is_stream;
    int32_t *code_out; /* written when not NULL: code_out[s ldo] */
    int ldo;
    int gather;        /* 1: x_next[s] = table row (code + row_off) (+ pos) */
    cu_raw table;
    int row_off;
    float *xn;
    int ldxn;
    const float *pos; /* [cols] or NULL */
} cu_sample;

typedef struct cu_op {
    int type;
    int bar_after; /* grid barrier after the op (when it ran) */
    cu_linear lin;
    cu_attend att;
    cu_sample smp;
} cu_op;

/* errors reported by the kernel: both words start as CU_ERR_CLEAR (one byte memset); err[0] becomes
 * CU_ERR_TIMEOUT when a grid barrier timed out, err[1] = min over (row << 8 | level) with no finite logit */
#define CU_ERR_CLEAR 0x7F7F7F7F
#define CU_ERR_TIMEOUT 1

typedef struct cu_params {
    const cu_op *ops;
    int nops;
    int n;
    float temp;
    int topk;
    const uint64_t *seeds, *frames; /* [n] or NULL (all 0) */
    unsigned long long *bar;        /* grid barrier counter (the launch's base is read from it on the device) */
    int *err;      /* [2] */
    uint4 *act;    /* large schedule: activations in B-fragment order */
    float *asum;   /* large schedule: group sums */
    unsigned *cnt; /* completion counters of fused ops (reset to 0 by their last user) */
    int force_big; /* test hook: every linear on the large schedule */
    unsigned long long timeout_ns; /* a grid barrier gives up after this long */
} cu_params;

/* the global nanosecond timer (grid-barrier and wait timeouts) */
__device__ __forceinline__ unsigned long long cu_gtimer(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* ---- host/device helpers: the schedule decisions both sides must agree on ------------------------------- */

__host__ __device__ static inline int cu_lin_T(const cu_linear *L, int n) { return n * L->tmul; }
__host__ __device__ static inline int cu_act_stride(int KT) { return ((KT * 16 + 31) / 32) * 32 + 8; }
__host__ __device__ static inline int cu_lin_small(const cu_linear *L, int T, int force_big) {
    if (force_big || T > CU_SMALL_T) return 0;
    if ((size_t)T * cu_act_stride(L->w.KT) * 4 > CU_ACT_BYTES) return 0;
    if (L->w.wm == WM_QINT && T * L->w.NG > CU_ASUM_FLOATS) return 0;
    return 1;
}
/* fused attention needs head boundaries on m-tile boundaries */
__host__ __device__ static inline int cu_can_fuse_attend(const cu_attend *A) { return A->HD % 16 == 0; }

/* ---- host side ------------------------------------------------------------------------------------------- */

/* Device scratch of one decoder (or one test call). */
typedef struct cu_scratch {
    unsigned long long *bar;
    int *err;
    uint4 *act;
    size_t act_bytes;
    float *asum;
    size_t asum_floats;
    unsigned *cnt;
    int ncnt;
    int grid;
    int own_err;
    unsigned long long timeout_ns; /* a grid barrier that waits longer gives up (DD_CUDA_TIMEOUT_S, read at init) */
} cu_scratch;

int cu_grid_size(void); /* blocks of the frame kernel (SM count), 0 when no device */

/* Allocate scratch for programs with at most max_tokens tokens per linear and K <= max_k. */
dd_status cu_scratch_init(cu_scratch *s, int max_tokens, int max_k, int max_groups, int ncnt, dd_error *err);
/* err_dev: the 2 error words live there (the caller's buffer) instead of in the scratch */
dd_status cu_scratch_init2(cu_scratch *s, int max_tokens, int max_k, int max_groups, int *err_dev, dd_error *err);
void cu_scratch_free(cu_scratch *s);

/* Run ops (device copy d_ops) for n streams: resets the error flags and enqueues one launch of the frame kernel on
 * `stream` (no host synchronisation: capturable); the caller synchronizes and then calls cu_check_errors. */
dd_status cu_run_program(cu_scratch *s, const cu_op *d_ops, int nops, int n, float temp,
                         int topk, const uint64_t *d_seeds, const uint64_t *d_frames, int force_big,
                         cudaStream_t stream, dd_error *err);
/* The same launch without the reset: a run of ops of a frame whose error flags were reset at its start (the
 * throughput executor runs the ops between its linears so, tput.cu). */
dd_status cu_launch_ops(cu_scratch *s, const cu_op *d_ops, int nops, int n, float temp, int topk,
                        const uint64_t *d_seeds, const uint64_t *d_frames, int force_big, cudaStream_t stream,
                        dd_error *err);
/* After the stream has synchronized: DD_OK, or the error the kernel flagged (timeout; no finite logit). */
dd_status cu_check_errors(cu_scratch *s, dd_error *err);
/* the same from the two error words already copied to the host */
dd_status cu_check_error_words(cu_scratch *s, const int e[2], dd_error *err);

/* upload.cu: a matrix from row ranges of views (concatenated), or a gate/up pair; a raw table */
typedef struct cu_rows {
    const dd_weight *w;
    int64_t r0, n;
} cu_rows;
dd_status cu_mat_upload(cu_mat *out, const cu_rows *src, int nsrc, int pair, void ***allocs, int *nallocs,
                        dd_error *err);
/* the descriptor cu_mat_upload fills, without frag and sb (no upload; dev/cuda/ltplan_check uses it) */
dd_status cu_mat_layout(cu_mat *out, const cu_rows *src, int nsrc, int pair, dd_error *err);
dd_status cu_raw_upload(cu_raw *out, const dd_weight *w, int64_t r0, int64_t nrows, void ***allocs, int *nallocs,
                        dd_error *err);
/* cudaMalloc + copy of n floats (NULL src -> NULL) */
dd_status cu_upload_f32(float **out, const float *src, size_t n, void ***allocs, int *nallocs, dd_error *err);
dd_status cu_alloc(void **out, size_t bytes, void ***allocs, int *nallocs, dd_error *err);
void cu_free_all(void **allocs, int nallocs);

#define CU_TRY(call, err, what)                                                                                    \
    do {                                                                                                           \
        cudaError_t ce_ = (call);                                                                                  \
        if (ce_ != cudaSuccess)                                                                                    \
            return dd_fail(err, ce_ == cudaErrorMemoryAllocation ? DD_ENOMEM : DD_EUNSUPPORTED,                    \
                           "backend cuda: %s: %s", what, cudaGetErrorString(ce_));                                 \
    } while (0)

/* a + b by components (the slab contract's sums of float4 accumulators) */
__device__ __forceinline__ float4 cu_add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* Pin values in registers where they are computed. The softmax weights of the attention kernels, w0 = e0 / sum and
 * w1 = e1 / sum, are read in the value loop as sel(j < 32, w0, w1); nvcc (13.0, sm_90) rewrote that as
 * sel(j < 32, e0, e1) / sum inside the loop: an IEEE division with its slow-path branch per key and lane instead
 * of two per query (seen in the SASS of every attention kernel). An empty asm with the values as in/out operands
 * makes them opaque to that rewrite: the same bits, computed once. */
__device__ __forceinline__ void cu_pin(float &a, float &b) { asm volatile("" : "+f"(a), "+f"(b)); }
/* A key's softmax weight e / sum (sum >= 1, the exps' sum): a zero e (keys past the query's, an underflowed exp)
 * gives +0 without the division, whose zero numerator takes the IEEE division's slow path (a call to far-away code
 * for every key a lane holds past the query's); the same bits either way. */
__device__ __forceinline__ float cu_soft_w(float e, float sum) { return e != 0.0f ? e / sum : 0.0f; }
/* A query's softmax over nk keys held two a lane (sc[0]: key lane, sc[1]: key lane + 32; -inf past nk): the max by
 * an xor tree, e = exp(s - max) (0 past nk), their sum by an xor tree, the weights e / sum (cu_soft_w), pinned
 * (cu_pin). Every executor's attention takes its weights from here. ROLLED keeps the two trees rolled (lat.cu, for
 * its code size). */
template <bool ROLLED = false>
__device__ __forceinline__ void cu_softmax2(const float (&sc)[2], int nk, int lane, float &w0, float &w1) {
    float m = fmaxf(sc[0], sc[1]);
#pragma unroll(ROLLED ? 1 : 5)
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float e0 = lane < nk ? expf(sc[0] - m) : 0.0f, e1 = lane + 32 < nk ? expf(sc[1] - m) : 0.0f;
    float sum = e0 + e1;
#pragma unroll(ROLLED ? 1 : 5)
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    w0 = cu_soft_w(e0, sum), w1 = cu_soft_w(e1, sum);
    cu_pin(w0, w1);
}

/* ---- mbarrier primitives of the shared-memory pipelines (lat.cu's weight ring, tput.cu's tile stages) ------ */
__device__ __forceinline__ uint32_t cu_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cu_mbar_init(unsigned long long *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(cu_smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void cu_mbar_arrive(unsigned long long *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(cu_smem_u32(b)) : "memory");
}
__device__ __forceinline__ void cu_mbar_expect(unsigned long long *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(cu_smem_u32(b)), "r"(bytes)
                 : "memory");
}
/* one try_wait on the barrier at shared address a: 1 once the phase of `parity` completed (a failed try may have
 * suspended the thread a while); the callers' loops decide when to give up */
__device__ __forceinline__ uint32_t cu_mbar_try(uint32_t a, unsigned parity) {
    uint32_t ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(a), "r"(parity)
                 : "memory");
    return ok;
}

#endif
