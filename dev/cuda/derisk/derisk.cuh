/* Shared helpers of the de-risk microbenchmarks (the .cu files of dev/cuda/derisk; lab code, not the library).
 *
 * What is here: a check-and-exit macro for CUDA calls (benchmarks only: the library never exits), in-kernel timers,
 * the mbarrier / bulk-copy / cluster PTX wrappers the benchmarks share, a bounded mbarrier wait (every spin loop in
 * these programs ends at a %globaltimer deadline and reports a timeout instead of hanging), the measured SM clock,
 * the device banner, and a median helper.
 *
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a (Hopper only: bulk copies, mbarrier transaction
 * counts, clusters, wgmma). */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

typedef unsigned long long u64;

#define CK(x)                                                                                                      \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                    \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                        \
            fflush(stdout);                                                                                        \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)
/* after every launch: a bad configuration shows here, a fault at the next synchronisation */
#define CK_LAUNCH() CK(cudaGetLastError())

/* a word pattern no two places share, so a stale or misplaced piece changes a checksum (host and device agree) */
__host__ __device__ __forceinline__ uint32_t dr_hash(uint64_t i) {
    uint32_t x = (uint32_t)i * 0x9E3779B9u ^ (uint32_t)(i >> 32) * 0x85EBCA77u ^ 0x1234567u;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

/* ---- device: timers, ids ----------------------------------------------------------------------------------- */
__device__ __forceinline__ u64 dr_gtimer(void) { /* ns, device-wide */
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ u64 dr_clock(void) { /* this SM's cycles */
    u64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
    return t;
}
/* a published word {epoch << 32 | value bits} (the executors' LL words): one relaxed 8-byte load / store at gpu
 * scope, the latency executor's lt_ld / lt_st */
__device__ __forceinline__ u64 dr_ld_ll(const u64 *p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void dr_st_ll(u64 *p, float v, unsigned e) {
    const u64 w = ((u64)e << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w));
}
__device__ __forceinline__ uint32_t dr_smid(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t dr_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* ---- device: mbarrier and bulk copy (sm_90) ---------------------------------------------------------------- */
__device__ __forceinline__ void dr_mbar_init(u64 *b, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(dr_smem(b)), "r"(count) : "memory");
}
/* makes the inits visible to the async proxy (bulk copies) and to the cluster; then a block/cluster barrier */
__device__ __forceinline__ void dr_fence_mbar_init(void) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void dr_mbar_arrive(u64 *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(dr_smem(b)) : "memory");
}
/* arrive once and add `bytes` to the phase's expected transaction count */
__device__ __forceinline__ void dr_mbar_expect_tx(u64 *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(dr_smem(b)), "r"(bytes) : "memory");
}
/* one test: true once the phase with this parity has completed (acquire, CTA scope) */
__device__ __forceinline__ bool dr_mbar_try(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}
/* bounded wait: false if the deadline (%globaltimer ns) passed first; the timer is read every 64 failed tests */
__device__ __forceinline__ bool dr_mbar_wait(u64 *b, uint32_t parity, u64 deadline) {
    const uint32_t a = dr_smem(b);
    for (uint32_t n = 1;; n++) {
        if (dr_mbar_try(a, parity)) return true;
        if ((n & 63) == 0 && dr_gtimer() > deadline) return false;
    }
}
/* global -> this CTA's shared memory, completion (bytes) reported on the mbarrier `bar` of this CTA */
__device__ __forceinline__ void dr_bulk_g2s(void *dst, const void *src, uint32_t bytes, u64 *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     dr_smem(dst)),
                 "l"(src), "r"(bytes), "r"(dr_smem(bar))
                 : "memory");
}
/* the same with an L2 cache policy (createpolicy) for the source lines */
__device__ __forceinline__ void dr_bulk_g2s_hint(void *dst, const void *src, uint32_t bytes, u64 *bar, u64 pol) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
            "r"(dr_smem(dst)),
        "l"(src), "r"(bytes), "r"(dr_smem(bar)), "l"(pol)
        : "memory");
}
__device__ __forceinline__ u64 dr_policy_evict_first(void) {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ u64 dr_policy_evict_last(void) {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

/* ---- device: clusters (sm_90) -------------------------------------------------------------------------------- */
__device__ __forceinline__ uint32_t dr_cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t dr_cluster_size(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t dr_cluster_id(void) { /* linear cluster index in the grid (x only here) */
    uint32_t r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
/* the shared::cluster address of the same shared variable in CTA `rank` of this cluster */
__device__ __forceinline__ uint32_t dr_mapa(const void *p, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(dr_smem(p)), "r"(rank));
    return r;
}
/* whole-cluster barrier, every thread of every CTA; the non-.aligned form tolerates divergent warps */
__device__ __forceinline__ void dr_cluster_sync_any(void) {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

/* ---- host ------------------------------------------------------------------------------------------------------ */
static double dr_median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* SM clock as the kernels see it: cycles of clock64 over ns of %globaltimer while one thread per SM spins ~20 ms
 * on every SM (the chip is loaded, so this is the clock under load, not the idle clock) */
__global__ void dr_clock_kernel(u64 *out, u64 ns) {
    if (threadIdx.x != 0) return;
    const u64 t0 = dr_gtimer(), c0 = dr_clock();
    u64 t1;
    do {
        t1 = dr_gtimer();
    } while (t1 - t0 < ns);
    const u64 c1 = dr_clock();
    out[2 * blockIdx.x] = c1 - c0, out[2 * blockIdx.x + 1] = t1 - t0;
}
static double dr_sm_mhz(int nsm) {
    u64 *d;
    CK(cudaMalloc(&d, 16 * (size_t)nsm));
    dr_clock_kernel<<<nsm, 32>>>(d, 20000000ull);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    std::vector<u64> h(2 * (size_t)nsm);
    CK(cudaMemcpy(h.data(), d, 16 * (size_t)nsm, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    std::vector<double> mhz;
    for (int i = 0; i < nsm; i++)
        if (h[2 * i + 1]) mhz.push_back(1e3 * (double)h[2 * i] / (double)h[2 * i + 1]);
    return dr_median(mhz);
}

/* device banner; returns the number of SMs and, in *mhz, the SM clock under load. Fails early on anything but
 * compute capability 9.x */
static int dr_banner(const char *prog, double *mhz_out) {
    int dev = 0, drv = 0, rt = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, dev));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    int clk_khz = 0, memclk_khz = 0;
    cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, dev); /* informative only: not checked */
    cudaDeviceGetAttribute(&memclk_khz, cudaDevAttrMemoryClockRate, dev);
    printf("# %s on %s: cc %d.%d, %d SMs, L2 %.1f MiB (persisting max %.1f MiB), smem opt-in %zu B/block, "
           "HBM %.1f GiB, driver %d.%d, runtime %d.%d, max SM clock %.0f MHz, mem clock %.0f MHz\n",
           prog, p.name, p.major, p.minor, p.multiProcessorCount, p.l2CacheSize / 1048576.0,
           p.persistingL2CacheMaxSize / 1048576.0, p.sharedMemPerBlockOptin, p.totalGlobalMem / 1073741824.0,
           drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, clk_khz / 1e3, memclk_khz / 1e3);
    if (p.major != 9) {
        printf("FAIL %s: needs compute capability 9.x (Hopper), found %d.%d\n", prog, p.major, p.minor);
        exit(1);
    }
    const double mhz = dr_sm_mhz(p.multiProcessorCount);
    printf("# %s: SM clock under load (clock64 / %%globaltimer, median over SMs): %.0f MHz\n", prog, mhz);
    fflush(stdout);
    if (mhz_out) *mhz_out = mhz;
    return p.multiProcessorCount;
}

/* median time in microseconds of `reps` launches of f (each timed alone with events), after `warm` warm-up runs;
 * with `flush`, flush_bytes of it are overwritten before each launch, outside the events (L2 cold) */
template <class F> static double dr_time_us(F f, int warm, int reps, void *flush = NULL, size_t flush_bytes = 0) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) f();
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        if (flush) CK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3);
    }
    CK_LAUNCH();
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return dr_median(t);
}

/* us per call of f when n calls are enqueued back to back (events around the n calls; median of reps): the GPU's
 * time per call once the host's enqueue runs ahead of it, launch gaps included, as in a sequence of ops */
template <class F> static double dr_seq_us(F f, int n, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a));
        for (int j = 0; j < n; j++) f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / n);
    }
    CK_LAUNCH();
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return dr_median(t);
}

/* ---- bf16 test values (mma_swap.cu, wgmma_bits.cu): a fixed xorshift stream, bf16 bit patterns by flavour ---- */
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
/* a bf16 bit pattern of the given flavour (no NaN or inf: the contract's activations and weights are finite) */
static uint16_t bf(int flavour) {
    const uint32_t sign = rnd() & 1u, man = rnd() & 0x7Fu;
    uint32_t ex;
    switch (flavour) {
    case 0: ex = 120 + rnd() % 14; break;  /* normal, ~2^-7 .. 2^6 */
    case 1: ex = 1 + rnd() % 253; break;   /* any normal exponent */
    case 2: ex = 0; break;                 /* subnormal or zero */
    case 4: ex = 65 + rnd() % 119; break;  /* wide but no product overflows: 2^-62 .. 2^56 */
    default: ex = 100 + rnd() % 60; break; /* mid-wide */
    }
    if (flavour == 2 && (rnd() & 3) == 0) return (uint16_t)(sign << 15); /* +-0 */
    return (uint16_t)(sign << 15 | ex << 7 | man);
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2bf_rn(float f) { /* round to nearest even (finite inputs) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
