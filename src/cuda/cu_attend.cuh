/* attend of src/kernels.h on the device: append the new positions' K/V (RoPE on k in double, as the reference)
 * and attend causally over at most DD_MAX_LEVELS keys.
 *
 * One warp per (stream, kv head) appends; one warp per (stream, q head, new position) attends: lane j takes key j
 * (and j + 32) for the scores (sequential float32 dot over HD), softmax max/sum over the warp (fixed xor tree),
 * then lanes split HD for the weighted sum of v in key order. Two schedules: as its own op (large batches), or
 * run by the last block of a small-schedule qkv linear that completes a kv group (no grid barrier between qkv and
 * attention). Both call the same functions, so the results are the same. */
#ifndef DD_CU_ATTEND_CUH
#define DD_CU_ATTEND_CUH

#include "cu_common.cuh"

/* rotate (x0, x1) = (v[j], v[j + HD/2]) by the table entry of position p (double, as ref.c) */
__device__ __forceinline__ void cu_rope_pair(const double *cs, int HD, int p, int j, float x0, float x1, float &o0,
                                             float &o1) {
    double c = __ldg(cs + ((size_t)p * (HD / 2) + j) * 2), s = __ldg(cs + ((size_t)p * (HD / 2) + j) * 2 + 1);
    double a = (double)x0 * c, b = (double)x1 * s, e = (double)x1 * c, f = (double)x0 * s;
    o0 = (float)(a - b);
    o1 = (float)(e + f);
}

/* append k, v of token (s, i) for kv head kh into the cache (one warp) */
__device__ __forceinline__ void cu_append_kv(const cu_attend &A, int s, int i, int kh, int lane) {
    const int HD = A.HD, kvw = A.KVH * HD, qw = (A.H + 2 * A.KVH) * HD;
    const int t = s * A.P + i, p = A.p0 + i;
    const float *kin = A.qkv + (size_t)t * qw + (size_t)(A.H + kh) * HD;
    const float *vin = A.qkv + (size_t)t * qw + (size_t)(A.H + A.KVH + kh) * HD;
    float *kd = A.kc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
    float *vd = A.vc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
    const int half = HD / 2;
    if (A.rope) {
        for (int j = lane; j < half; j += 32) {
            float o0, o1;
            cu_rope_pair(A.rope, HD, p, j, __ldcg(kin + j), __ldcg(kin + j + half), o0, o1);
            kd[j] = o0;
            kd[j + half] = o1;
        }
        for (int d = 2 * half + lane; d < HD; d += 32) kd[d] = __ldcg(kin + d);
    } else {
        for (int d = lane; d < HD; d += 32) kd[d] = __ldcg(kin + d);
    }
    for (int d = lane; d < HD; d += 32) vd[d] = __ldcg(vin + d);
}

template <bool SM>
__device__ __forceinline__ float cu_ldk(const float *p) {
    return SM ? *p : __ldcg(p);
}

/* out of token (s, i), q head h (one warp). Keys/values of the (stream, kv head): row j at kb + j kst, vb + j kst
 * (shared memory when SM, else the cache in global memory); sq: HD floats of this warp's shared scratch. The loads
 * of a lane's key row and of 16 value rows are issued before they are used, so a query costs a few L2 round
 * trips, not one per element. */
template <bool SM>
__device__ __noinline__ void cu_attend_query(const cu_attend &A, int s, int i, int h, const float *kb,
                                             const float *vb, int kst, float *sq, int lane) {
    const int HD = A.HD, qw = (A.H + 2 * A.KVH) * HD, half = HD / 2;
    const int t = s * A.P + i, p = A.p0 + i;
    const float *qin = A.qkv + (size_t)t * qw + (size_t)h * HD;
    if (A.rope) {
        for (int j = lane; j < half; j += 32) {
            float o0, o1;
            cu_rope_pair(A.rope, HD, p, j, __ldcg(qin + j), __ldcg(qin + j + half), o0, o1);
            sq[j] = o0;
            sq[j + half] = o1;
        }
        for (int d = 2 * half + lane; d < HD; d += 32) sq[d] = __ldcg(qin + d);
    } else {
        for (int d = lane; d < HD; d += 32) sq[d] = __ldcg(qin + d);
    }
    __syncwarp();
    const int nk = p + 1; /* keys 0..p, at most DD_MAX_LEVELS = 64: two per lane */
    const float scale = sqrtf((float)HD);
    float sc[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int j = lane + 32 * r;
        if (j < nk) {
            const float *kr = kb + (size_t)j * kst;
            float d = 0.0f;
            int e = 0;
            for (; e + 16 <= HD; e += 16) {
                float kv[16];
#pragma unroll
                for (int u = 0; u < 16; u++) kv[u] = cu_ldk<SM>(kr + e + u);
#pragma unroll
                for (int u = 0; u < 16; u++) d = d + sq[e + u] * kv[u];
            }
            for (; e < HD; e++) d = d + sq[e] * cu_ldk<SM>(kr + e);
            sc[r] = d / scale;
        }
    }
    float m = fmaxf(sc[0], sc[1]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float e0 = lane < nk ? expf(sc[0] - m) : 0.0f, e1 = lane + 32 < nk ? expf(sc[1] - m) : 0.0f;
    float sum = e0 + e1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float w0 = e0 / sum, w1 = e1 / sum;
    float *out = A.out + (size_t)t * A.H * HD + (size_t)h * HD;
    for (int d0 = 0; d0 < HD; d0 += 32) {
        const int d = d0 + lane;
        float o = 0.0f;
        for (int j0 = 0; j0 < nk; j0 += 16) {
            float vv[16];
#pragma unroll
            for (int u = 0; u < 16; u++) vv[u] = d < HD && j0 + u < nk ? cu_ldk<SM>(vb + (size_t)(j0 + u) * kst + d) : 0.0f;
#pragma unroll
            for (int u = 0; u < 16; u++) {
                int j = j0 + u;
                float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j & 31);
                if (j < nk) o = o + wj * vv[u];
            }
        }
        if (d < HD) out[d] = o;
    }
    __syncwarp();
}

/* as its own op: warps over (stream, kv head), keys read from the cache */
__device__ __noinline__ void cu_attend_op(const cu_attend &A, int n, float *scratch /* CU_WARPS x HD floats */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gw = blockIdx.x * CU_WARPS + warp, GW = gridDim.x * CU_WARPS;
    const int G = A.H / A.KVH, kvw = A.KVH * A.HD;
    float *sq = scratch + (size_t)warp * A.HD;
    for (int it = gw; it < n * A.KVH; it += GW) {
        int s = it / A.KVH, kh = it % A.KVH;
        for (int i = 0; i < A.P; i++) cu_append_kv(A, s, i, kh, lane);
        __syncwarp();
        const float *kb = A.kc + (size_t)s * A.cstride + (size_t)kh * A.HD;
        const float *vb = A.vc + (size_t)s * A.cstride + (size_t)kh * A.HD;
        for (int hq = 0; hq < G; hq++)
            for (int i = 0; i < A.P; i++) cu_attend_query<false>(A, s, i, kh * G + hq, kb, vb, kvw, sq, lane);
    }
}

/* kv group kh for every stream, by the whole block (the fused schedule): append, then per stream copy the group's
 * keys and values into shared memory with every thread (one round trip) when they fit, and attend from there */
__device__ __noinline__ void cu_attend_group_block(const cu_attend &A, int n, int kh, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int G = A.H / A.KVH, HD = A.HD, kvw = A.KVH * HD, nk = A.p0 + A.P;
    float *sq = scratch + (size_t)warp * HD;
    float *sk = scratch + (size_t)CU_WARPS * HD, *sv = sk + (size_t)nk * HD;
    const int fits = ((size_t)CU_WARPS * HD + 2 * (size_t)nk * HD) * 4 <= CU_ACT_BYTES;
    for (int it = warp; it < n * A.P; it += CU_WARPS) cu_append_kv(A, it / A.P, it % A.P, kh, lane);
    __syncthreads();
    for (int s = 0; s < n; s++) {
        const float *kb = A.kc + (size_t)s * A.cstride + (size_t)kh * HD;
        const float *vb = A.vc + (size_t)s * A.cstride + (size_t)kh * HD;
        if (fits) {
            for (int base = tid; base < nk * HD; base += CU_THREADS * 8) {
                float a[8], b[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    int idx = base + u * CU_THREADS, j = idx / HD, d = idx - j * HD;
                    a[u] = idx < nk * HD ? __ldcg(kb + (size_t)j * kvw + d) : 0.0f;
                    b[u] = idx < nk * HD ? __ldcg(vb + (size_t)j * kvw + d) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    int idx = base + u * CU_THREADS;
                    if (idx < nk * HD) {
                        sk[idx] = a[u];
                        sv[idx] = b[u];
                    }
                }
            }
            __syncthreads();
        }
        for (int it = warp; it < G * A.P; it += CU_WARPS) {
            int i = it % A.P, hq = it / A.P;
            if (fits) cu_attend_query<true>(A, s, i, kh * G + hq, sk, sv, HD, sq, lane);
            else cu_attend_query<false>(A, s, i, kh * G + hq, kb, vb, kvw, sq, lane);
        }
        __syncthreads();
    }
}

#endif
