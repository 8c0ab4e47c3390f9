/* Writing models: any loaded model (native or HF CSM) as a native-layout safetensors image, optionally with the
 * matrices MLX-affine quantized (depthdec quantize). The image goes to a file (atomically) or straight back into
 * the loader (in-memory quantized copies for the quality report).
 *
 * What is written:
 *   - layer matrices (qkv fused as q rows, k rows, v rows; llama fc1 as gate rows then up rows), in_proj, head0
 *     and heads: quantized when bits > 0, else in their stored type (an already-quantized input is re-quantized
 *     from its dequantized values, or kept as it is when bits and group are unchanged);
 *   - norms, biases, learned positions: float32 (the loader holds them as exact float32 copies);
 *   - Moshi (per-position weights): the stacks [Q, out, in] of put_per_position, text and code tables;
 *   - code embeddings in model space, [Q-1, V, D], in their stored type, quantized only with `embeddings`. A CSM
 *     model's table lives in backbone space and goes through in() every pass; it is written as in(table),
 *     computed with double accumulation and rounded to the table's type — SPEC §1 allows this; it changes the
 *     rounding slightly (one extra rounding of each embedding to the stored type).
 * Scales and biases of quantized tensors are float32 unless asked otherwise: with f16/bf16 scales the rounding of
 * the scale itself can push values past one quantization step (bf16 keeps 8 bits). */
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


dd_export_params dd_export_default_params(void) {
    return (dd_export_params){.bits = 0, .group = 64, .embeddings = 0, .scale_type = DD_F32};
}

typedef struct writer {
    dd_st_list l;
    const dd_export_params *p;
    int done, total; /* progress, in matrices */
} writer;

static dd_st_dtype st_type(dd_dtype t) { return t == DD_F16 ? DD_ST_F16 : t == DD_BF16 ? DD_ST_BF16 : DD_ST_F32; }

static void store(dd_dtype t, const float *x, int64_t n, void *out) {
    for (int64_t i = 0; i < n; i++) {
        if (t == DD_F32) memcpy((uint8_t *)out + 4 * i, &x[i], 4);
        else {
            uint16_t h = t == DD_F16 ? dd_f32_to_f16(x[i]) : dd_f32_to_bf16(x[i]);
            memcpy((uint8_t *)out + 2 * i, &h, 2);
        }
    }
}

/* A float32 vector (norms, biases) — written exactly. */
static void put_vec(writer *w, const char *name, const float *v, int64_t n) {
    if (!v) return;
    dd_st_list_add(&w->l, name, DD_ST_F32, 1, &n, v);
}

/* Matrix `base` from nparts row-concatenated views (all the same cols), with leading shape `lead` (nd-1 dims
 * whose product is the total rows). quantize: MLX affine with p->bits/group, else stored type kept (parts must
 * share it; f32 when they do not). */
static void put_mat(writer *w, const char *base, const dd_weight *const *parts, int nparts, int nd,
                    const int64_t *lead, int quantize) {
    if (w->l.st) return;
    int64_t rows = 0, K = parts[0]->cols;
    for (int i = 0; i < nparts; i++) rows += parts[i]->rows;
    int64_t shape[8];
    memcpy(shape, lead, (size_t)(nd - 1) * sizeof *lead);
    char name[200];
    snprintf(name, sizeof name, "%s.weight", base);
    const dd_export_params *p = w->p;
    dd_dtype t = parts[0]->type;
    for (int i = 1; i < nparts; i++)
        if (parts[i]->type != t) t = DD_F32;
    if (!quantize && p->convert) t = p->dense_type;
    int keep_q = quantize && (t == DD_Q8 || t == DD_Q4) && t == (p->bits == 8 ? DD_Q8 : DD_Q4) &&
                 parts[0]->group == p->group;
    for (int i = 1; keep_q && i < nparts; i++) keep_q = parts[i]->group == p->group && parts[i]->sb_type == parts[0]->sb_type;
    if (quantize && K % p->group) {
        int fit = K % 128 == 0 ? 128 : K % 64 == 0 ? 64 : K % 32 == 0 ? 32 : 0; /* a size that divides K */
        char hint[80] = "; no group size 32, 64 or 128 divides it";
        if (fit) snprintf(hint, sizeof hint, "; try --group-size %d", fit);
        w->l.st = dd_fail(w->l.err, DD_EINVAL, "%s: %lld columns are not divisible by --group-size %d%s", name,
                          (long long)K, p->group, hint);
        return;
    }
    float *row = malloc((size_t)K * sizeof *row);
    if (!row) {
        w->l.st = dd_fail(w->l.err, DD_ENOMEM, "export: out of memory");
        return;
    }
    if (!quantize || keep_q) {
        /* copy rows as stored (dense of one type, or quantized with the requested bits and group) */
        int dense = !(t == DD_Q8 || t == DD_Q4);
        size_t rb = dense ? (size_t)K * (t == DD_F32 ? 4 : 2) : parts[0]->row_bytes;
        uint8_t *d = dd_st_list_alloc(&w->l, (size_t)rows * rb), *sc = NULL, *bi = NULL;
        size_t sbb = dense ? 0 : parts[0]->sb_row_bytes;
        if (!dense) {
            sc = dd_st_list_alloc(&w->l, (size_t)rows * sbb);
            bi = dd_st_list_alloc(&w->l, (size_t)rows * sbb);
        }
        int64_t r = 0;
        for (int i = 0; d && (dense || (sc && bi)) && i < nparts; i++) {
            const dd_weight *pw = parts[i];
            for (int64_t k = 0; k < pw->rows; k++, r++) {
                if (dense && pw->type != t) {
                    dd_weight_row_f32(pw, k, row);
                    store(t, row, K, d + r * rb);
                } else {
                    memcpy(d + r * rb, pw->data + k * pw->row_bytes, rb);
                }
                if (!dense) {
                    memcpy(sc + r * sbb, pw->scales + k * pw->sb_row_bytes, sbb);
                    memcpy(bi + r * sbb, pw->biases + k * pw->sb_row_bytes, sbb);
                }
            }
        }
        if (dense) {
            shape[nd - 1] = K;
            dd_st_list_add(&w->l, name, st_type(t), nd, shape, d);
        } else {
            shape[nd - 1] = (int64_t)(rb / 4);
            dd_st_list_add(&w->l, name, DD_ST_U32, nd, shape, d);
            shape[nd - 1] = K / parts[0]->group;
            snprintf(name, sizeof name, "%s.scales", base);
            dd_st_list_add(&w->l, name, st_type(parts[0]->sb_type), nd, shape, sc);
            snprintf(name, sizeof name, "%s.biases", base);
            dd_st_list_add(&w->l, name, st_type(parts[0]->sb_type), nd, shape, bi);
        }
    } else {
        int bits = p->bits, group = p->group;
        int64_t words = K * bits / 32, ng = K / group;
        size_t ss = p->scale_type == DD_F32 ? 4 : 2;
        uint32_t *q = dd_st_list_alloc(&w->l, (size_t)rows * words * 4);
        uint8_t *sc = dd_st_list_alloc(&w->l, (size_t)rows * ng * ss);
        uint8_t *bi = dd_st_list_alloc(&w->l, (size_t)rows * ng * ss);
        float *fs = malloc((size_t)ng * 4), *fb = malloc((size_t)ng * 4);
        int64_t r = 0;
        if (!fs || !fb) w->l.st = dd_fail(w->l.err, DD_ENOMEM, "export: out of memory");
        for (int i = 0; !w->l.st && i < nparts; i++)
            for (int64_t k = 0; k < parts[i]->rows; k++, r++) {
                dd_weight_row_f32(parts[i], k, row);
                dd_quantize_row(row, K, bits, group, q + r * words, fs, fb);
                store(p->scale_type, fs, ng, sc + (size_t)r * ng * ss);
                store(p->scale_type, fb, ng, bi + (size_t)r * ng * ss);
            }
        free(fs);
        free(fb);
        shape[nd - 1] = words;
        dd_st_list_add(&w->l, name, DD_ST_U32, nd, shape, q);
        shape[nd - 1] = ng;
        snprintf(name, sizeof name, "%s.scales", base);
        dd_st_list_add(&w->l, name, st_type(p->scale_type), nd, shape, sc);
        snprintf(name, sizeof name, "%s.biases", base);
        dd_st_list_add(&w->l, name, st_type(p->scale_type), nd, shape, bi);
    }
    free(row);
    w->done++;
    if (p->progress) p->progress(p->progress_ctx, w->done, w->total);
}

/* CSM: code embeddings of levels 0..Q-2 mapped into model space, in(table[c + j*V]) = in_proj . row (no bias). */
static dd_weight model_space_embed(writer *w, const dd_model *m) {
    const dd_config *c = &m->cfg;
    int64_t rows = (int64_t)(c->levels - 1) * c->codebook_size, D = c->dim, I = c->input_dim;
    /* stored as the conversion's dense type when converting (else the table's own, f32 for a quantized one): a
     * bf16 table projected and rounded back to bf16 would add a rounding the source model does not have */
    dd_dtype t = w->p->convert ? w->p->dense_type
                 : (m->embed.type == DD_Q8 || m->embed.type == DD_Q4) ? DD_F32
                                                                      : m->embed.type;
    size_t es = t == DD_F32 ? 4 : 2;
    uint8_t *out = dd_st_list_alloc(&w->l, (size_t)rows * D * es);
    float *src = malloc((size_t)I * 4), *wr = malloc((size_t)I * 4), *y = malloc((size_t)D * 4);
    if (out && src && wr && y) {
        for (int64_t r = 0; r < rows; r++) {
            dd_weight_row_f32(&m->embed, r, src);
            for (int64_t d = 0; d < D; d++) {
                dd_weight_row_f32(&m->in_proj, d, wr);
                double acc = 0;
                for (int64_t k = 0; k < I; k++) acc += (double)wr[k] * src[k];
                y[d] = (float)(acc + (m->in_bias ? (double)m->in_bias[d] : 0.0)); /* in() includes its bias (Qwen3-TTS) */
            }
            store(t, y, D, out + (size_t)r * D * es);
        }
    } else if (!w->l.st) {
        w->l.st = dd_fail(w->l.err, DD_ENOMEM, "export: out of memory");
    }
    free(src);
    free(wr);
    free(y);
    return (dd_weight){.type = t, .rows = rows, .cols = D, .data = out, .row_bytes = (size_t)D * es};
}

static void config_json(const dd_model *m, const dd_export_params *p, char *buf, size_t n) {
    const dd_config *c = &m->cfg;
    char rope[400] = "null", quant[128] = "", moshi[96] = "";
    if (c->per_position) snprintf(moshi, sizeof moshi, ",\"per_position\":true,\"text_vocab\":%d", c->text_vocab);
    if (c->has_rope && c->rope_scaling)
        snprintf(rope, sizeof rope,
                 "{\"theta\":%.17g,\"scaling\":{\"factor\":%.17g,\"low_freq_factor\":%.17g,\"high_freq_factor\":%.17g,"
                 "\"original_max_position_embeddings\":%.17g}}",
                 c->rope_theta, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                 c->rope_original_max_pos);
    else if (c->has_rope)
        snprintf(rope, sizeof rope, "{\"theta\":%.17g,\"scaling\":null}", c->rope_theta);
    int bits = p->bits ? p->bits : p->convert ? 0 : c->quant_bits, group = p->bits ? p->group : c->quant_group;
    if (bits) snprintf(quant, sizeof quant, ",\"quantization\":{\"group_size\":%d,\"bits\":%d,\"mode\":\"affine\"}",
                       group, bits);
    snprintf(buf, n,
             "{\"format\":\"depthdec\",\"version\":1,\"block\":\"%s\",\"levels\":%d,\"codebook_size\":%d,"
             "\"input_dim\":%d,\"dim\":%d,\"layers\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"ffn_dim\":%d,"
             "\"norm_eps\":%.9g,\"rope\":%s%s%s%s}",
             c->block == DD_BLOCK_GPT ? "gpt" : "llama", c->levels, c->codebook_size, c->input_dim, c->dim, c->layers,
             c->heads, c->kv_heads, c->head_dim, c->ffn_dim, (double)c->norm_eps, rope, quant,
             c->has_qk_norm ? ",\"qk_norm\":true" : "", moshi);
}

/* Moshi (per-position weights): text_embed [TV+1, D], embed [Q-1, V+1, D] (quantized only with `embeddings`),
 * in_proj [Q, D, I], per layer norm1/norm2 [D] and the stacks qkv [Q, (H+2KV) HD, D] (per slice q, k, v rows),
 * out [Q, D, H HD], fc1 [Q, 2F, D] (per slice gate rows, then up rows), fc2 [Q, D, F]; heads [Q, V, D]. */
static void put_per_position(writer *w, const dd_model *m, int q) {
    const dd_config *c = &m->cfg;
    const int64_t Q = c->levels, V = c->codebook_size, D = c->dim, L = c->layers;
    const int64_t qkv_n = (int64_t)(c->heads + 2 * c->kv_heads) * c->head_dim;
    put_mat(w, "text_embed", (const dd_weight *[]){&m->text_embed}, 1, 2, (int64_t[]){c->text_vocab + 1},
            q && w->p->embeddings);
    put_mat(w, "embed", (const dd_weight *[]){&m->embed}, 1, 3, (int64_t[]){Q - 1, V + 1}, q && w->p->embeddings);
    put_mat(w, "in_proj", (const dd_weight *[]){&m->in_proj}, 1, 3, (int64_t[]){Q, D}, q);
    const dd_weight *parts[3 * DD_MAX_LEVELS];
    char nm[200];
    for (int i = 0; i < L && !w->l.st; i++) {
#define NM(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), nm)
        const dd_layer *l0 = dd_model_layer(m, 0, i);
        /* the layout holds one norm pair per layer; moshi_mlx's files hold one per slice (Kyutai's conversions
         * copy the same vectors into every slice): slices whose norms differ have no place here */
        for (int p = 1; p < Q && !w->l.st; p++) {
            const dd_layer *l = dd_model_layer(m, p, i);
            if (memcmp(l->norm1_w, l0->norm1_w, (size_t)D * sizeof(float)) ||
                memcmp(l->norm2_w, l0->norm2_w, (size_t)D * sizeof(float)))
                w->l.st = dd_fail(w->l.err, DD_EUNSUPPORTED,
                                  "%s: layer %d: slice %d's RMSNorm weights differ from slice 0's; the native layout "
                                  "holds one pair per layer (shared by the positions)", m->source, i, p);
        }
        put_vec(w, NM("norm1.weight"), l0->norm1_w, D);
        put_vec(w, NM("norm2.weight"), l0->norm2_w, D);
        for (int p = 0; p < Q; p++) {
            const dd_layer *l = dd_model_layer(m, p, i);
            parts[3 * p] = &l->wq, parts[3 * p + 1] = &l->wk, parts[3 * p + 2] = &l->wv;
        }
        put_mat(w, NM("qkv"), parts, 3 * (int)Q, 3, (int64_t[]){Q, qkv_n}, q);
        for (int p = 0; p < Q; p++) parts[p] = &dd_model_layer(m, p, i)->wo;
        put_mat(w, NM("out"), parts, (int)Q, 3, (int64_t[]){Q, D}, q);
        for (int p = 0; p < Q; p++) parts[2 * p] = &dd_model_layer(m, p, i)->fc1, parts[2 * p + 1] = &dd_model_layer(m, p, i)->up;
        put_mat(w, NM("fc1"), parts, 2 * (int)Q, 3, (int64_t[]){Q, 2 * c->ffn_dim}, q);
        for (int p = 0; p < Q; p++) parts[p] = &dd_model_layer(m, p, i)->fc2;
        put_mat(w, NM("fc2"), parts, (int)Q, 3, (int64_t[]){Q, D}, q);
#undef NM
    }
    put_mat(w, "heads", (const dd_weight *[]){&m->heads}, 1, 3, (int64_t[]){Q, V}, q);
}

static dd_status build_image(const dd_model *m, const dd_export_params *p, uint8_t **img, size_t *size,
                             dd_error *err) {
    const dd_config *c = &m->cfg;
    if (p->bits != 0 && p->bits != 8 && p->bits != 4)
        return dd_fail(err, DD_EINVAL, "--bits %d: want 8 or 4", p->bits);
    if (p->bits && p->group != 32 && p->group != 64 && p->group != 128)
        return dd_fail(err, DD_EINVAL, "--group-size %d: want 32, 64 or 128", p->group);
    if (p->convert && (p->bits || (p->dense_type != DD_F32 && p->dense_type != DD_F16 && p->dense_type != DD_BF16)))
        return dd_fail(err, DD_EINVAL, "convert: dense type must be f32, f16 or bf16, without quantization");
    if (p->bits && p->scale_type != DD_F32 && p->scale_type != DD_F16 && p->scale_type != DD_BF16)
        return dd_fail(err, DD_EINVAL, "scale type %s: want f32, f16 or bf16", dd_dtype_name(p->scale_type));
    writer w = {.l = {.what = "export", .err = err}, .p = p, .total = 7 * c->layers + 3};
    int q = p->bits != 0;
    int64_t Q = c->levels, V = c->codebook_size, D = c->dim;
    char nm[200], cfg[1200];
    if (c->per_position) {
        w.total = 4 * c->layers + 4;
        put_per_position(&w, m, q);
        config_json(m, p, cfg, sizeof cfg);
        return dd_st_list_finish(&w.l, "depthdec.config", cfg, img, size);
    }
    if (c->has_head0) put_mat(&w, "head0", (const dd_weight *[]){&m->head0}, 1, 2, (int64_t[]){V}, q);
    if (c->has_in_proj) put_mat(&w, "in_proj", (const dd_weight *[]){&m->in_proj}, 1, 2, (int64_t[]){D}, q);
    put_vec(&w, "in_proj.bias", m->in_bias, D);
    dd_weight emb = c->embed_in_input_space ? model_space_embed(&w, m) : m->embed;
    put_mat(&w, "embed", (const dd_weight *[]){&emb}, 1, 3, (int64_t[]){Q - 1, V}, q && p->embeddings);
    if (m->pos) dd_st_list_add(&w.l, "pos.weight", DD_ST_F32, 2, (int64_t[]){Q, D}, m->pos);
    int gpt = c->block == DD_BLOCK_GPT;
    int64_t qkv_n = (int64_t)(c->heads + 2 * c->kv_heads) * c->head_dim;
    float *qkv_b = NULL;
    for (int i = 0; i < c->layers && !w.l.st; i++) {
        const dd_layer *l = &m->layer[i];
#define NM(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), nm)
        put_vec(&w, NM("norm1.weight"), l->norm1_w, D);
        put_vec(&w, NM("norm1.bias"), l->norm1_b, D);
        put_mat(&w, NM("qkv"), (const dd_weight *[]){&l->wq, &l->wk, &l->wv}, 3, 2, (int64_t[]){qkv_n}, q);
        if (l->bq) {
            qkv_b = dd_st_list_alloc(&w.l, (size_t)qkv_n * 4);
            if (qkv_b) {
                int64_t nq = l->wq.rows, nk = l->wk.rows;
                memcpy(qkv_b, l->bq, (size_t)nq * 4);
                memcpy(qkv_b + nq, l->bk, (size_t)nk * 4);
                memcpy(qkv_b + nq + nk, l->bv, (size_t)nk * 4);
                put_vec(&w, NM("qkv.bias"), qkv_b, qkv_n);
            }
        }
        put_mat(&w, NM("out"), (const dd_weight *[]){&l->wo}, 1, 2, (int64_t[]){D}, q);
        put_vec(&w, NM("out.bias"), l->bo, D);
        put_vec(&w, NM("norm2.weight"), l->norm2_w, D);
        put_vec(&w, NM("norm2.bias"), l->norm2_b, D);
        if (gpt) put_mat(&w, NM("fc1"), (const dd_weight *[]){&l->fc1}, 1, 2, (int64_t[]){c->ffn_dim}, q);
        else put_mat(&w, NM("fc1"), (const dd_weight *[]){&l->fc1, &l->up}, 2, 2, (int64_t[]){2 * c->ffn_dim}, q);
        put_vec(&w, NM("fc1.bias"), l->b1, c->ffn_dim);
        put_mat(&w, NM("fc2"), (const dd_weight *[]){&l->fc2}, 1, 2, (int64_t[]){D}, q);
        put_vec(&w, NM("fc2.bias"), l->b2, D);
        put_vec(&w, NM("q_norm.weight"), l->q_norm, c->head_dim);
        put_vec(&w, NM("k_norm.weight"), l->k_norm, c->head_dim);
#undef NM
    }
    put_vec(&w, "norm.weight", m->norm_w, D);
    put_vec(&w, "norm.bias", m->norm_b, D);
    put_mat(&w, "heads", (const dd_weight *[]){&m->heads}, 1, 3, (int64_t[]){Q - 1, V}, q);
    config_json(m, p, cfg, sizeof cfg);
    return dd_st_list_finish(&w.l, "depthdec.config", cfg, img, size);
}

dd_status dd_model_export(const dd_model *m, const char *path, const dd_export_params *p, dd_error *err) {
    dd_error_clear(err);
    if (!m || !path) return dd_fail(err, DD_EINVAL, "dd_model_export: NULL argument");
    dd_export_params dp = p ? *p : dd_export_default_params();
    uint8_t *img;
    size_t size;
    dd_status s = build_image(m, &dp, &img, &size, err);
    if (s) return s;
    s = dd_write_file_atomic(path, img, size, err);
    free(img);
    return s;
}

dd_status dd_model_export_mem(dd_model **out, const dd_model *m, const dd_export_params *p, dd_error *err) {
    dd_error_clear(err);
    if (!out || !m) return dd_fail(err, DD_EINVAL, "dd_model_export_mem: NULL argument");
    *out = NULL;
    dd_export_params dp = p ? *p : dd_export_default_params();
    uint8_t *img;
    size_t size;
    dd_status s = build_image(m, &dp, &img, &size, err);
    if (s) return s;
    char label[512];
    snprintf(label, sizeof label, "%.480s (%s)", m->source, dp.bits == 8 ? "q8" : dp.bits == 4 ? "q4" : "re-exported");
    return dd_model_from_image(out, label, img, size, err);
}

/* The same as dd_model_export with default parameters (kept as the short name). */
dd_status dd_model_save(const dd_model *m, const char *path, dd_error *err) {
    return dd_model_export(m, path, NULL, err);
}
