/* The cuda backend (dd_cuda_backend): decoder state on the device and the frame programs.
 *
 * At decoder creation every weight is uploaded once in its stored type (upload.cu); q/k/v are fused into one
 * matrix, llama gate/up into one interleaved pair; CSM's code table, which lives in the backbone's input space,
 * is pushed through in_proj once on the device (in(table), float32, the same kernel and hence the same numbers
 * as doing it per pass); four programs are built, each the translation of the frame plan (plan.h) of its kind:
 * decode with c0 given, decode sampling c0 from head0, score, score with logits0 (the latency executor, lat.cu,
 * translates the same plans into its own op lists). A call uploads one packed input
 * block (hidden, seeds, frames, c0), launches the frame kernel once (frame.cu) or the latency executor (lat.cu) and
 * reads back one packed block (error words + codes): no other host traffic. The device API (devapi.cu) stages
 * the caller's device arrays into the same block with a kernel instead and runs the same launch on the caller's
 * stream.
 *
 * Program of a frame (per pass l = 1 .. Q-1, P = 2 new positions in pass 1 else 1, tokens T = n P; build):
 *   prelude: in(h) , head0 | sample or take c0 and gather emb0(c0) |
 *   per layer: qkv (norm1 prologue) | attention | out (+ residual) | fc1 (norm2 prologue, GELU or SwiGLU) |
 *              fc2 (+ residual) |
 *   head (final norm prologue, last position of each stream) | sample and gather of the next input |
 * with a grid barrier at each '|' (none at ','; score: none after head0 either).
 * Moshi's depformer (per-position weights, docs/semantics.md): Q passes of one position, pass p with slice p of
 * every matrix: its input row is gathered (pass 0: text_embed[t]; pass p: code table p - 1 at c(p-1), by the
 * previous pass's sampler), then in_proj[p] . h is added to it (a linear with the row as its residual); the
 * layers; head p without a norm; sample level p (and gather pass p + 1's row).
 */
#include "cu_state.cuh"

extern "C" {
#include "plan.h"
}

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct prog {
    cu_op *op;
    int n, cap;
    int fail;
} prog;

static cu_op *push(prog *p, int type, int bar_after) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        cu_op *no = (cu_op *)realloc(p->op, (size_t)cap * sizeof *no);
        if (!no) {
            p->fail = 1;
            static cu_op dummy;
            return &dummy;
        }
        p->op = no;
        p->cap = cap;
    }
    cu_op *o = &p->op[p->n++];
    memset(o, 0, sizeof *o);
    o->type = type;
    o->bar_after = bar_after;
    o->lin.fuse = -1;
    return o;
}

static cu_linear *push_lin(prog *p, const cu_mat *w, const float *bias, const float *bias2, int norm,
                           const float *nw, const float *nb, float eps, int act, const float *x, int ldx, float *y,
                           int ldy, const float *res, int ldr, const float *add, int lda, int tmul, int bar) {
    cu_op *o = push(p, CU_OP_LINEAR, bar);
    cu_linear *L = &o->lin;
    L->w = *w;
    L->bias = bias;
    L->bias2 = bias2;
    L->norm = norm;
    L->norm_w = nw;
    L->norm_b = norm == DD_NORM_LAYER ? nb : NULL;
    L->eps = eps;
    L->act = act;
    L->x = x;
    L->ldx = ldx;
    L->y = y;
    L->ldy = ldy;
    L->res = res;
    L->ldr = ldr;
    L->add = add;
    L->lda = lda;
    L->tmul = tmul;
    L->fuse = -1;
    return L;
}

/* a gather op: x_next[s] = table row (code + row_off) (+ pos) */
static cu_sample *push_gather(prog *p, const cu_raw *table, int row_off, float *xn, int ldxn, const float *pos,
                              int bar) {
    cu_op *o = push(p, CU_OP_SAMPLE, bar);
    cu_sample *S = &o->smp;
    S->gather = 1;
    S->table = *table;
    S->row_off = row_off;
    S->xn = xn;
    S->ldxn = ldxn;
    S->pos = pos;
    return S;
}

/* ---- the frame programs: the frame plan translated --------------------------------------------------------- */

/* A program is the frame plan (plan.h) of its kind, op for op, with these translations:
 *   - the plan's buffers are bound to the decoder's device buffers (XIN to none: below); LOGITS is st->logits
 *     [B, Q-1, V] with level l at column block l - 1 (per-position models: [B, Q, V], level l at l, LOGITS0 its
 *     level 0), LOGITS0 st->logits0 [B, V];
 *   - a LINEAR applies the device copy of the matrix it names (dd_plan_mat: q/k/v fused, gate/up interleaved, one
 *     bias vector for q/k/v) with that matrix's device bias and norm vectors;
 *   - a level's code and the gather of its embedding are one sampler op: a SAMPLE with the GATHER of the same
 *     level that follows it (the last level's has none: gather 0), CODE_C0 with level 0's GATHER (c0 given), a
 *     GATHER alone in a score (the caller's code);
 *   - CSM (DD_IN_PROJ_PER_PASS): st->table is in(table), computed at load (precompute_table), so a GATHER of table
 *     rows into XIN is a gather of in(table) rows into the X rows the in_proj LINEAR from XIN writes, the GATHER of
 *     h into XIN that LINEAR applied to h, and the LINEAR from XIN is dropped;
 *   - the prelude's in(h) (the op that fills position 0 of pass 1 from h) runs first, so that head0 overlaps it;
 *   - a grid barrier follows an op when the next one reads rows written since the last barrier, or writes rows
 *     read or written since then, and after the last op (this leaves the prelude's independent ops unseparated).
 * Attention and sampling run as ops of their own over the whole grid. (A variant that ran them inside the last
 * block of the qkv / head linear (cu_op.lin.fuse) was slower on the H200 — 13.37 vs 11.17 ms/frame, GPT bf16 batch
 * 1 — and is no longer selectable; the frame kernel keeps its code until the new executors replace it.) */
static_assert((int)PROG_DECODE_C0 == (int)DD_PLAN_DECODE_C0 && (int)PROG_DECODE == (int)DD_PLAN_DECODE &&
                  (int)PROG_SCORE == (int)DD_PLAN_SCORE && (int)PROG_SCORE_L0 == (int)DD_PLAN_SCORE_L0 &&
                  (int)NPROG == (int)DD_PLAN_NKIND,
              "program v is the frame plan of kind v");

#define TR_PENDING 8 /* row sets remembered since the last barrier (more: a barrier) */

typedef struct tr {
    cu_state *st;
    const dd_model *m;
    const dd_plan *pl;
    prog *p;
    float *buf[DD_BUF_N];
    int ld[DD_BUF_N]; /* floats per row */
    int l1;           /* the level of LOGITS's first column block */
    int decode;
    int given0; /* a CODE_C0 was met: level 0's gather takes c0 */
    dd_plan_rows rd[TR_PENDING], wr[TR_PENDING]; /* rows read and written since the last barrier */
    int nrd, nwr;
} tr;

/* The device address of rows v (the first touched row of stream 0) and *ld, the floats from one touched row to the
 * next (cpu.c rows_at) */
static float *rows_at(const tr *t, dd_plan_rows v, int *ld) {
    const int w = t->ld[v.buf];
    float *a = t->buf[v.buf] + (size_t)v.first * w;
    if (v.buf == DD_BUF_LOGITS) a += (size_t)(v.level - t->l1) * t->pl->width[DD_BUF_LOGITS];
    *ld = v.n == v.span ? w : v.span * w;
    return a;
}

static int overlap(dd_plan_rows a, dd_plan_rows b) {
    if (a.buf != b.buf || a.level != b.level) return 0;
    return a.span != b.span || (a.first < b.first + b.n && b.first < a.first + a.n);
}

/* Before pushing an op that reads rows r[0 .. nr) and writes w[0 .. nw): a barrier after the op before it when
 * they conflict with the rows touched since the last barrier. */
static void hazard(tr *t, const dd_plan_rows *r, int nr, const dd_plan_rows *w, int nw) {
    int bar = t->nrd + nr > TR_PENDING || t->nwr + nw > TR_PENDING;
    for (int i = 0; i < t->nwr; i++) {
        for (int j = 0; j < nr; j++) bar |= overlap(t->wr[i], r[j]);
        for (int j = 0; j < nw; j++) bar |= overlap(t->wr[i], w[j]);
    }
    for (int i = 0; i < t->nrd; i++)
        for (int j = 0; j < nw; j++) bar |= overlap(t->rd[i], w[j]);
    if (bar) {
        if (t->p->n) t->p->op[t->p->n - 1].bar_after = 1;
        t->nrd = t->nwr = 0;
    }
    for (int j = 0; j < nr; j++) t->rd[t->nrd++] = r[j];
    for (int j = 0; j < nw; j++) t->wr[t->nwr++] = w[j];
}

void cu_plan_mat(const cu_state *st, int mat, int e, const cu_mat **w, const float **bias, const float **nw,
                 const float **nb) {
    *bias = *nw = *nb = NULL;
    switch (mat) {
    case DD_MAT_HEAD0: *w = &st->head0; break;
    case DD_MAT_IN_PROJ: /* per-position models: slice e, no bias */
        *w = st->inps ? &st->inps[e] : &st->in_proj;
        *bias = st->inps ? NULL : st->in_bias;
        break;
    case DD_MAT_QKV: *w = &st->qkv[e], *bias = st->bqkv[e], *nw = st->n1w[e], *nb = st->n1b[e]; break;
    case DD_MAT_OUT: *w = &st->wo[e], *bias = st->bo[e]; break;
    case DD_MAT_FC1: *w = &st->fc1[e], *bias = st->b1[e], *nw = st->n2w[e], *nb = st->n2b[e]; break;
    case DD_MAT_FC2: *w = &st->fc2[e], *bias = st->b2[e]; break;
    default: *w = &st->heads[e], *nw = st->norm_w, *nb = st->norm_b; break; /* DD_MAT_HEAD: the final norm's */
    }
}

static void tr_linear(tr *t, const dd_plan_linear *pl) {
    cu_state *st = t->st;
    const cu_mat *w;
    const float *bias, *nw, *nb;
    cu_plan_mat(st, pl->mat, pl->entry, &w, &bias, &nw, &nb);
    if (pl->norm == DD_NORM_NONE) nw = nb = NULL;
    int ldx, ldy;
    const float *x = rows_at(t, pl->x, &ldx);
    float *y = rows_at(t, pl->y, &ldy);
    const dd_plan_rows rd[2] = {pl->x, pl->y};
    hazard(t, rd, pl->residual ? 2 : 1, &pl->y, 1);
    push_lin(t->p, w, bias, NULL, pl->norm, nw, nb, t->m->cfg.norm_eps, pl->act, x, ldx, y, ldy,
             pl->residual ? y : NULL, pl->residual ? ldy : 0, pl->add ? st->pos + (pl->add - t->m->pos) : NULL, 0,
             pl->x.n, 0);
}

static void tr_attend(tr *t, const dd_plan_attend *pa) {
    cu_state *st = t->st;
    const size_t kvw = (size_t)pa->KVH * pa->HD, Q = t->m->cfg.levels;
    int ldq, ldo;
    hazard(t, &pa->qkv, 1, &pa->out, 1);
    cu_attend *A = &push(t->p, CU_OP_ATTEND, 0)->att;
    A->qkv = rows_at(t, pa->qkv, &ldq); /* [T][(H + 2 KVH) HD]: all P rows of each stream */
    A->out = rows_at(t, pa->out, &ldo);
    A->kc = st->kc + (size_t)pa->layer * st->B * Q * kvw;
    A->vc = st->vc + (size_t)pa->layer * st->B * Q * kvw;
    A->cstride = Q * kvw;
    A->P = pa->P;
    A->p0 = pa->p0;
    A->H = pa->H;
    A->KVH = pa->KVH;
    A->HD = pa->HD;
    A->rope = pa->rope ? st->rope : NULL;
    A->qn = pa->qk_norm ? st->qn[pa->entry] : NULL;
    A->kn = pa->qk_norm ? st->kn[pa->entry] : NULL;
    A->qk_eps = t->m->cfg.norm_eps;
}

/* A gather of table rows (code + row_off) into rows dst (+ pos[pos] when pos >= 0), reading rows r (or none);
 * with gather 0 the sampler op writes no rows. */
static cu_sample *tr_gather(tr *t, const dd_plan_rows *r, const cu_raw *table, int row_off, dd_plan_rows dst, int pos,
                            int gather) {
    int ld;
    hazard(t, r, r ? 1 : 0, &dst, gather);
    float *xn = rows_at(t, dst, &ld);
    cu_sample *S =
        push_gather(t->p, table, row_off, xn, ld, pos >= 0 ? t->st->pos + (size_t)pos * t->m->cfg.dim : NULL, 0);
    S->gather = gather;
    return S;
}

/* Level `level`'s code and the gather of its embedding as one sampler op: the code sampled from smp's logits (smp
 * not NULL), else given (c0 after a CODE_C0, else the caller's codes of a score); g: the plan's GATHER of the
 * level's embedding, or NULL (the last level). XIN rows are X rows here (CSM: st->table is in(table)). */
static void tr_level(tr *t, const dd_plan_sample *smp, const dd_plan_gather *g, int level) {
    cu_state *st = t->st;
    const int Q = t->m->cfg.levels, pp = t->pl->in == DD_IN_PER_POSITION;
    const dd_plan_rows x1 = {DD_BUF_X, 1, 0, 1, 0}; /* no gather: x is named all the same (unread) */
    dd_plan_rows dst = g ? g->dst : x1;
    if (dst.buf == DD_BUF_XIN) dst.buf = DD_BUF_X;
    cu_sample *S =
        tr_gather(t, smp ? &smp->logits : NULL, &st->table, level * t->m->embed_rows, dst, g ? g->pos : -1, g != NULL);
    S->level = level;
    if (smp) {
        S->logits = rows_at(t, smp->logits, &S->ldl);
        S->V = t->m->cfg.codebook_size;
        S->code_out = (int32_t *)(st->d_out + 8) + level;
        S->ldo = Q;
    } else {
        const int c0 = level == 0 && t->given0;
        S->forced = 1;
        S->code_in =
            c0 ? (const int32_t *)(st->d_in + st->off_c0) : (const int32_t *)(st->d_in + st->off_codes_in) + level;
        S->ldi = c0 ? 1 : Q;
        S->code_out = t->decode ? (int32_t *)(st->d_out + 8) + level : NULL;
        S->ldo = pp || level == 0 ? Q : 0; /* read only with code_out; the value the program has always had */
    }
}

/* 1 for the prelude's in(h): the op that fills position 0 of pass 1 from h */
static int is_in_h(const dd_plan_op *o) {
    return o->pass == 0 && ((o->kind == DD_OP_GATHER && o->gat.src == DD_GATHER_HIDDEN) ||
                            (o->kind == DD_OP_LINEAR && o->lin.x.buf == DD_BUF_HIDDEN && o->lin.y.buf == DD_BUF_X));
}

/* Program pl->kind of the decoder from its frame plan pl (the comment above). */
static dd_status build(cu_state *st, const dd_model *m, const dd_plan *pl, prog *p, dd_error *err) {
    const dd_config *c = &m->cfg;
    const int V = c->codebook_size, Q = c->levels, pp = pl->in == DD_IN_PER_POSITION;
    tr t;
    memset(&t, 0, sizeof t);
    t.st = st;
    t.m = m;
    t.pl = pl;
    t.p = p;
    t.decode = pl->kind == DD_PLAN_DECODE_C0 || pl->kind == DD_PLAN_DECODE;
    float *bind[DD_BUF_N] = {(float *)st->d_in, NULL, st->x, st->qkvb, st->att, st->ff, pp ? st->logits : st->logits0,
                             st->logits};
    for (int k = 0; k < DD_BUF_N; k++) {
        t.buf[k] = bind[k];
        t.ld[k] = pl->width[k];
    }
    t.ld[DD_BUF_LOGITS] = (pp ? Q : Q - 1) * V;
    if (pp) t.ld[DD_BUF_LOGITS0] = Q * V;
    t.l1 = pp ? 0 : 1;
    /* the order: the prelude's in(h), the rest of the plan */
    int *order = (int *)malloc((size_t)pl->n * sizeof *order), n = 0;
    if (!order) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    for (int i = 0; i < pl->n; i++)
        if (is_in_h(&pl->op[i])) order[n++] = i;
    for (int i = 0; i < pl->n; i++)
        if (!is_in_h(&pl->op[i])) order[n++] = i;
    dd_status s = DD_OK;
    for (int k = 0; k < n && !s; k++) {
        const dd_plan_op *o = &pl->op[order[k]], *nx = k + 1 < n ? &pl->op[order[k + 1]] : NULL;
        switch (o->kind) {
        case DD_OP_LINEAR:
            if (o->lin.x.buf != DD_BUF_XIN) {
                tr_linear(&t, &o->lin);
            } else if (pl->in != DD_IN_PROJ_PER_PASS || o->lin.mat != DD_MAT_IN_PROJ || o->lin.y.buf != DD_BUF_X ||
                       o->lin.y.span != o->lin.x.span || o->lin.y.first != o->lin.x.first || o->lin.y.n != o->lin.x.n) {
                s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: %s: a linear from XIN other than in_proj", m->source);
            } /* else in_proj of the rows its gathers wrote: done by them */
            break;
        case DD_OP_ATTEND: tr_attend(&t, &o->att); break;
        case DD_OP_SAMPLE: {
            const int g =
                nx && nx->kind == DD_OP_GATHER && nx->gat.src == DD_GATHER_EMBED && nx->gat.level == o->smp.level;
            tr_level(&t, &o->smp, g ? &nx->gat : NULL, o->smp.level);
            k += g;
            break;
        }
        case DD_OP_CODE_C0: t.given0 = 1; break;
        case DD_OP_GATHER: {
            const dd_plan_gather *g = &o->gat;
            if (g->src == DD_GATHER_EMBED) {
                tr_level(&t, NULL, g, g->level);
            } else if (g->src == DD_GATHER_TEXT) { /* Moshi: text_embed[t] */
                cu_sample *S = tr_gather(&t, NULL, &st->text, 0, g->dst, g->pos, 1);
                S->forced = 1;
                S->code_in = (const int32_t *)(st->d_in + st->off_text);
                S->ldi = 1;
            } else if (g->dst.buf == DD_BUF_XIN) { /* CSM: in(h) into X */
                dd_plan_linear L;
                memset(&L, 0, sizeof L);
                L.y = g->dst;
                L.y.buf = DD_BUF_X;
                L.x = (dd_plan_rows){DD_BUF_HIDDEN, 1, 0, 1, 0};
                L.mat = DD_MAT_IN_PROJ;
                L.add = g->pos >= 0 ? m->pos + (size_t)g->pos * c->dim : NULL;
                tr_linear(&t, &L);
            } else { /* h copied: a gather from the hidden states, row = stream */
                const dd_plan_rows h = {DD_BUF_HIDDEN, 1, 0, 1, 0};
                cu_raw hr = {DD_F32, st->B, c->input_dim, st->d_in, (size_t)c->input_dim * 4, NULL, NULL, 0, 0, 0};
                cu_sample *S = tr_gather(&t, &h, &hr, 0, g->dst, g->pos, 1);
                S->forced = 1;
                S->code_is_stream = 1;
            }
            break;
        }
        default: /* DD_OP_ADD_POS: learned positions added after in_proj (CSM layout: model.c rejects them) */
            s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: %s: plan op %d not translated", m->source, o->kind);
        }
    }
    free(order);
    if (p->n) p->op[p->n - 1].bar_after = 1;
    return s;
}

/* ---- init ------------------------------------------------------------------------------------------------ */

static void cuda_destroy(dd_decoder *d);

#define ALLOC(ptr, bytes)                                                                                          \
    do {                                                                                                           \
        void *p_;                                                                                                  \
        if ((s = cu_alloc(&p_, (bytes), &st->allocs, &st->nallocs, err))) return s;                                \
        ptr = (decltype(ptr))p_;                                                                                   \
    } while (0)

/* The host arrays of the device matrices and vectors, per layer entry (cu_state: the model's layer array as it
 * is, m->layer[p L + li] = slice p of layer li), the heads and Moshi's in_proj slices, zeroed; 0 when out of
 * memory (freed by cuda_destroy). */
static int alloc_entries(cu_state *st, const dd_model *m) {
    const int NE = m->nslices * m->cfg.layers, Q = m->cfg.levels;
    st->ns = m->nslices;
    st->qkv = (cu_mat *)calloc((size_t)NE * 4 + 2 * (size_t)Q, sizeof(cu_mat));
    st->bqkv = (float **)calloc((size_t)NE * 10, sizeof(float *));
    if (!st->qkv || !st->bqkv) return 0;
    st->wo = st->qkv + NE;
    st->fc1 = st->wo + NE;
    st->fc2 = st->fc1 + NE;
    st->heads = st->fc2 + NE;
    st->inps = m->cfg.per_position ? st->heads + Q : NULL;
    st->bo = st->bqkv + NE;
    st->b1 = st->bo + NE;
    st->b2 = st->b1 + NE;
    st->n1w = st->b2 + NE;
    st->n1b = st->n1w + NE;
    st->n2w = st->n1b + NE;
    st->n2b = st->n2w + NE;
    st->qn = st->n2b + NE;
    st->kn = st->qn + NE;
    return 1;
}

static dd_status upload_weights(cu_state *st, const dd_model *m, dd_error *err) {
    const dd_config *c = &m->cfg;
    const int L = c->layers, Q = c->levels, V = c->codebook_size, D = c->dim, H = c->heads, KV = c->kv_heads,
              HD = c->head_dim;
    const int gpt = c->block == DD_BLOCK_GPT, qw = (H + 2 * KV) * HD;
    dd_status s = DD_OK;
    void ***A = &st->allocs;
    int *NA = &st->nallocs;
    const int NE = m->nslices * L, nh = c->per_position ? Q : Q - 1;
    if (!alloc_entries(st, m)) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    float *tmp = (float *)calloc((size_t)qw, sizeof(float));
    if (!tmp) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    for (int li = 0; li < NE && !s; li++) {
        const dd_layer *l = &m->layer[li];
        cu_rows q[3] = {{&l->wq, 0, l->wq.rows}, {&l->wk, 0, l->wk.rows}, {&l->wv, 0, l->wv.rows}};
        cu_rows ro[1] = {{&l->wo, 0, l->wo.rows}}, r2[1] = {{&l->fc2, 0, l->fc2.rows}};
        cu_rows r1[2] = {{&l->fc1, 0, l->fc1.rows}, {&l->up, 0, l->up.rows}};
        if ((s = cu_mat_upload(&st->qkv[li], q, 3, 0, A, NA, err))) break;
        if ((s = cu_mat_upload(&st->wo[li], ro, 1, 0, A, NA, err))) break;
        if ((s = cu_mat_upload(&st->fc1[li], r1, gpt ? 1 : 2, !gpt, A, NA, err))) break;
        if ((s = cu_mat_upload(&st->fc2[li], r2, 1, 0, A, NA, err))) break;
        if (l->bq || l->bk || l->bv) {
            memset(tmp, 0, (size_t)qw * sizeof(float));
            if (l->bq) memcpy(tmp, l->bq, (size_t)H * HD * 4);
            if (l->bk) memcpy(tmp + H * HD, l->bk, (size_t)KV * HD * 4);
            if (l->bv) memcpy(tmp + (H + KV) * HD, l->bv, (size_t)KV * HD * 4);
            if ((s = cu_upload_f32(&st->bqkv[li], tmp, qw, A, NA, err))) break;
        }
        if ((s = cu_upload_f32(&st->bo[li], l->bo, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->b1[li], l->b1, c->ffn_dim, A, NA, err)) ||
            (s = cu_upload_f32(&st->b2[li], l->b2, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->n1w[li], l->norm1_w, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->n1b[li], l->norm1_b, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->n2w[li], l->norm2_w, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->n2b[li], l->norm2_b, D, A, NA, err)) ||
            (s = cu_upload_f32(&st->qn[li], l->q_norm, HD, A, NA, err)) ||
            (s = cu_upload_f32(&st->kn[li], l->k_norm, HD, A, NA, err)))
            break;
    }
    free(tmp);
    if (s) return s;
    for (int h = 0; h < nh; h++) { /* head h at rows h V */
        cu_rows r = {&m->heads, (int64_t)h * V, V};
        if ((s = cu_mat_upload(&st->heads[h], &r, 1, 0, A, NA, err))) return s;
    }
    if (c->per_position) { /* Moshi: no head0 (position 0's head samples c0); in_proj [Q D, I] in Q slices */
        for (int p = 0; p < Q; p++) {
            cu_rows r = {&m->in_proj, (int64_t)p * D, D};
            if ((s = cu_mat_upload(&st->inps[p], &r, 1, 0, A, NA, err))) return s;
        }
    } else {
        cu_rows rh[1] = {{&m->head0, 0, m->head0.rows}}, ri[1] = {{&m->in_proj, 0, m->in_proj.rows}};
        if (c->has_head0 && (s = cu_mat_upload(&st->head0, rh, 1, 0, A, NA, err))) return s;
        if (c->has_in_proj && (s = cu_mat_upload(&st->in_proj, ri, 1, 0, A, NA, err))) return s;
    }
    if ((s = cu_upload_f32(&st->in_bias, m->in_bias, D, A, NA, err)) ||
        (s = cu_upload_f32(&st->pos, m->pos, (size_t)Q * D, A, NA, err)) ||
        (s = cu_upload_f32(&st->norm_w, m->norm_w, D, A, NA, err)) ||
        (s = cu_upload_f32(&st->norm_b, m->norm_b, D, A, NA, err)))
        return s;
    if (c->has_rope) {
        int half = HD / 2;
        double *cs = (double *)malloc((size_t)Q * half * 2 * sizeof(double) + 16);
        if (!cs) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
        dd_rope_table(cs, m->rope_inv_freq, HD, Q);
        void *dp;
        s = cu_alloc(&dp, (size_t)Q * half * 2 * sizeof(double) + 16, A, NA, err);
        if (!s && cudaMemcpy(dp, cs, (size_t)Q * half * 2 * sizeof(double), cudaMemcpyHostToDevice) != cudaSuccess)
            s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: upload failed");
        free(cs);
        if (s) return s;
        st->rope = (double *)dp;
    }
    return DD_OK;
}

/* CSM: in(table) for all Q V rows, on the device, through the frame kernel in chunks. */
static dd_status precompute_table(cu_state *st, const dd_model *m, dd_error *err) {
    const dd_config *c = &m->cfg;
    const int D = c->dim, I = c->input_dim, rows = (int)m->embed.rows, CH = 512;
    dd_status s;
    cu_raw raw;
    if ((s = cu_raw_upload(&raw, &m->embed, 0, rows, &st->allocs, &st->nallocs, err))) return s;
    float *pre, *xb;
    ALLOC(pre, (size_t)rows * D * 4);
    ALLOC(xb, (size_t)CH * I * 4);
    cu_op *d_ops;
    ALLOC(d_ops, 2 * sizeof(cu_op));
    for (int r0 = 0; r0 < rows; r0 += CH) {
        int n = rows - r0 < CH ? rows - r0 : CH;
        prog p = {0};
        cu_sample *S = push_gather(&p, &raw, r0, xb, I, NULL, 1);
        S->forced = 1;
        S->code_is_stream = 1;
        push_lin(&p, &st->in_proj, st->in_bias, NULL, DD_NORM_NONE, NULL, NULL, c->norm_eps, DD_ACT_NONE, xb, I,
                 pre + (size_t)r0 * D, D, NULL, 0, NULL, 0, 1, 0);
        if (p.fail) {
            free(p.op);
            return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
        }
        cudaError_t ce = cudaMemcpy(d_ops, p.op, 2 * sizeof(cu_op), cudaMemcpyHostToDevice);
        if (ce == cudaSuccess) s = cu_run_program(&st->sc, d_ops, 2, n, 0, 0, NULL, NULL, 0, 0, err);
        free(p.op);
        if (ce != cudaSuccess) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: %s", cudaGetErrorString(ce));
        if (s) return s;
        CU_TRY(cudaDeviceSynchronize(), err, "precomputing in(table)");
        if ((s = cu_check_errors(&st->sc, err))) return s;
    }
    st->table = (cu_raw){DD_F32, rows, D, (const uint8_t *)pre, (size_t)D * 4, NULL, NULL, 0, 0, 0};
    return DD_OK;
}

/* The packed input block of B streams (cu_state): its field offsets and size. */
static void io_layout(cu_state *st, const dd_config *c, int B) {
    size_t off = (size_t)B * c->input_dim * 4;
    st->off_seeds = off;
    off += (size_t)B * 8;
    st->off_frames = off;
    off += (size_t)B * 8;
    st->off_c0 = off;
    off += (size_t)B * 4;
    st->off_codes_in = off;
    off += (size_t)B * c->levels * 4;
    st->off_text = off;
    off += c->text_vocab ? (size_t)B * 4 : 0;
    st->in_bytes = off;
}

static dd_status cuda_init(dd_decoder *d, dd_error *err) {
    const dd_model *m = d->m;
    const dd_config *c = &m->cfg;
    cu_state *st = (cu_state *)calloc(1, sizeof *st);
    if (!st) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    d->impl = st;
    if (c->levels > 64 || c->heads > 256)
        return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: more than 64 levels or 256 heads");
    const int B = d->max_batch, D = c->dim, I = c->input_dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
              F = c->ffn_dim, V = c->codebook_size, Q = c->levels, L = c->layers;
    st->B = B;
    st->m = m;
    dd_status s;
    if ((s = upload_weights(st, m, err))) return s;
    /* scratch: the largest linear (tokens x K) on the large schedule, group sums */
    int maxk = I > D ? I : D;
    if (F > maxk) maxk = F;
    if (H * HD > maxk) maxk = H * HD;
    int maxg = 1;
    if (c->quant_bits) maxg = maxk / c->quant_group + 1;
    if (m->head0.scales && (int)(m->head0.cols / m->head0.group) > maxg) maxg = (int)(m->head0.cols / m->head0.group);
    if (m->in_proj.scales && (int)(m->in_proj.cols / m->in_proj.group) > maxg)
        maxg = (int)(m->in_proj.cols / m->in_proj.group);
    if (m->heads.scales && (int)(m->heads.cols / m->heads.group) > maxg) maxg = (int)(m->heads.cols / m->heads.group);
    int maxt = 2 * B > 512 ? 2 * B : 512;
    io_layout(st, c, B);
    ALLOC(st->d_in, st->in_bytes);
    ALLOC(st->d_out, 8 + (size_t)B * Q * 4);
    CU_TRY(cudaMallocHost((void **)&st->h_in, st->in_bytes), err, "pinned host buffer");
    CU_TRY(cudaMallocHost((void **)&st->h_out, 8 + (size_t)B * Q * 4), err, "pinned host buffer");
    CU_TRY(cudaGetDevice(&st->dev), err, "current device");
    if ((s = cu_devapi_init(st, err))) return s;
    if ((s = cu_scratch_init2(&st->sc, maxt, maxk, maxg, (int *)st->d_out, err))) return s;
    /* activations (pass 1 has 2 positions per stream) */
    const int qw = (H + 2 * KV) * HD;
    ALLOC(st->x, (size_t)2 * B * D * 4);
    ALLOC(st->qkvb, (size_t)2 * B * qw * 4);
    ALLOC(st->att, (size_t)2 * B * H * HD * 4);
    ALLOC(st->ff, (size_t)2 * B * F * 4);
    ALLOC(st->logits, (size_t)B * (c->per_position ? Q : Q - 1) * V * 4);
    ALLOC(st->logits0, (size_t)B * V * 4);
    ALLOC(st->kc, (size_t)L * B * Q * KV * HD * 4);
    ALLOC(st->vc, (size_t)L * B * Q * KV * HD * 4);
    if (c->embed_in_input_space) {
        if (!c->has_in_proj) return dd_fail(err, DD_EMODEL, "backend cuda: input-space code table without in_proj");
        if ((s = precompute_table(st, m, err))) return s;
    } else if ((s = cu_raw_upload(&st->table, &m->embed, 0, m->embed.rows, &st->allocs, &st->nallocs, err))) {
        return s;
    }
    if (c->per_position &&
        (s = cu_raw_upload(&st->text, &m->text_embed, 0, m->text_embed.rows, &st->allocs, &st->nallocs, err)))
        return s;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        dd_plan pl;
        prog p = {0};
        if (!(s = dd_plan_build(&pl, m, (dd_plan_kind)v, err))) s = build(st, m, &pl, &p, err);
        dd_plan_free(&pl);
        if (!s && p.fail) s = dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
        if (s) {
            free(p.op);
            return s;
        }
        st->h_prog[v] = p.op;
        st->nprog[v] = p.n;
        void *dp;
        if ((s = cu_alloc(&dp, (size_t)p.n * sizeof(cu_op), &st->allocs, &st->nallocs, err))) return s;
        CU_TRY(cudaMemcpy(dp, p.op, (size_t)p.n * sizeof(cu_op), cudaMemcpyHostToDevice), err, "program upload");
        st->d_prog[v] = (cu_op *)dp;
    }
    if ((s = lt_create(&st->lt, st, m, err))) return s;
    st->lt_max = lt_default_crossover(st->lt);
    int tmul = 1; /* positions a pass of the largest linear */
    for (int v = 0; v < NPROG; v++)
        for (int i = 0; i < st->nprog[v]; i++)
            if (st->h_prog[v][i].type == CU_OP_LINEAR && st->h_prog[v][i].lin.tmul > tmul)
                tmul = st->h_prog[v][i].lin.tmul;
    if ((s = tp_create(&st->tp, st, B * tmul, err))) return s;
    /* Where the throughput executor covers the model, it takes every batch past the crossover; else it is not used
     * (the latency executor's groups up to 48 streams, the frame kernel above). The crossover, measured with both
     * executors a batch (dev/cuda/exec_ab.c, 2026-12-06 20:2x-20:3x UTC, H100 and H200; docs/cuda_results.md): the
     * latency executor is the faster at 1-3 streams where a pass's weights are bf16 and at most 128 MB (GPT dims
     * bf16, 100 MB: B3 4.91 against 5.08 ms, B4 5.64 against 5.01), at one stream elsewhere (CSM dims bf16 / q8,
     * GPT q8, Qwen3-TTS bf16: the throughput executor faster from B2; GPT q4 within 2 % at B1). */
    st->tp_min = INT_MAX;
    if (tp_covers(st->tp)) {
        const int v = st->h_prog[PROG_DECODE] ? PROG_DECODE : PROG_DECODE_C0;
        double bytes = 0.0; /* the frame program's weight bytes, then a pass's (a sampling op ends a pass) */
        int wide = 1, passes = 0; /* wide: every linear's weights bf16 (the tile's 16-bit type) */
        for (int i = 0; i < st->nprog[v]; i++) {
            const cu_op *o = &st->h_prog[v][i];
            passes += o->type == CU_OP_SAMPLE;
            if (o->type != CU_OP_LINEAR) continue;
            bytes += (double)o->lin.w.MT * o->lin.w.KT * o->lin.w.tile_bytes;
            if (o->lin.w.type != DD_BF16) wide = 0;
        }
        if (passes > 1) bytes /= passes;
        const int cross = wide && bytes <= 128.0 * (1 << 20) ? 3 : 1;
        if (st->lt_max > cross) st->lt_max = cross;
        st->tp_min = 1;
    }
    CU_TRY(cudaDeviceSynchronize(), err, "init");
    return DD_OK;
}

static void cuda_destroy(dd_decoder *d) {
    cu_state *st = (cu_state *)d->impl;
    if (!st) return;
    cudaDeviceSynchronize();
    if (st->sc.grid) cu_scratch_free(&st->sc);
    cu_free_all(st->allocs, st->nallocs);
    if (st->h_in) cudaFreeHost(st->h_in);
    if (st->h_out) cudaFreeHost(st->h_out);
    for (int v = 0; v < NPROG; v++) free(st->h_prog[v]);
    lt_free(st->lt);
    tp_free(st->tp);
    free(st->qkv);
    free(st->bqkv);
    free(st);
    d->impl = NULL;
}

/* ---- decode / score -------------------------------------------------------------------------------------- */

/* The latency executor's groups for a batch of n streams: k launches, the first n % k of q + 1 streams, the rest of
 * q (a batch over lt_max_batch runs as groups of equal size, one after the other: each stream's results are the
 * same in any group, by the numerics contract). */
static void lt_groups(const cu_state *st, int n, int *k, int *q) {
    const int g = lt_max_batch(st->lt);
    *k = (n + g - 1) / g;
    *q = n / *k;
}

int cu_lt_needs_build(const cu_state *st, int v, int n) {
    if (!st->lt || n < 1 || n > st->lt_max) return 0;
    int k, q;
    lt_groups(st, n, &k, &q);
    return !st->lt_built[v][q] || (n % k && !st->lt_built[v][q + 1]);
}

/* One frame of program v for n streams whose inputs are in st->d_in, enqueued on `stream` with no host
 * synchronisation: the latency executor for batches up to st->lt_max (in groups; the plan of each (v, group size)
 * is built, synchronously, on first use: lt_built says which are), else the frame kernel. */
dd_status cu_launch_frame(cu_state *st, int v, int n, float temp, int topk, cudaStream_t stream, dd_error *err) {
    dd_status ls = DD_OK;
    if (st->lt && n <= st->lt_max) {
        int k, q, ok = 1;
        lt_groups(st, n, &k, &q);
        for (int size = q; size <= q + (n % k ? 1 : 0) && ok; size++) {
            ok = lt_can(st->lt, v, size, err, &ls);
            if (ls) return ls;
            st->lt_built[v][size] = 1;
        }
        if (ok) {
            for (int g = 0, r0 = 0; g < k; g++) {
                const int size = q + (g < n % k);
                if ((ls = lt_run(st->lt, v, size, r0, temp, topk, stream, err))) return ls;
                r0 += size;
            }
            return DD_OK;
        }
    }
    if (st->tp && n >= st->tp_min) return tp_run(st->tp, v, n, temp, topk, stream, err);
    return cu_run_program(&st->sc, st->d_prog[v], st->nprog[v], n, temp, topk,
                          (const uint64_t *)(st->d_in + st->off_seeds), (const uint64_t *)(st->d_in + st->off_frames),
                          0, stream, err);
}

/* the host path: inputs through the pinned h_in (one upload), then the frame, on the legacy stream */
static dd_status run(cu_state *st, int v, int n, const float *hidden, const int32_t *c0, const int32_t *codes_in,
                     const int32_t *text, const uint64_t *seeds, const uint64_t *frames, const dd_sampling *s, int Q,
                     int I, dd_error *err) {
    dd_status r = cu_devapi_pending(st, err); /* an earlier device-API frame's error, after waiting for it */
    if (r) return r;
    memcpy(st->h_in, hidden, (size_t)n * I * 4);
    size_t hi_end = (size_t)n * I * 4;
    /* the tail of the block: seeds, frames, c0, codes, text at their fixed offsets (for max_batch) */
    uint64_t *hs = (uint64_t *)(st->h_in + st->off_seeds), *hf = (uint64_t *)(st->h_in + st->off_frames);
    for (int i = 0; i < n; i++) {
        hs[i] = seeds ? seeds[i] : 0;
        hf[i] = frames ? frames[i] : 0;
    }
    if (c0) memcpy(st->h_in + st->off_c0, c0, (size_t)n * 4);
    if (codes_in) memcpy(st->h_in + st->off_codes_in, codes_in, (size_t)n * Q * 4);
    if (text) memcpy(st->h_in + st->off_text, text, (size_t)n * 4); /* Moshi (checked: d->text of the call) */
    size_t tail = st->in_bytes - st->off_seeds;
    CU_TRY(cudaMemcpyAsync(st->d_in, st->h_in, hi_end, cudaMemcpyHostToDevice, 0), err, "input upload");
    CU_TRY(cudaMemcpyAsync(st->d_in + st->off_seeds, st->h_in + st->off_seeds, tail, cudaMemcpyHostToDevice, 0), err,
           "input upload");
    return cu_launch_frame(st, v, n, s ? s->temperature : 0, s ? s->top_k : 0, 0, err);
}

static dd_status cuda_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                             const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err) {
    cu_state *st = (cu_state *)d->impl;
    const dd_config *c = &d->m->cfg;
    const int Q = c->levels;
    int v = c0 ? PROG_DECODE_C0 : PROG_DECODE;
    dd_status r = run(st, v, n, hidden, c0, NULL, d->text, seeds, frames, s, Q, c->input_dim, err);
    if (r) return r;
    size_t ob = 8 + (size_t)n * Q * 4;
    CU_TRY(cudaMemcpyAsync(st->h_out, st->d_out, ob, cudaMemcpyDeviceToHost, 0), err, "result download");
    CU_TRY(cudaStreamSynchronize(0), err, "frame kernel");
    if ((r = cu_check_error_words(&st->sc, (const int *)st->h_out, err))) return r;
    memcpy(codes, st->h_out + 8, (size_t)n * Q * 4);
    return DD_OK;
}

static dd_status cuda_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                            float *logits0, dd_error *err) {
    cu_state *st = (cu_state *)d->impl;
    const dd_config *c = &d->m->cfg;
    const int Q = c->levels, V = c->codebook_size;
    int v = logits0 ? PROG_SCORE_L0 : PROG_SCORE;
    dd_status r = run(st, v, n, hidden, NULL, codes, d->text, NULL, NULL, NULL, Q, c->input_dim, err);
    if (r) return r;
    CU_TRY(cudaMemcpyAsync(st->h_out, st->d_out, 8, cudaMemcpyDeviceToHost, 0), err, "result download");
    CU_TRY(cudaStreamSynchronize(0), err, "frame kernel");
    if ((r = cu_check_error_words(&st->sc, (const int *)st->h_out, err))) return r;
    if (c->per_position) { /* st->logits [n, Q, V]: levels 1 .. Q-1, and level 0 (position 0's head) */
        const size_t lb = (size_t)V * 4;
        CU_TRY(cudaMemcpy2D(logits, (Q - 1) * lb, st->logits + V, Q * lb, (Q - 1) * lb, n, cudaMemcpyDeviceToHost),
               err, "logits");
        if (logits0)
            CU_TRY(cudaMemcpy2D(logits0, lb, st->logits, Q * lb, lb, n, cudaMemcpyDeviceToHost), err, "logits0");
        return DD_OK;
    }
    CU_TRY(cudaMemcpy(logits, st->logits, (size_t)n * (Q - 1) * V * 4, cudaMemcpyDeviceToHost), err, "logits");
    if (logits0) CU_TRY(cudaMemcpy(logits0, st->logits0, (size_t)n * V * 4, cudaMemcpyDeviceToHost), err, "logits0");
    return DD_OK;
}

/* test hook: batches of at most nmax streams run on the latency executor (0: none; over lt_max_batch: in groups;
 * < 0: unchanged); returns the bound before the call */
extern "C" int dd_cuda_test_crossover(dd_decoder *d, int nmax) {
    cu_state *st = (cu_state *)d->impl;
    const int was = st->lt_max;
    if (nmax >= 0) st->lt_max = st->lt ? nmax : 0;
    return was;
}

/* test hook: batches of at least nmin streams (past the latency executor's) run on the throughput executor (0:
 * none; < 0: unchanged); returns 0 when this decoder has none (no sm_90a device or build) */
extern "C" int dd_cuda_test_tput(dd_decoder *d, int nmin) {
    cu_state *st = (cu_state *)d->impl;
    if (nmin >= 0) st->tp_min = nmin > 0 ? nmin : INT_MAX;
    return st->tp ? 1 + tp_covers(st->tp) : 0; /* 2: every linear of the model runs on the tile */
}

extern "C" const dd_backend_vt dd_cuda_backend = {"cuda",           cuda_init,       cuda_destroy,
                                                   cuda_decode,      cuda_score,      cu_decode_device,
                                                   cu_score_device,  cu_decoder_sync};
