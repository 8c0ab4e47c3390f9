/* The fused norm-prologue linear of src/kernels.h on the device: y (T, N) = epilogue(prologue(x) (T, K) @ W^T).
 *
 * Two schedules compute the same numbers (the contract in cu_common.cuh):
 *   small (T <= 8 tokens, the staged row fits in shared memory; batch 1 lives here): every block owns a
 *     contiguous range of units (m-tiles of 16 weight rows, or gate/up pairs) and stages the T rows of x itself
 *     (norm statistics, normalization, bf16 split) into shared memory — no extra grid barrier. Warps take
 *     (unit, chunk of 8 k-tiles) items, so even 1 unit per block keeps 8 warps streaming its weights; the chunk
 *     partials are summed in chunk order in shared memory, then the epilogue writes y. The weights are read
 *     once, each 16-byte lane load one MMA operand, L2-prefetched one linear ahead; what limits it on the H200 is
 *     the chain of dependent L2 round trips per op (~9 us a block, docs/cuda_results.md), not bandwidth.
 *   large (more tokens): a first phase stages all T rows once into a global buffer in B-fragment order (plus the
 *     group sums for quantized weights); after a grid barrier, blocks take tiles of 4 units x 128 tokens, the B
 *     tile of each chunk in shared memory (cp.async, double-buffered), each warp 1 unit x 32 tokens with the
 *     accumulators in registers. The tiles are small for a compute-bound GEMM (mma.sync, not wgmma): far from
 *     the tensor-core peak at batch 256.
 */
#ifndef DD_CU_LINEAR_CUH
#define DD_CU_LINEAR_CUH

#include "cu_mma.cuh"

struct cu_smem {
    uint32_t *act; /* CU_ACT_BYTES */
    float4 *part;  /* [CU_PART_SLOTS][32] */
    float4 *acc;   /* [CU_ACC_SLOTS][32] */
    float *asum;   /* [CU_ASUM_FLOATS] */
    uint8_t *misc; /* CU_MISC_BYTES */
};

/* act(a + bias); SwiGLU: silu(a + bias) * (u + bias2). Shared by every executor's epilogue (same arithmetic). */
__device__ __forceinline__ float cu_epi_act(int act, const float *bias, const float *bias2, int j, float a, float u) {
    if (bias) a = a + __ldg(bias + j);
    float h;
    if (act == DD_ACT_GELU) {
        float e = erff(a * 0.70710678118654752f);
        h = 0.5f * a * (1.0f + e);
    } else if (act == DD_ACT_SWIGLU) {
        if (bias2) u = u + __ldg(bias2 + j);
        float si = a / (1.0f + expf(-a));
        h = si * u;
    } else {
        h = a;
    }
    return h;
}

/* y[t, j] = act(a + bias) (+ residual) (+ add); SwiGLU: silu(a + bias) * (u + bias2). */
__device__ __forceinline__ float cu_epilogue(const cu_linear &L, int t, int j, float a, float u) {
    float h = cu_epi_act(L.act, L.bias, L.bias2, j, a, u);
    if (L.res) h = h + __ldcg(L.res + (size_t)t * L.ldr + j);
    if (L.add) h = h + __ldcg(L.add + (size_t)t * L.lda + j);
    L.y[(size_t)t * L.ldy + j] = h;
    return h; /* the value written */
}

/* sum over one quantization group of the staged values (hi + lo), one warp, fixed order; pk(k) is the packed
 * word of element k of the group */
template <class PK>
__device__ __forceinline__ float cu_group_sum(PK pk, int gs, int lane) {
    float s = 0.0f;
    for (int k = lane; k < gs; k += 32) s += cu_packed_val(pk(k));
    return cu_warp_sum(s);
}

__device__ __forceinline__ void cu_units(int U, int &u0, int &u1) {
    u0 = (int)((long long)blockIdx.x * U / gridDim.x);
    u1 = (int)((long long)(blockIdx.x + 1) * U / gridDim.x);
}

/* ---- small schedule ------------------------------------------------------------------------------------- */

/* p = chunk c of m-tile mt against the staged tokens (T <= 8, one n-tile): the C fragment of this lane. */
template <int TYPE, int WM>
__device__ __forceinline__ void cu_chunk_small(float (&p)[4], const cu_mat &w, int mt, int c, const uint32_t *act,
                                               int SR, int T, const float *sasum, int lane) {
    const int kt0 = c * CU_CKT, nkt = min(CU_CKT, w.KT - kt0);
    const int g = lane >> 2, cq = lane & 3;
    const uint8_t *base = w.frag + ((size_t)mt * w.KT + kt0) * w.tile_bytes;
    /* fast types: all 8 fragment loads of the chunk in flight before the first MMA; slow types (f32, small-group
     * quantized: tests and odd models) are not unrolled, to keep the kernel small */
    constexpr bool FAST = WM == WM_BF16 || WM == WM_F16 || WM == WM_QINT;
    cu_raw_frag raw[FAST ? CU_CKT : 1];
    if (FAST) {
#pragma unroll
        for (int i = 0; i < CU_CKT; i++)
            if (i < nkt) cu_load_raw<TYPE>(raw[FAST ? i : 0], base + (size_t)i * w.tile_bytes, lane);
    }
    const uint32_t *brow = act + g * SR + kt0 * 16 + 2 * cq;
    float d[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    float ga[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    const int gkt = WM == WM_QINT ? w.group / 16 : 1;
    int gc = 0; /* i % gkt by counting (gkt is not a constant: a division each otherwise) */
    constexpr int UNR = FAST ? CU_CKT : 1;
#pragma unroll(UNR)
    for (int i = 0; i < CU_CKT; i++) {
        if (i < nkt) {
            if (!FAST) cu_load_raw<TYPE>(raw[0], base + (size_t)i * w.tile_bytes, lane);
            uint32_t b[1][4] = {{0u, 0u, 0u, 0u}};
            if (g < T) {
                uint2 l0 = *(const uint2 *)(brow + i * 16), l8 = *(const uint2 *)(brow + i * 16 + 8);
                b[0][0] = cu_hi_pair(l0.x, l0.y);
                b[0][1] = cu_hi_pair(l8.x, l8.y);
                b[0][2] = cu_lo_pair(l0.x, l0.y);
                b[0][3] = cu_lo_pair(l8.x, l8.y);
            }
            cu_afrag A;
            cu_make_a<TYPE, WM>(A, raw[FAST ? i : 0], w, mt, kt0 + i, lane);
            if (WM == WM_QINT) {
                if (gc == 0) ga[0][0] = ga[0][1] = ga[0][2] = ga[0][3] = 0.0f;
                cu_ktile<WM, 1>(ga, A, b);
                if (++gc == gkt) {
                    gc = 0;
                    int gi = (kt0 + i) / gkt; /* once a group */
                    float s0, b0, s1, b1;
                    cu_sb(w, mt, gi, g, s0, b0);
                    cu_sb(w, mt, gi, g + 8, s1, b1);
                    float a0 = 2 * cq < T ? sasum[(2 * cq) * w.NG + gi] : 0.0f;
                    float a1 = 2 * cq + 1 < T ? sasum[(2 * cq + 1) * w.NG + gi] : 0.0f;
                    cu_qint_group(d[0], ga[0], s0, b0, s1, b1, a0, a1);
                }
            } else {
                cu_ktile<WM, 1>(d, A, b);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; e++) p[e] = d[0][e];
}

#define CU_MISC_STATS 1536 /* misc: mean[8], rstd[8] of the staged rows */

/* Stage x rows 0..T-1 into act (packed hi/lo words, row stride SR, zero past K) and, for QINT, the group sums.
 * All threads load (8 loads in flight each, so one L2 round trip), one warp per row computes the statistics (the
 * same lane-strided sums as cu_stage_big, so both schedules normalize identically), all threads pack. */
template <int WM>
static __device__ __noinline__ void cu_stage_small(const cu_linear &L, int T, const cu_smem &sm) {
    const cu_mat &w = L.w;
    const int K = w.K, Kp = w.KT * 16, SR = cu_act_stride(w.KT), total = T * Kp;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const float *x = L.x;
    const int ldx = L.ldx, norm = L.norm;
    float *smean = (float *)(sm.misc + CU_MISC_STATS), *srstd = smean + CU_SMALL_T;
    for (int base = tid; base < total; base += CU_THREADS * 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int idx = base + u * CU_THREADS, t = idx / Kp, k = idx - t * Kp;
            v[u] = idx < total && k < K ? __ldcg(x + (size_t)t * ldx + k) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int idx = base + u * CU_THREADS, t = idx / Kp, k = idx - t * Kp;
            if (idx < total) ((float *)(sm.act + (size_t)t * SR))[k] = v[u];
        }
    }
    __syncthreads();
    if (norm != DD_NORM_NONE) {
        for (int t = warp; t < T; t += CU_WARPS) {
            const float *row = (const float *)(sm.act + (size_t)t * SR);
            float mean, rstd;
            cu_row_stats([&](int k) { return row[k]; }, K, norm, L.eps, lane, mean, rstd);
            if (lane == 0) {
                smean[t] = mean;
                srstd[t] = rstd;
            }
        }
        __syncthreads();
    }
    for (int idx = tid; idx < total; idx += CU_THREADS) {
        int t = idx / Kp, k = idx - t * Kp;
        uint32_t *row = sm.act + (size_t)t * SR;
        float v = ((const float *)row)[k];
        float mean = norm != DD_NORM_NONE ? smean[t] : 0.0f, rstd = norm != DD_NORM_NONE ? srstd[t] : 1.0f;
        row[k] = k < K ? cu_split_pack(cu_norm_val(v, k, norm, mean, rstd, L.norm_w, L.norm_b)) : 0u;
    }
    if (WM == WM_QINT) {
        __syncthreads();
        for (int it = warp; it < T * w.NG; it += CU_WARPS) {
            int t = it / w.NG, gi = it % w.NG;
            const uint32_t *row = sm.act + (size_t)t * SR + (size_t)gi * w.group;
            float s = cu_group_sum([&](int k) { return row[k]; }, w.group, lane);
            if (lane == 0) sm.asum[t * w.NG + gi] = s;
        }
    }
    __syncthreads();
}

/* The small schedule. Returns the number of units this block completed (0: the block had none). */
template <int TYPE, int WM>
static __device__ __noinline__ int cu_linear_small(const cu_linear &L, int T, const cu_smem &sm) {
    const cu_mat &w = L.w;
    const int halves = w.pair ? 2 : 1, U = w.MT / halves;
    int u0, u1;
    cu_units(U, u0, u1);
    if (u0 >= u1) return 0;
    cu_stage_small<WM>(L, T, sm);
    const int SR = cu_act_stride(w.KT);
    const int NC = (w.KT + CU_CKT - 1) / CU_CKT;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    /* K past one slab (cu_common.cuh's contract): acc holds the open slab's running sums, its upper half the closed
     * slabs' sums, which a slab joins when the next slab's first chunk comes; the total moves to acc at the end */
    const bool slabs = NC > CU_SLC;
    const int SO = CU_ACC_SLOTS / 2 * 32, UG = (slabs ? CU_ACC_SLOTS / 2 : CU_ACC_SLOTS) / halves;
    for (int ua = u0; ua < u1; ua += UG) {
        const int nu = min(UG, u1 - ua), slots = nu * halves;
        int CR = CU_PART_SLOTS / slots;
        if (CR < 1) CR = 1;
        if (CR > NC) CR = NC;
        for (int c0 = 0; c0 < NC; c0 += CR) {
            const int nc = min(CR, NC - c0), items = slots * nc;
            for (int it = warp; it < items; it += CU_WARPS) {
                int ci = it % nc, sl = it / nc, h = sl % halves, ul = sl / halves;
                int mt = w.pair ? 2 * (ua + ul) + h : ua + ul;
                float p[4];
                cu_chunk_small<TYPE, WM>(p, w, mt, c0 + ci, sm.act, SR, T, sm.asum, lane);
                sm.part[it * 32 + lane] = make_float4(p[0], p[1], p[2], p[3]);
            }
            __syncthreads();
            /* the first slab boundary in the round (nc: none) */
            const int gb = slabs ? max((c0 + CU_SLC - 1) / CU_SLC * CU_SLC, CU_SLC) - c0 : nc;
            for (int idx = tid; idx < slots * 32; idx += CU_THREADS) {
                int sl = idx >> 5, ln = idx & 31;
                float4 a = c0 == 0 ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : sm.acc[idx];
                for (int ci = 0, e = min(gb, nc);; e = min(e + CU_SLC, nc)) {
                    for (; ci < e; ci++) {
                        float4 q = sm.part[(sl * nc + ci) * 32 + ln];
                        a.x = a.x + q.x;
                        a.y = a.y + q.y;
                        a.z = a.z + q.z;
                        a.w = a.w + q.w;
                    }
                    if (ci == nc) break;
                    /* chunk c0 + ci starts a slab: the slab before it joins the closed slabs' sum */
                    sm.acc[SO + idx] = c0 + ci > CU_SLC ? cu_add4(sm.acc[SO + idx], a) : a;
                    a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                if (slabs && c0 + nc == NC) a = cu_add4(sm.acc[SO + idx], a); /* NC > CU_SLC: a slab closed before */
                sm.acc[idx] = a;
            }
            __syncthreads();
        }
        for (int idx = tid; idx < nu * 16 * T; idx += CU_THREADS) {
            int r = idx & 15, t = (idx >> 4) % T, ul = idx / (16 * T);
            int j = (ua + ul) * 16 + r;
            if (j >= w.N) continue;
            int ln = (r & 7) * 4 + (t >> 1), e = ((r >> 3) << 1) | (t & 1);
            float a = ((const float *)&sm.acc[(ul * halves) * 32 + ln])[e];
            float u = w.pair ? ((const float *)&sm.acc[(ul * halves + 1) * 32 + ln])[e] : 0.0f;
            cu_epilogue(L, t, j, a, u);
        }
        __syncthreads();
    }
    return u1 - u0;
}

/* ---- large schedule ------------------------------------------------------------------------------------- */

/* Phase 1: every warp of the grid stages whole rows into P.act ([nt][kt][lane] uint4 {hi01, hi89, lo01, lo89})
 * and the group sums into P.asum ([t][NG]). */
template <int WM>
static __device__ __noinline__ void cu_stage_big(const cu_linear &L, int T, const cu_params &P) {
    const cu_mat &w = L.w;
    const int K = w.K, KT = w.KT;
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * CU_WARPS + (threadIdx.x >> 5), GW = gridDim.x * CU_WARPS;
    for (int t = gw; t < T; t += GW) {
        const float *xr = L.x + (size_t)t * L.ldx;
        float mean, rstd;
        cu_row_stats([&](int k) { return __ldcg(xr + k); }, K, L.norm, L.eps, lane, mean, rstd);
        auto pk = [&](int k) -> uint32_t {
            return k < K ? cu_split_pack(cu_norm_val(__ldcg(xr + k), k, L.norm, mean, rstd, L.norm_w, L.norm_b))
                         : 0u;
        };
        const int nt = t >> 3, n = t & 7;
        /* four fragments per lane per round: every load of the round issued before the first store */
        for (int idx0 = lane; idx0 < KT * 4; idx0 += 128) {
            uint4 o[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int idx = idx0 + 32 * u, kt = idx >> 2, cq = idx & 3, k0 = kt * 16 + 2 * cq;
                if (idx < KT * 4) {
                    uint32_t w0 = pk(k0), w1 = pk(k0 + 1), w8 = pk(k0 + 8), w9 = pk(k0 + 9);
                    o[u] = make_uint4(cu_hi_pair(w0, w1), cu_hi_pair(w8, w9), cu_lo_pair(w0, w1), cu_lo_pair(w8, w9));
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int idx = idx0 + 32 * u, kt = idx >> 2, cq = idx & 3;
                if (idx < KT * 4) P.act[((size_t)nt * KT + kt) * 32 + n * 4 + cq] = o[u];
            }
        }
        if (WM == WM_QINT)
            for (int g0 = 0; g0 < w.NG; g0 += 4) {
                float s4[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int gi = g0 + u;
                    s4[u] = gi < w.NG ? cu_group_sum([&](int k) { return pk(gi * w.group + k); }, w.group, lane) : 0.0f;
                }
                if (lane == 0)
                    for (int u = 0; u < 4 && g0 + u < w.NG; u++) P.asum[(size_t)t * w.NG + g0 + u] = s4[u];
            }
    }
}

__device__ __forceinline__ void cu_cp_async16(void *smem, const void *gmem) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cu_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cu_cp_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* Phase 2: block tiles of CU_BIG_UNITS units x CU_BIG_NT n-tiles; warp (wu, wt) = unit wu x n-tiles 4 wt .. +4. */
template <int TYPE, int WM, int PAIR>
static __device__ __noinline__ void cu_gemm_big(const cu_linear &L, int T, const cu_params &P, const cu_smem &sm) {
    const cu_mat &w = L.w;
    constexpr int H = PAIR ? 2 : 1;
    const int U = w.MT / H, NT = (T + 7) / 8, KT = w.KT, NC = (KT + CU_CKT - 1) / CU_CKT;
    const int n_ug = (U + CU_BIG_UNITS - 1) / CU_BIG_UNITS, n_tb = (NT + CU_BIG_NT - 1) / CU_BIG_NT;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int wu = warp >> 2, wt = warp & 3, g = lane >> 2, cq = lane & 3;
    uint4 *bt = (uint4 *)sm.act; /* [CU_BIG_NT][CU_CKT][32] */
    float *tot = (float *)(bt + 2 * CU_BIG_NT * CU_CKT * 32); /* [H 16][CU_THREADS]: the closed slabs' sums */
    static_assert(2 * CU_BIG_NT * CU_CKT * 32 * 16 + 2 * 16 * CU_THREADS * 4 <=
                      CU_ACT_BYTES + (CU_PART_SLOTS + CU_ACC_SLOTS) * 512,
                  "big schedule: B tiles and closed slab sums (act, part and acc are contiguous)");
    const int gkt = WM == WM_QINT ? w.group / 16 : 1;
    for (int item = blockIdx.x; item < n_ug * n_tb; item += gridDim.x) {
        const int ug = item % n_ug, tb = item / n_ug;
        const int u = ug * CU_BIG_UNITS + wu;
        const bool uv = u < U;
        float acc[H][4][4];
#pragma unroll
        for (int h = 0; h < H; h++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[h][j][e] = 0.0f;
        /* B tiles of chunk c in buffer c & 1, the next one loading (cp.async) while this one is multiplied */
        auto load_tile = [&](int c) {
            const int kt0 = c * CU_CKT, nkt = min(CU_CKT, KT - kt0);
            uint4 *dst = bt + (c & 1) * (CU_BIG_NT * CU_CKT * 32);
            for (int idx = tid; idx < CU_BIG_NT * CU_CKT * 32; idx += CU_THREADS) {
                int ntl = idx / (CU_CKT * 32), ktl = (idx >> 5) % CU_CKT, ln = idx & 31;
                int nt = tb * CU_BIG_NT + ntl;
                if (nt < NT && ktl < nkt) cu_cp_async16(dst + idx, P.act + ((size_t)nt * KT + kt0 + ktl) * 32 + ln);
            }
            cu_cp_commit();
        };
        __syncthreads(); /* the previous item is done with both buffers */
        load_tile(0);
        for (int c = 0; c < NC; c++) {
            const int kt0 = c * CU_CKT, nkt = min(CU_CKT, KT - kt0);
            if (c + 1 < NC) {
                load_tile(c + 1);
                cu_cp_wait<1>();
            } else {
                cu_cp_wait<0>();
            }
            __syncthreads();
            const uint4 *btc = bt + (c & 1) * (CU_BIG_NT * CU_CKT * 32);
            if (uv) {
            float p[H][4][4], ga[H][4][4];
#pragma unroll
            for (int h = 0; h < H; h++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) p[h][j][e] = 0.0f;
            constexpr bool FAST = WM == WM_BF16 || WM == WM_F16 || WM == WM_QINT;
            constexpr int UNR = FAST ? CU_CKT : 1;
            int gc = 0; /* i % gkt by counting (gkt is not a constant: a division each otherwise) */
#pragma unroll(UNR)
            for (int i = 0; i < CU_CKT; i++) {
                if (i < nkt) {
                    const bool gfirst = gc == 0, glast = gc + 1 == gkt;
                    gc = glast ? 0 : gc + 1;
                    uint32_t b[4][4];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        uint4 v = btc[((wt * 4 + j) * CU_CKT + i) * 32 + lane];
                        b[j][0] = v.x;
                        b[j][1] = v.y;
                        b[j][2] = v.z;
                        b[j][3] = v.w;
                    }
#pragma unroll
                    for (int h = 0; h < H; h++) {
                        const int mt = PAIR ? 2 * u + h : u;
                        cu_raw_frag raw;
                        cu_load_raw<TYPE>(raw, w.frag + ((size_t)mt * KT + kt0 + i) * w.tile_bytes, lane);
                        cu_afrag A;
                        cu_make_a<TYPE, WM>(A, raw, w, mt, kt0 + i, lane);
                        if (WM == WM_QINT) {
                            if (gfirst)
#pragma unroll
                                for (int j = 0; j < 4; j++) ga[h][j][0] = ga[h][j][1] = ga[h][j][2] = ga[h][j][3] = 0.0f;
                            cu_ktile<WM, 4>(ga[h], A, b);
                            if (glast) {
                                int gi = (kt0 + i) / gkt; /* once a group */
                                float s0, b0, s1, b1;
                                cu_sb(w, mt, gi, g, s0, b0);
                                cu_sb(w, mt, gi, g + 8, s1, b1);
#pragma unroll
                                for (int j = 0; j < 4; j++) {
                                    int t0 = (tb * CU_BIG_NT + wt * 4 + j) * 8 + 2 * cq;
                                    float a0 = t0 < T ? __ldcg(P.asum + (size_t)t0 * w.NG + gi) : 0.0f;
                                    float a1 = t0 + 1 < T ? __ldcg(P.asum + (size_t)(t0 + 1) * w.NG + gi) : 0.0f;
                                    cu_qint_group(p[h][j], ga[h][j], s0, b0, s1, b1, a0, a1);
                                }
                            }
                        } else {
                            cu_ktile<WM, 4>(p[h], A, b);
                        }
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < H; h++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[h][j][e] = acc[h][j][e] + p[h][j][e];
            /* K past one slab (cu_common.cuh's contract): acc is the open slab's sum; at a slab's last chunk it joins
             * the closed slabs' sum (shared memory past the B tiles), and the total comes back to acc at the end */
            if (NC > CU_SLC && (c % CU_SLC == CU_SLC - 1 || c == NC - 1)) {
#pragma unroll
                for (int h = 0; h < H; h++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float &t = tot[((h * 4 + j) * 4 + e) * CU_THREADS + tid];
                            const float v = c < CU_SLC ? acc[h][j][e] : t + acc[h][j][e];
                            if (c == NC - 1) acc[h][j][e] = v;
                            else t = v, acc[h][j][e] = 0.0f;
                        }
            }
            }
            __syncthreads(); /* buffer c & 1 is refilled by the load of chunk c + 2 */
        }
        if (!uv) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int t0 = (tb * CU_BIG_NT + wt * 4 + j) * 8 + 2 * cq;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int t = t0 + (e & 1), r = g + ((e >> 1) << 3), jr = u * 16 + r;
                if (t < T && jr < w.N) cu_epilogue(L, t, jr, acc[0][j][e], PAIR ? acc[H - 1][j][e] : 0.0f);
            }
        }
    }
}

/* L2 prefetch of this block's weights of a small-schedule linear (bulk prefetch, 32 KB pieces). */
__device__ __forceinline__ void cu_prefetch_range(const uint8_t *p, size_t bytes) {
    const size_t piece = 32768;
    size_t np = (bytes + piece - 1) / piece;
    for (size_t i = threadIdx.x; i < np; i += CU_THREADS) {
        size_t off = i * piece, sz = bytes - off < piece ? bytes - off : piece;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"((unsigned)sz) : "memory");
    }
}
static __device__ void cu_prefetch_linear(const cu_linear &L, int T, int force_big) {
    if (!cu_lin_small(&L, T, force_big)) return;
    const cu_mat &w = L.w;
    const int halves = w.pair ? 2 : 1;
    int u0, u1;
    cu_units(w.MT / halves, u0, u1);
    if (u0 >= u1) return;
    size_t mt0 = (size_t)u0 * halves, mt1 = (size_t)u1 * halves;
    size_t tb = (size_t)w.KT * w.tile_bytes;
    cu_prefetch_range(w.frag + mt0 * tb, (mt1 - mt0) * tb);
    if (w.sb) {
        size_t sbb = (size_t)w.NG * 16 * w.sb_bytes;
        cu_prefetch_range(w.sb + mt0 * sbb, (mt1 - mt0) * sbb);
    }
}

#endif
