/* icache: how much code an SM keeps hot, and what fetching cold code costs (issue 13: is the latency kernel's
 * per-pass code bigger than the instruction caches?).
 *
 * Why: the latency executor's phases run 2-3x slower in the kernel than in isolation (docs/cuda_results.md,
 * 2026-12-04 01:55 UTC: normalise 1.02 us cold against 0.55 warm, lat_warm.patch), ncu counted ~104 KB of distinct
 * hot code a frame, and attention's code grew 31.7 -> 36.1 KB when B2-B4 lost 2-4% (2026-12-05). Whether that is
 * instruction fetch depends on the caches' sizes and miss costs, which NVIDIA does not publish for Hopper. This
 * measures them.
 *
 * The image: 256 segments of 64 FFMAs each (four independent chains, 16 bytes an instruction: 1 KB a segment plus
 * a countdown branch), laid out in order as one fall-through switch. A run enters at a segment and executes
 * `left` segments from there, so
 *   seq   enters once at segment 256 - ns and runs ns KB of straight-line code (sequential fetch: prefetch helps);
 *   rand  enters ns times, at segments 0 .. ns-1 in a random order, one segment each (a jump every KB, the next
 *         line never the one after: what a kernel that moves between phases sees).
 * Each block (one per SM, 150 KB of dynamic shared memory) runs the set REPS times in one launch; before the first
 * run it runs an eviction set (other segments, at least 64 KB where the image has them), so run 0 fetches its code
 * from L2 (a warm-up launch put the whole image there). Reported per (order, ns KB, warps a block, blocks): cold =
 * run 0, steady = median of runs 1.., both in SM cycles per KB of code (the slowest warp of the block; median over
 * blocks). 64 FFMAs on four chains issue in ~64-70 cycles, so a steady figure near that means the set stays in the
 * caches; a knee in steady over ns is a cache's capacity; cold - steady is the cost of fetching a KB from L2.
 *
 * Output: RESULT lines "icache | <order> ns <KB> warps <W> blocks <B> | cold <c> cyc/KB | steady <s> cyc/KB";
 * SUMMARY lines: the largest set whose steady figure stays within 1.25x of the 2 KB set's, and the cold cost of a KB
 * in ns, per order, at 4 warps and all SMs (the latency kernel's case: every SM runs the same code at once).
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a icache.cu -o icache && ./icache */
#include "derisk.cuh"

#define NSEG 256     /* segments in the image */
#define SEG_FMA 64   /* FFMAs a segment: 1 KB of SASS */
#define NWARP_MAX 16 /* warps a block */
#define REPS 6
#define PAD_SMEM (150 * 1024) /* one block a SM */

template <int I>
__device__ __forceinline__ void seg(float (&x)[4], float m) {
#pragma unroll
    for (int i = 0; i < SEG_FMA / 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = fmaf(x[j], m, (float)(I * SEG_FMA + 4 * i + j + 1) * 0x1p-24f);
    }
}

/* run `left` segments from segment `at`, in image order (fall-through: the code of segment i + 1 follows i's).
 * Inlined at its one call site, so the chains stay in registers. */
__device__ __forceinline__ void run_from(int at, int left, float (&x)[4], float m) {
#define C1(i)                                                                                                      \
    case (i):                                                                                                      \
        seg<(i)>(x, m);                                                                                            \
        if (--left == 0) break;
#define C4(i) C1(i) C1((i) + 1) C1((i) + 2) C1((i) + 3)
#define C16(i) C4(i) C4((i) + 4) C4((i) + 8) C4((i) + 12)
#define C64(i) C16(i) C16((i) + 16) C16((i) + 32) C16((i) + 48)
    switch (at) {
        C64(0)
        C64(64)
        C64(128)
        C64(192)
    default:
        break;
    }
#undef C1
#undef C4
#undef C16
#undef C64
}

struct ic_args {
    int seq;         /* 1: seq order, 0: rand */
    int ns;          /* the measured set, KB (segments) */
    const int *perm; /* rand: the order of segments 0 .. ns-1 */
    int ev_at, ev_n; /* eviction: ev_n segments from ev_at (seq), or segments ev_at .. ev_at + ev_n - 1 (rand) */
    int warps;
    float m;
    u64 *cyc;        /* [block][warp][REPS] */
    float *sink;
};

__device__ __forceinline__ void named_bar(int warps) { asm volatile("bar.sync 1, %0;" ::"r"(warps * 32) : "memory"); }

__global__ void __launch_bounds__(NWARP_MAX * 32, 1) ic_kernel(const ic_args a) {
    __shared__ int sperm[NSEG];
    for (int i = threadIdx.x; i < a.ns; i += blockDim.x) sperm[i] = a.perm[i];
    __syncthreads();
    const int w = threadIdx.x >> 5;
    if (w >= a.warps) return;
    float x[4] = {threadIdx.x * 1e-3f, 1.0f, 2.0f, 3.0f};
    u64 t0 = 0;
    /* r = -1: the eviction runs (other code than the measured set); r >= 0: the measured set, timed. One call
     * site of run_from; a rand run's next segment is read from shared memory before the current one runs. */
    for (int r = a.ev_n > 0 ? -1 : 0; r < REPS; r++) {
        const int nrun = a.seq ? 1 : r < 0 ? a.ev_n : a.ns;
        if (r >= 0) {
            named_bar(a.warps);
            t0 = dr_clock();
        }
        int nxt = r < 0 ? a.ev_at : a.seq ? NSEG - a.ns : sperm[0];
        for (int s = 0; s < nrun; s++) {
            const int at = nxt, left = !a.seq ? 1 : r < 0 ? a.ev_n : a.ns;
            if (s + 1 < nrun) nxt = r < 0 ? a.ev_at + s + 1 : sperm[s + 1];
            run_from(at, left, x, a.m);
        }
        if (r >= 0) {
            const u64 t1 = dr_clock();
            if ((threadIdx.x & 31) == 0) a.cyc[((size_t)blockIdx.x * NWARP_MAX + w) * REPS + r] = t1 - t0;
        }
    }
    if (x[0] + x[1] + x[2] + x[3] == 123.456f) a.sink[threadIdx.x] = x[0]; /* keeps the chains */
}

int main() {
    double mhz = 0;
    const int nsm = dr_banner("icache", &mhz);
    CK(cudaFuncSetAttribute(ic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PAD_SMEM));
    u64 *dcyc;
    float *dsink;
    int *dperm;
    CK(cudaMalloc(&dcyc, sizeof(u64) * nsm * NWARP_MAX * REPS));
    CK(cudaMalloc(&dsink, 4 * NWARP_MAX * 32));
    CK(cudaMalloc(&dperm, 4 * NSEG));
    std::vector<u64> h((size_t)nsm * NWARP_MAX * REPS);
    srand(12345);
    ic_args a = {};
    a.m = 0.999f;
    a.cyc = dcyc;
    a.sink = dsink;
    a.perm = dperm;
    /* the image to L2 (and every SM's first touch) */
    a.seq = 1, a.ns = NSEG, a.warps = 1;
    ic_kernel<<<nsm, NWARP_MAX * 32, PAD_SMEM>>>(a);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    const int sizes[] = {2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192};
    const int warps[] = {1, 4, 16};
    double base[2] = {0, 0}, knee[2] = {0, 0}, coldc[2] = {0, 0};
    int done[2] = {0, 0};
    for (int order = 1; order >= 0; order--)
        for (int wi = 0; wi < 3; wi++)
            for (int bi = 0; bi < 2; bi++)
                for (int si = 0; si < (int)(sizeof sizes / sizeof *sizes); si++) {
                    const int ns = sizes[si], B = bi ? nsm : 1;
                    a.seq = order, a.ns = ns, a.warps = warps[wi];
                    std::vector<int> p(ns);
                    for (int i = 0; i < ns; i++) p[i] = i;
                    for (int i = ns - 1; i > 0; i--) std::swap(p[i], p[rand() % (i + 1)]);
                    CK(cudaMemcpy(dperm, p.data(), 4 * ns, cudaMemcpyHostToDevice));
                    /* eviction set: seq measures [256 - ns, 256), evicts from 0; rand measures [0, ns), evicts
                     * from ns; at least 64 KB where the image has them, at most 128 */
                    const int others = NSEG - ns;
                    a.ev_n = std::min(others, 128);
                    a.ev_at = order ? 0 : ns;
                    CK(cudaMemset(dcyc, 0, sizeof(u64) * nsm * NWARP_MAX * REPS));
                    ic_kernel<<<B, NWARP_MAX * 32, PAD_SMEM>>>(a);
                    CK_LAUNCH();
                    CK(cudaDeviceSynchronize());
                    CK(cudaMemcpy(h.data(), dcyc, sizeof(u64) * nsm * NWARP_MAX * REPS, cudaMemcpyDeviceToHost));
                    std::vector<double> cold, steady;
                    for (int b = 0; b < B; b++) {
                        double c = 0;
                        std::vector<double> st;
                        for (int r = 1; r < REPS; r++) {
                            double mx = 0;
                            for (int ww = 0; ww < a.warps; ww++)
                                mx = std::max(mx, (double)h[((size_t)b * NWARP_MAX + ww) * REPS + r]);
                            st.push_back(mx);
                        }
                        for (int ww = 0; ww < a.warps; ww++)
                            c = std::max(c, (double)h[((size_t)b * NWARP_MAX + ww) * REPS]);
                        cold.push_back(c / ns);
                        steady.push_back(dr_median(st) / ns);
                    }
                    const double cm = dr_median(cold), sm = dr_median(steady);
                    printf("RESULT icache | %s ns %3d warps %2d blocks %3d | cold %7.1f cyc/KB | steady %7.1f cyc/KB "
                           "| ev %d KB\n",
                           order ? "seq " : "rand", ns, a.warps, B, cm, sm, a.ev_n);
                    if (a.warps == 4 && B == nsm) {
                        if (ns == 2) base[order] = sm;
                        if (!done[order] && sm <= 1.25 * base[order]) knee[order] = ns;
                        else done[order] = 1;
                        if (ns == 16) coldc[order] = (cm - sm) / mhz * 1e3;
                    }
                }
    for (int order = 1; order >= 0; order--)
        printf("SUMMARY icache %s (4 warps a block, every SM): steady within 1.25x of the 2 KB set up to %.0f KB of "
               "code; fetching a KB cold from L2 at 16 KB costs %.0f ns more than running it warm (SM %.0f MHz)\n",
               order ? "seq " : "rand", knee[order], coldc[order], mhz);
    CK(cudaFree(dcyc));
    CK(cudaFree(dsink));
    CK(cudaFree(dperm));
    return 0;
}
