/* The frame kernel: one persistent cooperative launch runs a whole program of ops (a frame's 31 passes, or a
 * single op for the test entry points), one block per SM, separated by grid barriers. No host synchronisation or
 * copy happens between ops; the host sees only the inputs it uploads and the codes/logits it reads back.
 *
 * Why persistent: a frame of the seed's dims is ~680 dependent steps. As separate kernels in a CUDA graph each
 * would cost ~1 us of launch latency, and nothing could run ahead. Here a grid barrier costs about as much (~2 us),
 * but a block prefetches (L2, bulk prefetch) the weights of the next linear before it even starts the current one,
 * so HBM keeps streaming while the blocks wait at barriers. Attention and sampling are ops of their own over the
 * whole grid; an older variant (cu_op.lin.fuse, no longer selected by backend.cu) ran them in the last block that completes a kv group
 * of the qkv linear / the head, saving a barrier per layer pass and per level but serialising them in one block
 * (slower).
 *
 * Measured on the H200 (docs/cuda_results.md): correct and batch-invariant, but latency-bound — 10.85 ms per
 * GPT-dims frame at batch 1 against a 0.77 ms HBM floor: each of the 684 barrier-separated ops costs ~16 us (a
 * chain of dependent L2 round trips inside the op, plus ~2 us of barrier). That document lists what to change
 * next.
 *
 * Grid barrier: a 64-bit arrival counter that only grows; thread 0 of each block adds 1 (release); the last
 * arriver publishes the target on a second cache line that the others poll (acquire); a wait gives up after
 * DD_CUDA_TIMEOUT_S (default 10 s) and flags CU_ERR_TIMEOUT so a bug cannot hang the device. The launch's base
 * count is read on the device, not passed by the host: every block reads the published line at its start, which
 * then still holds the previous launch's last target (= the counter: no block of this launch can publish before
 * all have arrived once), so a launch captured in a CUDA graph replays correctly (docs/device_api.md).
 */
#include "cu_attend.cuh"
#include "cu_linear.cuh"
#include "cu_sample.cuh"

#include <stdio.h>
#include <stdlib.h>

static_assert(sizeof(cu_op) <= 1024 && sizeof(cu_op) % 4 == 0, "cu_op must fit its shared-memory slot");

/* misc shared memory layout */
#define MISC_FLAG 0
#define MISC_LAST 4
#define MISC_HIST 64
#define MISC_SEL 1088
#define MISC_RV 1104
#define MISC_RI 1168
#define MISC_GFLAG 1280
#define MISC_HIST2 8192 /* the sampler's second count array, then its key list */
#define MISC_LIST 9216
#define MISC_OPS 2048 /* two sets of three 1 KB op slots: ops i, i+1, i+2 of the running op; the next set */
#define CNT_HEAD 256
static_assert(MISC_OPS + 6 * 1024 <= MISC_HIST2 && MISC_LIST + 128 <= CU_MISC_BYTES, "op slots, sampler scratch");

__device__ __forceinline__ unsigned long long cu_ld_acquire(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* The grid barrier in two halves, so a block can do useful loads while it waits: arrive (after every thread of
 * the block is done), then wait. wait returns 1 when the kernel must stop (a barrier timed out somewhere).
 * Arrivals count on one cache line; the last arriver (it sees the count reach the target) publishes the target
 * on another line, where the blocks poll — so 132 pollers never contend with the arrivals' atomics.
 * Release/acquire at gpu scope order the block's writes (made visible to thread 0 by bar.sync) before the arrival,
 * and everyone's writes before the reads after the wait; no full fences needed. */
#define CU_BAR_FLAG 16 /* u64 index of the published target: 128 bytes past the counter */
__shared__ unsigned long long cu_bar_base; /* the counter at launch start: read (and used) by thread 0 only */
__device__ __forceinline__ void cu_bar_arrive(const cu_params &P, int k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long target = cu_bar_base + (unsigned long long)(k + 1) * gridDim.x, old;
        asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(old) : "l"(P.bar) : "memory");
        if (old + 1 == target)
            asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(P.bar + CU_BAR_FLAG), "l"(target) : "memory");
    }
}
__device__ int cu_bar_wait(const cu_params &P, int &k, int *sflag) {
    if (threadIdx.x == 0) {
        unsigned long long target = cu_bar_base + (unsigned long long)(k + 1) * gridDim.x;
        int ab = 0;
        unsigned spin = 0;
        unsigned long long t0 = 0;
        while (cu_ld_acquire(P.bar + CU_BAR_FLAG) < target) {
            if ((++spin & 1023u) == 0) {
                if (t0 == 0) t0 = cu_gtimer();
                if (*(volatile int *)&P.err[0] != CU_ERR_CLEAR) {
                    ab = 1;
                    break;
                }
                if (cu_gtimer() - t0 > P.timeout_ns) {
                    atomicExch(&P.err[0], CU_ERR_TIMEOUT);
                    ab = 1;
                    break;
                }
            }
        }
        *sflag = ab;
    }
    k++;
    __syncthreads();
    return *sflag;
}
__device__ int cu_grid_barrier(const cu_params &P, int &k, int *sflag) {
    cu_bar_arrive(P, k);
    return cu_bar_wait(P, k, sflag);
}

/* ---- dispatch on the weight type --------------------------------------------------------------------------- */

__device__ int cu_run_small(const cu_linear &L, int T, const cu_smem &sm) {
    switch (L.w.wm) {
    case WM_BF16: return cu_linear_small<DD_BF16, WM_BF16>(L, T, sm);
    case WM_F16: return cu_linear_small<DD_F16, WM_F16>(L, T, sm);
    case WM_F32: return cu_linear_small<DD_F32, WM_F32>(L, T, sm);
    case WM_QINT:
        return L.w.type == DD_Q8 ? cu_linear_small<DD_Q8, WM_QINT>(L, T, sm)
                                 : cu_linear_small<DD_Q4, WM_QINT>(L, T, sm);
    default:
        return L.w.type == DD_Q8 ? cu_linear_small<DD_Q8, WM_QDEQ>(L, T, sm)
                                 : cu_linear_small<DD_Q4, WM_QDEQ>(L, T, sm);
    }
}

template <int PAIR>
__device__ void cu_run_gemm(const cu_linear &L, int T, const cu_params &P, const cu_smem &sm) {
    switch (L.w.wm) {
    case WM_BF16: cu_gemm_big<DD_BF16, WM_BF16, PAIR>(L, T, P, sm); break;
    case WM_F16: cu_gemm_big<DD_F16, WM_F16, PAIR>(L, T, P, sm); break;
    case WM_F32: cu_gemm_big<DD_F32, WM_F32, PAIR>(L, T, P, sm); break;
    case WM_QINT:
        if (L.w.type == DD_Q8) cu_gemm_big<DD_Q8, WM_QINT, PAIR>(L, T, P, sm);
        else cu_gemm_big<DD_Q4, WM_QINT, PAIR>(L, T, P, sm);
        break;
    default:
        if (L.w.type == DD_Q8) cu_gemm_big<DD_Q8, WM_QDEQ, PAIR>(L, T, P, sm);
        else cu_gemm_big<DD_Q4, WM_QDEQ, PAIR>(L, T, P, sm);
        break;
    }
}

/* number of m-tiles of [u0, u1) inside [a, b) */
__device__ __forceinline__ unsigned cu_atom_add_acqrel(unsigned *p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ int cu_overlap(int u0, int u1, int a, int b) {
    int lo = max(u0, a), hi = min(u1, b);
    return hi > lo ? hi - lo : 0;
}

/* attention fused into the qkv linear: the block completing kv group g's last m-tile runs group g */
__device__ void cu_fused_attend(const cu_params &P, const cu_linear &L, const cu_attend &A, const cu_smem &sm) {
    int u0, u1;
    cu_units(L.w.MT, u0, u1);
    if (u0 >= u1) return;
    uint8_t *gflag = sm.misc + MISC_GFLAG;
    const int h16 = A.HD / 16, Gq = A.H / A.KVH, total = (Gq + 2) * h16;
    __syncthreads(); /* the block's qkv rows are written (ordered before thread 0's release by bar.sync) */
    if (threadIdx.x == 0) {
        for (int g = 0; g < A.KVH; g++) {
            int c = cu_overlap(u0, u1, g * Gq * h16, (g + 1) * Gq * h16) +
                    cu_overlap(u0, u1, (A.H + g) * h16, (A.H + g + 1) * h16) +
                    cu_overlap(u0, u1, (A.H + A.KVH + g) * h16, (A.H + A.KVH + g + 1) * h16);
            int last = 0;
            if (c) last = cu_atom_add_acqrel(&P.cnt[g], (unsigned)c) + (unsigned)c == (unsigned)total;
            gflag[g] = (uint8_t)last;
        }
    }
    __syncthreads();
    for (int g = 0; g < A.KVH; g++) {
        if (!gflag[g]) continue;
        cu_attend_group_block(A, P.n, g, (float *)sm.act);
        if (threadIdx.x == 0) P.cnt[g] = 0;
        __syncthreads();
    }
}

/* sampling fused into the head linear: the block completing the last m-tile samples every stream */
__device__ void cu_fused_sample(const cu_params &P, const cu_linear &L, const cu_sample &S, int nu,
                                const cu_smem &sm, const cu_samp_smem &SS) {
    if (nu == 0) return;
    int *slast = (int *)(sm.misc + MISC_LAST);
    __syncthreads();
    if (threadIdx.x == 0) *slast = cu_atom_add_acqrel(&P.cnt[CNT_HEAD], (unsigned)nu) + (unsigned)nu == (unsigned)L.w.MT;
    __syncthreads();
    if (!*slast) return;
    for (int s = 0; s < P.n; s++) cu_sample_stream(S, P, s, (float *)sm.act, SS);
    if (threadIdx.x == 0) P.cnt[CNT_HEAD] = 0;
    __syncthreads();
}

/* ops i, i+1, i+2 (those that exist) into three 1 KB slots; no synchronisation here */
__device__ __forceinline__ void cu_load_ops(uint8_t *slots, const cu_params &P, int i) {
    const int n = min(3, P.nops - i), words = (int)(sizeof(cu_op) / 4);
    for (int w = threadIdx.x; w < n * words; w += CU_THREADS) {
        int q = w / words, r = w - q * words;
        ((int *)(slots + q * 1024))[r] = ((const int *)&P.ops[i + q])[r];
    }
}

extern "C" __global__ void __launch_bounds__(CU_THREADS, 1) cu_frame_kernel(cu_params P) {
    extern __shared__ __align__(16) uint8_t smem[];
    cu_smem sm;
    sm.act = (uint32_t *)smem;
    sm.part = (float4 *)(smem + CU_ACT_BYTES);
    sm.acc = sm.part + CU_PART_SLOTS * 32;
    sm.asum = (float *)(sm.acc + CU_ACC_SLOTS * 32);
    sm.misc = (uint8_t *)(sm.asum + CU_ASUM_FLOATS);
    int *sflag = (int *)(sm.misc + MISC_FLAG);
    cu_samp_smem SS = {(unsigned *)(sm.misc + MISC_HIST), (int *)(sm.misc + MISC_SEL), (float *)(sm.misc + MISC_RV),
                       (int *)(sm.misc + MISC_RI), (unsigned *)(sm.misc + MISC_HIST2), (unsigned *)(sm.misc + MISC_LIST)};
    uint8_t *sets[2] = {sm.misc + MISC_OPS, sm.misc + MISC_OPS + 3 * 1024};
    int bk = 0, cur = 0;
    if (P.nops < 1) return;
    if (threadIdx.x == 0) cu_bar_base = cu_ld_acquire(P.bar + CU_BAR_FLAG);
    cu_load_ops(sets[0], P, 0);
    __syncthreads();
    {
        const cu_op *o0 = (const cu_op *)sets[0];
        if (o0->type == CU_OP_LINEAR) cu_prefetch_linear(o0->lin, cu_lin_T(&o0->lin, P.n), P.force_big);
    }
    int i = 0;
    while (i < P.nops) {
        const cu_op *op = (const cu_op *)sets[cur];
        const cu_op *o1 = i + 1 < P.nops ? (const cu_op *)(sets[cur] + 1024) : NULL;
        const cu_op *o2 = i + 2 < P.nops ? (const cu_op *)(sets[cur] + 2048) : NULL;
        int next = i + 1, bar = op->bar_after;
        if (op->type == CU_OP_LINEAR) {
            const cu_linear &L = op->lin;
            const int T = cu_lin_T(&L, P.n);
            /* the weights of the next linear go to L2 while this one runs */
            const cu_op *nl = o1 && o1->type == CU_OP_LINEAR ? o1 : o2 && o2->type == CU_OP_LINEAR ? o2 : NULL;
            if (nl) cu_prefetch_linear(nl->lin, cu_lin_T(&nl->lin, P.n), P.force_big);
            if (cu_lin_small(&L, T, P.force_big)) {
                int nu = cu_run_small(L, T, sm);
                int fused = L.fuse == i + 1 && o1 && (o1->type != CU_OP_ATTEND || cu_can_fuse_attend(&o1->att));
                if (fused) {
                    if (o1->type == CU_OP_ATTEND) cu_fused_attend(P, L, o1->att, sm);
                    else cu_fused_sample(P, L, o1->smp, nu, sm, SS);
                    next = i + 2;
                }
            } else {
                if (L.w.wm == WM_QINT) cu_stage_big<WM_QINT>(L, T, P);
                else cu_stage_big<WM_BF16>(L, T, P);
                if (cu_grid_barrier(P, bk, sflag)) return;
                if (L.w.pair) cu_run_gemm<1>(L, T, P, sm);
                else cu_run_gemm<0>(L, T, P, sm);
                bar = 1;
            }
        } else if (op->type == CU_OP_ATTEND) {
            if (cu_attend_fast_ok(&op->att)) cu_attend_op_fast(op->att, P.n, (float *)sm.act);
            else cu_attend_op(op->att, P.n, (float *)sm.act);
            __syncthreads();
        } else if (op->type == CU_OP_SAMPLE) {
            for (int s = blockIdx.x; s < P.n; s += gridDim.x) cu_sample_stream(op->smp, P, s, (float *)sm.act, SS);
        }
        /* the next ops' descriptors load while this block waits at the barrier */
        if (bar) {
            cu_bar_arrive(P, bk);
            if (next < P.nops) cu_load_ops(sets[cur ^ 1], P, next);
            if (cu_bar_wait(P, bk, sflag)) return;
        } else {
            __syncthreads();
            if (next < P.nops) cu_load_ops(sets[cur ^ 1], P, next);
            __syncthreads();
        }
        cur ^= 1;
        i = next;
    }
}

/* ---- host: launch and scratch ------------------------------------------------------------------------------ */

int cu_grid_size(void) {
    static int grid = -1;
    if (grid >= 0) return grid;
    int dev = 0, sms = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) || !coop) {
        cudaGetLastError();
        return grid = 0;
    }
    if (cudaFuncSetAttribute(cu_frame_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, CU_SMEM_BYTES) !=
        cudaSuccess) {
        cudaGetLastError();
        return grid = 0;
    }
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, cu_frame_kernel, CU_THREADS, CU_SMEM_BYTES) !=
            cudaSuccess ||
        per < 1) {
        cudaGetLastError();
        return grid = 0;
    }
    grid = sms;
    return grid;
}

dd_status cu_scratch_init(cu_scratch *s, int max_tokens, int max_k, int max_groups, int ncnt, dd_error *err) {
    (void)ncnt;
    return cu_scratch_init2(s, max_tokens, max_k, max_groups, NULL, err);
}

dd_status cu_scratch_init2(cu_scratch *s, int max_tokens, int max_k, int max_groups, int *err_dev, dd_error *err) {
    memset(s, 0, sizeof *s);
    s->grid = cu_grid_size();
    if (!s->grid) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: the device cannot run the frame kernel");
    { /* DD_CUDA_TIMEOUT_S: for slow instrumented runs (compute-sanitizer); default 10 s */
        const char *t = getenv("DD_CUDA_TIMEOUT_S");
        const double sec = t ? atof(t) : 0;
        s->timeout_ns = (unsigned long long)((sec > 0 ? sec : 10.0) * 1e9);
    }
    size_t nt = ((size_t)max_tokens + 7) / 8, kt = ((size_t)max_k + 15) / 16;
    s->act_bytes = nt * kt * 32 * sizeof(uint4);
    s->asum_floats = (size_t)max_tokens * (max_groups > 0 ? max_groups : 1);
    s->ncnt = CNT_HEAD + 1;
    CU_TRY(cudaMalloc((void **)&s->bar, 256), err, "scratch"); /* counter, published target 128 B apart */
    if (err_dev) {
        s->err = err_dev;
    } else {
        CU_TRY(cudaMalloc((void **)&s->err, 8), err, "scratch");
        s->own_err = 1;
    }
    CU_TRY(cudaMalloc((void **)&s->act, s->act_bytes), err, "scratch (activation staging)");
    CU_TRY(cudaMalloc((void **)&s->asum, s->asum_floats * 4), err, "scratch");
    CU_TRY(cudaMalloc((void **)&s->cnt, (size_t)s->ncnt * 4), err, "scratch");
    CU_TRY(cudaMemset(s->bar, 0, 256), err, "scratch");
    CU_TRY(cudaMemset(s->cnt, 0, (size_t)s->ncnt * 4), err, "scratch");
    CU_TRY(cudaMemset(s->act, 0, s->act_bytes), err, "scratch");
    return DD_OK;
}

void cu_scratch_free(cu_scratch *s) {
    cudaFree(s->bar);
    if (s->own_err) cudaFree(s->err);
    cudaFree(s->act);
    cudaFree(s->asum);
    cudaFree(s->cnt);
    memset(s, 0, sizeof *s);
}

dd_status cu_run_program(cu_scratch *s, const cu_op *d_ops, int nops, int n, float temp,
                         int topk, const uint64_t *d_seeds, const uint64_t *d_frames, int force_big,
                         cudaStream_t stream, dd_error *err) {
    CU_TRY(cudaMemsetAsync(s->err, 0x7F, 8, stream), err, "reset error flags");
    return cu_launch_ops(s, d_ops, nops, n, temp, topk, d_seeds, d_frames, force_big, stream, err);
}

dd_status cu_launch_ops(cu_scratch *s, const cu_op *d_ops, int nops, int n, float temp, int topk,
                        const uint64_t *d_seeds, const uint64_t *d_frames, int force_big, cudaStream_t stream,
                        dd_error *err) {
    cu_params P;
    memset(&P, 0, sizeof P);
    P.ops = d_ops;
    P.nops = nops;
    P.n = n;
    P.temp = temp;
    P.topk = topk;
    P.seeds = d_seeds;
    P.frames = d_frames;
    P.bar = s->bar;
    P.err = s->err;
    P.act = s->act;
    P.asum = s->asum;
    P.cnt = s->cnt;
    P.force_big = force_big;
    P.timeout_ns = s->timeout_ns;
    void *args[] = {&P};
    CU_TRY(cudaLaunchCooperativeKernel((const void *)cu_frame_kernel, dim3(s->grid), dim3(CU_THREADS), args,
                                       CU_SMEM_BYTES, stream),
           err, "launch of the frame kernel");
    return DD_OK;
}

dd_status cu_check_errors(cu_scratch *s, dd_error *err) {
    int e[2];
    CU_TRY(cudaMemcpy(e, s->err, 8, cudaMemcpyDeviceToHost), err, "frame kernel");
    return cu_check_error_words(s, e, err);
}

dd_status cu_check_error_words(cu_scratch *s, const int e[2], dd_error *err) {
    if (e[0] != CU_ERR_CLEAR) {
        /* a barrier timed out: the counters are in an unknown state, start over */
        cudaMemset(s->bar, 0, 256);
        cudaMemset(s->cnt, 0, (size_t)s->ncnt * 4);
        return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: the frame kernel timed out at a grid barrier");
    }
    if (e[1] != CU_ERR_CLEAR) return dd_fail(err, DD_ENUMERIC, "row %d: level %d: no finite logit", e[1] >> 8, e[1] & 255);
    return DD_OK;
}
