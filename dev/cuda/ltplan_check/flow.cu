/* Host-only check of the latency executor's plans as its kernel would run them (src/cuda/lat.cu, lt_kernel): for a
 * set of models (fake.inc: the fixtures, the Kyutai MLX ones included, and the tiny synthetic models), every plan
 * kind, n = 1 .. LT_MAX_N streams, both roles and three device shapes, it builds the plan (build_plan_role, on the
 * fake executor of fake.inc: nothing runs on a GPU) and checks
 *   - the weight pieces: each SM's pieces are, in order, exactly the pieces its linear steps consume (the producer
 *     warp issues npre + npass (Q - l0) of them, lt_producer; the compute warps wait for them one by one,
 *     lt_linear), every piece has > 0 bytes, its mbarrier's expected bytes (lt_piece.bytes) are the bytes of its
 *     bulk copies (nmt fbytes + nmt sbytes), each copy a multiple of 16 bytes at 16-byte offsets, the piece fits
 *     the ring, and its copies stay inside the matrix;
 *   - the dataflow: two launches of the frame (epochs ebase = 1, then 1 + Q: lt_epoch_advance) simulated on every
 *     SM, step after step, each step as the kernel's code for its kind runs it (lt_linear, lt_attend, lt_sample:
 *     the same index arithmetic, written out in io() below): phases between the compute warps' barriers, each a
 *     set of tasks (threads) that poll the LL words (value, epoch) they read and then write theirs; a task runs
 *     when every word it polls carries its epoch. A plan whose tasks cannot all run is a kernel that never
 *     finishes (a poll that never sees its epoch: before the fix of 2026-12-04, a poll that timed out never
 *     returned either); the check prints the words the stuck tasks wait for, first those never written at that
 *     epoch or written again before they were read (the cause), then those waiting on a stuck writer. Along the
 *     run, happens-before (program order on an SM, barriers, and the writer of every word a task read: each task's
 *     set of ancestors) shows the races that a run in another order could lose: a word written again (the next
 *     pass's epoch) by a task not ordered after every reader of its current value (the reader may then see the
 *     new epoch and never its own), two writes of a word not ordered, a word written twice in one epoch, and a
 *     KV-cache row read by a step not ordered after the step that wrote it.
 * Sampling noise (temperature > 0) is simulated as published at each launch's start (lt_noise, every SM before
 * its first step); the check runs at temperature 0 (greedy: no noise read) unless --temp is given.
 *
 *   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib && dev/cuda/ltplan_check/build.sh
 *   build-cuda/ltplan_flow [--all] [--temp] [--only NAME] [--n N] [--dev D] [--mutate epoch|wait|piece|nobarrier]
 *                          [-v]
 *       from the repository root. One line per (model, device shape), and the first problems of each plan that
 *       has any; exit 0 when every built plan passes. --all: the models of full dimensions too (slow: `--all --only
 *       "gpt bf16"` had not finished after 55 min; with `--n 1 --dev 0` ~2 min); --only: the models whose name
 *       contains NAME; --n: batch N only; --dev: device shape D only (0: 132 SMs, 1: 66, 2: 120); --mutate: a fault in every
 *       plan (mutate() below; exit 1 then); -v: a line per plan. */
#include "fake.inc"

#include <algorithm>
#include <map>
#include <stdarg.h>
#include <string>
#include <vector>

static int g_verbose, g_temp, g_all, g_n, g_dev = -1; /* --n: that batch only; --dev: that device shape only */
static const char *g_mutate; /* --mutate: epoch | wait | piece | nobarrier */
static int g_nobarrier;       /* --mutate nobarrier */

/* --mutate: a fault put into a built plan before it is checked, to show that the check sees it: the template's
 * sampler gathers the next row one epoch late (epoch: every plan stuck), a score's samplers publish the next row
 * without waiting for the pass's logits (wait: races in score plans), a weight piece expects 16 bytes more than its
 * copies bring (piece: every plan with a piece); nobarrier: the sampler as lat.cu had it before 2026-12-04's fix, without
 * the barrier between the logits poll and the publication of the next row when the code is given (score, c0 given):
 * the Kyutai MLX q8 / q4 hang (V < D) and the races of every model whose score or c0-given plans have samplers on
 * SMs of their own (io() below) */
static void mutate(lt_plan *pl) {
    lt_op *ops = (lt_op *)pl->ops;
    if (!strcmp(g_mutate, "epoch")) ops[pl->nops - 1].eo++;
    else if (!strcmp(g_mutate, "wait"))
        for (int i = 0; i < pl->nops; i++) ops[i].wait_logits = ops[i].kind == LT_SMP ? 0 : ops[i].wait_logits;
    else if (!strcmp(g_mutate, "piece") && pl->sms[0].q1 > 0) ((lt_piece *)pl->pieces)[0].bytes += 16;
    else if (!strcmp(g_mutate, "nobarrier")) g_nobarrier = 1;
}

/* ---- the LL words of the fake executor ---------------------------------------------------------------------- */

struct llbuf {
    std::string name;
    uintptr_t base;
    size_t words;
    int ld;                      /* words per row (for the reports) */
    std::vector<unsigned> ep;    /* epoch of each word (0: never written; the executor clears the words at start) */
    std::vector<int> wr;         /* the step instance that wrote it last, -1 none */
    std::vector<std::vector<int>> rd; /* the step instances that read its current value */
};

struct acc { /* one word of an access */
    int b;
    size_t w;
    unsigned e;
};

struct kvkey { /* one KV-cache row (a layer's cache, stream, kv head, position) */
    uintptr_t kc;
    int s, kg, p;
    bool operator<(const kvkey &o) const {
        if (kc != o.kc) return kc < o.kc;
        if (s != o.s) return s < o.s;
        if (kg != o.kg) return kg < o.kg;
        return p < o.p;
    }
};

struct problems {
    std::vector<std::string> lines;
    long count = 0;
    void add(const std::string &s) {
        count++;
        if (lines.size() < 6) lines.push_back(s);
    }
};

static std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char *f, ...) {
    char b[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

static const char *kind_name(int k) { return k == LT_LIN ? "linear" : k == LT_ATT ? "attend" : k == LT_SMP ? "sample" : "?"; }

/* What one step does, as the kernel's code for its kind does it: phases separated by the compute warps' barrier
 * (lt_bar::sync), each a set of tasks that run in any order (different threads between two barriers), each task
 * polling the words it reads and then writing its words. A linear step is one task (every read before the
 * epilogue's writes, barriers between); a group of op.grp attention items one; a sampler stream one (its noise poll
 * a phase before), or with --mutate nobarrier one task per thread when the code is given (the kernel before the fix:
 * each thread published its words of the next row right after its own share of the logits poll). */
struct task {
    std::vector<acc> rd, wr;
    std::vector<kvkey> kvr, kvw;
};
struct phase {
    std::vector<task> t;
};

struct sim {
    lt_exec *x;
    const dd_model *m;
    int G, n, Q, l0, V;
    const lt_op *ops;
    const lt_step *steps;
    const lt_piece *pieces;
    const lt_sm *sms;
    int nops;
    std::vector<llbuf> bufs;
    problems *P;
    unsigned ebase;
    int bad_addr = 0;

    void add_buf(const char *name, const u64 *p, size_t words, int ld) {
        if (!p) return;
        llbuf b;
        b.name = name;
        b.base = (uintptr_t)p;
        b.words = words;
        b.ld = ld;
        b.ep.assign(words, 0);
        b.wr.assign(words, -1);
        b.rd.assign(words, std::vector<int>());
        bufs.push_back(b);
    }

    void init(lt_exec *x_, const dd_model *m_) {
        x = x_;
        m = m_;
        const dd_config *c = &m->cfg;
        const int L = c->layers, NT = 2 * LT_MAX_N;
        char nm[32];
        add_buf("x0", x->x0, (size_t)NT * x->ldx, x->ldx);
        for (int li = 0; li < L; li++) {
            snprintf(nm, sizeof nm, "qkv[%d]", li), add_buf(nm, x->qkv[li], (size_t)NT * x->ldq, x->ldq);
            snprintf(nm, sizeof nm, "att[%d]", li), add_buf(nm, x->att[li], (size_t)NT * x->lda_, x->lda_);
            snprintf(nm, sizeof nm, "xa[%d]", li), add_buf(nm, x->xa[li], (size_t)NT * x->ldx, x->ldx);
            snprintf(nm, sizeof nm, "ff[%d]", li), add_buf(nm, x->ff[li], (size_t)NT * x->ldf, x->ldf);
            snprintf(nm, sizeof nm, "xb[%d]", li), add_buf(nm, x->xb[li], (size_t)NT * x->ldx, x->ldx);
        }
        add_buf("lg", x->lg, (size_t)LT_MAX_N * c->codebook_size, x->ldv);
        add_buf("lg0", x->lg0, (size_t)LT_MAX_N * c->codebook_size, x->ldv);
        add_buf("fw", x->fw, (size_t)L * x->fw_stride, 256);
        add_buf("xg", x->xg, (size_t)NT * x->ldx, x->ldx);
        add_buf("noise", x->noise, (size_t)LT_MAX_N * c->levels * c->codebook_size, c->codebook_size);
    }

    /* len words from p + off at epoch e */
    void run(std::vector<acc> &out, const void *p, size_t off, size_t len, unsigned e, const char *what) {
        if (!len) return;
        const uintptr_t a = (uintptr_t)p + off * 8;
        for (int b = 0; b < (int)bufs.size(); b++) {
            const llbuf &B = bufs[b];
            if (a < B.base || a >= B.base + B.words * 8) continue;
            const size_t w = (a - B.base) / 8;
            if (w + len > B.words) {
                if (!bad_addr++)
                    P->add(fmt("%s: words %zu .. %zu of %s, which has %zu", what, w, w + len, B.name.c_str(), B.words));
                len = B.words - w;
            }
            for (size_t i = 0; i < len; i++) out.push_back({b, w + i, e});
            return;
        }
        if (!bad_addr++) P->add(fmt("%s: an address in no LL buffer (%s)", what, p ? "unknown" : "NULL"));
    }

    static int npos(int l, int l0) { return l == 1 && l0 == 1 ? 2 : 1; }

    /* the phases of step si in pass l (lt_linear, lt_attend, lt_sample: the same index arithmetic) */
    void io(int si, int l, std::vector<phase> &ph) {
        const lt_step &st = steps[si];
        const lt_op &op = ops[st.op];
        const unsigned E = ebase + (unsigned)l;
        const int Pp = npos(l, l0);
        char what[96];
        snprintf(what, sizeof what, "op %d (%s) pass %d", st.op, kind_name(op.kind), l);
        ph.clear();
        if (op.kind == LT_LIN) {
            ph.emplace_back();
            ph.back().t.emplace_back();
            task &k = ph.back().t.back();
            const cu_mat &w = op.w;
            const int T = op.tok_n ? n : n * Pp, NTG = (T + 7) >> 3, halves = w.pair ? 2 : 1, nu = st.u1 - st.u0,
                      nmt = nu * halves, KT = w.KT, ncol = std::max(0, std::min(nu * 16, w.N - st.u0 * 16));
            if (st.fwd != 1 && op.res)
                for (int t = 0; t < T; t++) run(k.rd, op.res, (size_t)t * op.ldr + st.u0 * 16, ncol, E, what);
            if (!op.in_plain && st.pc1 > st.pc0) {
                std::vector<std::pair<int, int>> win; /* k-tile windows staged */
                if (op.whole) win.push_back({pieces[st.pc0].c0 * CU_CKT, std::min(pieces[st.pc1 - 1].c1 * CU_CKT, KT)});
                else
                    for (int pc = st.pc0; pc < st.pc1; pc++)
                        win.push_back({pieces[pc].c0 * CU_CKT, std::min(pieces[pc].c1 * CU_CKT, KT)});
                for (auto wd : win) {
                    const int kb = wd.first * 16, nc = std::min((wd.second - wd.first) * 16, w.K - kb);
                    for (int t = 0; t < T; t++) {
                        const int row = op.in_last ? t * Pp + Pp - 1 : t;
                        run(k.rd, op.in, (size_t)row * op.ldin + kb, std::max(0, nc), E, what);
                    }
                }
            }
            if (st.fwd == 2) run(k.rd, op.fwd, (size_t)st.u0 * 256, (size_t)nmt * NTG * 128, E, what);
            if (st.fwd == 1) run(k.wr, op.fwd, (size_t)st.u0 * 256, (size_t)nmt * NTG * 128, E, what);
            else if (op.out)
                for (int t = 0; t < T; t++)
                    run(k.wr, op.out, (size_t)(t * op.out_mul + op.out_off) * op.ldo + st.u0 * 16, ncol, E, what);
        } else if (op.kind == LT_ATT) {
            const int HD = op.HD, H = op.H, KVH = op.KVH, Gq = H / KVH, p0 = Pp == 2 ? 0 : l;
            if (op.grp < 1) P->add(fmt("%s: attention group %d", what, op.grp));
            for (int it = st.u0; it < st.u1; it++) { /* groups of op.grp items one after the other (barriers between) */
                if ((it - st.u0) % std::max(1, op.grp) == 0) {
                    ph.emplace_back();
                    ph.back().t.emplace_back();
                }
                task &k = ph.back().t.back();
                const int s = it / KVH, kg = it % KVH;
                for (int j = 0; j < p0; j++) k.kvr.push_back({(uintptr_t)op.kc, s, kg, j});
                for (int i = 0; i < Pp; i++) {
                    const size_t row = (size_t)(s * Pp + i) * op.ldin;
                    for (int hq = 0; hq < Gq; hq++) run(k.rd, op.in, row + (size_t)(kg * Gq + hq) * HD, HD, E, what);
                    run(k.rd, op.in, row + (size_t)(H + kg) * HD, HD, E, what);
                    run(k.rd, op.in, row + (size_t)(H + KVH + kg) * HD, HD, E, what);
                    for (int hq = 0; hq < Gq; hq++)
                        run(k.wr, op.out, (size_t)(s * Pp + i) * op.ldo + (size_t)(kg * Gq + hq) * HD, HD, E, what);
                    k.kvw.push_back({(uintptr_t)op.kc, s, kg, p0 + i});
                }
            }
        } else if (op.kind == LT_SMP) {
            const int lv = op.level >= 0 ? op.level : l;
            const bool given0 = op.code0 && lv == 0, sampled = !op.forced && !given0;
            const bool poll = !op.forced || op.wait_logits, gather = op.out && lv < op.Q - 1;
            const unsigned Eo = ebase + (unsigned)(lv + op.eo);
            for (int s = st.u0; s < st.u1; s++) { /* streams one after the other (barriers between) */
                if (sampled && g_temp) { /* the noise poll, then a barrier */
                    ph.emplace_back();
                    ph.back().t.emplace_back();
                    run(ph.back().t.back().rd, x->noise, ((size_t)s * Q + lv) * V, op.V, ebase + 1u, what);
                }
                ph.emplace_back();
                phase &p = ph.back();
                if (!poll || !g_nobarrier) { /* no logits, or a barrier between their poll and the rest: one task */
                    p.t.emplace_back();
                    if (poll) run(p.t.back().rd, op.in, (size_t)s * op.ldin, op.V, E, what);
                    if (gather) run(p.t.back().wr, op.out, (size_t)(s * op.out_mul + op.out_off) * op.ldo, op.D, Eo, what);
                } else if (sampled) { /* the kernel before the fix: a barrier before cu_sample_block */
                    p.t.emplace_back();
                    run(p.t.back().rd, op.in, (size_t)s * op.ldin, op.V, E, what);
                    if (gather) run(p.t.back().wr, op.out, (size_t)(s * op.out_mul + op.out_off) * op.ldo, op.D, Eo, what);
                } else { /* ... and none with the code given: thread t polled logits t, t + LT_NC, ... (lt_poll_runs),
                          * then published the gathered row's words t, t + LT_NC, ... before the stream's closing
                          * barrier */
                    for (int t = 0; t < LT_NC && (t < op.V || (gather && t < op.D)); t++) {
                        p.t.emplace_back();
                        for (int i = t; i < op.V; i += LT_NC) run(p.t.back().rd, op.in, (size_t)s * op.ldin + i, 1, E, what);
                        for (int d = t; gather && d < op.D; d += LT_NC)
                            run(p.t.back().wr, op.out, (size_t)(s * op.out_mul + op.out_off) * op.ldo + d, 1, Eo, what);
                    }
                }
            }
        } else {
            P->add(fmt("step %d: op %d of kind %d", si, st.op, op.kind));
        }
    }

    /* ---- the weight pieces ---- */
    void check_pieces(void) {
        for (int g = 0; g < G; g++) {
            const lt_sm &me = sms[g];
            for (int part = 0; part < 2; part++) {
                const int s0 = part ? me.t0 : me.s0, s1 = part ? me.t1 : me.s1, p0 = part ? me.q0 : me.p0,
                          p1 = part ? me.q1 : me.p1;
                int cur = p0;
                for (int si = s0; si < s1; si++) {
                    const lt_step &st = steps[si];
                    const lt_op &op = ops[st.op];
                    if (op.kind != LT_LIN) continue;
                    if (st.pc0 != cur || st.pc1 <= st.pc0)
                        P->add(fmt("SM %d step %d (op %d): pieces [%d, %d), the producer's next is %d", g, si, st.op,
                                   st.pc0, st.pc1, cur));
                    cur = std::max(cur, st.pc1);
                    for (int pc = st.pc0; pc < st.pc1; pc++) {
                        const lt_piece &q = pieces[pc];
                        const cu_mat &w = op.w;
                        const int kt0 = q.c0 * CU_CKT, kt1 = std::min(w.KT, q.c1 * CU_CKT);
                        const long long total = (long long)q.nmt * q.fbytes + (long long)q.nmt * q.sbytes;
                        const int nmt = (st.u1 - st.u0) * (w.pair ? 2 : 1);
                        const char *why = q.bytes <= 0                                      ? "0 bytes"
                                          : q.bytes != total                                ? "expected bytes != bulk copies"
                                          : q.step != si                                    ? "piece of another step"
                                          : q.nmt != nmt                                    ? "m-tiles != the step's"
                                          : q.c1 <= q.c0                                    ? "no chunk"
                                          : q.fbytes != (kt1 - kt0) * w.tile_bytes          ? "fragment bytes != its k-tiles"
                                          : q.fbytes <= 0 || q.fbytes % 16 || q.sbytes % 16 ? "copy not a multiple of 16"
                                          : (uintptr_t)q.frag % 16 || (uintptr_t)q.sb % 16 || q.fstride % 16 ||
                                                    q.sstride % 16
                                              ? "copy not 16-byte aligned"
                                          : q.bytes > LT_PIECE_MAX || q.bytes > LT_RING_BYTES ? "larger than a ring piece"
                                                                                                : NULL;
                        if (!why) { /* inside the matrix (offsets from slice 0's base when wl) */
                            const uintptr_t fb = q.wl ? 0 : (uintptr_t)w.frag, sbb = q.wl ? 0 : (uintptr_t)w.sb;
                            const long long fo = (long long)((uintptr_t)q.frag - fb), so = (long long)((uintptr_t)q.sb - sbb);
                            const long long fmax = (long long)w.MT * w.KT * w.tile_bytes,
                                            smax = (long long)w.MT * w.NG * 16 * w.sb_bytes;
                            if (fo < 0 || fo + (q.nmt - 1) * q.fstride + q.fbytes > fmax) why = "fragments outside the matrix";
                            else if (q.sbytes && (so < 0 || so + (q.nmt - 1) * q.sstride + q.sbytes > smax))
                                why = "scales outside the matrix";
                        }
                        if (why)
                            P->add(fmt("SM %d step %d (op %d) piece %d: %s (bytes %d, nmt %d x (%d + %d), chunks [%d, %d))",
                                       g, si, st.op, pc, why, q.bytes, q.nmt, q.fbytes, q.sbytes, q.c0, q.c1));
                    }
                }
                if (cur != p1) P->add(fmt("SM %d: its steps consume pieces up to %d, the producer issues up to %d", g, cur, p1));
            }
        }
    }

    /* ---- the dataflow: two launches, task by task; happens-before as each node's set of ancestors ---- */
    struct node {
        int sm, si, l, launch;
    };
    std::vector<node> nodes;
    std::vector<std::vector<uint64_t>> anc; /* anc[i]: bit j set when node j happens before node i */

    int add_node(int sm, int si, int l, int launch, const std::vector<int> &preds) {
        const int id = (int)nodes.size();
        nodes.push_back({sm, si, l, launch});
        anc.emplace_back((size_t)(id + 63) / 64, 0);
        std::vector<uint64_t> &a = anc.back();
        for (int p : preds) {
            if (p < 0) continue;
            for (size_t i = 0; i < anc[p].size(); i++) a[i] |= anc[p][i];
            a[p / 64] |= 1ull << (p % 64);
        }
        return id;
    }
    bool hb(int a, int b) const { return a == b || (a < b && (anc[b][a / 64] >> (a % 64) & 1)); }

    std::string word_name(const acc &a) const {
        const llbuf &B = bufs[a.b];
        return fmt("%s[%zu][%zu]", B.name.c_str(), a.w / B.ld, a.w % B.ld);
    }
    std::string ep_name(unsigned e) const { return e ? fmt("%+d", (int)(e - ebase)) : std::string("none"); }
    std::string where(int id) const {
        const node &nd = nodes[id];
        return fmt("SM %d op %d (%s) pass %d", nd.sm, steps[nd.si].op, kind_name(ops[steps[nd.si].op].kind), nd.l);
    }

    /* per SM: its steps in one launch, where it is, and what precedes its current phase */
    struct cursor {
        std::vector<std::pair<int, int>> sq; /* (step, pass) */
        size_t pos = 0;
        std::vector<phase> ph;
        size_t pi = 0;
        std::vector<char> done;
        std::vector<int> ran; /* nodes of the current phase */
        int pred = -1;        /* the node all of the current phase follows */
        bool loaded = false;
    };

    void seq(int g, std::vector<std::pair<int, int>> &out) {
        const lt_sm &me = sms[g];
        out.clear();
        for (int si = me.s0; si < me.s1; si++) out.push_back({si, l0});
        for (int l = l0; l < Q; l++)
            for (int si = me.t0; si < me.t1; si++) out.push_back({si, l});
    }

    bool ready(const task &k) const {
        for (const acc &a : k.rd)
            if (bufs[a.b].ep[a.w] != a.e) return false;
        return true;
    }

    /* task k of SM g runs: a node after the phase's predecessor and after the writers of what it read */
    int run_task(cursor &c, int g, const task &k, int launch, std::map<kvkey, int> &kv) {
        const int si = c.sq[c.pos].first, l = c.sq[c.pos].second;
        std::vector<int> preds{c.pred};
        for (const acc &a : k.rd) preds.push_back(bufs[a.b].wr[a.w]);
        std::sort(preds.begin(), preds.end());
        preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
        const int id = add_node(g, si, l, launch, preds);
        for (const kvkey &q : k.kvr) {
            auto it = kv.find(q);
            if (it == kv.end() || !hb(it->second, id))
                P->add(fmt("launch %d: %s reads KV row (stream %d, kv head %d, position %d) %s", launch,
                           where(id).c_str(), q.s, q.kg, q.p,
                           it == kv.end() ? "that no step wrote" : "written by a step not ordered before it"));
        }
        for (const kvkey &q : k.kvw) kv[q] = id;
        for (const acc &a : k.rd) bufs[a.b].rd[a.w].push_back(id);
        for (const acc &a : k.wr) {
            llbuf &B = bufs[a.b];
            if (B.ep[a.w] == a.e && B.wr[a.w] >= 0)
                P->add(fmt("launch %d: %s writes %s a second time at epoch %s", launch, where(id).c_str(),
                           word_name(a).c_str(), ep_name(a.e).c_str()));
            else if (B.wr[a.w] >= 0 && !hb(B.wr[a.w], id))
                P->add(fmt("launch %d: %s writes %s (epoch %s) unordered with its previous write by %s", launch,
                           where(id).c_str(), word_name(a).c_str(), ep_name(a.e).c_str(), where(B.wr[a.w]).c_str()));
            for (int r : B.rd[a.w])
                if (!hb(r, id)) {
                    P->add(fmt("RACE launch %d: %s writes %s (epoch %s) not ordered after %s read its epoch %s "
                               "(in another order the reader sees the new epoch and never its own)",
                               launch, where(id).c_str(), word_name(a).c_str(), ep_name(a.e).c_str(),
                               where(r).c_str(), ep_name(B.ep[a.w]).c_str()));
                    break;
                }
            B.ep[a.w] = a.e;
            B.wr[a.w] = id;
            B.rd[a.w].clear();
        }
        return id;
    }

    /* 1 when both launches ran to the end */
    int run_frames(void) {
        std::map<kvkey, int> kv;
        int boundary = -1; /* the previous launch's end: every node of this launch follows it */
        for (int launch = 0; launch < 2; launch++) {
            ebase = 1 + (unsigned)(launch * Q);
            if (g_temp && x->noise) /* lt_noise: before any step (every SM computes its share first) */
                for (auto &B : bufs)
                    if (B.base == (uintptr_t)x->noise)
                        for (size_t i = 0; i < (size_t)n * Q * V; i++) {
                            B.ep[i] = ebase + 1, B.wr[i] = boundary;
                            B.rd[i].clear();
                        }
            std::vector<cursor> cs(G);
            for (int g = 0; g < G; g++) seq(g, cs[g].sq), cs[g].pred = boundary;
            for (;;) {
                int progress = 0, left = 0;
                for (int g = 0; g < G; g++) {
                    cursor &c = cs[g];
                    while (c.pos < c.sq.size()) {
                        if (!c.loaded) {
                            io(c.sq[c.pos].first, c.sq[c.pos].second, c.ph);
                            c.pi = 0, c.loaded = true;
                            c.done.assign(c.ph.empty() ? 0 : c.ph[0].t.size(), 0);
                            c.ran.clear();
                        }
                        if (c.pi < c.ph.size()) {
                            const phase &p = c.ph[c.pi];
                            int all = 1;
                            for (size_t k = 0; k < p.t.size(); k++) {
                                if (c.done[k]) continue;
                                if (!ready(p.t[k])) {
                                    all = 0;
                                    continue;
                                }
                                c.ran.push_back(run_task(c, g, p.t[k], launch, kv));
                                c.done[k] = 1;
                                progress = 1;
                            }
                            if (!all) break;
                            /* the phase's closing barrier */
                            if (c.ran.size() == 1) c.pred = c.ran[0];
                            else if (c.ran.size() > 1) c.pred = add_node(g, c.sq[c.pos].first, c.sq[c.pos].second, launch, c.ran);
                            c.ran.clear();
                            if (++c.pi < c.ph.size()) c.done.assign(c.ph[c.pi].t.size(), 0);
                            continue;
                        }
                        c.pos++, c.loaded = false;
                        progress = 1;
                    }
                    left += c.pos < c.sq.size();
                }
                if (!left) break;
                if (!progress) {
                    report_stuck(launch, cs);
                    return 0;
                }
            }
            std::vector<int> ends; /* the launch's end: the next launch starts after every node of this one */
            for (int g = 0; g < G; g++) ends.push_back(cs[g].pred);
            boundary = add_node(-1, 0, 0, launch, ends);
        }
        return 1;
    }

    /* The tasks that cannot run: what each waits for; first those whose word is never written at that epoch or was
     * written again before they read it (the cause), then those waiting on a stuck writer (the consequence). */
    void report_stuck(int launch, std::vector<cursor> &cs) {
        std::map<std::pair<int, size_t>, std::vector<std::pair<unsigned, int>>> writes; /* word: (epoch, SM) */
        for (int g = 0; g < G; g++) {
            std::vector<phase> ph;
            for (auto &p : cs[g].sq) {
                io(p.first, p.second, ph);
                for (auto &f : ph)
                    for (auto &k : f.t)
                        for (const acc &a : k.wr) writes[{a.b, a.w}].push_back({a.e, g});
            }
        }
        std::vector<std::string> cause, wait;
        int nstuck = 0;
        for (int g = 0; g < G; g++) {
            cursor &c = cs[g];
            if (c.pos >= c.sq.size()) continue;
            nstuck++;
            const int si = c.sq[c.pos].first, l = c.sq[c.pos].second;
            for (size_t k = 0; c.pi < c.ph.size() && k < c.ph[c.pi].t.size(); k++) {
                if (c.done[k]) continue;
                for (const acc &a : c.ph[c.pi].t[k].rd) {
                    const llbuf &B = bufs[a.b];
                    if (B.ep[a.w] == a.e) continue;
                    int writer = -1;
                    for (auto &e : writes[{a.b, a.w}])
                        if (e.first == a.e) writer = e.second;
                    const std::string head = fmt("STUCK launch %d pass %d: SM %d op %d (%s) polls %s for epoch %s, which holds %s",
                                                 launch, l, g, steps[si].op, kind_name(ops[steps[si].op].kind),
                                                 word_name(a).c_str(), ep_name(a.e).c_str(), ep_name(B.ep[a.w]).c_str());
                    if (writer < 0) cause.push_back(head + ": no step of the frame writes it at that epoch");
                    else if (B.ep[a.w] > a.e && B.wr[a.w] >= 0)
                        cause.push_back(head + fmt(": written again by %s before this read (a race lost)",
                                                   where(B.wr[a.w]).c_str()));
                    else wait.push_back(head + fmt(": its writer (SM %d) is itself stuck", writer));
                    break;
                }
                break;
            }
        }
        for (size_t i = 0; i < cause.size() && i < 4; i++) P->add(cause[i]);
        for (size_t i = 0; i < wait.size() && i + std::min<size_t>(cause.size(), 4) < 4; i++) P->add(wait[i]);
        P->add(fmt("STUCK: %d of %d SMs never finish launch %d (%zu wait for a word never written at their epoch or "
                   "overwritten, %zu for a stuck writer)",
                   nstuck, G, launch, cause.size(), wait.size()));
    }
};

struct tally {
    long plans, built, unfit, bad;
};

/* Every plan kind, n and role of m on a device of G SMs; returns the plans with problems. */
static long check_model(const char *name, const dd_model *m, int G, double l2, tally *T) {
    const dd_config *c = &m->cfg;
    cu_state st;
    fake_state(&st, m, 64);
    lt_exec *x = fake_exec(&st, m, G, l2);
    long bad = 0, built = 0, unfit = 0;
    std::string kinds_bad;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_plan fp;
        if (dd_plan_build(&fp, m, (dd_plan_kind)v, &err)) {
            printf("  %s: plan %d: %s\n", name, v, err.msg);
            bad++;
            continue;
        }
        std::vector<int> bad_n;
        for (int n = g_n ? g_n : 1; n <= (g_n ? g_n : LT_MAX_N); n++)
            for (int role = 0; role < 2; role++) {
                T->plans++;
                lt_plan *pl = &x->plan[v][n];
                memset(pl, 0, sizeof *pl);
                if (build_plan_role(x, &fp, v, n, role, &err)) {
                    printf("  %s: plan %s n %d role %d: %s\n", name, dd_plan_kind_name((dd_plan_kind)v), n, role, err.msg);
                    bad++;
                    continue;
                }
                if (pl->ok != 2) {
                    unfit++;
                    free(pl->mem);
                    memset(pl, 0, sizeof *pl);
                    continue;
                }
                built++;
                if (g_mutate) mutate(pl);
                problems P;
                sim S;
                S.G = G, S.n = n, S.Q = c->levels, S.l0 = c->per_position ? 0 : 1, S.V = c->codebook_size;
                S.ops = pl->ops, S.steps = pl->steps, S.pieces = pl->pieces, S.sms = pl->sms, S.nops = pl->nops;
                S.P = &P;
                S.init(x, m);
                S.check_pieces();
                const int done = S.run_frames();
                if (P.count) {
                    bad++;
                    if (std::find(bad_n.begin(), bad_n.end(), n) == bad_n.end()) bad_n.push_back(n);
                    if (bad <= 3 || g_verbose) {
                        printf("  %s G %d %-9s n %d role %d: %ld problems%s\n", name, G,
                               dd_plan_kind_name((dd_plan_kind)v), n, role, P.count,
                               done ? "" : " (the frame never finishes)");
                        for (auto &s : P.lines) printf("      %s\n", s.c_str());
                    }
                } else if (g_verbose) {
                    printf("  %s G %d %-9s n %d role %d: %d ops, flow and pieces ok\n", name, G,
                           dd_plan_kind_name((dd_plan_kind)v), n, role, pl->nops);
                }
                free(pl->mem);
                memset(pl, 0, sizeof *pl);
            }
        if (!bad_n.empty()) {
            kinds_bad += fmt(" %s (n", dd_plan_kind_name((dd_plan_kind)v));
            for (int k : bad_n) kinds_bad += fmt(" %d", k);
            kinds_bad += ")";
        }
        dd_plan_free(&fp);
    }
    printf("%-36s G %3d: %3ld plans built (%2ld do not fit), %3ld with problems%s%s\n", name, G, built, unfit, bad,
           kinds_bad.empty() ? "" : ":", kinds_bad.c_str());
    T->built += built;
    T->unfit += unfit;
    T->bad += bad;
    free(x->qkv);
    free(x);
    free_state(&st);
    return bad;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else if (!strcmp(argv[i], "--temp")) g_temp = 1;
        else if (!strcmp(argv[i], "--all")) g_all = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--mutate") && i + 1 < argc) g_mutate = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc && atoi(argv[i + 1]) >= 1 && atoi(argv[i + 1]) <= LT_MAX_N)
            g_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dev") && i + 1 < argc && argv[i + 1][0] >= '0' &&
                 argv[i + 1][0] < '0' + (int)(sizeof lt_devs / sizeof *lt_devs) && !argv[i + 1][1])
            g_dev = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--all] [--temp] [--only NAME] [--n 1..%d] [--dev 0|1|2] "
                            "[--mutate epoch|wait|piece|nobarrier] [-v]\n", argv[0], LT_MAX_N);
            return 2;
        }
    }
    tally T;
    memset(&T, 0, sizeof T);
    int nmodels = 0, failed = 0;
    for (size_t i = 0; i < sizeof lt_cases / sizeof *lt_cases; i++) {
        if (only && !strstr(lt_cases[i].name, only)) continue;
        dd_model *m = lt_load(&lt_cases[i]);
        if (!m) {
            failed = 1;
            continue;
        }
        if (!g_all && m->cfg.dim > 256) { /* word by word: minutes per model of full dimensions */
            printf("%-36s skipped (dim %d; --all)\n", lt_cases[i].name, m->cfg.dim);
            dd_model_free(m);
            continue;
        }
        for (size_t d = 0; d < sizeof lt_devs / sizeof *lt_devs; d++)
            if (g_dev < 0 || g_dev == (int)d) check_model(lt_cases[i].name, m, lt_devs[d].G, lt_devs[d].l2, &T);
        nmodels++;
        dd_model_free(m);
    }
    lt_free_pos();
    printf("ltplan_flow: %d models x %d device shapes, %ld plans (kind x n %d..%d x role): %ld built, %ld fit neither "
           "way; %s\n",
           nmodels, g_dev < 0 ? (int)(sizeof lt_devs / sizeof *lt_devs) : 1, T.plans, g_n ? g_n : 1, g_n ? g_n : LT_MAX_N, T.built, T.unfit,
           failed || T.bad ? "PROBLEMS (above)" : "every built plan's pieces and dataflow pass");
    return failed || T.bad ? 1 : 0;
}
