/* chain: the floor of a chain of dependent ops in the latency executor's design (issue 13), without weights.
 *
 * A frame of the latency executor is ~680 dependent ops (22 a pass at GPT dims, 31 passes); in every op each SM
 * polls the whole input vector of LL words ({value, epoch}) that other SMs published, runs the phases of a step,
 * and publishes its slice of the output. The per-op timeline (docs/cuda_results.md) puts a linear at ~7 us on the
 * critical path with well under 1 us of arithmetic; stage.cu measured the phases on one SM in isolation. This
 * program measures what the chain itself costs with every SM in it: one persistent launch of one block a SM (480
 * compute threads, as lt_kernel), NOPS ops, op o reading vector o (epoch o + 1) and writing vector o + 1 (epoch o +
 * 2; a fresh vector an op, so no op waits on a reuse), variants adding the phases of a norm linear one at a time:
 *   hop    poll all N words (8 loads in flight a thread, the missing ones re-read) -> barrier -> publish the slice
 *   stats  hop + one warp's two-pass LayerNorm statistics over the N values (the lanes' order of cu_row_stats) +
 *          barrier
 *   norm   stats + every thread normalises its values in shared memory + barrier (a norm linear's phases before
 *          its first weights)
 *   pstat  the norm's statistics carried by the hop: each producer publishes, with its slice (whole units of 16
 *          values), every unit's (sum, M2) as two more LL words; a consumer polls the values and the n / 8 partial
 *          words, one warp merges the n / 16 unit partials (Chan's formula, lane l units l, l + 32, ... in order,
 *          then a xor tree: a fixed order, so every executor can compute the same bits) + normalise + barrier:
 *          what the latency kernel's norm ops would cost if no consumer ran the statistics over the row
 * with all SMs publishing (a linear's output) or only F of them (attention: 16 producers at GPT dims B1; out and
 * fc2 with 64 units: 64). us per op = (time of NOPS ops - time of 2 ops) / (NOPS - 2), medians of 7 launches.
 * Every value is checked at the end (each op adds 1: the last vector holds the first + NOPS, epoch NOPS + 1), and
 * every wait ends at a %globaltimer deadline (reported, not hung).
 *
 * Output: RESULT lines "chain | <variant> N <n> producers <p> | <us> us per op"; SUMMARY: the per-op floor of the
 * design beside the 1.5 ms bar's ~2.2 us an op.
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a chain.cu -o chain && ./chain */
#include "derisk.cuh"

#define NC 480        /* compute threads (lt_kernel's LT_NC) */
#define NT (NC + 32)  /* and an idle warp where lt_kernel has its producer */
#define NMAX 4096
#define PAD_SMEM (150 * 1024) /* dynamic shared memory nobody uses: one block a SM, as lt_kernel's ~220 KB */

enum { V_HOP = 0, V_STATS = 1, V_NORM = 2, V_PSTAT = 3 };
static const char *vname[] = {"hop", "stats", "norm", "pstat"};
#define NWMAX (NMAX + NMAX / 8) /* a vector's words: n values, then (pstat) n / 16 units x (sum, M2) */

struct chain_args {
    u64 *buf; /* (nops + 1) vectors of nw LL words (n values; pstat: + n / 8 partial words) */
    int n, nw, nops, nprod, variant;
    int *err;       /* 0 ok; 1 + op: a wait timed out there */
    u64 timeout_ns; /* from the kernel's start, by %globaltimer */
};

__device__ __forceinline__ int warp_id(void) { return threadIdx.x >> 5; }
__device__ __forceinline__ void bar_nc(void) { asm volatile("bar.sync 1, %0;" ::"n"(NC) : "memory"); }

__global__ void __launch_bounds__(NT, 1) chain_kernel(chain_args A) {
    __shared__ float x[NWMAX];
    __shared__ float stat[2];
    __shared__ int bad;
    if (threadIdx.x >= NC) return;
    const int tid = threadIdx.x, lane = tid & 31, G = gridDim.x, b = blockIdx.x, n = A.n;
    if (tid == 0) bad = 0;
    bar_nc();
    const u64 deadline = dr_gtimer() + A.timeout_ns;
    const bool pst = A.variant == V_PSTAT;
    const int slice = pst ? (n / 16 + A.nprod - 1) / A.nprod * 16 : (n + A.nprod - 1) / A.nprod, nw = A.nw;
    for (int o = 0; o < A.nops; o++) {
        const u64 *in = A.buf + (size_t)o * nw;
        u64 *out = A.buf + (size_t)(o + 1) * nw;
        const unsigned E = (unsigned)o + 1u;
        /* the poll: elements tid + u NC, rounds of 8 in flight, the missing ones re-read together */
        for (int base = tid; base < nw; base += NC * 8) {
            u64 w[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int idx = base + u * NC;
                w[u] = idx < nw ? dr_ld_ll(in + idx) : (u64)E << 32;
            }
            unsigned spins = 0;
            for (;;) {
                unsigned miss = 0;
#pragma unroll
                for (int u = 0; u < 8; u++) miss |= (unsigned)((unsigned)(w[u] >> 32) != E) << u;
                if (!miss) break;
                if ((++spins & 255u) == 0 && dr_gtimer() > deadline) {
                    atomicCAS(A.err, 0, 1 + o);
                    bad = 1;
                    break;
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if ((miss >> u) & 1u) w[u] = dr_ld_ll(in + base + u * NC);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int idx = base + u * NC;
                if (idx < nw) x[idx] = __uint_as_float((unsigned)w[u]);
            }
        }
        bar_nc();
        if (bad) return;
        float mean = 0.0f, rstd = 1.0f;
        if (pst) { /* merge the units' (sum, M2): lane l units l, l + 32, ... in order, then a xor tree */
            if (tid < 32) {
                float cn = 0.0f, cm = 0.0f, c2 = 0.0f;
                for (int u = lane; u < n / 16; u += 32) {
                    const float bm = x[n + 2 * u] * (1.0f / 16.0f), b2 = x[n + 2 * u + 1];
                    const float tn = cn + 16.0f, d = bm - cm;
                    cm = cm + d * (16.0f / tn);
                    c2 = c2 + b2 + d * d * (cn * 16.0f / tn);
                    cn = tn;
                }
#pragma unroll
                for (int dl = 16; dl > 0; dl >>= 1) {
                    const float on = __shfl_xor_sync(0xffffffffu, cn, dl), om = __shfl_xor_sync(0xffffffffu, cm, dl),
                                o2 = __shfl_xor_sync(0xffffffffu, c2, dl);
                    const float tn = cn + on, d = om - cm;
                    if (tn > 0.0f) {
                        cm = cm + d * (on / tn);
                        c2 = c2 + o2 + d * d * (cn * on / tn);
                    }
                    cn = tn;
                }
                if (lane == 0) stat[0] = cm, stat[1] = 1.0f / sqrtf(c2 / (float)n + 1e-5f);
            }
            bar_nc();
            mean = stat[0], rstd = stat[1];
        } else if (A.variant >= V_STATS) {
            if (tid < 32) { /* cu_row_stats' order: lane sums k = lane + 32 i, then a xor tree; two passes */
                float s = 0.0f;
#pragma unroll 8
                for (int k = lane; k < n; k += 32) s += x[k];
#pragma unroll
                for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
                const float m = s / (float)n;
                float q = 0.0f;
#pragma unroll 8
                for (int k = lane; k < n; k += 32) {
                    const float dv = x[k] - m;
                    q += dv * dv;
                }
#pragma unroll
                for (int d = 16; d > 0; d >>= 1) q += __shfl_xor_sync(0xffffffffu, q, d);
                if (lane == 0) stat[0] = m, stat[1] = 1.0f / sqrtf(q / (float)n + 1e-5f);
            }
            bar_nc();
            mean = stat[0], rstd = stat[1];
        }
        if (A.variant >= V_NORM) { /* the values stay exact: + 0 * normalised (not folded: no fast math) */
            for (int k = tid; k < n; k += NC) x[k] = x[k] + 0.0f * ((x[k] - mean) * rstd);
            bar_nc();
        }
        if (b < A.nprod) { /* this SM's slice of the output; the others only read */
            const int k0 = b * slice, k1 = min(n, k0 + slice);
            for (int k = k0 + tid; k < k1; k += NC) dr_st_ll(out + k, x[k] + 1.0f + 0.0f * mean, E + 1u);
            if (pst) /* and its units' (sum, M2): a warp a unit, lanes 0-15 its values (the epilogue has them) */
                for (int u = k0 / 16 + warp_id(); u < k1 / 16; u += NC / 32) {
                    const float v = lane < 16 ? x[u * 16 + lane] + 1.0f : 0.0f;
                    float sm = v;
#pragma unroll
                    for (int dl = 8; dl > 0; dl >>= 1) sm += __shfl_xor_sync(0xffffffffu, sm, dl);
                    const float dv = lane < 16 ? v - sm * (1.0f / 16.0f) : 0.0f;
                    float q = dv * dv;
#pragma unroll
                    for (int dl = 8; dl > 0; dl >>= 1) q += __shfl_xor_sync(0xffffffffu, q, dl);
                    if (lane == 0) dr_st_ll(out + n + 2 * u, sm, E + 1u), dr_st_ll(out + n + 2 * u + 1, q, E + 1u);
                }
        }
        (void)G;
    }
}

struct cfg {
    int variant, n, nprod;
};

int main() {
    double mhz = 0;
    const int G = dr_banner("chain", &mhz);
    const int NOPS = 682; /* a GPT dims frame: 22 ops a pass x 31 */
    u64 *buf;
    int *err;
    CK(cudaMalloc(&buf, (size_t)(NOPS + 1) * NWMAX * 8));
    CK(cudaMalloc(&err, sizeof(int)));
    CK(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PAD_SMEM));
    std::vector<u64> h0(NWMAX), h1(NWMAX);
    for (int k = 0; k < NWMAX; k++) h0[k] = (1ull << 32) | __builtin_bit_cast(uint32_t, (float)(k % 97));
    std::vector<cfg> cfgs;
    for (int n : {1024, 4096})
        for (int v = V_HOP; v <= V_NORM; v++) cfgs.push_back({v, n, G});
    cfgs.push_back({V_HOP, 1024, 64});
    cfgs.push_back({V_HOP, 1024, 16});
    cfgs.push_back({V_NORM, 3072, G});
    for (int n : {1024, 4096}) cfgs.push_back({V_PSTAT, n, G}); /* n / 16 producers at most: 64 / 132 SMs at 1024 */
    int fails = 0;
    double floor_norm = 0, floor_hop = 0, floor_pstat = 0;
    for (const cfg &c : cfgs) {
        const int nw = c.variant == V_PSTAT ? c.n + c.n / 8 : c.n;
        auto run = [&](int nops) { /* the buffers as op 0 expects them */
            CK(cudaMemset(buf, 0, (size_t)(nops + 1) * nw * 8));
            CK(cudaMemcpy(buf, h0.data(), (size_t)nw * 8, cudaMemcpyHostToDevice));
            CK(cudaMemset(err, 0, sizeof(int)));
            return chain_args{buf, c.n, nw, nops, c.nprod, c.variant, err, 2000000000ull};
        };
        auto timed = [&](int nops) {
            std::vector<double> t;
            for (int r = 0; r < 7; r++) {
                const chain_args a = run(nops);
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                CK(cudaEventRecord(e0));
                chain_kernel<<<G, NT, PAD_SMEM>>>(a);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK_LAUNCH();
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                t.push_back(ms * 1e3);
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
                int e = 0;
                CK(cudaMemcpy(&e, err, sizeof e, cudaMemcpyDeviceToHost));
                if (e) {
                    printf("FAIL chain %s N %d producers %d: a wait timed out at op %d\n", vname[c.variant], c.n,
                           c.nprod, e - 1);
                    fails++;
                    return -1.0;
                }
                CK(cudaMemcpy(h1.data(), buf + (size_t)nops * nw, (size_t)c.n * 8, cudaMemcpyDeviceToHost));
                int wrong = 0;
                for (int k = 0; k < c.n; k++) {
                    const float want = (float)(k % 97) + (float)nops;
                    if ((unsigned)(h1[k] >> 32) != (unsigned)nops + 1u ||
                        __builtin_bit_cast(float, (uint32_t)h1[k]) != want)
                        wrong++;
                }
                if (wrong) {
                    printf("FAIL chain %s N %d producers %d nops %d: %d of %d final words wrong\n", vname[c.variant],
                           c.n, c.nprod, nops, wrong, c.n);
                    fails++;
                    return -1.0;
                }
            }
            return dr_median(t);
        };
        const double t2 = timed(2), tn = timed(NOPS);
        if (t2 < 0 || tn < 0) continue;
        const double per = (tn - t2) / (NOPS - 2);
        printf("RESULT chain | %-5s N %4d producers %3d | %6.3f us per op (%d ops %.1f us, 2 ops %.1f us; %.0f cycles "
               "an op at %.0f MHz)\n",
               vname[c.variant], c.n, c.nprod, per, NOPS, tn, t2, per * mhz, mhz);
        if (c.variant == V_NORM && c.n == 1024 && c.nprod == G) floor_norm = per;
        if (c.variant == V_HOP && c.n == 1024 && c.nprod == G) floor_hop = per;
        if (c.variant == V_PSTAT && c.n == 1024) floor_pstat = per;
        fflush(stdout);
    }
    printf("SUMMARY chain: a hop of 1024 words through all %d SMs %.3f us, with a norm's statistics and normalise "
           "%.3f us an op; x 22 ops x 31 passes = %.2f / %.2f ms a frame before any weights, mma, attention or "
           "sampling (the 1.5 ms bar allows ~2.2 us an op in all)\n",
           G, floor_hop, floor_norm, floor_hop * 682 / 1e3, floor_norm * 682 / 1e3);
    printf("SUMMARY chain: the norm's statistics carried by the hop (pstat, N 1024): %.3f us an op instead of %.3f\n",
           floor_pstat, floor_norm);
    CK(cudaFree(buf));
    CK(cudaFree(err));
    return fails ? 1 : 0;
}
