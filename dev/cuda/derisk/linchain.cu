/* linchain: what a chain of complete, lean latency-executor linear steps costs with every SM in it (issue 13).
 *
 * Why: at GPT dims bf16 B1 the latency executor's ops cost 3.6-8.9 us each on the critical path (fc1 7.61, fc2 8.05;
 * H100, 2026-12-05) and the 1.5 ms bar allows ~2.2 us an op. chain.cu measured the chain without weights (a bare hop
 * ~1 us, with a norm's statistics and normalise ~1.9 us) and stage.cu the step's phases on one SM alone; the phases
 * run 2-3x slower in the kernel than alone, and no experiment has said whether that is the kernel's generality (an
 * op table read from shared memory, a weight ring, pieces, folds, a barrier after every phase) or the environment
 * (every SM in the chain, L2 under load). This program runs the missing middle: whole linear steps with the
 * engine's arithmetic (cu_row_stats, the normalise and bf16 hi/lo pack, the mma.sync chunk of lt_chunk, partials
 * summed in chunk order, the epilogue's GELU / bias / residual) written as lean as the contract allows, through
 * all SMs, GPT's fc1 and fc2 alternating (124 pairs = a frame's layer passes):
 *   fc1  poll x (1024 LL words) -> one warp's LayerNorm statistics -> normalise + pack (norm weights in registers,
 *        loaded before the poll) -> 16 items (2 m-tiles x 8 chunks) over 15 warps -> each output's thread sums its
 *        8 chunk partials in chunk order, + bias, GELU, publishes (32 outputs an SM on 128 SMs: the plan's fc1)
 *   fc2  the residual rows' loads issued first -> poll h (4096 LL words) -> pack -> 32 items (1 m-tile x 32 chunks)
 *        -> each output's thread sums 32 partials in order, + bias, + residual, publishes (16 outputs an SM on 64
 *        SMs: fc2 without the K split)
 * Barriers: fc1 4 (after the poll, the statistics, the normalise, the items), fc2 3. Variants:
 *   res  each SM's weights resident in shared memory (loaded once: the weight ring's ideal, never on the path)
 *   glb  the weights read from global memory in the items (L2-resident: 16 MB), as a step whose piece has not landed
 *   glb+stream  glb while the 16th warp of every SM with ops streams a 1 GB buffer from HBM into shared memory by bulk copies
 *        (16 KB, two in flight, L2 evict_first) as fast as they complete: the weight traffic the executor's
 *        producers make at bf16 (100 MB a pass), here at its most, to say whether the polls and the phases slow down
 *        under it (glb and glb+stream differ only in that traffic)
 *   res+backoff  res with every waiting thread sleeping 200 ns between re-reads of its missing words: ~130 SMs x 480
 *        threads re-reading L2 words nonstop may load the L2 that the working SMs' polls and publishes go through
 * Output: RESULT lines "linchain | <variant> | <us> us a fc1+fc2 pair" (glb+stream: and the stream's GB/s, approximate:
 * the last launch's bytes over the median time; a stream wait that timed out shows only as a low rate); the SM clock's
 * phases per op, the mean over the SMs of each kind (poll incl. the wait for the producers, statistics,
 * normalise/pack, items, epilogue); SUMMARY beside the kernel's figures.
 * Checks: the final vector of a 16-op chain in one launch is bit-identical to the same ops run one launch each (the
 * dataflow: no step read a stale or half-published input); every wait ends at a %globaltimer deadline (FAIL, not a
 * hang).
 *   nvcc -O3 -std=c++17 -fmad=false -gencode=arch=compute_90a,code=sm_90a -I src -I include \
 *        dev/cuda/derisk/linchain.cu -o linchain */
#include "derisk.cuh"

#include <math.h>

#include <string>

#include "lean.cuh"

#define D 1024
#define F 4096
#define MT1 (F / 16)       /* fc1 m-tiles: 256 */
#define KT1 (D / 16)       /* 64 */
#define MT2 (D / 16)       /* fc2 m-tiles: 64 */
#define KT2 (F / 16)       /* 256 */
#define NCH1 (KT1 / CU_CKT) /* chunks: 8 */
#define NCH2 (KT2 / CU_CKT) /* 32 */
#define SM1 (MT1 / 2)      /* SMs with fc1 units: 128, two m-tiles each */
#define SM2 MT2            /* SMs with an fc2 unit: 64 */
#define VW F               /* words of a vector slot (every op's output gets a fresh one) */
#define W1_BYTES (2 * KT1 * TILE)  /* 64 KB */
#define W2_BYTES (KT2 * TILE)      /* 128 KB */
#define ACT_WORDS (F + 32)
#define PART_SLOTS 32              /* float4 x 32 lanes each */
#define SMEM_RES (W1_BYTES + W2_BYTES + ACT_WORDS * 4 + PART_SLOTS * 512 + 256)
#define SCR_BYTES (16 * 1024) /* a streamed piece (glb+stream), two slots */
#define SMEM_GLB (ACT_WORDS * 4 + PART_SLOTS * 512 + 256 + 2 * SCR_BYTES)
#define BIG_PER_SM ((size_t)8 << 20) /* the streamed buffer: 8 MB an SM, read cyclically */
#define NPHASE 5
static_assert(SMEM_RES <= 227 * 1024, "shared memory");
static_assert(2 * NCH1 <= PART_SLOTS && NCH2 <= PART_SLOTS, "partials");

struct lc_args {
    u64 *buf;                     /* (nops + 1) vector slots of VW LL words; slot o is op o's input, epoch o + 1 */
    const uint8_t *w1, *w2;       /* [MT1][KT1][TILE], [MT2][KT2][TILE] */
    const float *b1, *b2, *nw, *nb;
    int o0, o1;                   /* ops [o0, o1) in this launch */
    int *err;                     /* 0 ok; 1 + op: a wait timed out there */
    u64 deadline_ns;              /* %globaltimer deadline */
    u64 *phase;                   /* [G][2][NPHASE] SM clock cycles summed over this launch's ops, and [G][2] counts */
    const uint8_t *big;           /* glb+stream: G x BIG_PER_SM bytes */
    u64 *streamed;                /* glb+stream: [G] bytes streamed */
};

enum { V_RES = 0, V_GLB = 1, V_STREAM = 2, V_BACKOFF = 3, NV = 4 };
static const char *vname[NV] = {"res", "glb", "glb+stream", "res+backoff"};

template <int V>
__global__ void __launch_bounds__(NT, 1) lc_kernel(lc_args A) {
    constexpr bool RES = V == V_RES || V == V_BACKOFF;
    constexpr int BACK = V == V_BACKOFF ? 200 : 0; /* ns a waiting thread sleeps between re-reads */
    extern __shared__ __align__(128) uint8_t sm[];
    uint8_t *w1s = sm, *w2s = sm + W1_BYTES;
    uint8_t *rest = RES ? sm + W1_BYTES + W2_BYTES : sm;
    uint32_t *act = (uint32_t *)rest;
    float *actf = (float *)rest;
    float4 *part = (float4 *)(rest + ACT_WORDS * 4);
    float *stat = (float *)(rest + ACT_WORDS * 4 + PART_SLOTS * 512);
    uint8_t *scr = rest + ACT_WORDS * 4 + PART_SLOTS * 512 + 256;
    __shared__ int bad, done;
    __shared__ __align__(8) u64 sbar[2];
    if (threadIdx.x == 0) {
        done = 0;
        dr_mbar_init(&sbar[0], 1);
        dr_mbar_init(&sbar[1], 1);
        dr_fence_mbar_init();
    }
    __syncthreads();
    if (threadIdx.x >= NC) {
        if (V == V_STREAM && threadIdx.x == NC) { /* the stream: two 16 KB copies in flight until the chain is done */
            const u64 pol = dr_policy_evict_first();
            const uint8_t *src = A.big + (size_t)blockIdx.x * BIG_PER_SM;
            unsigned n = 0, c = 0; /* copies issued, completed */
            bool ok = true;
            while (ok && !*(volatile int *)&done) {
                if (n - c == 2) { /* c counts only completed copies: a timed-out one is waited for again below */
                    ok = dr_mbar_wait(&sbar[c & 1], (c >> 1) & 1u, A.deadline_ns);
                    if (!ok) break;
                    c++;
                }
                dr_mbar_expect_tx(&sbar[n & 1], SCR_BYTES);
                dr_bulk_g2s_hint(scr + (n & 1) * SCR_BYTES, src + (size_t)n * SCR_BYTES % BIG_PER_SM, SCR_BYTES,
                                 &sbar[n & 1], pol);
                n++;
            }
            while (c < n && dr_mbar_wait(&sbar[c & 1], (c >> 1) & 1u, A.deadline_ns + 1000000000ull)) c++;
            A.streamed[blockIdx.x] = (u64)c * SCR_BYTES;
        }
        return;
    }
    const int tid = threadIdx.x, b = blockIdx.x;
    const bool has1 = b < SM1, has2 = b < SM2;
    const uint8_t *w1g = A.w1 + (size_t)2 * b * KT1 * TILE, *w2g = A.w2 + (size_t)b * KT2 * TILE;
    if (tid == 0) bad = 0;
    if (RES) { /* this SM's weights, once */
        if (has1)
            for (int i = tid; i < W1_BYTES / 16; i += NC) ((uint4 *)w1s)[i] = ((const uint4 *)w1g)[i];
        if (has2)
            for (int i = tid; i < W2_BYTES / 16; i += NC) ((uint4 *)w2s)[i] = ((const uint4 *)w2g)[i];
    }
    /* the norm weights of this thread's elements and the bias of its output, in registers before any poll */
    float nwr[3], nbr[3];
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const int k = tid + i * NC;
        nwr[i] = k < D ? A.nw[k] : 0.0f;
        nbr[i] = k < D ? A.nb[k] : 0.0f;
    }
    const float b1r = has1 && tid < 32 ? A.b1[2 * b * 16 + tid] : 0.0f;
    const float b2r = has2 && tid < 16 ? A.b2[b * 16 + tid] : 0.0f;
    bar_nc();
    const uint8_t *w1 = RES ? w1s : w1g, *w2 = RES ? w2s : w2g;
    u64 ph[2][NPHASE] = {{0}}, cnt[2] = {0, 0};
    for (int o = A.o0; o < A.o1; o++) {
        const u64 *in = A.buf + (size_t)o * VW;
        u64 *out = A.buf + (size_t)(o + 1) * VW;
        const unsigned E = (unsigned)o + 1u, Eo = E + 1u;
        const int kind = o & 1; /* 0 fc1, 1 fc2 */
        if (!(kind ? has2 : has1)) continue;
        u64 c0 = dr_clock(), c1, c2, c3, c4, c5;
        if (kind == 0) {
            if (!lc_poll<BACK>(in, D, E, actf, A.deadline_ns)) bad = 1 + o;
            bar_nc();
            c1 = dr_clock();
            if (bad) break;
            lc_ln_pack(actf, D, nwr, nbr, act, stat, [&] { c2 = dr_clock(); });
            c3 = dr_clock();
            lc_items<RES>(part, 2, NCH1, act, [&](int mtl, int ci) { return w1 + ((size_t)mtl * KT1 + ci * CU_CKT) * TILE; });
            bar_nc();
            c4 = dr_clock();
            if (tid < 32) { /* output j = tid: m-tile tid / 16, row tid % 16 */
                const int ul = tid >> 4, r = tid & 15;
                float a = lc_fold(part, NCH1, 2, ul, r);
                a = a + b1r;
                dr_st_ll(out + 2 * b * 16 + tid, lc_gelu(a), Eo);
            }
        } else {
            /* the residual (the previous fc1's input: slot o - 1, epoch o), published long ago: loads issued first */
            const u64 *rin = A.buf + (size_t)(o - 1) * VW + b * 16 + tid;
            u64 rw = tid < 16 ? dr_ld_ll(rin) : 0;
            if (!lc_poll<BACK>(in, F, E, actf, A.deadline_ns)) bad = 1 + o;
            bar_nc();
            c1 = c2 = dr_clock();
            if (bad) break;
            for (int k = tid; k < F; k += NC) act[k] = cu_split_pack(actf[k]);
            bar_nc();
            c3 = dr_clock();
            lc_items<RES>(part, 1, NCH2, act, [&](int, int ci) { return w2 + (size_t)ci * CU_CKT * TILE; });
            bar_nc();
            c4 = dr_clock();
            if (tid < 16) {
                unsigned spins = 0;
                while ((unsigned)(rw >> 32) != E - 1u) {
                    rw = dr_ld_ll(rin);
                    if ((++spins & 255u) == 0 && dr_gtimer() > A.deadline_ns) {
                        atomicCAS(A.err, 0, 1 + o);
                        break;
                    }
                }
                float a = lc_fold(part, NCH2, 1, 0, tid);
                a = a + b2r;
                a = a + __uint_as_float((unsigned)rw);
                dr_st_ll(out + b * 16 + tid, a, Eo);
            }
        }
        c5 = dr_clock();
        if (tid == 0) {
            ph[kind][0] += c1 - c0, ph[kind][1] += c2 - c1, ph[kind][2] += c3 - c2, ph[kind][3] += c4 - c3;
            ph[kind][4] += c5 - c4, cnt[kind]++;
        }
    }
    if (tid == 0) done = 1;
    if (bad && tid == 0) atomicCAS(A.err, 0, bad);
    if (tid == 0 && A.phase) {
        u64 *q = A.phase + (size_t)b * (2 * NPHASE + 2);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < NPHASE; i++) q[k * NPHASE + i] = ph[k][i];
            q[2 * NPHASE + k] = cnt[k];
        }
    }
}

int main() {
    double mhz = 0;
    const int G = dr_banner("linchain", &mhz);
    if (G < SM1) {
        printf("FAIL linchain: %d SMs, the plan needs %d\n", G, SM1);
        return 1;
    }
    const int PAIRS = 124, NOPS = 2 * PAIRS, NCHECK = 16;
    /* weights: small normal-ish values (sum of uniforms), so 248 steps keep the activations finite and O(1) */
    uint64_t rs = 0x9E3779B97F4A7C15ull;
    auto rnd = [&]() { /* uniform in [-1, 1) */
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        return (float)((double)(rs >> 11) * 0x1p-52 - 1.0);
    };
    std::vector<uint16_t> hw1((size_t)MT1 * KT1 * TILE / 2), hw2((size_t)MT2 * KT2 * TILE / 2);
    for (auto &v : hw1) v = lc_bf16_bits(0.05f * (rnd() + rnd() + rnd()));
    for (auto &v : hw2) v = lc_bf16_bits(0.02f * (rnd() + rnd() + rnd()));
    std::vector<float> hb1(F), hb2(D), hnw(D), hnb(D);
    for (auto &v : hb1) v = 0.1f * rnd();
    for (auto &v : hb2) v = 0.1f * rnd();
    for (auto &v : hnw) v = 1.0f + 0.1f * rnd();
    for (auto &v : hnb) v = 0.1f * rnd();
    std::vector<u64> hx(VW, 0);
    for (int k = 0; k < D; k++) {
        const float v = rnd() + rnd();
        uint32_t u;
        memcpy(&u, &v, 4);
        hx[k] = (1ull << 32) | u; /* slot 0, epoch 1 */
    }
    uint8_t *w1, *w2;
    float *b1, *b2, *nw, *nb;
    u64 *buf, *phase;
    int *err;
    CK(cudaMalloc(&w1, hw1.size() * 2));
    CK(cudaMalloc(&w2, hw2.size() * 2));
    CK(cudaMalloc(&b1, F * 4));
    CK(cudaMalloc(&b2, D * 4));
    CK(cudaMalloc(&nw, D * 4));
    CK(cudaMalloc(&nb, D * 4));
    CK(cudaMalloc(&buf, (size_t)(NOPS + 1) * VW * 8));
    CK(cudaMalloc(&phase, (size_t)G * (2 * NPHASE + 2) * 8));
    CK(cudaMalloc(&err, sizeof(int)));
    CK(cudaMemcpy(w1, hw1.data(), hw1.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w2, hw2.data(), hw2.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b1, hb1.data(), F * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b2, hb2.data(), D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(nw, hnw.data(), D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(nb, hnb.data(), D * 4, cudaMemcpyHostToDevice));
    CK(cudaFuncSetAttribute(lc_kernel<V_RES>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_RES));
    CK(cudaFuncSetAttribute(lc_kernel<V_GLB>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_GLB));
    CK(cudaFuncSetAttribute(lc_kernel<V_STREAM>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_GLB));
    CK(cudaFuncSetAttribute(lc_kernel<V_BACKOFF>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_RES));
    uint8_t *big;
    u64 *streamed;
    CK(cudaMalloc(&big, (size_t)G * BIG_PER_SM));
    CK(cudaMemset(big, 0x3c, (size_t)G * BIG_PER_SM));
    CK(cudaMalloc(&streamed, (size_t)G * 8));
    int fails = 0;
    auto reset = [&](int nops) {
        CK(cudaMemset(buf, 0, (size_t)(nops + 1) * VW * 8));
        CK(cudaMemcpy(buf, hx.data(), VW * 8, cudaMemcpyHostToDevice));
        CK(cudaMemset(err, 0, sizeof(int)));
    };
    /* the device's %globaltimer, read once by a tiny kernel, gives the deadlines */
    u64 *gt;
    CK(cudaMalloc(&gt, 8));
    auto gnow = [&]() {
        lc_gtimer<<<1, 1>>>(gt);
        CK_LAUNCH();
        u64 t;
        CK(cudaMemcpy(&t, gt, 8, cudaMemcpyDeviceToHost));
        return t;
    };
    auto run = [&](int v, int o0, int o1, bool phases, float *us) {
        lc_args a{buf,   w1, w2, b1, b2, nw, nb, o0, o1, err, gnow() + 3000000000ull, phases ? phase : NULL,
                  big, streamed};
        return lc_timed(
            [&] {
                if (v == V_RES) lc_kernel<V_RES><<<G, NT, SMEM_RES>>>(a);
                else if (v == V_GLB) lc_kernel<V_GLB><<<G, NT, SMEM_GLB>>>(a);
                else if (v == V_STREAM) lc_kernel<V_STREAM><<<G, NT, SMEM_GLB>>>(a);
                else lc_kernel<V_BACKOFF><<<G, NT, SMEM_RES>>>(a);
            },
            err, us);
    };
    for (int res = 0; res < NV; res++) {
        const char *vn = vname[res];
        /* the check: NCHECK ops in one launch against one launch an op, bit for bit, and finite */
        std::vector<u64> one(D), each(D); /* the output x of the last op (an fc2) */
        reset(NCHECK);
        int e = run(res, 0, NCHECK, false, NULL);
        CK(cudaMemcpy(one.data(), buf + (size_t)NCHECK * VW, D * 8, cudaMemcpyDeviceToHost));
        reset(NCHECK);
        for (int o = 0; o < NCHECK && !e; o++) e = run(res, o, o + 1, false, NULL);
        CK(cudaMemcpy(each.data(), buf + (size_t)NCHECK * VW, D * 8, cudaMemcpyDeviceToHost));
        if (e) {
            printf("FAIL linchain %s: a wait timed out at op %d\n", vn, e - 1);
            fails++;
            continue;
        }
        const lc_cmp c = lc_compare(one, each, [&](int) { return (unsigned)NCHECK + 1u; });
        printf("check linchain %s: %d ops in one launch vs one launch an op: %d of %d words differ, %d wrong epochs, "
               "%d non-finite, mean |x| %.3f\n",
               vn, NCHECK, c.diff, D, c.epoch, c.nonfin, c.mag);
        if (c.diff || c.epoch || c.nonfin) {
            printf("FAIL linchain %s: the chain's result is not the op-by-op result\n", vn);
            fails++;
            continue;
        }
        /* timing: medians of 7 launches of 2 and of NOPS ops */
        auto timed = [&](int nops) {
            std::vector<double> t;
            for (int r = 0; r < 7; r++) {
                reset(nops);
                float us = 0;
                const int e2 = run(res, 0, nops, nops == NOPS && r == 6, &us);
                if (e2) {
                    printf("FAIL linchain %s: a wait timed out at op %d (%d ops)\n", vn, e2 - 1, nops);
                    fails++;
                    return -1.0;
                }
                t.push_back(us);
            }
            return dr_median(t);
        };
        const double t2 = timed(2), tn = timed(NOPS);
        if (t2 < 0 || tn < 0) continue;
        const double pair = (tn - t2) / (PAIRS - 1);
        double gbs = 0;
        if (res == V_STREAM) { /* the last timed launch's stream, all SMs, GB/s over its time */
            std::vector<u64> hs(G);
            CK(cudaMemcpy(hs.data(), streamed, (size_t)G * 8, cudaMemcpyDeviceToHost));
            for (u64 x : hs) gbs += (double)x;
            gbs = gbs / (tn * 1e-6) / 1e9;
        }
        printf("RESULT linchain | %-10s | %6.3f us a fc1+fc2 pair (%d ops %.1f us, 2 ops %.1f us)", vn, pair, NOPS,
               tn, t2);
        if (res == V_STREAM) printf(", streaming %.0f GB/s", gbs);
        printf("\n");
        /* SM clock phases of the last timed launch: the mean over the SMs of each kind */
        std::vector<u64> hp((size_t)G * (2 * NPHASE + 2));
        CK(cudaMemcpy(hp.data(), phase, hp.size() * 8, cudaMemcpyDeviceToHost));
        static const char *kinds[2] = {"fc1", "fc2"};
        static const char *pn[2 * NPHASE] = {"poll (incl. the wait)", "statistics", "normalise/pack", "items", "epilogue",
                                             "poll (incl. the wait)", "-",          "pack",           "items", "epilogue"};
        lc_print_phases(hp, G, 2, NPHASE, kinds, pn, mhz, (std::string("linchain ") + vn).c_str());
    }
    printf("SUMMARY linchain: lean exact fc1+fc2 steps through every SM; compare with the latency executor's fc1 + fc2 "
           "on the critical path (lat_timeline, same call) and with the 1.5 ms bar's ~4.4 us for two ops\n");
    CK(cudaFree(w1));
    CK(cudaFree(w2));
    CK(cudaFree(b1));
    CK(cudaFree(b2));
    CK(cudaFree(nw));
    CK(cudaFree(nb));
    CK(cudaFree(buf));
    CK(cudaFree(phase));
    CK(cudaFree(err));
    CK(cudaFree(gt));
    CK(cudaFree(big));
    CK(cudaFree(streamed));
    return fails ? 1 : 0;
}

