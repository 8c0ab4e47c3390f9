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

/* Qwen3's per-head q/k norm of one head row, one warp: dst[d] = (v[d] * inv) * w[d], inv = 1 / sqrt(mean v^2 + eps),
 * the sum of squares lane-strided (d = lane + 32 i, in order) then a fixed xor tree. ld(d) reads v (global or shared
 * memory); dst may be the row itself (each lane writes only what it read). Every CUDA path calls this, so both
 * executors normalise bit-identically. */
template <class LD>
__device__ __forceinline__ void cu_qk_norm(LD ld, float *dst, int HD, const float *w, float eps, int lane) {
    float ss = 0.0f;
    for (int d = lane; d < HD; d += 32) {
        const float v = ld(d);
        ss = ss + v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / (float)HD + eps);
    for (int d = lane; d < HD; d += 32) dst[d] = (ld(d) * inv) * __ldg(w + d);
}

/* a head row with the q/k norm applied when nw, RoPE'd for position p when the model has RoPE, into dst (warp
 * scratch or the cache); ld(d) reads the source row (global or shared memory) */
template <class LD>
__device__ __forceinline__ void cu_norm_rot_ld(const cu_attend &A, LD ld, const float *nw, int p, float *dst,
                                               int lane) {
    const int HD = A.HD, half = HD / 2;
    if (!nw) {
        if (A.rope) {
            for (int j = lane; j < half; j += 32) {
                float o0, o1;
                cu_rope_pair(A.rope, HD, p, j, ld(j), ld(j + half), o0, o1);
                dst[j] = o0;
                dst[j + half] = o1;
            }
            for (int d = 2 * half + lane; d < HD; d += 32) dst[d] = ld(d);
        } else {
            for (int d = lane; d < HD; d += 32) dst[d] = ld(d);
        }
        return;
    }
    cu_qk_norm(ld, dst, HD, nw, A.qk_eps, lane);
    __syncwarp();
    if (A.rope) {
        for (int j = lane; j < half; j += 32) { /* lane j owns the pair (j, j + half): in place */
            float o0, o1;
            cu_rope_pair(A.rope, HD, p, j, dst[j], dst[j + half], o0, o1);
            dst[j] = o0;
            dst[j + half] = o1;
        }
    }
    __syncwarp();
}

/* the same with the source row in global memory (read through L2: the qkv rows were written by other SMs) */
__device__ __forceinline__ void cu_norm_rot_row(const cu_attend &A, const float *src, const float *nw, int p, float *dst,
                                                int lane) {
    cu_norm_rot_ld(A, [&](int d) { return __ldcg(src + d); }, nw, p, dst, lane);
}

/* append k, v of token (s, i) for kv head kh into the cache (one warp) */
__device__ __forceinline__ void cu_append_kv(const cu_attend &A, int s, int i, int kh, int lane) {
    const int HD = A.HD, kvw = A.KVH * HD, qw = (A.H + 2 * A.KVH) * HD;
    const int t = s * A.P + i, p = A.p0 + i;
    const float *kin = A.qkv + (size_t)t * qw + (size_t)(A.H + kh) * HD;
    const float *vin = A.qkv + (size_t)t * qw + (size_t)(A.H + A.KVH + kh) * HD;
    float *kd = A.kc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
    float *vd = A.vc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
    cu_norm_rot_row(A, kin, A.kn, p, kd, lane);
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
static __device__ __noinline__ void cu_attend_query(const cu_attend &A, int s, int i, int h, const float *kb,
                                             const float *vb, int kst, float *sq, int lane) {
    const int HD = A.HD, qw = (A.H + 2 * A.KVH) * HD;
    const int t = s * A.P + i, p = A.p0 + i;
    const float *qin = A.qkv + (size_t)t * qw + (size_t)h * HD;
    cu_norm_rot_row(A, qin, A.qn, p, sq, lane);
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
    float w0, w1;
    cu_softmax2(sc, nk, lane, w0, w1);
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

/* ---- the fast schedule: one warp per query, every load of a stage in flight at once ------------------------ */

/* warp scratch (floats) the fast schedule needs: the rotated query and this pass's rotated keys */
__host__ __device__ static inline int cu_attend_fast_floats(const cu_attend *A) { return (1 + A->P) * A->HD; }
__host__ __device__ static inline int cu_attend_fast_ok(const cu_attend *A) {
    return (size_t)cu_attend_fast_floats(A) * CU_WARPS * 4 <= CU_ACT_BYTES;
}

/* Query (stream s, new position i, q head h) over keys 0 .. p0 + i, one warp. Keys and values of earlier passes
 * come from the cache (keys stored rotated); this pass's (positions p0 ..) straight from the qkv rows, their keys
 * rotated into the warp's scratch by the same cu_rope_pair the append uses, so a key has the same value either
 * way and no warp reads what another warp of the op writes. The warp of the first q head of a kv group appends
 * token (s, i)'s key and value to the cache. A lane's whole key row, and a lane's value columns of every key, are
 * loaded before their first use. Arithmetic and its order are those of cu_attend_query. */
static __device__ __noinline__ void cu_attend_fast(const cu_attend &A, int s, int i, int h, float *ws, int lane) {
    const int HD = A.HD, G = A.H / A.KVH, kh = h / G, kvw = A.KVH * HD, qw = (A.H + 2 * A.KVH) * HD;
    const int p0 = A.p0, p = p0 + i, nk = p + 1;
    const float *tok0 = A.qkv + (size_t)s * A.P * qw; /* token (s, 0) */
    float *sq = ws, *skn = ws + HD;
    cu_norm_rot_row(A, tok0 + (size_t)i * qw + (size_t)h * HD, A.qn, p, sq, lane);
    for (int r = 0; r <= i; r++)
        cu_norm_rot_row(A, tok0 + (size_t)r * qw + (size_t)(A.H + kh) * HD, A.kn, p0 + r, skn + r * HD, lane);
    __syncwarp();
    const float *kc = A.kc + (size_t)s * A.cstride + (size_t)kh * HD;
    const float *vc = A.vc + (size_t)s * A.cstride + (size_t)kh * HD;
    const int voff = (A.H + A.KVH + kh) * HD;
    if (h % G == 0) {
        float *kd = A.kc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
        float *vd = A.vc + (size_t)s * A.cstride + (size_t)p * kvw + (size_t)kh * HD;
        const float *vin = tok0 + (size_t)i * qw + voff;
        for (int d = lane; d < HD; d += 32) {
            kd[d] = skn[i * HD + d];
            vd[d] = __ldcg(vin + d);
        }
    }
    /* scores: lane j takes keys j and j + 32, a sequential float32 dot over HD; a lane's loads of 32 elements of
     * its key row are in flight together */
    const float scale = sqrtf((float)HD);
    float sc[2] = {-INFINITY, -INFINITY};
#pragma unroll 1
    for (int r = 0; r < 2; r++) {
        const int j = lane + 32 * r;
        if (j < nk) {
            float d = 0.0f;
            if (j < p0) {
                const float *kr = kc + (size_t)j * kvw;
#pragma unroll 1
                for (int e0 = 0; e0 < HD; e0 += 32) {
                    float kv[32];
                    if (e0 + 32 <= HD && (HD & 3) == 0) {
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            float4 f = __ldcg((const float4 *)(kr + e0) + u);
                            kv[4 * u] = f.x, kv[4 * u + 1] = f.y, kv[4 * u + 2] = f.z, kv[4 * u + 3] = f.w;
                        }
                    } else {
#pragma unroll
                        for (int u = 0; u < 32; u++) kv[u] = e0 + u < HD ? __ldcg(kr + e0 + u) : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < 32; u++)
                        if (e0 + u < HD) d = d + sq[e0 + u] * kv[u];
                }
            } else {
                const float *kr = skn + (j - p0) * HD;
#pragma unroll 4
                for (int e = 0; e < HD; e++) d = d + sq[e] * kr[e];
            }
            sc[r] = d / scale;
        }
    }
    float w0, w1;
    cu_softmax2(sc, nk, lane, w0, w1);
    /* out: lane takes dims d and d + 32 of a 64-wide slice; values of 16 keys in flight; keys in order */
    float *out = A.out + ((size_t)s * A.P + i) * A.H * HD + (size_t)h * HD;
#pragma unroll 1
    for (int d0 = 0; d0 < HD; d0 += 64) {
        const int da = d0 + lane, db = d0 + 32 + lane;
        float oa = 0.0f, ob = 0.0f;
#pragma unroll 1
        for (int j0 = 0; j0 < nk; j0 += 16) {
            float va[16], vb[16];
#pragma unroll
            for (int u = 0; u < 16; u++) {
                const int j = j0 + u;
                const float *vr = j < p0 ? vc + (size_t)j * kvw : tok0 + (size_t)(j - p0) * qw + voff;
                va[u] = j < nk && da < HD ? __ldcg(vr + da) : 0.0f;
                vb[u] = j < nk && db < HD ? __ldcg(vr + db) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 16; u++) {
                const int j = j0 + u;
                float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j & 31);
                if (j < nk) {
                    oa = oa + wj * va[u];
                    ob = ob + wj * vb[u];
                }
            }
        }
        if (da < HD) out[da] = oa;
        if (db < HD) out[db] = ob;
    }
    __syncwarp();
}

/* the fast schedule as its own op: query items (stream, position, q head) striped over the blocks first */
static __device__ __noinline__ void cu_attend_op_fast(const cu_attend &A, int n, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int items = n * A.P * A.H, ws = cu_attend_fast_floats(&A);
    for (int it = blockIdx.x + gridDim.x * warp; it < items; it += gridDim.x * CU_WARPS) {
        int h = it % A.H, r = it / A.H, i = r % A.P, s = r / A.P;
        cu_attend_fast(A, s, i, h, scratch + (size_t)warp * ws, lane);
    }
}

/* as its own op: warps over (stream, kv head), keys read from the cache */
static __device__ __noinline__ void cu_attend_op(const cu_attend &A, int n, float *scratch /* CU_WARPS x HD floats */) {
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
static __device__ __noinline__ void cu_attend_group_block(const cu_attend &A, int n, int kh, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int G = A.H / A.KVH, HD = A.HD, kvw = A.KVH * HD, nk = A.p0 + A.P;
    float *sq = scratch + (size_t)warp * HD;
    float *sk = scratch + (size_t)CU_WARPS * HD, *sv = sk + (size_t)nk * HD;
    if (cu_attend_fast_ok(&A)) {
        const int ws = cu_attend_fast_floats(&A);
        for (int it = warp; it < n * A.P * G; it += CU_WARPS) {
            int hq = it % G, r = it / G, i = r % A.P, s = r / A.P;
            cu_attend_fast(A, s, i, kh * G + hq, scratch + (size_t)warp * ws, lane);
        }
        return;
    }
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
