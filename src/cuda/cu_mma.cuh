/* Device building blocks of the linear: the bf16 split of activations, weight fragments of every stored type
 * turned into exact bf16 A operands, and the mma.sync.m16n8k16 term schedule of one k-tile (see the numerics
 * contract in cu_common.cuh). */
#ifndef DD_CU_MMA_CUH
#define DD_CU_MMA_CUH

#include "cu_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* d (16x8 f32) += A (16x16 bf16, row) . B (16x8 bf16, col); fragments as in the PTX ISA for m16n8k16. */
__device__ __forceinline__ void cu_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t cu_bf16_bits(float v) { return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float cu_bf16_val(uint32_t bits) { return __uint_as_float(bits << 16); }

/* n = hi + lo: hi = bf16(n) in the low half, lo = bf16(n - hi) in the high half (n - hi is exact in f32). */
__device__ __forceinline__ uint32_t cu_split_pack(float v) {
    uint32_t h = cu_bf16_bits(v);
    uint32_t l = cu_bf16_bits(v - cu_bf16_val(h));
    return h | (l << 16);
}
/* two packed words (elements k, k+1) -> the hi pair and the lo pair of a B fragment register */
__device__ __forceinline__ uint32_t cu_hi_pair(uint32_t w0, uint32_t w1) { return __byte_perm(w0, w1, 0x5410); }
__device__ __forceinline__ uint32_t cu_lo_pair(uint32_t w0, uint32_t w1) { return __byte_perm(w0, w1, 0x7632); }
/* the value hi + lo a packed word stands for (group sums use it) */
__device__ __forceinline__ float cu_packed_val(uint32_t w) {
    return cu_bf16_val(w & 0xFFFFu) + cu_bf16_val(w >> 16);
}

__device__ __forceinline__ uint32_t cu_pack2(float a, float b) { /* a in the low half (lower k) */
    return cu_bf16_bits(a) | (cu_bf16_bits(b) << 16);
}

/* Up to three exact-or-near-exact bf16 terms of 8 weight values (the A fragment element order). */
struct cu_afrag {
    uint32_t t[3][4];
};

/* w -> t0 + t1 + t2 (bf16 each): t0 = bf16(w), t1 = bf16(w - t0), t2 = bf16(w - t0 - t1); 24 bits of w. */
__device__ __forceinline__ void cu_split3(float a, float b, uint32_t &t0, uint32_t &t1, uint32_t &t2, int nt) {
    uint32_t ha = cu_bf16_bits(a), hb = cu_bf16_bits(b);
    float ra = a - cu_bf16_val(ha), rb = b - cu_bf16_val(hb);
    uint32_t ma = cu_bf16_bits(ra), mb = cu_bf16_bits(rb);
    t0 = ha | (hb << 16);
    t1 = ma | (mb << 16);
    if (nt > 2) {
        float sa = ra - cu_bf16_val(ma), sb = rb - cu_bf16_val(mb);
        t2 = cu_bf16_bits(sa) | (cu_bf16_bits(sb) << 16);
    }
}

/* raw bytes of one lane's fragment of tile (mt, kt): up to 32 bytes */
struct cu_raw_frag {
    uint4 a, b;
};

/* a read-only load: through the non-coherent cache from global memory, or plain from shared memory (SMEM) */
template <bool SMEM, class T>
__device__ __forceinline__ T cu_ro(const T *p) {
    if (SMEM) return *p;
    return __ldg(p);
}

template <int TYPE, bool SMEM = false>
__device__ __forceinline__ void cu_load_raw(cu_raw_frag &r, const uint8_t *tile, int lane) {
    if (TYPE == DD_BF16 || TYPE == DD_F16) {
        r.a = cu_ro<SMEM>((const uint4 *)(tile + lane * 16));
    } else if (TYPE == DD_F32) {
        r.a = cu_ro<SMEM>((const uint4 *)(tile + lane * 32));
        r.b = cu_ro<SMEM>((const uint4 *)(tile + lane * 32 + 16));
    } else if (TYPE == DD_Q8) {
        uint2 v = cu_ro<SMEM>((const uint2 *)(tile + lane * 8));
        r.a.x = v.x;
        r.a.y = v.y;
    } else {
        r.a.x = cu_ro<SMEM>((const uint32_t *)(tile + lane * 4));
    }
}

/* q8/q4 element e (0..7) of a raw fragment as an exact float */
template <int TYPE>
__device__ __forceinline__ float cu_qval(const cu_raw_frag &r, int e) {
    if (TYPE == DD_Q8) {
        uint32_t w = e < 4 ? r.a.x : r.a.y;
        return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | (e & 3))) - 8388608.0f;
    }
    uint32_t q = (r.a.x >> (4 * e)) & 15u;
    return __uint_as_float(0x4B000000u | q) - 8388608.0f;
}

template <bool SMEM = false>
__device__ __forceinline__ float cu_sb_load(const uint8_t *p, int sbtype) {
    if (sbtype == DD_F32) return cu_ro<SMEM>((const float *)p);
    unsigned short h = cu_ro<SMEM>((const unsigned short *)p);
    if (sbtype == DD_F16) return __half2float(__ushort_as_half(h));
    return __uint_as_float((uint32_t)h << 16);
}
/* (s, b) of row r of m-tile mt, group gi */
__device__ __forceinline__ void cu_sb(const cu_mat &w, int mt, int gi, int r, float &s, float &b) {
    const uint8_t *p = w.sb + (((size_t)mt * w.NG + gi) * 16 + r) * w.sb_bytes;
    int es = w.sb_bytes / 2;
    s = cu_sb_load(p, w.sbtype);
    b = cu_sb_load(p + es, w.sbtype);
}

/* Close quantization group (QINT) into the running partial d of an m16n8 fragment: d += s ga, then d += b asum, per
 * element, in this order (s0/b0 row g, s1/b1 row g + 8; a0/a1 the group sums of the fragment's two tokens). */
__device__ __forceinline__ void cu_qint_group(float (&d)[4], const float (&ga)[4], float s0, float b0, float s1,
                                              float b1, float a0, float a1) {
    d[0] = d[0] + s0 * ga[0];
    d[0] = d[0] + b0 * a0;
    d[1] = d[1] + s0 * ga[1];
    d[1] = d[1] + b0 * a1;
    d[2] = d[2] + s1 * ga[2];
    d[2] = d[2] + b1 * a0;
    d[3] = d[3] + s1 * ga[3];
    d[3] = d[3] + b1 * a1;
}

/* The weight terms of one k-tile from its raw fragment. QDEQ dequantizes w = fl(fl(s q) + b) as MLX does. */
template <int TYPE, int WM>
__device__ __forceinline__ void cu_make_a(cu_afrag &A, const cu_raw_frag &r, const cu_mat &w, int mt, int kt,
                                          int lane) {
    if (WM == WM_BF16) {
        A.t[0][0] = r.a.x;
        A.t[0][1] = r.a.y;
        A.t[0][2] = r.a.z;
        A.t[0][3] = r.a.w;
    } else if (WM == WM_F16) {
        const uint32_t h[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(*(const __half2 *)&h[i]);
            uint32_t dummy;
            cu_split3(f.x, f.y, A.t[0][i], A.t[1][i], dummy, 2);
        }
    } else if (WM == WM_F32) {
        const float f[8] = {__uint_as_float(r.a.x), __uint_as_float(r.a.y), __uint_as_float(r.a.z),
                            __uint_as_float(r.a.w), __uint_as_float(r.b.x), __uint_as_float(r.b.y),
                            __uint_as_float(r.b.z), __uint_as_float(r.b.w)};
#pragma unroll
        for (int i = 0; i < 4; i++) cu_split3(f[2 * i], f[2 * i + 1], A.t[0][i], A.t[1][i], A.t[2][i], 3);
    } else if (WM == WM_QINT) {
#pragma unroll
        for (int i = 0; i < 4; i++) A.t[0][i] = cu_pack2(cu_qval<TYPE>(r, 2 * i), cu_qval<TYPE>(r, 2 * i + 1));
    } else { /* WM_QDEQ */
        int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int row = (i & 1) ? g + 8 : g;
            int k = kt * 16 + 2 * c + ((i & 2) ? 8 : 0);
            float v[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int kk = k + h;
                float s = 0.0f, b = 0.0f;
                if (kk < w.K) cu_sb(w, mt, kk / w.group, row, s, b);
                float sq = s * cu_qval<TYPE>(r, 2 * i + h);
                v[h] = sq + b;
            }
            cu_split3(v[0], v[1], A.t[0][i], A.t[1][i], A.t[2][i], 3);
        }
    }
}

/* One k-tile's MMAs for NTW n-tiles, in the fixed term order of the contract (per output element:
 * t0*hi, t0*lo, t1*hi, t1*lo, t2*hi). b[j] = {hi01, hi89, lo01, lo89}. */
template <int WM, int NTW>
__device__ __forceinline__ void cu_ktile(float (&d)[NTW][4], const cu_afrag &A, const uint32_t (&b)[NTW][4]) {
#pragma unroll
    for (int j = 0; j < NTW; j++) {
        cu_mma(d[j], A.t[0], b[j][0], b[j][1]);
        cu_mma(d[j], A.t[0], b[j][2], b[j][3]);
        if (WM == WM_F16 || WM == WM_F32 || WM == WM_QDEQ) {
            cu_mma(d[j], A.t[1], b[j][0], b[j][1]);
            cu_mma(d[j], A.t[1], b[j][2], b[j][3]);
        }
        if (WM == WM_F32 || WM == WM_QDEQ) cu_mma(d[j], A.t[2], b[j][0], b[j][1]);
    }
}

/* ---- activations: norm statistics and the normalized value of one element ------------------------------- */

__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* mean and rstd of row x[0..K) for the norm prologue (one warp; lanes sum k = lane + 32 i in order, then a fixed
 * xor tree). LayerNorm: two passes (mean, then mean of squared deviations); RMS: mean of squares. Reads through
 * the load functor so the same arithmetic runs on shared or global memory. */
template <class LD>
__device__ __forceinline__ void cu_row_stats(LD ld, int K, int norm, float eps, int lane, float &mean, float &rstd) {
    mean = 0.0f;
    rstd = 1.0f;
    if (norm == DD_NORM_NONE) return;
    float m = 0.0f;
    if (norm == DD_NORM_LAYER) {
        float s = 0.0f;
#pragma unroll 8
        for (int k = lane; k < K; k += 32) s += ld(k);
        s = cu_warp_sum(s);
        m = s / (float)K;
    }
    float q = 0.0f;
#pragma unroll 8
    for (int k = lane; k < K; k += 32) {
        float d = ld(k) - m;
        q += d * d;
    }
    q = cu_warp_sum(q);
    mean = m;
    rstd = 1.0f / sqrtf(q / (float)K + eps);
}

__device__ __forceinline__ float cu_norm_val(float v, int k, int norm, float mean, float rstd, const float *nw,
                                             const float *nb) {
    if (norm == DD_NORM_NONE) return v;
    float n = (v - mean) * rstd;
    n = n * __ldg(nw + k);
    if (nb) n = n + __ldg(nb + k);
    return n;
}

/* cu_norm_val's arithmetic on a column's weight w and bias b already loaded (hasb: the norm has biases), for a
 * caller that loads them early (lat.cu). Kept apart: cu_norm_val written through it let nvcc hoist the bias load in
 * the frame and throughput kernels (their SASS changed). */
__device__ __forceinline__ float cu_norm_wb(float v, float mean, float rstd, float w, float b, bool hasb) {
    float n = (v - mean) * rstd;
    n = n * w;
    if (hasb) n = n + b;
    return n;
}

#endif
