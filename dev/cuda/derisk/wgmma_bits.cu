/* De-risk: does a Hopper wgmma chain give the same fp32 bits as the engine's mma.sync m16n8k16 chain?
 *
 * Why: the numerics contract (src/cuda/cu_common.cuh) fixes how every output element is accumulated: per chunk of
 * CU_CKT = 8 k-tiles (128 columns), from an accumulator of +0, per k-tile d = mma(W, hi, d) then d = mma(W, lo, d)
 * with mma.sync.m16n8k16 (bf16 in, f32 accumulate; weights as A, the activation terms hi = bf16(x),
 * lo = bf16(x - hi) as B), the chunk partials then summed in chunk order in plain fp32. A large-batch executor on
 * wgmma.mma_async (m64nNk16, fp32 accumulators in registers) keeps the contract only if its chunk partials come out
 * bit-identical to the mma.sync chain's for the same products in the same order. The fitted model of one op
 * (CUDA_V2.md: products and c truncated to 2^(emax-26), exact sum, round toward zero) says nothing about wgmma,
 * which may add its 16 products in another tree or keep more bits; this program checks the hardware.
 *
 * Variants (each: every output of every case compared bit for bit with the mma.sync chain, see "Checked"):
 *   wA_*  weights as A (64 rows), activation terms as B (N tokens): D[row][token], the engine's orientation;
 *   xA_*  activation terms as A (64 tokens), weights as B (N rows): D[token][row], the transposed orientation;
 *   *_smem_*  A from shared memory (descriptor), *_reg_*  A from registers (B is always in shared memory);
 *   N = 64, 128, 256 (m64n64k16, m64n128k16, m64n256k16);
 *   chain128  K = 128 (one chunk): per k-tile the hi-term wgmma then the lo-term wgmma, 16 dependent ops, from an
 *             accumulator zeroed in registers with scale-d = 1 (what mma.sync does with C = +0);
 *   chain128_sd0  the same, but the first op has scale-d = 0 (the accumulator, poisoned with NaN, is ignored), the
 *             usual way to start a wgmma accumulation: is "0 + products" the same as "products" (signed zeros)?
 *   single16C K = 16, one op (hi term only) onto a random fp32 C preloaded in the accumulator (scale-d = 1),
 *             compared with one mma.sync with the same C.
 * Cases: ROWS = 256 weight rows x TOKS = 256 tokens each (every variant tiles the whole 256 x 256 output), 256
 * cases a phase: random bf16 weights and activation terms with normal, wide (any exponent, or 2^-62..2^56 so that
 * no product overflows), subnormal, zero and signed-zero values, the engine's hi/lo split or independent terms,
 * zero tokens (all +0, all -0, random signs) against all-positive and all-negative weight rows, and in half of the
 * cases rows that negate other rows, and rows whose second half of K cancels the first half exactly or to the last
 * bit against tokens whose halves repeat (catastrophic cancellation exposes the accumulator's rounding). The
 * contract's inputs are finite; products of the any-exponent flavour can still overflow fp32 (inf/NaN outputs):
 * those are compared bit for bit too and counted apart.
 *
 * wgmma details (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply"; CUTLASS cute/atom/mma_traits_sm90_gmma.hpp):
 *   - one warpgroup (the CTA's 128 threads) per 64 x N tile; shared-memory operands K-major ("no transpose"),
 *     no swizzle (layout type 0, CUTLASS INTERLEAVE): 8 x 8 core matrices of 8 rows x 16 bytes, each stored as 128
 *     contiguous bytes. We store core matrix (r / 8, k / 8) of a tile with K columns at byte
 *     ((r / 8) (K / 8) + k / 8) 128, its row r % 8 at + 16 (r % 8). Descriptor: start >> 4 (bits 0-13), leading
 *     byte offset LBO >> 4 (bits 16-29) = 128 B, the step between the two core matrices of a k16 slice that are
 *     adjacent in K; stride byte offset SBO >> 4 (bits 32-45) = 16 K B, the step from rows 8i..8i+7 to the next 8
 *     rows; base offset 0 (bits 49-51), layout 0 (bits 62-63). K-tile j starts 256 j bytes in. (CUTLASS: K-major
 *     INTERLEAVE is ((8,m),2):((1,SBO),LBO) in 16-byte units.)
 *   - shared memory written by plain stores is read by wgmma through the async proxy: every writer runs
 *     fence.proxy.async.shared::cta, then __syncthreads, before the first wgmma.
 *   - registers: accumulator (and A fragments) written, then wgmma.fence; the 16 (or 1) wgmmas on the same
 *     accumulator need no fence between them; commit_group, wait_group 0, then the accumulator is read.
 *   - accumulator fragment of m64nNk16 (f32): warp w of the warpgroup holds rows 16 w .. 16 w + 15; lane l holds,
 *     for 8-column block j, d[4j], d[4j+1] at (row 16 w + l/4, cols 8 j + 2 (l%4) + {0,1}) and d[4j+2], d[4j+3]
 *     at row 16 w + l/4 + 8. A from registers (bf16): per warp the m16n8k16 A fragment of rows 16 w ..:
 *     a0 = (row l/4, k 2 (l%4) + {0,1}), a1 = row + 8, a2 = k + 8, a3 = row + 8 and k + 8 (two bf16 per register,
 *     the lower k in the low half).
 *
 * Checked: outputs poisoned before each launch; every output of every variant (and of the mma.sync chain itself) is
 * compared with a float64 host sum of the same products: |got - ref| <= 1e-4 sum |products| (+ |C|) + 2^-110 (the
 * floor: products below fp32's range are lost). The mma.sync chain's own error reaches 8.1e-6 of sum |products| on
 * this data (printed per variant), so 1e-5 would leave little room and a wgmma that rounds a little differently
 * could be misreported as a layout failure; a wrong layout, descriptor or A fragment misses by ~1e4 times the
 * tolerance (tried on an H200: LBO 256, swapped accumulator columns, swapped a1/a2 registers: every affected variant
 * fails the self-check) and is reported as "layout/self-check failed", never as different numerics. Outputs whose
 * sum of |products| reaches 2^127 (fp32 overflow possible) are not self-checked (counted). Prints per variant the
 * differing outputs and bits with a few examples, a RESULT line, and SUMMARY; FAIL (exit 1) on any difference,
 * self-check failure or CUDA error.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/derisk/wgmma_bits.cu -o wgmma_bits */
#include "derisk.cuh"

#include <math.h>
#include <string.h>
#include <thread>

#define ROWS 256  /* weight rows of a case */
#define TOKS 256  /* tokens of a case */
#define NCASE 256 /* cases a phase */
#define OUTS ((size_t)ROWS * TOKS)

/* ---- device: mma.sync (the engine's op, src/cuda/cu_mma.cuh cu_mma) ------------------------------------------ */
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two bf16 at p (p[0] in the low half): 4-byte aligned because k is even */
__device__ __forceinline__ uint32_t ld2(const uint16_t *p) { return *(const uint32_t *)p; }

/* the engine's chain, one warp per (case, 16-row m-tile, 8-token n-tile): A = W tile, B = the activation terms;
 * d from C (or +0), per k-tile d = mma(W, hi, d), then (nterm 2) d = mma(W, lo, d). out [case][row][token] */
__global__ void k_mma(const uint16_t *W, const uint16_t *Xh, const uint16_t *Xl, const float *C, int K, int nterm,
                      float *out) {
    const int wid = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31, g = lane >> 2,
              c = lane & 3;
    const int cs = wid / ((ROWS / 16) * (TOKS / 8)), mt = wid / (TOKS / 8) % (ROWS / 16), nt = wid % (TOKS / 8);
    if (cs >= NCASE) return;
    const uint16_t *w = W + ((size_t)cs * ROWS + mt * 16) * K, *xh = Xh + ((size_t)cs * TOKS + nt * 8) * K,
                   *xl = Xl + ((size_t)cs * TOKS + nt * 8) * K;
    const size_t o0 = cs * OUTS + (size_t)(mt * 16 + g) * TOKS + nt * 8 + 2 * c, o1 = o0 + 8 * TOKS;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (C) d[0] = C[o0], d[1] = C[o0 + 1], d[2] = C[o1], d[3] = C[o1 + 1];
    for (int k0 = 0; k0 < K; k0 += 16) {
        const int ka = k0 + 2 * c, kb = ka + 8;
        const uint32_t a[4] = {ld2(w + g * K + ka), ld2(w + (g + 8) * K + ka), ld2(w + g * K + kb),
                               ld2(w + (g + 8) * K + kb)};
        mma16816(d, a, ld2(xh + g * K + ka), ld2(xh + g * K + kb));
        if (nterm > 1) mma16816(d, a, ld2(xl + g * K + ka), ld2(xl + g * K + kb));
    }
    out[o0] = d[0], out[o0 + 1] = d[1], out[o1] = d[2], out[o1 + 1] = d[3];
}

/* ---- device: wgmma --------------------------------------------------------------------------------------------- */
__device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0(void) { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* generic-proxy stores to shared memory -> visible to the async proxy (wgmma operand reads) */
__device__ __forceinline__ void fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* pins register values at this point: the compiler may not move their writes below or their reads above it (the
 * registers belong to in-flight wgmma between wgmma.fence and wait_group) */
template <int NA> __device__ __forceinline__ void reg_fence(float (&d)[NA]) {
#pragma unroll
    for (int i = 0; i < NA; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void reg_fence(uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) asm volatile("" : "+r"(a[i])::"memory");
}

/* shared-memory matrix descriptor: K-major, no swizzle, LBO = 128 B (K-adjacent core matrices), SBO = 16 K B (the
 * next 8 rows) for a tile stored as pack() below stores it; a = shared address of the k-tile's first core matrix */
template <int K> __device__ __forceinline__ u64 desc_nosw(uint32_t a) {
    return (u64)((a & 0x3FFFFu) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)((16 * K) >> 4) << 32);
}
/* rows [0, n) of a row-major [n][K] bf16 matrix -> s in the canonical no-swizzle K-major layout: core matrix
 * (r / 8, k / 8) at ((r / 8) (K / 8) + k / 8) 128 bytes, its row r % 8 at + 16 (r % 8). All CTA threads. */
template <int K> __device__ void pack(unsigned char *s, const uint16_t *src, int n) {
    for (int i = threadIdx.x; i < n * (K / 8); i += blockDim.x) {
        const int r = i / (K / 8), k8 = i % (K / 8);
        *(uint4 *)(s + ((r / 8) * (K / 8) + k8) * 128 + (r % 8) * 16) = *(const uint4 *)(src + (size_t)r * K + k8 * 8);
    }
}

#define ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define ACC16(i) ACC4(i), ACC4(i + 4), ACC4(i + 8), ACC4(i + 12)
#define ACC32(i) ACC16(i), ACC16(i + 16)
#define ACC64(i) ACC32(i), ACC32(i + 32)
#define ACC128(i) ACC64(i), ACC64(i + 64)
#define D32                                                                                                        \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "  \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31"
#define D64                                                                                                        \
    D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "  \
        "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define D128                                                                                                       \
    D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "  \
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, " \
        "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, "  \
        "%121, %122, %123, %124, %125, %126, %127"
/* d (64 x N) = (scd ? d : 0) + A (64 x 16) . B (N x 16)^T. SS: A and B from shared memory (descriptors da, db),
 * operand numbers IA, IB, IS after the accumulators; scale-a = scale-b = 1, no transposes (K-major). RS: A from four
 * registers (operands IA..IA+3), the same otherwise (no transpose-a operand). */
#define WG_SS(SHAPE, DL, IA, IB, IS, ACCS)                                                                         \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS ", 0;\n wgmma.mma_async.sync.aligned." SHAPE          \
                 ".f32.bf16.bf16 {" DL "}, %" #IA ", %" #IB ", p, 1, 1, 0, 0;\n}"                                  \
                 : ACCS                                                                                            \
                 : "l"(da), "l"(db), "r"(scd)                                                                      \
                 : "memory")
#define WG_RS(SHAPE, DL, IA0, IA1, IA2, IA3, IB, IS, ACCS)                                                         \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS ", 0;\n wgmma.mma_async.sync.aligned." SHAPE          \
                 ".f32.bf16.bf16 {" DL "}, {%" #IA0 ", %" #IA1 ", %" #IA2 ", %" #IA3 "}, %" #IB ", p, 1, 1, 0;\n}"  \
                 : ACCS                                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scd)                                  \
                 : "memory")
/* the overload is picked by the accumulator array size: 32 (N 64), 64 (N 128), 128 (N 256) registers a thread */
__device__ __forceinline__ void wg_ss(float (&d)[32], u64 da, u64 db, int scd) {
    WG_SS("m64n64k16", D32, 32, 33, 34, ACC32(0));
}
__device__ __forceinline__ void wg_ss(float (&d)[64], u64 da, u64 db, int scd) {
    WG_SS("m64n128k16", D64, 64, 65, 66, ACC64(0));
}
__device__ __forceinline__ void wg_ss(float (&d)[128], u64 da, u64 db, int scd) {
    WG_SS("m64n256k16", D128, 128, 129, 130, ACC128(0));
}
__device__ __forceinline__ void wg_rs(float (&d)[32], const uint32_t (&a)[4], u64 db, int scd) {
    WG_RS("m64n64k16", D32, 32, 33, 34, 35, 36, 37, ACC32(0));
}
__device__ __forceinline__ void wg_rs(float (&d)[64], const uint32_t (&a)[4], u64 db, int scd) {
    WG_RS("m64n128k16", D64, 64, 65, 66, 67, 68, 69, ACC64(0));
}
__device__ __forceinline__ void wg_rs(float (&d)[128], const uint32_t (&a)[4], u64 db, int scd) {
    WG_RS("m64n256k16", D128, 128, 129, 130, 131, 132, 133, ACC128(0));
}

/* shared memory of k_wgmma: two A tiles (64 x K: term 0, term 1; none with A in registers), two B tiles (N x K) */
template <int N, bool AREG, int K> struct wgcfg {
    static constexpr int A_BYTES = AREG ? 0 : 2 * 64 * K * 2, B_BYTES = 2 * N * K * 2;
    static constexpr int SMEM = A_BYTES + B_BYTES + 1024 /* alignment */;
    static_assert(SMEM <= 227 * 1024, "shared memory");
};

/* one warpgroup per (case, 64-wide A block, N-wide B block); grid (NCASE, 4, 256 / N), 128 threads.
 * ORIENT 0: A = W rows, B = the activation term (hi, then lo): D[row][token]. ORIENT 1: A = the activation term,
 * B = W rows: D[token][row]. Term t of k-tile j: A_t . B_t with (A_0, B_0) = (W, hi) or (hi, W), (A_1, B_1) =
 * (W, lo) or (lo, W). The accumulator starts from C (or +0; NaN when sd0, whose first op has scale-d = 0).
 * out [case][row][token] in either orientation. */
template <int N, int ORIENT, bool AREG, int KT, int NTERM>
__global__ void __launch_bounds__(128, 1)
    k_wgmma(const uint16_t *W, const uint16_t *Xh, const uint16_t *Xl, const float *C, int sd0, float *out) {
    constexpr int K = 16 * KT, NA = N / 2;
    typedef wgcfg<N, AREG, K> G;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sm = smem_raw + ((1024 - (dr_smem(smem_raw) & 1023)) & 1023);
    unsigned char *sA[2] = {sm, sm + G::A_BYTES / 2}, *sB[2] = {sm + G::A_BYTES, sm + G::A_BYTES + G::B_BYTES / 2};
    const int cs = blockIdx.x, a0 = blockIdx.y * 64, b0 = blockIdx.z * N;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const uint16_t *w = W + (size_t)cs * ROWS * K, *xh = Xh + (size_t)cs * TOKS * K, *xl = Xl + (size_t)cs * TOKS * K;
    const uint16_t *srcA[2] = {ORIENT == 0 ? w : xh, ORIENT == 0 ? w : xl};
    const uint16_t *srcB[2] = {ORIENT == 0 ? xh : w, ORIENT == 0 ? xl : w};
    for (int t = 0; t < 2; t++) {
        if (!AREG) pack<K>(sA[t], srcA[t] + (size_t)a0 * K, 64);
        pack<K>(sB[t], srcB[t] + (size_t)b0 * K, N);
    }
    fence_proxy_async(); /* each writer's stores, before the barrier */
    __syncthreads();

    /* A fragments from registers: all k-tiles loaded before wgmma.fence (no register of an in-flight wgmma is
     * written afterwards) */
    uint32_t af[2][KT][4];
    if (AREG) {
        const int r = a0 + 16 * warp + g;
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
            for (int j = 0; j < KT; j++) {
                const uint16_t *p = srcA[t] + (size_t)r * K + 16 * j + 2 * c;
                af[t][j][0] = ld2(p), af[t][j][1] = ld2(p + 8 * K), af[t][j][2] = ld2(p + 8),
                af[t][j][3] = ld2(p + 8 * K + 8);
                reg_fence(af[t][j]);
            }
    }
    /* accumulator element (j, e): m = a0 + 16 warp + g + 8 (e / 2), n = b0 + 8 j + 2 c + e % 2 */
    float d[NA];
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int m = a0 + 16 * warp + g + 8 * (e >> 1), n = b0 + 8 * j + 2 * c + (e & 1);
            const int row = ORIENT == 0 ? m : n, tok = ORIENT == 0 ? n : m;
            d[4 * j + e] = C ? C[cs * OUTS + (size_t)row * TOKS + tok] : sd0 ? __int_as_float(0x7FC00000) : 0.0f;
        }
    reg_fence(d);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < KT; j++)
#pragma unroll
        for (int t = 0; t < 2; t++) {
            if (t >= NTERM) break;
            const int scd = sd0 && j == 0 && t == 0 ? 0 : 1;
            const u64 db = desc_nosw<K>(dr_smem(sB[t] + 256 * j));
            if (AREG) wg_rs(d, af[t][j], db, scd);
            else wg_ss(d, desc_nosw<K>(dr_smem(sA[t] + 256 * j)), db, scd);
        }
    wgmma_commit();
    wgmma_wait0();
    reg_fence(d);
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int m = a0 + 16 * warp + g + 8 * (e >> 1), n = b0 + 8 * j + 2 * c + (e & 1);
            const int row = ORIENT == 0 ? m : n, tok = ORIENT == 0 ? n : m;
            out[cs * OUTS + (size_t)row * TOKS + tok] = d[4 * j + e];
        }
}

/* ---- host: data ------------------------------------------------------------------------------------------------ */
static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

typedef struct phase {
    int K, nterm, with_c;
    std::vector<uint16_t> W, Xh, Xl; /* [case][ROWS][K], [case][TOKS][K] */
    std::vector<float> C;            /* [case][ROWS][TOKS] or empty */
    std::vector<double> ref, abssum; /* [case][ROWS][TOKS]: float64 sum of the products (+ C), sum of |.| */
    uint16_t *dW, *dXh, *dXl;
    float *dC, *dOut;
} phase;

/* case cs: flavours of weights (cs % 4) and activations (cs / 4 % 4), the engine's split or independent terms
 * (cs / 16 % 2), cancellation (cs / 32 % 2); flavour 1 (any exponent: most outputs of it overflow to inf) is the
 * finite wide flavour 4 in every other group of 64 cases. In every case row 4 mod 8 has only positive weights (and
 * with cancellation row 5 mod 8 = -row 4: only negative ones), and tokens 1, 9, 17 mod 32 are zeros: all +0, random
 * signs, all -0; so some outputs sum only +0 or only -0 products (onto C = +-0 in the single-op phase) */
static void gen(phase &P) {
    const int K = P.K;
    P.W.resize((size_t)NCASE * ROWS * K), P.Xh.resize((size_t)NCASE * TOKS * K), P.Xl.resize(P.Xh.size());
    P.C.assign(P.with_c ? (size_t)NCASE * OUTS : 0, 0.0f);
    for (int cs = 0; cs < NCASE; cs++) {
        const int wide = (cs / 64) % 2 ? 4 : 1;
        int fw = cs % 4, fx = (cs / 4) % 4;
        const int split = (cs / 16) % 2, cancel = (cs / 32) % 2;
        fw = fw == 1 ? wide : fw, fx = fx == 1 ? wide : fx;
        uint16_t *w = &P.W[(size_t)cs * ROWS * K], *xh = &P.Xh[(size_t)cs * TOKS * K],
                 *xl = &P.Xl[(size_t)cs * TOKS * K];
        for (int i = 0; i < ROWS * K; i++) w[i] = bf(fw);
        for (int r = 4; r < ROWS; r += 8)
            for (int k = 0; k < K; k++) w[r * K + k] &= 0x7FFFu;
        for (int t = 0; t < TOKS; t++)
            for (int k = 0; k < K; k++) {
                uint16_t &h = xh[t * K + k], &l = xl[t * K + k];
                if (t % 8 == 1) { /* a token of zeros: all +0 (t % 32 == 1), all -0 (17), random signs (9, 25) */
                    h = t % 32 == 1 ? 0 : t % 32 == 17 ? 0x8000u : (uint16_t)((rnd() & 1u) << 15);
                    l = t % 32 == 1 ? 0 : t % 32 == 17 ? 0x8000u : (uint16_t)((rnd() & 1u) << 15);
                } else if (split) { /* the engine's split: x = hi + lo, lo = bf16(x - hi) */
                    const float x = bf2f(bf(fx)) * (1.0f + (rnd() & 0xFFFF) * 0x1p-17f);
                    h = f2bf_rn(x);
                    l = f2bf_rn(x - bf2f(h));
                } else {
                    h = bf(fx);
                    l = bf(fx == 2 ? 2 : 3);
                }
            }
        if (cancel) {
            for (int r = 0; r < ROWS; r++)
                for (int k = 0; k < K; k++) {
                    if (r % 4 == 1) w[r * K + k] = w[(r - 1) * K + k] ^ 0x8000u; /* row r = -row r-1 */
                    else if (r % 4 == 2 && k >= K / 2) w[r * K + k] = w[r * K + k - K / 2] ^ 0x8000u; /* exact */
                    else if (r % 4 == 3 && k >= K / 2) w[r * K + k] = w[r * K + k - K / 2] ^ 0x8001u; /* last bit */
                }
            for (int t = 0; t < TOKS; t += 2) /* even tokens: second half of K repeats the first */
                for (int k = K / 2; k < K; k++)
                    xh[t * K + k] = xh[t * K + k - K / 2], xl[t * K + k] = xl[t * K + k - K / 2];
        }
        if (P.with_c)
            for (size_t i = 0; i < OUTS; i++) {
                float v;
                if (i % 5 == 4) v = bf2f((uint16_t)((rnd() & 1u) << 15)); /* +-0 */
                else {
                    const uint16_t b = bf(i % 5 == 3 ? 1 : 0);
                    v = bf2f(b) * (1.0f + (rnd() & 0xFFFF) * 0x1p-16f);
                    if (!isfinite(v)) v = bf2f(b);
                }
                P.C[(size_t)cs * OUTS + i] = v;
            }
    }
    /* float64 reference: bf16 x bf16 products are exact in float64, and a sum of <= 257 of them is within 2^-44 of
     * the exact sum relative to the sum of |terms|: far below the tolerance */
    P.ref.resize((size_t)NCASE * OUTS), P.abssum.resize((size_t)NCASE * OUTS);
    const int nth = std::max(1, std::min(64, (int)std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (int ti = 0; ti < nth; ti++)
        th.emplace_back([&P, K, ti, nth]() {
            std::vector<double> w((size_t)ROWS * K), h((size_t)TOKS * K), l((size_t)TOKS * K);
            for (int cs = ti; cs < NCASE; cs += nth) {
                for (size_t i = 0; i < w.size(); i++) w[i] = bf2f(P.W[(size_t)cs * ROWS * K + i]);
                for (size_t i = 0; i < h.size(); i++)
                    h[i] = bf2f(P.Xh[(size_t)cs * TOKS * K + i]), l[i] = bf2f(P.Xl[(size_t)cs * TOKS * K + i]);
                for (int r = 0; r < ROWS; r++)
                    for (int t = 0; t < TOKS; t++) {
                        const size_t o = (size_t)cs * OUTS + (size_t)r * TOKS + t;
                        double s = P.with_c ? P.C[o] : 0.0, as = fabs(s);
                        const double *wr = &w[(size_t)r * K], *hr = &h[(size_t)t * K], *lr = &l[(size_t)t * K];
                        for (int k = 0; k < K; k++) { /* (no "+ 0.0" for a missing term: -0 + +0 = +0) */
                            const double p = wr[k] * hr[k];
                            s += p, as += fabs(p);
                            if (P.nterm > 1) {
                                const double q = wr[k] * lr[k];
                                s += q, as += fabs(q);
                            }
                        }
                        P.ref[o] = s, P.abssum[o] = as;
                    }
            }
        });
    for (auto &x : th) x.join();
    CK(cudaMalloc(&P.dW, P.W.size() * 2));
    CK(cudaMalloc(&P.dXh, P.Xh.size() * 2));
    CK(cudaMalloc(&P.dXl, P.Xl.size() * 2));
    CK(cudaMalloc(&P.dOut, (size_t)NCASE * OUTS * 4));
    P.dC = NULL;
    if (P.with_c) CK(cudaMalloc(&P.dC, P.C.size() * 4));
    CK(cudaMemcpy(P.dW, P.W.data(), P.W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(P.dXh, P.Xh.data(), P.Xh.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(P.dXl, P.Xl.data(), P.Xl.size() * 2, cudaMemcpyHostToDevice));
    if (P.with_c) CK(cudaMemcpy(P.dC, P.C.data(), P.C.size() * 4, cudaMemcpyHostToDevice));
}
static void release(phase &P) {
    CK(cudaFree(P.dW));
    CK(cudaFree(P.dXh));
    CK(cudaFree(P.dXl));
    CK(cudaFree(P.dOut));
    if (P.dC) CK(cudaFree(P.dC));
}

/* ---- host: checks ---------------------------------------------------------------------------------------------- */
/* self-check of one output set against the float64 reference; returns the number over tolerance */
static long self_check(const phase &P, const std::vector<float> &got, const char *name) {
    long bad = 0, unchecked = 0;
    double maxrel = 0, maxtol = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double as = P.abssum[i];
        if (as >= 0x1p127) { /* fp32 overflow possible: inf/NaN are legitimate here */
            unchecked++;
            continue;
        }
        const double e = fabs((double)got[i] - P.ref[i]), tol = 1e-4 * as + 0x1p-110;
        if (as >= 0x1p-90) maxrel = std::max(maxrel, e / as); /* where the relative term dominates */
        maxtol = std::max(maxtol, e / tol);
        if (!(e <= tol)) { /* also catches NaN / inf */
            if (bad++ < 4)
                printf("  %s self-check: case %zu row %zu token %zu: got %08x (%.9g) float64 %.9g, sum |p| %.3g\n",
                       name, i / OUTS, i % OUTS / TOKS, i % TOKS, f2u(got[i]), got[i], P.ref[i], as);
        }
    }
    printf("#   %s self-check vs float64: max |got - ref| / sum|p| %.2e (sum|p| >= 2^-90), max |got - ref| / tolerance "
           "%.3f, %ld over tolerance, %ld not checked (sum|p| >= 2^127)\n",
           name, maxrel, maxtol, bad, unchecked);
    return bad;
}

/* what the reference outputs exercise (so an "identical" means something); ieee_negz: outputs whose float64 sum
 * is -0 (C and every product -0: IEEE addition keeps -0), and what the tensor core gave there */
static void describe(const phase &P, const std::vector<float> &o, const char *name) {
    long nz = 0, negz = 0, posz = 0, sub = 0, nonfin = 0, ieee_negz = 0, ieee_negz_got_pos = 0;
    for (size_t i = 0; i < o.size(); i++) {
        const uint32_t u = f2u(o[i]);
        if (u == 0) posz++;
        else if (u == 0x80000000u) negz++;
        else nz++;
        if ((u & 0x7F800000u) == 0 && (u & 0x7FFFFFu)) sub++;
        if ((u & 0x7F800000u) == 0x7F800000u) nonfin++;
        if (P.ref[i] == 0 && signbit(P.ref[i])) ieee_negz++, ieee_negz_got_pos += u == 0;
    }
    printf("#   %s outputs: %zu = %ld nonzero (%ld subnormal, %ld inf/NaN) + %ld +0 + %ld -0; %ld are -0 in IEEE "
           "arithmetic (C and all products -0), of which %ld came out +0\n",
           name, o.size(), nz, sub, nonfin, posz, negz, ieee_negz, ieee_negz_got_pos);
}

typedef void (*wg_launch)(const phase &P, int sd0);
template <int N, int ORIENT, bool AREG, int KT, int NTERM> static void launch_wg(const phase &P, int sd0) {
    typedef wgcfg<N, AREG, 16 * KT> G;
    if (P.nterm != NTERM) {
        printf("FAIL wgmma_bits: internal: phase has %d terms, kernel %d\n", P.nterm, NTERM);
        exit(1);
    }
    CK(cudaFuncSetAttribute(k_wgmma<N, ORIENT, AREG, KT, NTERM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            G::SMEM));
    k_wgmma<N, ORIENT, AREG, KT, NTERM><<<dim3(NCASE, 4, 256 / N), 128, G::SMEM>>>(P.dW, P.dXh, P.dXl, P.dC, sd0,
                                                                                  P.dOut);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
}
typedef struct variant {
    int n, orient, areg;
    wg_launch chain, single; /* K = 128 with two terms, K = 16 with one */
} variant;
#define V(N, O, R) {N, O, R, launch_wg<N, O, R, 8, 2>, launch_wg<N, O, R, 1, 1>}
static const variant VARIANTS[] = {V(64, 0, false), V(128, 0, false), V(256, 0, false), V(64, 0, true),
                                   V(128, 0, true), V(256, 0, true),  V(64, 1, false),  V(128, 1, false),
                                   V(256, 1, false), V(64, 1, true),  V(128, 1, true),  V(256, 1, true)};
#define NVAR (int)(sizeof(VARIANTS) / sizeof(VARIANTS[0]))

static std::vector<float> fetch(const phase &P) {
    std::vector<float> o((size_t)NCASE * OUTS);
    CK(cudaMemcpy(o.data(), P.dOut, o.size() * 4, cudaMemcpyDeviceToHost));
    return o;
}

/* the engine's chain on this phase's data; its own self-check. Returns the outputs (empty if the check failed) */
static std::vector<float> run_mma(const phase &P, const char *pname, int *nself, char *list, size_t list_size) {
    CK(cudaMemset(P.dOut, 0xFF, (size_t)NCASE * OUTS * 4)); /* NaN poison: an unwritten output cannot pass */
    const int warps = NCASE * (ROWS / 16) * (TOKS / 8);
    k_mma<<<warps / 8, 256>>>(P.dW, P.dXh, P.dXl, P.dC, P.K, P.nterm, P.dOut);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    std::vector<float> o = fetch(P);
    char name[64];
    snprintf(name, sizeof name, "mma.sync_%s", pname);
    describe(P, o, name);
    if (self_check(P, o, name)) {
        printf("FAIL wgmma_bits %s: layout/self-check failed (the mma.sync reference chain itself)\n", name);
        snprintf(list + strlen(list), list_size - strlen(list), " %s(self-check)", name);
        (*nself)++;
        o.clear();
    }
    return o;
}

/* one wgmma variant against the mma.sync outputs; returns 0 identical, 1 different, 2 self-check failed */
static int run_variant(const phase &P, const std::vector<float> &ref_mma, const variant &v, int sd0,
                       const char *pname, char *list, size_t list_size) {
    char name[96];
    snprintf(name, sizeof name, "%s_%s_n%d_%s%s", v.orient ? "xA" : "wA", v.areg ? "reg" : "smem", v.n, pname,
             sd0 ? "_sd0" : "");
    CK(cudaMemset(P.dOut, 0xFF, (size_t)NCASE * OUTS * 4));
    (P.K == 128 ? v.chain : v.single)(P, sd0);
    const std::vector<float> o = fetch(P);
    if (self_check(P, o, name)) {
        printf("FAIL wgmma_bits %s: layout/self-check failed (a wgmma layout, descriptor or fence bug, not a "
               "numerics result)\n",
               name);
        printf("RESULT wgmma_bits %s self-check-failed/%zu\n", name, o.size());
        snprintf(list + strlen(list), list_size - strlen(list), " %s(self-check)", name);
        return 2;
    }
    long diff = 0, bits = 0, nonfin = 0, shown = 0;
    for (size_t i = 0; i < o.size(); i++) {
        const uint32_t a = f2u(ref_mma[i]), b = f2u(o[i]);
        if (a == b) continue;
        diff++;
        bits += __builtin_popcount(a ^ b);
        nonfin += (a & 0x7F800000u) == 0x7F800000u || (b & 0x7F800000u) == 0x7F800000u;
        if (shown++ < 5)
            printf("  %s case %zu row %zu token %zu: mma.sync %08x (%a) wgmma %08x (%a), float64 %.9g\n", name,
                   i / OUTS, i % OUTS / TOKS, i % TOKS, a, ref_mma[i], b, o[i], P.ref[i]);
    }
    printf("#   %s: %ld of %zu outputs differ from mma.sync (%ld bits; %ld of them with inf/NaN on a side)\n", name,
           diff, o.size(), bits, nonfin);
    printf("RESULT wgmma_bits %s %ld/%zu\n", name, diff, o.size());
    if (diff) {
        printf("FAIL wgmma_bits %s: %ld outputs differ from the mma.sync chain\n", name, diff);
        snprintf(list + strlen(list), list_size - strlen(list), " %s", name);
    }
    fflush(stdout);
    return diff ? 1 : 0;
}

int main(void) {
    double mhz = 0;
    dr_banner("wgmma_bits", &mhz);
    int ndiff = 0, nself = 0, nvar = 0;
    char list[4096] = "";
    /* phase 1: one chunk (K = 128, hi then lo per k-tile, from +0); phase 2: single ops onto a random C */
    const struct {
        int K, nterm, with_c;
        const char *name;
    } phases[2] = {{128, 2, 0, "chain128"}, {16, 1, 1, "single16C"}};
    for (int ph = 0; ph < 2; ph++) {
        phase P;
        P.K = phases[ph].K, P.nterm = phases[ph].nterm, P.with_c = phases[ph].with_c;
        gen(P);
        printf("# phase %s: %d cases of %d rows x %d tokens, K %d, %s\n", phases[ph].name, NCASE, ROWS, TOKS, P.K,
               P.with_c ? "one op (hi term) onto a random C" : "per k-tile hi then lo, from +0");
        fflush(stdout);
        const std::vector<float> m = run_mma(P, phases[ph].name, &nself, list, sizeof list);
        if (!m.empty()) {
            for (int i = 0; i < NVAR; i++) {
                const int r = run_variant(P, m, VARIANTS[i], 0, phases[ph].name, list, sizeof list);
                nvar++, ndiff += r == 1, nself += r == 2;
            }
            if (!P.with_c) /* scale-d = 0 on the first op (smem A, N 128, both orientations) */
                for (int i = 0; i < NVAR; i++)
                    if (VARIANTS[i].n == 128 && !VARIANTS[i].areg) {
                        const int r = run_variant(P, m, VARIANTS[i], 1, phases[ph].name, list, sizeof list);
                        nvar++, ndiff += r == 1, nself += r == 2;
                    }
        }
        release(P);
    }
    const int fails = ndiff + nself;
    if (fails == 0)
        printf("SUMMARY wgmma_bits: identical: all %d wgmma variants (weights or activations as A, A from shared "
               "memory or registers, N 64/128/256; K=128 hi/lo chains, K=16 single ops onto C) bit-identical to "
               "the mma.sync m16n8k16 chain\n",
               nvar);
    else if (nself)
        printf("SUMMARY wgmma_bits: SELF-CHECK FAILED (inconclusive; %d self-check failures, %d of %d variants "
               "differ):%s\n",
               nself, ndiff, nvar, list);
    else
        printf("SUMMARY wgmma_bits: DIFFERENT in %d of %d variants:%s\n", ndiff, nvar, list);
    return fails != 0;
}
