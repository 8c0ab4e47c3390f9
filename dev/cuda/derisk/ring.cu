/* De-risk 1: the per-SM weight-streaming ring (docs: shared/CUDA_V2.md, "Still open for your first call").
 *
 * The latency executor's plan: one producer warp per SM streams weight pieces into a ring of slots in shared memory
 * with cp.async.bulk (completion counted in bytes on a `full` mbarrier per slot) while 15 compute warps consume
 * them and free each slot on its `empty` mbarrier. Questions this program answers on the H200:
 *   1. aggregate rate of that ring with every SM streaming its own slice of 1 GiB (HBM, not L2), per piece size
 *      (8/16/32 KB) and ring depth, without and with an L2 evict_first policy on the copies;
 *   2. the same when the slices total ~37 MB read over and over (an L2-resident set, policy evict_last), and a
 *      ~17 MB set;
 *   3. references: every thread loading 16 bytes at a time (ld.global.v4, 8 loads in flight per thread) over the
 *      same slices; cudaMemcpy device-to-device;
 *   4. latency of ONE piece (issue -> full barrier completes) on an otherwise idle SM, 4/16/32 KB, from HBM (after
 *      an L2 flush; with a cold and a warm TLB) and from L2.
 * Every consumer reads every byte of every piece and sums it; the per-block checksum is compared with the host's
 * (a stale, missing or misplaced piece changes it), and every wait has a %globaltimer deadline.
 *
 * Layout: buf (1 GiB) holds word i = dr_hash(i). Block b streams buf[b*slice, (b+1)*slice) `passes` times, slice a
 * multiple of 32 KB. One block per SM (grid = SM count, 200 KB of dynamic shared memory requested whatever the ring
 * size, so no SM can take two); the SM of each block is recorded and checked.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/derisk/ring.cu -o ring && ./ring */
#include "derisk.cuh"

#include <string.h>
#include <thread>

#define RING_THREADS 512   /* 15 consumer warps + 1 producer warp */
#define RING_CONS_WARPS 15 /* warps 0..14 consume, warp 15 produces */
#define RING_SMEM (200 * 1024)
#define PLAIN_U 8 /* 16-byte loads in flight per thread in the plain-load reference */
#define TIMEOUT_NS 2000000000ull

enum { HINT_NONE = 0, HINT_FIRST = 1, HINT_LAST = 2 };
static const char *hint_name[] = {"none", "evict_first", "evict_last"};

typedef struct ring_args {
    const unsigned char *buf; /* block b streams buf + b*slice, slice bytes, `passes` times */
    unsigned long long slice; /* bytes per block, a multiple of piece */
    int piece, nslot, passes, hint;
    const uint32_t *expect; /* [grid] expected checksum (sum of the 32-bit words read, mod 2^32) */
    uint32_t *sums;         /* [grid] checksum found */
    int *smid;              /* [grid] SM of each block */
    int *err;               /* [0] checksum mismatches, [1] timeouts */
} ring_args;

/* sum of all threads' v among the first `nthreads` threads (whole warps); result valid in thread 0; uses 32 words
 * of shared memory at red */
__device__ __forceinline__ uint32_t block_sum(uint32_t v, uint32_t *red, int nthreads) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
    uint32_t t = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < nthreads / 32; w++) t += red[w];
    return t;
}

/* The ring. Shared memory: nslot slots of `piece` bytes, then full[nslot], empty[nslot], then 32 words for the sum.
 * Producer (warp 15, lane 0): piece k goes to slot k % nslot; before reusing a slot it waits for that slot's
 * `empty` phase of the previous round; it arms `full` with the piece's byte count and issues one bulk copy.
 * Consumers (warps 0..14, every lane): wait for `full` phase k / nslot, read the whole piece (16 bytes a lane a
 * step), then lane 0 of each warp arrives on `empty` (count 15). A timeout is voted per warp so a warp leaves the
 * loop together. */
__global__ void __launch_bounds__(RING_THREADS, 1) ring_kernel(const ring_args a) {
    extern __shared__ __align__(128) unsigned char smem[];
    u64 *full = (u64 *)(smem + (size_t)a.nslot * a.piece), *empty = full + a.nslot;
    uint32_t *red = (uint32_t *)(empty + a.nslot);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const u64 deadline = dr_gtimer() + TIMEOUT_NS;
    if (threadIdx.x == 0) {
        for (int i = 0; i < a.nslot; i++) dr_mbar_init(&full[i], 1), dr_mbar_init(&empty[i], RING_CONS_WARPS);
        dr_fence_mbar_init();
        a.smid[blockIdx.x] = (int)dr_smid();
    }
    __syncthreads();
    const unsigned char *src = a.buf + (size_t)blockIdx.x * a.slice;
    const int npiece = (int)(a.slice / a.piece), total = npiece * a.passes;
    if (warp == RING_CONS_WARPS) {
        if (lane == 0) {
            const u64 pol = a.hint == HINT_LAST ? dr_policy_evict_last() : dr_policy_evict_first();
            int s = 0, round = 0, j = 0; /* slot, round of the ring, piece within the slice: no divisions */
            for (int k = 0; k < total; k++) {
                if (round > 0 && !dr_mbar_wait(&empty[s], (uint32_t)((round - 1) & 1), deadline)) {
                    atomicAdd(&a.err[1], 1);
                    break;
                }
                dr_mbar_expect_tx(&full[s], (uint32_t)a.piece);
                const unsigned char *g = src + (size_t)j * a.piece;
                if (a.hint == HINT_NONE) dr_bulk_g2s(smem + (size_t)s * a.piece, g, (uint32_t)a.piece, &full[s]);
                else dr_bulk_g2s_hint(smem + (size_t)s * a.piece, g, (uint32_t)a.piece, &full[s], pol);
                if (++j == npiece) j = 0;
                if (++s == a.nslot) s = 0, round++;
            }
        }
        return; /* the copies it issued complete on `full`, which the consumers wait for before the block ends */
    }
    uint32_t sum = 0;
    const int n16 = a.piece / 16;
    int s = 0;
    uint32_t parity = 0;
    for (int k = 0; k < total; k++) {
        const bool ok = dr_mbar_wait(&full[s], parity, deadline);
        if (!__all_sync(0xffffffffu, ok)) {
            if (lane == 0) atomicAdd(&a.err[1], 1);
            break;
        }
        const uint4 *p = (const uint4 *)(smem + (size_t)s * a.piece);
        for (int i = threadIdx.x; i < n16; i += RING_CONS_WARPS * 32) {
            const uint4 v = p[i];
            sum += v.x + v.y + v.z + v.w;
        }
        __syncwarp();
        if (lane == 0) dr_mbar_arrive(&empty[s]);
        if (++s == a.nslot) s = 0, parity ^= 1;
    }
    const uint32_t t = block_sum(sum, red, RING_CONS_WARPS * 32);
    if (threadIdx.x == 0) {
        a.sums[blockIdx.x] = t;
        if (t != a.expect[blockIdx.x]) atomicAdd(&a.err[0], 1);
    }
}

/* 16-byte global load with the L2 policy of HINT (the policy form: `ld...L2::evict_first` with 128-bit loads is
 * rejected by ptxas 13 on sm_90a, CUDA_V2.md) */
template <int HINT> __device__ __forceinline__ uint4 ld16(const uint4 *p, u64 pol) {
    uint4 v;
    if (HINT == HINT_NONE)
        asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    else
        asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p), "l"(pol));
    return v;
}

/* Reference: all 512 threads of the block load the block's slice with coalesced 16-byte loads, PLAIN_U of them in
 * flight per thread (64 KB per SM), and sum it like the ring does. Same grid, same shared memory request. */
template <int HINT> __global__ void __launch_bounds__(RING_THREADS, 1) plain_kernel(const ring_args a) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint32_t *red = (uint32_t *)smem;
    const u64 pol = HINT == HINT_LAST ? dr_policy_evict_last() : dr_policy_evict_first();
    const uint4 *src = (const uint4 *)(a.buf + (size_t)blockIdx.x * a.slice);
    const long n = (long)(a.slice / 16);
    if (threadIdx.x == 0) a.smid[blockIdx.x] = (int)dr_smid();
    uint32_t sum = 0;
    for (int p = 0; p < a.passes; p++)
        for (long base = 0; base < n; base += RING_THREADS * PLAIN_U) {
            uint4 v[PLAIN_U];
#pragma unroll
            for (int j = 0; j < PLAIN_U; j++) {
                const long i = base + j * RING_THREADS + threadIdx.x;
                v[j] = i < n ? ld16<HINT>(src + i, pol) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < PLAIN_U; j++) sum += v[j].x + v[j].y + v[j].z + v[j].w;
        }
    const uint32_t t = block_sum(sum, red, RING_THREADS);
    if (threadIdx.x == 0) {
        a.sums[blockIdx.x] = t;
        if (t != a.expect[blockIdx.x]) atomicAdd(&a.err[0], 1);
    }
}

__global__ void fill_kernel(uint32_t *buf, size_t nwords) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nwords; i += (size_t)gridDim.x * blockDim.x)
        buf[i] = dr_hash(i);
}

/* After the evict_last runs: put those lines back to normal priority so they do not squat in L2 for the programs
 * that run after this one (applypriority works on one 128-byte line). */
__global__ void unpin_kernel(const unsigned char *p, size_t bytes) {
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 128; i < bytes;
         i += (size_t)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i) : "memory");
}

/* One piece at a time on one idle SM (one warp): for each size and trial, lane 0 reads clock64, arms the barrier,
 * issues the copy, spins on the barrier, reads clock64. Three kinds of source, each region in the upper half of buf
 * (trials <= 16), used once and 4 MiB away from any other (no neighbour prefetch; for kind 0, a TLB entry not yet
 * used in this kernel):
 *   kind 0 "hbm":       a region untouched since the host flushed L2;
 *   kind 1 "hbm tlb":   the same after one 4-byte load 1 MiB further into the same 2 MiB page (warms the TLB,
 *                       not the piece's lines);
 *   kind 2 "l2":        the kind-1 region again, right after kind 1 loaded it.
 * out[((size * trials + t) * 3 + kind) * 2 + {0, 1}] = {cycles, globaltimer ns}. Every piece is then checked word
 * by word against dr_hash (err[0]); a timeout goes to err[1]. */
#define LAT_NSIZE 3
__constant__ int lat_sizes[LAT_NSIZE] = {4096, 16384, 32768};
__global__ void lat_kernel(const unsigned char *buf, int trials, u64 *out, int *err) {
    extern __shared__ __align__(128) unsigned char smem[];
    u64 *bar = (u64 *)(smem + 32768);
    const int lane = threadIdx.x;
    const u64 deadline = dr_gtimer() + TIMEOUT_NS;
    if (lane == 0) dr_mbar_init(bar, 1), dr_fence_mbar_init();
    __syncwarp();
    uint32_t phase = 0;
    for (int si = 0; si < LAT_NSIZE; si++)
        for (int t = 0; t < trials; t++)
            for (int kind = 0; kind < 3; kind++) {
                const int bytes = lat_sizes[si];
                const size_t off =
                    ((size_t)512 << 20) + (size_t)(si * trials + t) * (8u << 20) + (kind ? (4u << 20) : 0);
                const unsigned char *src = buf + off;
                if (kind == 1 && lane == 0) {
                    uint32_t w;
                    asm volatile("ld.global.u32 %0, [%1];" : "=r"(w) : "l"(src + (1u << 20)) : "memory");
                    if (w != dr_hash((off + (1u << 20)) / 4)) atomicAdd(&err[0], 1);
                }
                bool ok = true;
                if (lane == 0) {
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* earlier reads of smem by lanes */
                    const u64 g0 = dr_gtimer(), c0 = dr_clock();
                    dr_mbar_expect_tx(bar, (uint32_t)bytes);
                    dr_bulk_g2s(smem, src, (uint32_t)bytes, bar);
                    ok = dr_mbar_wait(bar, phase, deadline);
                    const u64 c1 = dr_clock(), g1 = dr_gtimer();
                    const size_t o = (((size_t)si * trials + t) * 3 + kind) * 2;
                    out[o] = c1 - c0, out[o + 1] = g1 - g0;
                }
                ok = __shfl_sync(0xffffffffu, ok ? 1 : 0, 0) != 0;
                if (!ok) {
                    if (lane == 0) atomicAdd(&err[1], 1);
                    return;
                }
                dr_mbar_wait(bar, phase, deadline); /* every lane acquires the copy's writes */
                phase ^= 1;
                int bad = 0;
                for (int w = lane; w < bytes / 4; w += 32) bad += ((const uint32_t *)smem)[w] != dr_hash(off / 4 + w);
                if (bad) atomicAdd(&err[0], bad);
                __syncwarp();
            }
}

/* ---- host ------------------------------------------------------------------------------------------------------ */

/* expected checksum of block b: passes * sum of dr_hash over the block's slice (mod 2^32), 16 host threads */
static std::vector<uint32_t> expected_sums(int grid, size_t slice, int passes) {
    std::vector<uint32_t> e(grid);
    const int nt = 16;
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            for (int b = t; b < grid; b += nt) {
                uint32_t s = 0;
                const size_t w0 = (size_t)b * slice / 4, w1 = w0 + slice / 4;
                for (size_t w = w0; w < w1; w++) s += dr_hash(w);
                e[b] = s * (uint32_t)passes;
            }
        });
    for (auto &x : th) x.join();
    return e;
}

typedef struct dev_bufs {
    unsigned char *buf, *dst; /* 1 GiB source; 1 GiB copy target, also the L2 flush buffer */
    uint32_t *expect, *sums;
    int *smid, *err;
    int grid;
} dev_bufs;

/* runs one configuration (ring or plain), returns TB/s (bytes the SMs read / median time); prints one line */
static double run_config(const dev_bufs &D, const char *set, bool ring, size_t slice, int passes, int piece,
                         int nslot, int hint, const std::vector<uint32_t> &expect, int reps) {
    const int G = D.grid;
    CK(cudaMemcpy(D.expect, expect.data(), 4 * (size_t)G, cudaMemcpyHostToDevice));
    CK(cudaMemset(D.err, 0, 8));
    CK(cudaMemset(D.smid, 0xff, 4 * (size_t)G));
    ring_args a = {D.buf, slice, piece, nslot, passes, hint, D.expect, D.sums, D.smid, D.err};
    const size_t ring_bytes = (size_t)nslot * piece + 16 * (size_t)nslot + 128;
    if (ring && ring_bytes > RING_SMEM) {
        printf("SKIP ring %s piece %d x %d slots: %zu B of shared memory > %d\n", set, piece, nslot, ring_bytes,
               RING_SMEM);
        return 0;
    }
    auto launch = [&]() {
        if (ring) ring_kernel<<<G, RING_THREADS, RING_SMEM>>>(a);
        else if (hint == HINT_NONE) plain_kernel<HINT_NONE><<<G, RING_THREADS, RING_SMEM>>>(a);
        else if (hint == HINT_FIRST) plain_kernel<HINT_FIRST><<<G, RING_THREADS, RING_SMEM>>>(a);
        else plain_kernel<HINT_LAST><<<G, RING_THREADS, RING_SMEM>>>(a);
        CK_LAUNCH();
    };
    const double us = dr_time_us(launch, 2, reps);
    CK(cudaDeviceSynchronize());
    int err[2];
    std::vector<int> smid(G);
    CK(cudaMemcpy(err, D.err, 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(smid.data(), D.smid, 4 * (size_t)G, cudaMemcpyDeviceToHost));
    std::vector<int> sorted = smid;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::unique(sorted.begin(), sorted.end()) == sorted.end() && sorted[0] >= 0;
    const double bytes = (double)G * slice * passes, tbs = bytes / (us * 1e-6) / 1e12;
    char what[96];
    if (ring) snprintf(what, sizeof what, "ring  piece %2dK x %2d slots (%3dK)", piece / 1024, nslot,
                       nslot * piece / 1024);
    else snprintf(what, sizeof what, "plain ld.global.v4 x%d/thread       ", PLAIN_U);
    const bool ok = err[0] == 0 && err[1] == 0;
    printf("RESULT ring | %-4s %6.1f MB x%-2d | %s | hint %-11s | %6.2f TB/s | %8.1f us | %s%s\n", set,
           G * (double)slice / 1e6, passes, what, hint_name[hint], tbs, us,
           ok ? "ok" : (err[1] ? "FAIL timeout" : "FAIL checksum"), distinct ? "" : " (WARN: blocks share an SM)");
    if (!ok) printf("FAIL ring %s: %d checksum mismatches, %d timeouts (over %d warm+%d timed launches)\n", set, err[0],
                    err[1], 2, reps);
    fflush(stdout);
    return ok ? tbs : -1;
}

int main(void) {
    double mhz; /* for converting the latency kernel's cycles */
    const int G = dr_banner("ring", &mhz);
    CK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, RING_SMEM));
    CK(cudaFuncSetAttribute(plain_kernel<HINT_NONE>, cudaFuncAttributeMaxDynamicSharedMemorySize, RING_SMEM));
    CK(cudaFuncSetAttribute(plain_kernel<HINT_FIRST>, cudaFuncAttributeMaxDynamicSharedMemorySize, RING_SMEM));
    CK(cudaFuncSetAttribute(plain_kernel<HINT_LAST>, cudaFuncAttributeMaxDynamicSharedMemorySize, RING_SMEM));
    CK(cudaFuncSetAttribute(lat_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 32768 + 64));

    const size_t TOTAL = 1ull << 30;
    dev_bufs D;
    D.grid = G;
    CK(cudaMalloc(&D.buf, TOTAL));
    CK(cudaMalloc(&D.dst, TOTAL));
    CK(cudaMalloc(&D.expect, 4 * (size_t)G));
    CK(cudaMalloc(&D.sums, 4 * (size_t)G));
    CK(cudaMalloc(&D.smid, 4 * (size_t)G));
    CK(cudaMalloc(&D.err, 8));
    fill_kernel<<<4 * G, 512>>>((uint32_t *)D.buf, TOTAL / 4);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());

    /* ---- 1. HBM: slices of 1 GiB / G (rounded down to 32 KB), one pass per launch ---- */
    const size_t slice_hbm = TOTAL / G / 32768 * 32768;
    const std::vector<uint32_t> e_hbm = expected_sums(G, slice_hbm, 1);
    printf("# HBM set: %d blocks x %.2f MB = %.1f MB per launch; every byte read by the consumers and checksummed\n", G,
           slice_hbm / 1e6, G * (double)slice_hbm / 1e6);
    struct cfg {
        int piece, nslot;
    };
    const cfg hbm_cfgs[] = {{8192, 16}, {16384, 4}, {16384, 8}, {16384, 12}, {32768, 4}, {32768, 6}};
    double best_hbm = 0;
    for (const cfg &c : hbm_cfgs)
        for (int hint : {HINT_NONE, HINT_FIRST})
            best_hbm = std::max(best_hbm, run_config(D, "hbm", true, slice_hbm, 1, c.piece, c.nslot, hint, e_hbm, 15));
    double plain_hbm = 0;
    for (int hint : {HINT_NONE, HINT_FIRST})
        plain_hbm = std::max(plain_hbm, run_config(D, "hbm", false, slice_hbm, 1, 0, 0, hint, e_hbm, 15));

    /* cudaMemcpy device to device, 1 GiB: bytes read + bytes written over time, and a sample check of the copy */
    CK(cudaMemset(D.dst, 0, TOTAL));
    auto copy = [&]() { CK(cudaMemcpyAsync(D.dst, D.buf, TOTAL, cudaMemcpyDeviceToDevice)); };
    const double cp_us = dr_time_us(copy, 1, 5);
    {
        int bad = 0;
        std::vector<uint32_t> h(4096);
        for (int s = 0; s < 16; s++) {
            const size_t w0 = (size_t)s * (TOTAL / 4 / 16) + 12345;
            CK(cudaMemcpy(h.data(), D.dst + 4 * w0, 4 * h.size(), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < h.size(); i++) bad += h[i] != dr_hash(w0 + i);
        }
        printf("RESULT ring | hbm  %6.1f MB    | cudaMemcpy D2D (read+write counted)  | hint %-11s | %6.2f TB/s | "
               "%8.1f us | %s\n",
               TOTAL / 1e6, "-", 2.0 * TOTAL / (cp_us * 1e-6) / 1e12, cp_us, bad ? "FAIL copy check" : "ok");
    }

    /* ---- 2. L2-resident sets: slices of 128 KB (~17 MB in all) and 288 KB (~38 MB), 40 passes per launch ---- */
    double best_l2 = 0, plain_l2 = 0;
    for (size_t slice_l2 : {(size_t)128 * 1024, (size_t)288 * 1024}) {
        const int passes = 40;
        const std::vector<uint32_t> e_l2 = expected_sums(G, slice_l2, passes);
        const char *set = slice_l2 < 200 * 1024 ? "l2s" : "l2";
        const cfg l2_cfgs[] = {{16384, 8}, {16384, 12}, {32768, 6}};
        for (const cfg &c : l2_cfgs)
            for (int hint : {HINT_NONE, HINT_LAST}) {
                const double r = run_config(D, set, true, slice_l2, passes, c.piece, c.nslot, hint, e_l2, 15);
                if (slice_l2 > 200 * 1024) best_l2 = std::max(best_l2, r);
            }
        for (int hint : {HINT_NONE, HINT_LAST}) {
            const double r = run_config(D, set, false, slice_l2, passes, 0, 0, hint, e_l2, 15);
            if (slice_l2 > 200 * 1024) plain_l2 = std::max(plain_l2, r);
        }
    }
    unpin_kernel<<<4 * G, 256>>>(D.buf, (size_t)G * 288 * 1024);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());

    /* ---- 3. latency of one piece on an idle SM ---- */
    {
        const int T = 16;
        u64 *d_out;
        CK(cudaMalloc(&d_out, sizeof(u64) * LAT_NSIZE * T * 3 * 2));
        CK(cudaMemset(D.err, 0, 8));
        CK(cudaMemset(D.dst, 1, 512u << 20)); /* flush L2: 512 MB of writes through it */
        CK(cudaDeviceSynchronize());
        lat_kernel<<<1, 32, 32768 + 64>>>(D.buf, T, d_out, D.err);
        CK_LAUNCH();
        CK(cudaDeviceSynchronize());
        std::vector<u64> h(LAT_NSIZE * T * 3 * 2);
        int err[2];
        CK(cudaMemcpy(h.data(), d_out, 8 * h.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(err, D.err, 8, cudaMemcpyDeviceToHost));
        const char *kname[3] = {"hbm (cold TLB)", "hbm (warm TLB)", "l2 hit"};
        const int sizes[LAT_NSIZE] = {4096, 16384, 32768};
        for (int si = 0; si < LAT_NSIZE; si++)
            for (int kind = 0; kind < 3; kind++) {
                std::vector<double> cyc, ns;
                for (int t = 0; t < T; t++) {
                    const size_t o = (((size_t)si * T + t) * 3 + kind) * 2;
                    cyc.push_back((double)h[o]), ns.push_back((double)h[o + 1]);
                }
                const double mc = dr_median(cyc);
                printf("RESULT ring | latency one piece %2dK from %-14s | %7.0f cycles = %6.2f us (at %.0f MHz; "
                       "globaltimer median %.2f us; min %.0f max %.0f cycles) | %s\n",
                       sizes[si] / 1024, kname[kind], mc, mc / mhz, mhz, dr_median(ns) / 1e3,
                       *std::min_element(cyc.begin(), cyc.end()), *std::max_element(cyc.begin(), cyc.end()),
                       err[0] || err[1] ? "FAIL" : "ok");
            }
        if (err[0] || err[1]) printf("FAIL ring latency: %d bad words, %d timeouts\n", err[0], err[1]);
        CK(cudaFree(d_out));
    }
    printf("SUMMARY ring: best ring HBM %.2f TB/s (plain loads %.2f); best ring L2 set ~38 MB %.2f TB/s (plain %.2f)\n",
           best_hbm, plain_hbm, best_l2, plain_l2);
    CK(cudaFree(D.buf));
    CK(cudaFree(D.dst));
    CK(cudaFree(D.expect));
    CK(cudaFree(D.sums));
    CK(cudaFree(D.smid));
    CK(cudaFree(D.err));
    return 0;
}
