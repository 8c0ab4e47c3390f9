/* De-risk: one exact linear of the throughput executor (issue 14) on wgmma + TMA, bit for bit against the engine.
 *
 * Problem: y (T, N) fp32 row-major = x (T, K) @ W^T under the numerics contract of src/cuda/cu_common.cuh: x split
 * n = hi + lo (two bf16 terms, hi = bf16(x), lo = bf16(x - hi)), W exact in bf16; per output (row j, token t) and per
 * chunk c of CU_CKT = 8 k-tiles (128 columns) a partial p_c from +0, per k-tile first W.hi then W.lo (cu_ktile's term
 * order), and acc = ((0 + p_0) + p_1) + ... in chunk order, in plain fp32. wgmma_bits.cu showed that wgmma m64nNk16
 * chains (A from registers or shared memory) give the mma.sync m16n8k16 chain's bits, so a tensor-core GEMM that
 * keeps this k order and chunk structure is bit-identical to the engine at any batch size.
 *
 * Shapes (N x K): GPT dims qkv 3072x1024, out 1024x1024, fc1 4096x1024, fc2 1024x4096; CSM-1B depth decoder
 * (src/model/synth.c "csm": D 1024, F 8192, SwiGLU) csm_fc1 16384x1024 (gate and up), csm_fc2 1024x8192; at T = 128,
 * 256, 512, 1024 tokens. Requires N % 128 == 0, T % 128 == 0, K % 128 == 0 (no tails: this is a microbenchmark).
 *
 * Kernels:
 *   k_split   x (T, K) fp32 -> hi, lo (T, K) bf16 row-major (the engine's cu_split_pack), the TMA source.
 *   k_tput<BN> the candidate, BN = 128 (below) or 64 tokens a CTA (m64n64k16, 32 KB stages: twice the CTAs at
 *             small T, half the activation bytes each; S = 1 only, RESULT tput_linear64). With pdl set: programmatic
 *             dependent launch (the first stages' weights before griddepcontrol.wait; the us_pdl column).
 *             CTA tile 128 weight rows x 128 tokens, 384 threads: warpgroups 0 and 1 consume (64 rows
 *             x 128 tokens each, wgmma m64n128k16 with A from registers), warpgroup 2 produces (one thread issues
 *             every copy; setmaxnreg 40 for it, 232 for the consumers). A pipeline stage is one k-block of 64
 *             columns (half a chunk) and holds: hi 128 tokens x 64 k and lo likewise, each one TMA box {64, 128}
 *             with the 128-byte swizzle (16 KB, the canonical K-major SW128 layout: row r at 128 r, its 16-byte
 *             piece q at position q ^ (r % 8); 1024-byte aligned), and the weights of the 8 m-tiles x 4 k-tiles in
 *             the engine's fragment layout (src/cuda/upload.cu: 512-byte tiles, m-tile major, so one m-tile's 4
 *             k-tiles are 2 KB contiguous: 8 plain bulk copies). 4 stages of 48 KB. Barriers: full[s] (the
 *             producer's arrive.expect_tx of 48 KB + the copies' complete_tx), empty[s] (one arrival from each of
 *             the 8 consumer warps once wgmma.wait_group says the stage's MMAs are done).
 *             Consumer warp q of warpgroup w owns m-tile 4 w + q: its A fragment of k-tile j is its lane's 16 bytes
 *             of the engine's tile (the m16n8k16 A fragment = wgmma's register-A fragment for rows 16 q..16 q+15,
 *             wgmma_bits.cu), read with one ld.shared.v4. B descriptors: K-major, SW128 (mode 1, bits 62-63),
 *             LBO 16 B (unused by swizzled K-major), SBO 1024 B (8 rows of 128 B), start + 32 j bytes for k-tile j
 *             of the k-block (the hardware swizzles the full address, hence the 1024-byte alignment); the encoding
 *             of wgmma.cu, whose results passed its float64 check on the H200.
 *             Per chunk: half h = 0, 1 (a stage each): wait full, load the 4 A fragments (16 registers; both halves'
 *             sets live: 32), wgmma.fence, 8 wgmmas (k-tile j: hi then lo, into the partial p), commit; then
 *             wait_group 1 (half 0 done: release its stage), wait_group 0 (release half 1), acc = acc + p (64 fp32
 *             adds, in chunk order), p = +0 in registers (the chain128 start wgmma_bits checked; not scale-d = 0).
 *             The drain at each chunk end idles this warpgroup's MMAs for a few hundred cycles per ~2000 of
 *             MMA work; both consumers read the same stages, so they tend to drain together and the other one
 *             may not fill the gap (if the rate falls short: offset them, e.g. CUTLASS-style ping-pong on two
 *             tiles, or a second p at the cost of 64 registers). Registers per consumer thread: p 64 + acc 64 +
 *             A 32 (ptxas: 168 at launch, no spills, no wgmma serialisation warning).
 *   split-K   S fixed slabs of sc = NC / S chunks (NC = K / 128) per output tile, grid = tiles x S. Slab 0 keeps the
 *             running sum from +0 over its chunks; a later slab cannot pre-sum its chunks (fp32 addition is not
 *             associative, and its first partial must be added onto slab 0's sum), so it stores each chunk partial
 *             p_c; k_reduce then computes y = (acc_0 + p_sc) + p_sc+1 + ... in chunk order (every SM, float4).
 *             Chosen over forwarding the running sum from slab to slab: a forward chain serialises S - 1 global
 *             round trips of a 64 KB tile (~1 us each) after the slabs' compute unless the later slabs buffer all
 *             their partials (64 KB each per CTA: no room beside the pipeline), while the partials cost bandwidth
 *             only: (NC - sc + 1) T N 4 bytes written and read through L2. S is printed; S = 1 (no split, y
 *             written directly) is always run, and S = the largest power of two with tiles x S <= SMs when > 1.
 *   k_ref_*   the reference: the engine's own large-batch schedule, cu_stage_big<WM_BF16> (x -> hi/lo in B-fragment
 *             order) and cu_gemm_big<DD_BF16, WM_BF16, 0> (mma.sync m16n8k16, 4 units x 128 tokens per block),
 *             included from src/cuda/cu_linear.cuh and launched as two kernels of CU_THREADS threads (frame.cu runs
 *             them as two phases of the frame kernel).
 *
 * Data: random bf16 weights, row-major on the host, permuted into the engine's fragment layout (one buffer serves
 * both kernels): per element 1/32 +0, 1/32 -0, 1/32 subnormal (or zero), 3/32 wide (2^-62..2^56), 4/32 mid-wide
 * (2^-27..2^32), the rest 2^-7..2^6; every 61st row all signed zeros, every 61st (+1) row all positive. fp32
 * activations: 1/32 +0, 1/32 -0, 2/32 wide (2^-40..2^40), the rest 2^-8..2^4 with random mantissas (lo != 0); every
 * 53rd token all signed zeros. No product or sum overflows.
 * Checked: outputs poisoned (NaN) before each run; every output of k_tput (after k_reduce when S > 1) compared bit
 * for bit with the reference (diff = number of differing outputs, must be 0); the reference itself on 1024 sampled
 * outputs against a float64 sum of w x: |got - ref| <= 1e-4 sum |w x| + 2^-110 (a wrong fragment permutation here
 * would be shared by both kernels, so it is caught here, not by diff). Timing: cudaEvent around each launch, median
 * of 50 after 3 warm-up runs; "us" with the L2 warm (the weights of one GPT op and the activations stay resident;
 * the split's us excluded), "us_cold" with a 256 MB memset between launches (outside the events) so the weights
 * come from HBM. TFLOPs = 4 N K T (two terms) / time. Prints RESULT lines per (shape, T), SUMMARY, exit 1 on any
 * difference, self-check failure, pipeline timeout or CUDA error. Optional arguments: a shape name and a T.
 *
 * Status: compiled (CUDA 13, sm_90a), not yet run on a GPU when committed.
 *
 *   cd dev/cuda/derisk && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
 *       -I ../../../src -I ../../../include tput_linear.cu -o tput_linear && ./tput_linear [shape] [T] */
#include "derisk.cuh"

#include <cuda.h> /* CUtensorMap and its enums only: the encoder comes through cudaGetDriverEntryPointByVersion */
#include <math.h>
#include <string.h>

#include "cuda/cu_linear.cuh"

#define TL_BM 128                                    /* weight rows per CTA (two consumer warpgroups x 64) */
#define TL_BN 128                                    /* tokens per CTA */
#define TL_BK 64                                     /* k columns per stage: 4 k-tiles, half a chunk */
#define TL_STAGES 4
#define TL_HI_BYTES (TL_BN * TL_BK * 2)              /* one TMA box: 16 KB */
#define TL_A_BYTES ((TL_BM / 16) * (TL_BK / 16) * 512) /* 8 m-tiles x 4 k-tiles of 512 B: 16 KB */
#define TL_STAGE_BYTES (2 * TL_HI_BYTES + TL_A_BYTES) /* 48 KB */
#define TL_SMEM (TL_STAGES * TL_STAGE_BYTES + 1024 /* alignment */ + 256 /* barriers */)
#define TL_THREADS 384
#define TL_CONSUMER_WARPS 8
#define TL_TIMEOUT_NS 2000000000ull
static_assert(CU_CKT * 16 == 2 * TL_BK, "a chunk is two stages");
static_assert(TL_SMEM <= 227 * 1024, "shared memory");

/* ---- device: PTX wrappers -------------------------------------------------------------------------------------- */
__device__ __forceinline__ void tl_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tl_wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tl_wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* pins register values here: the compiler may not move their writes below or their reads above this point (they
 * belong to in-flight wgmma between issue and wait_group) */
__device__ __forceinline__ void tl_reg_fence(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void tl_reg_fence(uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) asm volatile("" : "+r"(a[i])::"memory");
}

/* K-major, 128B-swizzled operand at shared address a (1024-byte aligned tile; + 32 j bytes for k-tile j) */
__device__ __forceinline__ u64 tl_desc_sw128(uint32_t a) {
    return (u64)((a & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

#define TL_A4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TL_A16(i) TL_A4(i), TL_A4(i + 4), TL_A4(i + 8), TL_A4(i + 12)
#define TL_A64 TL_A16(0), TL_A16(16), TL_A16(32), TL_A16(48)
/* d (64 x 128 fp32, 64 registers a thread) += A (64 x 16 bf16, four registers: the m16n8k16 A fragment of the warp's
 * 16 rows) . B (128 x 16 bf16, K-major in shared memory, descriptor db)^T. scale-d = 1, scale-a = scale-b = 1,
 * B not transposed. Operands: d 0..63, a 64..67, db 68. */
__device__ __forceinline__ void tl_wgmma_rs(float (&d)[64], const uint32_t (&a)[4], u64 db) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
                 : TL_A64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}

#define TL_A32 TL_A16(0), TL_A16(16)
/* the same with 64 tokens: d 64 x 64 fp32 (32 registers a thread), B 64 x 16 (m64n64k16) */
__device__ __forceinline__ void tl_wgmma_rs(float (&d)[32], const uint32_t (&a)[4], u64 db) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
                 : TL_A32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}
__device__ __forceinline__ void tl_reg_fence(float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* 2D TMA load of box {TL_BK, BN} at (k0, t0) into this CTA's shared memory, completion on bar */
__device__ __forceinline__ void tl_tma_2d(void *dst, const CUtensorMap *tm, int k0, int t0, u64 *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(dr_smem(dst)),
                 "l"((u64)tm), "r"(k0), "r"(t0), "r"(dr_smem(bar))
                 : "memory");
}
__device__ __forceinline__ void tl_prefetch_tmap(const CUtensorMap *tm) {
    asm volatile("prefetch.tensormap [%0];" ::"l"((u64)tm) : "memory");
}

/* ---- device: the candidate --------------------------------------------------------------------------------- */
struct tl_args {
    float *y;             /* (T, N) row-major: written when S == 1 */
    float *part;          /* S > 1: [NC - sc + 1][T][N]: slab 0's running sum, then the partials of chunks sc.. */
    const uint8_t *wfrag; /* W in the engine's bf16 fragment layout (KT = K / 16 k-tiles a row of tiles) */
    int N, K, T, S;
    int *err;             /* [0]: pipeline timeouts */
    int pdl;              /* programmatic dependent launch: the first stages' weights are requested before
                           * griddepcontrol.wait (they do not depend on the previous op), the activations after */
};

/* grid: (N / 128) (T / 128) S CTAs of TL_THREADS, TL_SMEM bytes; tm_hi, tm_lo: hi and lo (T, K) bf16 row-major,
 * box {64, 128}, 128B swizzle */
template <int BN>
__global__ void __launch_bounds__(TL_THREADS, 1)
    k_tput(const __grid_constant__ CUtensorMap tm_hi, const __grid_constant__ CUtensorMap tm_lo, const tl_args a) {
    constexpr int HI = BN * TL_BK * 2, SB = 2 * HI + TL_A_BYTES, NACC = BN / 2; /* box bytes, stage bytes, acc regs */
    static_assert(TL_STAGES * SB <= TL_STAGES * SB, "stages fit TL_SMEM");
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (dr_smem(smem_raw) & 1023)) & 1023);
    u64 *full = (u64 *)(smem + TL_STAGES * SB), *empty = full + TL_STAGES;
    const int TT = a.T / BN, KT = a.K / 16, NC = a.K / (16 * CU_CKT), sc = NC / a.S;
    const int tt = blockIdx.x % TT, z = (blockIdx.x / TT) % a.S, mb = blockIdx.x / (TT * a.S);
    const int c0 = z * sc, t0 = tt * BN, mt0 = mb * (TL_BM / 16);
    const int wg = threadIdx.x >> 7;
    const u64 deadline = dr_gtimer() + TL_TIMEOUT_NS;
    if (threadIdx.x == 0) {
        for (int s = 0; s < TL_STAGES; s++) dr_mbar_init(&full[s], 1), dr_mbar_init(&empty[s], TL_CONSUMER_WARPS);
        dr_fence_mbar_init();
    }
    __syncthreads(); /* the last block-wide barrier: the roles below never meet again */

    if (a.pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); /* the next op may start its prologue */
    if (wg == 2) { /* producer warpgroup: one thread issues every copy */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
        if (threadIdx.x != 256) return;
        tl_prefetch_tmap(&tm_hi);
        tl_prefetch_tmap(&tm_lo);
        const int kb0 = 2 * c0, kb1 = 2 * (c0 + sc);
        auto weights = [&](int kb, int s) {
            unsigned char *st = smem + s * SB;
            for (int i = 0; i < TL_BM / 16; i++)
                dr_bulk_g2s(st + 2 * HI + i * 2048,
                            a.wfrag + ((size_t)(mt0 + i) * KT + (size_t)kb * (TL_BK / 16)) * 512, 2048, &full[s]);
        };
        int pre = 0; /* stages whose weights are already requested */
        if (a.pdl) {
            for (; pre < TL_STAGES && kb0 + pre < kb1; pre++) {
                dr_mbar_expect_tx(&full[pre], (uint32_t)SB);
                weights(kb0 + pre, pre);
            }
            asm volatile("griddepcontrol.wait;" ::: "memory"); /* the previous op's outputs are visible from here */
        }
        int s = 0;
        uint32_t round = 0;
        for (int kb = kb0; kb < kb1; kb++) {
            if (round > 0 && !dr_mbar_wait(&empty[s], (round - 1) & 1u, deadline)) {
                atomicAdd(&a.err[0], 1);
                return;
            }
            unsigned char *st = smem + s * SB;
            if (kb - kb0 >= pre) dr_mbar_expect_tx(&full[s], (uint32_t)SB);
            tl_tma_2d(st, &tm_hi, kb * TL_BK, t0, &full[s]);
            tl_tma_2d(st + HI, &tm_lo, kb * TL_BK, t0, &full[s]);
            if (kb - kb0 >= pre) weights(kb, s);
            if (++s == TL_STAGES) s = 0, round++;
        }
        return;
    }

    /* consumers: warp q of warpgroup wg owns m-tile mt0 + 4 wg + q (rows 16 q.. of the warpgroup's 64) */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
    const int aoff = 2 * HI + (wg * 4 + warp) * 2048 + lane * 16;
    float acc[NACC], p[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f, p[i] = 0.0f;
    int s = 0;
    uint32_t round = 0;
    /* output (row, token) of accumulator element 4 jb + e */
    const int row0 = mb * TL_BM + wg * 64 + warp * 16 + g;
    for (int c = c0; c < c0 + sc; c++) {
        uint32_t af[2][4][4];
        int used[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!__all_sync(0xFFFFFFFFu, dr_mbar_wait(&full[s], round & 1u, deadline))) {
                if (lane == 0) atomicAdd(&a.err[0], 1);
                tl_wgmma_wait<0>(); /* (a pipeline bug, reported as a failed run; no MMA left in flight) */
                return;
            }
            const unsigned char *st = smem + s * SB;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint4 v = *(const uint4 *)(st + aoff + j * 512);
                af[h][j][0] = v.x, af[h][j][1] = v.y, af[h][j][2] = v.z, af[h][j][3] = v.w;
                tl_reg_fence(af[h][j]);
            }
            const uint32_t hb = dr_smem(st), lb = dr_smem(st + HI);
            if (h == 0) tl_reg_fence(p); /* p's zeroing stays above the fence */
            tl_wgmma_fence(); /* A registers written and (h = 0) p zeroed since the last wgmma */
#pragma unroll
            for (int j = 0; j < 4; j++) { /* the contract's term order per k-tile: W.hi, then W.lo */
                tl_wgmma_rs(p, af[h][j], tl_desc_sw128(hb + 32 * j));
                tl_wgmma_rs(p, af[h][j], tl_desc_sw128(lb + 32 * j));
            }
            tl_wgmma_commit();
            used[h] = s;
            if (++s == TL_STAGES) s = 0, round++;
        }
        tl_wgmma_wait<1>(); /* half 0's MMAs done: its stage can be refilled */
        __syncwarp();
        if (lane == 0) dr_mbar_arrive(&empty[used[0]]);
        tl_wgmma_wait<0>();
        tl_reg_fence(p);
        __syncwarp();
        if (lane == 0) dr_mbar_arrive(&empty[used[1]]);
        if (z == 0) {
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] = acc[i] + p[i]; /* chunk order: acc = acc + p_c */
        } else { /* a later slab: the chunk partial itself, added in order by k_reduce */
            float *dst = a.part + (size_t)(c - sc + 1) * a.T * a.N;
#pragma unroll
            for (int jb = 0; jb < BN / 8; jb++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dst[(size_t)(t0 + 8 * jb + 2 * cq + (e & 1)) * a.N + row0 + 8 * (e >> 1)] = p[4 * jb + e];
        }
#pragma unroll
        for (int i = 0; i < NACC; i++) p[i] = 0.0f; /* the next chunk's partial starts from +0 */
    }
    if (z == 0) {
        float *dst = a.S == 1 ? a.y : a.part;
#pragma unroll
        for (int jb = 0; jb < BN / 8; jb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dst[(size_t)(t0 + 8 * jb + 2 * cq + (e & 1)) * a.N + row0 + 8 * (e >> 1)] = acc[4 * jb + e];
    }
}

/* y[i] = ((part[0][i] + part[1][i]) + part[2][i]) + ... (part[0]: slab 0's running sum; then chunk partials in chunk
 * order), n % 4 == 0 */
__global__ void k_reduce(float *y, const float *part, int np, size_t n) {
    const size_t n4 = n / 4;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcg((const float4 *)part + i);
        for (int q = 1; q < np; q++) {
            const float4 w = __ldcg((const float4 *)(part + (size_t)q * n) + i);
            v.x = v.x + w.x, v.y = v.y + w.y, v.z = v.z + w.z, v.w = v.w + w.w;
        }
        ((float4 *)y)[i] = v;
    }
}

/* hi, lo (T, K) bf16 = the engine's split of x (T, K) fp32 (cu_split_pack: hi in the low half, lo in the high) */
__global__ void k_split(uint16_t *hi, uint16_t *lo, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t w = cu_split_pack(__ldg(x + i));
        hi[i] = (uint16_t)(w & 0xFFFFu), lo[i] = (uint16_t)(w >> 16);
    }
}

/* ---- device: the reference (the engine's large schedule) --------------------------------------------------- */
__global__ void __launch_bounds__(CU_THREADS, 1) k_ref_stage(const cu_linear L, int T, const cu_params P) {
    cu_stage_big<WM_BF16>(L, T, P);
}
#define REF_SMEM (2 * CU_BIG_NT * CU_CKT * 32 * 16) /* cu_gemm_big's two B buffers */
static_assert(REF_SMEM <= CU_ACT_BYTES, "reference shared memory");
__global__ void __launch_bounds__(CU_THREADS, 1) k_ref_gemm(const cu_linear L, int T, const cu_params P) {
    extern __shared__ uint4 ref_smem[];
    cu_smem sm;
    memset(&sm, 0, sizeof sm);
    sm.act = (uint32_t *)ref_smem;
    cu_gemm_big<DD_BF16, WM_BF16, 0>(L, T, P, sm);
}

/* ---- host -------------------------------------------------------------------------------------------------- */
typedef CUresult (*tl_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static tl_encode_fn tl_encode(void) {
    static tl_encode_fn fn = NULL;
    if (fn) return fn;
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) {
        printf("FAIL tput_linear: cuTensorMapEncodeTiled not found (driver entry point query %d)\n", (int)q);
        exit(1);
    }
    fn = (tl_encode_fn)f;
    return fn;
}
/* tensor map of a (T, K) bf16 row-major matrix: box {64 k, bn tokens}, 128-byte swizzle */
static CUtensorMap tl_map(const uint16_t *base, int T, int K, int bn = TL_BN) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)T}, strides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t box[2] = {TL_BK, (cuuint32_t)bn}, es[2] = {1, 1};
    const CUresult r = tl_encode()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("FAIL tput_linear: cuTensorMapEncodeTiled error %d (T %d, K %d)\n", (int)r, T, K);
        exit(1);
    }
    return m;
}

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* weights (row-major bf16 bits) and activations (fp32) with the flavours of the header comment */
static void gen_w(std::vector<uint16_t> &W, int N, int K) {
    W.resize((size_t)N * K);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K; k++) {
            uint16_t v;
            const uint32_t f = rnd() % 32;
            if (r % 61 == 7) v = (uint16_t)((rnd() & 1u) << 15);
            else if (f == 0) v = 0;
            else if (f == 1) v = 0x8000u;
            else if (f == 2) v = bf(2);
            else if (f < 6) v = bf(4);
            else if (f < 10) v = bf(3);
            else v = bf(0);
            if (r % 61 == 8) v &= 0x7FFFu;
            W[(size_t)r * K + k] = v;
        }
}
static void gen_x(std::vector<float> &X, int T, int K) {
    X.resize((size_t)T * K);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            const uint32_t f = rnd() % 32, sign = rnd() & 1u, man = rnd() & 0x7FFFFFu;
            uint32_t u;
            if (t % 53 == 5) u = sign << 31;
            else if (f == 0) u = 0;
            else if (f == 1) u = 0x80000000u;
            else if (f < 4) u = sign << 31 | (uint32_t)(127 - 40 + rnd() % 81) << 23 | man;
            else u = sign << 31 | (uint32_t)(127 - 8 + rnd() % 13) << 23 | man;
            X[(size_t)t * K + k] = u2f(u);
        }
}
/* row-major W -> the engine's fragment layout (src/cuda/upload.cu, bf16): tile (mt, kt) at (mt KT + kt) 512 bytes,
 * element (r, cc) of the tile at lane (r % 8) 4 + (cc % 8) / 2, slot (cc / 8) 4 + (r / 8) 2 + cc % 2 */
static void to_frag(std::vector<uint16_t> &F, const std::vector<uint16_t> &W, int N, int K) {
    const int KT = K / 16;
    F.assign((size_t)N * K, 0);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K; k++) {
            const int mt = r / 16, rr = r % 16, kt = k / 16, cc = k % 16;
            const int lane = (rr & 7) * 4 + ((cc & 7) >> 1), e = ((cc >> 3) ? 4 : 0) + ((rr >> 3) ? 2 : 0) + (cc & 1);
            F[((size_t)mt * KT + kt) * 256 + lane * 8 + e] = W[(size_t)r * K + k];
        }
}

static const struct shape {
    const char *name;
    int N, K;
} SHAPES[] = {{"qkv", 3072, 1024},     {"out", 1024, 1024},     {"fc1", 4096, 1024},
              {"fc2", 1024, 4096},     {"csm_fc1", 16384, 1024}, {"csm_fc2", 1024, 8192}};
static const int TS[] = {128, 256, 512, 1024};
#define TMAX 1024
#define REPS 50
#define FLUSH_BYTES ((size_t)256 << 20)

int main(int argc, char **argv) {
    double mhz = 0;
    const int nsm = dr_banner("tput_linear", &mhz);
    const char *only_shape = argc > 1 ? argv[1] : NULL;
    const int only_t = argc > 2 ? atoi(argv[2]) : 0;
    CK(cudaFuncSetAttribute(k_tput<TL_BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, TL_SMEM));
    CK(cudaFuncSetAttribute(k_tput<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, TL_SMEM));
    CK(cudaFuncSetAttribute(k_ref_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, REF_SMEM));
    int *d_err;
    void *d_flush;
    CK(cudaMalloc(&d_err, sizeof(int)));
    CK(cudaMalloc(&d_flush, FLUSH_BYTES));
    printf("# tput_linear: wgmma m64n128k16 (A = weights from registers via shared memory, B = hi/lo via TMA SW128), "
           "CTA 128 rows x 128 tokens, %d stages of %d KB, %d threads; reference = the engine's cu_stage_big + "
           "cu_gemm_big (mma.sync); us: L2 warm, us_cold: L2 flushed (256 MB memset between runs); median of %d\n",
           TL_STAGES, TL_STAGE_BYTES / 1024, TL_THREADS, REPS);
    long fails = 0, nrun = 0;
    for (const shape &sh : SHAPES) {
        if (only_shape && strcmp(only_shape, sh.name)) continue;
        const int N = sh.N, K = sh.K, KT = K / 16, NC = K / (16 * CU_CKT);
        std::vector<uint16_t> W, F;
        std::vector<float> X;
        gen_w(W, N, K);
        gen_x(X, TMAX, K);
        to_frag(F, W, N, K);
        uint8_t *d_w;
        float *d_x, *d_yref, *d_y;
        uint16_t *d_hi, *d_lo;
        uint4 *d_act;
        CK(cudaMalloc(&d_w, F.size() * 2));
        CK(cudaMalloc(&d_x, X.size() * 4));
        CK(cudaMalloc(&d_hi, X.size() * 2));
        CK(cudaMalloc(&d_lo, X.size() * 2));
        CK(cudaMalloc(&d_act, (size_t)TMAX * K * 8)); /* (T / 8) KT 32 uint4 */
        CK(cudaMalloc(&d_yref, (size_t)TMAX * N * 4));
        CK(cudaMalloc(&d_y, (size_t)TMAX * N * 4));
        CK(cudaMemcpy(d_w, F.data(), F.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_x, X.data(), X.size() * 4, cudaMemcpyHostToDevice));
        for (int T : TS) {
            if (only_t && T != only_t) continue;
            const size_t outs = (size_t)T * N;
            const double flops = 4.0 * N * K * T;
            /* the reference */
            cu_linear L;
            memset(&L, 0, sizeof L);
            L.w.type = DD_BF16, L.w.wm = WM_BF16, L.w.N = N, L.w.K = K, L.w.MT = N / 16, L.w.KT = KT;
            L.w.tile_bytes = 512, L.w.lane_bytes = 16, L.w.frag = d_w;
            L.norm = DD_NORM_NONE, L.act = DD_ACT_NONE, L.x = d_x, L.ldx = K, L.y = d_yref, L.ldy = N;
            L.tmul = 1, L.fuse = -1;
            cu_params P;
            memset(&P, 0, sizeof P);
            P.n = T, P.act = d_act;
            const int ref_items = ((N / 16 + CU_BIG_UNITS - 1) / CU_BIG_UNITS) * ((T / 8 + CU_BIG_NT - 1) / CU_BIG_NT);
            const int ref_grid = std::min(ref_items, nsm);
            auto ref_stage = [&]() { k_ref_stage<<<nsm, CU_THREADS>>>(L, T, P); };
            auto ref_gemm = [&]() { k_ref_gemm<<<ref_grid, CU_THREADS, REF_SMEM>>>(L, T, P); };
            CK(cudaMemset(d_yref, 0xFF, outs * 4));
            ref_stage();
            ref_gemm();
            CK_LAUNCH();
            CK(cudaDeviceSynchronize());
            std::vector<float> yref(outs), y(outs);
            CK(cudaMemcpy(yref.data(), d_yref, outs * 4, cudaMemcpyDeviceToHost));
            /* the reference against float64 on sampled outputs */
            long bad = 0;
            double maxrel = 0;
            for (int i = 0; i < 1024; i++) {
                const int t = (int)(((size_t)i * 7919u) % T), j = (int)(((size_t)i * 104729u + 13u) % N);
                double s = 0, as = 0;
                for (int k = 0; k < K; k++) {
                    const double pr = (double)bf2f(W[(size_t)j * K + k]) * (double)X[(size_t)t * K + k];
                    s += pr, as += fabs(pr);
                }
                const double got = yref[(size_t)t * N + j], e = fabs(got - s), tol = 1e-4 * as + 0x1p-110;
                if (as > 0x1p-90) maxrel = std::max(maxrel, e / as);
                if (!(e <= tol) && bad++ < 3)
                    printf("  %s T=%d reference self-check: token %d row %d: got %08x (%.9g) float64 %.9g sum|p| %.3g\n",
                           sh.name, T, t, j, f2u(yref[(size_t)t * N + j]), got, s, as);
            }
            if (bad) {
                printf("FAIL tput_linear %s T=%d: reference (engine mma.sync) self-check: %ld of 1024 sampled outputs "
                       "over tolerance (weight permutation or data bug)\n",
                       sh.name, T, bad);
                fails++;
            }
            long nz = 0, negz = 0;
            for (size_t i = 0; i < outs; i++) nz += f2u(yref[i]) != 0 && f2u(yref[i]) != 0x80000000u,
                                                negz += f2u(yref[i]) == 0x80000000u;
            const double ref_us = dr_time_us(ref_gemm, 3, REPS), ref_cold = dr_time_us(ref_gemm, 3, REPS, d_flush, FLUSH_BYTES);
            const double stage_us = dr_time_us(ref_stage, 3, REPS), ref_seq = dr_seq_us(ref_gemm, 20, 11);
            printf("RESULT tput_linear_ref shape=%s T=%d us=%.2f us_cold=%.2f us_seq=%.2f TFLOPs=%.1f stage_us=%.2f "
                   "selfcheck_bad=%ld maxrel=%.1e\n",
                   sh.name, T, ref_us, ref_cold, ref_seq, flops / ref_us * 1e-6, stage_us, bad, maxrel);
            printf("#   %s T=%d reference outputs: %zu = %ld nonzero + %ld +0 + %ld -0\n", sh.name, T, outs, nz,
                   (long)outs - nz - negz, negz);

            /* the candidate */
            const size_t nx = (size_t)T * K;
            auto split = [&]() { k_split<<<4 * nsm, 256>>>(d_hi, d_lo, d_x, nx); };
            split();
            CK_LAUNCH();
            CK(cudaDeviceSynchronize());
            const double split_us = dr_time_us(split, 3, REPS);
            const CUtensorMap mh = tl_map(d_hi, T, K), ml = tl_map(d_lo, T, K);
            const int tiles = (N / TL_BM) * (T / TL_BN);
            int sauto = 1;
            while (2 * sauto <= NC && NC % (2 * sauto) == 0 && tiles * 2 * sauto <= nsm) sauto *= 2; /* S | NC */
            const int svals[2] = {1, sauto};
            for (int si = 0; si < (sauto > 1 ? 2 : 1); si++) {
                const int S = svals[si], sc = NC / S, np = NC - sc + 1;
                float *d_part = NULL;
                if (S > 1) CK(cudaMalloc(&d_part, (size_t)np * outs * 4));
                tl_args A = {d_y, d_part, d_w, N, K, T, S, d_err, 0};
                auto run = [&]() {
                    k_tput<TL_BN><<<tiles * S, TL_THREADS, TL_SMEM>>>(mh, ml, A);
                    if (S > 1) k_reduce<<<4 * nsm, 256>>>(d_y, d_part, np, outs);
                };
                /* S = 1 as a sequence of programmatic dependent launches: each launch may start (and request its
                 * weights) while the previous one finishes; its activations are read after griddepcontrol.wait */
                tl_args Ap = A;
                Ap.pdl = 1;
                auto run_pdl = [&]() {
                    cudaLaunchConfig_t cfg = {};
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                    at[0].val.programmaticStreamSerializationAllowed = 1;
                    cfg.gridDim = dim3(tiles * S);
                    cfg.blockDim = dim3(TL_THREADS);
                    cfg.dynamicSmemBytes = TL_SMEM;
                    cfg.stream = 0;
                    cfg.attrs = at;
                    cfg.numAttrs = 1;
                    CK(cudaLaunchKernelEx(&cfg, k_tput<TL_BN>, mh, ml, Ap));
                };
                CK(cudaMemset(d_err, 0, sizeof(int)));
                CK(cudaMemset(d_y, 0xFF, outs * 4));
                if (d_part) CK(cudaMemset(d_part, 0xFF, (size_t)np * outs * 4));
                run();
                CK_LAUNCH();
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost));
                int herr = 0;
                CK(cudaMemcpy(&herr, d_err, sizeof(int), cudaMemcpyDeviceToHost));
                long diff = 0, shown = 0;
                for (size_t i = 0; i < outs; i++) {
                    const uint32_t u = f2u(yref[i]), v = f2u(y[i]);
                    if (u == v) continue;
                    if (shown++ < 4)
                        printf("  %s T=%d S=%d token %zu row %zu: reference %08x (%.9g) wgmma %08x (%.9g)\n", sh.name,
                               T, S, i / N, i % N, u, yref[i], v, y[i]);
                    diff++;
                }
                double us = 0, us_cold = 0, us_seq = 0, us_pdl = 0;
                long pdl_diff = 0;
                if (!herr) { /* (a timed-out pipeline is not timed: each run would wait for the deadline) */
                    us = dr_time_us(run, 3, REPS);
                    us_cold = dr_time_us(run, 3, REPS, d_flush, FLUSH_BYTES);
                    us_seq = dr_seq_us(run, 20, 11); /* 20 runs back to back, as ops of a sequence */
                    if (S == 1) {
                        us_pdl = dr_seq_us(run_pdl, 20, 11);
                        CK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost)); /* the PDL runs' output */
                        for (size_t i = 0; i < outs; i++) pdl_diff += f2u(yref[i]) != f2u(y[i]);
                    }
                    CK(cudaMemcpy(&herr, d_err, sizeof(int), cudaMemcpyDeviceToHost));
                }
                printf("RESULT tput_linear shape=%s T=%d S=%d us=%.2f us_cold=%.2f us_seq=%.2f us_pdl=%.2f pdl_diff=%ld "
                       "TFLOPs=%.1f (4*N*K*T flops) diff=%ld split_us=%.2f ctas=%d partial_MB=%.1f timeouts=%d\n",
                       sh.name, T, S, us, us_cold, us_seq, us_pdl, pdl_diff, us > 0 ? flops / us * 1e-6 : 0.0, diff,
                       split_us, tiles * S,
                       S > 1 ? (double)np * outs * 4 / 1048576.0 : 0.0, herr);
                if (diff || herr || pdl_diff) {
                    printf("FAIL tput_linear %s T=%d S=%d: %ld outputs differ from the engine (%ld in the PDL runs), %d "
                           "pipeline timeouts\n",
                           sh.name, T, S, diff, pdl_diff, herr);
                    fails++;
                }
                nrun++;
                fflush(stdout);
                if (d_part) CK(cudaFree(d_part));
            }
            { /* 64-token tiles (m64n64k16), S = 1: twice the CTAs of the 128-token tile, half the activation bytes
               * each (at T = 256 the 128x128 tile leaves 84 of 132 SMs idle for qkv) */
                const CUtensorMap mh64 = tl_map(d_hi, T, K, 64), ml64 = tl_map(d_lo, T, K, 64);
                const int tiles64 = (N / TL_BM) * (T / 64);
                tl_args A64 = {d_y, NULL, d_w, N, K, T, 1, d_err, 0};
                auto run64 = [&]() { k_tput<64><<<tiles64, TL_THREADS, TL_SMEM>>>(mh64, ml64, A64); };
                CK(cudaMemset(d_err, 0, sizeof(int)));
                CK(cudaMemset(d_y, 0xFF, outs * 4));
                run64();
                CK_LAUNCH();
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost));
                int herr = 0;
                CK(cudaMemcpy(&herr, d_err, sizeof(int), cudaMemcpyDeviceToHost));
                long diff = 0;
                for (size_t i = 0; i < outs; i++) diff += f2u(yref[i]) != f2u(y[i]);
                double us = 0, us_seq = 0;
                if (!herr) us = dr_time_us(run64, 3, REPS), us_seq = dr_seq_us(run64, 20, 11);
                printf("RESULT tput_linear64 shape=%s T=%d S=1 us=%.2f us_seq=%.2f TFLOPs=%.1f diff=%ld ctas=%d "
                       "timeouts=%d\n",
                       sh.name, T, us, us_seq, us > 0 ? flops / us * 1e-6 : 0.0, diff, tiles64, herr);
                if (diff || herr) {
                    printf("FAIL tput_linear64 %s T=%d: %ld outputs differ from the engine, %d pipeline timeouts\n",
                           sh.name, T, diff, herr);
                    fails++;
                }
                nrun++;
                fflush(stdout);
            }
        }
        CK(cudaFree(d_w));
        CK(cudaFree(d_x));
        CK(cudaFree(d_hi));
        CK(cudaFree(d_lo));
        CK(cudaFree(d_act));
        CK(cudaFree(d_yref));
        CK(cudaFree(d_y));
    }
    CK(cudaFree(d_err));
    CK(cudaFree(d_flush));
    if (fails == 0)
        printf("SUMMARY tput_linear: identical: %ld wgmma+TMA runs bit-identical to the engine's mma.sync schedule\n",
               nrun);
    else
        printf("SUMMARY tput_linear: FAILED: %ld failures in %ld runs\n", fails, nrun);
    return fails != 0;
}
