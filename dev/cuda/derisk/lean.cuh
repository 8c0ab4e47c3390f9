/* The lean latency-executor step pieces shared by linchain.cu and layerchain.cu (lab code, not the library): the
 * compute warps' barrier, the LL poll, one chunk of mma.sync against a packed row (lt_chunk's bf16 path), and the C
 * fragment element of an output row. Token 0 only (batch 1). */
#pragma once
#include "derisk.cuh"

#include "cuda/cu_mma.cuh"

#define NC 480 /* compute threads (lt_kernel's LT_NC); a 16th warp idles where lt_kernel has its producer */
#define NW (NC / 32)
#define NT (NC + 32)
#define TILE 512 /* bytes of one bf16 m16 x k16 tile in the fragment layout */

__device__ __forceinline__ void bar_nc(void) { asm volatile("bar.sync 1, %0;" ::"n"(NC) : "memory"); }

/* poll words [0, n) of in (epoch E) into xs as floats: thread tid takes tid, tid + NC, ... in rounds of 8 in flight,
 * the missing words re-read together; 0 on timeout */
template <int BACKOFF>
__device__ __forceinline__ int lc_poll(const u64 *in, int n, unsigned E, float *xs, u64 deadline) {
    for (int base = threadIdx.x; base < n; base += NC * 8) {
        u64 w[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int idx = base + u * NC;
            w[u] = idx < n ? dr_ld_ll(in + idx) : (u64)E << 32;
        }
        unsigned spins = 0;
        for (;;) {
            unsigned miss = 0;
#pragma unroll
            for (int u = 0; u < 8; u++) miss |= (unsigned)((unsigned)(w[u] >> 32) != E) << u;
            if (!miss) break;
            if ((++spins & 255u) == 0 && dr_gtimer() > deadline) return 0;
            if (BACKOFF) __nanosleep(BACKOFF);
#pragma unroll
            for (int u = 0; u < 8; u++)
                if ((miss >> u) & 1u) w[u] = dr_ld_ll(in + base + u * NC);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int idx = base + u * NC;
            if (idx < n) xs[idx] = __uint_as_float((unsigned)w[u]);
        }
    }
    return 1;
}

/* one chunk (CU_CKT k-tiles) of one m-tile against the packed row act (token 0 only: B1), lt_chunk's bf16 path: all
 * fragment loads in flight, then per k-tile the hi term and the lo term (cu_ktile) */
template <bool SMEM>
__device__ __forceinline__ void lc_chunk(float (&p)[4], const uint8_t *wt, const uint32_t *act, int lane) {
    const int g = lane >> 2, cq = lane & 3;
    cu_raw_frag raw[CU_CKT];
#pragma unroll
    for (int i = 0; i < CU_CKT; i++) cu_load_raw<DD_BF16, SMEM>(raw[i], wt + (size_t)i * TILE, lane);
    float d[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int i = 0; i < CU_CKT; i++) {
        uint32_t b[1][4] = {{0u, 0u, 0u, 0u}};
        if (g == 0) {
            const uint2 l0 = *(const uint2 *)(act + i * 16 + 2 * cq), l8 = *(const uint2 *)(act + i * 16 + 8 + 2 * cq);
            b[0][0] = cu_hi_pair(l0.x, l0.y);
            b[0][1] = cu_hi_pair(l8.x, l8.y);
            b[0][2] = cu_lo_pair(l0.x, l0.y);
            b[0][3] = cu_lo_pair(l8.x, l8.y);
        }
        cu_afrag A;
        cu_make_a<DD_BF16, WM_BF16>(A, raw[i], cu_mat{}, 0, 0, lane);
        cu_ktile<WM_BF16, 1>(d, A, b);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) p[e] = d[0][e];
}

/* output row r (0..15) of an m-tile, token 0: the lane and element of the C fragment that hold it (lt_linear's
 * epilogue with t = 0) */
__device__ __forceinline__ float lc_cval(const float4 *part, int slot, int r) {
    const int ln = (r & 7) * 4, e = (r >> 3) << 1;
    return ((const float *)&part[slot * 32 + ln])[e];
}


/* LayerNorm of the row xs[0, n) (n <= 3 NC) packed into act: one warp's statistics (cu_row_stats, the engine's
 * order), a barrier, `between()`, then every thread normalises its elements k = tid + i NC with cu_norm_val's
 * arithmetic (weights w, b of those elements in registers) into hi/lo words, and a barrier. stat: 2 floats of
 * shared memory. */
template <class F>
__device__ __forceinline__ void lc_ln_pack(const float *xs, int n, const float (&w)[3], const float (&b)[3],
                                           uint32_t *act, float *stat, F between) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (tid < 32) {
        float mean, rstd;
        cu_row_stats([&](int k) { return xs[k]; }, n, DD_NORM_LAYER, 1e-5f, lane, mean, rstd);
        if (lane == 0) stat[0] = mean, stat[1] = rstd;
    }
    bar_nc();
    between();
    const float mean = stat[0], rstd = stat[1];
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const int k = tid + i * NC;
        if (k < n) {
            float v = (xs[k] - mean) * rstd;
            v = v * w[i];
            v = v + b[i];
            act[k] = cu_split_pack(v);
        }
    }
    bar_nc();
}

/* GELU, the exact erf form, as cu_epi_act computes it (cu_linear.cuh) */
__device__ __forceinline__ float lc_gelu(float a) {
    const float e = erff(a * 0.70710678118654752f);
    return 0.5f * a * (1.0f + e);
}

/* output row r of the m-tile whose chunk c partial is in slot c * stride + off: the chunks summed in order from +0 */
__device__ __forceinline__ float lc_fold(const float4 *part, int nch, int stride, int off, int r) {
    float a = 0.0f;
#pragma unroll 8
    for (int c = 0; c < nch; c++) a = a + lc_cval(part, c * stride + off, r);
    return a;
}

/* the mma items of a step: nmt m-tiles x nch chunks over the compute warps, chunk-major (lt_linear's order); tile(mtl,
 * ci) is the first weight tile of chunk ci of m-tile mtl; chunk ci of m-tile mtl's partial to slot ci nmt + mtl */
template <bool SMEM, class TL>
__device__ __forceinline__ void lc_items(float4 *part, int nmt, int nch, const uint32_t *act, TL tile) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int it = warp; it < nmt * nch; it += NW) {
        const int ci = it / nmt, mtl = it - ci * nmt;
        float p[4];
        lc_chunk<SMEM>(p, tile(mtl, ci), act + ci * CU_CKT * 16, lane);
        part[it * 32 + lane] = make_float4(p[0], p[1], p[2], p[3]);
    }
}

__global__ void lc_gtimer(u64 *t) { *t = dr_gtimer(); }

static uint16_t lc_bf16_bits(float f) { /* round to nearest even (finite inputs) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* go() (a launch) between two events: its time in us to *us (when not NULL), then the device error word *err */
template <class F> static int lc_timed(F go, const int *err, float *us) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    go();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK_LAUNCH();
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (us) *us = ms * 1e3f;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    int e = 0;
    CK(cudaMemcpy(&e, err, sizeof e, cudaMemcpyDeviceToHost));
    return e;
}

/* a chain run one way against the same run another way (one launch against a launch a step): the words that differ,
 * those whose epoch is not want(k), the non-finite values and the mean |value| of the first */
struct lc_cmp {
    int diff, epoch, nonfin;
    double mag;
};
template <class W> static lc_cmp lc_compare(const std::vector<u64> &one, const std::vector<u64> &each, W want) {
    lc_cmp c = {0, 0, 0, 0.0};
    for (size_t k = 0; k < one.size(); k++) {
        c.diff += one[k] != each[k];
        c.epoch += (unsigned)(one[k] >> 32) != want((int)k);
        float x;
        const uint32_t u = (uint32_t)one[k];
        memcpy(&x, &u, 4);
        c.nonfin += !isfinite(x);
        c.mag += fabs((double)x);
    }
    c.mag /= (double)one.size();
    return c;
}

/* the SM-clock phases of a launch, hp [G][nk nph + nk] (cycle sums of kind k at k nph + i, its step count at
 * nk nph + k): per kind, the mean over the SMs that ran it, in us at mhz; names [nk][nph], "-" not printed */
static void lc_print_phases(const std::vector<u64> &hp, int G, int nk, int nph, const char *const *kinds,
                            const char *const *names, double mhz, const char *label) {
    const int w = nk * nph + nk;
    for (int k = 0; k < nk; k++) {
        std::vector<double> sum(nph, 0.0);
        int n = 0;
        for (int s = 0; s < G; s++) {
            const u64 *q = hp.data() + (size_t)s * w;
            if (!q[nk * nph + k]) continue;
            for (int i = 0; i < nph; i++) sum[i] += (double)q[k * nph + i] / (double)q[nk * nph + k];
            n++;
        }
        printf("phases %s %s (mean over %d SMs, us a step at %.0f MHz):", label, kinds[k], n, mhz);
        for (int i = 0; i < nph; i++)
            if (names[k * nph + i][0] != '-') printf(" %s %.3f", names[k * nph + i], n ? sum[i] / n / mhz : 0.0);
        printf("\n");
    }
    fflush(stdout);
}
