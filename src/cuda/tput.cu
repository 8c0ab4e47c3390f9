/* The throughput executor (issue 14, first stage): batches past the latency executor's crossover. The frame
 * program (backend.cu, the same ops the frame kernel runs) is walked on the host; every linear whose shape and
 * weight type suit the tensor-core tile runs as three launches on the caller's stream:
 *   tp_split   x (T rows, ldx) fp32 -> normalised (the op's norm, the frame kernel's statistics: cu_row_stats, one
 *              warp a row) and split into two bf16 terms, hi and lo, each (T, K) row-major: the TMA source;
 *   tp_linear  wgmma m64nBNk16 with A = the weights (the engine's fragment layout, bulk-copied to shared memory,
 *              fragments loaded to registers) and B = hi / lo (TMA, 128-byte swizzle); per output and chunk of
 *              CU_CKT k-tiles a partial from +0 with, per k-tile, the hi term then the lo term; split-K in S
 *              ranges of K that nest with the contract's slabs (cu_common.cuh): a range that starts a slab keeps
 *              the slab's running sum and stores it as a plane at the slab's (or its range's) end, a range inside
 *              a slab stores its chunk partials, tp_epi adds the planes in the contract's order (tp_planes);
 *              q8 / q4 weights (QINT, groups of 64) as exact bf16 integers, each group's partial closed with its
 *              scale, bias and the tokens' group sums (tp_split writes them with the split, or the kernel before
 *              it: tp_epi, the attention kernels) before it joins the chunk's, as cu_gemm_big does;
 *   tp_epi     the planes' sum (the slabs' sums in slab order) through the frame kernel's cu_epilogue
 *              (bias, activation / gate pair, residual, added rows).
 * Attention runs as a kernel of its own: tp_attend3 (a warp a (stream, kv head) at a time, up to 4 a block, the
 * co-resident blocks looping over the items, everything an item reads staged by cp.async while the item before it
 * is computed) without GQA, tp_attend2 (a block a (stream, kv head), a warp a query) with it, both also writing the
 * out-projection's split; tp_attend (a warp a query from the cache, the frame kernel's cu_attend_fast) where neither
 * fits;
 * sampling and gathers as tp_sample (a block a stream). Any other op (linears that do not suit the tile) runs, as
 * consecutive runs of ops, on the frame kernel (cu_launch_ops). So the numbers are the frame kernel's bit for bit: the
 * same statistics, split and attention arithmetic in the same order, and a wgmma chain over the same k order gives the
 * mma.sync chain's bits (dev/cuda/derisk/wgmma_bits.cu, tput_linear.cu: 64 shapes x T bit-identical on the H200).
 *
 * Tile: CTA = 128 weight rows (8 m-tiles) x BN tokens (BN 128 or 64; 32 at T <= 32), 384 threads: warpgroups 0 and 1
 * consume (64 rows each; warp q of warpgroup w owns m-tile 4 w + q, whose m16n8k16 A fragment is wgmma's register-A
 * fragment of those 16 rows), warpgroup 2 produces (one thread issues every copy). A pipeline stage is half a chunk (64
 * k columns): the hi and lo boxes {64, BN} and the 8 m-tiles x 4 k-tiles of weights (16 KB); 4 stages.
 * Every wait ends at the decoder's timeout (DD_CUDA_TIMEOUT_S) and flags CU_ERR_TIMEOUT instead of hanging.
 *
 * Requires sm_90a (wgmma, bulk tensor copies): this file is compiled for it (Makefile); on other targets the
 * kernels are empty, the probe says so and the executor is not created. */
#include "cu_attend.cuh"
#include "cu_linear.cuh"
#include "cu_sample.cuh"
#include "cu_state.cuh"

#include <cuda.h> /* CUtensorMap and its enums; the encoder comes through cudaGetDriverEntryPointByVersion */
#include <stdlib.h>
#include <string.h>

#include <utility>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TP_DEVICE 1
#else
#define TP_DEVICE 0
#endif

#define TP_BM 128 /* weight rows a CTA */
#define TP_BK 64  /* k columns a stage: 4 k-tiles, half a chunk */
#define TP_STAGES 4
#define TP_THREADS 384
#define TP_A_BYTES ((TP_BM / 16) * (TP_BK / 16) * 512)
#define TP_STAGE_MAX (2 * 128 * TP_BK * 2 + TP_A_BYTES) /* BN = 128: 48 KB */
#define TP_SMEM (TP_STAGES * TP_STAGE_MAX + 1024 /* alignment */ + 256 /* barriers */)
#define TP_PART_BYTES ((size_t)64 << 20) /* split-K partials at most */
#define TP_ATT3_SMEM (96 * 1024)          /* a tp_attend3 warp's shared memory at most (its launch attribute) */
static_assert(CU_CKT * 16 == 2 * TP_BK, "a chunk is two stages");
static_assert(TP_SMEM <= 227 * 1024, "shared memory");

typedef unsigned long long u64;

struct tp_args {
    float *out;           /* [np][T][Nr] planes (tp_planes), np 1: the sums (T, Nr) */
    const uint8_t *wfrag; /* the weights in the engine's fragment layout, Nr = MT 16 rows, KT = K / 16 */
    int Nr, K, T, S, pps; /* pps: planes a slab (tp_planes) */
    cu_mat w;             /* q8 / q4 (QINT): the scales and biases (cu_sb), group */
    const float *asum;    /* QINT: the activations' group sums, [NG][ta] (with the split) */
    int ta;
    int *err;             /* the decoder's error words: [0] = CU_ERR_TIMEOUT on a pipeline timeout */
    u64 timeout_ns;
};

/* The planes of partial sums a split of K's NC chunks into S ranges of sc = NC / S chunks leaves for tp_epi, in
 * the order it adds them (cu_common.cuh's slab contract), and *pps, the planes a slab:
 *   one slab (NC <= CU_SLC): range 0's running sum, then every later chunk's partial (1 + NC - sc; S 1: 1);
 *   one range (S 1) or ranges of whole slabs (sc % CU_SLC == 0): a slab's sum a plane (pps 1);
 *   ranges inside slabs (CU_SLC % sc == 0): a slab's first range's running sum, then its later chunks' partials
 *   (pps 1 + CU_SLC - sc, the last slab's fewer when it is shorter);
 * other splits: 0 (not offered). Plane of chunk c: (c / CU_SLC) pps, plus 1 + c % CU_SLC - sc for a chunk of a
 * range that does not start its slab. */
__host__ __device__ inline int tp_planes(int NC, int S, int *pps) {
    const int sc = NC / S, nsl = (NC + CU_SLC - 1) / CU_SLC;
    if (NC % S) return 0;
    if (NC <= CU_SLC) return *pps = S == 1 ? 1 : 1 + NC - sc;
    if (S == 1 || sc % CU_SLC == 0) return *pps = 1, nsl;
    if (CU_SLC % sc) return 0;
    *pps = 1 + CU_SLC - sc;
    return (nsl - 1) * *pps + 1 + (NC - (nsl - 1) * CU_SLC) - sc;
}

/* ---- device ------------------------------------------------------------------------------------------------ */
/* Programmatic dependent launch (every kernel of this executor is launched with it): a kernel lets the next one
 * start as soon as its blocks run (trigger), and waits for the previous kernel's completion and memory before its
 * first access to anything an earlier kernel writes or reads (wait); the weights, which no kernel writes, may be
 * requested before. Both are no-ops for a kernel launched without the attribute. */
__device__ __forceinline__ void tp_pdl_trigger(void) {
#if TP_DEVICE
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void tp_pdl_wait(void) {
#if TP_DEVICE
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ u64 tp_gtimer(void) {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

#if TP_DEVICE
/* true once the phase of this parity completed; false at the deadline */
__device__ __forceinline__ bool tp_mbar_wait(u64 *b, uint32_t parity, u64 deadline) {
    const uint32_t a = cu_smem_u32(b);
    for (uint32_t n = 1;; n++) {
        if (cu_mbar_try(a, parity)) return true;
        if ((n & 63) == 0 && tp_gtimer() > deadline) return false;
    }
}
__device__ __forceinline__ void tp_bulk(void *dst, const void *src, uint32_t bytes, u64 *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     cu_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(cu_smem_u32(bar))
                 : "memory");
}
/* 2D TMA load of box {TP_BK, BN} at (k0, t0), completion on bar; rows past the tensor's T read as zeros */
__device__ __forceinline__ void tp_tma_2d(void *dst, const CUtensorMap *tm, int k0, int t0, u64 *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(cu_smem_u32(dst)),
                 "l"((u64)tm), "r"(k0), "r"(t0), "r"(cu_smem_u32(bar))
                 : "memory");
}
/* K-major, 128B-swizzled operand at shared address a (1024-byte aligned tile; + 32 j bytes for k-tile j) */
__device__ __forceinline__ u64 tp_desc_sw128(uint32_t a) {
    return (u64)((a & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
template <int NR> __device__ __forceinline__ void tp_fence_regs(float (&d)[NR]) {
#pragma unroll
    for (int i = 0; i < NR; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void tp_fence_regs(uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) asm volatile("" : "+r"(a[i])::"memory");
}

#define TP_A4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TP_A16(i) TP_A4(i), TP_A4(i + 4), TP_A4(i + 8), TP_A4(i + 12)
/* d (64 x 128 fp32) += A (64 x 16 bf16, the m16n8k16 A fragments of the warpgroup's 4 warps) . B^T (128 x 16 bf16,
 * K-major in shared memory at descriptor db) */
__device__ __forceinline__ void tp_wgmma(float (&d)[64], const uint32_t (&a)[4], u64 db) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
                 : TP_A16(0), TP_A16(16), TP_A16(32), TP_A16(48)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}
/* the same with 64 tokens (m64n64k16) */
__device__ __forceinline__ void tp_wgmma(float (&d)[32], const uint32_t (&a)[4], u64 db) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
                 : TP_A16(0), TP_A16(16)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}
/* the same with 32 tokens (m64n32k16) */
__device__ __forceinline__ void tp_wgmma(float (&d)[16], const uint32_t (&a)[4], u64 db) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}"
                 : TP_A16(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}
#endif

/* hi, lo (T, K) bf16 = the frame kernel's normalise + split of x (cu_stage_big: the same statistics and values).
 * One block a row: the row into shared memory (every thread, 16-byte loads when aligned), the statistics by warp 0
 * from there (cu_row_stats' lane order), then every thread normalises, splits and stores 8 columns at a time.
 * K % 64 == 0; dynamic shared memory K floats. */
__global__ void __launch_bounds__(256) tp_split(const cu_linear L, int T, uint32_t *hi, uint32_t *lo, float *asum,
                                                int ta) {
    extern __shared__ float tp_row[];
    __shared__ float stat[2];
    tp_pdl_trigger();
    const int K = L.w.K, t = blockIdx.x, tid = threadIdx.x;
    /* this thread's first 8 columns' norm weights and biases, requested ahead of the row (ptxas issues them right
     * after the wait), so the normalise does not load them after the statistics (GPT bf16 B64 / B256 -1.5 %) */
    const bool npre = L.norm != DD_NORM_NONE && 8 * tid < K;
    float nwv[8], nbv[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
        nwv[u] = npre ? __ldg(L.norm_w + 8 * tid + u) : 0.0f;
        nbv[u] = npre && L.norm_b ? __ldg(L.norm_b + 8 * tid + u) : 0.0f;
    }
    tp_pdl_wait();
    const float *xr = L.x + (size_t)t * L.ldx;
    if (((uintptr_t)xr & 15) == 0)
        for (int k = 4 * tid; k < K; k += 1024) *(float4 *)(tp_row + k) = __ldcg((const float4 *)(xr + k));
    else
        for (int k = tid; k < K; k += 256) tp_row[k] = __ldcg(xr + k);
    __syncthreads();
    if (L.norm != DD_NORM_NONE && tid < 32) {
        float mean, rstd;
        cu_row_stats([&](int k) { return tp_row[k]; }, K, L.norm, L.eps, tid, mean, rstd);
        if (tid == 0) stat[0] = mean, stat[1] = rstd;
    }
    __syncthreads();
    const float mean = L.norm != DD_NORM_NONE ? stat[0] : 0.0f, rstd = L.norm != DD_NORM_NONE ? stat[1] : 1.0f;
    uint32_t *h = hi + (size_t)t * (K / 2), *l = lo + (size_t)t * (K / 2);
    for (int k = 8 * tid; k < K; k += 2048) {
        uint32_t w[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            w[u] = cu_split_pack(npre && k == 8 * tid
                                     ? cu_norm_wb(tp_row[k + u], mean, rstd, nwv[u], nbv[u], L.norm_b != NULL)
                                     : cu_norm_val(tp_row[k + u], k + u, L.norm, mean, rstd, L.norm_w, L.norm_b));
            if (asum) tp_row[k + u] = __uint_as_float(w[u]); /* this thread's columns only: the group sums' input */
        }
        /* cu_split_pack: hi in the low half, lo in the high */
        *(uint4 *)(h + k / 2) = make_uint4((w[0] & 0xFFFFu) | (w[1] << 16), (w[2] & 0xFFFFu) | (w[3] << 16),
                                           (w[4] & 0xFFFFu) | (w[5] << 16), (w[6] & 0xFFFFu) | (w[7] << 16));
        *(uint4 *)(l + k / 2) = make_uint4((w[0] >> 16) | (w[1] & 0xFFFF0000u), (w[2] >> 16) | (w[3] & 0xFFFF0000u),
                                           (w[4] >> 16) | (w[5] & 0xFFFF0000u), (w[6] >> 16) | (w[7] & 0xFFFF0000u));
    }
    if (asum) { /* QINT: the group sums of the split values, a warp a group (cu_stage_big's cu_group_sum) */
        __syncthreads();
        const int lane = tid & 31;
        for (int gi = tid >> 5; gi < L.w.NG; gi += 8) {
            const float gs = cu_group_sum([&](int k) { return __float_as_uint(tp_row[gi * L.w.group + k]); },
                                          L.w.group, lane);
            if (lane == 0) asum[(size_t)gi * ta + t] = gs;
        }
    }
}

/* The bytes of one (m-tile, k-tile) of weights of type TYPE in the fragment layout */
template <int TYPE> __host__ __device__ constexpr int tp_tile_bytes() {
    return TYPE == DD_BF16 ? 512 : TYPE == DD_Q8 ? 256 : 128;
}

/* QINT (q8 / q4 weights with groups of 64, tp_suits): the frame kernel's cu_gemm_big order per chunk: for each group
 * (a stage: 4 k-tiles) a partial ga from +0 (per k-tile the hi term then the lo term, the q values exact in bf16),
 * closed into the chunk's partial by cu_qint_group (s ga, then b asum) with the group's scales, biases and the tokens'
 * group sums; the chunks' partials onto the running sum in chunk order as for bf16. A wgmma chain over a group gives
 * the mma.sync chain's bits (as for bf16). The stage brings the group's scales and biases (TP_SB_MAX bytes: 8 m-tiles
 * x 16 rows) and the tile's tokens' group sums (BN floats) with its weights; two group partials, so a group's wgmmas
 * are issued before the group before it is closed. */
#define TP_SB_MAX (TP_BM / 16 * 16 * 8) /* a stage's scales and biases: 8 m-tiles x 16 rows x (s, b) f32 at most */
struct tp_qgroup {
    float s0, b0, s1, b1; /* rows g and g + 8 of the warp's m-tile */
};
/* the group in stage st (its scales and biases at sb, its group sums at as) closed into the chunk's partial p
 * (cu_qint_group per m16n8 fragment: element 4 jb + e is row g + 8 (e >> 1), token 8 jb + 2 cq + (e & 1)) */
template <int BN>
__device__ __forceinline__ void tp_qint_close(float (&p)[BN / 2], const float (&ga)[BN / 2], const tp_args &a,
                                              const uint8_t *sb, const float *as, int wt, int g, int cq) {
    const int sbb = a.w.sb_bytes, es = sbb / 2;
    const uint8_t *r0 = sb + (wt * 16 + g) * sbb, *r1 = r0 + 8 * sbb;
    const tp_qgroup q = {cu_sb_load<true>(r0, a.w.sbtype), cu_sb_load<true>(r0 + es, a.w.sbtype),
                         cu_sb_load<true>(r1, a.w.sbtype), cu_sb_load<true>(r1 + es, a.w.sbtype)};
#pragma unroll
    for (int jb = 0; jb < BN / 8; jb++) { /* tokens past T: any finite or not value, their columns are never stored */
        const float2 s2 = *(const float2 *)(as + 8 * jb + 2 * cq);
        cu_qint_group(*(float(*)[4]) & p[4 * jb], *(const float(*)[4]) & ga[4 * jb], q.s0, q.b0, q.s1, q.b1, s2.x,
                      s2.y);
    }
}

/* grid: ceil(Nr / 128) ceil(T / BN) S CTAs of TP_THREADS; tm_hi, tm_lo: hi and lo (T, K), box {64, BN}, 128B swizzle;
 * TYPE: the weights (DD_BF16; DD_Q8 / DD_Q4: QINT) */
template <int BN, int TYPE>
__global__ void __launch_bounds__(TP_THREADS, 1)
    tp_linear(const __grid_constant__ CUtensorMap tm_hi, const __grid_constant__ CUtensorMap tm_lo, const tp_args a) {
#if TP_DEVICE
    constexpr int TB = tp_tile_bytes<TYPE>(), MB = (TP_BK / 16) * TB; /* an m-tile's weights a stage */
    constexpr bool QI = TYPE != DD_BF16;
    constexpr int HI = BN * TP_BK * 2, SBO = 2 * HI + (TP_BM / 16) * MB, ASO = SBO + TP_SB_MAX, NACC = BN / 2;
    constexpr int SB = QI ? (ASO + BN * 4 + 1023) / 1024 * 1024 : SBO; /* a stage (1024-byte aligned for the TMA) */
    static_assert(!QI || TP_BK == 64, "QINT: a stage is a group of 64");
    extern __shared__ unsigned char tp_smem_raw[];
    unsigned char *smem = tp_smem_raw + ((1024 - (cu_smem_u32(tp_smem_raw) & 1023)) & 1023);
    u64 *full = (u64 *)(smem + TP_STAGES * SB), *empty = full + TP_STAGES;
    const int TT = (a.T + BN - 1) / BN, KT = a.K / 16, NC = a.K / (16 * CU_CKT), sc = NC / a.S;
    const int tt = blockIdx.x % TT, z = (blockIdx.x / TT) % a.S, mb = blockIdx.x / (TT * a.S);
    const int c0 = z * sc, t0 = tt * BN, mt0 = mb * (TP_BM / 16), MT = a.Nr / 16;
    const int wg = threadIdx.x >> 7, sbb = QI ? 16 * a.w.sb_bytes : 0; /* an m-tile's (s, b) of a group */
    const uint32_t tx = (uint32_t)(SBO + (QI ? (TP_BM / 16) * sbb + BN * 4 : 0)); /* a stage's bytes */
    const u64 deadline = tp_gtimer() + a.timeout_ns;
    if (threadIdx.x == 0) {
        /* empty: every consumer thread (warpgroups 0 and 1; 2 is the producer's) arrives after its own reads of the
         * stage, so each read is ordered before the refill by its own thread's arrival (lane 0's arrival after
         * __syncwarp orders them too, but racecheck credits only the arriving thread's reads: 2026-12-07, 16 / 34
         * errors on a GPT bf16 / q8 B64 frame -> 0) */
        for (int s = 0; s < TP_STAGES; s++) cu_mbar_init(&full[s], 1), cu_mbar_init(&empty[s], TP_THREADS - 128);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads(); /* the last block-wide barrier: the roles below never meet again */
    tp_pdl_trigger();

    if (wg == 2) { /* producer warpgroup: one thread issues every copy */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
        if (threadIdx.x != 256) return;
        asm volatile("prefetch.tensormap [%0];" ::"l"((u64)&tm_hi) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((u64)&tm_lo) : "memory");
        const int kb0 = 2 * c0, kb1 = 2 * (c0 + sc);
        auto weights = [&](int kb, int s) { /* one m-tile's 4 k-tiles: MB bytes contiguous; QINT: group kb's (s, b) */
            for (int i = 0; i < TP_BM / 16; i++) {
                const size_t m = min(mt0 + i, MT - 1); /* past the matrix (MT % 8 != 0): its last m-tile, unused */
                tp_bulk(smem + s * SB + 2 * HI + i * MB, a.wfrag + (m * KT + (size_t)kb * (TP_BK / 16)) * TB, MB,
                        &full[s]);
                if (QI) tp_bulk(smem + s * SB + SBO + i * sbb, a.w.sb + (m * a.w.NG + kb) * sbb, sbb, &full[s]);
            }
        };
        int pre = 0; /* stages whose weights are requested before the previous kernel ends */
        for (; pre < TP_STAGES && kb0 + pre < kb1; pre++) {
            cu_mbar_expect(&full[pre], tx);
            weights(kb0 + pre, pre);
        }
        tp_pdl_wait(); /* the activations (and the outputs the consumers will write) are free from here */
        int s = 0;
        uint32_t round = 0;
        for (int kb = kb0; kb < kb1; kb++) {
            if (round > 0 && !tp_mbar_wait(&empty[s], (round - 1) & 1u, deadline)) {
                atomicExch(&a.err[0], CU_ERR_TIMEOUT);
                return;
            }
            unsigned char *st = smem + s * SB;
            if (kb - kb0 >= pre) cu_mbar_expect(&full[s], tx);
            tp_tma_2d(st, &tm_hi, kb * TP_BK, t0, &full[s]);
            tp_tma_2d(st + HI, &tm_lo, kb * TP_BK, t0, &full[s]);
            if (QI) /* the tokens' sums of group kb (tp_split's; rows of ta >= t0 + BN floats) */
                tp_bulk(st + ASO, a.asum + (size_t)kb * a.ta + t0, BN * 4, &full[s]);
            if (kb - kb0 >= pre) weights(kb, s);
            if (++s == TP_STAGES) s = 0, round++;
        }
        return;
    }

    /* consumers: warp q of warpgroup wg owns m-tile mt0 + 4 wg + q */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
    const int aoff = 2 * HI + (wg * 4 + warp) * MB + lane * 16; /* bf16 */
    float acc[NACC], p[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f, p[i] = 0.0f;
    int s = 0;
    uint32_t round = 0;
    const int row0 = mb * TP_BM + wg * 64 + warp * 16 + g; /* accumulator element 4 jb + e: row row0 + 8 (e >> 1),
                                                            * token t0 + 8 jb + 2 cq + (e & 1) */
    const size_t TN = (size_t)a.T * a.Nr;
    auto store = [&](float *dst, const float (&v)[NACC]) {
#pragma unroll
        for (int jb = 0; jb < BN / 8; jb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = t0 + 8 * jb + 2 * cq + (e & 1);
                if (t < a.T && row0 + 8 * (e >> 1) < a.Nr) dst[(size_t)t * a.Nr + row0 + 8 * (e >> 1)] = v[4 * jb + e];
            }
    };
    /* stage s has its copies; else the pipeline timed out: flagged, the issued wgmmas drained, false */
    auto stage_ready = [&]() {
        if (__all_sync(0xFFFFFFFFu, tp_mbar_wait(&full[s], round & 1u, deadline))) return true;
        if (lane == 0) atomicExch(&a.err[0], CU_ERR_TIMEOUT);
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        return false;
    };
    /* chunk c's partial p: onto the slab's running sum (a range that starts its slab: stored as its plane at the
     * slab's or the range's end, then from +0), or stored as its own plane for tp_epi to add (tp_planes); then p
     * from +0 for the next chunk */
    const bool holds = c0 % CU_SLC == 0;
    auto chunk_done = [&](int c) {
        const size_t pl = (size_t)(c / CU_SLC) * a.pps;
        if (holds) {
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] = acc[i] + p[i];
            if (c % CU_SLC == CU_SLC - 1 || c == c0 + sc - 1) {
                store(a.out + pl * TN, acc);
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
            }
        } else {
            store(a.out + (pl + 1 + c % CU_SLC - sc) * TN, p);
        }
#pragma unroll
        for (int i = 0; i < NACC; i++) p[i] = 0.0f;
    };
    if constexpr (QI) {
        /* group 2 c + h in stage s: its wgmmas into ga[h] are issued, then the group before it (in stage prev,
         * ga[h ^ 1]) is waited for, closed into p and its stage released */
        const int wt = wg * 4 + warp; /* the warp's m-tile in the CTA */
        float ga[2][NACC];
        int prev = -1;
        auto close = [&](float (&gp)[NACC]) {
            tp_fence_regs(gp);
            const unsigned char *st = smem + prev * SB;
            tp_qint_close<BN>(p, gp, a, st + SBO, (const float *)(st + ASO), wt, g, cq);
            cu_mbar_arrive(&empty[prev]); /* every consumer thread, after its own reads (see the init) */
        };
        for (int c = c0; c < c0 + sc; c++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (!stage_ready()) return;
                const unsigned char *st = smem + s * SB;
                uint32_t af[4][4];
#pragma unroll
                for (int j = 0; j < 4; j++) { /* the q values as exact bf16 pairs (cu_make_a's QINT terms) */
                    cu_raw_frag raw;
                    cu_load_raw<TYPE, true>(raw, st + 2 * HI + wt * MB + j * TB, lane);
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        af[j][i] = cu_pack2(cu_qval<TYPE>(raw, 2 * i), cu_qval<TYPE>(raw, 2 * i + 1));
                    tp_fence_regs(af[j]);
                }
#pragma unroll
                for (int e = 0; e < NACC; e++) ga[h][e] = 0.0f;
                tp_fence_regs(ga[h]);
                const uint32_t hb = cu_smem_u32(st), lb = cu_smem_u32(st + HI);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int j = 0; j < 4; j++) { /* the contract's term order per k-tile: hi, then lo */
                    tp_wgmma(ga[h], af[j], tp_desc_sw128(hb + 32 * j));
                    tp_wgmma(ga[h], af[j], tp_desc_sw128(lb + 32 * j));
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                if (prev >= 0) {
                    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                    close(ga[h ^ 1]);
                    if (h == 0) chunk_done(c - 1);
                }
                prev = s;
                if (++s == TP_STAGES) s = 0, round++;
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        close(ga[1]);
        chunk_done(c0 + sc - 1);
    } else {
        for (int c = c0; c < c0 + sc; c++) {
            uint32_t af[2][4][4];
            int used[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (!stage_ready()) return;
                const unsigned char *st = smem + s * SB;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint4 v = *(const uint4 *)(st + aoff + j * 512);
                    af[h][j][0] = v.x, af[h][j][1] = v.y, af[h][j][2] = v.z, af[h][j][3] = v.w;
                    tp_fence_regs(af[h][j]);
                }
                const uint32_t hb = cu_smem_u32(st), lb = cu_smem_u32(st + HI);
                if (h == 0) tp_fence_regs(p); /* p's zeroing stays above the fence */
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int j = 0; j < 4; j++) { /* the contract's term order per k-tile: hi, then lo */
                    tp_wgmma(p, af[h][j], tp_desc_sw128(hb + 32 * j));
                    tp_wgmma(p, af[h][j], tp_desc_sw128(lb + 32 * j));
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                used[h] = s;
                if (++s == TP_STAGES) s = 0, round++;
            }
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); /* half 0 done: its stage can be refilled */
            cu_mbar_arrive(&empty[used[0]]);
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            tp_fence_regs(p);
            cu_mbar_arrive(&empty[used[1]]);
            chunk_done(c);
        }
    }
#endif
}

/* output j of token t: y = cu_epilogue of the sum of np planes (T, Nr) at src, in the contract's order: groups of
 * pps planes (a slab's, tp_planes) summed in order, the groups' sums in order; gate/up pairs: m-tile 2 u gates and
 * 2 u + 1 is up for outputs 16 u .. 16 u + 15
 * (cu_gemm_big); with hi / lo also its split (returned: cu_split_pack's word) */
__device__ __forceinline__ uint32_t tp_epi_val(const cu_linear &L, int T, const float *src, int np, int pps,
                                               int Nr, uint16_t *hi, uint16_t *lo, int j, int t) {
    const size_t TN = (size_t)T * Nr;
    const int r = L.w.pair ? 32 * (j >> 4) + (j & 15) : j;
    const float *p = src + (size_t)t * Nr + r;
    float a = __ldcg(p), u = L.w.pair ? __ldcg(p + 16) : 0.0f;
    if (pps <= 1 || pps >= np) { /* groups of one plane, or one group */
        for (int q = 1; q < np; q++) {
            a = a + __ldcg(p + q * TN);
            if (L.w.pair) u = u + __ldcg(p + q * TN + 16);
        }
    } else {
        int q = 1;
        for (; q < pps; q++) { /* slab 0: its sum is a */
            a = a + __ldcg(p + q * TN);
            if (L.w.pair) u = u + __ldcg(p + q * TN + 16);
        }
        while (q < np) {
            const int e = min(q + pps, np);
            float sa = __ldcg(p + q * TN), su = L.w.pair ? __ldcg(p + q * TN + 16) : 0.0f;
            for (q++; q < e; q++) {
                sa = sa + __ldcg(p + q * TN);
                if (L.w.pair) su = su + __ldcg(p + q * TN + 16);
            }
            a = a + sa, u = u + su;
        }
    }
    const float y = cu_epilogue(L, t, j, a, u);
    if (!hi) return 0u;
    const uint32_t w = cu_split_pack(y); /* the next linear reads these rows without a norm: tp_split's values */
    hi[(size_t)t * L.w.N + j] = (uint16_t)(w & 0xFFFFu), lo[(size_t)t * L.w.N + j] = (uint16_t)(w >> 16);
    return w;
}
/* tp_epi_val for every output, grid (ceil(N / 256), T); asum (a QINT next linear): the group sums of the split */
__global__ void __launch_bounds__(256) tp_epi(const cu_linear L, int T, const float *src, int np, int pps, int Nr,
                                              uint16_t *hi, uint16_t *lo, float *asum, int ta) {
    __shared__ uint32_t pw[256]; /* asum: the block's split words */
    tp_pdl_trigger();
    tp_pdl_wait();
    const int j = blockIdx.x * 256 + threadIdx.x, t = blockIdx.y;
    if (asum) { /* a QINT next linear (groups of 64, N % 64 == 0): the group sums of the block's columns too */
        pw[threadIdx.x] = j < L.w.N ? tp_epi_val(L, T, src, np, pps, Nr, hi, lo, j, t) : 0u;
        __syncthreads();
        const int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, c = blockIdx.x * 256 + 64 * wi;
        if (wi < 4 && c < L.w.N) { /* as tp_split sums them */
            const float g = cu_group_sum([&](int k) { return pw[64 * wi + k]; }, 64, lane);
            if (lane == 0) asum[(size_t)(c / 64) * ta + t] = g;
        }
        return;
    }
    if (j < L.w.N) tp_epi_val(L, T, src, np, pps, Nr, hi, lo, j, t);
}

/* one attention op of the frame (the frame kernel's fast schedule, cu_attend_fast: the same arithmetic), one warp
 * a query item (stream, position, q head) in the frame kernel's item order; dynamic shared memory 8 warps x
 * cu_attend_fast_floats */
__global__ void __launch_bounds__(256) tp_attend(const cu_attend A, int n) {
    extern __shared__ float tp_ws[];
    tp_pdl_trigger();
    tp_pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, it = blockIdx.x * 8 + warp;
    if (it >= n * A.P * A.H) return;
    const int h = it % A.H, r = it / A.H, i = r % A.P, s = r / A.P;
    cu_attend_fast(A, s, i, h, tp_ws + (size_t)warp * cu_attend_fast_floats(&A), lane);
}

/* the score's dot: q . k over C 16-byte pieces, one sequential sum (e = 0 .. 4 C - 1), as the frame kernel's */
__device__ __forceinline__ float tp_key_dot(const float4 *kr, const float4 *sq, int C) {
    float d = 0.0f;
#pragma unroll 4
    for (int c = 0; c < C; c++) {
        const float4 k = kr[c], x = sq[c];
        d = d + x.x * k.x;
        d = d + x.y * k.y;
        d = d + x.z * k.z;
        d = d + x.w * k.w;
    }
    return d;
}

/* oa, ob += the weighted sum of value rows 0 .. nk - 1 (shared memory, HD floats a row) at dims da and db (zero past
 * HD), in key order; key j's weight is Ws[j] (the warp's weights in shared memory, 16-byte aligned: lane j's w0 at
 * j, its w1 at 32 + j, written before a __syncwarp). A block of 8 keys loads its weights (two 16-byte broadcast
 * reads) and values before its adds: a round trip a block, not one a key; whole blocks without per-key tests. */
__device__ __forceinline__ void tp_value_sum(const float *Vs, int HD, int nk, const float *Ws, int da, int db,
                                             float &oa, float &ob) {
    const bool ia = da < HD, ib = db < HD;
    int j0 = 0;
    for (; j0 + 8 <= nk; j0 += 8) {
        const float4 wa4 = *(const float4 *)(Ws + j0), wb4 = *(const float4 *)(Ws + j0 + 4);
        const float wj[8] = {wa4.x, wa4.y, wa4.z, wa4.w, wb4.x, wb4.y, wb4.z, wb4.w};
        float va[8], vb[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            va[u] = ia ? Vs[(size_t)(j0 + u) * HD + da] : 0.0f;
            vb[u] = ib ? Vs[(size_t)(j0 + u) * HD + db] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            oa = oa + wj[u] * va[u];
            ob = ob + wj[u] * vb[u];
        }
    }
    if (j0 < nk) { /* the last keys, fewer than 8 */
        float wj[8], va[8], vb[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int j = j0 + u;
            wj[u] = j < nk ? Ws[j] : 0.0f;
            va[u] = j < nk && ia ? Vs[(size_t)j * HD + da] : 0.0f;
            vb[u] = j < nk && ib ? Vs[(size_t)j * HD + db] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (j0 + u < nk) {
                oa = oa + wj[u] * va[u];
                ob = ob + wj[u] * vb[u];
            }
    }
}

/* an attention output element: out[i] = v, and with hi / lo set (the next linear reads the rows without a norm) its
 * two bf16 terms, tp_split's values (returned: cu_split_pack's word, else 0) */
__device__ __forceinline__ uint32_t tp_att_store(float *out, uint16_t *hi, uint16_t *lo, size_t i, float v) {
    out[i] = v;
    if (!hi) return 0u;
    const uint32_t wd = cu_split_pack(v);
    hi[i] = (uint16_t)(wd & 0xFFFFu), lo[i] = (uint16_t)(wd >> 16);
    return wd;
}
/* a QINT next linear (groups of 64, HD % 64 == 0): the group sum of the split words at columns c .. c + 63 of row
 * tok, lane holding those of c + lane (wa) and c + 32 + lane (wb), as tp_split sums them */
__device__ __forceinline__ void tp_att_gsum(float *asum, int ta, size_t c, size_t tok, uint32_t wa, uint32_t wb,
                                            int lane) {
    const float g = cu_group_sum([&](int k) { return k < 32 ? wa : wb; }, 64, lane); /* k: lane or lane + 32 */
    if (lane == 0) asum[(c / 64) * ta + tok] = g;
}

/* One attention op for many streams, one warp a (stream, kv head) at a time (up to 4 warps a block, each on its own,
 * no block barrier; a grid of the co-resident blocks, each warp looping over items with two buffers of keys and one of
 * values). An item's earlier keys from the cache and this pass's q / k / v rows of the group are copied with 16-byte
 * cp.async as one group, issued while the item before it is computed; its earlier values as a group of their own at
 * the item's start, landing while its keys are rotated and scored (one values buffer: more warps an SM at the late
 * passes, where shared memory bounds them). Then, from shared memory, this pass's keys (rotated), values and the G P
 * rotated queries (G P <= 2), with the functions cu_attend_fast uses; the append (the values cu_attend_fast writes);
 * every query's scores, softmax and value sums. The arithmetic is cu_attend_fast's in its order: lane j takes keys j
 * and j + 32 (a sequential float32 dot over HD from 16-byte reads of its key row; rows padded to HD + 4 floats, so the
 * 8 lanes of a quarter warp read distinct banks), max and sum over the same xor trees, lanes over dims d0 + lane and
 * d0 + 32 + lane for the weighted sum in key order. With hi/lo set, the output rows are also split into two bf16 terms
 * (the next linear reads them without a norm: tp_split's values). HD % 4 == 0, 16-byte aligned cache and qkv rows;
 * dynamic shared memory tp_attend3_smem. */
template <int HDC> /* HDC: the head width as a constant (its address and loop arithmetic folded), 0: A.HD */
__global__ void __launch_bounds__(128, 4) tp_attend3(const cu_attend A, int n, uint16_t *hi, uint16_t *lo,
                                                     float *asum, int ta) {
    extern __shared__ __align__(16) float tp_kv[];
    tp_pdl_trigger();
    tp_pdl_wait();
    constexpr int G = 1; /* one q head a kv head: tp_attend3_ok */
    const int HD = HDC ? HDC : A.HD, kvw = A.KVH * HD, qw = (A.H + 2 * A.KVH) * HD, P = A.P, p0 = A.p0;
    const int nk = p0 + P, KS = HD + 4, C = HD / 4, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int W = blockDim.x >> 5, items = n * A.KVH, GW = gridDim.x * W;
    int item = blockIdx.x * W + warp; /* (stream, kv head): a warp each, items item, item + GW, ...; no block barrier */
    if (item >= items) return;
    const int RW = (G + 2) * HD; /* floats of a raw row */
    /* a warp's shared memory: two buffers (this item's, the next one's arriving), each the keys (nk rows of KS
     * floats), the queries (G P rows) and this pass's raw rows (P rows of the group's G q heads, its k head, its v
     * head); then one buffer of values (nk rows of HD), copied at the item's start and landing while its keys are
     * rotated and scored, and the queries' softmax weights (64 floats a query); G P <= 2: tp_attend3_ok */
    const size_t wsz = (size_t)nk * KS + (size_t)G * P * HD + (size_t)P * RW;
    float *const buf0 = tp_kv + (size_t)warp * (2 * wsz + (size_t)nk * HD + 128), *const Vs = buf0 + 2 * wsz,
                *const Ws = Vs + (size_t)nk * HD;
    /* n cache rows of HD floats (kvw apart) into shared rows ds apart, as 16-byte pieces: where C divides 32 a lane
     * keeps its column and steps its two pointers by 32 / C rows (the address arithmetic of a piece is two adds) */
    auto rows = [&](float *dst, int ds, const float *src, int n) {
        if (32 % C == 0) {
            const int R = 32 / C, j0 = lane / C, c = 4 * (lane % C);
            const float *g = src + (size_t)j0 * kvw + c;
            float *d = dst + (size_t)j0 * ds + c;
#pragma unroll 4
            for (int j = j0; j < n; j += R, g += (size_t)R * kvw, d += (size_t)R * ds) cu_cp_async16(d, g);
        } else {
            for (int idx = lane; idx < n * C; idx += 32) {
                const int j = idx / C, c = 4 * (idx % C);
                cu_cp_async16(dst + (size_t)j * ds + c, src + (size_t)j * kvw + c);
            }
        }
    };
    auto fetch = [&](int it, float *KV) { /* item it's earlier keys, this pass's rows: one group */
        const int s = it / A.KVH, kh = it % A.KVH;
        const size_t co = (size_t)s * A.cstride + (size_t)kh * HD;
        float *Rs = KV + (size_t)nk * KS + (size_t)G * P * HD;
        rows(KV, KS, A.kc + co, p0);
        const float *tok0 = A.qkv + (size_t)s * P * qw;
        for (int idx = lane; idx < P * (G + 2) * C; idx += 32) { /* 16-byte pieces of the raw rows */
            const int r = idx / ((G + 2) * C), c = idx % ((G + 2) * C), seg = c / C, off = 4 * (c % C);
            const int col = seg < G ? (kh * G + seg) * HD : seg == G ? (A.H + kh) * HD : (A.H + A.KVH + kh) * HD;
            cu_cp_async16(Rs + (size_t)r * RW + seg * HD + off, tok0 + (size_t)r * qw + col + off);
        }
        cu_cp_commit();
    };
    auto fetch_v = [&](int it) { /* item it's earlier values: a group of their own */
        rows(Vs, HD, A.vc + (size_t)(it / A.KVH) * A.cstride + (size_t)(it % A.KVH) * HD, p0);
        cu_cp_commit();
    };
    fetch(item, buf0);
    for (int b = 0; item < items; item += GW, b ^= 1) {
        float *KV = buf0 + (size_t)b * wsz, *Qs = KV + (size_t)nk * KS, *Rs = Qs + (size_t)G * P * HD;
        const int s = item / A.KVH, kh = item % A.KVH;
        /* this item's values (the previous item's value reads are done: the __syncwarp at the loop's end), then
         * the next item's keys into the other buffer, while this item is computed; groups in flight: this item's
         * keys, its values, the next item's keys */
        const int more = item + GW < items;
        fetch_v(item);
        if (more) {
            fetch(item + GW, buf0 + (size_t)(b ^ 1) * wsz);
            cu_cp_wait<2>();
        } else {
            cu_cp_wait<1>();
        }
        __syncwarp();
        for (int r = 0; r < P; r++) { /* this pass's keys (rotated) and values */
            const float *raw = Rs + (size_t)r * RW;
            cu_norm_rot_ld(A, [&](int d) { return raw[G * HD + d]; }, A.kn, p0 + r, KV + (size_t)(p0 + r) * KS, lane);
            for (int d = lane; d < HD; d += 32) Vs[(size_t)(p0 + r) * HD + d] = raw[(G + 1) * HD + d];
        }
        for (int q = 0; q < G * P; q++) { /* the queries (rotated): q = g P + i */
            const float *raw = Rs + (size_t)(q % P) * RW + (size_t)(q / P) * HD;
            cu_norm_rot_ld(A, [&](int d) { return raw[d]; }, A.qn, p0 + q % P, Qs + (size_t)q * HD, lane);
        }
        __syncwarp();
        for (int r = 0; r < P; r++) { /* the append: token (s, r)'s key and value for this kv head */
            float *kd = A.kc + (size_t)s * A.cstride + (size_t)(p0 + r) * kvw + (size_t)kh * HD;
            float *vd = A.vc + (size_t)s * A.cstride + (size_t)(p0 + r) * kvw + (size_t)kh * HD;
            for (int d = lane; d < HD; d += 32) {
                kd[d] = KV[(size_t)(p0 + r) * KS + d];
                vd[d] = Vs[(size_t)(p0 + r) * HD + d];
            }
        }
        const float scale = sqrtf((float)HD);
#pragma unroll
        for (int q = 0; q < 2; q++) {
            float sc[2] = {-INFINITY, -INFINITY};
            if (q >= G * P) continue;
            const int nq = p0 + q % P + 1;
            const float4 *sq = (const float4 *)(Qs + (size_t)q * HD);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int j = lane + 32 * r;
                if (j < nq) sc[r] = tp_key_dot((const float4 *)(KV + (size_t)j * KS), sq, C) / scale;
            }
            float w0, w1;
            cu_softmax2(sc, nq, lane, w0, w1);
            Ws[64 * q + lane] = w0, Ws[64 * q + 32 + lane] = w1; /* read after the __syncwarp below */
        }
        if (more) /* this item's values */
            cu_cp_wait<1>();
        else
            cu_cp_wait<0>();
        __syncwarp();
#pragma unroll
        for (int q = 0; q < 2; q++) {
            if (q >= G * P) continue;
            const int g = q / P, i = q % P, h = kh * G + g, nq = p0 + i + 1;
            const size_t orow = ((size_t)s * P + i) * A.H * HD + (size_t)h * HD;
            for (int d0 = 0; d0 < HD; d0 += 64) {
                const int da = d0 + lane, db = d0 + 32 + lane;
                float oa = 0.0f, ob = 0.0f;
                tp_value_sum(Vs, HD, nq, Ws + 64 * q, da, db, oa, ob);
                const uint32_t wa = da < HD ? tp_att_store(A.out, hi, lo, orow + da, oa) : 0u;
                const uint32_t wb = db < HD ? tp_att_store(A.out, hi, lo, orow + db, ob) : 0u;
                if (asum) tp_att_gsum(asum, ta, (size_t)h * HD + d0, (size_t)s * P + i, wa, wb, lane);
            }
        }
        __syncwarp(); /* every lane is done with this buffer before the next-but-one item's copies come into it */
    }
}

/* One attention op for many streams with GQA (several q heads a kv head): a block of 128 threads a (stream, kv
 * head), for all its q heads and new positions. The group's keys (rows padded to HD + 1 floats: lane j reads row j
 * without bank conflicts) and values are staged in shared memory once: earlier positions from the cache with 16-byte
 * loads by every thread, this pass's rotated keys by cu_norm_rot_row and values from the qkv rows; the rotated
 * queries likewise. Then a warp a query with cu_attend_fast's arithmetic and order: lane j takes keys j and j + 32
 * (a sequential float32 dot over HD, then / sqrt(HD)), max and sum over the same xor trees, lanes over dims d0 +
 * lane and d0 + 32 + lane for the weighted sum in key order. The append writes the values cu_attend_fast writes.
 * With hi / lo set, the output rows also as two bf16 terms (as tp_attend3). HD % 4 == 0; dynamic shared memory
 * tp_attend2_smem. */
template <int HDC> /* as tp_attend3's */
__global__ void __launch_bounds__(128) tp_attend2(const cu_attend A, int n, uint16_t *hi, uint16_t *lo, float *asum,
                                                  int ta) {
    extern __shared__ __align__(16) float tp_kv[];
    tp_pdl_trigger();
    tp_pdl_wait();
    const int HD = HDC ? HDC : A.HD, G = A.H / A.KVH, kvw = A.KVH * HD, qw = (A.H + 2 * A.KVH) * HD, P = A.P,
              p0 = A.p0;
    const int s = blockIdx.x / A.KVH, kh = blockIdx.x % A.KVH, NK = p0 + P, KS = HD + 4, C = HD / 4;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float *Ks = tp_kv, *Vs = Ks + (size_t)NK * KS, *Qs = Vs + (size_t)NK * HD; /* rows of 16 B multiples */
    float *Ws = Qs + (size_t)G * P * HD + 64 * warp; /* this warp's query's softmax weights */
    const float *tok0 = A.qkv + (size_t)s * P * qw;
    const float *kc = A.kc + (size_t)s * A.cstride + (size_t)kh * HD,
                *vc = A.vc + (size_t)s * A.cstride + (size_t)kh * HD;
    const int voff = (A.H + A.KVH + kh) * HD;
    for (int idx = tid; idx < p0 * C; idx += 128) { /* earlier positions from the cache: every copy in flight */
        const int j = idx / C, c = 4 * (idx % C);
        cu_cp_async16(Ks + (size_t)j * KS + c, kc + (size_t)j * kvw + c);
        cu_cp_async16(Vs + (size_t)j * HD + c, vc + (size_t)j * kvw + c);
    }
    cu_cp_commit();
    for (int r = warp; r < P; r += 4) { /* this pass's keys (rotated) and values, while the copies arrive */
        cu_norm_rot_row(A, tok0 + (size_t)r * qw + (size_t)(A.H + kh) * HD, A.kn, p0 + r, Ks + (size_t)(p0 + r) * KS,
                        lane);
        for (int d = lane; d < HD; d += 32) Vs[(size_t)(p0 + r) * HD + d] = __ldcg(tok0 + (size_t)r * qw + voff + d);
    }
    for (int q = warp; q < G * P; q += 4) { /* the queries (rotated): q = g P + i */
        const int g = q / P, i = q % P;
        cu_norm_rot_row(A, tok0 + (size_t)i * qw + (size_t)(kh * G + g) * HD, A.qn, p0 + i, Qs + (size_t)q * HD, lane);
    }
    cu_cp_wait<0>();
    __syncthreads();
    if (warp == 0) /* the append: token (s, i)'s key and value for this kv head */
        for (int r = 0; r < P; r++) {
            float *kd = A.kc + (size_t)s * A.cstride + (size_t)(p0 + r) * kvw + (size_t)kh * HD;
            float *vd = A.vc + (size_t)s * A.cstride + (size_t)(p0 + r) * kvw + (size_t)kh * HD;
            for (int d = lane; d < HD; d += 32) {
                kd[d] = Ks[(size_t)(p0 + r) * KS + d];
                vd[d] = Vs[(size_t)(p0 + r) * HD + d];
            }
        }
    const float scale = sqrtf((float)HD);
    for (int q = warp; q < G * P; q += 4) {
        const int g = q / P, i = q % P, h = kh * G + g, nk = p0 + i + 1;
        const float4 *sq = (const float4 *)(Qs + (size_t)q * HD);
        float sc[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int j = lane + 32 * r;
            if (j < nk) /* lane j's key row (rows of KS floats: 16-byte reads without conflicts) */
                sc[r] = tp_key_dot((const float4 *)(Ks + (size_t)j * KS), sq, C) / scale;
        }
        float w0, w1;
        cu_softmax2(sc, nk, lane, w0, w1);
        Ws[lane] = w0, Ws[32 + lane] = w1;
        __syncwarp();
        const size_t orow = ((size_t)s * P + i) * A.H * HD + (size_t)h * HD;
        for (int d0 = 0; d0 < HD; d0 += 64) {
            const int da = d0 + lane, db = d0 + 32 + lane;
            float oa = 0.0f, ob = 0.0f;
            tp_value_sum(Vs, HD, nk, Ws, da, db, oa, ob);
            const uint32_t wa = da < HD ? tp_att_store(A.out, hi, lo, orow + da, oa) : 0u;
            const uint32_t wb = db < HD ? tp_att_store(A.out, hi, lo, orow + db, ob) : 0u;
            if (asum) tp_att_gsum(asum, ta, (size_t)h * HD + d0, (size_t)s * P + i, wa, wb, lane);
        }
        __syncwarp(); /* the weights are read before the warp's next query writes its own */
    }
}

/* one sampling op of the frame (the frame kernel's cu_sample_stream), one block of CU_THREADS a stream; dynamic
 * shared memory: the logits row (V floats) when it fits CU_ACT_BYTES */
__global__ void __launch_bounds__(CU_THREADS) tp_sample(const cu_sample S, const cu_params P) {
    extern __shared__ float tp_zs[];
    __shared__ unsigned hist[256], hist2[256], list[256];
    __shared__ int sel[4], ri[28];
    __shared__ float rv[16];
    const cu_samp_smem SS = {hist, sel, rv, ri, hist2, list};
    tp_pdl_trigger();
    tp_pdl_wait();
    cu_sample_stream_in(S, P, blockIdx.x, tp_zs, SS);
}

__global__ void tp_probe(int *ok) { *ok = TP_DEVICE; }

/* ---- host -------------------------------------------------------------------------------------------------- */
typedef CUresult (*tp_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A frame's launches captured as a CUDA graph, replayed for later calls of the same (program, n, sampling): the
 * ~1,700 launches of a frame cost ~15 ms on the host, their replay a few microseconds each on the device. A key is
 * captured once seen twice (a server whose batch size varies should not pay a capture for every size). */
#define TP_GRAPHS 16
#define TP_SEEN 64
typedef struct tp_key {
    int v, n, topk;
    float temp;
} tp_key;
typedef struct tp_graph {
    tp_key k;
    cudaGraphExec_t exec; /* NULL: empty slot */
    unsigned long long used;
} tp_graph;

struct tp_exec {
    cu_state *st;
    cudaStream_t cap; /* the capture stream (created on first use) */
    tp_graph g[TP_GRAPHS];
    tp_key seen[TP_SEEN];
    int nseen;
    unsigned long long tick;
    tp_encode_fn encode;
    int sms;
    int tmax;           /* tokens of the largest linear (2 per stream: pass 1) */
    uint32_t *hi, *lo;  /* (tmax, kmax) bf16 each */
    float *asum;        /* QINT linears: the activations' group sums, [kmax / 32][ta] */
    int ta;             /* tmax rounded up to even */
    float *sums;        /* (tmax, nmax) */
    float *part;        /* TP_PART_BYTES */
    int kmax, nmax;
};

static size_t tp_attend_smem(const cu_attend *A) { return (size_t)8 * cu_attend_fast_floats(A) * 4; }
static int tp_attend_ok(const cu_attend *A) { return tp_attend_smem(A) <= 48 * 1024; }
/* tp_attend2 / tp_attend3 (their HDC instances: 64, 128, 0 for any other head width) */
typedef void (*tp_att_fn)(cu_attend, int, uint16_t *, uint16_t *, float *, int);
static tp_att_fn tp_att_pick(int HD, tp_att_fn k64, tp_att_fn k128, tp_att_fn k0) {
    return HD == 64 ? k64 : HD == 128 ? k128 : k0;
}
static size_t tp_attend2_smem(const cu_attend *A) {
    const size_t nk = (size_t)A->p0 + A->P;
    return (nk * (A->HD + 4) + nk * A->HD + (size_t)(A->H / A->KVH) * A->P * A->HD + 4 * 64) * 4;
}
static int tp_attend2_ok(const cu_attend *A) { return A->HD % 4 == 0 && tp_attend2_smem(A) <= 48 * 1024; }
static size_t tp_attend3_smem(const cu_attend *A) { /* a warp's: two buffers of keys, queries and raw rows
                                                        * (tp_attend3's wsz), one of values, the weights */
    const size_t nk = (size_t)A->p0 + A->P, G = A->H / A->KVH;
    return (2 * (nk * (A->HD + 4) + G * A->P * A->HD + (size_t)A->P * (G + 2) * A->HD) + nk * A->HD + 128) * 4;
}
/* 1 when tp_attend3 suits op A: one query a (stream, kv head) group (no GQA: with G q heads a warp would attend
 * them one after the other, slower than tp_attend's warp a query at CSM dims, measured) */
static int tp_attend3_ok(const cu_attend *A) {
    return A->H == A->KVH && A->P <= 2 && A->HD % 4 == 0 && A->cstride % 4 == 0 &&
           (((uintptr_t)A->kc | (uintptr_t)A->vc | (uintptr_t)A->qkv) & 15) == 0 && tp_attend3_smem(A) <= TP_ATT3_SMEM;
}

/* 1 when linear L (T tokens) runs on the tile: bf16 weights, or q8 / q4 ones in QINT form with groups of 64;
 * K % 128 == 0 (and <= 12160: tp_split's row of K floats and its static bytes within the 48 KB of shared memory a
 * launch gets without opting in; K = 12288 would fail the launch) */
static int tp_suits(const tp_exec *x, const cu_linear *L, int T) {
    const cu_mat *w = &L->w;
    const int bf = w->wm == WM_BF16 && w->type == DD_BF16 && w->tile_bytes == 512;
    const int qi = w->wm == WM_QINT &&
                   ((w->type == DD_Q8 && w->tile_bytes == 256) || (w->type == DD_Q4 && w->tile_bytes == 128)) &&
                   w->group == 64 && w->NG * w->group == w->K && /* a group a stage (MLX's default) */
                   ((uintptr_t)w->sb & 15) == 0 && w->sb_bytes * 16 * (TP_BM / 16) <= TP_SB_MAX; /* bulk-copied */
    int pps;
    const size_t np1 = (size_t)tp_planes(w->KT / CU_CKT, 1, &pps); /* unsplit: a plane a slab (tp_shape's fallback) */
    return (bf || qi) && w->K == w->KT * 16 && w->K % 128 == 0 && w->K <= 12160 && w->K <= x->kmax &&
           w->MT * 16 <= x->nmax && T <= x->tmax && (np1 == 1 || np1 * T * w->MT * 16 * 4 <= TP_PART_BYTES);
}

static dd_status tp_map(const tp_exec *x, CUtensorMap *m, const uint32_t *base, int T, int K, int bn, dd_error *err) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)T}, strides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t box[2] = {TP_BK, (cuuint32_t)bn}, es[2] = {1, 1};
    CUresult r = x->encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: tensor map of %d x %d activations: error %d", T, K, (int)r);
    return DD_OK;
}

/* The tile and split of a linear: the fewest estimated cycles of the busiest SM (waves x BN x K / S / 4: a CTA's
 * two-term MMAs at 1024 FMA a cycle) plus the split's partials (written and read, ~16 bytes a cycle an SM) */
static void tp_shape(const tp_exec *x, int Nr, int K, int T, int bn_max, int *bn_out, int *s_out) {
    const int NC = K / (16 * CU_CKT);
    double best = 1e30;
    *bn_out = bn_max, *s_out = 1;
    for (int bn = T <= 32 ? 32 : 64; bn <= bn_max; bn *= 2) /* 32 where a 64-token tile is mostly padding */
        for (int S = 1; S <= NC && S <= 16; S *= 2) {
            int pps;
            const size_t np = (size_t)tp_planes(NC, S, &pps), pb = np * T * Nr * 4;
            if (!np || (np > 1 && pb > TP_PART_BYTES)) continue;
            const long tiles = (long)((Nr + TP_BM - 1) / TP_BM) * ((T + bn - 1) / bn) * S, waves = (tiles + x->sms - 1) / x->sms;
            const double cyc = (double)waves * bn * (K / S) / 4.0 + (np > 1 ? 2.0 * pb / (16.0 * x->sms) : 0.0) +
                               (double)tiles * 8.0; /* a little per CTA: prefer fewer at a tie */
            if (cyc < best) best = cyc, *bn_out = bn, *s_out = S;
        }
}

/* a kernel of this executor on `stream` with programmatic dependent launch (tp_pdl_trigger / tp_pdl_wait) */
template <typename... P, typename... A>
static cudaError_t tp_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

/* Linear L on T tokens: its split (unless split_done: the previous linear's epilogue wrote it), the tile, the
 * epilogue (with split_next: also the split of its output rows, which the next linear reads without a norm) */
static dd_status tp_run_linear(tp_exec *x, const cu_linear *L, int T, int split_done, int split_next,
                               int sums_next, cudaStream_t stream, dd_error *err) {
    const int K = L->w.K, Nr = L->w.MT * 16, NC = K / (16 * CU_CKT);
    const int qi = L->w.wm == WM_QINT; /* QINT: 64 (or 32) tokens a tile (with 128 its three accumulator sets spill) */
    int bn, S;
    tp_shape(x, Nr, K, T, qi ? 64 : 128, &bn, &S);
    CUtensorMap mh, ml;
    dd_status s;
    if ((s = tp_map(x, &mh, x->hi, T, K, bn, err)) || (s = tp_map(x, &ml, x->lo, T, K, bn, err))) return s;
    if (!split_done) /* QINT: the split's group sums too (a split handed over comes with them) */
        CU_TRY(tp_launch(tp_split, dim3(T), dim3(256), (size_t)K * 4, stream, *L, T, x->hi, x->lo,
                         qi ? x->asum : (float *)NULL, x->ta),
               err, "throughput executor launch");
    int pps;
    const int np = tp_planes(NC, S, &pps); /* >= 1: tp_shape offers no other split */
    float *out = np == 1 ? x->sums : x->part;
    tp_args a = {out, L->w.frag, Nr, K, T, S, pps, L->w, x->asum, x->ta, x->st->sc.err, x->st->sc.timeout_ns};
    const int tiles = ((Nr + TP_BM - 1) / TP_BM) * ((T + bn - 1) / bn) * S;
    void (*k)(CUtensorMap, CUtensorMap, tp_args) =
        !qi ? (bn == 128 ? tp_linear<128, DD_BF16> : bn == 64 ? tp_linear<64, DD_BF16> : tp_linear<32, DD_BF16>)
        : L->w.type == DD_Q8 ? (bn == 64 ? tp_linear<64, DD_Q8> : tp_linear<32, DD_Q8>)
                             : (bn == 64 ? tp_linear<64, DD_Q4> : tp_linear<32, DD_Q4>);
    CU_TRY(tp_launch(k, dim3(tiles), dim3(TP_THREADS), TP_SMEM, stream, mh, ml, a), err, "throughput executor launch");
    uint16_t *hn = split_next ? (uint16_t *)x->hi : NULL, *ln = split_next ? (uint16_t *)x->lo : NULL;
    CU_TRY(tp_launch(tp_epi, dim3((L->w.N + 255) / 256, T), dim3(256), 0, stream, *L, T, (const float *)out, np, pps,
                     Nr, hn, ln, split_next && sums_next ? x->asum : (float *)NULL, x->ta),
           err, "throughput executor launch");
    return DD_OK;
}

/* 1 when linear b reads exactly the rows linear a writes, without a norm (fc2 after fc1): a's epilogue can write
 * b's split */
static int tp_chains(const cu_linear *a, const cu_linear *b) {
    return b->norm == DD_NORM_NONE && b->x == a->y && b->ldx == a->ldy && b->w.K == a->w.N &&
           b->tmul == a->tmul; /* a QINT b (tp_suits: groups of 64): a's epilogue writes the group sums too */
}

dd_status tp_create(tp_exec **out, cu_state *st, int max_tokens, dd_error *err) {
    *out = NULL;
    int dev = 0, major = 0, sms = 0;
    if (cudaGetDevice(&dev) || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) {
        cudaGetLastError();
        return DD_OK;
    }
    if (major != 9) return DD_OK;
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !f) {
        cudaGetLastError();
        return DD_OK;
    }
    int *d_ok = NULL, ok = 0;
    CU_TRY(cudaMalloc(&d_ok, sizeof(int)), err, "throughput executor probe");
    tp_probe<<<1, 1>>>(d_ok);
    cudaError_t ce = cudaMemcpy(&ok, d_ok, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_ok);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return DD_OK; /* no sm_90a code in this build for this device */
    }
    if (!ok) return DD_OK;
    void (*const lin[])(CUtensorMap, CUtensorMap, tp_args) = {tp_linear<128, DD_BF16>, tp_linear<64, DD_BF16>,
                                                              tp_linear<64, DD_Q8>,    tp_linear<64, DD_Q4>,
                                                              tp_linear<32, DD_BF16>,  tp_linear<32, DD_Q8>,
                                                              tp_linear<32, DD_Q4>};
    for (auto f : lin)
        CU_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, TP_SMEM), err,
               "throughput executor shared memory");
    CU_TRY(cudaFuncSetAttribute(tp_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, CU_ACT_BYTES), err,
           "throughput executor shared memory");
    const tp_att_fn att3[] = {tp_attend3<64>, tp_attend3<128>, tp_attend3<0>};
    for (auto f : att3)
        CU_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, TP_ATT3_SMEM), err,
               "throughput executor shared memory");
    /* the widest K and rows of the linears that suit the tile */
    int kmax = 0, nmax = 0;
    for (int v = 0; v < NPROG; v++)
        for (int i = 0; i < st->nprog[v]; i++) {
            const cu_op *o = &st->h_prog[v][i];
            if (o->type != CU_OP_LINEAR) continue;
            if (o->lin.w.K > kmax) kmax = o->lin.w.K;
            if (o->lin.w.MT * 16 > nmax) nmax = o->lin.w.MT * 16;
        }
    tp_exec *x = (tp_exec *)calloc(1, sizeof *x);
    if (!x) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    x->st = st, x->encode = (tp_encode_fn)f, x->sms = sms, x->tmax = max_tokens, x->kmax = kmax, x->nmax = nmax;
    *out = x;
    const size_t hb = (size_t)max_tokens * kmax * 2;
    CU_TRY(cudaMalloc(&x->hi, hb), err, "throughput executor buffers");
    CU_TRY(cudaMalloc(&x->lo, hb), err, "throughput executor buffers");
    CU_TRY(cudaMalloc(&x->sums, (size_t)max_tokens * nmax * 4), err, "throughput executor buffers");
    CU_TRY(cudaMalloc(&x->part, TP_PART_BYTES), err, "throughput executor buffers");
    x->ta = (max_tokens + 63) & ~63; /* a QINT tile bulk-copies 64 tokens' sums from a 16-byte aligned row */
    CU_TRY(cudaMalloc(&x->asum, (size_t)(kmax / 32 + 1) * x->ta * 4), err, "throughput executor buffers");
    CU_TRY(cudaMemset(x->asum, 0, (size_t)(kmax / 32 + 1) * x->ta * 4), err, "throughput executor buffers");
    return DD_OK;
}

void tp_free(tp_exec *x) {
    if (!x) return;
    for (int i = 0; i < TP_GRAPHS; i++)
        if (x->g[i].exec) cudaGraphExecDestroy(x->g[i].exec);
    if (x->cap) cudaStreamDestroy(x->cap);
    cudaFree(x->hi), cudaFree(x->lo), cudaFree(x->sums), cudaFree(x->part), cudaFree(x->asum);
    free(x);
}

/* The launches of one frame of program v for n streams (inputs in st->d_in) on `stream`: the linears that suit
 * the tile on it, every run of other ops on the frame kernel. */
static dd_status tp_enqueue(tp_exec *x, int v, int n, float temp, int topk, cudaStream_t stream, dd_error *err) {
    cu_state *st = x->st;
    const cu_op *ops = st->h_prog[v];
    const int nops = st->nprog[v];
    const uint64_t *seeds = (const uint64_t *)(st->d_in + st->off_seeds),
                   *frames = (const uint64_t *)(st->d_in + st->off_frames);
    CU_TRY(cudaMemsetAsync(st->sc.err, 0x7F, 8, stream), err, "reset error flags");
    cu_params P; /* what the sampling ops read of the frame kernel's parameters */
    memset(&P, 0, sizeof P);
    P.n = n, P.temp = temp, P.topk = topk, P.seeds = seeds, P.frames = frames, P.err = st->sc.err;
    dd_status s;
    int split_done = 0;
    for (int i = 0; i < nops;) {
        const cu_op *o = &ops[i];
        if (o->type == CU_OP_LINEAR && tp_suits(x, &o->lin, cu_lin_T(&o->lin, n))) {
            const cu_op *nx = i + 1 < nops ? &ops[i + 1] : NULL;
            const int chain = nx && nx->type == CU_OP_LINEAR && tp_suits(x, &nx->lin, cu_lin_T(&nx->lin, n)) &&
                              tp_chains(&o->lin, &nx->lin);
            if ((s = tp_run_linear(x, &o->lin, cu_lin_T(&o->lin, n), split_done, chain,
                                   chain && nx->lin.w.wm == WM_QINT, stream, err)))
                return s;
            split_done = chain;
            i++;
            continue;
        }
        split_done = 0;
        /* attention whose output rows the next linear reads without a norm: the kernel writes their split too */
        const cu_op *nx = i + 1 < nops ? &ops[i + 1] : NULL;
        const int chain = o->type == CU_OP_ATTEND && nx && nx->type == CU_OP_LINEAR &&
                          tp_suits(x, &nx->lin, cu_lin_T(&nx->lin, n)) && nx->lin.norm == DD_NORM_NONE &&
                          (nx->lin.w.wm != WM_QINT || o->att.HD % 64 == 0) && nx->lin.x == o->att.out &&
                          nx->lin.ldx == o->att.H * o->att.HD &&
                          nx->lin.w.K == o->att.H * o->att.HD && cu_lin_T(&nx->lin, n) == n * o->att.P;
        uint16_t *hn = chain ? (uint16_t *)x->hi : NULL, *ln = chain ? (uint16_t *)x->lo : NULL;
        float *an = chain && nx->lin.w.wm == WM_QINT ? x->asum : NULL; /* its group sums (groups of 64) */
        if (o->type == CU_OP_ATTEND && tp_attend3_ok(&o->att)) {
            const size_t ws = tp_attend3_smem(&o->att); /* a warp's; warps a block within 48 KB (or one), 4 at most */
            const int W = ws * 4 <= 48 * 1024 ? 4 : ws * 2 <= 48 * 1024 ? 2 : 1, items = n * o->att.KVH;
            const tp_att_fn k = tp_att_pick(o->att.HD, tp_attend3<64>, tp_attend3<128>, tp_attend3<0>);
            /* as many blocks as are co-resident (each warp loops over items, the next item's copies in flight
             * while it works on one), at most one a W items */
            int per = 0, blocks = (items + W - 1) / W;
            CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, 32 * W, W * ws), err,
                   "throughput executor occupancy");
            if (per > 0 && blocks > per * x->sms) blocks = per * x->sms;
            CU_TRY(tp_launch(k, dim3(blocks), dim3(32 * W), W * ws, stream, o->att, n, hn, ln, an, x->ta), err,
                   "throughput executor launch");
            split_done = chain;
            i++;
            continue;
        }
        if (o->type == CU_OP_ATTEND && tp_attend2_ok(&o->att)) { /* GQA: a block a (stream, kv head) */
            const tp_att_fn k = tp_att_pick(o->att.HD, tp_attend2<64>, tp_attend2<128>, tp_attend2<0>);
            CU_TRY(tp_launch(k, dim3(n * o->att.KVH), dim3(128), tp_attend2_smem(&o->att), stream, o->att, n, hn, ln,
                             an, x->ta),
                   err, "throughput executor launch");
            split_done = chain;
            i++;
            continue;
        }
        if (o->type == CU_OP_ATTEND && tp_attend_ok(&o->att)) {
            const int items = n * o->att.P * o->att.H;
            CU_TRY(tp_launch(tp_attend, dim3((items + 7) / 8), dim3(256), tp_attend_smem(&o->att), stream, o->att, n),
                   err, "throughput executor launch");
            i++;
            continue;
        }
        if (o->type == CU_OP_SAMPLE) {
            const size_t zs = (size_t)o->smp.V * 4 <= CU_ACT_BYTES ? (size_t)o->smp.V * 4 : 0;
            CU_TRY(tp_launch(tp_sample, dim3(n), dim3(CU_THREADS), zs, stream, o->smp, P), err,
                   "throughput executor launch");
            i++;
            continue;
        }
        int j = i + 1; /* a run of the other ops (linears that do not suit the tile) on the frame kernel */
        while (j < nops && ops[j].type == CU_OP_LINEAR && !tp_suits(x, &ops[j].lin, cu_lin_T(&ops[j].lin, n))) j++;
        if ((s = cu_launch_ops(&st->sc, st->d_prog[v] + i, j - i, n, temp, topk, seeds, frames, 0, stream, err))) return s;
        i = j;
    }
    CU_TRY(cudaGetLastError(), err, "throughput executor launch");
    return DD_OK;
}

static int tp_same(const tp_key *a, const tp_key *b) {
    return a->v == b->v && a->n == b->n && a->topk == b->topk && memcmp(&a->temp, &b->temp, sizeof a->temp) == 0;
}

/* The frame captured on x->cap and instantiated into slot *g (the least recently used one is replaced) */
static dd_status tp_capture(tp_exec *x, const tp_key *k, tp_graph **out, dd_error *err) {
    if (!x->cap) CU_TRY(cudaStreamCreateWithFlags(&x->cap, cudaStreamNonBlocking), err, "capture stream");
    tp_graph *g = &x->g[0];
    for (int i = 1; i < TP_GRAPHS && g->exec; i++)
        if (!x->g[i].exec || x->g[i].used < g->used) g = &x->g[i];
    CU_TRY(cudaStreamBeginCapture(x->cap, cudaStreamCaptureModeThreadLocal), err, "frame capture");
    dd_status s = tp_enqueue(x, k->v, k->n, k->temp, k->topk, x->cap, err);
    cudaGraph_t graph = NULL;
    cudaError_t ce = cudaStreamEndCapture(x->cap, &graph);
    if (!s && ce != cudaSuccess)
        s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: frame capture: %s", cudaGetErrorString(ce));
    cudaGraphExec_t exec = NULL;
    if (!s && (ce = cudaGraphInstantiate(&exec, graph, 0)) != cudaSuccess)
        s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: frame graph: %s", cudaGetErrorString(ce));
    if (graph) cudaGraphDestroy(graph);
    if (s) {
        cudaGetLastError();
        return s;
    }
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->k = *k, g->exec = exec;
    *out = g;
    return DD_OK;
}

/* 1 when every linear of every program runs on the tile (a model whose linears do not, quantized weights or widths
 * off the tile, would run them on the frame kernel: slower than the latency executor's groups) */
int tp_covers(const tp_exec *x) {
    if (!x) return 0;
    for (int v = 0; v < NPROG; v++)
        for (int i = 0; i < x->st->nprog[v]; i++) {
            const cu_op *o = &x->st->h_prog[v][i];
            if (o->type == CU_OP_LINEAR && !tp_suits(x, &o->lin, 1)) return 0;
        }
    return 1;
}

/* One frame of program v for n streams on `stream`, no host synchronisation: inside a caller's stream capture the
 * launches themselves; else the frame's graph when (v, n, sampling) was seen before, captured the second time. */
dd_status tp_run(tp_exec *x, int v, int n, float temp, int topk, cudaStream_t stream, dd_error *err) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CU_TRY(cudaStreamIsCapturing(stream, &cs), err, "stream capture status");
    if (cs != cudaStreamCaptureStatusNone) return tp_enqueue(x, v, n, temp, topk, stream, err);
    const tp_key k = {v, n, topk, temp};
    tp_graph *g = NULL;
    for (int i = 0; i < TP_GRAPHS && !g; i++)
        if (x->g[i].exec && tp_same(&x->g[i].k, &k)) g = &x->g[i];
    if (!g) {
        int seen = 0;
        for (int i = 0; i < x->nseen && !seen; i++) seen = tp_same(&x->seen[i], &k);
        if (!seen) {
            x->seen[x->nseen < TP_SEEN ? x->nseen++ : (int)(x->tick % TP_SEEN)] = k;
            x->tick++;
            return tp_enqueue(x, v, n, temp, topk, stream, err);
        }
        dd_status s = tp_capture(x, &k, &g, err);
        if (s) return s;
    }
    g->used = ++x->tick;
    CU_TRY(cudaGraphLaunch(g->exec, stream), err, "frame graph launch");
    return DD_OK;
}
