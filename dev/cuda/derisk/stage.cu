/* What do the phases of a latency-executor step cost on one SM with nothing else in the way?
 *
 * Why: the per-op timeline of src/cuda/lat.cu (dev/cuda/lat_timeline.cu) shows ~1.1 us for the norm statistics of
 * one 1024-wide row, ~0.95 us for normalise + pack and ~0.75 us for one round of mma items, 2-3x what the
 * instruction chains suggest, and a one-warp tree sum or an 8-warp split of the statistics measured no faster in the
 * kernel (2026-12-04). This program times the same code shapes in isolation (thread 0's SM clock around each phase,
 * closed by the compute warps' named barrier, median of many repetitions), with the other 131 SMs either idle or
 * spinning on L2 loads as the executor's waiting SMs do, so the gap between the two is the environment's share.
 *
 * Phases (480 compute threads = 15 warps, as LT_NC; row K = 1024 floats in shared memory):
 *   bar        an empty named barrier of the 15 warps
 *   poll8      1024 {value, epoch} words already published, read with 8 loads in flight per thread (lt_poll_runs)
 *   stats32    LayerNorm mean + variance by one warp, lanes sum k = lane + 32 i in order (the executor's today)
 *   stats_tree one warp, eight partials per lane combined as a tree (chains of K / 256)
 *   stats_8w   the tree's arithmetic over 8 warps + warp 0 combining (4 barriers)
 *   norm_u1    normalise + bf16 hi/lo pack of the row, loop not unrolled (the executor's today)
 *   norm_u3    the same, unrolled by 3 (all loads of a thread in flight)
 *   item1      one warp: one chunk (8 k-tiles x hi/lo = 16 dependent mma.sync) with A from shared memory
 *   item8      eight warps, one chunk each at once
 *   item_2x    one warp, two chunks interleaved (two independent accumulator chains)
 *   sample     the executor's sampler (cu_sample_block over the 15 warps): V 2048, T 0.9, top-k 50, the Gumbel noise
 *              precomputed (as lt_noise gives it), logits in shared memory; sample_old: the version before 2026-12-04
 *   hist_atom  the sampler's first radix pass alone: 2048 top-byte counts by shared atomics on one array + barrier
 *   hist_warp  the same into a row per warp (15 x 256 words), then 256 threads sum the rows (2 barriers)
 *   hist_agg   one array, but a warp whose 32 keys share one bucket adds 32 with one atomic (__all_sync)
 *   argmax     the sampler's end alone: scores of every index (noise given) and the block argmax (cu_block_best)
 * Each phase's first repetition (its code and data cold) is printed beside the median of the others.
 *
 *   nvcc -O3 -std=c++17 -fmad=false -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/derisk/stage.cu -o stage
 */
#include "derisk.cuh"

#include <string.h>

#include "cuda/cu_mma.cuh"
#include "cuda/cu_sample.cuh"

#define NC 480
#define NW (NC / 32)
#define K 1024
#define REPS 64

__device__ __forceinline__ void nbar(void) { asm volatile("bar.sync 1, %0;" ::"n"(NC) : "memory"); }

enum { PH_BAR, PH_POLL8, PH_STATS32, PH_TREE, PH_8W, PH_NORM1, PH_NORM3, PH_ITEM1, PH_ITEM8, PH_ITEM2X, PH_SAMPLE, PH_SAMPLE_OLD, PH_HIST_ATOM, PH_HIST_WARP, PH_HIST_AGG, PH_ARGMAX, NPH };
static const char *ph_name[NPH] = {"bar", "poll8", "stats32", "stats_tree", "stats_8w", "norm_u1", "norm_u3",
                                   "item1", "item8", "item_2x", "sample", "sample_old", "hist_atom", "hist_warp", "hist_agg", "argmax"};

__device__ volatile int g_stop;

struct sbar { /* the sampler's barrier: the compute warps' named barrier, as lat.cu's lt_bar */
    static constexpr int threads = NC;
    static __device__ __forceinline__ void sync(void) { nbar(); }
    static __device__ __forceinline__ int sync_or(int v) {
        int r;
        asm volatile("{ .reg .pred p, q; setp.ne.s32 p, %1, 0; bar.red.or.pred q, 1, %2, p; selp.s32 %0, 1, 0, q; }"
                     : "=r"(r)
                     : "r"(v), "n"(NC)
                     : "memory");
        return r;
    }
};
#define SV 2048

/* the sampler as it was before 2026-12-04 (4 passes of __match_any_sync-aggregated shared atomics, 4 barriers each),
 * for comparison with cu_sample_block */
template <class BAR = cu_bar_cta, class LD>
static __device__ int old_sample_block(LD z, int V, float T, int Kt, uint64_t seed, uint64_t frame, int level,
                               const cu_samp_smem &S, const float *gpre = NULL) {
    const int tid = threadIdx.x;
    int anyf = 0;
    for (int i = tid; i < V; i += BAR::threads) anyf |= isfinite(z(i)) ? 1 : 0;
    if (!BAR::sync_or(anyf)) return -1;
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
    uint32_t thr = 0;
    if (Kt > 0 && Kt < V) {
        uint32_t prefix = 0, mask = 0, k = (uint32_t)Kt;
#pragma unroll 1
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = tid; b < 256; b += BAR::threads) S.hist[b] = 0;
            BAR::sync();
            /* warp-aggregated: one shared atomic per distinct bucket per warp (logits crowd a few buckets) */
#pragma unroll 1
            for (int base = 0; base < V; base += BAR::threads) {
                int i = base + tid;
                uint32_t key = i < V ? dd_order_key(z(i)) : 0u;
                int valid = i < V && (key & mask) == prefix;
                unsigned b = valid ? (key >> shift) & 0xFFu : 256u + (tid & 31);
                unsigned same = __match_any_sync(0xffffffffu, b);
                if (valid && (tid & 31) == __ffs(same) - 1) atomicAdd(&S.hist[b], (unsigned)__popc(same));
            }
            BAR::sync();
            if (tid < 32) {
                /* lane l holds buckets 8l .. 8l+7; find the bucket holding the k-th largest, as sample.c's walk
                 * from bucket 255 down does */
                const int lane = tid;
                uint32_t cnt = 0;
                for (int j = 0; j < 8; j++) cnt += S.hist[8 * lane + j];
                uint32_t suf = cnt; /* sum over lanes >= lane */
                for (int o = 1; o < 32; o <<= 1) {
                    uint32_t v = __shfl_down_sync(0xffffffffu, suf, o);
                    if (lane + o < 32) suf += v;
                }
                unsigned ball = __ballot_sync(0xffffffffu, suf >= k);
                int L = 31 - __clz(ball);
                if (lane == L) {
                    uint32_t kk = k - (suf - cnt);
                    int b = 8 * L;
                    for (int j = 7; j >= 0; j--) {
                        b = 8 * L + j;
                        if (j == 0 || S.hist[b] >= kk) break;
                        kk -= S.hist[b];
                    }
                    S.sel[0] = b;
                    S.sel[1] = (int)kk;
                }
            }
            BAR::sync();
            prefix |= (uint32_t)S.sel[0] << shift;
            mask |= 0xFFu << shift;
            k = (uint32_t)S.sel[1];
            BAR::sync();
        }
        thr = prefix;
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


/* one chunk: 8 k-tiles, per k-tile the hi then the lo term (cu_ktile's order), A fragments from shared memory */
__device__ __forceinline__ void chunk(float (&d)[4], const uint4 *wt, const uint32_t *brow, int lane) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint4 a4 = wt[i * 32 + lane];
        const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
        const uint2 l0 = *(const uint2 *)(brow + i * 16), l8 = *(const uint2 *)(brow + i * 16 + 8);
        cu_mma(d, a, cu_hi_pair(l0.x, l0.y), cu_hi_pair(l8.x, l8.y));
        cu_mma(d, a, cu_lo_pair(l0.x, l0.y), cu_lo_pair(l8.x, l8.y));
    }
}

__global__ void __launch_bounds__(512, 1) k_stage(const u64 *words, const float *nw, const float *nb, u64 *cyc,
                                                  float *sink, int spin_others) {
    extern __shared__ __align__(16) uint8_t sm[];
    float *act = (float *)sm;                        /* K + pad floats */
    uint32_t *pk = (uint32_t *)(sm + 8192);          /* packed row */
    float *red = (float *)(sm + 16384);              /* 8 x 32 */
    float *st = (float *)(sm + 16384 + 1024);        /* mean, rstd */
    uint4 *ring = (uint4 *)(sm + 32768);             /* 16 KB of weight fragments: 2 chunks x 8 tiles x 512 B */
    float *zl = (float *)(sm + 49152), *gn = (float *)(sm + 57344); /* logits, noise */
    cu_samp_smem ss;
    ss.hist = (unsigned *)(sm + 65536);
    ss.sel = (int *)(sm + 65536 + 1024);
    ss.rv = (float *)(sm + 65536 + 1088);
    ss.ri = (int *)(sm + 65536 + 1216);
    ss.hist2 = (unsigned *)(sm + 65536 + 1536);
    ss.list = (unsigned *)(sm + 65536 + 2560);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (blockIdx.x != 0) { /* the other SMs: idle, or spinning on L2 loads like waiting consumers */
        if (spin_others && tid < NC) {
            const u64 *p = words + (blockIdx.x * 37 + tid) % K;
            u64 acc = 0;
            while (!g_stop) acc += dr_ld_ll(p);
            if (acc == 42) sink[1] = 1.0f;
        }
        return;
    }
    if (tid >= NC) return;
    for (int i = tid; i < 1024; i += NC) ring[i] = make_uint4(dr_hash(4 * i), dr_hash(4 * i + 1), dr_hash(4 * i + 2) & 0x3F7F3F7Fu, dr_hash(4 * i + 3) & 0x3F7F3F7Fu);
    for (int i = tid; i < K; i += NC) pk[i] = cu_split_pack(0.001f * (float)(i % 97));
    for (int i = tid; i < SV; i += NC) { /* logits ~ U(-8, 8), noise by SPEC 3's mapping */
        zl[i] = -8.0f + 16.0f * (float)(dr_hash(7 * i + 1) >> 8) * (1.0f / 16777216.0f);
        gn[i] = dd_gumbel_word(dr_hash(7 * i + 2));
    }
    nbar();
    float keep = 0.0f;
    for (int rep = 0; rep < REPS; rep++) {
        for (int ph = 0; ph < NPH; ph++) {
            nbar();
            const long long t0 = clock64();
            switch (ph) {
            case PH_BAR: break;
            case PH_POLL8: {
                const unsigned E = 7u;
                u64 w[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const int idx = tid + u * NC;
                    w[u] = idx < K ? dr_ld_ll(words + idx) : (u64)E << 32;
                }
                unsigned miss = 0;
#pragma unroll
                for (int u = 0; u < 8; u++) miss |= (unsigned)((unsigned)(w[u] >> 32) != E) << u;
                if (miss) keep += 1.0f;
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (tid + u * NC < K) act[tid + u * NC] = __uint_as_float((unsigned)w[u]);
                break;
            }
            case PH_STATS32:
                if (warp == 0) {
                    float s = 0.0f;
#pragma unroll 8
                    for (int k = lane; k < K; k += 32) s += act[k];
                    s = cu_warp_sum(s);
                    const float m = s / (float)K;
                    float q = 0.0f;
#pragma unroll 8
                    for (int k = lane; k < K; k += 32) {
                        const float d = act[k] - m;
                        q += d * d;
                    }
                    q = cu_warp_sum(q);
                    if (lane == 0) st[0] = m, st[1] = 1.0f / sqrtf(q / (float)K + 1e-5f);
                }
                break;
            case PH_TREE:
                if (warp == 0) {
                    auto tree = [&](auto val) {
                        float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
                        for (int k0 = lane; k0 < K; k0 += 256) {
#pragma unroll
                            for (int j = 0; j < 8; j++) a[j] = a[j] + val(k0 + 32 * j);
                        }
                        return cu_warp_sum(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
                    };
                    const float m = tree([&](int k) { return act[k]; }) / (float)K;
                    const float q = tree([&](int k) { const float d = act[k] - m; return d * d; });
                    if (lane == 0) st[0] = m, st[1] = 1.0f / sqrtf(q / (float)K + 1e-5f);
                }
                break;
            case PH_8W: {
                auto sum8 = [&](auto val) {
                    if (warp < 8) {
                        float acc = 0.0f;
#pragma unroll 4
                        for (int k0 = lane; k0 < K; k0 += 256) acc = acc + val(k0 + 32 * warp);
                        red[warp * 32 + lane] = acc;
                    }
                    nbar();
                    float r = 0.0f;
                    if (warp == 0) {
                        float a[8];
#pragma unroll
                        for (int j = 0; j < 8; j++) a[j] = red[j * 32 + lane];
                        r = cu_warp_sum(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
                    }
                    return r;
                };
                const float s = sum8([&](int k) { return act[k]; });
                if (tid == 0) st[0] = s / (float)K;
                nbar();
                const float m = st[0];
                const float q = sum8([&](int k) { const float d = act[k] - m; return d * d; });
                if (tid == 0) st[1] = 1.0f / sqrtf(q / (float)K + 1e-5f);
                break;
            }
            case PH_NORM1: {
                const float m = st[0], r = st[1];
#pragma unroll 1
                for (int k = tid; k < K; k += NC) pk[k] = cu_split_pack(cu_norm_val(act[k], k, DD_NORM_LAYER, m, r, nw, nb));
                break;
            }
            case PH_NORM3: {
                const float m = st[0], r = st[1];
#pragma unroll 3
                for (int k = tid; k < K; k += NC) pk[k] = cu_split_pack(cu_norm_val(act[k], k, DD_NORM_LAYER, m, r, nw, nb));
                break;
            }
            case PH_ITEM1:
            case PH_ITEM8:
                if (warp < (ph == PH_ITEM1 ? 1 : 8)) {
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    chunk(d, ring + (warp & 1) * 8 * 32, pk + 2 * (lane & 3) + (warp & 7) * 128, lane);
                    keep += d[0] + d[1] + d[2] + d[3];
                }
                break;
            case PH_ITEM2X:
                if (warp == 0) {
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int i = 0; i < 8; i++) { /* two chains, interleaved per k-tile */
                        const uint4 a4 = ring[i * 32 + lane], b4 = ring[(8 + i) * 32 + lane];
                        const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w}, b[4] = {b4.x, b4.y, b4.z, b4.w};
                        const uint32_t *br = pk + 2 * (lane & 3) + i * 16;
                        const uint2 l0 = *(const uint2 *)br, l8 = *(const uint2 *)(br + 8);
                        cu_mma(d, a, cu_hi_pair(l0.x, l0.y), cu_hi_pair(l8.x, l8.y));
                        cu_mma(e, b, cu_hi_pair(l0.x, l0.y), cu_hi_pair(l8.x, l8.y));
                        cu_mma(d, a, cu_lo_pair(l0.x, l0.y), cu_lo_pair(l8.x, l8.y));
                        cu_mma(e, b, cu_lo_pair(l0.x, l0.y), cu_lo_pair(l8.x, l8.y));
                    }
                    keep += d[0] + e[3];
                }
                break;
            case PH_SAMPLE:
            case PH_SAMPLE_OLD: {
                const int c = ph == PH_SAMPLE ? cu_sample_block<sbar>([zl](int i) { return zl[i]; }, SV, 0.9f, 50, 1, 2, 3, ss, gn)
                                              : old_sample_block<sbar>([zl](int i) { return zl[i]; }, SV, 0.9f, 50, 1, 2, 3, ss, gn);
                if (tid == 0) sink[2 + (ph - PH_SAMPLE)] = (float)c; /* the two must agree */
                keep += (float)c;
                break;
            }
            case PH_HIST_ATOM:
            case PH_HIST_AGG: {
                unsigned *h = ss.hist;
                for (int b = tid; b < 256; b += NC) h[b] = 0u;
                nbar();
                for (int i = tid; i < SV; i += NC) {
                    const unsigned b = dd_order_key(zl[i]) >> 24;
                    if (ph == PH_HIST_AGG && __all_sync(__activemask(), b == __shfl_sync(__activemask(), b, 0))) {
                        if (lane == 0) atomicAdd(&h[b], (unsigned)__popc(__activemask()));
                    } else {
                        atomicAdd(&h[b], 1u);
                    }
                }
                nbar();
                keep += (float)h[lane];
                break;
            }
            case PH_HIST_WARP: {
                unsigned *h = (unsigned *)(sm + 65536 + 4096); /* 15 x 256 words */
                for (int b = lane; b < 256; b += 32) h[warp * 256 + b] = 0u;
                __syncwarp();
                for (int i = tid; i < SV; i += NC) atomicAdd(&h[warp * 256 + (dd_order_key(zl[i]) >> 24)], 1u);
                nbar();
                if (tid < 256) {
                    unsigned c = 0;
#pragma unroll
                    for (int w = 0; w < NW; w++) c += h[w * 256 + tid];
                    ss.hist[tid] = c;
                }
                nbar();
                keep += (float)ss.hist[lane];
                break;
            }
            case PH_ARGMAX: {
                float bs = -INFINITY;
                int bi = -1;
                const float invT = dd_inv_temperature(0.9f);
                for (int i = tid; i < SV; i += NC) cu_best(bs, bi, dd_sample_score(zl[i], invT, gn[i]), i);
                cu_block_best<sbar>(bs, bi, ss);
                keep += (float)bi;
                break;
            }
            }
            nbar();
            if (tid == 0) cyc[rep * NPH + ph] = (u64)(clock64() - t0);
        }
    }
    if (tid < 32) sink[0] = keep;
    if (tid == 0) g_stop = 1;
}

int main(void) {
    double mhz = 0;
    const int nsm = dr_banner("stage", &mhz);
    std::vector<u64> hw(K);
    for (int i = 0; i < K; i++) {
        const float v = 0.5f + 0.01f * (float)(i % 89);
        uint32_t b;
        memcpy(&b, &v, 4);
        hw[i] = ((u64)7u << 32) | b;
    }
    std::vector<float> hn(K, 1.0f), hb(K, 0.01f);
    u64 *words, *cyc;
    float *nw, *nb, *sink;
    CK(cudaMalloc(&words, K * 8));
    CK(cudaMalloc(&nw, K * 4));
    CK(cudaMalloc(&nb, K * 4));
    CK(cudaMalloc(&cyc, REPS * NPH * 8));
    CK(cudaMalloc(&sink, 64));
    CK(cudaMemcpy(words, hw.data(), K * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(nw, hn.data(), K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(nb, hb.data(), K * 4, cudaMemcpyHostToDevice));
    const int smem = 65536 + 4096 + 15 * 1024;
    CK(cudaFuncSetAttribute(k_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int spin = 0; spin < 2; spin++) {
        const int zero = 0;
        CK(cudaMemcpyToSymbol(g_stop, &zero, sizeof zero));
        k_stage<<<spin ? nsm : 1, 512, smem>>>(words, nw, nb, cyc, sink, spin);
        CK_LAUNCH();
        CK(cudaDeviceSynchronize());
        std::vector<u64> hc(REPS * NPH);
        CK(cudaMemcpy(hc.data(), cyc, hc.size() * 8, cudaMemcpyDeviceToHost));
        for (int ph = 0; ph < NPH; ph++) {
            std::vector<double> v;
            for (int r = 2; r < REPS; r++) v.push_back((double)hc[r * NPH + ph]);
            const double med = dr_median(v), c0 = (double)hc[ph];
            printf("RESULT stage | %-10s | other SMs %-8s | %7.0f cycles | %6.3f us | first (cold) %6.3f us\n", ph_name[ph],
                   spin ? "spinning" : "idle", med, med / mhz, c0 / mhz);
        }
    }
    float hs[4];
    CK(cudaMemcpy(hs, sink, sizeof hs, cudaMemcpyDeviceToHost));
    printf("RESULT stage | sampler codes: new %d, old %d (%s)\n", (int)hs[2], (int)hs[3], hs[2] == hs[3] ? "equal" : "DIFFERENT");
    printf("SUMMARY stage: phase costs measured (cycles at %.0f MHz)\n", mhz);
    return 0;
}
