/* The latency executor: a whole frame for small batches (n <= LT_MAX_N streams) as one persistent kernel without
 * grid barriers.
 *
 * Why: the frame kernel of frame.cu separates its ~680 ops by grid barriers and, inside each op, walks a chain of
 * dependent L2 round trips (stage x, statistics, normalise, weights, reduce, epilogue); ~16 us an op on the H200
 * where HBM allows ~1.2 (docs/cuda_results.md). Here:
 *   - Dataflow instead of barriers. Every activation an op produces is published as an 8-byte word {value, epoch}
 *     (one store, so value and flag arrive together: NCCL's "LL" idea); a consumer polls exactly the words it
 *     reads, all of them in flight at once. Epochs only grow (ebase advances by Q per launch; pass l of a launch
 *     writes ebase + l), so nothing is ever reset between ops or frames. ebase lives on the device (read by
 *     every block at its start, advanced by a one-block kernel after the launch), so a captured graph replays.
 *   - Static work lists. The host splits every op of the frame into per-SM steps once (lt_plan): linears by
 *     contiguous ranges of units (m-tiles, or gate/up pairs), balanced by weight bytes; attention by (stream, kv
 *     head); sampling by stream. Each SM walks its list in frame order; a step waits only for its inputs.
 *   - Weights never wait for activations. A producer warp per SM streams the weight pieces of the SM's coming
 *     steps into a ring in shared memory (cp.async.bulk + mbarrier expect_tx), L2 policy evict_last for the layer
 *     weights that fit in L2 (so q4/q8 layers stay resident over the 31 passes) and evict_first for the rest; the
 *     16 compute warps find a step's weights already on chip when its inputs arrive.
 *   - Sampling without a hop: the SM that samples a stream also gathers the next input row and publishes it.
 *   - One op list for every pass: the host translates the frame plan (plan.h) into a prelude and one pass
 *     template (lt_translate), then plans their steps and pieces; pass l reads its per-pass matrices (the heads;
 *     with per-position weights, Moshi, every linear) from slice l - l0 and its epoch is ebase + l. Usual models:
 *     prelude at l0 = 1 (head0, in(h), emb0(c0)), passes 1 .. Q-1 (pass 1 with two positions). Moshi: prelude at l0 = 0 (text_embed[t]), passes 0 .. Q-1 of one position, each starting
 *     with in_proj[l] . h added to the row the previous pass's sampler gathered (docs/semantics.md).
 * Numerics are those of the frame kernel, bit for bit (the same device functions: norm statistics and
 * normalisation, the bf16 split, the mma.sync term order, chunk partials summed in chunk order, the epilogue, the
 * attention arithmetic, the sampler), so a stream's logits do not depend on which executor ran it
 * (tests/test_cuda.c test_executors). */
#include "cu_attend.cuh"
#include "cu_linear.cuh"
#include "cu_sample.cuh"
#include "cu_state.cuh"

extern "C" {
#include "plan.h"
}

#include <algorithm>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define LT_NC 480 /* compute threads (15 warps); a 16th warp streams the weights (256 measured no faster) */
#define LT_THREADS (LT_NC + 32)
#define LT_NW (LT_NC / 32)
#define LT_NSLOT 16 /* weight pieces in flight per SM */
#define LT_RING_BYTES (93 * 1024)
#define LT_ACT_BYTES (72 * 1024)
#define LT_PART_SLOTS 32
#define LT_ACC_SLOTS 32
#define LT_RES_FLOATS 2048
#define LT_ASUM_FLOATS 1024
#define LT_MISC_BYTES 6144
#define LT_PIECE_MAX (32 * 1024)
#define LT_KSPLIT_MIN (64 * 1024) /* a linear with a residual splits each unit's K over two SMs from these bytes */
#define LT_OPS_BYTES 8192   /* the op table, copied to shared memory at the start */
#define LT_STEPS_BYTES 3072 /* this SM's steps (prelude and one pass) and its pieces' chunk ranges, likewise */
#define LT_MAX_N 8 /* streams: at most 16 tokens per linear (two n-tiles) */
#define LT_NPRE 3  /* a norm row of at most LT_NPRE LT_NC columns has its weights in registers for the normalise */
#define LT_SMEM                                                                                                    \
    (LT_RING_BYTES + LT_ACT_BYTES + (LT_PART_SLOTS + LT_ACC_SLOTS) * 512 + LT_RES_FLOATS * 4 + LT_ASUM_FLOATS * 4 +   \
     LT_MISC_BYTES + LT_OPS_BYTES + LT_STEPS_BYTES)
static_assert(LT_SMEM <= 227 * 1024, "shared memory");

enum { LT_LIN = 1, LT_ATT = 2, LT_SMP = 3 };
typedef unsigned long long u64;

/* One op of the frame (the same for every pass; the pass index l is given at run time). The kind's fields share
 * a union so the table fits in shared memory. */
typedef struct lt_op {
    int kind;
    int tok_n;    /* tokens: n (else n P, P = 2 new positions in pass 1, else 1) */
    int in_last;  /* token s reads input row s P + P - 1 (the head: last position of each stream) */
    int in_plain; /* input rows are plain floats (the hidden states: the prelude's linears, Moshi's in_proj in
                   * every pass), else LL words */
    const void *in;
    int ldin;
    int ldo, out_mul, out_off;
    u64 *out; /* LL output, row t out_mul + out_off */
    union {
        struct { /* linear: y = epilogue(norm(x) W^T) */
            cu_mat w;         /* the matrix; with wl its slice 0 (the slices share shape and type) */
            const cu_mat *wl; /* per-pass slices (device): pass l uses wl[l - P.l0] (heads; Moshi: every linear) */
            const float *bias, *bias2, *nw, *nb;
            float eps;
            int norm, act;
            int whole;  /* the whole input row is staged at once (norm statistics need it) */
            int keep;   /* weights L2 evict_last (resident over the passes), else evict_first */
            int ldof, ldr, lda;
            float *outf; /* plain output (score): row t, + (l - P.l0) outf_lvl */
            long long outf_lvl;
            const u64 *res;   /* residual (LL, rows t) */
            const float *add; /* learned position (plain), row t lda (lda 0: one row) */
            u64 *fwd;         /* K split: per unit, 256 LL words of the first half's running sum (acc layout) */
        };
        struct { /* attention: in = qkv (LL), out = attention output (LL) */
            float *kc, *vc;
            size_t cstride;
            int H, KVH, HD;
            int grp; /* items (stream, kv head) a step runs at once (lt_att_grp) */
            const double *rope;
            const float *qn, *kn; /* Qwen3's q/k norm weights [HD], or NULL */
            float qk_eps;
        };
        struct { /* sample (or take the given code) and gather the next input row into out */
            int V, level; /* level < 0: the pass index */
            int forced, wait_logits, code_is_stream;
            int ldi, ldco, table_ld, pos_lvl, D, Q;
            int eo;           /* the gathered row's epoch: ebase + level + eo (1: the next pass's; Moshi's text: 0) */
            const int32_t *code_in;
            const int32_t *code0; /* Moshi, c0 given: level 0's code is code0[row] (position 0's head still ran) */
            int32_t *code_out;
            cu_raw table;     /* gathered row = code + level table_ld */
            const float *pos; /* + level pos_lvl */
        };
    };
} lt_op;

typedef struct lt_step {
    int op, u0, u1; /* units (linear), items (stream, kv head) (attention), streams (sample) */
    int pc0, pc1;   /* its weight pieces */
    int fwd;        /* K split (one unit over two SMs): 1 chunks [0, h) whose running sum is published to op.fwd,
                     * 2 chunks [h, NC) continuing that sum (polled before the first fold), then the epilogue */
} lt_step;
/* A weight piece: chunks [c0, c1) (of CU_CKT k-tiles) of the step's m-tiles, with its copies precomputed: nmt
 * copies of fbytes from frag + i fstride, then (QINT) nmt of sbytes from sb + i sstride. Pieces of an op with
 * per-pass slices (wl) take their bases from the pass's slice (wl[l - P.l0].frag + frag offset, .sb + sb offset). */
typedef struct lt_piece {
    int step, c0, c1, bytes;
    int nmt, fbytes, sbytes, keep;
    long long fstride, sstride;
    const uint8_t *frag, *sb; /* (offsets when wl) */
    const cu_mat *wl;         /* the op's slices (device), or NULL */
} lt_piece;
typedef struct lt_sm {
    int s0, s1, t0, t1; /* prelude steps, pass steps */
    int p0, p1, q0, q1; /* prelude pieces, pass pieces */
} lt_sm;

typedef struct lt_params {
    const lt_op *ops;
    const lt_step *steps;
    const lt_piece *pieces;
    const lt_sm *sms;
    int nops, n, Q;
    int l0; /* the prelude's pass and the first pass: 1 (passes 1 .. Q-1, two positions in pass 1); per-position
             * models (Moshi) 0 (passes 0 .. Q-1 of one position each). Slices and outf levels are l - l0. */
    int r0; /* the decoder's row of this launch's stream 0 (a batch over LT_MAX_N runs as groups: lt_run) */
    float temp;
    int topk;
    const uint64_t *seeds, *frames;
    u64 *noise; /* the SPEC §3 Gumbel noise of the frame, LL words of epoch ebase + 1: [stream][level][V] (temp > 0) */
    int V;
    unsigned ebase;        /* set on the device from *epoch at the start (lt_P) */
    const unsigned *epoch; /* the executor's epoch word (lt_epoch_advance) */
    int *err;
    u64 timeout_ns;
} lt_params;

/* ---- device: LL words, waits, barriers ------------------------------------------------------------------ */

__device__ __forceinline__ u64 lt_ld(const u64 *p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void lt_st(u64 *p, float v, unsigned e) {
    u64 w = ((u64)e << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w));
}
/* a wait that has spun long: give up when another SM flagged an error or after the timeout (flagged here) */
__device__ __forceinline__ int lt_give_up(const lt_params &P, u64 &t0) {
    if (*(volatile int *)&P.err[0] != CU_ERR_CLEAR) return 1;
    u64 t = cu_gtimer();
    if (!t0) t0 = t;
    if (t - t0 > P.timeout_ns) {
        atomicExch(&P.err[0], CU_ERR_TIMEOUT);
        return 1;
    }
    return 0;
}

/* the named barrier of the compute warps (the producer warp never joins it) */
struct lt_bar {
    static constexpr int threads = LT_NC;
    static __device__ __forceinline__ void sync(void) { asm volatile("bar.sync 1, %0;" ::"n"(LT_NC) : "memory"); }
    static __device__ __forceinline__ int sync_or(int v) {
        int r;
        asm volatile("{ .reg .pred p, q; setp.ne.s32 p, %1, 0; bar.red.or.pred q, 1, %2, p; selp.s32 %0, 1, 0, q; }"
                     : "=r"(r)
                     : "r"(v), "n"(LT_NC)
                     : "memory");
        return r;
    }
};

/* Wait for the phase of `parity` to complete: 1, or 0 when the wait gave up (lt_give_up: another SM flagged an error,
 * or the timeout passed, flagged here; a frame whose waits gave up is reported failed, its results unread). Every
 * 64th failed try_wait checks (each has suspended the thread a while; a check is an L2 round trip that a wait for a
 * piece about to land should not pay). */
__device__ __forceinline__ int lt_mbar_wait(u64 *b, unsigned parity, const lt_params &P) {
    const uint32_t a = cu_smem_u32(b);
    unsigned spins = 0;
    u64 t0 = 0;
    for (;;) {
        const uint32_t ok = cu_mbar_try(a, parity);
        if (ok || ((++spins & 63u) == 0 && lt_give_up(P, t0))) return ok;
    }
}
__device__ __forceinline__ void lt_bulk(void *dst, const void *src, unsigned bytes, u64 *bar, u64 policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;" ::"r"(cu_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(cu_smem_u32(bar)), "l"(policy)
                 : "memory");
}

#ifdef LT_TIMELINE /* dev/cuda/lat_timeline.cu */
#define LT_TL_MAX 4096
__device__ u64 *lt_tl; /* [grid][LT_TL_MAX][LT_TL_W]: (end, pass << 32 | op, inputs staged, weights ready, SM clock
                        * at the step's phases lt_ph[0 .. 12)) per step */
#define LT_TL_W 16 /* words per step record */
__shared__ u64 lt_marks[2];
__shared__ long long lt_ph[12]; /* SM clock at the phases of a step (LT_PH), 0 where a step has no such phase */
#define LT_MARK(i)                                                                                                 \
    do {                                                                                                           \
        if (threadIdx.x == 0) lt_marks[i] = cu_gtimer();                                                            \
    } while (0)
#define LT_PH(i)                                                                                                   \
    do {                                                                                                           \
        if (threadIdx.x == 0) lt_ph[i] = clock64();                                                                \
    } while (0)
#else
#define LT_MARK(i) ((void)0)
#define LT_PH(i) ((void)0)
#endif

/* shared memory of one SM */
struct lt_smem {
    uint8_t *ring;
    uint32_t *act;
    float4 *part, *acc;
    float *res, *asum;
    u64 *full, *empty;
    volatile int *slot_off;
    float *stats; /* mean[16], rstd[16] */
    uint8_t *ops, *steps;
    const int2 *pcs; /* chunk ranges of this SM's pieces, by absolute piece index */
    const u64 **rsrc; /* the poll's runs */
    float **rdst;
    cu_samp_smem ss;
};

#define LT_RUNS 64 /* the poll's run table */

/* Shared memory at fixed offsets: every function derives its pointers from lt_dsm with constants, so they are
 * shared-window addresses known at compile time (a struct of pointers passed by reference lives in local memory:
 * every access an L1/L2 round trip, measured on the H200 as most of the step time). */
#define LT_OFF_ACT LT_RING_BYTES
#define LT_OFF_PART (LT_OFF_ACT + LT_ACT_BYTES)
#define LT_OFF_ACC (LT_OFF_PART + LT_PART_SLOTS * 512)
#define LT_OFF_RES (LT_OFF_ACC + LT_ACC_SLOTS * 512)
#define LT_OFF_ASUM (LT_OFF_RES + LT_RES_FLOATS * 4)
#define LT_OFF_OPS (LT_OFF_ASUM + LT_ASUM_FLOATS * 4)
#define LT_OFF_STEPS (LT_OFF_OPS + LT_OPS_BYTES)
#define LT_OFF_MISC (LT_OFF_STEPS + LT_STEPS_BYTES)
extern __shared__ __align__(128) uint8_t lt_dsm[];
__shared__ lt_params lt_P;            /* the launch's parameters, copied once */
__shared__ int lt_pcs_off, lt_pcs_p0; /* where this SM's piece ranges start in the steps area; its first piece */

/* positions per stream of pass l: 2 in pass 1 when the prelude feeds it in(h) and emb0(c0), else 1 */
__device__ __forceinline__ int lt_npos(int l) { return l == 1 && lt_P.l0 == 1 ? 2 : 1; }

__device__ __forceinline__ lt_smem lt_S(void) {
    lt_smem S;
    uint8_t *m = lt_dsm + LT_OFF_MISC;
    S.ring = lt_dsm;
    S.act = (uint32_t *)(lt_dsm + LT_OFF_ACT);
    S.part = (float4 *)(lt_dsm + LT_OFF_PART);
    S.acc = (float4 *)(lt_dsm + LT_OFF_ACC);
    S.res = (float *)(lt_dsm + LT_OFF_RES);
    S.asum = (float *)(lt_dsm + LT_OFF_ASUM);
    S.ops = lt_dsm + LT_OFF_OPS;
    S.steps = lt_dsm + LT_OFF_STEPS;
    S.pcs = (const int2 *)(lt_dsm + LT_OFF_STEPS + lt_pcs_off) - lt_pcs_p0;
    S.full = (u64 *)m;
    S.empty = S.full + LT_NSLOT;
    S.slot_off = (volatile int *)(S.empty + LT_NSLOT);
    S.stats = (float *)(m + 512);
    S.ss.hist = (unsigned *)(m + 1024);
    S.ss.sel = (int *)(m + 2048);
    S.ss.rv = (float *)(m + 2112);
    S.ss.ri = (int *)(m + 2240);
    S.ss.hist2 = (unsigned *)(m + 4096);
    S.ss.list = (unsigned *)(m + 5120);
    S.rsrc = (const u64 **)(m + 2560);
    S.rdst = (float **)(m + 2560 + LT_RUNS * 8);
    return S;
}
#define LT_OP(i) (((const lt_op *)(lt_dsm + LT_OFF_OPS))[i])

/* Wait for and read nruns runs of len LL words (epoch E): run r is rsrc[r][0 .. len) into rdst[r][0 .. len) (shared
 * memory tables, filled by the caller before a barrier); elements at offsets >= lim are 0 and not read. Every
 * compute thread takes elements tid, tid + LT_NC, ... in rounds of 8, all in flight at once; the words of a round
 * that do not carry E yet are re-read together (one round trip per retry). One small function for every poll of
 * the kernel (the code of a step runs cold: instruction-cache misses cost more than the arithmetic). */
__device__ __noinline__ void lt_poll_runs(unsigned E, int nruns, int len, int lim) {
    const lt_params &P = lt_P;
    const lt_smem S = lt_S();
    const int tid = threadIdx.x, total = nruns * len;
    const int q = LT_NC / len, rem = LT_NC - q * len; /* a step of LT_NC elements: q runs and rem words */
    for (int base = tid; base < total; base += LT_NC * 8) {
        u64 w[8];
        const u64 *a[8];
        float *d[8];
        /* (run, offset) of the round's first element by one division, then by steps of (q, rem) with at most one
         * carry (a division per element was 20 instructions, 16% of the kernel's image in six inlined copies; a walk
         * by LT_NC steps of len cost a loop of LT_NC / len iterations per element: 4 us per poll of a 16-word
         * residual) */
        int r = base / len, o = base - r * len;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int idx = base + u * LT_NC;
            a[u] = idx < total && o < lim ? S.rsrc[r] + o : NULL;
            d[u] = idx < total ? S.rdst[r] + o : NULL;
            w[u] = a[u] ? lt_ld(a[u]) : (u64)E << 32;
            r += q, o += rem;
            if (o >= len) o -= len, r++;
        }
        unsigned spins = 0;
        u64 t0 = 0;
        for (;;) {
            unsigned miss = 0;
#pragma unroll
            for (int u = 0; u < 8; u++) miss |= (unsigned)((unsigned)(w[u] >> 32) != E) << u;
            /* spins is counted by the loop below only: a nonzero multiple of 256 here when that loop gave up (or,
             * rarely, got its word on such a count): then lt_give_up says so again (it used to be counted here
             * too, which made this check see 1 mod 256 after every give-up below: the poll never returned) */
            if (!miss || (spins && (spins & 255u) == 0 && lt_give_up(P, t0))) break;
            { /* while the words are not there, only the first missing one is re-read (one load in flight per
               * thread instead of eight; on the H200 the frame time was the same either way, with or without a
               * pause between reads) */
                const int u0 = __ffs(miss) - 1;
                const u64 *pa = NULL;
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (u == u0) pa = a[u];
                u64 x;
                for (;;) {
                    x = lt_ld(pa);
                    if ((unsigned)(x >> 32) == E || ((++spins & 255u) == 0 && lt_give_up(P, t0))) break;
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (u == u0) w[u] = x;
                miss &= ~(1u << u0);
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if ((miss >> u) & 1u) w[u] = lt_ld(a[u]);
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (d[u]) *d[u] = __uint_as_float((unsigned)w[u]);
    }
}

/* ---- producer: the SM's weight pieces, in the order its steps consume them --------------------------------- */

__device__ __forceinline__ int lt_piece_at(const lt_sm &me, int v, int &l) {
    const int npre = me.p1 - me.p0, npass = me.q1 - me.q0;
    if (v < npre) {
        l = lt_P.l0;
        return me.p0 + v;
    }
    l = lt_P.l0 + (v - npre) / npass;
    return me.q0 + (v - npre) % npass;
}

__device__ void lt_producer(const lt_sm me) {
    const lt_params &P = lt_P;
    const lt_smem S = lt_S();
    const int npre = me.p1 - me.p0, npass = me.q1 - me.q0;
    const int total = npre + (npass > 0 ? npass * (P.Q - P.l0) : 0);
    u64 keep, drop;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(drop));
    int foff[LT_NSLOT];
    int done = 0, head = 0; /* pieces known consumed; next free byte */
    auto consumed = [&](int k) { /* wait until piece k is consumed; 0: the wait gave up (the frame failed) */
        while (done <= k) {
            if (!lt_mbar_wait(&S.empty[done % LT_NSLOT], (unsigned)(done / LT_NSLOT) & 1u, P)) return 0;
            done++;
        }
        return 1;
    };
    int lnx = P.l0;
    lt_piece nx;
    if (total > 0) nx = P.pieces[lt_piece_at(me, 0, lnx)];
    for (int v = 0; v < total; v++) {
        const lt_piece pc = nx;
        const int l = lnx;
        if (v + 1 < total) nx = P.pieces[lt_piece_at(me, v + 1, lnx)]; /* in flight while this one waits */
        const uint8_t *frag = pc.frag, *sb = pc.sb;
        if (pc.wl) { /* the pass's slice */
            const cu_mat *w = pc.wl + (l - P.l0);
            frag = w->frag + (size_t)pc.frag;
            sb = w->sb + (size_t)pc.sb;
        }
        const int bytes = pc.bytes;
        if (v >= LT_NSLOT && !consumed(v - LT_NSLOT)) return; /* no more copies into a ring still in use */
        int off;
        for (;;) { /* a FIFO ring of variable-size pieces */
            if (done == v) {
                off = 0;
                break;
            }
            const int tail = foff[done % LT_NSLOT];
            if (head > tail) {
                if (head + bytes <= LT_RING_BYTES) {
                    off = head;
                    break;
                }
                if (bytes <= tail) {
                    off = 0;
                    break;
                }
            } else if (head < tail && head + bytes <= tail) {
                off = head;
                break;
            }
            if (!consumed(done)) return;
        }
        head = off + bytes;
        const int slot = v % LT_NSLOT;
        foff[slot] = off;
        S.slot_off[slot] = off;
        cu_mbar_expect(&S.full[slot], (unsigned)bytes);
        const u64 pol = pc.keep ? keep : drop;
        uint8_t *dst = S.ring + off;
        for (int i = 0; i < pc.nmt; i++)
            lt_bulk(dst + (size_t)i * pc.fbytes, frag + (size_t)i * pc.fstride, (unsigned)pc.fbytes, &S.full[slot], pol);
        dst += (size_t)pc.nmt * pc.fbytes;
        for (int i = 0; i < pc.nmt && pc.sbytes; i++)
            lt_bulk(dst + (size_t)i * pc.sbytes, sb + (size_t)i * pc.sstride, (unsigned)pc.sbytes, &S.full[slot], pol);
    }
}

/* ---- linear ------------------------------------------------------------------------------------------------ */

/* The partial of chunk (m-tile mt, k-tiles kt0 .. kt0 + nkt) for one n-tile, as cu_chunk_small computes it, with
 * the weights in shared memory: wt = the chunk's first tile (tiles tile_bytes apart), sbp = the (s, b) rows of its
 * first group (QINT), brow = this lane's activation row at the chunk's first column (a staged row for every lane),
 * gv = the lane's token is valid (else its terms are 0), as0/as1 = group sums of this lane's two tokens (QINT, groups from the chunk's first, stride 1). */
template <int TYPE, int WM, bool FULL = false>
__device__ __forceinline__ void lt_chunk(float (&p)[4], const cu_mat &w, int mt, int kt0, int nkt_, const uint8_t *wt,
                                         const uint8_t *sbp, const uint32_t *brow, bool gv, const float *as0,
                                         const float *as1, int lane) {
    /* FULL: a whole chunk (nkt == CU_CKT), so no k-tile is guarded: ptxas can load a k-tile's activations ahead of
     * the mma chain instead of behind a branch each */
    const int nkt = FULL ? CU_CKT : nkt_;
    const int g = lane >> 2;
    constexpr bool FAST = WM == WM_BF16 || WM == WM_F16 || WM == WM_QINT;
    cu_raw_frag raw[FAST ? CU_CKT : 1];
    if (FAST) {
#pragma unroll
        for (int i = 0; i < CU_CKT; i++)
            if (i < nkt) cu_load_raw<TYPE, true>(raw[FAST ? i : 0], wt + (size_t)i * w.tile_bytes, lane);
    }
    float d[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    float ga[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    const int gkt = WM == WM_QINT ? w.group / 16 : 1;
    int gc = 0, gl = 0; /* i % gkt and i / gkt by counting (gkt is not a constant: a division each otherwise) */
    constexpr int UNR = FAST ? CU_CKT : 1;
#pragma unroll(UNR)
    for (int i = 0; i < CU_CKT; i++) {
        if (i < nkt) {
            if (!FAST) cu_load_raw<TYPE, true>(raw[0], wt + (size_t)i * w.tile_bytes, lane);
            uint32_t b[1][4] = {{0u, 0u, 0u, 0u}};
            if (FULL) { /* brow is a staged row for every lane (the caller clamps the token): loads without a
                         * branch, the padding tokens' terms selected to 0, so no branch (and warp sync) between the
                         * k-tiles' mmas and the loads can run ahead of them */
                const uint2 l0 = *(const uint2 *)(brow + i * 16), l8 = *(const uint2 *)(brow + i * 16 + 8);
                b[0][0] = gv ? cu_hi_pair(l0.x, l0.y) : 0u;
                b[0][1] = gv ? cu_hi_pair(l8.x, l8.y) : 0u;
                b[0][2] = gv ? cu_lo_pair(l0.x, l0.y) : 0u;
                b[0][3] = gv ? cu_lo_pair(l8.x, l8.y) : 0u;
            } else if (gv) {
                uint2 l0 = *(const uint2 *)(brow + i * 16), l8 = *(const uint2 *)(brow + i * 16 + 8);
                b[0][0] = cu_hi_pair(l0.x, l0.y);
                b[0][1] = cu_hi_pair(l8.x, l8.y);
                b[0][2] = cu_lo_pair(l0.x, l0.y);
                b[0][3] = cu_lo_pair(l8.x, l8.y);
            }
            cu_afrag A;
            cu_make_a<TYPE, WM>(A, raw[FAST ? i : 0], w, mt, kt0 + i, lane);
            if (WM == WM_QINT) {
                if (gc == 0) ga[0][0] = ga[0][1] = ga[0][2] = ga[0][3] = 0.0f;
                cu_ktile<WM, 1>(ga, A, b);
                if (++gc == gkt) {
                    const int es = w.sb_bytes / 2;
                    const uint8_t *q0 = sbp + ((size_t)gl * 16 + g) * w.sb_bytes, *q1 = q0 + 8 * w.sb_bytes;
                    float s0 = cu_sb_load<true>(q0, w.sbtype), b0 = cu_sb_load<true>(q0 + es, w.sbtype);
                    float s1 = cu_sb_load<true>(q1, w.sbtype), b1 = cu_sb_load<true>(q1 + es, w.sbtype);
                    float a0 = as0 ? as0[gl] : 0.0f, a1 = as1 ? as1[gl] : 0.0f;
                    cu_qint_group(d[0], ga[0], s0, b0, s1, b1, a0, a1);
                    gc = 0, gl++;
                }
            } else {
                cu_ktile<WM, 1>(d, A, b);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; e++) p[e] = d[0][e];
}

__device__ __forceinline__ int lt_sr(int nkt) { return cu_act_stride(nkt); }

/* Stage k-tiles [kt0, kt1) of the T input rows into act (packed hi/lo words, row stride lt_sr(kt1 - kt0)), with
 * the norm prologue when norm (then kt0 == 0 and the window is the whole row) and, for QINT (qint), the window's
 * group sums into asum [t][group]. The arithmetic is cu_stage_small's. One instance for every weight type, loops
 * kept rolled: this code runs cold at every step, its size is its cost. */
__device__ __forceinline__ void lt_stage(int opi, int K, int group, int qint, int T, int Pp, int kt0, int kt1, unsigned E) {
    const lt_op &op = LT_OP(opi);
    const lt_smem S = lt_S();
    const int kb = kt0 * 16, nc = (kt1 - kt0) * 16, SR = lt_sr(kt1 - kt0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float *actf = (float *)S.act;
    const int norm = op.norm;
    if (norm != DD_NORM_NONE && tid * 32 < K) { /* the norm weights to L1 while the inputs arrive */
        asm volatile("prefetch.global.L1 [%0];" ::"l"(op.nw + tid * 32));
        if (op.nb) asm volatile("prefetch.global.L1 [%0];" ::"l"(op.nb + tid * 32));
    }
    if (op.in_plain) { /* the hidden states (the prelude; Moshi: in_proj in every pass) */
        const float *x = (const float *)op.in;
#pragma unroll 1
        for (int t = 0; t < T; t++)
#pragma unroll 1
            for (int kk = tid; kk < nc; kk += LT_NC)
                actf[(size_t)t * SR + kk] = kb + kk < K ? __ldcg(x + (size_t)(lt_P.r0 + t) * op.ldin + kb + kk) : 0.0f;
    } else {
        const u64 *x = (const u64 *)op.in;
        if (tid < T) {
            const int t = tid;
            S.rsrc[t] = x + (size_t)(op.in_last ? t * Pp + Pp - 1 : t) * op.ldin + kb;
            S.rdst[t] = actf + (size_t)t * SR;
        }
        lt_bar::sync();
        lt_poll_runs(E, T, nc, K - kb);
    }
    LT_PH(2);
    /* A row of at most LT_NPRE LT_NC columns with a norm (not QINT): this thread's norm weights and biases loaded
     * now, all at once, so the statistics phase hides their latency and the normalise below reads registers (the
     * loop further down loads them an element at a time, each in its dependent chain). After the poll, so nothing
     * is live across it (lat_nreg, loaded before the poll, lost to register pressure). */
    const bool npre = norm != DD_NORM_NONE && !qint && kb == 0 && nc <= LT_NPRE * LT_NC;
    float nwv[LT_NPRE], nbv[LT_NPRE];
#pragma unroll
    for (int j = 0; j < LT_NPRE; j++) {
        const int k = tid + j * LT_NC;
        nwv[j] = npre && k < K ? __ldg(op.nw + k) : 0.0f;
        nbv[j] = npre && op.nb && k < K ? __ldg(op.nb + k) : 0.0f;
    }
    lt_bar::sync();
    float *smean = S.stats, *srstd = S.stats + 16;
    if (norm != DD_NORM_NONE) {
#pragma unroll 1
        for (int t = warp; t < T; t += LT_NW) {
            const float *row = actf + (size_t)t * SR;
            float mean, rstd;
            cu_row_stats([&](int k) { return row[k]; }, K, norm, op.eps, lane, mean, rstd);
            if (lane == 0) {
                smean[t] = mean;
                srstd[t] = rstd;
            }
        }
        lt_bar::sync();
        LT_PH(3);
    }
    /* QINT: a warp a (row, group) normalises and packs the group's columns (lane k, k + 32, ...) and adds their
     * values as cu_group_sum does (no barrier between the two); the window's columns past its groups (past K) as
     * below. Spelled out rolled: through cu_group_sum (its loop unrolls) lat.cu's kernels grow by ~3,600
     * instructions (nvdisasm, sm_90, 2026-12-06), and this code runs cold at every step */
    const int ng = qint ? (min(kb + nc, K) - kb) / group : 0;
#pragma unroll 1
    for (int it = warp; it < T * ng; it += LT_NW) {
        const int t = it / ng, gl = it - t * ng, k0 = gl * group;
        uint32_t *row = S.act + (size_t)t * SR;
        const float mean = norm != DD_NORM_NONE ? smean[t] : 0.0f, rstd = norm != DD_NORM_NONE ? srstd[t] : 1.0f;
        float s = 0.0f;
#pragma unroll 1
        for (int k = k0 + lane; k < k0 + group; k += 32) {
            const uint32_t w =
                cu_split_pack(cu_norm_val(((const float *)row)[k], kb + k, norm, mean, rstd, op.nw, op.nb));
            row[k] = w;
            s += cu_packed_val(w);
        }
        s = cu_warp_sum(s);
        if (lane == 0) S.asum[t * ng + gl] = s;
    }
    if (npre) { /* cu_norm_val's arithmetic with the weights loaded above */
#pragma unroll
        for (int j = 0; j < LT_NPRE; j++) {
            const int kk = tid + j * LT_NC;
            if (kk >= nc) break;
#pragma unroll 1
            for (int t = 0; t < T; t++) {
                uint32_t *row = S.act + (size_t)t * SR;
                const float n = cu_norm_wb(((const float *)row)[kk], smean[t], srstd[t], nwv[j], nbv[j], op.nb != NULL);
                row[kk] = kk < K ? cu_split_pack(n) : 0u;
            }
        }
        lt_bar::sync();
        LT_PH(4);
        return;
    }
    /* a thread's columns over every row: the T rows' elements of a column share its norm weights and are
     * independent of each other (several in flight); each element as before, in place */
#pragma unroll 1
    for (int kk = ng * group + tid; kk < nc; kk += LT_NC) {
        const int k = kb + kk;
#pragma unroll 4
        for (int t = 0; t < T; t++) {
            uint32_t *row = S.act + (size_t)t * SR;
            const float mean = norm != DD_NORM_NONE ? smean[t] : 0.0f, rstd = norm != DD_NORM_NONE ? srstd[t] : 1.0f;
            row[kk] = k < K ? cu_split_pack(cu_norm_val(((const float *)row)[kk], k, norm, mean, rstd, op.nw, op.nb))
                            : 0u;
        }
    }
    lt_bar::sync();
    LT_PH(4);
}

/* A fold of the latency step's chunk partials past one slab (K > CU_SLC chunks; cu_common.cuh's contract): the
 * segment's segc chunks (chunk cseg on; part row cc at cc n + idx) onto acc, the open slab's running sums (from +0
 * when first), and acc + LT_ACC_SLOTS / 2 * 32, the closed slabs' sums, which a slab joins when the next slab's
 * first chunk comes (the step's K range starts at slab boundary cbeg); at the step's last fold the total moves to
 * acc. keep (a K split's second half): each slab's sum is kept apart instead, slab j of the range at
 * acc + LT_ACC_SLOTS / 2 * 32 + j n, for lt_join_slabs once the first half's closed sum of [0, cbeg) has been polled,
 * so the poll is followed by one add a slab instead of the half's whole chunk chain (-1.5 % at GPT bf16 B1, H100,
 * 2026-12-07). Out of line and inline measured alike (H100, 2026-12-07: the slab contract cost the latency executor
 * 2-3 % at GPT / CSM bf16 B1, about half of it with this code present but never run; docs/cuda_results.md). */
static __device__ __noinline__ void lt_fold_slabs(float4 *acc, const float4 *part, int n, int segc, int cseg,
                                                  int cbeg, bool keep, bool last, bool first) {
    const int SO = LT_ACC_SLOTS / 2 * 32;
    /* the first slab boundary in the segment; whether the closed slabs' sum exists before it */
    const int gb = max((cseg + CU_SLC - 1) / CU_SLC * CU_SLC, cbeg + CU_SLC) - cseg;
    const bool tv0 = cseg > cbeg && (cseg - 1) / CU_SLC * CU_SLC > cbeg;
#pragma unroll 1
    for (int idx = threadIdx.x; idx < n; idx += LT_NC) {
        float4 a = first ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : acc[idx];
        bool tv = tv0;
        float4 t = tv && !keep ? acc[SO + idx] : a;
        int j = (cseg + gb - 1 - cbeg) / CU_SLC; /* keep: the slab the first close ends (or the segment's only one) */
        for (int cc = 0, e = min(gb, segc);; e = min(e + CU_SLC, segc)) {
#pragma unroll 4
            for (; cc < e; cc++) a = cu_add4(a, part[cc * n + idx]);
            if (cc == segc) break;
            /* chunk cseg + cc starts a slab: the slab before it joins the closed slabs' sum (keep: is kept apart) */
            if (keep) acc[SO + (j++) * n + idx] = a;
            else t = tv ? cu_add4(t, a) : a;
            tv = true;
            a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (keep && last) {
            acc[SO + j * n + idx] = a;
            continue;
        }
        if (last && tv) a = cu_add4(t, a);
        if (!last && tv && !keep) acc[SO + idx] = t;
        acc[idx] = a;
    }
}
/* keep's end: the handed-over sum of [0, cbeg) (in acc) and the range's nsl slab sums joined in slab order */
static __device__ __noinline__ void lt_join_slabs(float4 *acc, int n, int nsl) {
#pragma unroll 1
    for (int idx = threadIdx.x; idx < n; idx += LT_NC) {
        float4 a = acc[idx];
        for (int j = 0; j < nsl; j++) a = cu_add4(a, acc[LT_ACC_SLOTS / 2 * 32 + j * n + idx]);
        acc[idx] = a;
    }
}

template <int TYPE, int WM>
__device__ __forceinline__ int lt_linear(const lt_step st, int l, int v) {
    const lt_params &P = lt_P;
    const lt_op &op = LT_OP(st.op);
    const lt_smem S = lt_S();
    const int Pp = lt_npos(l), T = op.tok_n ? P.n : P.n * Pp, NTG = (T + 7) >> 3;
    /* the pass's slice: its pointers are read only by QDEQ (scales from global memory), shapes are slice 0's */
    const cu_mat w = op.wl && WM == WM_QDEQ ? op.wl[l - P.l0] : op.w;
    const int halves = w.pair ? 2 : 1, nu = st.u1 - st.u0, nmt = nu * halves, KT = w.KT;
    const unsigned E = P.ebase + (unsigned)l;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
    if (tid < nu * 16 && (tid & 31) == 0) { /* bias (and position) rows of the outputs to L1 */
        if (op.bias) asm volatile("prefetch.global.L1 [%0];" ::"l"(op.bias + st.u0 * 16 + tid));
        if (op.add) asm volatile("prefetch.global.L1 [%0];" ::"l"(op.add + st.u0 * 16 + tid));
    }
    /* the residual rows of this step's outputs: published before this step's inputs, so their loads are issued
     * now and checked after the input poll (one word per thread where they fit the compute threads) */
    const int rnr = nu * 16;
    const u64 *res = st.fwd == 1 ? NULL : op.res; /* the first half of a K split has no epilogue */
    const bool rfast = res && T * rnr <= LT_NC;
    const u64 *ra = NULL;
    u64 rw = 0;
    if (rfast && tid < T * rnr) {
        const int t = tid / rnr, r = tid - t * rnr;
        if (st.u0 * 16 + r < w.N) {
            ra = res + (size_t)t * op.ldr + st.u0 * 16 + r;
            rw = lt_ld(ra);
        }
    }
    if (res && !rfast) { /* the residual rows of this step's outputs (long published: one round trip) */
        const int nr = nu * 16;
        if (tid < T) {
            const int t = tid;
            S.rsrc[t] = op.res + (size_t)t * op.ldr + st.u0 * 16;
            S.rdst[t] = S.res + t * nr;
        }
        lt_bar::sync();
        lt_poll_runs(E, T, nr, w.N - st.u0 * 16);
        lt_bar::sync();
        LT_PH(1);
    }
    /* a whole-row op stages the window of its pieces once: the whole row, or its half of a K split */
    const int wk0 = op.whole ? S.pcs[st.pc0].x * CU_CKT : 0, wk1 = op.whole ? min(S.pcs[st.pc1 - 1].y * CU_CKT, KT) : KT;
    if (op.whole) lt_stage(st.op, w.K, w.group, WM == WM_QINT, T, Pp, wk0, wk1, E);
    if (ra) { /* read by the epilogue, after the barriers of the pieces below */
        unsigned spins = 0;
        u64 t0 = 0;
        while ((unsigned)(rw >> 32) != E && !((++spins & 255u) == 0 && lt_give_up(P, t0))) rw = lt_ld(ra);
        S.res[tid] = __uint_as_float((unsigned)rw);
    }
    LT_MARK(0);
    /* The chunk partials of consecutive pieces collect in part (chunk-major) and are summed into acc in chunk
     * order once part is full and at the end (the same sums in the same order as one pass per piece); each warp
     * releases a piece's ring slot when its own items are done, so no barrier separates the pieces. */
    int segc = 0, first_seg = 1; /* chunks (per m-tile and n-tile) collected in part */
    auto fold = [&](int pc) { /* after piece pc (its values are read here, not kept live over the items) */
        const bool slabs = KT > CU_SLC * CU_CKT, last = pc + 1 == st.pc1;
        auto poll_fwd = [&]() { /* the sum of chunks [0, h) from the step's other half */
            if (tid == 0) {
                S.rsrc[0] = op.fwd + (size_t)st.u0 * 256;
                S.rdst[0] = (float *)S.acc;
            }
            lt_bar::sync();
            lt_poll_runs(E, 1, nmt * NTG * 128, nmt * NTG * 128);
            lt_bar::sync();
        };
        lt_bar::sync();
        if (first_seg && st.fwd == 2 && !slabs) { /* its running sum, then ours */
            poll_fwd();
            first_seg = 0;
        }
        if (slabs) { /* fwd 2: our slabs' sums kept apart, the other half's closed sum polled at the end */
            const int cbeg = S.pcs[st.pc0].x;
            lt_fold_slabs(S.acc, S.part, nmt * NTG * 32, segc, S.pcs[pc].y - segc, cbeg, st.fwd == 2, last, first_seg);
            if (st.fwd == 2 && last) {
                lt_bar::sync();
                poll_fwd();
                lt_join_slabs(S.acc, nmt * NTG * 32, (S.pcs[pc].y - cbeg + CU_SLC - 1) / CU_SLC);
            }
        } else {
#pragma unroll 1
            for (int idx = tid; idx < nmt * NTG * 32; idx += LT_NC) {
                const int ln = idx & 31, q = idx >> 5, nt = NTG == 1 ? 0 : q & 1, mtl = NTG == 1 ? q : q >> 1;
                float4 a = first_seg ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : S.acc[idx];
#pragma unroll 4
                for (int cc = 0; cc < segc; cc++) {
                    const float4 b = S.part[((cc * nmt + mtl) * NTG + nt) * 32 + ln];
                    a.x = a.x + b.x;
                    a.y = a.y + b.y;
                    a.z = a.z + b.z;
                    a.w = a.w + b.w;
                }
                S.acc[idx] = a;
            }
        }
        lt_bar::sync();
        first_seg = 0;
        segc = 0;
    };
    for (int pc = st.pc0; pc < st.pc1; pc++) {
        const int2 piece = S.pcs[pc];
        const int c0 = piece.x, nc = piece.y - piece.x;
        const int kt0 = c0 * CU_CKT, kt1 = min(piece.y * CU_CKT, KT), nktp = kt1 - kt0;
        if (!op.whole) {
            if (pc > st.pc0) lt_bar::sync(); /* every warp is done with the previous window */
            lt_stage(st.op, w.K, w.group, WM == WM_QINT, T, Pp, kt0, kt1, E);
        }
        const int kw0 = op.whole ? wk0 : kt0, SR = lt_sr(op.whole ? wk1 - wk0 : nktp);
        const int gw0 = WM == WM_QINT ? kw0 * 16 / w.group : 0;
        const int ngw = WM == WM_QINT ? (min((op.whole ? wk1 : kt1) * 16, w.K) - kw0 * 16) / w.group : 0;
        const int gp0 = WM == WM_QINT ? kt0 * 16 / w.group : 0;
        const int ngp = WM == WM_QINT ? (min(kt1 * 16, w.K) - kt0 * 16) / w.group : 0;
        const int slot = v % LT_NSLOT;
        lt_mbar_wait(&S.full[slot], (unsigned)(v / LT_NSLOT) & 1u, P); /* gave up: flagged, the frame fails */
        if (pc == st.pc0) {
            LT_MARK(1);
            LT_PH(5);
        }
        const uint8_t *wbase = S.ring + S.slot_off[slot];
        const uint8_t *sbase = wbase + (size_t)nmt * nktp * w.tile_bytes;
        const int items = nmt * nc * NTG;
#pragma unroll 1
        for (int it = warp; it < items; it += LT_NW) {
            const int nt = NTG == 1 ? 0 : it & 1, r = NTG == 1 ? it : it >> 1;
            const int ci = nmt == 1 ? r : nmt == 2 ? r >> 1 : r / nmt, mtl = r - ci * nmt;
            const int ktc = (c0 + ci) * CU_CKT, nkt = min(CU_CKT, KT - ktc);
            const int t0 = nt * 8 + g, ta = nt * 8 + 2 * cq;
            const uint32_t *brow = S.act + (size_t)min(t0, T - 1) * SR + (ktc - kw0) * 16 + 2 * cq;
            const uint8_t *sbp = NULL;
            const float *as0 = NULL, *as1 = NULL;
            if (WM == WM_QINT) {
                const int gc = ktc * 16 / w.group;
                sbp = sbase + ((size_t)mtl * ngp + (gc - gp0)) * 16 * w.sb_bytes;
                if (ta < T) as0 = S.asum + ta * ngw + (gc - gw0);
                if (ta + 1 < T) as1 = S.asum + (ta + 1) * ngw + (gc - gw0);
            }
            float p[4];
            const uint8_t *wt = wbase + ((size_t)mtl * nktp + (ktc - kt0)) * w.tile_bytes;
            constexpr bool FASTW = WM == WM_BF16 || WM == WM_F16 || WM == WM_QINT;
            if (FASTW && nkt == CU_CKT)
                lt_chunk<TYPE, WM, true>(p, w, st.u0 * halves + mtl, ktc, nkt, wt, sbp, brow, t0 < T, as0, as1, lane);
            else
                lt_chunk<TYPE, WM>(p, w, st.u0 * halves + mtl, ktc, nkt, wt, sbp, brow, t0 < T, as0, as1, lane);
            S.part[(((segc + ci) * nmt + mtl) * NTG + nt) * 32 + lane] = make_float4(p[0], p[1], p[2], p[3]);
        }
        /* every compute thread arrives after its own reads of the slot (and of its offset): the producer's wait on
         * empty[slot] then orders each read before the bulk copy that refills the slot, thread by thread (one lane's
         * arrival after __syncwarp orders them too, but compute-sanitizer's racecheck credits only the arriving
         * thread's reads: 2026-12-07, 559,488 reported WAR hazards on a ring slot, UBLKCP against LDS.128) */
        cu_mbar_arrive(&S.empty[slot]);
        if (pc == st.pc0) LT_PH(6);
        segc += nc;
        v++;
        if (pc + 1 == st.pc1 || (segc + S.pcs[pc + 1].y - S.pcs[pc + 1].x) * nmt * NTG > LT_PART_SLOTS) fold(pc);
    }
    LT_PH(8);
    if (st.fwd == 1) { /* the sum so far (acc layout) for the unit's second half */
        u64 *dst = op.fwd + (size_t)st.u0 * 256;
        const float *a = (const float *)S.acc;
        for (int i = tid; i < nmt * NTG * 128; i += LT_NC) lt_st(dst + i, a[i], E);
        lt_bar::sync();
        return v;
    }
    const int nr = nu * 16;
#pragma unroll 1
    for (int idx = tid; idx < nr * T; idx += LT_NC) {
        const int r = idx & 15, q = idx >> 4, ul = q / T, t = q - ul * T, j = (st.u0 + ul) * 16 + r;
        if (j >= w.N) continue;
        const int nt = t >> 3, tt = t & 7, ln = (r & 7) * 4 + (tt >> 1), e = ((r >> 3) << 1) | (tt & 1);
        const float a = ((const float *)&S.acc[((ul * halves) * NTG + nt) * 32 + ln])[e];
        const float u = w.pair ? ((const float *)&S.acc[((ul * halves + 1) * NTG + nt) * 32 + ln])[e] : 0.0f;
        float h = cu_epi_act(op.act, op.bias, op.bias2, j, a, u);
        if (op.res) h = h + S.res[t * nr + ul * 16 + r];
        if (op.add) h = h + __ldg(op.add + (size_t)t * op.lda + j);
        if (op.out) lt_st(op.out + (size_t)(t * op.out_mul + op.out_off) * op.ldo + j, h, E);
        if (op.outf) op.outf[(size_t)(P.r0 + t) * op.ldof + (size_t)(l - P.l0) * op.outf_lvl + j] = h; /* tok_n: t a stream */
    }
    lt_bar::sync();
    return v;
}

/* ---- attention: groups of (stream, kv head) items, each with the arithmetic of cu_attend_fast -------------- */

__device__ __forceinline__ void lt_attend(const lt_step st, int l) {
    const lt_params &P = lt_P;
    const lt_op &op = LT_OP(st.op);
    const lt_smem S = lt_S();
    const int Pp = lt_npos(l), p0 = Pp == 2 ? 0 : l;
    const int HD = op.HD, H = op.H, KVH = op.KVH, G = H / KVH, kvw = KVH * HD, half = HD / 2;
    const unsigned E = P.ebase + (unsigned)l;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    /* key rows padded to HD + 1 floats: lane j reads row j, so an unpadded stride of HD words would put every
     * lane on one bank (a 32-way conflict per element of the score loop) */
    const int HDP = HD + 1;
    /* Up to op.grp items (stream, kv head) at once, each with its scratch in the act area: SK [p0][HDP], SV [p0][HD]
     * (the cache), SQ [Pp G][HD], SKN [Pp][HDP], SVN [Pp][HD] (this pass's rows); one poll for all of them, a warp per
     * q row. At GPT dims (G 1) an item keeps one warp busy, so four items take about as long as one, and the plan
     * puts 16 kv heads on 4 SMs instead of 16 (lt_att_grp). */
    const int nq = Pp * G, nrow = nq + Pp, nrun = nrow + Pp, isz = p0 * (HDP + HD) + nq * HD + Pp * (HDP + HD);
    auto item = [&](int ii, float *&SK, float *&SV, float *&SQ, float *&SKN, float *&SVN) {
        SK = (float *)S.act + (size_t)ii * isz, SV = SK + (size_t)p0 * HDP, SQ = SV + (size_t)p0 * HD;
        SKN = SQ + (size_t)nq * HD, SVN = SKN + (size_t)Pp * HDP;
    };
    const u64 *qkv = (const u64 *)op.in;
    for (int i0 = st.u0; i0 < st.u1; i0 += op.grp) {
        const int ni = min(op.grp, st.u1 - i0);
        float *SK, *SV, *SQ, *SKN, *SVN;
        /* earlier positions from the cache (written by this SM in earlier passes) while the new q/k/v arrive */
        { /* rows jj, jj + rpt, ...: one division per thread */
            const int rpt = LT_NC / HD, jj = tid / HD, d = tid - jj * HD;
            if (jj < rpt) {
#pragma unroll 1
                for (int ii = 0; ii < ni; ii++) {
                    const int s = (i0 + ii) / KVH, kg = i0 + ii - s * KVH;
                    const float *kc = op.kc + (size_t)s * op.cstride + (size_t)kg * HD;
                    const float *vc = op.vc + (size_t)s * op.cstride + (size_t)kg * HD;
                    item(ii, SK, SV, SQ, SKN, SVN);
#pragma unroll 4
                    for (int j = jj; j < p0; j += rpt) {
                        SK[(size_t)j * HDP + d] = __ldcg(kc + (size_t)j * kvw + d);
                        SV[(size_t)j * HD + d] = __ldcg(vc + (size_t)j * kvw + d);
                    }
                }
            }
        }
        LT_PH(1);
        if (tid < ni * nrun) { /* per item: its q heads per position, then k, then v: SQ, SKN, SVN */
            const int ii = tid / nrun, r = tid - ii * nrun, s = (i0 + ii) / KVH, kg = i0 + ii - s * KVH;
            int i, col;
            if (r < nq) i = r / G, col = (kg * G + r % G) * HD;
            else if (r < nrow) i = r - nq, col = (H + kg) * HD;
            else i = r - nrow, col = (H + KVH + kg) * HD;
            item(ii, SK, SV, SQ, SKN, SVN);
            S.rsrc[tid] = qkv + (size_t)(s * Pp + i) * op.ldin + col;
            S.rdst[tid] = r < nq ? SQ + (size_t)r * HD : r < nrow ? SKN + (size_t)(r - nq) * HDP : SVN + (size_t)(r - nrow) * HD;
        }
        lt_bar::sync();
        lt_poll_runs(E, ni * nrun, HD, HD);
        lt_bar::sync();
        LT_MARK(0);
        LT_MARK(1);
        LT_PH(2);
        if (op.qn) { /* Qwen3: each q row and new k row RMS-normed in place first, one warp a row (cu_qk_norm) */
#pragma unroll 1
            for (int rr = warp; rr < ni * nrow; rr += LT_NW) {
                const int ii = rr / nrow, r = rr - ii * nrow;
                item(ii, SK, SV, SQ, SKN, SVN);
                float *row = r < nq ? SQ + (size_t)r * HD : SKN + (size_t)(r - nq) * HDP;
                cu_qk_norm([row](int d) { return row[d]; }, row, HD, r < nq ? op.qn : op.kn, op.qk_eps, lane);
            }
            lt_bar::sync();
        }
        if (op.rope) { /* q rows (position p0 + i), then the new k rows, rotated in place as cu_norm_rot_row does */
#pragma unroll 1
            for (int idx = tid; idx < ni * nrow * half; idx += LT_NC) {
                const int rr = idx / half, j = idx - rr * half, ii = rr / nrow, r = rr - ii * nrow;
                const int p = p0 + (r < nq ? r / G : r - nq);
                item(ii, SK, SV, SQ, SKN, SVN);
                float *row = r < nq ? SQ + (size_t)r * HD : SKN + (size_t)(r - nq) * HDP;
                float o0, o1;
                cu_rope_pair(op.rope, HD, p, j, row[j], row[j + half], o0, o1);
                row[j] = o0;
                row[j + half] = o1;
            }
            lt_bar::sync();
        }
        LT_PH(3);
#pragma unroll 1
        for (int idx = tid; idx < ni * Pp * HD; idx += LT_NC) { /* append (keys stored rotated) */
            const int ii = idx / (Pp * HD), r = idx - ii * (Pp * HD), i = r / HD, d = r - i * HD;
            const int s = (i0 + ii) / KVH, kg = i0 + ii - s * KVH;
            item(ii, SK, SV, SQ, SKN, SVN);
            const size_t at = (size_t)s * op.cstride + (size_t)(p0 + i) * kvw + (size_t)kg * HD + d;
            op.kc[at] = SKN[(size_t)i * HDP + d];
            op.vc[at] = SVN[r];
        }
        LT_PH(4);
        const float scale = sqrtf((float)HD);
#pragma unroll 1
        for (int qq = warp; qq < ni * nq; qq += LT_NW) {
            const int ii = qq / nq, q = qq - ii * nq, i = q / G, hq = q - i * G, p = p0 + i, nk = p + 1;
            const int s = (i0 + ii) / KVH, kg = i0 + ii - s * KVH;
            item(ii, SK, SV, SQ, SKN, SVN);
            const float *sq = SQ + (size_t)q * HD;
            float sc[2] = {-INFINITY, -INFINITY};
#pragma unroll 1
            for (int r = 0; r < 2; r++) {
                const int j = lane + 32 * r;
                if (j < nk) {
                    const float *kr = j < p0 ? SK + (size_t)j * HDP : SKN + (size_t)(j - p0) * HDP;
                    float d = 0.0f;
#pragma unroll 16
                    for (int e = 0; e < HD; e++) d = d + sq[e] * kr[e];
                    sc[r] = d / scale;
                }
            }
            float w0, w1;
            cu_softmax2<true>(sc, nk, lane, w0, w1);
            LT_PH(5);
            u64 *out = op.out + (size_t)(s * Pp + i) * op.ldo + (size_t)(kg * G + hq) * HD;
#pragma unroll 1
            for (int d0 = 0; d0 < HD; d0 += 64) {
                const int da = d0 + lane, db = d0 + 32 + lane;
                float oa = 0.0f, ob = 0.0f;
#pragma unroll 8 /* the sums stay sequential over j; unrolled, the loads of later j are issued early */
                for (int j = 0; j < nk; j++) {
                    const float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j & 31);
                    const float *vr = j < p0 ? SV + (size_t)j * HD : SVN + (size_t)(j - p0) * HD;
                    const float va = da < HD ? vr[da] : 0.0f, vb = db < HD ? vr[db] : 0.0f;
                    oa = oa + wj * va;
                    ob = ob + wj * vb;
                }
                if (da < HD) lt_st(out + da, oa, E);
                if (db < HD) lt_st(out + db, ob, E);
            }
            LT_PH(6);
        }
        lt_bar::sync();
    }
}

/* ---- sampling (or the given code) and the gather of the next input row ----------------------------------- */

__device__ __forceinline__ void lt_sample(const lt_step st, int l) {
    const lt_params &P = lt_P;
    const lt_op &op = LT_OP(st.op);
    const lt_smem S = lt_S();
    const int lv = op.level >= 0 ? op.level : l;
    const unsigned E = P.ebase + (unsigned)l, Eo = P.ebase + (unsigned)(lv + op.eo);
    /* Moshi, c0 given: level 0's code is the caller's, but position 0's logits are still waited for: the row
     * published here starts pass 1, whose words (x0, ...) pass 0's readers must be done with, as the logits prove */
    const bool given0 = op.code0 && lv == 0;
    float *zs = (float *)S.act;
    const u64 *lg = (const u64 *)op.in;
    for (int s = st.u0; s < st.u1; s++) {
        float *gpre = zs + ((op.V + 3) & ~3);
        uint64_t seed = P.seeds ? P.seeds[s] : 0, frame = P.frames ? P.frames[s] : 0;
        if (!op.forced && !given0 && P.temp > 0.0f) { /* computed by every SM at the start of the frame (lt_noise) */
            if (threadIdx.x == 0) {
                S.rsrc[0] = P.noise + ((size_t)s * P.Q + lv) * P.V;
                S.rdst[0] = gpre;
            }
            lt_bar::sync();
            lt_poll_runs(P.ebase + 1u, 1, op.V, op.V);
            lt_bar::sync();
        }
        LT_PH(1);
        if (!op.forced || op.wait_logits) {
            if (threadIdx.x == 0) {
                S.rsrc[0] = lg + (size_t)s * op.ldin;
                S.rdst[0] = zs;
            }
            lt_bar::sync();
            lt_poll_runs(E, 1, op.V, op.V);
            /* Every thread waits for the whole row before any goes on. lt_poll_runs waits, in thread t, only for
             * words t, t + LT_NC, ... of it; with the code given (forced, given0) thread t then published words t,
             * t + LT_NC, ... of the next pass's input row below at once: with V < D (Kyutai MLX: V 32, D 64) threads
             * V .. D-1 before any logit of this pass had arrived, the others after one head unit's. That row starts
             * the next pass, whose words (xg, x0, ...) this pass's readers must be done with, which only the whole
             * row proves (every head unit reads every row of the pass); published early, a reader of this pass can
             * see the next pass's epoch and wait for its own until the timeout (the Kyutai MLX q8 score and c0-given
             * decode on the H200; dev/cuda/ltplan_check/flow.cu finds it, and the races of the other per-position
             * and score plans). The sampling path had this barrier, before cu_sample_block. */
            lt_bar::sync();
        }
        LT_MARK(0);
        LT_PH(2);
        int code;
        if (op.forced) {
            code = op.code_is_stream ? P.r0 + s : __ldcg(op.code_in + (size_t)(P.r0 + s) * op.ldi + lv);
        } else if (given0) {
            code = __ldcg(op.code0 + P.r0 + s);
        } else {
            code = cu_sample_block<lt_bar>([zs](int i) { return zs[i]; }, op.V, P.temp, P.topk, seed, frame, lv, S.ss,
                                           P.temp > 0.0f ? gpre : NULL);
        }
        LT_MARK(1);
        LT_PH(6);
        if (threadIdx.x == 0) {
            if (code < 0) atomicMin(&P.err[1], ((P.r0 + s) << 8) | lv);
            if (op.code_out) op.code_out[(size_t)(P.r0 + s) * op.ldco + lv] = code;
        }
        if (op.out && lv < op.Q - 1) {
            const int r = code + lv * op.table_ld;
            u64 *dst = op.out + (size_t)(s * op.out_mul + op.out_off) * op.ldo;
            const float *pos = op.pos ? op.pos + (size_t)lv * op.pos_lvl : NULL;
            for (int d = threadIdx.x; d < op.D; d += LT_NC) {
                float x = code >= 0 ? cu_raw_val(op.table, r, d) : 0.0f;
                if (pos) x = x + __ldg(pos + d);
                lt_st(dst + d, x, Eo);
            }
        }
        lt_bar::sync();
    }
}

/* ---- the frame's sampling noise ------------------------------------------------------------------------------ */

/* SPEC §3's Gumbel noise of every (stream, level, index) of the frame, spread over all compute threads of the grid
 * and published as LL words (epoch ebase + 1): it does not depend on the logits, so no sampler computes it on its
 * critical path (~5 us per level on one SM) */
__device__ __noinline__ void lt_noise(void) { /* once per frame: out of line, so its registers do not crowd the steps */
    const lt_params &P = lt_P;
    if (!(P.temp > 0.0f) || !P.noise) return;
    const int V4 = (P.V + 3) / 4, per = P.Q * V4;
    const unsigned E = P.ebase + 1u;
#pragma unroll 1
    for (int g = blockIdx.x * LT_NC + threadIdx.x; g < P.n * per; g += gridDim.x * LT_NC) {
        const int s = g / per, r = g - s * per, lv = r / V4, i4 = r - lv * V4;
        const uint64_t seed = P.seeds ? P.seeds[s] : 0, frame = P.frames ? P.frames[s] : 0;
        uint32_t x[4];
        dd_noise_words(seed, frame, lv, (uint32_t)i4, x);
        u64 *dst = P.noise + ((size_t)s * P.Q + lv) * P.V + 4 * i4;
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (4 * i4 + e < P.V) lt_st(dst + e, dd_gumbel_word(x[e]), E);
    }
}

/* ---- the kernel ------------------------------------------------------------------------------------------ */

/* The linears' weight modes a kernel instance holds code for: all (a model that mixes them, f32 and small-group
 * quantized weights), or the one mode of every linear of the plan. One mode per instance keeps the other
 * instantiations of lt_linear out of the kernel's register allocation and image (sm_90, bf16: 8 bytes of spills
 * instead of 148, a 192 KB image instead of 718 KB). */
enum { LT_WALL = 0, LT_WBF16, LT_WF16, LT_WQ8, LT_WQ4, LT_NWSEL };

template <int WSEL> __device__ __forceinline__ int lt_run_linear(const lt_step st, int l, int v) {
    if (WSEL == LT_WBF16) return lt_linear<DD_BF16, WM_BF16>(st, l, v);
    if (WSEL == LT_WF16) return lt_linear<DD_F16, WM_F16>(st, l, v);
    if (WSEL == LT_WQ8) return lt_linear<DD_Q8, WM_QINT>(st, l, v);
    if (WSEL == LT_WQ4) return lt_linear<DD_Q4, WM_QINT>(st, l, v);
    const lt_op &op = LT_OP(st.op);
    switch (op.w.wm) {
    case WM_BF16: return lt_linear<DD_BF16, WM_BF16>(st, l, v);
    case WM_F16: return lt_linear<DD_F16, WM_F16>(st, l, v);
    case WM_F32: return lt_linear<DD_F32, WM_F32>(st, l, v);
    case WM_QINT:
        if (op.w.type == DD_Q8) return lt_linear<DD_Q8, WM_QINT>(st, l, v);
        return lt_linear<DD_Q4, WM_QINT>(st, l, v);
    default:
        if (op.w.type == DD_Q8) return lt_linear<DD_Q8, WM_QDEQ>(st, l, v);
        return lt_linear<DD_Q4, WM_QDEQ>(st, l, v);
    }
    return v; /* not reached */
}

template <int WSEL>
__global__ void __launch_bounds__(LT_THREADS, 1) lt_kernel(const __grid_constant__ lt_params Pk) {
    if (threadIdx.x == 0) lt_P = Pk, lt_P.ebase = *Pk.epoch;
    const lt_params &P = Pk;
    const lt_sm me = P.sms[blockIdx.x];
    const int np = me.s1 - me.s0, nt = me.t1 - me.t0, sw = (np + nt) * (int)(sizeof(lt_step) / 4);
    if (threadIdx.x == 0) lt_pcs_off = (sw * 4 + 7) & ~7, lt_pcs_p0 = me.p0;
    lt_smem S = lt_S(); /* pcs is not read before the barrier below */
    if (threadIdx.x == 0) {
        for (int i = 0; i < LT_NSLOT; i++) {
            cu_mbar_init(&S.full[i], 1);
            cu_mbar_init(&S.empty[i], LT_NC); /* every compute thread arrives */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= LT_NC) {
        if (threadIdx.x == LT_NC) lt_producer(me);
        return;
    }
    /* the op table and this SM's steps into shared memory (one round trip; read at every step after) */
    lt_op *ops = (lt_op *)S.ops;
    lt_step *steps = (lt_step *)S.steps;
    {
        const int ow = P.nops * (int)(sizeof(lt_op) / 4), sw1 = np * (int)(sizeof(lt_step) / 4);
        for (int i = threadIdx.x; i < ow + sw; i += LT_NC) {
            if (i < ow) ((int *)ops)[i] = ((const int *)P.ops)[i];
            else if (i - ow < sw1) ((int *)steps)[i - ow] = ((const int *)(P.steps + me.s0))[i - ow];
            else ((int *)steps)[i - ow] = ((const int *)(P.steps + me.t0))[i - ow - sw1];
        }
        int2 *pcs = (int2 *)(S.steps + ((sw * 4 + 7) & ~7));
        for (int i = threadIdx.x; i < me.q1 - me.p0; i += LT_NC) pcs[i] = make_int2(P.pieces[me.p0 + i].c0, P.pieces[me.p0 + i].c1);
        lt_bar::sync();
    }
    lt_noise();
    int v = 0; /* weight pieces consumed */
#ifdef LT_TIMELINE /* dev/cuda/lat_timeline.cu: each step's end time, per SM */
    int tk = 0;
    if (lt_tl && threadIdx.x == 0) {
        u64 *e = lt_tl + (size_t)blockIdx.x * LT_TL_MAX * LT_TL_W;
        e[0] = cu_gtimer(), e[1] = ~0ull, e[2] = clock64();
    }
    tk++;
#endif
    for (int pass = 0; pass <= P.Q - P.l0; pass++) { /* the prelude (at pass l0), then passes l0 .. Q-1 */
        const int l = pass == 0 ? P.l0 : P.l0 + pass - 1;
        const int a = pass == 0 ? 0 : np, b = pass == 0 ? np : np + me.t1 - me.t0;
        for (int si = a; si < b; si++) {
            const lt_step st = steps[si];
            const lt_op &op = ops[st.op];
#ifdef LT_TIMELINE
            if (threadIdx.x == 0)
                for (int i = 0; i < 12; i++) lt_ph[i] = i ? 0 : clock64();
#endif
            if (op.kind == LT_LIN) v = lt_run_linear<WSEL>(st, l, v);
            else if (op.kind == LT_ATT) lt_attend(st, l);
            else lt_sample(st, l);
#ifdef LT_TIMELINE
            if (lt_tl && threadIdx.x == 0 && tk < LT_TL_MAX - 1) {
                u64 *e = lt_tl + ((size_t)blockIdx.x * LT_TL_MAX + tk) * LT_TL_W;
                e[0] = cu_gtimer();
                e[1] = (u64)pass << 32 | (unsigned)st.op;
                e[2] = lt_marks[0];
                e[3] = lt_marks[1];
                lt_ph[9] = clock64();
                for (int i = 0; i < 12; i++) e[4 + i] = (u64)lt_ph[i];
            }
            tk++;
#endif
        }
    }
#ifdef LT_TIMELINE
    if (lt_tl && threadIdx.x == 0) {
        u64 *e = lt_tl + ((size_t)blockIdx.x * LT_TL_MAX + LT_TL_MAX - 1) * LT_TL_W;
        e[2] = cu_gtimer(), e[3] = clock64();
    }
#endif
}

/* ---- host: the plan ---------------------------------------------------------------------------------------- */

static const void *const lt_kernels[LT_NWSEL] = {(const void *)lt_kernel<LT_WALL>, (const void *)lt_kernel<LT_WBF16>,
                                                 (const void *)lt_kernel<LT_WF16>, (const void *)lt_kernel<LT_WQ8>,
                                                 (const void *)lt_kernel<LT_WQ4>};

/* where a K split (fwd) cuts nck chunks: the middle, or past one slab the slab boundary nearest it (the first half
 * hands over its closed slabs' sum; cu_common.cuh's contract) */
static int lt_ksplit_h(int nck) {
    return nck <= CU_SLC ? nck / 2 : std::max(CU_SLC, (nck + CU_SLC) / (2 * CU_SLC) * CU_SLC);
}

/* the instance for a weight mode (LT_WALL where none has its own) */
static int lt_wsel(const cu_mat &w) {
    if (w.wm == WM_BF16) return LT_WBF16;
    if (w.wm == WM_F16) return LT_WF16;
    if (w.wm == WM_QINT) return w.type == DD_Q8 ? LT_WQ8 : LT_WQ4;
    return LT_WALL;
}

struct lt_plan {
    int ok; /* 0 not built yet, 1 does not fit the executor's limits, 2 built */
    void *mem; /* device: ops | steps | pieces | sms */
    const lt_op *ops;
    const lt_step *steps;
    const lt_piece *pieces;
    const lt_sm *sms;
    int nops;
    int wsel; /* the kernel instance (LT_W*): the one weight mode of every linear, else LT_WALL */
};

struct lt_exec {
    cu_state *st;
    const dd_model *m;
    int G;
    u64 *ll;
    size_t ll_words;
    u64 *x0, **qkv, **att, **xa, **ff, **xb, *lg, *lg0, *noise;
    u64 *xg; /* Moshi: the pass's gathered table row (in_proj[l] . h is added to it into x0), else NULL */
    u64 *fw;          /* K split forwarding words: layer li at fw + li fw_stride */
    size_t fw_stride; /* 256 words per m-tile of fc2 */
    int ldx, ldq, lda_, ldf, ldv;
    cu_mat *d_heads; /* device copy of st->heads (level l at l - l0) */
    cu_mat *d_pp;    /* Moshi: device slices [Q] of in_proj, then of layer li's qkv, wo, fc1, fc2 at
                      * d_pp + (1 + 4 li + k) Q (lt_slices), else NULL */
    unsigned *epoch; /* device: the next launch's ebase */
    u64 timeout_ns;
    double keep_budget; /* bytes of layer weights marked L2-resident */
    lt_plan plan[NPROG][LT_MAX_N + 1];
};

namespace {

struct req {
    int op, U;
    double unit_bytes;
    int kind;
};

/* bytes of chunk c of nmt m-tiles (fragments, and the (s, b) rows of QINT) */
size_t chunk_bytes(const cu_mat &w, int nmt, int c) {
    int kt0 = c * CU_CKT, kt1 = std::min(w.KT, kt0 + CU_CKT);
    size_t b = (size_t)nmt * (kt1 - kt0) * w.tile_bytes;
    if (w.wm == WM_QINT) b += (size_t)nmt * ((std::min(kt1 * 16, w.K) - kt0 * 16) / w.group) * 16 * w.sb_bytes;
    return b;
}

struct builder {
    lt_exec *x;
    int G, n, variant;
    std::vector<lt_op> ops;
    std::vector<std::vector<lt_step>> pre, pass;
    std::vector<std::vector<lt_piece>> ppre, ppass;
    std::vector<double> load;
    int fail = 0;
    int R = 0; /* the last R SMs run no linear units: attention items and sampling */

    /* units of op `o` (U of them, each unit_bytes) over the G - R SMs that run linears: U / (G - R) each, the
     * remainder to the least loaded; contiguous ranges in SM order. Returns [G][2]. */
    std::vector<std::pair<int, int>> split(int U, double unit_bytes) {
        const int GL = G - R;
        std::vector<int> cnt(G, 0), order(GL);
        for (int i = 0; i < GL; i++) cnt[i] = U / GL, order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] < load[b]; });
        for (int i = 0; i < U % GL; i++) cnt[order[i]]++;
        std::vector<std::pair<int, int>> r(G);
        int cur = 0;
        for (int i = 0; i < G; i++) {
            r[i] = {cur, cur + cnt[i]};
            cur += cnt[i];
            load[i] += cnt[i] * unit_bytes;
        }
        return r;
    }

    /* K split: each of the U units over two of the G - R SMs that run linears (the least loaded), the first half of
     * its chunks on one (fwd 1) and the second on the other (fwd 2). Returns [G] of (unit, fwd), unit -1: none. */
    std::vector<std::pair<int, int>> split_halves(int U, double unit_bytes) {
        const int GL = G - R;
        std::vector<int> order(GL);
        for (int i = 0; i < GL; i++) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] < load[b]; });
        std::vector<std::pair<int, int>> r(G, {-1, 0});
        for (int i = 0; i < 2 * U; i++) {
            r[order[i]] = {i / 2, 1 + (i & 1)};
            load[order[i]] += unit_bytes / 2;
        }
        return r;
    }

    /* weight pieces of a linear step of units [u0, u1); T tokens at most */
    void pieces(const lt_op &op, const cu_mat &w, int u0, int u1, int T, std::vector<lt_piece> &out, int step,
                int kc0 = 0, int kc1 = -1) {
        const int nmt = (u1 - u0) * (w.pair ? 2 : 1), NC = kc1 >= 0 ? kc1 : (w.KT + CU_CKT - 1) / CU_CKT, NTG = (T + 7) / 8;
        /* past one slab acc's halves: the open sums, and the closed sums (a K split's second half: its slabs' sums) */
        const int nkeep = w.KT <= CU_SLC * CU_CKT ? 0 : kc0 > 0 ? (NC - kc0 + CU_SLC - 1) / CU_SLC : 1;
        if ((nkeep ? nkeep * 2 : 1) * nmt * NTG > LT_ACC_SLOTS || (w.wm == WM_QINT && (CU_CKT * 16) % w.group) ||
            (op.res && T * (u1 - u0) * 16 > LT_RES_FLOATS)) {
            fail = 1;
            return;
        }
        if (op.whole) {
            if ((size_t)T * cu_act_stride(w.KT) * 4 > LT_ACT_BYTES || (w.wm == WM_QINT && T * w.NG > LT_ASUM_FLOATS)) {
                fail = 1;
                return;
            }
        }
        for (int c0 = kc0; c0 < NC;) {
            int c1 = c0;
            size_t bytes = 0;
            while (c1 < NC) {
                size_t nb = bytes + chunk_bytes(w, nmt, c1);
                int nc = c1 + 1 - c0, kt1 = std::min(w.KT, (c1 + 1) * CU_CKT), nkt = kt1 - c0 * CU_CKT;
                bool ok = nb <= LT_PIECE_MAX && nmt * nc * NTG <= LT_PART_SLOTS;
                if (!op.whole) {
                    ok = ok && (size_t)T * cu_act_stride(nkt) * 4 <= LT_ACT_BYTES;
                    if (w.wm == WM_QINT) ok = ok && T * ((std::min(kt1 * 16, w.K) - c0 * CU_CKT * 16) / w.group) <= LT_ASUM_FLOATS;
                }
                if (!ok) break;
                bytes = nb;
                c1++;
            }
            if (c1 == c0) {
                fail = 1;
                return;
            }
            lt_piece pc;
            memset(&pc, 0, sizeof pc);
            pc.step = step, pc.c0 = c0, pc.c1 = c1, pc.bytes = (int)bytes;
            const int mt0 = u0 * (w.pair ? 2 : 1), kt0 = c0 * CU_CKT, kt1 = std::min(w.KT, c1 * CU_CKT);
            pc.nmt = nmt;
            pc.fbytes = (kt1 - kt0) * w.tile_bytes;
            pc.fstride = (long long)w.KT * w.tile_bytes;
            size_t fo = ((size_t)mt0 * w.KT + kt0) * w.tile_bytes, so = 0;
            if (w.wm == WM_QINT) {
                const int g0 = kt0 * 16 / w.group, g1 = std::min(kt1 * 16, w.K) / w.group;
                pc.sbytes = (g1 - g0) * 16 * w.sb_bytes;
                pc.sstride = (long long)w.NG * 16 * w.sb_bytes;
                so = ((size_t)mt0 * w.NG + g0) * 16 * w.sb_bytes;
            }
            pc.keep = op.keep;
            pc.wl = op.wl;
            pc.frag = pc.wl ? (const uint8_t *)(uintptr_t)fo : w.frag + fo;
            pc.sb = pc.wl ? (const uint8_t *)(uintptr_t)so : w.sb ? w.sb + so : NULL;
            out.push_back(pc);
            c0 = c1;
        }
    }

};

lt_op lin_op(const cu_mat &w, const float *bias, int norm, const float *nw, const float *nb, float eps, int act,
             const void *in, int ldin, int in_plain, u64 *out, int ldo) {
    lt_op o;
    memset(&o, 0, sizeof o);
    o.kind = LT_LIN;
    o.w = w;
    o.bias = bias;
    o.norm = norm;
    o.nw = nw;
    o.nb = norm == DD_NORM_LAYER ? nb : NULL;
    o.eps = eps;
    o.act = act;
    o.in = in;
    o.ldin = ldin;
    o.in_plain = in_plain;
    o.out = out;
    o.ldo = ldo;
    o.out_mul = 1;
    o.whole = norm != DD_NORM_NONE;
    return o;
}

} // namespace

static size_t mat_bytes(const cu_mat &w) {
    return (size_t)w.MT * w.KT * w.tile_bytes + (w.sb ? (size_t)w.MT * w.NG * 16 * w.sb_bytes : 0);
}

/* Moshi: the device slices of matrix k (0 qkv, 1 out, 2 fc1, 3 fc2) of layer li, or of in_proj (k < 0); NULL for a
 * model without per-position weights */
static const cu_mat *lt_slices(const lt_exec *x, int k, int li) {
    if (!x->d_pp) return NULL;
    return x->d_pp + (size_t)(k < 0 ? 0 : 1 + 4 * li + k) * x->m->cfg.levels;
}

/* ---- host: the op list, translated from the frame plan -------------------------------------------------------- */

/* The op list of a frame is the frame plan of its kind (plan.h), translated (lt_translate) into a prelude and the
 * one pass template that runs at every level:
 *   - the prelude is the plan's prelude with its in(h) first (the op that fills position 0 of pass 1 from h), so
 *     that head0 overlaps it; per-position models (Moshi) have none in the plan: theirs is the gather of the text
 *     token's row that the plan's first pass starts with;
 *   - the template is the plan's pass 1 (two positions: a layer op's tokens are n P at run time, the head reads
 *     row s P + P - 1); per-position models: pass 2 (position 1, the first whose input row the previous pass's
 *     sampler gathers and whose head runs in every kind: the template runs position 0's head in every kind too,
 *     writing level 0 of st->logits in a score). The later passes are the template with their pass index l
 *     (epochs, slices, positions, the level read and written, no gather after the last level: all at run time);
 *     lt_translate checks that each of them translates to the template's very bytes;
 *   - buffers (lt_rows): an LL word is written once per pass, so each write of a plan buffer in a pass gets words
 *     of its own: X's versions are x0, the pass input (Moshi: xg, the gathered row, then x0 = xg + in_proj[l] . h),
 *     then xa[i] and xb[i] after layer i's two residual linears (a residual linear reads the current version as its
 *     residual and writes the next); every other write of X (in(h), the gathers) is to the pass input; the i-th
 *     write of QKV, ATT, FF goes to qkv[i], att[i], ff[i], and a read takes the latest; LOGITS0 / LOGITS are lg0 /
 *     lg where an op reads them (a SAMPLE; the template's sampler in every kind), and the caller's logits (outf,
 *     level l of the template at column block l - l0) in a score; HIDDEN is read as plain floats;
 *   - an op that touches one row per stream (from the hidden states, to the logits) has tok_n; one that reads one
 *     row per stream of X (the head) reads the last position (in_last); rows first..first+n-1 of span written as
 *     row t out_mul + out_off;
 *   - a LINEAR applies the device matrix it names (cu_plan_mat, as the frame programs); a matrix that changes from
 *     pass to pass (the heads; Moshi: every linear) is named by its first pass's slice (w) and its slices (wl:
 *     d_heads, lt_slices), pass l taking slice l - l0; fc2 forwards its K split's partial sums (fwd, per layer);
 *   - a level's code (the plan's SAMPLE, its CODE_C0, or in a score the caller's) and the GATHER of that level's
 *     row are one sampler op (as in the frame programs); the template's is its last op; Moshi's c0 given is its
 *     code0; CSM (DD_IN_PROJ_PER_PASS): st->table is in(table) (backend.cu), so gathers into XIN are gathers into
 *     X, the GATHER of h into XIN is in_proj applied to h, and the LINEAR from XIN is dropped.
 * What does not fit this (ADD_POS, a per-position model with q/k norms or whose slices' norms or biases differ: an
 * op has one of each for every pass, any other plan shape) leaves the frame to the frame kernel (lt_plan.ok 1). */

namespace {

enum { LT_RD = 0, LT_WR = 1, LT_WR_IN = 2 }; /* lt_rows: read, write (X: the next version), write the pass input */

struct lt_tr {
    lt_exec *x;
    const dd_plan *fp;
    std::vector<lt_op> *ops;
    std::vector<u64 *> xv; /* X's versions in a pass: (Moshi: xg), x0, xa[0], xb[0], xa[1], ... */
    int xcur;              /* the current one */
    int nwr[DD_BUF_N];     /* writes of QKV, ATT, FF in the pass so far */
    int given0;            /* a CODE_C0 was met: level 0's code is c0 */
    int smp0;              /* a SAMPLE reads LOGITS0 */
    int fail;
};

/* The LL words of a plan buffer as an op reads (LT_RD) or writes it, and their row stride in words (*ld); the
 * bindings of the comment above. NULL (and fail) for a buffer not bound so. */
u64 *lt_rows(lt_tr *t, int buf, int mode, int *ld) {
    lt_exec *x = t->x;
    const int L = x->m->cfg.layers;
    switch (buf) {
    case DD_BUF_X:
    case DD_BUF_XIN: /* CSM: in(table) rows into X rows */
        *ld = x->ldx;
        if (mode == LT_WR) {
            if (t->xcur + 1 >= (int)t->xv.size()) break;
            return t->xv[++t->xcur];
        }
        return t->xv[mode == LT_WR_IN ? 0 : t->xcur];
    case DD_BUF_QKV:
    case DD_BUF_ATT:
    case DD_BUF_FF: {
        u64 **a = buf == DD_BUF_QKV ? x->qkv : buf == DD_BUF_ATT ? x->att : x->ff;
        *ld = buf == DD_BUF_QKV ? x->ldq : buf == DD_BUF_ATT ? x->lda_ : x->ldf;
        const int i = t->nwr[buf] + (mode != LT_RD) - 1;
        if (i < 0 || i >= L) break;
        t->nwr[buf] = i + 1;
        return a[i];
    }
    case DD_BUF_LOGITS0: *ld = x->ldv; return x->lg0;
    case DD_BUF_LOGITS: *ld = x->ldv; return x->lg;
    default: break;
    }
    t->fail = 1;
    return NULL;
}

/* out_mul / out_off of written rows r */
void lt_out_rows(lt_op &o, dd_plan_rows r) {
    o.out_mul = r.n == r.span ? 1 : r.span;
    o.out_off = r.n == r.span ? 0 : r.first;
}

/* 1 when layer entries a and b have the same vectors (norm weights and biases, bit for bit) where a linear of matrix
 * mat reads them */
int lt_same_vectors(const dd_model *m, int mat, int a, int b) {
    const dd_config *c = &m->cfg;
    const dd_layer *u = &m->layer[a], *v = &m->layer[b];
    const int D = c->dim, F = c->ffn_dim, nq = c->heads * c->head_dim, nk = c->kv_heads * c->head_dim;
    auto same = [](const float *p, const float *q, int n) { return p == q || (p && q && !memcmp(p, q, (size_t)n * 4)); };
    switch (mat) {
    case DD_MAT_QKV:
        return same(u->norm1_w, v->norm1_w, D) && same(u->norm1_b, v->norm1_b, D) && same(u->bq, v->bq, nq) &&
               same(u->bk, v->bk, nk) && same(u->bv, v->bv, nk);
    case DD_MAT_OUT: return same(u->bo, v->bo, D);
    case DD_MAT_FC1: return same(u->norm2_w, v->norm2_w, D) && same(u->norm2_b, v->norm2_b, D) && same(u->b1, v->b1, F);
    case DD_MAT_FC2: return same(u->b2, v->b2, D);
    default: return 1;
    }
}

void lt_linear(lt_tr *t, const dd_plan_linear &L) {
    lt_exec *x = t->x;
    cu_state *st = x->st;
    const dd_model *m = x->m;
    const dd_config *c = &m->cfg;
    const int pp = c->per_position, score = t->fp->kind == DD_PLAN_SCORE || t->fp->kind == DD_PLAN_SCORE_L0;
    /* a matrix that changes from pass to pass: its first pass's slice */
    const int e = L.mat == DD_MAT_HEAD || (pp && L.mat == DD_MAT_IN_PROJ) ? 0 : pp ? L.entry % c->layers : L.entry;
    /* ... and the vectors of that slice in every pass (below: nw, nb, bias): a pass whose own differ is not run here
     * (Kyutai's MLX q8/q4 checkpoints: each slice has its own RMSNorm weights; run with slice 0's, the latency
     * executor's logits of levels 1 .. Q-1 were wrong) */
    if (pp && e != L.entry && !lt_same_vectors(m, L.mat, L.entry, e)) t->fail = 1;
    const int k = L.mat == DD_MAT_QKV   ? 0 /* lt_slices' matrix */
                  : L.mat == DD_MAT_OUT ? 1
                  : L.mat == DD_MAT_FC1 ? 2
                  : L.mat == DD_MAT_FC2 ? 3
                                        : -1;
    const cu_mat *w;
    const float *bias, *nw, *nb;
    cu_plan_mat(st, L.mat, e, &w, &bias, &nw, &nb);
    const int hid = L.x.buf == DD_BUF_HIDDEN, lg = L.y.buf == DD_BUF_LOGITS0 || L.y.buf == DD_BUF_LOGITS;
    int ldin = c->input_dim, ldo = 0, ldr = 0;
    const void *in = hid ? (const void *)st->d_in : lt_rows(t, L.x.buf, LT_RD, &ldin);
    const u64 *res = L.residual ? lt_rows(t, L.y.buf, LT_RD, &ldr) : NULL;
    u64 *out = lt_rows(t, L.y.buf, L.y.buf == DD_BUF_X && !L.residual ? LT_WR_IN : LT_WR, &ldo);
    if (L.y.buf == DD_BUF_LOGITS0 && !t->smp0) out = NULL; /* not read */
    lt_op o = lin_op(*w, bias, L.norm, nw, nb, c->norm_eps, L.act, in, ldin, hid, out, ldo);
    o.tok_n = hid || lg;
    o.in_last = o.tok_n && L.x.buf == DD_BUF_X;
    if (o.in_last && L.x.first != L.x.span - 1) t->fail = 1;
    lt_out_rows(o, L.y);
    o.add = L.add ? st->pos + (L.add - m->pos) : NULL;
    o.res = res;
    o.ldr = ldr;
    o.wl = L.mat == DD_MAT_HEAD ? x->d_heads : L.mat == DD_MAT_HEAD0 ? NULL : lt_slices(x, k, e % c->layers);
    if (L.mat == DD_MAT_FC2) o.fwd = x->fw + (size_t)(t->nwr[DD_BUF_FF] - 1) * x->fw_stride; /* ff[i]: layer i's */
    if (score && L.y.buf == DD_BUF_LOGITS0) {
        o.outf = st->logits0;
        o.ldof = c->codebook_size;
    } else if (score && L.y.buf == DD_BUF_LOGITS) {
        o.outf = st->logits;
        o.ldof = (pp ? c->levels : c->levels - 1) * c->codebook_size;
        o.outf_lvl = c->codebook_size;
    }
    t->ops->push_back(o);
}

void lt_attend(lt_tr *t, const dd_plan_attend &A) {
    lt_exec *x = t->x;
    cu_state *st = x->st;
    const dd_config *c = &x->m->cfg;
    const size_t kvw = (size_t)A.KVH * A.HD, Q = c->levels;
    if (c->per_position && A.qk_norm) t->fail = 1; /* the op has one q/k norm for every pass */
    lt_op a;
    memset(&a, 0, sizeof a);
    a.kind = LT_ATT;
    a.in = lt_rows(t, A.qkv.buf, LT_RD, &a.ldin);
    a.out = lt_rows(t, A.out.buf, LT_WR, &a.ldo);
    a.kc = st->kc + (size_t)A.layer * st->B * Q * kvw;
    a.vc = st->vc + (size_t)A.layer * st->B * Q * kvw;
    a.cstride = Q * kvw;
    a.H = A.H;
    a.KVH = A.KVH;
    a.HD = A.HD;
    a.rope = A.rope ? st->rope : NULL;
    a.qn = A.qk_norm ? st->qn[A.entry] : NULL;
    a.kn = A.qk_norm ? st->kn[A.entry] : NULL;
    a.qk_eps = c->norm_eps;
    t->ops->push_back(a);
}

/* The sampler op of `level` (-1: the pass's): the code from logits (forced 0) or given (forced 1: code_in, ldi),
 * written to code_out when not NULL; then the row `level` of the code table (+ pos[level + 1]) gathered into rows
 * dst of X's pass input, for the next pass (the template's: at every level but the last) */
lt_op lt_smp(lt_tr *t, int level, const u64 *logits, int forced, const int32_t *code_in, int ldi, int32_t *code_out,
             dd_plan_rows dst) {
    lt_exec *x = t->x;
    cu_state *st = x->st;
    const dd_config *c = &x->m->cfg;
    lt_op o;
    memset(&o, 0, sizeof o);
    o.kind = LT_SMP;
    o.level = level;
    o.in = logits;
    o.ldin = x->ldv;
    o.V = c->codebook_size;
    o.forced = forced;
    o.wait_logits = forced && logits != NULL;
    o.code_in = code_in;
    o.ldi = ldi;
    o.code_out = code_out;
    o.ldco = c->levels;
    o.table = st->table;
    o.table_ld = x->m->embed_rows;
    o.eo = 1;
    o.pos = st->pos ? st->pos + c->dim : NULL;
    o.pos_lvl = c->dim;
    o.out = lt_rows(t, DD_BUF_X, LT_WR_IN, &o.ldo);
    lt_out_rows(o, dst);
    o.D = c->dim;
    o.Q = c->levels;
    return o;
}

/* 1 when the plan's gather of a level's embedding is the one the sampler op makes (level table, positions
 * level + 1 of a model with learned positions) */
int lt_gather_ok(const lt_tr *t, const dd_plan_gather &g) {
    return g.src == DD_GATHER_EMBED && (g.dst.buf == DD_BUF_X || g.dst.buf == DD_BUF_XIN) && g.dst.n == 1 &&
           g.pos == (t->x->st->pos ? g.level + 1 : -1);
}

/* CSM's LINEAR from XIN (in_proj of the rows its gathers wrote: done by them): 1 when op is one */
int lt_xin_linear(const dd_plan *fp, const dd_plan_linear &L) {
    return L.x.buf == DD_BUF_XIN && fp->in == DD_IN_PROJ_PER_PASS && L.mat == DD_MAT_IN_PROJ && L.y.buf == DD_BUF_X &&
           L.y.span == L.x.span && L.y.first == L.x.first && L.y.n == L.x.n;
}

/* 1 for the prelude's in(h) */
int lt_is_in_h(const dd_plan_op &o) {
    return o.pass == 0 && ((o.kind == DD_OP_GATHER && o.gat.src == DD_GATHER_HIDDEN) ||
                           (o.kind == DD_OP_LINEAR && o.lin.x.buf == DD_BUF_HIDDEN && o.lin.y.buf == DD_BUF_X));
}

/* The prelude's ops in order: the plan's pass 0 with in(h) first; per-position models the plan's first pass, of
 * which the text row's gather is taken and the rest (but its CODE_C0: c0 given) left to the template */
void lt_prelude(lt_tr *t, std::vector<int> &pre) {
    lt_exec *x = t->x;
    cu_state *st = x->st;
    const dd_model *m = x->m;
    const dd_plan *fp = t->fp;
    const int pp = fp->in == DD_IN_PER_POSITION, Q = m->cfg.levels, D = m->cfg.dim, I = m->cfg.input_dim;
    int32_t *codes_out = (int32_t *)(st->d_out + 8);
    const int32_t *codes_in = (const int32_t *)(st->d_in + st->off_codes_in);
    const int32_t *c0in = (const int32_t *)(st->d_in + st->off_c0);
    std::vector<int> order;
    for (int i = 0; i < fp->n; i++)
        if (fp->op[i].pass == (pp ? 1 : 0) && lt_is_in_h(fp->op[i])) order.push_back(i);
    for (int i = 0; i < fp->n; i++)
        if (fp->op[i].pass == (pp ? 1 : 0) && !lt_is_in_h(fp->op[i])) order.push_back(i);
    t->xcur = 0;
    for (size_t k = 0; k < order.size() && !t->fail; k++) {
        const dd_plan_op &o = fp->op[order[k]];
        const dd_plan_op *nx = k + 1 < order.size() ? &fp->op[order[k + 1]] : NULL;
        const size_t n0 = t->ops->size();
        if (pp) { /* position 0's pass: its text row, and whether c0 is given */
            if (o.kind == DD_OP_CODE_C0) t->given0 = 1;
            if (o.kind != DD_OP_GATHER || o.gat.src != DD_GATHER_TEXT) continue;
            lt_op s = lt_smp(t, 0, NULL, 1, (const int32_t *)(st->d_in + st->off_text), 1, NULL, o.gat.dst);
            s.table = st->text;
            s.table_ld = 0;
            s.eo = 0; /* pass 0's own input row */
            if (o.gat.pos >= 0) t->fail = 1;
            t->ops->push_back(s);
        } else if (o.kind == DD_OP_LINEAR) {
            if (o.lin.x.buf != DD_BUF_XIN) lt_linear(t, o.lin);
            else if (!lt_xin_linear(fp, o.lin)) t->fail = 1;
        } else if (o.kind == DD_OP_SAMPLE) { /* level 0 from head0's logits, and its row */
            const int g = nx && nx->kind == DD_OP_GATHER && nx->gat.level == o.smp.level && lt_gather_ok(t, nx->gat);
            int ld;
            if (!g || o.smp.logits.buf != DD_BUF_LOGITS0) t->fail = 1;
            else t->ops->push_back(lt_smp(t, nx->gat.level, lt_rows(t, DD_BUF_LOGITS0, LT_RD, &ld), 0, NULL, 0,
                                          codes_out, nx->gat.dst));
            k += g;
        } else if (o.kind == DD_OP_CODE_C0) {
            t->given0 = 1;
        } else if (o.kind == DD_OP_GATHER && o.gat.src == DD_GATHER_EMBED) { /* level 0 given: c0, or the caller's */
            if (!lt_gather_ok(t, o.gat)) t->fail = 1;
            else if (t->given0) t->ops->push_back(lt_smp(t, o.gat.level, NULL, 1, c0in, 1, codes_out, o.gat.dst));
            else t->ops->push_back(lt_smp(t, o.gat.level, NULL, 1, codes_in + o.gat.level, Q, NULL, o.gat.dst));
        } else if (o.kind == DD_OP_GATHER && o.gat.src == DD_GATHER_HIDDEN && o.gat.dst.buf == DD_BUF_XIN) {
            dd_plan_linear L; /* CSM: in(h) into the X rows */
            memset(&L, 0, sizeof L);
            L.y = o.gat.dst;
            L.y.buf = DD_BUF_X;
            L.x = (dd_plan_rows){DD_BUF_HIDDEN, 1, 0, 1, 0};
            L.mat = DD_MAT_IN_PROJ;
            L.add = o.gat.pos >= 0 ? m->pos + (size_t)o.gat.pos * D : NULL;
            lt_linear(t, L);
        } else if (o.kind == DD_OP_GATHER && o.gat.src == DD_GATHER_HIDDEN) { /* h copied: row = stream */
            lt_op s = lt_smp(t, 0, NULL, 1, NULL, 0, NULL, o.gat.dst);
            s.code_is_stream = 1;
            memset(&s.table, 0, sizeof s.table);
            s.table.type = DD_F32;
            s.table.rows = st->B;
            s.table.cols = I;
            s.table.data = st->d_in;
            s.table.pitch = (size_t)I * 4;
            s.table_ld = 0;
            s.pos = o.gat.pos >= 0 ? st->pos + (size_t)o.gat.pos * D : NULL;
            s.pos_lvl = 0;
            t->ops->push_back(s);
        } else {
            t->fail = 1; /* ADD_POS, ATTEND */
        }
        for (size_t i = n0; i < t->ops->size(); i++) pre.push_back((int)i);
    }
}

/* The ops of the plan's pass tp as the template's: its ops, then the sampler op */
void lt_pass(lt_tr *t, int tp, std::vector<int> &pass) {
    lt_exec *x = t->x;
    cu_state *st = x->st;
    const dd_plan *fp = t->fp;
    const int pp = fp->in == DD_IN_PER_POSITION, Q = x->m->cfg.levels;
    const size_t n0 = t->ops->size();
    const dd_plan_sample *smp = NULL;
    const dd_plan_gather *g = NULL;
    t->xcur = 0;
    memset(t->nwr, 0, sizeof t->nwr);
    for (int i = 0; i < fp->n && !t->fail; i++) {
        const dd_plan_op &o = fp->op[i];
        if (o.pass != tp) continue;
        switch (o.kind) {
        case DD_OP_LINEAR:
            if (o.lin.x.buf != DD_BUF_XIN) lt_linear(t, o.lin);
            else if (!lt_xin_linear(fp, o.lin)) t->fail = 1;
            break;
        case DD_OP_ATTEND: lt_attend(t, o.att); break;
        case DD_OP_SAMPLE: /* the pass's level from the head's logits */
            if (smp || o.smp.logits.buf != DD_BUF_LOGITS) t->fail = 1;
            smp = &o.smp;
            break;
        case DD_OP_GATHER: /* the row the pass's sampler gathers (Moshi: the previous pass's, into xg) */
            if (g || !lt_gather_ok(t, o.gat) || o.gat.level != (pp ? tp - 2 : tp)) t->fail = 1; /* level l's */
            g = &o.gat;
            break;
        default: t->fail = 1; /* CODE_C0, ADD_POS */
        }
    }
    int ld;
    const u64 *lg = lt_rows(t, DD_BUF_LOGITS, LT_RD, &ld);
    const dd_plan_rows dst = g ? g->dst : (dd_plan_rows){DD_BUF_X, 1, 0, 1, 0};
    lt_op s = smp ? lt_smp(t, -1, lg, 0, NULL, 0, (int32_t *)(st->d_out + 8), dst)
                  : lt_smp(t, -1, lg, 1, (const int32_t *)(st->d_in + st->off_codes_in), Q, NULL, dst);
    if (pp && t->given0) s.code0 = (const int32_t *)(st->d_in + st->off_c0);
    t->ops->push_back(s);
    for (size_t i = n0; i < t->ops->size(); i++) pass.push_back((int)i);
}

/* The op list of the frame plan fp (the comment above): ops, and the indices of the prelude's and the template's;
 * 0 when fp has a shape the executor does not run */
int lt_translate(lt_exec *x, const dd_plan *fp, std::vector<lt_op> &ops, std::vector<int> &pre,
                 std::vector<int> &pass) {
    lt_tr t;
    t.x = x;
    t.fp = fp;
    t.ops = &ops;
    t.xcur = 0;
    memset(t.nwr, 0, sizeof t.nwr);
    t.given0 = 0;
    t.smp0 = 0;
    t.fail = 0;
    for (int i = 0; i < fp->n; i++)
        t.smp0 |= fp->op[i].kind == DD_OP_SAMPLE && fp->op[i].smp.logits.buf == DD_BUF_LOGITS0;
    if (fp->in == DD_IN_PER_POSITION) t.xv.push_back(x->xg);
    t.xv.push_back(x->x0);
    for (int li = 0; li < x->m->cfg.layers; li++) {
        t.xv.push_back(x->xa[li]);
        t.xv.push_back(x->xb[li]);
    }
    lt_prelude(&t, pre);
    const int pp = fp->in == DD_IN_PER_POSITION, tp = pp ? 2 : 1, last = pp ? x->m->cfg.levels : x->m->cfg.levels - 1;
    if (!t.fail) lt_pass(&t, tp, pass);
    /* every later pass of the plan translates to the template (the comment above): the executor runs it there */
    for (int l = tp + 1; l <= last && !t.fail; l++) {
        std::vector<lt_op> more;
        std::vector<int> idx;
        lt_tr u = t;
        u.ops = &more;
        lt_pass(&u, l, idx);
        t.fail = u.fail || more.size() != pass.size() ||
                 memcmp(more.data(), &ops[pass[0]], more.size() * sizeof(lt_op)) != 0;
    }
    return !t.fail;
}

} // namespace

/* Attention items (stream, kv head) one step runs at once (lt_attend): as many as fit the act area (an item's
 * scratch at most (Q - 1) (2 HD + 2) + 2 G HD + 4 (HD + 1) floats, G q heads a kv head; position 1's pass has two
 * new rows and no cache) and the poll's run table (2 (G + 2) runs an item), and no more q rows (2 G an item) than
 * compute warps; 0: not even one fits */
static int lt_att_grp(const dd_config *c) {
    const int Q = c->levels, HD = c->head_dim, Gq = c->heads / c->kv_heads;
    const size_t fl = (size_t)(Q - 1) * (HD + 1) * 2 + 2 * (size_t)Gq * HD + 4 * (size_t)(HD + 1);
    int grp = (int)std::min<size_t>(LT_ACT_BYTES / (fl * 4), LT_RUNS / (2 * (Gq + 2)));
    if (grp > 1) grp = std::min(grp, std::max(1, LT_NW / (2 * Gq)));
    return grp;
}

/* Build the plan of (variant, n) from the op list of the frame plan fp (of kind variant), with attention and
 * samplers on SMs of their own (role) or not; x->plan[variant][n].ok says whether it fits the executor's limits. */
static dd_status build_plan_role(lt_exec *x, const dd_plan *fp, int variant, int n, int role, dd_error *err) {
    cu_state *st = x->st;
    const dd_config *c = &x->m->cfg;
    const int KV = c->kv_heads, V = c->codebook_size, G = x->G;
    /* Moshi (per-position weights): passes 0 .. Q-1 of one position each, every linear of pass l on slice l (wl);
     * the prelude gathers pass 0's row (text_embed[t]); pass l's input row is in_proj[l] . h + the table row in xg
     * (gathered by the prelude or the previous pass's sampler); no final norm */
    const int pp = c->per_position, Tl = pp ? n : 2 * n; /* tokens of a layer linear, at most */
    lt_plan *pl = &x->plan[variant][n];
    builder b;
    b.x = x;
    b.G = G;
    b.n = n;
    b.variant = variant;
    b.pre.resize(G);
    b.pass.resize(G);
    b.ppre.resize(G);
    b.ppass.resize(G);
    b.load.assign(G, 0.0);
    /* Attention items and samplers on SMs of their own when they fit in a quarter of the SMs: such an SM starts its
     * item as soon as the inputs are published instead of after its own linear units, and runs the same few code
     * paths every pass (H200, GPT dims bf16 B1: attention 5.2 instead of 7.4 us a layer on the critical path, the
     * frame 3% faster; CSM dims 7% faster; docs/cuda_results.md 2026-12-04) */
    /* An SM of its own runs up to `grp` attention items at once (lt_att_grp), and the samplers share the attention
     * SMs (a pass samples after its last attention step): at GPT dims B1 4 reserved SMs instead of 17, so 128 SMs run
     * the linears: fc1's 256 units two to an SM (three on 115), fc2 split over K and the head one unit to an SM */
    const int grp = lt_att_grp(c);
    if (!grp) b.fail = 1;
    b.R = role && grp ? std::max(n, (n * KV + grp - 1) / grp) : 0;
    if (b.R > G / 4) b.R = 0;
    double kept = 0;
    /* ---- the op list: the prelude (context: pass l0) and one pass, from the frame plan ---- */
    std::vector<int> pre_ops, pass_ops;
    if (!lt_translate(x, fp, b.ops, pre_ops, pass_ops)) {
        pl->ok = 1; /* a plan shape this executor does not run: the frame kernel does */
        return DD_OK;
    }
    /* reserved SMs only where they cost no linear an extra unit on its busiest SM (GPT dims: B1 yes, B2-B8 no) */
    for (const lt_op &o : b.ops) {
        const int U = o.kind == LT_LIN ? o.w.MT / (o.w.pair ? 2 : 1) : 0;
        if (b.R && U && (U + G - b.R - 1) / (G - b.R) > (U + G - 1) / G) b.R = 0;
    }
    /* a linear without a norm stages its whole input row at once too when it fits (one poll instead of one per
     * piece): fc2 and out at small batches */
    for (lt_op &o : b.ops) {
        if (o.kind != LT_LIN || o.whole) continue;
        const int T = o.tok_n ? n : Tl;
        if ((size_t)T * cu_act_stride(o.w.KT) * 4 <= LT_ACT_BYTES && (o.w.wm != WM_QINT || T * o.w.NG <= LT_ASUM_FLOATS))
            o.whole = 1;
    }
    /* L2 residency: layer weights in op order until the budget is used; heads and prelude weights stream */
    for (int oi : pass_ops) {
        lt_op &o = b.ops[oi];
        if (o.kind != LT_LIN || o.wl) continue;
        size_t mb = mat_bytes(o.w);
        if (kept + mb <= x->keep_budget) {
            o.keep = 1;
            kept += mb;
        }
    }
    /* ---- assignment: units by weight bytes (largest units first), attention and sampling items on SMs with the
     * least work, then steps in op order ---- */
    auto assign = [&](const std::vector<int> &opl, std::vector<std::vector<lt_step>> &steps,
                      std::vector<std::vector<lt_piece>> &pcs, int T_layer, std::vector<std::vector<lt_step>> *base,
                      std::vector<std::vector<lt_piece>> *pbase) {
        const int nop = (int)opl.size();
        std::vector<std::vector<std::pair<int, int>>> ranges(nop);
        std::vector<int> order;
        for (int k = 0; k < nop; k++)
            if (b.ops[opl[k]].kind == LT_LIN) order.push_back(k);
        auto ubytes = [&](const lt_op &o) {
            const cu_mat &w = o.w;
            return (double)mat_bytes(w) / (w.MT / (w.pair ? 2 : 1));
        };
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int c) { return ubytes(b.ops[opl[a]]) > ubytes(b.ops[opl[c]]); });
        std::vector<std::vector<std::pair<int, int>>> halves(nop);
        for (int k : order) {
            const lt_op &o = b.ops[opl[k]];
            const int U = o.w.MT / (o.w.pair ? 2 : 1), nck = (o.w.KT + CU_CKT - 1) / CU_CKT;
            if (o.fwd && ubytes(o) >= LT_KSPLIT_MIN && nck >= 2 && 2 * U <= G - b.R) {
                halves[k] = b.split_halves(U, ubytes(o));
                ranges[k].assign(G, {0, 0});
                for (int i = 0; i < G; i++)
                    if (halves[k][i].first >= 0) ranges[k][i] = {halves[k][i].first, halves[k][i].first + 1};
                continue;
            }
            ranges[k] = b.split(U, ubytes(o));
        }
        for (int k = 0; k < nop; k++) {
            const lt_op &o = b.ops[opl[k]];
            if (o.kind == LT_LIN) continue;
            const int items = o.kind == LT_ATT ? n * o.KVH : n;
            /* prefer SMs with no units in the next linear (out after attention; nothing after sampling: prefer
             * SMs without head units), then the least loaded */
            std::vector<int> busy(G, 0);
            if (k > 0 && b.ops[opl[k - 1]].kind == LT_LIN)
                for (int i = 0; i < G; i++) busy[i] += ranges[k - 1][i].second > ranges[k - 1][i].first;
            if (k + 1 < nop && b.ops[opl[k + 1]].kind == LT_LIN)
                for (int i = 0; i < G; i++) busy[i] += ranges[k + 1][i].second > ranges[k + 1][i].first;
            std::vector<int> ord(G);
            for (int i = 0; i < G; i++) ord[i] = i;
            std::stable_sort(ord.begin(), ord.end(), [&](int a, int c) {
                return busy[a] != busy[c] ? busy[a] < busy[c] : b.load[a] < b.load[c];
            });
            ranges[k].assign(G, {0, 0});
            if (b.R) { /* sampler i on reserved SM G - 1 - i, attention items [j grp, j grp + grp) on G - 1 - j */
                const int per = o.kind == LT_ATT ? grp : 1;
                for (int j = 0; j * per < items; j++) ranges[k][G - 1 - j] = {j * per, std::min(items, (j + 1) * per)};
                continue;
            }
            /* item i on SM ord[i % G]: contiguous item ranges per SM when items > G */
            std::vector<int> cnt(G, 0);
            for (int i = 0; i < items; i++) cnt[ord[i % G]]++;
            int cur = 0;
            for (int i = 0; i < G; i++) {
                ranges[k][i] = {cur, cur + cnt[i]};
                cur += cnt[i];
            }
        }
        (void)base;
        (void)pbase;
        for (int k = 0; k < nop; k++) {
            const lt_op &o = b.ops[opl[k]];
            for (int i = 0; i < G; i++) {
                auto r = ranges[k][i];
                if (r.second <= r.first) continue;
                lt_step s = {opl[k], r.first, r.second, 0, 0, 0};
                if (o.kind == LT_LIN) {
                    int T = o.tok_n ? n : T_layer;
                    s.pc0 = (int)pcs[i].size();
                    if (!halves[k].empty()) { /* one half of a K-split unit */
                        const int nck = (o.w.KT + CU_CKT - 1) / CU_CKT, h = lt_ksplit_h(nck);
                        s.fwd = halves[k][i].second;
                        b.pieces(o, o.w, r.first, r.second, T, pcs[i], (int)steps[i].size(), s.fwd == 1 ? 0 : h,
                                 s.fwd == 1 ? h : nck);
                    } else {
                        b.pieces(o, o.w, r.first, r.second, T, pcs[i], (int)steps[i].size());
                    }
                    s.pc1 = (int)pcs[i].size();
                }
                steps[i].push_back(s);
            }
        }
    };
    assign(pre_ops, b.pre, b.ppre, n, NULL, NULL);
    assign(pass_ops, b.pass, b.ppass, Tl, NULL, NULL);
    /* the sampler's logits fit the act area (attention's scratch: lt_att_grp) */
    if ((size_t)(V + 4) * 8 > LT_ACT_BYTES || 2 * LT_MAX_N > LT_RUNS) b.fail = 1;
    for (lt_op &o : b.ops)
        if (o.kind == LT_ATT) o.grp = grp;
    if (b.ops.size() * sizeof(lt_op) > LT_OPS_BYTES) b.fail = 1;
    for (int i = 0; i < G; i++)
        if ((b.pre[i].size() + b.pass[i].size()) * sizeof(lt_step) + 8 + (b.ppre[i].size() + b.ppass[i].size()) * 8 >
            LT_STEPS_BYTES)
            b.fail = 1;
    if (b.fail || kept < 0) {
        pl->ok = 1;
        return DD_OK;
    }
    /* flatten: per SM [prelude steps][pass steps], pieces likewise; piece.step and step.pc* made absolute */
    std::vector<lt_step> steps;
    std::vector<lt_piece> pcs;
    std::vector<lt_sm> sms(G);
    for (int i = 0; i < G; i++) {
        for (int part = 0; part < 2; part++) {
            auto &sv = part ? b.pass[i] : b.pre[i];
            auto &pv = part ? b.ppass[i] : b.ppre[i];
            const int sbase = (int)steps.size(), pbase = (int)pcs.size();
            for (auto s : sv) {
                s.pc0 += pbase;
                s.pc1 += pbase;
                steps.push_back(s);
            }
            for (auto q : pv) {
                q.step += sbase;
                pcs.push_back(q);
            }
            if (part) {
                sms[i].t0 = sbase, sms[i].t1 = (int)steps.size(), sms[i].q0 = pbase, sms[i].q1 = (int)pcs.size();
            } else {
                sms[i].s0 = sbase, sms[i].s1 = (int)steps.size(), sms[i].p0 = pbase, sms[i].p1 = (int)pcs.size();
            }
        }
    }
    auto al = [](size_t x) { return (x + 15) & ~(size_t)15; };
    const size_t bo = al(b.ops.size() * sizeof(lt_op)), bs = al(steps.size() * sizeof(lt_step)),
                 bp = al(std::max<size_t>(1, pcs.size()) * sizeof(lt_piece)), bm = sms.size() * sizeof(lt_sm);
    std::vector<uint8_t> blob(bo + bs + bp + bm, 0);
    memcpy(blob.data(), b.ops.data(), b.ops.size() * sizeof(lt_op));
    memcpy(blob.data() + bo, steps.data(), steps.size() * sizeof(lt_step));
    if (!pcs.empty()) memcpy(blob.data() + bo + bs, pcs.data(), pcs.size() * sizeof(lt_piece));
    memcpy(blob.data() + bo + bs + bp, sms.data(), bm);
    void *mem;
    dd_status s = cu_alloc(&mem, blob.size(), &st->allocs, &st->nallocs, err);
    if (s) return s;
    CU_TRY(cudaMemcpy(mem, blob.data(), blob.size(), cudaMemcpyHostToDevice), err, "latency plan upload");
    pl->mem = mem;
    pl->ops = (const lt_op *)mem;
    pl->steps = (const lt_step *)((uint8_t *)mem + bo);
    pl->pieces = (const lt_piece *)((uint8_t *)mem + bo + bs);
    pl->sms = (const lt_sm *)((uint8_t *)mem + bo + bs + bp);
    pl->nops = (int)b.ops.size();
    pl->wsel = -1;
    for (const lt_op &o : b.ops)
        if (o.kind == LT_LIN) pl->wsel = pl->wsel < 0 || pl->wsel == lt_wsel(o.w) ? lt_wsel(o.w) : LT_WALL;
    if (pl->wsel < 0) pl->wsel = LT_WALL;
    pl->ok = 2; /* built */
    return DD_OK;
}

dd_status lt_create(lt_exec **out, cu_state *st, const dd_model *m, dd_error *err) {
    *out = NULL;
    const dd_config *c = &m->cfg;
    int dev = 0, sms = 0, coop = 0, smem = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) || !coop || smem < LT_SMEM) {
        cudaGetLastError();
        return DD_OK;
    }
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (major < 9) return DD_OK; /* bulk copies and mbarrier transaction counts: sm_90 */
    for (int k = 0; k < LT_NWSEL; k++) {
        int per = 0;
        if (cudaFuncSetAttribute(lt_kernels[k], cudaFuncAttributeMaxDynamicSharedMemorySize, LT_SMEM) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, lt_kernels[k], LT_THREADS, LT_SMEM) != cudaSuccess ||
            per < 1) {
            cudaGetLastError();
            return DD_OK;
        }
    }
    if (c->levels > 64 || c->levels < 2) return DD_OK;
    lt_exec *x = (lt_exec *)calloc(1, sizeof *x);
    if (!x) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    x->st = st;
    x->m = m;
    x->G = sms;
    const char *t = getenv("DD_CUDA_TIMEOUT_S"); /* slow instrumented runs (compute-sanitizer); default 10 s */
    double sec = t ? atof(t) : 0;
    x->timeout_ns = (u64)((sec > 0 ? sec : 10.0) * 1e9);
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    x->keep_budget = 0.75 * l2; /* leave room for the streamed weights, activations and the KV cache */
    const int D = c->dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim, V = c->codebook_size,
              L = c->layers, NT = 2 * LT_MAX_N;
    x->ldx = D;
    x->ldq = (H + 2 * KV) * HD;
    x->lda_ = H * HD;
    x->ldf = F;
    x->ldv = V;
    x->qkv = (u64 **)calloc((size_t)L * 5, sizeof(u64 *));
    if (!x->qkv) {
        free(x);
        return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    }
    x->att = x->qkv + L;
    x->xa = x->att + L;
    x->ff = x->xa + L;
    x->xb = x->ff + L;
    *out = x; /* from here lt_free cleans up */
    size_t per_layer = (size_t)NT * (x->ldq + x->lda_ + 2 * x->ldx + x->ldf);
    x->fw_stride = (size_t)((c->dim + 15) / 16) * 256;
    const size_t nxg = c->per_position ? (size_t)NT * x->ldx : 0;
    x->ll_words = (size_t)NT * x->ldx + (size_t)L * per_layer + 2 * (size_t)LT_MAX_N * V +
                  (size_t)LT_MAX_N * c->levels * V + (size_t)L * x->fw_stride + nxg;
    dd_status s;
    void *mem;
    if ((s = cu_alloc(&mem, x->ll_words * 8, &st->allocs, &st->nallocs, err))) return s;
    x->ll = (u64 *)mem;
    CU_TRY(cudaMemset(x->ll, 0, x->ll_words * 8), err, "latency executor buffers");
    if ((s = cu_alloc(&mem, sizeof(unsigned), &st->allocs, &st->nallocs, err))) return s;
    x->epoch = (unsigned *)mem;
    const unsigned e1 = 1;
    CU_TRY(cudaMemcpy(x->epoch, &e1, sizeof e1, cudaMemcpyHostToDevice), err, "latency executor epoch");
    u64 *p = x->ll;
    x->x0 = p;
    p += (size_t)NT * x->ldx;
    for (int li = 0; li < L; li++) {
        x->qkv[li] = p, p += (size_t)NT * x->ldq;
        x->att[li] = p, p += (size_t)NT * x->lda_;
        x->xa[li] = p, p += (size_t)NT * x->ldx;
        x->ff[li] = p, p += (size_t)NT * x->ldf;
        x->xb[li] = p, p += (size_t)NT * x->ldx;
    }
    x->lg = p, p += (size_t)LT_MAX_N * V;
    x->lg0 = p, p += (size_t)LT_MAX_N * V;
    x->fw = p, p += (size_t)L * x->fw_stride;
    x->xg = nxg ? p : NULL, p += nxg;
    x->noise = p;
    const int Q = c->levels, nh = c->per_position ? Q : Q - 1;
    if ((s = cu_alloc(&mem, (size_t)nh * sizeof(cu_mat), &st->allocs, &st->nallocs, err))) return s;
    x->d_heads = (cu_mat *)mem;
    CU_TRY(cudaMemcpy(mem, st->heads, (size_t)nh * sizeof(cu_mat), cudaMemcpyHostToDevice), err,
           "latency executor heads");
    if (c->per_position) { /* the slices of in_proj and of each layer matrix, contiguous per matrix (lt_slices) */
        std::vector<cu_mat> sl((size_t)(1 + 4 * L) * Q);
        for (int q = 0; q < Q; q++) {
            sl[q] = st->inps[q];
            for (int li = 0; li < L; li++) {
                const int e = q * L + li; /* the layer entry of slice q (cu_state) */
                sl[(size_t)(1 + 4 * li) * Q + q] = st->qkv[e];
                sl[(size_t)(2 + 4 * li) * Q + q] = st->wo[e];
                sl[(size_t)(3 + 4 * li) * Q + q] = st->fc1[e];
                sl[(size_t)(4 + 4 * li) * Q + q] = st->fc2[e];
            }
        }
        if ((s = cu_alloc(&mem, sl.size() * sizeof(cu_mat), &st->allocs, &st->nallocs, err))) return s;
        x->d_pp = (cu_mat *)mem;
        CU_TRY(cudaMemcpy(mem, sl.data(), sl.size() * sizeof(cu_mat), cudaMemcpyHostToDevice), err,
               "latency executor slices");
    }
    return DD_OK;
}

void lt_free(lt_exec *x) {
    if (!x) return;
    free(x->qkv);
    free(x); /* device memory is in the backend's allocation list */
}

int lt_max_batch(const lt_exec *x) { return x ? LT_MAX_N : 0; }

/* The plan with attention and samplers on SMs of their own, else (when the linears' units on the other SMs do not
 * fit the executor's limits, e.g. CSM dims at B2-B8: 5 gate/up pairs of fc1 make a 40 KB chunk, over the 32 KB
 * piece) the plan without. */
static dd_status build_plan(lt_exec *x, int variant, int n, dd_error *err) {
    dd_plan fp;
    dd_status s = dd_plan_build(&fp, x->m, (dd_plan_kind)variant, err);
    if (!s) s = build_plan_role(x, &fp, variant, n, 1, err);
    if (!s && x->plan[variant][n].ok == 1) s = build_plan_role(x, &fp, variant, n, 0, err);
    dd_plan_free(&fp);
    return s;
}

/* The batches the decoder sends here by default: up to 6 groups of at most LT_MAX_N streams (one launch each).
 * Measured on the H200 (2026-12-04 12:35 UTC, depthdec bench --capacity, medians of 5 frames): GPT dims bf16 B8 9.03
 * ms here, B16 18.07, B32 36.05 (groups), while the frame kernel takes 57.3-61.1 ms from B9 to B64; CSM dims B8 12.57,
 * B32 50.22 here, 86.4-88.5 ms on the frame kernel from B9 to B64. So 6 groups of 8 (~54 / ~75 ms) still beat the
 * frame kernel, 7 would not at GPT dims. Single launches vs the frame kernel (dev/cuda/lat_timeline.cu, same call):
 * GPT dims bf16 B1 4.83 vs 10.24 ms. */
int lt_default_crossover(const lt_exec *x) { return x ? 6 * LT_MAX_N : 0; }

/* 1 when (variant, n) runs on the latency executor (the plan is built on first use) */
int lt_can(lt_exec *x, int variant, int n, dd_error *err, dd_status *s) {
    *s = DD_OK;
    if (!x || n < 1 || n > LT_MAX_N) return 0;
    lt_plan *pl = &x->plan[variant][n];
    if (pl->ok == 0 && (*s = build_plan(x, variant, n, err))) return 0;
    return pl->ok == 2;
}

/* After each launch, in stream order (all blocks have read the epoch): ebase += Q; when the next launch's epochs
 * would wrap, the LL buffers are cleared and ebase starts over at 1. One block. */
__global__ void lt_epoch_advance(unsigned *epoch, unsigned Q, u64 *ll, size_t words) {
    __shared__ unsigned e;
    if (threadIdx.x == 0) e = *epoch + Q;
    __syncthreads();
    const int wrap = e > 0xFFFFFFF0u - 2u * Q;
    if (wrap)
        for (size_t i = threadIdx.x; i < words; i += blockDim.x) ll[i] = 0;
    if (threadIdx.x == 0) *epoch = wrap ? 1u : e;
}

dd_status lt_run(lt_exec *x, int variant, int n, int r0, float temp, int topk, cudaStream_t stream, dd_error *err) {
    cu_state *st = x->st;
    const dd_config *c = &x->m->cfg;
    const int Q = c->levels;
    lt_plan *pl = &x->plan[variant][n];
    lt_params P;
    memset(&P, 0, sizeof P);
    P.ops = pl->ops;
    P.steps = pl->steps;
    P.pieces = pl->pieces;
    P.sms = pl->sms;
    P.nops = pl->nops;
    P.l0 = c->per_position ? 0 : 1;
    P.n = n;
    P.r0 = r0;
    P.Q = Q;
    P.temp = temp;
    P.topk = topk;
    P.seeds = (const uint64_t *)(st->d_in + st->off_seeds) + r0;
    P.frames = (const uint64_t *)(st->d_in + st->off_frames) + r0;
    P.noise = x->noise;
    P.V = c->codebook_size;
    P.epoch = x->epoch;
    P.err = st->sc.err;
    P.timeout_ns = x->timeout_ns;
    if (r0 == 0) CU_TRY(cudaMemsetAsync(st->sc.err, 0x7F, 8, stream), err, "reset error flags"); /* the first group */
    void *args[] = {&P};
    CU_TRY(cudaLaunchCooperativeKernel(lt_kernels[pl->wsel], dim3(x->G), dim3(LT_THREADS), args, LT_SMEM, stream),
           err, "launch of the latency kernel");
    lt_epoch_advance<<<1, 1024, 0, stream>>>(x->epoch, (unsigned)Q, x->ll, x->ll_words);
    CU_TRY(cudaGetLastError(), err, "launch of the epoch kernel");
    return DD_OK;
}
