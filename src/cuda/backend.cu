/* The cuda backend (dd_cuda_backend): decoder state on the device and the frame programs.
 *
 * At decoder creation every weight is uploaded once in its stored type (upload.cu); q/k/v are fused into one
 * matrix, llama gate/up into one interleaved pair; CSM's code table, which lives in the backbone's input space,
 * is pushed through in_proj once on the device (in(table), float32, the same kernel and hence the same numbers
 * as doing it per pass); four programs are built: decode with c0 given, decode sampling c0 from head0, score,
 * score with logits0. A call uploads one packed input block (hidden, seeds, frames, c0), launches the frame
 * kernel once (frame.cu) or the latency executor (lat.cu) and reads back one packed block (error words + codes):
 * no other host traffic. The device API (devapi.cu) stages the caller's device arrays into the same block with a
 * kernel instead and runs the same launch on the caller's stream.
 *
 * Program of a frame (per pass l = 1 .. Q-1, P = 2 new positions in pass 1 else 1, tokens T = n P):
 *   per layer: qkv (norm1 prologue) [+ attention, fused on the small schedule] | out (+ residual) |
 *              fc1 (norm2 prologue, GELU or SwiGLU) | fc2 (+ residual)
 *   head (final norm prologue, last position of each stream) [+ sample and gather of the next input, fused]
 * with a grid barrier at each '|'.
 * Moshi's depformer (per-position weights, docs/semantics.md; build_per_position): Q passes of one position, pass p
 * with slice p of every matrix: its input row is gathered (pass 0: text_embed[t]; pass p: code table p - 1 at
 * c(p-1), by the previous pass's sampler), then in_proj[p] . h is added to it (a linear with the row as its
 * residual); the layers; head p without a norm; sample level p (and gather pass p + 1's row).
 */
#include "cu_state.cuh"

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

/* Attention and sampling run as ops of their own over the whole grid. (A variant that ran them inside the last
 * block of the qkv / head linear (cu_op.lin.fuse) was slower on the H200 — 13.37 vs 11.17 ms/frame, GPT bf16 batch
 * 1 — and is no longer selectable; the frame kernel keeps its code until the new executors replace it.) */

/* The layers of one pass over st->x (P positions per stream, positions p0 ..), with the weights of layer entries
 * e0 .. e0 + L - 1 (e0 = p L: slice p of a per-position model, else 0). */
static void push_layers(cu_state *st, const dd_model *m, prog *p, int e0, int P, int p0) {
    const dd_config *c = &m->cfg;
    const int D = c->dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim, Q = c->levels,
              L = c->layers, B = st->B;
    const int qw = (H + 2 * KV) * HD, aw = H * HD, kvw = KV * HD, gpt = c->block == DD_BLOCK_GPT;
    const int nrm = gpt ? DD_NORM_LAYER : DD_NORM_RMS;
    const float eps = c->norm_eps;
    for (int li = 0; li < L; li++) {
        const int e = e0 + li;
        push_lin(p, &st->qkv[e], st->bqkv[e], NULL, nrm, st->n1w[e], st->n1b[e], eps, DD_ACT_NONE, st->x, D, st->qkvb,
                 qw, NULL, 0, NULL, 0, P, 1);
        cu_op *oa = push(p, CU_OP_ATTEND, 1);
        cu_attend *A = &oa->att;
        A->qkv = st->qkvb;
        A->out = st->att;
        A->kc = st->kc + (size_t)li * B * Q * kvw;
        A->vc = st->vc + (size_t)li * B * Q * kvw;
        A->cstride = (size_t)Q * kvw;
        A->P = P;
        A->p0 = p0;
        A->H = H;
        A->KVH = KV;
        A->HD = HD;
        A->rope = st->rope;
        A->qn = st->qn[e];
        A->kn = st->kn[e];
        A->qk_eps = eps;
        push_lin(p, &st->wo[e], st->bo[e], NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, st->att, aw, st->x, D,
                 st->x, D, NULL, 0, P, 1);
        push_lin(p, &st->fc1[e], st->b1[e], NULL, nrm, st->n2w[e], st->n2b[e], eps, gpt ? DD_ACT_GELU : DD_ACT_SWIGLU,
                 st->x, D, st->ff, F, NULL, 0, NULL, 0, P, 1);
        push_lin(p, &st->fc2[e], st->b2[e], NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, st->ff, F, st->x, D,
                 st->x, D, NULL, 0, P, 1);
    }
}

/* Moshi's frame (the file comment; plan.c per_position_frame; ref.c frame_per_position): Q passes of one position.
 * The input row of pass p: the gather writes the table row into x, then in_proj[p] . h is added to it (x as the
 * linear's residual: the same fl(acc + row) as the latency executor). The head of pass 0 is skipped when c0 is
 * given or its logits are not wanted; its keys and values are still needed. st->logits is [B, Q, V] here. */
static void build_per_position(cu_state *st, const dd_model *m, int variant, prog *p) {
    const dd_config *c = &m->cfg;
    const int D = c->dim, I = c->input_dim, V = c->codebook_size, Q = c->levels, L = c->layers;
    const float eps = c->norm_eps;
    const float *hidden = (const float *)st->d_in;
    int32_t *codes_out = (int32_t *)(st->d_out + 8);
    const int32_t *codes_in = (const int32_t *)(st->d_in + st->off_codes_in);
    const int32_t *c0 = (const int32_t *)(st->d_in + st->off_c0);
    const int32_t *text = (const int32_t *)(st->d_in + st->off_text);
    const int decode = variant == PROG_DECODE_C0 || variant == PROG_DECODE;
    /* pass 0's row: text_embed[t] */
    cu_sample *S = push_gather(p, &st->text, 0, st->x, D, NULL, 1);
    S->forced = 1;
    S->code_in = text;
    S->ldi = 1;
    for (int l = 0; l < Q; l++) {
        push_lin(p, &st->inps[l], NULL, NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, hidden, I, st->x, D, st->x, D,
                 NULL, 0, 1, 1);
        push_layers(st, m, p, l * L, 1, l);
        const int given0 = l == 0 && variant == PROG_DECODE_C0;
        if (l > 0 || variant == PROG_DECODE || variant == PROG_SCORE_L0) /* no final norm */
            push_lin(p, &st->heads[l], NULL, NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, st->x, D,
                     st->logits + (size_t)l * V, Q * V, NULL, 0, NULL, 0, 1, 1);
        const int last = l == Q - 1;
        if (!decode && last) continue;
        /* level l's code (sampled, given or teacher-forced), and pass l + 1's row: code table l at it */
        S = push_gather(p, &st->table, l * m->embed_rows, st->x, D, NULL, 1);
        S->gather = !last;
        S->level = l;
        if (decode && !given0) {
            S->logits = st->logits + (size_t)l * V;
            S->ldl = Q * V;
            S->V = V;
            S->code_out = codes_out + l;
            S->ldo = Q;
        } else {
            S->forced = 1;
            S->code_in = given0 ? c0 : codes_in + l;
            S->ldi = given0 ? 1 : Q;
            S->code_out = decode ? codes_out : NULL;
            S->ldo = Q;
        }
    }
}

static void build(cu_state *st, const dd_model *m, int variant, prog *p) {
    const dd_config *c = &m->cfg;
    if (c->per_position) {
        build_per_position(st, m, variant, p);
        return;
    }
    const int D = c->dim, I = c->input_dim, V = c->codebook_size, Q = c->levels, B = st->B;
    const int nrm = c->block == DD_BLOCK_GPT ? DD_NORM_LAYER : DD_NORM_RMS;
    const float eps = c->norm_eps;
    const float *hidden = (const float *)st->d_in;
    int32_t *codes_out = (int32_t *)(st->d_out + 8);
    const int32_t *codes_in = (const int32_t *)(st->d_in + st->off_codes_in);
    const int32_t *c0 = (const int32_t *)(st->d_in + st->off_c0);
    int decode = variant == PROG_DECODE_C0 || variant == PROG_DECODE;

    /* position 0: in(h) (+ pos[0]) into x rows 2s */
    if (c->has_in_proj) {
        push_lin(p, &st->in_proj, st->in_bias, NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, hidden, I, st->x,
                 2 * D, NULL, 0, st->pos, 0, 1, 0);
    } else {
        cu_raw hr = {DD_F32, B, I, (const uint8_t *)hidden, (size_t)I * 4, NULL, NULL, 0, 0, 0};
        cu_sample *S = push_gather(p, &hr, 0, st->x, 2 * D, st->pos, 0);
        S->forced = 1;
        S->code_is_stream = 1;
    }
    /* position 1: emb0(c0) (+ pos[1]) into x rows 2s+1 */
    const float *pos1 = st->pos ? st->pos + D : NULL;
    if (variant == PROG_DECODE) {
        push_lin(p, &st->head0, NULL, NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, hidden, I,
                                 st->logits0, V, NULL, 0, NULL, 0, 1, 1);
        cu_sample *S = push_gather(p, &st->table, 0, st->x + D, 2 * D, pos1, 1);
        S->logits = st->logits0;
        S->ldl = V;
        S->V = V;
        S->level = 0;
        S->code_out = codes_out;
        S->ldo = Q;
    } else {
        if (variant == PROG_SCORE_L0)
            push_lin(p, &st->head0, NULL, NULL, DD_NORM_NONE, NULL, NULL, eps, DD_ACT_NONE, hidden, I, st->logits0,
                     V, NULL, 0, NULL, 0, 1, 0);
        cu_sample *S = push_gather(p, &st->table, 0, st->x + D, 2 * D, pos1, 1);
        S->forced = 1;
        S->code_in = variant == PROG_DECODE_C0 ? c0 : codes_in;
        S->ldi = variant == PROG_DECODE_C0 ? 1 : Q;
        S->code_out = decode ? codes_out : NULL;
        S->ldo = Q;
        S->level = 0;
    }
    for (int l = 1; l < Q; l++) {
        const int P = l == 1 ? 2 : 1, p0 = l == 1 ? 0 : l;
        push_layers(st, m, p, 0, P, p0);
        /* head of level l on the last position of each stream */
        push_lin(p, &st->heads[l - 1], NULL, NULL, nrm, st->norm_w, st->norm_b, eps, DD_ACT_NONE,
                                 st->x + (size_t)(P - 1) * D, P * D, st->logits + (size_t)(l - 1) * V, (Q - 1) * V,
                                 NULL, 0, NULL, 0, 1, 1);
        int last = l == Q - 1;
        if (!decode && last) continue;
        cu_sample *S = push_gather(p, &st->table, l * V, st->x, D, st->pos && !last ? st->pos + (size_t)(l + 1) * D : NULL,
                                   1);
        S->gather = !last;
        S->level = l;
        if (decode) {
            S->logits = st->logits + (size_t)(l - 1) * V;
            S->ldl = (Q - 1) * V;
            S->V = V;
            S->code_out = codes_out + l;
            S->ldo = Q;
        } else {
            S->forced = 1;
            S->code_in = codes_in + l;
            S->ldi = Q;
        }
    }
}

/* ---- init ------------------------------------------------------------------------------------------------ */

static void cuda_destroy(dd_decoder *d);

#define ALLOC(ptr, bytes)                                                                                          \
    do {                                                                                                           \
        void *p_;                                                                                                  \
        if ((s = cu_alloc(&p_, (bytes), &st->allocs, &st->nallocs, err))) return s;                                \
        ptr = (decltype(ptr))p_;                                                                                   \
    } while (0)

static dd_status upload_weights(cu_state *st, const dd_model *m, dd_error *err) {
    const dd_config *c = &m->cfg;
    const int L = c->layers, Q = c->levels, V = c->codebook_size, D = c->dim, H = c->heads, KV = c->kv_heads,
              HD = c->head_dim;
    const int gpt = c->block == DD_BLOCK_GPT, qw = (H + 2 * KV) * HD;
    dd_status s = DD_OK;
    void ***A = &st->allocs;
    int *NA = &st->nallocs;
    /* layer entries (cu_state): the model's layer array as it is, m->layer[p L + li] = slice p of layer li */
    const int ns = m->nslices, NE = ns * L, nh = c->per_position ? Q : Q - 1;
    st->ns = ns;
    st->qkv = (cu_mat *)calloc((size_t)NE * 4 + 2 * (size_t)Q, sizeof(cu_mat));
    st->bqkv = (float **)calloc((size_t)NE * 10, sizeof(float *));
    if (!st->qkv || !st->bqkv) return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
    st->wo = st->qkv + NE;
    st->fc1 = st->wo + NE;
    st->fc2 = st->fc1 + NE;
    st->heads = st->fc2 + NE;
    st->inps = c->per_position ? st->heads + Q : NULL;
    st->bo = st->bqkv + NE;
    st->b1 = st->bo + NE;
    st->b2 = st->b1 + NE;
    st->n1w = st->b2 + NE;
    st->n1b = st->n1w + NE;
    st->n2w = st->n1b + NE;
    st->n2b = st->n2w + NE;
    st->qn = st->n2b + NE;
    st->kn = st->qn + NE;
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
    /* packed io */
    size_t off = (size_t)B * I * 4;
    st->off_seeds = off;
    off += (size_t)B * 8;
    st->off_frames = off;
    off += (size_t)B * 8;
    st->off_c0 = off;
    off += (size_t)B * 4;
    st->off_codes_in = off;
    off += (size_t)B * Q * 4;
    st->off_text = off;
    off += c->text_vocab ? (size_t)B * 4 : 0;
    st->in_bytes = off;
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
        prog p = {0};
        build(st, m, v, &p);
        if (p.fail) {
            free(p.op);
            return dd_fail(err, DD_ENOMEM, "backend cuda: out of memory");
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

/* test hook: batches of at most nmax streams run on the latency executor (0: none; over lt_max_batch: in groups) */
extern "C" void dd_cuda_test_crossover(dd_decoder *d, int nmax) {
    cu_state *st = (cu_state *)d->impl;
    st->lt_max = st->lt ? nmax : 0;
}

extern "C" const dd_backend_vt dd_cuda_backend = {"cuda",           cuda_init,       cuda_destroy,
                                                   cuda_decode,      cuda_score,      cu_decode_device,
                                                   cu_score_device,  cu_decoder_sync};
