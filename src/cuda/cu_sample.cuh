/* SPEC §3 sampling on the device, bit-identical to dd_sample_core (src/sample.c) for equal logits. The scalar
 * arithmetic is sample_math.h's, the same source the host compiles: Philox4x32-10 and the noise mapping
 * (dd_noise_words), u and g = (float)(-log(-log((double)u))) in double (dd_gumbel_word), s = fl(fl(z * invT) + g)
 * with __fmul_rn/__fadd_rn (dd_sample_score), order keys with NaN as -inf (dd_order_key), and ties to the lowest
 * index with the first candidate always taken (dd_sample_better: a level whose candidates all score -inf returns
 * the lowest one). What is the device's own is the parallel part: the keep set, from the 32-logit groups' maxima
 * (the candidates at or above the K-th largest maximum, each kept by its rank among them) or else by the exact K-th
 * largest key from a 4-pass 8-bit radix select over the block (integer counts: the order of the atomic adds does not
 * matter), and the block-wide argmax.
 * One block samples one stream; then the drawn code's embedding row (+ learned position) is gathered as the next
 * pass's input. */
#ifndef DD_CU_SAMPLE_CUH
#define DD_CU_SAMPLE_CUH

#include "cu_common.cuh"

#include <cuda_fp16.h>

/* smem scratch of the sampler: two count arrays of 256 words (hist, hist2), sel[0] (keys listed), list[32] (keys),
 * per-warp (float, int) pairs (rv, ri) */
struct cu_samp_smem {
    unsigned *hist;
    int *sel;
    float *rv;
    int *ri;
    unsigned *hist2, *list;
};

/* The block-wide barrier the sampler synchronises with: the whole CTA (frame kernel), or a named barrier over
 * the compute threads (threadIdx.x < threads) of a kernel that has other warps besides (the latency executor). */
struct cu_bar_cta {
    static constexpr int threads = CU_THREADS;
    static __device__ __forceinline__ void sync(void) { __syncthreads(); }
    static __device__ __forceinline__ int sync_or(int v) { return __syncthreads_or(v); }
};

/* the better of (s, i) and (t, j) by dd_sample_better: larger score, then lower index; index -1 means "none" */
__device__ __forceinline__ void cu_best(float &s, int &i, float t, int j) {
    if (dd_sample_better(t, j, s, i)) {
        s = t;
        i = j;
    }
}

template <class BAR = cu_bar_cta>
static __device__ __forceinline__ void cu_block_best(float &s, int &i, const cu_samp_smem &S) {
#pragma unroll 1
    for (int o = 16; o > 0; o >>= 1) {
        float t = __shfl_xor_sync(0xffffffffu, s, o);
        int j = __shfl_xor_sync(0xffffffffu, i, o);
        cu_best(s, i, t, j);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        S.rv[warp] = s;
        S.ri[warp] = i;
    }
    BAR::sync();
    s = S.rv[0];
    i = S.ri[0];
#pragma unroll 1
    for (int w = 1; w < BAR::threads / 32; w++) cu_best(s, i, S.rv[w], S.ri[w]);
    BAR::sync();
}

/* The maximum of a warp's order keys. */
__device__ __forceinline__ uint32_t cu_warp_max_u32(uint32_t v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}

/* The group-maximum bound of the keep threshold: the logits in groups of 32 (group g: indices 32 g .. 32 g + 31), a
 * group's largest order key its maximum m_g. Any K of the maxima are K distinct logits, so the K-th largest maximum
 * L (counting repeats) is at most the K-th largest key, and every logit of the keep set has a key >= L: these are
 * the candidates. A candidate is kept iff fewer than K candidates have a larger key (every larger key is a
 * candidate too). Needs K <= G (the number of groups) <= CU_SAMP_GMAX; at most CU_SAMP_CAP candidates are listed
 * (S.hist: keys; the upper half of S.hist2: their indices, 16 bits; its lower half holds the maxima), more fall back
 * to the radix select. With i.i.d. logits at V 2048, K 50 the candidates number ~90. */
#define CU_SAMP_GMAX 96
#define CU_SAMP_CAP 256

/* L (as above) from the group maxima in S.hist2[0 .. G), by warp 0 into S.sel[1]; every thread then lists its
 * logits with a key >= L. Returns the candidates' count (> CU_SAMP_CAP: not all listed). Whole block; the maxima
 * are written and S.sel[0] is 0 before the barrier before this call. */
template <class BAR, class LD>
static __device__ int cu_samp_candidates(LD z, int V, int K, int G, const cu_samp_smem &S) {
    const int tid = threadIdx.x, lane = tid & 31;
    const uint32_t *gm = S.hist2;
    if (tid < 32) { /* a maximum v is a bound when at least K maxima are >= v; L is the largest bound */
        const uint32_t v0 = lane < G ? gm[lane] : 0u, v1 = lane + 32 < G ? gm[lane + 32] : 0u,
                       v2 = lane + 64 < G ? gm[lane + 64] : 0u;
        int c0 = 0, c1 = 0, c2 = 0;
        if (G <= 64) {
#pragma unroll 4
            for (int j = 0; j < G; j++) {
                const uint32_t o = gm[j];
                c0 += o >= v0 ? 1 : 0;
                c1 += o >= v1 ? 1 : 0;
            }
        } else {
#pragma unroll 4
            for (int j = 0; j < G; j++) {
                const uint32_t o = gm[j];
                c0 += o >= v0 ? 1 : 0;
                c1 += o >= v1 ? 1 : 0;
                c2 += o >= v2 ? 1 : 0;
            }
        }
        uint32_t b = c0 >= K ? v0 : 0u; /* (an empty slot's 0 counts G >= K, and 0 is below every key) */
        b = max(b, c1 >= K ? v1 : 0u);
        b = max(b, c2 >= K ? v2 : 0u);
        b = cu_warp_max_u32(b);
        if (lane == 0) S.sel[1] = (int)b;
    }
    BAR::sync();
    const uint32_t L = (uint32_t)S.sel[1];
    unsigned short *ci = (unsigned short *)(S.hist2 + 128);
#pragma unroll 1
    for (int i0 = tid - lane; i0 < V; i0 += BAR::threads) { /* warp-uniform: one ballot a 32 logits */
        const int i = i0 + lane;
        const uint32_t key = i < V ? dd_order_key(z(i)) : 0u;
        const unsigned in = __ballot_sync(0xffffffffu, i < V && key >= L);
        if (!in) continue;
        int base = 0;
        if (lane == 0) base = atomicAdd(&S.sel[0], __popc(in));
        base = __shfl_sync(0xffffffffu, base, 0);
        const int at = base + __popc(in & ((1u << lane) - 1u));
        if (((in >> lane) & 1u) && at < CU_SAMP_CAP) {
            S.hist[at] = key;
            ci[at] = (unsigned short)i;
        }
    }
    BAR::sync();
    return S.sel[0];
}

/* The SPEC §3 rule on z(0) .. z(V-1) (a loader: shared memory, or global memory through L2). Returns the code, or
 * -1 when no logit is finite. Whole block.
 * The keep set from the group-maximum bound (cu_samp_candidates) where it applies (K <= G <= CU_SAMP_GMAX, at most
 * CU_SAMP_CAP candidates); otherwise the keep threshold (the K-th largest order key) by an 8-bit radix select from
 * the top byte: per pass the keys
 * that share the prefix so far are counted per next byte with shared atomics (integer counts: their order does not
 * matter), then every warp finds the bucket of the k-th largest itself (no barrier to broadcast it). The count
 * arrays are cleared once: passes alternate between two arrays and each warp keeps its lane's 8 bins of both, so a
 * pass's counts are the growth since the array's last pass (a pass never waits for a clear). Once the bucket holds
 * at most 32 keys they are listed and every warp picks the k-th largest of the list by ranks (usually after the
 * second pass). Measured on the H200 (dev/cuda/derisk/stage.cu): the old version with 4 passes, 4 barriers each and
 * __match_any_sync-aggregated atomics cost 14 us at V 2048 on 480 threads. */
template <class BAR = cu_bar_cta, class LD>
static __device__ int cu_sample_block(LD z, int V, float T, int K, uint64_t seed, uint64_t frame, int level,
                               const cu_samp_smem &S, const float *gpre = NULL) {
    const int tid = threadIdx.x, lane = tid & 31;
    const bool sel = T != 0.0f && K > 0 && K < V; /* a keep threshold to find */
    const int G = (V + 31) >> 5;
    const bool gsel = sel && K <= G && G <= CU_SAMP_GMAX; /* by the group-maximum bound */
    if (sel && !gsel) {
        for (int b = tid; b < 256; b += BAR::threads) S.hist[b] = S.hist2[b] = 0u;
        if (tid == 0) S.sel[0] = 0;
    }
    if (gsel && tid == 0) S.sel[0] = 0;
    int anyf = 0;
    if (gsel) { /* the group maxima, and whether any logit is finite */
#pragma unroll 1
        for (int g = tid >> 5; g < G; g += BAR::threads / 32) {
            const int i = 32 * g + lane;
            const float zi = i < V ? z(i) : -INFINITY;
            anyf |= isfinite(zi) ? 1 : 0;
            const uint32_t m = cu_warp_max_u32(dd_order_key(zi));
            if (lane == 0) S.hist2[g] = m;
        }
    } else {
        for (int i = tid; i < V; i += BAR::threads) anyf |= isfinite(z(i)) ? 1 : 0;
    }
    if (!BAR::sync_or(anyf)) return -1; /* (and the counts are clear before any pass adds to them) */
    float bs = -INFINITY;
    int bi = -1;
    if (T == 0.0f) {
        for (int i = tid; i < V; i += BAR::threads) {
            float zi = z(i);
            if (dd_logit_dead(zi)) continue;
            cu_best(bs, bi, zi, i);
        }
        cu_block_best<BAR>(bs, bi, S);
        return bi;
    }
    if (gsel) {
        const int C = cu_samp_candidates<BAR>(z, V, K, G, S);
        if (C <= CU_SAMP_CAP) {
            const float invT = dd_inv_temperature(T);
            const unsigned short *ci = (const unsigned short *)(S.hist2 + 128);
#pragma unroll 1
            for (int t = tid; t < C; t += BAR::threads) {
                const uint32_t mk = S.hist[t];
                int gt = 0;
#pragma unroll 4
                for (int j = 0; j < C; j++) gt += S.hist[j] > mk ? 1 : 0;
                const int i = ci[t];
                const float zi = z(i);
                if (gt >= K || dd_logit_dead(zi)) continue;
                float g;
                if (gpre) {
                    g = gpre[i];
                } else {
                    uint32_t x[4];
                    dd_noise_words(seed, frame, level, (uint32_t)(i >> 2), x);
                    const int e = i & 3;
                    g = dd_gumbel_word(e == 0 ? x[0] : e == 1 ? x[1] : e == 2 ? x[2] : x[3]);
                }
                cu_best(bs, bi, dd_sample_score(zi, invT, g), i);
            }
            cu_block_best<BAR>(bs, bi, S);
            return bi;
        }
        /* more candidates than listed: the radix select, on cleared counts (once every thread has read C) */
        BAR::sync();
        for (int b = tid; b < 256; b += BAR::threads) S.hist[b] = S.hist2[b] = 0u;
        if (tid == 0) S.sel[0] = 0;
        BAR::sync();
    }
    uint32_t thr = 0;
    if (sel) {
        uint32_t prefix = 0, mask = 0, k = (uint32_t)K;
        uint32_t old0[8], old1[8]; /* bins 8 lane .. 8 lane + 7 of hist / hist2 after their last pass */
#pragma unroll
        for (int j = 0; j < 8; j++) old0[j] = old1[j] = 0u;
#pragma unroll 1
        for (int pass = 0; pass < 4; pass++) {
            const int shift = 24 - 8 * pass, odd = pass & 1;
            unsigned *h = odd ? S.hist2 : S.hist;
            for (int i = tid; i < V; i += BAR::threads) {
                const uint32_t key = dd_order_key(z(i));
                if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xFFu], 1u);
            }
            BAR::sync();
            uint32_t c[8], cnt = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t v = h[8 * lane + j];
                c[j] = v - (odd ? old1[j] : old0[j]);
                if (odd) old1[j] = v;
                else old0[j] = v;
                cnt += c[j];
            }
            uint32_t suf = cnt; /* sum over lanes >= lane */
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t v = __shfl_down_sync(0xffffffffu, suf, o);
                if (lane + o < 32) suf += v;
            }
            const int L = 31 - __clz(__ballot_sync(0xffffffffu, suf >= k));
            /* lane L holds the bucket: sample.c's walk from bucket 255 down */
            uint32_t kk = k - (suf - cnt), cb = 0;
            int b = 8 * lane;
#pragma unroll
            for (int j = 7; j >= 0; j--) {
                b = 8 * lane + j;
                cb = c[j];
                if (j == 0 || c[j] >= kk) break;
                kk -= c[j];
            }
            b = __shfl_sync(0xffffffffu, b, L);
            k = __shfl_sync(0xffffffffu, kk, L);
            cb = __shfl_sync(0xffffffffu, cb, L);
            prefix |= (uint32_t)b << shift;
            mask |= 0xFFu << shift;
            if (shift == 0) {
                thr = prefix;
                break;
            }
            if (cb <= 32) { /* list the bucket's keys; the k-th largest of them is the threshold */
                for (int i = tid; i < V; i += BAR::threads) {
                    const uint32_t key = dd_order_key(z(i));
                    if ((key & mask) == prefix) S.list[atomicAdd(&S.sel[0], 1)] = key;
                }
                BAR::sync();
                const uint32_t mk = lane < (int)cb ? S.list[lane] : 0u;
                uint32_t gt = 0, eq = 0;
#pragma unroll 1
                for (int j = 0; j < (int)cb; j++) {
                    const uint32_t o = __shfl_sync(0xffffffffu, mk, j);
                    gt += o > mk ? 1u : 0u;
                    eq += o == mk ? 1u : 0u;
                }
                const unsigned ok = __ballot_sync(0xffffffffu, lane < (int)cb && gt < k && k <= gt + eq);
                thr = __shfl_sync(0xffffffffu, mk, __ffs(ok) - 1);
                break;
            }
        }
    }
    const float invT = dd_inv_temperature(T);
    if (gpre) { /* the noise of every index computed before the logits arrived (the latency executor's lt_noise) */
#pragma unroll 1
        for (int i = tid; i < V; i += BAR::threads) {
            const float zi = z(i);
            if (dd_logit_dropped(zi, thr)) continue;
            cu_best(bs, bi, dd_sample_score(zi, invT, gpre[i]), i);
        }
        cu_block_best<BAR>(bs, bi, S);
        return bi;
    }
    /* compact on purpose (the kernel's code is fetched cold at every op): one Philox call per group of 4 with a
     * candidate, one Gumbel evaluation per candidate */
#pragma unroll 1
    for (int i4 = tid; 4 * i4 < V; i4 += BAR::threads) {
        unsigned cand = 0;
        float zz[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 4 * i4 + e;
            zz[e] = i < V ? z(i) : NAN;
            if (!dd_logit_dropped(zz[e], thr)) cand |= 1u << e;
        }
        if (!cand) continue;
        uint32_t x[4];
        dd_noise_words(seed, frame, level, (uint32_t)i4, x);
#pragma unroll 1
        for (int e = 0; e < 4; e++) {
            if (!((cand >> e) & 1u)) continue;
            uint32_t xe = e == 0 ? x[0] : e == 1 ? x[1] : e == 2 ? x[2] : x[3];
            float ze = e == 0 ? zz[0] : e == 1 ? zz[1] : e == 2 ? zz[2] : zz[3];
            cu_best(bs, bi, dd_sample_score(ze, invT, dd_gumbel_word(xe)), 4 * i4 + e);
        }
    }
    cu_block_best<BAR>(bs, bi, S);
    return bi;
}

/* element d of row r of a gather table, dequantized as dd_weight_row_f32 does */
__device__ __forceinline__ float cu_raw_val(const cu_raw &t, int r, int d) {
    const uint8_t *row = t.data + (size_t)r * t.pitch;
    switch (t.type) {
    case DD_F32: return __ldg((const float *)row + d);
    case DD_F16: return __half2float(__ushort_as_half(__ldg((const unsigned short *)row + d)));
    case DD_BF16: return __uint_as_float((uint32_t)__ldg((const unsigned short *)row + d) << 16);
    default: {
        int bits = t.type == DD_Q8 ? 8 : 4, per = 32 / bits;
        uint32_t word = __ldg((const uint32_t *)row + d / per);
        uint32_t q = (word >> (bits * (d % per))) & ((1u << bits) - 1);
        int g = d / t.group, es = t.sbtype == DD_F32 ? 4 : 2;
        float s = 0, b = 0;
        const uint8_t *sp = t.scales + (size_t)r * t.sb_pitch + (size_t)g * es;
        const uint8_t *bp = t.biases + (size_t)r * t.sb_pitch + (size_t)g * es;
        if (t.sbtype == DD_F32) {
            s = __ldg((const float *)sp);
            b = __ldg((const float *)bp);
        } else if (t.sbtype == DD_F16) {
            s = __half2float(__ushort_as_half(__ldg((const unsigned short *)sp)));
            b = __half2float(__ushort_as_half(__ldg((const unsigned short *)bp)));
        } else {
            s = __uint_as_float((uint32_t)__ldg((const unsigned short *)sp) << 16);
            b = __uint_as_float((uint32_t)__ldg((const unsigned short *)bp) << 16);
        }
        float sq = s * (float)q;
        return sq + b;
    }
    }
}

/* sample (or take the given code) for stream s and gather its next input; whole block. zs: shared scratch of
 * CU_ACT_BYTES the logits row is copied into when it fits. Returns the code (-1: no finite logit; nothing
 * gathered). Inlined where the caller is the sampling kernel itself (tp_sample: the shared-memory pointers of SS
 * stay compile-time addresses; through the call they were generic pointers reloaded from the stack); out of line
 * for the frame kernel (cu_sample_stream), whose other code holds the registers. */
static __device__ __forceinline__ int cu_sample_stream_in(const cu_sample &S, const cu_params &P, int s, float *zs,
                                                          const cu_samp_smem &SS) {
    int code;
    if (S.forced) {
        code = S.code_is_stream ? s : __ldcg(S.code_in + (size_t)s * S.ldi);
    } else {
        uint64_t seed = P.seeds ? P.seeds[s] : 0, frame = P.frames ? P.frames[s] : 0;
        const float *zg = S.logits + (size_t)s * S.ldl;
        if ((size_t)S.V * 4 <= CU_ACT_BYTES) {
            for (int i = threadIdx.x; i < S.V; i += CU_THREADS) zs[i] = __ldcg(zg + i);
            __syncthreads();
            code = cu_sample_block([&](int i) { return zs[i]; }, S.V, P.temp, P.topk, seed, frame, S.level, SS);
        } else {
            code = cu_sample_block([&](int i) { return __ldcg(zg + i); }, S.V, P.temp, P.topk, seed, frame,
                                   S.level, SS);
        }
    }
    if (threadIdx.x == 0) {
        if (code < 0) atomicMin(&P.err[1], (s << 8) | S.level);
        if (S.code_out) S.code_out[(size_t)s * S.ldo] = code;
    }
    __syncthreads(); /* zs may be reused by the caller right after */
    if (code < 0 || !S.gather) return code;
    float *dst = S.xn + (size_t)s * S.ldxn;
    int r = code + S.row_off;
    for (int d = threadIdx.x; d < S.table.cols; d += CU_THREADS) {
        float v = cu_raw_val(S.table, r, d);
        if (S.pos) v = v + __ldg(S.pos + d);
        dst[d] = v;
    }
    return code;
}
static __device__ __noinline__ int cu_sample_stream(const cu_sample &S, const cu_params &P, int s, float *zs,
                                                    const cu_samp_smem &SS) {
    return cu_sample_stream_in(S, P, s, zs, SS);
}

#endif
