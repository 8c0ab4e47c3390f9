/* De-risk 2: thread block clusters at ~200 KB of shared memory per block, and the cost of a hop between SMs
 * (docs: shared/CUDA_V2.md, "Still open for your first call"). Questions this program answers on the H200:
 *   1. how many clusters of 1/2/4/8/16 blocks fit at once (cudaOccupancyMaxActiveClusters), how many SMs that
 *      leaves idle, and whether that many clusters really are co-resident (every block counts itself in and waits
 *      for all the others, with a deadline); one cluster more must NOT be co-resident (the bound is tight);
 *   2. one-way hop latency inside a cluster over distributed shared memory (DSMEM), by ping-pong between rank 0 and
 *      rank `peer`: (a) st.relaxed.cluster into the peer's shared memory, polled there with ld.relaxed.cluster
 *      (the value is the flag, "LL" style); (b) st.release.cluster, polled with ld.acquire.cluster (publication
 *      order: in SASS the release is MEMBAR.ALL.GPU + store, the acquire poll LDS + CCTL.IVALL); (c) st.async into
 *      the peer's shared memory completing on the peer's mbarrier (complete_tx), the peer waiting with
 *      mbarrier.try_wait acquire.cluster;
 *   3. the same ping-pong between two blocks on different SMs through global memory: (c) one 8-byte word {epoch,
 *      value} written st.relaxed.gpu and polled ld.relaxed.gpu (NCCL "LL" style); (d) a payload word by a plain
 *      store, then a flag by red.release.gpu, polled by ld.acquire.gpu, the payload read by a plain load after;
 *   4. the cluster-wide barrier (barrier.cluster.arrive.release + wait.acquire, and the .relaxed arrive) for 2..16
 *      blocks, one cluster alone and all co-resident clusters at once; __syncthreads of 512 threads for scale.
 * Every message carries a value the receiver checks; every poll has a %globaltimer deadline (a timeout is reported
 * as FAIL, never a hang). One-way hop = round-trip time / 2, from %globaltimer over 20000 round trips.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/derisk/cluster.cu -o cluster && ./cluster */
#include "derisk.cuh"

#include <string.h>

#define CL_THREADS 512
#define CL_SMEM (200 * 1024)
#define TIMEOUT_NS 2000000000ull
#define PP_ITERS 20000
#define CB_ITERS 20000

/* ---- device: small PTX wrappers used only here ---------------------------------------------------------------- */
__device__ __forceinline__ uint32_t ld_acquire_cluster_local(uint32_t a) {
    uint32_t v;
    asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t ld_relaxed_cluster_local(uint32_t a) {
    uint32_t v;
    asm volatile("ld.relaxed.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_cluster_remote(uint32_t a, uint32_t v) {
    asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_cluster_remote(uint32_t a, uint32_t v) {
    asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_relaxed_cluster_remote(uint32_t a) {
    uint32_t v;
    asm volatile("ld.relaxed.cluster.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
/* 4 bytes into another CTA's shared memory; their arrival is counted (4 bytes) on that CTA's mbarrier rbar */
__device__ __forceinline__ void st_async_remote(uint32_t a, uint32_t v, uint32_t rbar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(a), "r"(v),
                 "r"(rbar)
                 : "memory");
}
/* the receiver's own arrival on its local barrier: nothing to publish, so the default (release at CTA scope; a
 * release at cluster scope costs a MEMBAR.ALL.GPU in SASS) */
__device__ __forceinline__ void mbar_expect_tx_local(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_cluster(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}
__device__ __forceinline__ void st_relaxed_gpu_u64(u64 *p, u64 v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 ld_relaxed_gpu_u64(const u64 *p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_gpu_add(uint32_t *p, uint32_t v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_gpu_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_weak_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_weak_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t msg(uint32_t i) { return i * 2654435761u + 12345u; } /* payload of message i */

/* ---- 1. co-residency: block b writes info[3b..3b+2] = {smid, rank in cluster, cluster id}, counts itself in and
 * waits (deadline timeout_ns) until all gridDim.x blocks have. A block that gives up adds 1 to err[0]. */
__global__ void __launch_bounds__(CL_THREADS, 1) resident_kernel(uint32_t *count, int *info, int *err, u64 timeout_ns) {
    if (threadIdx.x == 0) {
        info[3 * blockIdx.x] = (int)dr_smid();
        info[3 * blockIdx.x + 1] = (int)dr_cluster_rank();
        info[3 * blockIdx.x + 2] = (int)dr_cluster_id();
        atomicAdd(count, 1u);
        const u64 deadline = dr_gtimer() + timeout_ns;
        while (ld_acquire_gpu_u32(count) < gridDim.x)
            if (dr_gtimer() > deadline) {
                atomicAdd(&err[0], 1);
                break;
            }
    }
    __syncthreads();
}

/* ---- 2. DSMEM ping-pong inside one cluster: thread 0 of rank 0 (ping) and of rank `peer` (pong); mode 0 =
 * st.relaxed.cluster + ld.relaxed.cluster poll, mode 1 = st.release.cluster + ld.acquire.cluster poll, mode 2 =
 * st.async + mbarrier complete_tx. Round trip i: ping sends
 * i, pong waits for i and sends i back. res = {ns, cycles} of the ping's loop; info = {smid ping, smid pong};
 * err[0] wrong values, err[1] timeouts. */
__global__ void __launch_bounds__(CL_THREADS, 1) dsmem_pingpong(int peer, int mode, int iters, u64 *res, int *info,
                                                                int *err) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint32_t *flag = (uint32_t *)smem; /* written by the other side only */
    u64 *bar = (u64 *)(smem + 64);
    const uint32_t rank = dr_cluster_rank();
    const u64 deadline = dr_gtimer() + TIMEOUT_NS;
    if (threadIdx.x == 0) {
        *(volatile uint32_t *)flag = 0;
        dr_mbar_init(bar, 1);
        dr_fence_mbar_init();
    }
    dr_cluster_sync_any(); /* the peer's flag and barrier are initialised before anyone writes to them */
    const bool ping = rank == 0, pong = rank == (uint32_t)peer;
    if (threadIdx.x == 0 && (ping || pong)) {
        const uint32_t other = ping ? (uint32_t)peer : 0u;
        const uint32_t rflag = dr_mapa(flag, other), rbar = dr_mapa(bar, other);
        const uint32_t lflag = dr_smem(flag), lbar = dr_smem(bar);
        info[ping ? 0 : 1] = (int)dr_smid();
        int bad = 0, tmo = 0;
        const u64 g0 = dr_gtimer(), c0 = dr_clock();
        for (uint32_t i = 1; i <= (uint32_t)iters && !tmo; i++) {
            for (int half = 0; half < 2; half++) {
                const bool send = (half == 0) == ping; /* ping sends first, pong receives first */
                if (send) {
                    if (mode == 0) st_relaxed_cluster_remote(rflag, msg(i));
                    else if (mode == 1) st_release_cluster_remote(rflag, msg(i));
                    else st_async_remote(rflag, msg(i), rbar);
                } else if (mode < 2) {
                    uint32_t n = 0;
                    while ((mode == 0 ? ld_relaxed_cluster_local(lflag) : ld_acquire_cluster_local(lflag)) != msg(i))
                        if ((++n & 255) == 0 && dr_gtimer() > deadline) {
                            tmo = 1;
                            break;
                        }
                } else {
                    mbar_expect_tx_local(lbar, 4); /* this phase: one arrival (here) + 4 bytes (the message) */
                    for (uint32_t n = 1; !mbar_try_cluster(lbar, (i - 1) & 1); n++)
                        if ((n & 63) == 0 && dr_gtimer() > deadline) {
                            tmo = 1;
                            break;
                        }
                    if (!tmo && *(volatile uint32_t *)flag != msg(i)) bad++;
                }
                if (tmo) break;
            }
        }
        const u64 c1 = dr_clock(), g1 = dr_gtimer();
        if (ping) res[0] = g1 - g0, res[1] = c1 - c0;
        if (bad) atomicAdd(&err[0], bad);
        if (tmo) atomicAdd(&err[1], 1);
    }
    dr_cluster_sync_any(); /* nobody leaves while the other side may still write into its shared memory */
}

/* ---- 3. global-memory ping-pong between blocks ba and bb of a plain grid (one block per SM): mode 0 = one 8-byte
 * word {epoch i, msg(i)} by st.relaxed.gpu, polled by ld.relaxed.gpu; mode 1 = payload by a plain store, then
 * red.release.gpu on a counter, polled by ld.acquire.gpu, payload read by a plain load. words (zeroed by the host):
 * LL words at [0] (ba -> bb) and [16] (bb -> ba); counters at [32], [48]; payloads at [64], [80] (separate 128-byte
 * lines). res, info, err as for dsmem_pingpong. */
__global__ void __launch_bounds__(CL_THREADS, 1) gmem_pingpong(int ba, int bb, int mode, int iters, u64 *words,
                                                               u64 *res, int *info, int *err) {
    const bool ping = blockIdx.x == (unsigned)ba, pong = blockIdx.x == (unsigned)bb;
    if (threadIdx.x != 0 || !(ping || pong)) return;
    const u64 deadline = dr_gtimer() + TIMEOUT_NS;
    u64 *ll_out = words + (ping ? 0 : 16), *ll_in = words + (ping ? 16 : 0);
    uint32_t *cnt_out = (uint32_t *)(words + (ping ? 32 : 48)), *cnt_in = (uint32_t *)(words + (ping ? 48 : 32));
    uint32_t *pay_out = (uint32_t *)(words + (ping ? 64 : 80)), *pay_in = (uint32_t *)(words + (ping ? 80 : 64));
    info[ping ? 0 : 1] = (int)dr_smid();
    int bad = 0, tmo = 0;
    const u64 g0 = dr_gtimer(), c0 = dr_clock();
    for (uint32_t i = 1; i <= (uint32_t)iters && !tmo; i++) {
        for (int half = 0; half < 2; half++) {
            const bool send = (half == 0) == ping;
            if (send) {
                if (mode == 0) st_relaxed_gpu_u64(ll_out, (u64)i << 32 | msg(i));
                else st_weak_u32(pay_out, msg(i)), red_release_gpu_add(cnt_out, 1u);
            } else {
                uint32_t n = 0;
                if (mode == 0) {
                    u64 v;
                    while (((v = ld_relaxed_gpu_u64(ll_in)) >> 32) != i)
                        if ((++n & 255) == 0 && dr_gtimer() > deadline) {
                            tmo = 1;
                            break;
                        }
                    if (!tmo && (uint32_t)v != msg(i)) bad++;
                } else {
                    while (ld_acquire_gpu_u32(cnt_in) < i)
                        if ((++n & 255) == 0 && dr_gtimer() > deadline) {
                            tmo = 1;
                            break;
                        }
                    if (!tmo && ld_weak_u32(pay_in) != msg(i)) bad++;
                }
            }
            if (tmo) break;
        }
    }
    const u64 c1 = dr_clock(), g1 = dr_gtimer();
    if (ping) res[0] = g1 - g0, res[1] = c1 - c0;
    if (bad) atomicAdd(&err[0], bad);
    if (tmo) atomicAdd(&err[1], 1);
}

/* ---- 4. cluster barrier: all 512 threads of every block, `iters` times. MODE 0 = arrive.release + wait.acquire,
 * MODE 1 = arrive.relaxed + wait.acquire, MODE 2 = __syncthreads only (no cluster barrier). First 256 checked
 * rounds: each block writes the round number to its shared word before arriving; after the wait, thread 0 reads
 * the next rank's word over DSMEM and expects the round or the one after (err[0]). Then the timed rounds; thread 0
 * of rank 0 writes res[cluster id] = ns for them. */
template <int MODE> __global__ void __launch_bounds__(CL_THREADS, 1) cbar_kernel(int iters, u64 *res, int *err) {
    extern __shared__ __align__(128) unsigned char smem[];
    volatile uint32_t *word = (volatile uint32_t *)smem;
    const uint32_t rank = dr_cluster_rank(), cs = dr_cluster_size();
    if (threadIdx.x == 0) *word = 0;
    dr_cluster_sync_any();
    const uint32_t rnext = dr_mapa(smem, (rank + 1) % cs);
    int bad = 0;
    for (uint32_t i = 1; i <= 256; i++) {
        if (threadIdx.x == 0) *word = i;
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
        if (threadIdx.x == 0) {
            const uint32_t v = ld_relaxed_cluster_remote(rnext);
            bad += v != i && v != i + 1;
        }
    }
    dr_cluster_sync_any();
    const u64 g0 = dr_gtimer();
    if (MODE == 0)
        for (int i = 0; i < iters; i++)
            asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                             : "memory");
    else if (MODE == 1)
        for (int i = 0; i < iters; i++)
            asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                             : "memory");
    else
        for (int i = 0; i < iters; i++) __syncthreads();
    const u64 g1 = dr_gtimer();
    if (threadIdx.x == 0 && rank == 0) res[dr_cluster_id()] = g1 - g0;
    if (bad) atomicAdd(&err[0], bad);
    dr_cluster_sync_any(); /* no block leaves while a neighbour may still read its word */
}

/* ---- host --------------------------------------------------------------------------------------------------- */
template <typename... KArgs, typename... Args>
static cudaError_t launch_cluster(void (*k)(KArgs...), int grid, int cs, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = CL_SMEM;
    cfg.stream = 0;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cs, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, args...);
}
template <typename... KArgs> static int max_clusters(void (*k)(KArgs...), int cs) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cs * 64);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = CL_SMEM;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cs, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    int n = -1;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
    if (e != cudaSuccess) {
        printf("FAIL cudaOccupancyMaxActiveClusters(cluster %d): %s\n", cs, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    return n;
}
template <typename... KArgs> static void kernel_attrs(void (*k)(KArgs...)) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, CL_SMEM));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

typedef struct dev_state {
    uint32_t *count;
    int *info, *err;
    u64 *res, *words;
} dev_state;

/* co-residency of `nclu` clusters of cs blocks: returns the number of blocks that timed out (-1: launch failed) */
static int coresident(const dev_state &D, int cs, int nclu, u64 timeout_ns, std::vector<int> *info_out) {
    const int grid = cs * nclu;
    CK(cudaMemset(D.count, 0, 4));
    CK(cudaMemset(D.err, 0, 8));
    CK(cudaMemset(D.info, 0xff, 12 * (size_t)grid));
    const cudaError_t e = launch_cluster(resident_kernel, grid, cs, D.count, D.info, D.err, timeout_ns);
    if (e != cudaSuccess) {
        printf("FAIL launch of %d clusters of %d: %s\n", nclu, cs, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    CK(cudaDeviceSynchronize());
    int err[2];
    CK(cudaMemcpy(err, D.err, 8, cudaMemcpyDeviceToHost));
    if (info_out) {
        info_out->resize(3 * (size_t)grid);
        CK(cudaMemcpy(info_out->data(), D.info, 12 * (size_t)grid, cudaMemcpyDeviceToHost));
    }
    return err[0];
}

int main(void) {
    double mhz;
    const int G = dr_banner("cluster", &mhz);
    kernel_attrs(resident_kernel);
    kernel_attrs(dsmem_pingpong);
    kernel_attrs(cbar_kernel<0>);
    kernel_attrs(cbar_kernel<1>);
    kernel_attrs(cbar_kernel<2>);
    CK(cudaFuncSetAttribute(gmem_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, CL_SMEM));
    dev_state D;
    CK(cudaMalloc(&D.count, 4));
    CK(cudaMalloc(&D.info, 12 * (size_t)G * 2));
    CK(cudaMalloc(&D.err, 8));
    CK(cudaMalloc(&D.res, 8 * (size_t)G * 2));
    CK(cudaMalloc(&D.words, 8 * 128));

    /* ---- 1. occupancy ---- */
    const int sizes[] = {1, 2, 4, 8, 16};
    int maxc[17] = {0};
    for (int cs : sizes) {
        const int n = max_clusters(resident_kernel, cs);
        maxc[cs] = n;
        if (n <= 0) {
            printf("RESULT cluster | occupancy cluster %2d x 200 KB: max active clusters %d | FAIL (none fit)\n", cs,
                   n);
            continue;
        }
        std::vector<int> info;
        const int tmo = coresident(D, cs, n, TIMEOUT_NS, &info);
        /* blocks on distinct SMs, ranks 0..cs-1 within each cluster */
        std::vector<int> sm;
        bool ranks_ok = true;
        for (int b = 0; b < cs * n; b++) {
            sm.push_back(info[3 * b]);
            ranks_ok &= info[3 * b + 1] == b % cs && info[3 * b + 2] == b / cs;
        }
        std::sort(sm.begin(), sm.end());
        const bool distinct = std::unique(sm.begin(), sm.end()) == sm.end() && sm[0] >= 0;
        /* one cluster more must not fit: its blocks (or others) time out waiting (short deadline) */
        const int tmo_more = coresident(D, cs, n + 1, 100000000ull, NULL);
        const bool ok = tmo == 0 && distinct && ranks_ok;
        const char *more = tmo_more > 0 ? "not co-resident (bound tight)"
                           : tmo_more == 0 ? "ALSO co-resident (bound loose)"
                                           : "launch failed";
        printf("RESULT cluster | occupancy cluster %2d x 200 KB: max active clusters %3d = %3d SMs busy, %3d idle | "
               "co-resident %s, %d+1 clusters %s | %s\n",
               cs, n, cs * n, G - cs * n, tmo == 0 ? "yes" : "NO", n,
               more, ok ? "ok" : "FAIL");
        if (!ok) printf("FAIL cluster occupancy %d: %d timeouts, SMs distinct %d, ranks ok %d\n", cs, tmo, distinct,
                        ranks_ok);
        if (cs >= 4) { /* which SMs each cluster got: the GPC structure the scheduler sees */
            printf("# clusters of %d, SM ids per cluster:", cs);
            for (int c = 0; c < n; c++) {
                printf("%s[", c % 4 ? " " : "\n#   ");
                for (int r = 0; r < cs; r++) printf("%s%d", r ? "," : "", info[3 * (c * cs + r)]);
                printf("]");
            }
            printf("\n");
        }
        fflush(stdout);
    }

    /* ---- 2. DSMEM ping-pong ---- */
    struct pair {
        int cs, peer;
    };
    const pair pairs[] = {{2, 1}, {4, 3}, {8, 1}, {8, 7}, {16, 1}, {16, 15}};
    const char *dmode[3] = {"st/ld.relaxed.cluster (value = flag)", "st.release.cluster + ld.acquire poll",
                            "st.async + mbarrier complete_tx"};
    double best_dsmem = 1e30;
    for (int mode = 0; mode < 3; mode++)
        for (const pair &p : pairs) {
            if (maxc[p.cs] <= 0) {
                printf("SKIP dsmem cluster %d: no such cluster fits\n", p.cs);
                continue;
            }
            std::vector<double> hop;
            int err[2] = {0, 0}, info[2] = {-1, -1};
            bool launched = true;
            for (int rep = 0; rep < 3 && launched; rep++) {
                CK(cudaMemset(D.err, 0, 8));
                const cudaError_t e = launch_cluster(dsmem_pingpong, p.cs, p.cs, p.peer, mode, PP_ITERS, D.res,
                                                     D.info, D.err);
                if (e != cudaSuccess) {
                    printf("FAIL dsmem launch cluster %d: %s\n", p.cs, cudaGetErrorString(e));
                    cudaGetLastError();
                    launched = false;
                    break;
                }
                CK(cudaDeviceSynchronize());
                u64 res[2];
                int e2[2];
                CK(cudaMemcpy(res, D.res, 16, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(e2, D.err, 8, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(info, D.info, 8, cudaMemcpyDeviceToHost));
                err[0] += e2[0], err[1] += e2[1];
                if (rep > 0) hop.push_back((double)res[0] / (2.0 * PP_ITERS)); /* rep 0 is the warm-up */
            }
            if (!launched) continue;
            const double ns = dr_median(hop);
            const bool ok = err[0] == 0 && err[1] == 0;
            if (ok) best_dsmem = std::min(best_dsmem, ns);
            printf("RESULT cluster | dsmem hop cluster %2d rank 0 <-> %2d (SM %3d <-> %3d) %-38s | %6.1f ns one-way "
                   "(%.0f cycles) | %s\n",
                   p.cs, p.peer, info[0], info[1], dmode[mode], ns, ns * mhz / 1e3,
                   ok ? "ok" : (err[1] ? "FAIL timeout" : "FAIL wrong value"));
            fflush(stdout);
        }

    /* ---- 3. global-memory ping-pong between blocks 0 and bb of a plain grid of G blocks ---- */
    const char *gmode[2] = {"8-byte {epoch,value} st/ld.relaxed.gpu", "payload + red.release / ld.acquire.gpu"};
    double best_gmem = 1e30;
    for (int mode = 0; mode < 2; mode++)
        for (int bb : {1, G / 2, G - 1}) {
            std::vector<double> hop;
            int err[2] = {0, 0}, info[2] = {-1, -1};
            for (int rep = 0; rep < 3; rep++) {
                CK(cudaMemset(D.err, 0, 8));
                CK(cudaMemset(D.words, 0, 8 * 128));
                gmem_pingpong<<<G, CL_THREADS, CL_SMEM>>>(0, bb, mode, PP_ITERS, D.words, D.res, D.info, D.err);
                CK_LAUNCH();
                CK(cudaDeviceSynchronize());
                u64 res[2];
                int e2[2];
                CK(cudaMemcpy(res, D.res, 16, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(e2, D.err, 8, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(info, D.info, 8, cudaMemcpyDeviceToHost));
                err[0] += e2[0], err[1] += e2[1];
                if (rep > 0) hop.push_back((double)res[0] / (2.0 * PP_ITERS));
            }
            const double ns = dr_median(hop);
            const bool ok = err[0] == 0 && err[1] == 0;
            if (ok) best_gmem = std::min(best_gmem, ns);
            printf("RESULT cluster | gmem  hop block 0 <-> %3d  (SM %3d <-> %3d) %-38s | %6.1f ns one-way "
                   "(%.0f cycles) | %s\n",
                   bb, info[0], info[1], gmode[mode], ns, ns * mhz / 1e3,
                   ok ? "ok" : (err[1] ? "FAIL timeout" : "FAIL wrong value"));
            fflush(stdout);
        }

    /* ---- 4. cluster barrier ---- */
    const char *bmode[3] = {"arrive.release + wait.acquire", "arrive.relaxed + wait.acquire", "__syncthreads (512)"};
    for (int mode = 0; mode < 3; mode++)
        for (int cs : {2, 4, 8, 16}) {
            if (mode == 2 && cs != 2) continue; /* one reference row */
            if (maxc[cs] <= 0) continue;
            for (int nclu : {1, maxc[cs]}) {
                std::vector<double> per; /* ns per barrier, one value per cluster, over the timed launches */
                int bad = 0;
                bool launched = true;
                for (int rep = 0; rep < 3 && launched; rep++) {
                    CK(cudaMemset(D.err, 0, 8));
                    const cudaError_t e =
                        mode == 0   ? launch_cluster(cbar_kernel<0>, cs * nclu, cs, CB_ITERS, D.res, D.err)
                        : mode == 1 ? launch_cluster(cbar_kernel<1>, cs * nclu, cs, CB_ITERS, D.res, D.err)
                                    : launch_cluster(cbar_kernel<2>, cs * nclu, cs, CB_ITERS, D.res, D.err);
                    if (e != cudaSuccess) {
                        printf("FAIL cluster barrier launch %d x %d: %s\n", nclu, cs, cudaGetErrorString(e));
                        cudaGetLastError();
                        launched = false;
                        break;
                    }
                    CK(cudaDeviceSynchronize());
                    std::vector<u64> res(nclu);
                    int e2[2];
                    CK(cudaMemcpy(res.data(), D.res, 8 * (size_t)nclu, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(e2, D.err, 8, cudaMemcpyDeviceToHost));
                    bad += e2[0];
                    if (rep > 0)
                        for (u64 r : res) per.push_back((double)r / CB_ITERS);
                }
                if (!launched) continue;
                const double med = dr_median(per), mx = *std::max_element(per.begin(), per.end());
                printf("RESULT cluster | barrier cluster %2d x %3d clusters %-30s | %6.1f ns per barrier (median over "
                       "clusters; max %.1f) | %s\n",
                       cs, nclu, bmode[mode], med, mx, bad ? "FAIL wrong value" : "ok");
                if (nclu == maxc[cs]) break; /* maxc == 1 */
            }
            fflush(stdout);
        }
    printf("SUMMARY cluster: max active clusters at 200 KB: 2:%d 4:%d 8:%d 16:%d; best DSMEM hop %.0f ns; best global "
           "hop %.0f ns\n",
           maxc[2], maxc[4], maxc[8], maxc[16], best_dsmem, best_gmem);
    CK(cudaFree(D.count));
    CK(cudaFree(D.info));
    CK(cudaFree(D.err));
    CK(cudaFree(D.res));
    CK(cudaFree(D.words));
    return 0;
}
