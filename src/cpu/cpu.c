/* The fast CPU backend (dd_cpu_backend): executes the frame plan (plan.h) for a batch of streams, layer by layer,
 * with the fused kernels of cpu_ops.c on a persistent thread pool.
 *
 * A decode call runs its n streams in groups of up to G = min(max_batch, 256) streams. Within a group every op
 * processes all streams' rows together (R = b*P rows: b streams, P = 2 new positions in pass 1, then 1), so each
 * weight is read from memory once per pass for the whole group. Row r = s*P + t is stream s's position p0 + t.
 * The plan's ops map onto the drivers one to one:
 *   LINEAR      dd_cpu_linear_run (norm prologue, up to 3 weight segments — q/k/v in one pass — activation,
 *               bias/residual/position epilogue)
 *   ATTEND      dd_cpu_attend_run (append K/V to the frame cache, RoPE from float tables, causal softmax)
 *   ADD_POS     a loop on the calling thread
 *   SAMPLE, CODE_C0, GATHER   each consecutive run of them is one job per stream (one fork-join): dd_sample_core
 *               (the shared SPEC §3 rule) and the gather of the drawn code's embedding row as the next input.
 * Moshi (DD_IN_PER_POSITION): Q one-position passes, each op pointing at its position's weight slices; the text
 * token's row is a GATHER from the call's text tokens (d->text).
 * CSM-layout models: the plan says DD_IN_PROJ_PER_PASS — in_proj is applied per pass to the gathered table rows
 * (one more linear per pass, counted by dd_model_weight_bytes_per_frame); no in(table) is precomputed, so the
 * rounding is the reference's.
 *
 * Everything (plans included) is allocated by cpu_init for G streams; decode and score allocate nothing. A
 * stream's results do not depend on n, its row, or the thread count (see cpu.h, "Exactness").
 */
#include "registry.h" /* backend.h, and the declaration of this backend's vtable */
#include "cpu.h"
#include "plan.h"
#include "sample.h"
#include "util.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_MAX 256

typedef struct cpu_state {
    const dd_cpu_kern *kern;
    dd_cpu_pool *pool;
    int nth;
    int G;           /* streams per group */
    int qkvw;        /* (H + 2 KVH) HD */
    size_t kvw;      /* KVH HD */
    size_t ldc;      /* floats of one stream's cache, all layers: L * Q * kvw */
    float *x;        /* [2G, D] residual stream of this pass's rows */
    float *xin;      /* [2G, I] CSM: inputs in backbone space (h, gathered table rows) */
    float *qkv;      /* [2G, qkvw] */
    float *att;      /* [2G, H HD] */
    float *ff;       /* [2G, F] */
    float *logits;   /* [G, V] */
    float *kc, *vc;  /* [G][L][Q][kvw] this frame's cache */
    float *rcos, *rsin; /* [Q][HD/2] RoPE tables (llama) */
    float **scratch; /* [nth] x [2G * D]: the linear's per-thread normalized rows */
    int32_t *fail;   /* [G] 1 + first level with no finite logit, 0 = none */
    dd_plan plan[DD_PLAN_NKIND]; /* the frame of each request kind (those needing head0 only when it exists) */
} cpu_state;

static void *alloc64(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    return p;
}

static void cpu_destroy(dd_decoder *d) {
    cpu_state *st = d->impl;
    if (!st) return;
    dd_cpu_pool_free(st->pool);
    free(st->x);
    free(st->xin);
    free(st->qkv);
    free(st->att);
    free(st->ff);
    free(st->logits);
    free(st->kc);
    free(st->vc);
    free(st->rcos);
    free(st->rsin);
    for (int i = 0; st->scratch && i < st->nth; i++) free(st->scratch[i]);
    free(st->scratch);
    free(st->fail);
    for (int k = 0; k < DD_PLAN_NKIND; k++) dd_plan_free(&st->plan[k]);
    free(st);
    d->impl = NULL;
}

static dd_status cpu_init(dd_decoder *d, dd_error *err) {
    const dd_config *c = &d->m->cfg;
    cpu_state *st = calloc(1, sizeof *st);
    if (!st) return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory");
    d->impl = st;
    st->kern = dd_cpu_kernels();
    dd_status s = dd_cpu_pool_create(&st->pool, dd_cpu_default_threads(d->threads), err);
    if (s) return s;
    st->nth = dd_cpu_pool_threads(st->pool);
    int G = d->max_batch < GROUP_MAX ? d->max_batch : GROUP_MAX;
    st->G = G;
    size_t R = 2 * (size_t)G, D = c->dim, I = c->input_dim, F = c->ffn_dim, V = c->codebook_size, Q = c->levels;
    size_t HD = c->head_dim, HH = (size_t)c->heads * HD;
    st->qkvw = (c->heads + 2 * c->kv_heads) * c->head_dim;
    st->kvw = (size_t)c->kv_heads * HD;
    st->ldc = (size_t)c->layers * Q * st->kvw;
    const size_t f = sizeof(float);
    int ok = (st->x = alloc64(R * D * f)) && (st->qkv = alloc64(R * st->qkvw * f)) &&
             (st->att = alloc64(R * HH * f)) && (st->ff = alloc64(R * F * f)) && (st->logits = alloc64(G * V * f)) &&
             (st->kc = alloc64(G * st->ldc * f)) && (st->vc = alloc64(G * st->ldc * f)) &&
             (st->fail = calloc((size_t)G, sizeof(int32_t))) &&
             (st->scratch = calloc((size_t)st->nth, sizeof(float *)));
    if (ok && c->embed_in_input_space) ok = (st->xin = alloc64(R * I * f)) != NULL;
    for (int i = 0; ok && i < st->nth; i++) ok = (st->scratch[i] = alloc64(R * D * f)) != NULL;
    if (ok && c->has_rope) ok = (st->rcos = alloc64(Q * (HD / 2) * f)) && (st->rsin = alloc64(Q * (HD / 2) * f));
    if (!ok)
        return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory for %d streams (%s)", G, d->m->source);
    if (c->has_rope &&
        (s = dd_cpu_rope_tables(st->rcos, st->rsin, d->m->rope_inv_freq, c->head_dim, c->levels, err)))
        return s;
    for (int k = 0; k < DD_PLAN_NKIND; k++) {
        if ((k == DD_PLAN_DECODE || k == DD_PLAN_SCORE_L0) && !c->has_head0) continue;
        if ((s = dd_plan_build(&st->plan[k], d->m, (dd_plan_kind)k, err))) return s;
    }
    return DD_OK;
}

/* ---- the plan's executor -------------------------------------------------------------------------------- */

/* A call's binding of the plan's buffers: what the caller gives and wants. */
typedef struct frame_io {
    int b;                  /* streams of this group */
    const float *hidden;    /* [b, I] */
    const int32_t *c0;      /* [b] or NULL */
    const int32_t *text;    /* [b] the text tokens (Moshi), or NULL */
    int32_t *codes;         /* [b, Q] decode out, or NULL (score) */
    const int32_t *given;   /* [b, Q] score: the teacher-forced codes, or NULL */
    const uint64_t *seeds, *frames; /* [b] or NULL */
    float T;
    int K;
    float *logits;          /* [b, Q-1, V] score out, or NULL: each level's logits go to st->logits */
    float *logits0;         /* [b, V] score out, or NULL: st->logits */
} frame_io;

typedef struct run_ctx {
    cpu_state *st;
    const dd_model *m;
    const dd_plan *plan;
    const frame_io *io;
    const int32_t *code_src; /* [b, Q] the codes gathers read: decode's own output, or score's given codes */
    float *buf[DD_BUF_N];
    size_t ld[DD_BUF_N];
    int i0, i1;              /* the run of per-stream ops a stream job executes */
    atomic_int claim;        /* the next stream to take */
} run_ctx;

/* The rows v of the bound buffer: the first touched row of stream 0; *ld = floats from one touched row to the
 * next (the next stream's when n == 1); *T = rows touched. */
static float *rows_at(const run_ctx *r, dd_plan_rows v, size_t *ld, int *T) {
    size_t w = r->ld[v.buf];
    float *p = r->buf[v.buf] + (size_t)v.first * w;
    if (v.buf == DD_BUF_LOGITS && r->io->logits) p += (size_t)(v.level - 1) * r->plan->width[DD_BUF_LOGITS];
    *ld = v.n == v.span ? w : v.span * w;
    *T = r->io->b * v.n;
    return p;
}

static void run_linear(const run_ctx *r, const dd_plan_linear *pl) {
    size_t ldy, ldx;
    int Ty, T;
    float *y = rows_at(r, pl->y, &ldy, &Ty);
    const float *x = rows_at(r, pl->x, &ldx, &T);
    dd_cpu_linear L = {.a = {.y = y, .ldy = (int)ldy, .x = x, .ldx = (int)ldx, .T = T, .nseg = pl->nseg,
                             .norm = pl->norm, .norm_w = pl->norm_w, .norm_b = pl->norm_b, .eps = pl->eps,
                             .act = pl->act, .residual = pl->residual ? y : NULL, .ldr = pl->residual ? (int)ldy : 0,
                             .add = pl->add, .lda = 0},
                       .kern = r->st->kern,
                       .scratch = r->st->scratch};
    memcpy(L.a.seg, pl->seg, sizeof L.a.seg);
    dd_cpu_linear_run(r->st->pool, &L);
}

static void run_attend(const run_ctx *r, const dd_plan_attend *pa) {
    const cpu_state *st = r->st;
    const size_t Q = r->m->cfg.levels;
    size_t ldo, ldq;
    int T;
    float *out = rows_at(r, pa->out, &ldo, &T);
    const float *qkv = rows_at(r, pa->qkv, &ldq, &T);
    dd_cpu_attend A = {.a = {.out = out, .ldo = (int)ldo, .kcache = st->kc + (size_t)pa->layer * Q * st->kvw,
                             .vcache = st->vc + (size_t)pa->layer * Q * st->kvw, .ldc = st->ldc, .qkv = qkv,
                             .ldq = (int)ldq, .B = r->io->b, .P = pa->P, .p0 = pa->p0, .H = pa->H, .KVH = pa->KVH,
                             .HD = pa->HD, .inv_freq = pa->rope ? r->m->rope_inv_freq : NULL,
                             .q_norm = pa->qk_norm ? r->m->layer[pa->layer].q_norm : NULL,
                             .k_norm = pa->qk_norm ? r->m->layer[pa->layer].k_norm : NULL,
                             .qk_eps = r->m->cfg.norm_eps},
                       .cos = pa->rope ? st->rcos : NULL,
                       .sin = pa->rope ? st->rsin : NULL,
                       .kern = st->kern};
    dd_cpu_attend_run(st->pool, &A);
}

/* x rows (P per stream) += pos[p0 + t] */
static void run_add_pos(const run_ctx *r, const dd_plan_add_pos *pp) {
    const int D = r->m->cfg.dim, P = pp->x.span;
    size_t ld;
    int T;
    float *x = rows_at(r, pp->x, &ld, &T);
    for (int i = 0; i < T; i++)
        for (int k = 0; k < D; k++) x[(size_t)i * ld + k] += r->m->pos[(size_t)(pp->p0 + i % P) * D + k];
}

/* A per-stream op for stream s. */
static void stream_op(run_ctx *r, const dd_plan_op *o, int s) {
    const dd_model *m = r->m;
    const dd_config *c = &m->cfg;
    const frame_io *io = r->io;
    const int Q = c->levels, V = c->codebook_size;
    size_t ld;
    int T;
    switch (o->kind) {
    case DD_OP_SAMPLE: {
        const float *z = rows_at(r, o->smp.logits, &ld, &T) + (size_t)s * ld;
        int32_t code = dd_sample_core(z, V, io->T, io->K, io->seeds ? io->seeds[s] : 0,
                                      io->frames ? io->frames[s] : 0, o->smp.level);
        if (code < 0) {
            if (!r->st->fail[s]) r->st->fail[s] = o->smp.level + 1;
            code = 0; /* keep going; the call reports the error after the group */
        }
        io->codes[(size_t)s * Q + o->smp.level] = code;
        break;
    }
    case DD_OP_CODE_C0:
        io->codes[(size_t)s * Q] = io->c0[s];
        break;
    case DD_OP_GATHER: {
        const dd_plan_gather *g = &o->gat;
        float *y = rows_at(r, g->dst, &ld, &T) + (size_t)s * ld;
        if (g->src == DD_GATHER_HIDDEN)
            memcpy(y, io->hidden + (size_t)s * c->input_dim, (size_t)g->width * sizeof(float));
        else if (g->src == DD_GATHER_TEXT)
            dd_weight_row_f32(&m->text_embed, io->text[s], y);
        else
            dd_weight_row_f32(&m->embed, (int64_t)g->level * m->embed_rows + r->code_src[(size_t)s * Q + g->level], y);
        if (g->pos >= 0)
            for (int i = 0; i < c->dim; i++) y[i] += m->pos[(size_t)g->pos * c->dim + i];
        break;
    }
    }
}

/* One job per stream over the run of per-stream ops [i0, i1). */
static void stream_job(void *ctx, int tid, int nth) {
    (void)tid;
    (void)nth;
    run_ctx *r = ctx;
    for (int s = atomic_fetch_add_explicit(&r->claim, 1, memory_order_relaxed); s < r->io->b;
         s = atomic_fetch_add_explicit(&r->claim, 1, memory_order_relaxed))
        for (int i = r->i0; i < r->i1; i++) stream_op(r, &r->plan->op[i], s);
}

/* The frame of io->b streams: the plan's ops in order; each run of consecutive per-stream ops is one fork-join. */
static void run_plan(cpu_state *st, const dd_model *m, const dd_plan *plan, const frame_io *io) {
    const dd_config *c = &m->cfg;
    const size_t V = c->codebook_size;
    memset(st->fail, 0, (size_t)io->b * sizeof(int32_t));
    run_ctx r = {.st = st, .m = m, .plan = plan, .io = io, .code_src = io->codes ? io->codes : io->given};
    r.buf[DD_BUF_HIDDEN] = (float *)io->hidden;
    r.buf[DD_BUF_XIN] = st->xin;
    r.buf[DD_BUF_X] = st->x;
    r.buf[DD_BUF_QKV] = st->qkv;
    r.buf[DD_BUF_ATT] = st->att;
    r.buf[DD_BUF_FF] = st->ff;
    r.buf[DD_BUF_LOGITS0] = io->logits0 ? io->logits0 : st->logits;
    r.buf[DD_BUF_LOGITS] = io->logits ? io->logits : st->logits;
    for (int k = 0; k < DD_BUF_N; k++) r.ld[k] = (size_t)plan->width[k];
    if (io->logits) r.ld[DD_BUF_LOGITS] = (size_t)(c->levels - 1) * V;
    for (int i = 0; i < plan->n;) {
        const dd_plan_op *o = &plan->op[i];
        if (dd_plan_op_per_stream(o->kind)) {
            int j = i + 1;
            while (j < plan->n && dd_plan_op_per_stream(plan->op[j].kind)) j++;
            r.i0 = i;
            r.i1 = j;
            atomic_store_explicit(&r.claim, 0, memory_order_relaxed);
            if (io->b == 1) stream_job(&r, 0, 1);
            else dd_cpu_pool_run(st->pool, stream_job, &r);
            i = j;
            continue;
        }
        switch (o->kind) {
        case DD_OP_LINEAR: run_linear(&r, &o->lin); break;
        case DD_OP_ATTEND: run_attend(&r, &o->att); break;
        case DD_OP_ADD_POS: run_add_pos(&r, &o->pos); break;
        }
        i++;
    }
}

/* ---- backend entry points --------------------------------------------------------------------------------- */

static dd_status cpu_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                            const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err) {
    cpu_state *st = d->impl;
    const dd_config *c = &d->m->cfg;
    const dd_plan *plan = &st->plan[c0 ? DD_PLAN_DECODE_C0 : DD_PLAN_DECODE];
    if (!plan->op) return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: c0 must be given", d->m->source);
    for (int g0 = 0; g0 < n; g0 += st->G) {
        int b = n - g0 < st->G ? n - g0 : st->G;
        frame_io io = {.b = b, .hidden = hidden + (size_t)g0 * c->input_dim, .c0 = c0 ? c0 + g0 : NULL,
                       .text = d->text ? d->text + g0 : NULL,
                       .seeds = seeds ? seeds + g0 : NULL, .frames = frames ? frames + g0 : NULL,
                       .T = s->temperature, .K = s->top_k, .codes = codes + (size_t)g0 * c->levels};
        run_plan(st, d->m, plan, &io);
        for (int r = 0; r < b; r++)
            if (st->fail[r])
                return dd_fail(err, DD_ENUMERIC, "row %d: level %d: no finite logit", g0 + r, st->fail[r] - 1);
    }
    return DD_OK;
}

static dd_status cpu_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                           float *logits0, dd_error *err) {
    cpu_state *st = d->impl;
    const dd_config *c = &d->m->cfg;
    const dd_plan *plan = &st->plan[logits0 ? DD_PLAN_SCORE_L0 : DD_PLAN_SCORE];
    if (!plan->op)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: level-0 logits unavailable", d->m->source);
    for (int g0 = 0; g0 < n; g0 += st->G) {
        int b = n - g0 < st->G ? n - g0 : st->G;
        frame_io io = {.b = b, .hidden = hidden + (size_t)g0 * c->input_dim, .given = codes + (size_t)g0 * c->levels,
                       .text = d->text ? d->text + g0 : NULL,
                       .logits = logits + (size_t)g0 * (c->levels - 1) * c->codebook_size,
                       .logits0 = logits0 ? logits0 + (size_t)g0 * c->codebook_size : NULL};
        run_plan(st, d->m, plan, &io);
    }
    return DD_OK;
}

const dd_backend_vt dd_cpu_backend = {"cpu", cpu_init, cpu_destroy, cpu_decode, cpu_score, NULL, NULL, NULL};

dd_status dd_cpu_decoder_use_isa(dd_decoder *d, dd_cpu_isa isa, dd_error *err) {
    if (!d || d->vt != &dd_cpu_backend) return dd_fail(err, DD_EINVAL, "dd_cpu_decoder_use_isa: not a cpu decoder");
    const dd_cpu_kern *k = dd_cpu_kernels_for(isa);
    if (!k) return dd_fail(err, DD_EUNSUPPORTED, "cpu kernels: instruction set %s not available here",
                           dd_cpu_isa_name(isa));
    ((cpu_state *)d->impl)->kern = k;
    return DD_OK;
}
