/* Reference backend: SPEC §1-§2 as plain loops — the oracle every fast backend is judged by. Never optimized.
 *
 * Numerics: activations are stored as float32 (as in every backend), but every dot product, norm statistic and
 * softmax accumulates in double, and GELU/SiLU/exp are evaluated in double, so the oracle is sharper than any
 * float32 kernel. Streams are decoded one at a time, position by position: because attention is causal, running
 * position p through all layers before position p+1 is the same computation as running a pass's positions
 * together, layer by layer.
 */
#include "registry.h" /* backend.h, and the declaration of this backend's vtable */
#include "sample.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_state {
    float *row;    /* [max cols] one dequantized weight row */
    float *x;      /* [D] residual stream of the current position */
    float *n;      /* [D] normalized x */
    float *q;      /* [H*HD] */
    float *att;    /* [H*HD] attention output */
    float *ff;     /* [F] mlp hidden */
    float *tmp;    /* [input_dim] */
    float *kc, *vc;/* [L][Q][KVH*HD] this frame's KV cache */
    float *logits; /* [V] */
    double *rope;  /* [Q][HD/2][2] cos, sin of position p, pair j (dd_rope_table), llama only */
} ref_state;

/* y[r] = W[r,:] . x (+ b[r]), r < W.rows; double accumulation. y (W.rows), x (W.cols). */
static void matvec(const dd_weight *w, const float *b, const float *x, float *y, float *row) {
    for (int64_t r = 0; r < w->rows; r++) {
        dd_weight_row_f32(w, r, row);
        double acc = 0;
        for (int64_t k = 0; k < w->cols; k++) acc += (double)row[k] * x[k];
        y[r] = (float)(acc + (b ? b[r] : 0.0));
    }
}

/* LayerNorm (b != NULL: gpt) or RMSNorm (b == NULL: llama) of x[D] into out. */
static void norm(const float *x, const float *w, const float *b, int D, float eps, float *out) {
    double mean = 0, var = 0;
    if (b) {
        for (int i = 0; i < D; i++) mean += x[i];
        mean /= D;
    }
    for (int i = 0; i < D; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= D;
    double inv = 1.0 / sqrt(var + (double)eps);
    for (int i = 0; i < D; i++) out[i] = (float)(((double)x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0));
}

/* HF "rotate half" RoPE on one head vector v[HD] at position p: pairs (j, j + HD/2), by the angle
 * p * inv_freq[j] whose cos and sin (double) dd_rope_table stored in cs. */
static void rope(float *v, int HD, int p, const double *cs) {
    int h = HD / 2;
    for (int j = 0; j < h; j++) {
        double c = cs[((size_t)p * h + j) * 2], s = cs[((size_t)p * h + j) * 2 + 1];
        double x0 = v[j], x1 = v[j + h];
        v[j] = (float)(x0 * c - x1 * s);
        v[j + h] = (float)(x1 * c + x0 * s);
    }
}

/* Run position p (input x[D], overwritten by the final residual) through every layer, appending its K/V. */
static void step(ref_state *st, const dd_model *m, int p) {
    const dd_config *c = &m->cfg;
    int D = c->dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim, Q = c->levels;
    int gpt = c->block == DD_BLOCK_GPT, kvw = KV * HD;
    float *x = st->x, *n = st->n;
    for (int li = 0; li < c->layers; li++) {
        const dd_layer *l = dd_model_layer(m, p, li); /* per-position models: slice p of every matrix */
        float *kc = st->kc + ((size_t)li * Q) * kvw, *vc = st->vc + ((size_t)li * Q) * kvw;
        /* attention */
        norm(x, l->norm1_w, l->norm1_b, D, c->norm_eps, n);
        matvec(&l->wq, l->bq, n, st->q, st->row);
        matvec(&l->wk, l->bk, n, kc + (size_t)p * kvw, st->row);
        matvec(&l->wv, l->bv, n, vc + (size_t)p * kvw, st->row);
        if (l->q_norm) { /* Qwen3: each q and k head RMS-normed over HD before RoPE */
            for (int h = 0; h < H; h++) norm(st->q + h * HD, l->q_norm, NULL, HD, c->norm_eps, st->q + h * HD);
            for (int h = 0; h < KV; h++) {
                float *kh = kc + (size_t)p * kvw + h * HD;
                norm(kh, l->k_norm, NULL, HD, c->norm_eps, kh);
            }
        }
        if (c->has_rope) {
            for (int h = 0; h < H; h++) rope(st->q + h * HD, HD, p, st->rope);
            for (int h = 0; h < KV; h++) rope(kc + (size_t)p * kvw + h * HD, HD, p, st->rope);
        }
        for (int h = 0; h < H; h++) {
            int kh = h / (H / KV); /* GQA: query head h reads kv head h / (H/KV) */
            const float *qh = st->q + h * HD;
            double sc[DD_MAX_LEVELS], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)qh[i] * kc[(size_t)j * kvw + kh * HD + i];
                sc[j] = d / sqrt((double)HD);
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int j = 0; j <= p; j++) o += sc[j] / sum * vc[(size_t)j * kvw + kh * HD + i];
                st->att[h * HD + i] = (float)o;
            }
        }
        matvec(&l->wo, l->bo, st->att, n, st->row);
        for (int i = 0; i < D; i++) x[i] += n[i];
        /* mlp */
        norm(x, l->norm2_w, l->norm2_b, D, c->norm_eps, n);
        matvec(&l->fc1, l->b1, n, st->ff, st->row);
        if (gpt) {
            for (int i = 0; i < F; i++) {
                double v = st->ff[i];
                st->ff[i] = (float)(0.5 * v * (1.0 + erf(v / sqrt(2.0)))); /* exact GELU */
            }
        } else {
            /* SwiGLU: ff holds the gate rows' outputs; each up row is applied as it is paired */
            for (int r = 0; r < F; r++) {
                dd_weight_row_f32(&l->up, r, st->row);
                double u = 0;
                for (int k = 0; k < D; k++) u += (double)st->row[k] * n[k];
                double g = st->ff[r];
                st->ff[r] = (float)(g / (1.0 + exp(-g)) * u);
            }
        }
        matvec(&l->fc2, l->b2, st->ff, n, st->row);
        for (int i = 0; i < D; i++) x[i] += n[i];
    }
}

/* Load position p's input into st->x: p == 0 -> in(h); p >= 1 -> emb(p-1)(code); plus learned positions. */
static void input(ref_state *st, const dd_model *m, int p, const float *h, int code) {
    const dd_config *c = &m->cfg;
    int D = c->dim, V = c->codebook_size;
    const float *src = h;
    if (p > 0) {
        if (c->embed_in_input_space) {
            dd_weight_row_f32(&m->embed, (int64_t)(p - 1) * V + code, st->tmp); /* flat table: c + j*V */
            src = st->tmp;
        } else {
            dd_weight_row_f32(&m->embed, (int64_t)(p - 1) * V + code, st->x);
            src = NULL;
        }
    }
    if (src) {
        if (c->has_in_proj) matvec(&m->in_proj, m->in_bias, src, st->x, st->row);
        else memcpy(st->x, src, (size_t)D * sizeof(float));
    }
    if (m->pos)
        for (int i = 0; i < D; i++) st->x[i] += m->pos[(size_t)p * D + i];
}

/* Moshi: position p's input = its table row (p == 0: text_embed[id], the frame's text token; p >= 1: code table
 * p-1 at id = c(p-1), whose V+1 rows include the pad/initial id V) + in_proj slice p . h, summed in double. */
static void input_per_position(ref_state *st, const dd_model *m, int p, const float *h, int id) {
    const dd_config *c = &m->cfg;
    const int D = c->dim;
    if (p == 0) dd_weight_row_f32(&m->text_embed, id, st->n);
    else dd_weight_row_f32(&m->embed, (int64_t)(p - 1) * (c->codebook_size + 1) + id, st->n);
    for (int d = 0; d < D; d++) {
        dd_weight_row_f32(&m->in_proj, (int64_t)p * D + d, st->row);
        double acc = st->n[d];
        for (int64_t k = 0; k < c->input_dim; k++) acc += (double)st->row[k] * h[k];
        st->x[d] = (float)acc;
    }
}

/* logits of level l (1..Q-1; per-position models 0..Q-1) from the current residual st->x into out[V]: final norm
 * (none in Moshi), then head l-1 (Moshi: head l, its position's). */
static void head(ref_state *st, const dd_model *m, int l, float *out) {
    const dd_config *c = &m->cfg;
    if (m->norm_w) norm(st->x, m->norm_w, m->norm_b, c->dim, c->norm_eps, st->n);
    else memcpy(st->n, st->x, (size_t)c->dim * sizeof(float));
    const int slice = c->per_position ? l : l - 1;
    dd_weight hw = dd_weight_rows(&m->heads, (int64_t)slice * c->codebook_size, c->codebook_size);
    matvec(&hw, NULL, st->n, out, st->row);
}

/* Moshi's frame for one stream: Q positions, position p sees positions 0..p (the whole frame so far, as the
 * original's depformer with context None; transformers' sliding-window cache keeps fewer for Q > 8), c_p from
 * position p. codes_in: score's teacher codes (the inputs c0..c(Q-2)), or NULL to decode into out (c0 given when
 * c0 != NULL). logits [Q-1, V] (levels 1..Q-1) and logits0 [V] for score; either may be NULL. Returns the level
 * with no finite logit, or -1. */
static int frame_per_position(ref_state *st, const dd_model *m, const float *h, int text, const int32_t *codes_in,
                              const int32_t *c0, const dd_sampling *s, uint64_t seed, uint64_t frame, int32_t *out,
                              float *logits, float *logits0) {
    const int Q = m->cfg.levels, V = m->cfg.codebook_size;
    for (int p = 0; p < Q; p++) {
        input_per_position(st, m, p, h, p == 0 ? text : codes_in ? codes_in[p - 1] : out[p - 1]);
        step(st, m, p);
        if (codes_in) {
            if (p > 0) head(st, m, p, logits + (size_t)(p - 1) * V);
            else if (logits0) head(st, m, 0, logits0);
            continue;
        }
        if (p == 0 && c0) {
            out[0] = *c0;
            continue;
        }
        head(st, m, p, st->logits);
        out[p] = dd_sample_core(st->logits, V, s->temperature, s->top_k, seed, frame, p);
        if (out[p] < 0) return p;
    }
    return -1;
}

static dd_status ref_init(dd_decoder *d, dd_error *err) {
    const dd_config *c = &d->m->cfg;
    size_t maxc = (size_t)c->input_dim;
    if ((size_t)c->dim > maxc) maxc = c->dim;
    if ((size_t)c->ffn_dim > maxc) maxc = c->ffn_dim;
    if ((size_t)c->heads * c->head_dim > maxc) maxc = (size_t)c->heads * c->head_dim;
    size_t kv = (size_t)c->layers * c->levels * c->kv_heads * c->head_dim;
    ref_state *st = calloc(1, sizeof *st);
    if (!st) return dd_fail(err, DD_ENOMEM, "ref backend: out of memory");
    st->row = malloc(maxc * sizeof(float));
    st->x = malloc((size_t)c->dim * sizeof(float));
    st->n = malloc((size_t)c->dim * sizeof(float));
    st->q = malloc((size_t)c->heads * c->head_dim * sizeof(float));
    st->att = malloc((size_t)c->heads * c->head_dim * sizeof(float));
    st->ff = malloc((size_t)c->ffn_dim * sizeof(float));
    st->tmp = malloc((size_t)c->input_dim * sizeof(float));
    st->kc = malloc(kv * sizeof(float));
    st->vc = malloc(kv * sizeof(float));
    st->logits = malloc((size_t)c->codebook_size * sizeof(float));
    if (c->has_rope) st->rope = malloc((size_t)c->levels * c->head_dim * sizeof(double));
    d->impl = st;
    if (!st->row || !st->x || !st->n || !st->q || !st->att || !st->ff || !st->tmp || !st->kc || !st->vc ||
        !st->logits || (c->has_rope && !st->rope))
        return dd_fail(err, DD_ENOMEM, "ref backend: out of memory for decoder state");
    if (c->has_rope) dd_rope_table(st->rope, d->m->rope_inv_freq, c->head_dim, c->levels);
    return DD_OK;
}

static void ref_destroy(dd_decoder *d) {
    ref_state *st = d->impl;
    if (!st) return;
    free(st->row);
    free(st->x);
    free(st->n);
    free(st->q);
    free(st->att);
    free(st->ff);
    free(st->tmp);
    free(st->kc);
    free(st->vc);
    free(st->logits);
    free(st->rope);
    free(st);
    d->impl = NULL;
}

static dd_status ref_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                            const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err) {
    ref_state *st = d->impl;
    const dd_model *m = d->m;
    const dd_config *c = &m->cfg;
    int Q = c->levels, V = c->codebook_size;
    for (int r = 0; r < n; r++) {
        const float *h = hidden + (size_t)r * c->input_dim;
        uint64_t seed = seeds ? seeds[r] : 0, frame = frames ? frames[r] : 0;
        int32_t *out = codes + (size_t)r * Q;
        if (c->per_position) {
            int bad = frame_per_position(st, m, h, d->text[r], NULL, c0 ? c0 + r : NULL, s, seed, frame, out, NULL,
                                         NULL);
            if (bad >= 0) return dd_fail(err, DD_ENUMERIC, "row %d: level %d: no finite logit", r, bad);
            continue;
        }
        if (c0) {
            out[0] = c0[r];
        } else {
            matvec(&m->head0, NULL, h, st->logits, st->row);
            out[0] = dd_sample_core(st->logits, V, s->temperature, s->top_k, seed, frame, 0);
            if (out[0] < 0) return dd_fail(err, DD_ENUMERIC, "row %d: level 0: no finite logit", r);
        }
        input(st, m, 0, h, 0);
        step(st, m, 0);
        for (int l = 1; l < Q; l++) {
            input(st, m, l, NULL, out[l - 1]);
            step(st, m, l);
            head(st, m, l, st->logits);
            out[l] = dd_sample_core(st->logits, V, s->temperature, s->top_k, seed, frame, l);
            if (out[l] < 0) return dd_fail(err, DD_ENUMERIC, "row %d: level %d: no finite logit", r, l);
        }
    }
    return DD_OK;
}

static dd_status ref_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                           float *logits0, dd_error *err) {
    ref_state *st = d->impl;
    const dd_model *m = d->m;
    const dd_config *c = &m->cfg;
    int Q = c->levels, V = c->codebook_size;
    for (int r = 0; r < n; r++) {
        const float *h = hidden + (size_t)r * c->input_dim;
        const int32_t *cr = codes + (size_t)r * Q;
        if (c->per_position) {
            frame_per_position(st, m, h, d->text[r], cr, NULL, NULL, 0, 0, NULL, logits + (size_t)r * (Q - 1) * V,
                               logits0 ? logits0 + (size_t)r * V : NULL);
            continue;
        }
        if (logits0) matvec(&m->head0, NULL, h, logits0 + (size_t)r * V, st->row);
        input(st, m, 0, h, 0);
        step(st, m, 0);
        for (int l = 1; l < Q; l++) {
            input(st, m, l, NULL, cr[l - 1]);
            step(st, m, l);
            head(st, m, l, logits + ((size_t)r * (Q - 1) + (l - 1)) * V);
        }
    }
    return DD_OK;
}

const dd_backend_vt dd_ref_backend = {"ref", ref_init, ref_destroy, ref_decode, ref_score, NULL, NULL, NULL};
