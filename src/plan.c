/* The frame plan (plan.h): SPEC §1-§2 as a list of ops, built once per decoder and request kind. */
#include "plan.h"
#include "kernels.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

typedef struct builder {
    dd_plan *p;
    int cap, pass;
    int full; /* an op did not fit (a capacity bug): dd_plan_build fails */
} builder;

static dd_plan_op *push(builder *B, int kind) {
    dd_plan *p = B->p;
    if (p->n == B->cap) { /* the capacity in dd_plan_build is exact: never reached */
        B->full = 1;
        return NULL;
    }
    dd_plan_op *o = &p->op[p->n++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->pass = B->pass;
    return o;
}

static dd_plan_rows rows(int buf, int span, int first, int n) {
    return (dd_plan_rows){(uint8_t)buf, (uint8_t)span, (uint8_t)first, (uint8_t)n, 0};
}
static dd_plan_rows all(int buf, int P) { return rows(buf, P, 0, P); }

static dd_plan_linear *linear(builder *B, dd_plan_rows y, dd_plan_rows x, const dd_weight *w, const float *bias,
                              int mat, int entry) {
    dd_plan_op *o = push(B, DD_OP_LINEAR);
    if (!o) return NULL;
    o->lin.y = y;
    o->lin.x = x;
    o->lin.nseg = 1;
    o->lin.seg[0] = (dd_linear_seg){w, NULL, bias, NULL};
    o->lin.mat = mat;
    o->lin.entry = entry;
    return &o->lin;
}

static void normed(dd_plan_linear *L, const dd_config *c, const float *w, const float *b) {
    L->norm = c->block == DD_BLOCK_GPT ? DD_NORM_LAYER : DD_NORM_RMS;
    L->norm_w = w;
    L->norm_b = b;
    L->eps = c->norm_eps;
}

static void gather(builder *B, dd_plan_rows dst, int src, int level, int width, int pos) {
    dd_plan_op *o = push(B, DD_OP_GATHER);
    if (o) o->gat = (dd_plan_gather){dst, src, level, width, pos};
}

/* Ops of one pass over the rows in X (P per stream, positions p0 ..); per-position models use the layers' slice
 * p0 (their passes have one position). */
static void layers(builder *B, const dd_model *m, int P, int p0) {
    const dd_config *c = &m->cfg;
    const int gpt = c->block == DD_BLOCK_GPT;
    for (int li = 0; li < c->layers; li++) {
        const dd_layer *l = dd_model_layer(m, p0, li);
        const int e = (int)(l - m->layer); /* its layer entry */
        dd_plan_linear *L = linear(B, all(DD_BUF_QKV, P), all(DD_BUF_X, P), &l->wq, l->bq, DD_MAT_QKV, e);
        if (!L) return;
        L->nseg = 3;
        L->seg[1] = (dd_linear_seg){&l->wk, NULL, l->bk, NULL};
        L->seg[2] = (dd_linear_seg){&l->wv, NULL, l->bv, NULL};
        normed(L, c, l->norm1_w, l->norm1_b);

        dd_plan_op *o = push(B, DD_OP_ATTEND);
        if (!o) return;
        o->att = (dd_plan_attend){.out = all(DD_BUF_ATT, P), .qkv = all(DD_BUF_QKV, P), .layer = li, .P = P,
                                  .p0 = p0, .H = c->heads, .KVH = c->kv_heads, .HD = c->head_dim,
                                  .rope = c->has_rope, .qk_norm = c->has_qk_norm, .entry = e};

        if (!(L = linear(B, all(DD_BUF_X, P), all(DD_BUF_ATT, P), &l->wo, l->bo, DD_MAT_OUT, e))) return;
        L->residual = 1;

        if (!(L = linear(B, all(DD_BUF_FF, P), all(DD_BUF_X, P), &l->fc1, l->b1, DD_MAT_FC1, e))) return;
        if (!gpt) L->seg[0].w2 = &l->up;
        L->act = gpt ? DD_ACT_GELU : DD_ACT_SWIGLU;
        normed(L, c, l->norm2_w, l->norm2_b);

        if (!(L = linear(B, all(DD_BUF_X, P), all(DD_BUF_FF, P), &l->fc2, l->b2, DD_MAT_FC2, e))) return;
        L->residual = 1;
    }
}

/* The two inputs of pass 1 for each stream: row 0 = in(h), row 1 = emb0(c0) (+ learned positions 0, 1). */
static void prelude_inputs(builder *B, const dd_model *m) {
    const dd_config *c = &m->cfg;
    const int D = c->dim, I = c->input_dim, pos = m->pos != NULL;
    switch (B->p->in) {
    case DD_IN_IDENTITY:
        gather(B, rows(DD_BUF_X, 2, 0, 1), DD_GATHER_HIDDEN, 0, D, pos ? 0 : -1);
        gather(B, rows(DD_BUF_X, 2, 1, 1), DD_GATHER_EMBED, 0, D, pos ? 1 : -1);
        break;
    case DD_IN_PROJ: {
        gather(B, rows(DD_BUF_X, 2, 1, 1), DD_GATHER_EMBED, 0, D, pos ? 1 : -1);
        dd_plan_linear *L = linear(B, rows(DD_BUF_X, 2, 0, 1), all(DD_BUF_HIDDEN, 1), &m->in_proj, m->in_bias,
                                   DD_MAT_IN_PROJ, 0);
        if (L) L->add = m->pos; /* pos[0] */
        break;
    }
    case DD_IN_PROJ_PER_PASS: {
        gather(B, rows(DD_BUF_XIN, 2, 0, 1), DD_GATHER_HIDDEN, 0, I, -1);
        gather(B, rows(DD_BUF_XIN, 2, 1, 1), DD_GATHER_EMBED, 0, I, -1);
        linear(B, all(DD_BUF_X, 2), all(DD_BUF_XIN, 2), &m->in_proj, m->in_bias, DD_MAT_IN_PROJ, 0);
        dd_plan_op *o = pos ? push(B, DD_OP_ADD_POS) : NULL;
        if (o) o->pos = (dd_plan_add_pos){all(DD_BUF_X, 2), 0};
        break;
    }
    case DD_IN_PER_POSITION: break; /* its frame has no two-position pass (per_position_frame) */
    }
}

/* Moshi's frame (plan.h): Q passes of one position, slice p of every weight in pass p. */
static void per_position_frame(builder *B, const dd_model *m, dd_plan_kind kind) {
    dd_plan *p = B->p;
    const int Q = m->cfg.levels, decode = kind == DD_PLAN_DECODE_C0 || kind == DD_PLAN_DECODE;
    for (int l = 0; l < Q; l++) {
        B->pass = l + 1;
        if (l == 0 && kind == DD_PLAN_DECODE_C0) push(B, DD_OP_CODE_C0);
        /* the input row: the text token (position 0) or the previous level's code, + in_proj[l] . h */
        gather(B, all(DD_BUF_X, 1), l == 0 ? DD_GATHER_TEXT : DD_GATHER_EMBED, l > 0 ? l - 1 : 0, m->cfg.dim, -1);
        dd_plan_linear *L = linear(B, all(DD_BUF_X, 1), all(DD_BUF_HIDDEN, 1), &p->inp[l], NULL, DD_MAT_IN_PROJ, l);
        if (!L) return;
        L->residual = 1;
        layers(B, m, 1, l);
        if (l == 0 && kind != DD_PLAN_DECODE && kind != DD_PLAN_SCORE_L0) continue; /* c0 given or not wanted */
        dd_plan_rows y = all(l == 0 ? DD_BUF_LOGITS0 : DD_BUF_LOGITS, 1);
        y.level = (uint8_t)l;
        linear(B, y, all(DD_BUF_X, 1), &p->head[l], NULL, DD_MAT_HEAD, l); /* no final norm */
        if (decode) {
            dd_plan_op *o = push(B, DD_OP_SAMPLE);
            if (o) o->smp = (dd_plan_sample){y, l};
        }
    }
}

dd_status dd_plan_build(dd_plan *p, const dd_model *m, dd_plan_kind kind, dd_error *err) {
    memset(p, 0, sizeof *p);
    const dd_config *c = &m->cfg;
    const int Q = c->levels, V = c->codebook_size, D = c->dim, I = c->input_dim;
    const int decode = kind == DD_PLAN_DECODE_C0 || kind == DD_PLAN_DECODE;
    if ((kind == DD_PLAN_DECODE || kind == DD_PLAN_SCORE_L0) && !c->has_head0)
        return dd_fail(err, DD_EINVAL, "%s: plan %s needs head0, which the model lacks", m->source,
                       dd_plan_kind_name(kind));
    p->kind = kind;
    p->in = c->per_position ? DD_IN_PER_POSITION
            : c->embed_in_input_space ? DD_IN_PROJ_PER_PASS
            : c->has_in_proj          ? DD_IN_PROJ
                                      : DD_IN_IDENTITY;
    if (p->in == DD_IN_PROJ_PER_PASS && !c->has_in_proj)
        return dd_fail(err, DD_EINVAL, "%s: embeddings in input space need in_proj", m->source);
    p->width[DD_BUF_HIDDEN] = I;
    p->width[DD_BUF_XIN] = p->in == DD_IN_PROJ_PER_PASS ? I : 0;
    p->width[DD_BUF_X] = D;
    p->width[DD_BUF_QKV] = (c->heads + 2 * c->kv_heads) * c->head_dim;
    p->width[DD_BUF_ATT] = c->heads * c->head_dim;
    p->width[DD_BUF_FF] = c->ffn_dim;
    p->width[DD_BUF_LOGITS0] = V;
    p->width[DD_BUF_LOGITS] = V;
    p->rows_max = c->per_position ? 1 : 2;

    /* capacity: prelude <= 6 ops; a pass: 5 per layer, head, sample, gather, in_proj (per-position: Q passes and
     * CODE_C0) */
    builder B = {p, 6 + Q * (5 * c->layers + 4), 0, 0};
    const int nh = c->per_position ? Q : Q - 1;
    p->op = malloc((size_t)B.cap * sizeof *p->op);
    p->head = malloc((size_t)nh * sizeof *p->head);
    p->inp = c->per_position ? malloc((size_t)Q * sizeof *p->inp) : NULL;
    if (!p->op || !p->head || (c->per_position && !p->inp))
        return dd_fail(err, DD_ENOMEM, "%s: out of memory for the frame plan", m->source);
    for (int l = 0; l < nh; l++) p->head[l] = dd_weight_rows(&m->heads, (int64_t)l * V, V);
    if (c->per_position) {
        for (int l = 0; l < Q; l++) p->inp[l] = dd_weight_rows(&m->in_proj, (int64_t)l * D, D);
        per_position_frame(&B, m, kind);
        if (B.full) return dd_fail(err, DD_EINVAL, "%s: frame plan: more ops than its capacity (a bug)", m->source);
        return DD_OK;
    }

    /* prelude: level 0's code, pass 1's inputs */
    if (kind == DD_PLAN_DECODE || kind == DD_PLAN_SCORE_L0)
        linear(&B, all(DD_BUF_LOGITS0, 1), all(DD_BUF_HIDDEN, 1), &m->head0, NULL, DD_MAT_HEAD0, 0);
    if (kind == DD_PLAN_DECODE) {
        dd_plan_op *o = push(&B, DD_OP_SAMPLE);
        if (o) o->smp = (dd_plan_sample){all(DD_BUF_LOGITS0, 1), 0};
    } else if (kind == DD_PLAN_DECODE_C0) {
        push(&B, DD_OP_CODE_C0);
    }
    prelude_inputs(&B, m);

    for (int l = 1; l < Q; l++) {
        const int P = l == 1 ? 2 : 1, p0 = l == 1 ? 0 : l, last = l == Q - 1;
        B.pass = l;
        layers(&B, m, P, p0);
        dd_plan_rows y = all(DD_BUF_LOGITS, 1);
        y.level = (uint8_t)l;
        dd_plan_linear *L = linear(&B, y, rows(DD_BUF_X, P, P - 1, 1), &p->head[l - 1], NULL, DD_MAT_HEAD, l - 1);
        if (L) normed(L, c, m->norm_w, m->norm_b);
        if (decode) {
            dd_plan_op *o = push(&B, DD_OP_SAMPLE);
            if (o) o->smp = (dd_plan_sample){y, l};
        }
        if (last) break; /* the last level's code is not read */
        /* pass l+1's input: emb l(c_l) at position l+1 */
        if (p->in == DD_IN_PROJ_PER_PASS) {
            gather(&B, all(DD_BUF_XIN, 1), DD_GATHER_EMBED, l, I, -1);
            linear(&B, all(DD_BUF_X, 1), all(DD_BUF_XIN, 1), &m->in_proj, m->in_bias, DD_MAT_IN_PROJ, 0);
            /* no learned positions here: a CSM-layout (llama) model has none (model.c rejects pos.weight) */
        } else {
            gather(&B, all(DD_BUF_X, 1), DD_GATHER_EMBED, l, D, m->pos ? l + 1 : -1);
        }
    }
    if (B.full) return dd_fail(err, DD_EINVAL, "%s: frame plan: more ops than its capacity (a bug)", m->source);
    return DD_OK;
}

void dd_plan_free(dd_plan *p) {
    if (!p) return;
    free(p->op);
    free(p->head);
    free(p->inp);
    memset(p, 0, sizeof *p);
}

const char *dd_plan_kind_name(dd_plan_kind kind) {
    static const char *const names[] = {"decode-c0", "decode", "score", "score-l0"};
    return (unsigned)kind < DD_PLAN_NKIND ? names[kind] : "?";
}
