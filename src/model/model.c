/* Model loading: native .safetensors (config in __metadata__ or a sidecar config.json), HF CSM directories
 * (config.json + model.safetensors or a sharded index) and named tensors in memory (dd_model_from_tensors: the
 * caller's tensors become the same name-sorted table a mapped file gives, and go through the same name map,
 * dd_model_load_from_maps). Every tensor the engine uses is found by name, checked
 * for dtype and exact shape, and wrapped in a dd_weight view into the mapping; small vectors (norms, biases,
 * positions) are converted to owned float32. A model loads completely or not at all. */
#include "config.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>


/* ---- weights ---------------------------------------------------------------------------------------------- */

size_t dd_dtype_size(dd_dtype t) {
    switch (t) {
    case DD_F32: return 4;
    case DD_F16:
    case DD_BF16: return 2;
    default: return 0;
    }
}

dd_weight dd_weight_rows(const dd_weight *w, int64_t r0, int64_t n) {
    dd_weight v = *w;
    v.rows = n;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    if (w->scales) {
        v.scales = w->scales + (size_t)r0 * w->sb_row_bytes;
        v.biases = w->biases + (size_t)r0 * w->sb_row_bytes;
    }
    return v;
}

static float load_sb(dd_dtype t, const uint8_t *p, int64_t i) {
    switch (t) {
    case DD_F16: return dd_f16_to_f32(dd_ld16(p + 2 * i));
    case DD_BF16: return dd_bf16_to_f32(dd_ld16(p + 2 * i));
    default: return dd_ldf32(p + 4 * i);
    }
}

void dd_weight_row_f32(const dd_weight *w, int64_t r, float *out) {
    const uint8_t *p = w->data + (size_t)r * w->row_bytes;
    int64_t n = w->cols;
    switch (w->type) {
    case DD_F32:
        memcpy(out, p, (size_t)n * 4);
        break;
    case DD_F16:
        for (int64_t i = 0; i < n; i++) out[i] = dd_f16_to_f32(dd_ld16(p + 2 * i));
        break;
    case DD_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = dd_bf16_to_f32(dd_ld16(p + 2 * i));
        break;
    case DD_Q8:
    case DD_Q4: {
        const uint8_t *sc = w->scales + (size_t)r * w->sb_row_bytes, *bi = w->biases + (size_t)r * w->sb_row_bytes;
        int bits = w->type == DD_Q8 ? 8 : 4, per = 32 / bits;
        uint32_t mask = (1u << bits) - 1;
        for (int64_t i = 0; i < n; i++) {
            uint32_t word = dd_ld32(p + 4 * (i / per));
            uint32_t q = (word >> (bits * (i % per))) & mask;
            int64_t g = i / w->group;
            /* w = scale*q + bias, in float32 as MLX dequantizes (two roundings, no fma) */
            float s = load_sb(w->sb_type, sc, g), b = load_sb(w->sb_type, bi, g);
            float sq = s * (float)q;
            out[i] = sq + b;
        }
        break;
    }
    }
}

uint64_t dd_weight_bytes(const dd_weight *w) {
    uint64_t b = (uint64_t)w->rows * w->row_bytes;
    if (w->scales) b += 2 * (uint64_t)w->rows * w->sb_row_bytes;
    return b;
}

/* ---- model bookkeeping ------------------------------------------------------------------------------------ */

void *dd_model_own(dd_model *m, void *p) {
    if (!p) return NULL;
    if (m->nowned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **n = realloc(m->owned, (size_t)cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        m->owned = n;
        m->cap_owned = cap;
    }
    m->owned[m->nowned++] = p;
    return p;
}

void dd_model_free(dd_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nmaps; i++) dd_st_close(&m->maps[i]);
    free(m->maps);
    for (int i = 0; i < m->nowned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layer);
    free(m);
}

const dd_config *dd_model_config(const dd_model *m) { return &m->cfg; }
int dd_model_tensor_count(const dd_model *m) { return m->tensor_count; }
const char *dd_model_source(const dd_model *m) { return m->source; }

/* Bytes of the layer matrices of all layers (and of every position's slices: Moshi). */
static uint64_t layer_bytes(const dd_model *m) {
    uint64_t b = 0;
    for (int i = 0; i < m->cfg.layers * m->nslices; i++) {
        const dd_layer *l = &m->layer[i];
        b += dd_weight_bytes(&l->wq) + dd_weight_bytes(&l->wk) + dd_weight_bytes(&l->wv) + dd_weight_bytes(&l->wo) +
             dd_weight_bytes(&l->fc1) + dd_weight_bytes(&l->up) + dd_weight_bytes(&l->fc2);
    }
    return b;
}

uint64_t dd_model_weight_bytes(const dd_model *m) {
    return dd_weight_bytes(&m->head0) + dd_weight_bytes(&m->in_proj) + dd_weight_bytes(&m->embed) +
           dd_weight_bytes(&m->text_embed) + dd_weight_bytes(&m->heads) + layer_bytes(m);
}

/* Per frame with c0 given: Q-1 passes each read every layer matrix once (for all rows of the batch) and one
 * head slice; in_proj is read in pass 1 (for h) and, when code embeddings live in input space (CSM), once in
 * every pass. Per-position models (Moshi): Q passes, pass p reads slice p of every layer matrix and of in_proj,
 * and head p except pass 0's (c0 given): every layer matrix and in_proj once, Q-1 of the Q heads. Embedding rows
 * and vectors are negligible and not counted. */
uint64_t dd_model_weight_bytes_per_frame(const dd_model *m) {
    const dd_config *c = &m->cfg;
    if (c->per_position)
        return layer_bytes(m) + dd_weight_bytes(&m->in_proj) + dd_weight_bytes(&m->heads) / c->levels * (c->levels - 1);
    uint64_t passes = (uint64_t)c->levels - 1;
    uint64_t head_slice = dd_weight_bytes(&m->heads) / passes;
    uint64_t inp = dd_weight_bytes(&m->in_proj) * (c->embed_in_input_space ? passes : 1);
    return passes * (layer_bytes(m) + head_slice) + inp;
}

/* ---- loader ----------------------------------------------------------------------------------------------- */

typedef struct loader {
    dd_model *m;
    const char *label; /* the MODEL argument, for messages */
    int used;          /* tensors consumed */
} loader;

/* Find `name` in any mapped file; *file gets that file's path. */
static const dd_st_tensor *find(loader *L, const char *name, const char **file) {
    for (int i = 0; i < L->m->nmaps; i++) {
        const dd_st_tensor *t = dd_st_find(&L->m->maps[i], name);
        if (t) {
            if (file) *file = L->m->maps[i].path;
            return t;
        }
    }
    return NULL;
}

static void shape_str(const dd_st_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int dense_type(dd_st_dtype t, dd_dtype *out) {
    switch (t) {
    case DD_ST_F32: *out = DD_F32; return 1;
    case DD_ST_F16: *out = DD_F16; return 1;
    case DD_ST_BF16: *out = DD_BF16; return 1;
    default: return 0;
    }
}

/* Check t's shape equals dims[0..nd). */
static dd_status want_shape(loader *L, const char *file, const dd_st_tensor *t, int nd, const int64_t *dims,
                            dd_error *err) {
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == dims[i];
    if (ok) return DD_OK;
    char got[128], want[128];
    shape_str(t, got, sizeof got);
    dd_st_tensor tmp = {.ndim = nd};
    for (int i = 0; i < nd; i++) tmp.shape[i] = dims[i];
    shape_str(&tmp, want, sizeof want);
    return dd_fail(err, DD_EMODEL, "%s: tensor '%s': shape %s, expected %s", file, t->name, got, want);
}

/* A vector of length n into owned float32. Absent: *out = NULL (error if required). */
static dd_status load_vec(loader *L, const char *name, int64_t n, int required, float **out, dd_error *err) {
    *out = NULL;
    const char *file;
    const dd_st_tensor *t = find(L, name, &file);
    if (!t) return required ? dd_fail(err, DD_EMODEL, "%s: missing tensor '%s'", L->label, name) : DD_OK;
    dd_dtype ty;
    if (!dense_type(t->dtype, &ty))
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': dtype %s (want F32, F16 or BF16)", file, name,
                       dd_st_dtype_name(t->dtype));
    dd_status s = want_shape(L, file, t, 1, &n, err);
    if (s) return s;
    float *v = dd_model_own(L->m, malloc((size_t)(n ? n : 1) * sizeof(float)));
    if (!v) return dd_fail(err, DD_ENOMEM, "%s: out of memory for tensor '%s'", L->label, name);
    dd_weight w = {.type = ty, .rows = 1, .cols = n, .data = t->data, .row_bytes = (size_t)n * dd_dtype_size(ty)};
    dd_weight_row_f32(&w, 0, v);
    L->used++;
    *out = v;
    return DD_OK;
}

/* A matrix [rows, cols], or a stack [nstack, rows, cols] when nstack > 0 (viewed as nstack*rows rows).
 * `wname` ends in ".weight"; an MLX-quantized matrix has `prefix.scales` and `prefix.biases` beside it. */
static dd_status load_mat(loader *L, const char *wname, int64_t nstack, int64_t rows, int64_t cols, int required,
                          dd_weight *w, dd_error *err) {
    memset(w, 0, sizeof *w);
    const char *file;
    const dd_st_tensor *t = find(L, wname, &file);
    if (!t) return required ? dd_fail(err, DD_EMODEL, "%s: missing tensor '%s'", L->label, wname) : DD_OK;
    char prefix[256], sname[300], bname[300];
    size_t len = strlen(wname);
    if (len >= sizeof prefix) return dd_fail(err, DD_EMODEL, "%s: tensor name too long", L->label);
    memcpy(prefix, wname, len + 1);
    if (len > 7 && strcmp(prefix + len - 7, ".weight") == 0) prefix[len - 7] = 0;
    snprintf(sname, sizeof sname, "%s.scales", prefix);
    snprintf(bname, sizeof bname, "%s.biases", prefix);
    const char *sfile = NULL, *bfile = NULL;
    const dd_st_tensor *ts = find(L, sname, &sfile), *tb = find(L, bname, &bfile);
    int64_t dims[3];
    int nd = 0;
    if (nstack > 0) dims[nd++] = nstack;
    dims[nd++] = rows;
    int64_t nrows = (nstack > 0 ? nstack : 1) * rows;
    dd_status s;
    if (!ts) {
        if (tb) return dd_fail(err, DD_EMODEL, "%s: tensor '%s' without '%s'", bfile, bname, sname);
        dd_dtype ty;
        if (!dense_type(t->dtype, &ty))
            return dd_fail(err, DD_EMODEL, "%s: tensor '%s': dtype %s (want F32, F16 or BF16, or U32 with .scales)",
                           file, wname, dd_st_dtype_name(t->dtype));
        dims[nd] = cols;
        if ((s = want_shape(L, file, t, nd + 1, dims, err))) return s;
        *w = (dd_weight){.type = ty, .rows = nrows, .cols = cols, .data = t->data,
                         .row_bytes = (size_t)cols * dd_dtype_size(ty)};
        L->used++;
        return DD_OK;
    }
    /* MLX affine: weight U32 [.., rows, cols*bits/32], scales/biases [.., rows, cols/group] */
    if (!tb) return dd_fail(err, DD_EMODEL, "%s: tensor '%s' without '%s'", sfile, sname, bname);
    if (t->dtype != DD_ST_U32)
        return dd_fail(err, DD_EMODEL, "%s: quantized tensor '%s': dtype %s (want U32)", file, wname,
                       dd_st_dtype_name(t->dtype));
    dd_dtype sbt;
    if (!dense_type(ts->dtype, &sbt) || tb->dtype != ts->dtype)
        return dd_fail(err, DD_EMODEL, "%s: '%s' and '%s' must share one dtype of F32, F16, BF16 (got %s, %s)", sfile,
                       sname, bname, dd_st_dtype_name(ts->dtype), dd_st_dtype_name(tb->dtype));
    if (t->ndim != nd + 1 || ts->ndim != nd + 1)
        return dd_fail(err, DD_EMODEL, "%s: quantized tensor '%s': %d dims, expected %d", file, wname, t->ndim, nd + 1);
    int64_t words = t->shape[nd], ngroups = ts->shape[nd];
    int bits = 0;
    /* words*4 == cols (8 bits) or words*8 == cols (4 bits), by division: words comes from the file and may be
     * huge when another dimension is 0 */
    if (cols % 4 == 0 && words == cols / 4) bits = 8;
    else if (cols % 8 == 0 && words == cols / 8) bits = 4;
    if (!bits)
        return dd_fail(err, DD_EMODEL,
                       "%s: quantized tensor '%s': %lld u32 words per row do not pack %lld values at 8 or 4 bits", file,
                       wname, (long long)words, (long long)cols);
    if (ngroups <= 0 || cols % ngroups)
        return dd_fail(err, DD_EMODEL, "%s: '%s': %lld groups do not divide %lld columns", sfile, sname,
                       (long long)ngroups, (long long)cols);
    int group = (int)(cols / ngroups);
    if (group != 32 && group != 64 && group != 128)
        return dd_fail(err, DD_EMODEL, "%s: '%s': group size %d (want 32, 64 or 128)", sfile, sname, group);
    dd_config *c = &L->m->cfg;
    if (c->quant_bits && (c->quant_bits != bits || c->quant_group != group))
        return dd_fail(err, DD_EMODEL, "%s: '%s' is %d-bit with group %d, but the config says %d-bit group %d", file,
                       wname, bits, group, c->quant_bits, c->quant_group);
    dims[nd] = words;
    if ((s = want_shape(L, file, t, nd + 1, dims, err))) return s;
    dims[nd] = ngroups;
    if ((s = want_shape(L, sfile, ts, nd + 1, dims, err))) return s;
    if ((s = want_shape(L, bfile, tb, nd + 1, dims, err))) return s;
    *w = (dd_weight){.type = bits == 8 ? DD_Q8 : DD_Q4, .rows = nrows, .cols = cols, .data = t->data,
                     .row_bytes = (size_t)words * 4, .scales = ts->data, .biases = tb->data, .sb_type = sbt,
                     .group = group, .sb_row_bytes = (size_t)ngroups * dd_dtype_size(sbt)};
    L->used += 3;
    return DD_OK;
}

/* RoPE inverse frequencies in double, with HF's llama3 scaling when configured. */
static dd_status rope_init(loader *L, dd_error *err) {
    dd_config *c = &L->m->cfg;
    int half = c->head_dim / 2;
    double *f = dd_model_own(L->m, malloc((size_t)half * sizeof(double)));
    if (!f) return dd_fail(err, DD_ENOMEM, "%s: out of memory", L->label);
    for (int j = 0; j < half; j++) {
        double inv = 1.0 / pow(c->rope_theta, (2.0 * j) / c->head_dim);
        if (c->rope_scaling) {
            double lo_wl = c->rope_original_max_pos / c->rope_low_freq_factor;
            double hi_wl = c->rope_original_max_pos / c->rope_high_freq_factor;
            double wl = 2 * M_PI / inv;
            if (wl > lo_wl) inv = inv / c->rope_factor;
            else if (wl >= hi_wl) {
                double sm = (c->rope_original_max_pos / wl - c->rope_low_freq_factor) /
                            (c->rope_high_freq_factor - c->rope_low_freq_factor);
                inv = (1 - sm) * inv / c->rope_factor + sm * inv;
            }
        }
        f[j] = inv;
    }
    L->m->rope_inv_freq = f;
    return DD_OK;
}

void dd_rope_table(double *cs, const double *inv_freq, int HD, int npos) {
    const int half = HD / 2;
    for (int p = 0; p < npos; p++)
        for (int j = 0; j < half; j++) {
            double a = p * inv_freq[j];
            cs[((size_t)p * half + j) * 2] = cos(a);
            cs[((size_t)p * half + j) * 2 + 1] = sin(a);
        }
}

/* Per-position models (Moshi): layer i's stacks [Q, rows, cols] (viewed as Q*rows rows) cut into the Q slices
 * m->layer[p * L + i]. q/k/v are three stacks, or one fused stack (k == NULL: per slice q rows, k rows, v rows, as the
 * native qkv); fc1 holds per slice gate rows then up rows. The norm vectors are shared by the slices. */
static void cut_slices(dd_model *m, int i, const dd_weight *q, const dd_weight *k, const dd_weight *v,
                       const dd_weight *o, const dd_weight *fc1, const dd_weight *fc2, float *n1, float *n2) {
    const dd_config *c = &m->cfg;
    const int64_t qr = (int64_t)c->heads * c->head_dim, kr = (int64_t)c->kv_heads * c->head_dim, F = c->ffn_dim,
                  D = c->dim;
    for (int64_t p = 0; p < c->levels; p++) {
        dd_layer *l = &m->layer[p * c->layers + i];
        l->norm1_w = n1;
        l->norm2_w = n2;
        if (k) {
            l->wq = dd_weight_rows(q, p * qr, qr);
            l->wk = dd_weight_rows(k, p * kr, kr);
            l->wv = dd_weight_rows(v, p * kr, kr);
        } else {
            const int64_t r = p * (qr + 2 * kr);
            l->wq = dd_weight_rows(q, r, qr);
            l->wk = dd_weight_rows(q, r + qr, kr);
            l->wv = dd_weight_rows(q, r + qr + kr, kr);
        }
        l->wo = dd_weight_rows(o, p * D, D);
        l->fc1 = dd_weight_rows(fc1, p * 2 * F, F);
        l->up = dd_weight_rows(fc1, p * 2 * F + F, F);
        l->fc2 = dd_weight_rows(fc2, p * D, D);
    }
}

/* Moshi's depformer in the native layout (docs/formats.md): text_embed [TV+1, D], embed [Q-1, V+1, D], per-position
 * stacks in_proj [Q, D, I], layers.{i}.qkv/out/fc1/fc2 [Q, rows, cols] and heads [Q, V, D]; layer norms [D]. A
 * tensor that would change the frame but has no place in it (head0, a final norm, positions, biases, q/k norms)
 * is refused by name rather than ignored. */
static dd_status load_native_per_position(loader *L, dd_error *err) {
    dd_model *m = L->m;
    const dd_config *c = &m->cfg;
    const int64_t D = c->dim, V = c->codebook_size, Q = c->levels, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
                  F = c->ffn_dim, I = c->input_dim;
    dd_status s;
    if ((s = load_mat(L, "text_embed.weight", 0, c->text_vocab + 1, D, 1, &m->text_embed, err)) ||
        (s = load_mat(L, "embed.weight", Q - 1, V + 1, D, 1, &m->embed, err)) ||
        (s = load_mat(L, "in_proj.weight", Q, D, I, 1, &m->in_proj, err)) ||
        (s = load_mat(L, "heads.weight", Q, V, D, 1, &m->heads, err)))
        return s;
    static const char *const top[] = {"head0.weight", "norm.weight", "norm.bias", "pos.weight", "in_proj.bias"};
    static const char *const per_layer[] = {"norm1.bias", "norm2.bias", "qkv.bias", "out.bias", "fc1.bias",
                                            "fc2.bias", "q_norm.weight", "k_norm.weight"};
    char n1[128], n2[128];
    for (size_t k = 0; k < sizeof top / sizeof *top; k++)
        if (find(L, top[k], NULL))
            return dd_fail(err, DD_EMODEL, "%s: tensor '%s' has no place in a per-position (Moshi) model", L->label,
                           top[k]);
    for (int i = 0; i < c->layers; i++) {
        for (size_t k = 0; k < sizeof per_layer / sizeof *per_layer; k++) {
            snprintf(n1, sizeof n1, "layers.%d.%s", i, per_layer[k]);
            if (find(L, n1, NULL))
                return dd_fail(err, DD_EMODEL, "%s: tensor '%s' has no place in a per-position (Moshi) model",
                               L->label, n1);
        }
        dd_weight qkv, out, fc1, fc2;
        float *w1, *w2;
#define NM(buf, fmt) (snprintf(buf, sizeof buf, "layers.%d." fmt, i), buf)
        if ((s = load_vec(L, NM(n1, "norm1.weight"), D, 1, &w1, err)) ||
            (s = load_vec(L, NM(n2, "norm2.weight"), D, 1, &w2, err)) ||
            (s = load_mat(L, NM(n1, "qkv.weight"), Q, (H + 2 * KV) * HD, D, 1, &qkv, err)) ||
            (s = load_mat(L, NM(n1, "out.weight"), Q, D, H * HD, 1, &out, err)) ||
            (s = load_mat(L, NM(n1, "fc1.weight"), Q, 2 * F, D, 1, &fc1, err)) ||
            (s = load_mat(L, NM(n1, "fc2.weight"), Q, D, F, 1, &fc2, err)))
            return s;
#undef NM
        cut_slices(m, i, &qkv, NULL, NULL, &out, &fc1, &fc2, w1, w2);
    }
    return DD_OK;
}

static dd_status load_native_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    dd_config *c = &m->cfg;
    int64_t D = c->dim, V = c->codebook_size, Q = c->levels, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
            F = c->ffn_dim, I = c->input_dim;
    int gpt = c->block == DD_BLOCK_GPT;
    dd_status s;
    char n1[128], n2[128];
    if (c->per_position) return load_native_per_position(L, err);
    if ((s = load_mat(L, "head0.weight", 0, V, I, 0, &m->head0, err)) ||
        (s = load_mat(L, "in_proj.weight", 0, D, I, 0, &m->in_proj, err)) ||
        (s = load_vec(L, "in_proj.bias", D, 0, &m->in_bias, err)) ||
        (s = load_mat(L, "embed.weight", Q - 1, V, D, 1, &m->embed, err)) ||
        (s = load_vec(L, "norm.weight", D, 1, &m->norm_w, err)) ||
        (s = load_vec(L, "norm.bias", D, gpt, &m->norm_b, err)) ||
        (s = load_mat(L, "heads.weight", Q - 1, V, D, 1, &m->heads, err)))
        return s;
    if (m->in_bias && !m->in_proj.rows)
        return dd_fail(err, DD_EMODEL, "%s: tensor 'in_proj.bias' without 'in_proj.weight'", L->label);
    const char *file;
    const dd_st_tensor *pt = find(L, "pos.weight", &file);
    if (pt) {
        dd_dtype ty;
        int64_t dims[2] = {Q, D};
        if (!dense_type(pt->dtype, &ty))
            return dd_fail(err, DD_EMODEL, "%s: tensor 'pos.weight': dtype %s (want F32, F16 or BF16)", file,
                           dd_st_dtype_name(pt->dtype));
        if ((s = want_shape(L, file, pt, 2, dims, err))) return s;
        m->pos = dd_model_own(m, malloc((size_t)(Q * D) * sizeof(float)));
        if (!m->pos) return dd_fail(err, DD_ENOMEM, "%s: out of memory", L->label);
        dd_weight w = {.type = ty, .rows = Q, .cols = D, .data = pt->data, .row_bytes = (size_t)D * dd_dtype_size(ty)};
        for (int64_t p = 0; p < Q; p++) dd_weight_row_f32(&w, p, m->pos + p * D);
        L->used++;
    }
    for (int i = 0; i < c->layers; i++) {
        dd_layer *l = &m->layer[i];
#define NM(buf, fmt) (snprintf(buf, sizeof buf, "layers.%d." fmt, i), buf)
        dd_weight qkv, fc1;
        float *bqkv, *b1;
        if ((s = load_vec(L, NM(n1, "norm1.weight"), D, 1, &l->norm1_w, err)) ||
            (s = load_vec(L, NM(n2, "norm1.bias"), D, gpt, &l->norm1_b, err)) ||
            (s = load_vec(L, NM(n1, "norm2.weight"), D, 1, &l->norm2_w, err)) ||
            (s = load_vec(L, NM(n2, "norm2.bias"), D, gpt, &l->norm2_b, err)) ||
            (s = load_mat(L, NM(n1, "qkv.weight"), 0, (H + 2 * KV) * HD, D, 1, &qkv, err)) ||
            (s = load_vec(L, NM(n2, "qkv.bias"), (H + 2 * KV) * HD, 0, &bqkv, err)) ||
            (s = load_mat(L, NM(n1, "out.weight"), 0, D, H * HD, 1, &l->wo, err)) ||
            (s = load_vec(L, NM(n2, "out.bias"), D, 0, &l->bo, err)) ||
            (s = load_mat(L, NM(n1, "fc1.weight"), 0, gpt ? F : 2 * F, D, 1, &fc1, err)) ||
            (s = load_vec(L, NM(n2, "fc1.bias"), gpt ? F : 2 * F, 0, &b1, err)) ||
            (s = load_mat(L, NM(n1, "fc2.weight"), 0, D, F, 1, &l->fc2, err)) ||
            (s = load_vec(L, NM(n2, "fc2.bias"), D, 0, &l->b2, err)) ||
            (s = load_vec(L, NM(n1, "q_norm.weight"), HD, c->has_qk_norm, &l->q_norm, err)) ||
            (s = load_vec(L, NM(n2, "k_norm.weight"), HD, c->has_qk_norm, &l->k_norm, err)))
            return s;
        if (!c->has_qk_norm && (l->q_norm || l->k_norm))
            return dd_fail(err, DD_EMODEL, "%s: layers.%d: q_norm/k_norm tensors given but the config has no \"qk_norm\": true",
                           L->label, i);
#undef NM
        if (!gpt && (l->norm1_b || l->norm2_b))
            return dd_fail(err, DD_EMODEL, "%s: layers.%d: norm biases given for a llama block (RMSNorm has none)",
                           L->label, i);
        if (!gpt && b1) return dd_fail(err, DD_EMODEL, "%s: layers.%d.fc1.bias: llama blocks take no MLP biases",
                                       L->label, i);
        l->wq = dd_weight_rows(&qkv, 0, H * HD);
        l->wk = dd_weight_rows(&qkv, H * HD, KV * HD);
        l->wv = dd_weight_rows(&qkv, (H + KV) * HD, KV * HD);
        if (bqkv) {
            l->bq = bqkv;
            l->bk = bqkv + H * HD;
            l->bv = bqkv + (H + KV) * HD;
        }
        if (gpt) {
            l->fc1 = fc1;
            l->b1 = b1;
        } else {
            l->fc1 = dd_weight_rows(&fc1, 0, F);
            l->up = dd_weight_rows(&fc1, F, F);
        }
    }
    if (!gpt && m->norm_b) return dd_fail(err, DD_EMODEL, "%s: norm.bias given for a llama model", L->label);
    if (!gpt && m->pos) return dd_fail(err, DD_EMODEL, "%s: pos.weight given for a llama model", L->label);
    return DD_OK;
}

/* One HF Llama-style decoder layer under `base` ("…layers.{i}."): RMSNorms, q/k/v/o (optional biases, all q/k/v
 * or none), SwiGLU; with qk, Qwen3's per-head q_norm / k_norm [HD] too. */
static dd_status load_hf_layer(loader *L, const char *base, int i, int qk, dd_layer *l, dd_error *err) {
    const dd_config *c = &L->m->cfg;
    const int64_t D = c->dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim;
    char n[300];
#define NM(fmt) (snprintf(n, sizeof n, "%s" fmt, base), n)
    dd_status s;
    if ((s = load_vec(L, NM("input_layernorm.weight"), D, 1, &l->norm1_w, err)) ||
        (s = load_vec(L, NM("post_attention_layernorm.weight"), D, 1, &l->norm2_w, err)) ||
        (qk && (s = load_vec(L, NM("self_attn.q_norm.weight"), HD, 1, &l->q_norm, err))) ||
        (qk && (s = load_vec(L, NM("self_attn.k_norm.weight"), HD, 1, &l->k_norm, err))) ||
        (s = load_mat(L, NM("self_attn.q_proj.weight"), 0, H * HD, D, 1, &l->wq, err)) ||
        (s = load_mat(L, NM("self_attn.k_proj.weight"), 0, KV * HD, D, 1, &l->wk, err)) ||
        (s = load_mat(L, NM("self_attn.v_proj.weight"), 0, KV * HD, D, 1, &l->wv, err)) ||
        (s = load_mat(L, NM("self_attn.o_proj.weight"), 0, D, H * HD, 1, &l->wo, err)) ||
        (s = load_vec(L, NM("self_attn.q_proj.bias"), H * HD, 0, &l->bq, err)) ||
        (s = load_vec(L, NM("self_attn.k_proj.bias"), KV * HD, 0, &l->bk, err)) ||
        (s = load_vec(L, NM("self_attn.v_proj.bias"), KV * HD, 0, &l->bv, err)) ||
        (s = load_vec(L, NM("self_attn.o_proj.bias"), D, 0, &l->bo, err)) ||
        (s = load_mat(L, NM("mlp.gate_proj.weight"), 0, F, D, 1, &l->fc1, err)) ||
        (s = load_mat(L, NM("mlp.up_proj.weight"), 0, F, D, 1, &l->up, err)) ||
        (s = load_mat(L, NM("mlp.down_proj.weight"), 0, D, F, 1, &l->fc2, err)))
        return s;
#undef NM
    if ((l->bq != NULL) != (l->bk != NULL) || (l->bq != NULL) != (l->bv != NULL))
        return dd_fail(err, DD_EMODEL, "%s: layer %d: q/k/v biases must all be present or all absent", L->label, i);
    return DD_OK;
}

static dd_status load_csm_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    dd_config *c = &m->cfg;
    int64_t D = c->dim, V = c->codebook_size, Q = c->levels, I = c->input_dim;
    dd_status s;
    c->embed_in_input_space = 1;
    /* transformers 5 saves both names (untied copies); its depth decoder reads its own table, so prefer it */
    const char *emb = "depth_decoder.model.embed_tokens.weight";
    if (!find(L, emb, NULL)) emb = "backbone_model.embed_tokens.embed_audio_tokens.weight";
    if (!find(L, emb, NULL))
        return dd_fail(err, DD_EMODEL,
                       "%s: missing the audio code table (backbone_model.embed_tokens.embed_audio_tokens.weight or "
                       "depth_decoder.model.embed_tokens.weight)",
                       L->label);
    if ((s = load_mat(L, "lm_head.weight", 0, V, I, 0, &m->head0, err)) ||
        (s = load_mat(L, "depth_decoder.model.inputs_embeds_projector.weight", 0, D, I, 1, &m->in_proj, err)) ||
        (s = load_mat(L, emb, 0, Q * V, I, 1, &m->embed, err)) ||
        (s = load_vec(L, "depth_decoder.model.norm.weight", D, 1, &m->norm_w, err)))
        return s;
    /* codebooks_head [Q-1, D, V] is stored input-major; transpose once at load into [Q-1, V, D] rows so every
     * backend sees y = W x. The values (and so the rounding) are unchanged. */
    const char *hn = "depth_decoder.codebooks_head.weight", *file;
    const dd_st_tensor *ht = find(L, hn, &file);
    if (!ht) return dd_fail(err, DD_EMODEL, "%s: missing tensor '%s'", L->label, hn);
    if (find(L, "depth_decoder.codebooks_head.scales", NULL))
        return dd_fail(err, DD_EUNSUPPORTED, "%s: quantized '%s' (input-major) is not supported", file, hn);
    dd_dtype ty;
    if (!dense_type(ht->dtype, &ty))
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': dtype %s (want F32, F16 or BF16)", file, hn,
                       dd_st_dtype_name(ht->dtype));
    int64_t hd[3] = {Q - 1, D, V};
    if ((s = want_shape(L, file, ht, 3, hd, err))) return s;
    size_t es = dd_dtype_size(ty);
    uint8_t *tr = dd_model_own(m, malloc((size_t)((Q - 1) * V * D) * es));
    if (!tr) return dd_fail(err, DD_ENOMEM, "%s: out of memory transposing '%s'", L->label, hn);
    for (int64_t l = 0; l < Q - 1; l++)
        for (int64_t d = 0; d < D; d++)
            for (int64_t v = 0; v < V; v++)
                memcpy(tr + ((l * V + v) * D + d) * es, ht->data + ((l * D + d) * V + v) * es, es);
    m->heads = (dd_weight){.type = ty, .rows = (Q - 1) * V, .cols = D, .data = tr, .row_bytes = (size_t)D * es};
    L->used++;
    char base[160];
    for (int i = 0; i < c->layers; i++) {
        snprintf(base, sizeof base, "depth_decoder.model.layers.%d.", i);
        if ((s = load_hf_layer(L, base, i, 0, &m->layer[i], err))) return s;
    }
    return DD_OK;
}

/* The top `rows` rows of n matrices stacked into one owned [n rows, cols] view (the engine reads a level's table or
 * head as rows of one matrix). Dense: all of one type. MLX-quantized (q8/q4: U32 words + scales + biases): all of
 * one type, group and scale dtype; the words, scales and biases of each are stacked as they are, so the values
 * (scale·q + bias, dequantized by every backend as for any quantized matrix) are those of the files. A mixed set
 * is refused naming the two tensors. */
static dd_status stack_rows(loader *L, const char *what, char (*names)[256], const dd_weight *ws, int64_t rows, int n,
                            dd_weight *out, dd_error *err) {
    const int quant = ws[0].type == DD_Q8 || ws[0].type == DD_Q4;
    for (int i = 1; i < n; i++) {
        if (ws[i].type != ws[0].type)
            return dd_fail(err, DD_EMODEL, "%s: tensor '%s' is %s but '%s' is %s: the %s must share one dtype",
                           L->label, names[i], dd_dtype_name(ws[i].type), names[0], dd_dtype_name(ws[0].type), what);
        if (quant && (ws[i].group != ws[0].group || ws[i].sb_type != ws[0].sb_type))
            return dd_fail(err, DD_EMODEL,
                           "%s: tensor '%s' is quantized with group %d and %s scales but '%s' with group %d and %s "
                           "scales: the %s must share one quantization",
                           L->label, names[i], ws[i].group, dd_dtype_name(ws[i].sb_type), names[0], ws[0].group,
                           dd_dtype_name(ws[0].sb_type), what);
    }
    const size_t rb = ws[0].row_bytes, part = (size_t)rows * rb, sbp = (size_t)rows * ws[0].sb_row_bytes;
    /* one buffer: data of all n, then (quantized) their scales, then their biases */
    uint8_t *buf = dd_model_own(L->m, malloc((size_t)n * (part + (quant ? 2 * sbp : 0)) + 1));
    if (!buf) return dd_fail(err, DD_ENOMEM, "%s: out of memory stacking the %s", L->label, what);
    for (int i = 0; i < n; i++) memcpy(buf + (size_t)i * part, ws[i].data, part);
    *out = (dd_weight){.type = ws[0].type, .rows = (int64_t)n * rows, .cols = ws[0].cols, .data = buf, .row_bytes = rb};
    if (quant) {
        uint8_t *sc = buf + (size_t)n * part, *bi = sc + (size_t)n * sbp;
        for (int i = 0; i < n; i++) {
            memcpy(sc + (size_t)i * sbp, ws[i].scales, sbp);
            memcpy(bi + (size_t)i * sbp, ws[i].biases, sbp);
        }
        out->scales = sc;
        out->biases = bi;
        out->sb_type = ws[0].sb_type;
        out->group = ws[0].group;
        out->sb_row_bytes = ws[0].sb_row_bytes;
    }
    return DD_OK;
}

/* Qwen3 code predictors (docs/formats.md): the Qwen3-Omni talker's predictor saved alone, or a whole Qwen3-Omni or
 * Qwen3-TTS model (tensors under "talker.code_predictor."). Tables and heads may be MLX-quantized (stack_rows). Input rows: position 0 the talker's hidden state, position 1 the
 * talker's own codec table at c0 (its first V rows; it also holds special ids), position p >= 2
 * model.codec_embedding.{p-2} at c(p-1); all in the talker's width and, when it differs from the predictor's
 * (Qwen3-TTS), projected by small_to_mtp_projection (weight and bias) like the hidden state. Heads lm_head.{l-1}. */
static dd_status load_qwen3_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    dd_config *c = &m->cfg;
    const int64_t D = c->dim, V = c->codebook_size, Q = c->levels, I = c->input_dim;
    const char *P = m->prefix;
    dd_status s;
    char n1[256], n2[256];
    snprintf(n1, sizeof n1, "%ssmall_to_mtp_projection.weight", P);
    snprintf(n2, sizeof n2, "%ssmall_to_mtp_projection.bias", P);
    if ((s = load_mat(L, n1, 0, D, I, 0, &m->in_proj, err)) || (s = load_vec(L, n2, D, 0, &m->in_bias, err))) return s;
    if (m->in_bias && !m->in_proj.rows)
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s' without '%s'", L->label, n2, n1);
    if (!m->in_proj.rows && I != D)
        return dd_fail(err, DD_EMODEL, "%s: the talker's width %lld differs from the predictor's %lld but there is no '%s'",
                       L->label, (long long)I, (long long)D, n1);
    c->embed_in_input_space = m->in_proj.rows > 0;
    /* the code tables: level 0 = the talker's table, level j >= 1 = codec_embedding.{j-1} */
    const char *tname = "talker.model.codec_embedding.weight", *tfile;
    const dd_st_tensor *tt = find(L, tname, &tfile);
    if (!tt)
        return dd_fail(err, DD_EMODEL,
                       "%s: missing tensor '%s' (the talker's codec table, for c0's input row; put the .safetensors "
                       "file that holds it in the model directory)",
                       L->label, tname);
    if (tt->ndim != 2 || tt->shape[0] < V) {
        char sh[96];
        shape_str(tt, sh, sizeof sh);
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': shape %s (want [>= %lld, %lld])", tfile, tname, sh,
                       (long long)V, (long long)I);
    }
    const int nt = (int)Q - 1; /* <= DD_MAX_LEVELS - 1 (the config parser's bound) */
    dd_weight tw[DD_MAX_LEVELS];
    char tn[DD_MAX_LEVELS][256];
    snprintf(tn[0], sizeof tn[0], "%s", tname);
    if ((s = load_mat(L, tname, 0, tt->shape[0], I, 1, &tw[0], err))) return s;
    for (int j = 1; j < nt; j++) {
        snprintf(tn[j], sizeof tn[j], "%smodel.codec_embedding.%d.weight", P, j - 1);
        if ((s = load_mat(L, tn[j], 0, V, I, 1, &tw[j], err))) return s;
    }
    if ((s = stack_rows(L, "code tables", tn, tw, V, nt, &m->embed, err))) return s;
    /* the last table feeds only the talker's next input (dd_next_embedding); optional */
    snprintf(n1, sizeof n1, "%smodel.codec_embedding.%d.weight", P, (int)Q - 2);
    if ((s = load_mat(L, n1, 0, V, I, 0, &m->embed_last, err))) return s;
    for (int j = 0; j < nt; j++) {
        snprintf(tn[j], sizeof tn[j], "%slm_head.%d.weight", P, j);
        if ((s = load_mat(L, tn[j], 0, V, D, 1, &tw[j], err))) return s;
    }
    if ((s = stack_rows(L, "heads", tn, tw, V, nt, &m->heads, err))) return s;
    snprintf(n1, sizeof n1, "%smodel.norm.weight", P);
    if ((s = load_vec(L, n1, D, 1, &m->norm_w, err))) return s;
    for (int i = 0; i < c->layers; i++) {
        snprintf(n1, sizeof n1, "%smodel.layers.%d.", P, i);
        if ((s = load_hf_layer(L, n1, i, 1, &m->layer[i], err))) return s;
    }
    return DD_OK;
}

/* Kyutai Moshi's depformer as transformers saves it (docs/formats.md): MoshiForConditionalGeneration (tensors under
 * "depth_decoder.", usually sharded) or MoshiDepthDecoder alone (unprefixed). text_embed_tokens [TV+1, D] is
 * position 0's table, embed_tokens.{j} [V+1, D] position j+1's (stacked into one owned [(Q-1)(V+1), D] view);
 * input_projections, every attention ("….linear.weight") and MLP matrix and lm_heads are per-position stacks
 * [Q, out, in], used in place; fc1's rows are the gate (SiLU) half, then the up half. */
static dd_status load_moshi_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    const dd_config *c = &m->cfg;
    const int64_t D = c->dim, V = c->codebook_size, Q = c->levels, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
                  F = c->ffn_dim, I = c->input_dim;
    const char *P = m->prefix;
    dd_status s;
    char n1[256], n2[256];
    dd_weight tw[DD_MAX_LEVELS];
    char tn[DD_MAX_LEVELS][256];
    for (int j = 0; j < Q - 1; j++) {
        snprintf(tn[j], sizeof tn[j], "%sembed_tokens.%d.weight", P, j);
        if ((s = load_mat(L, tn[j], 0, V + 1, D, 1, &tw[j], err))) return s;
    }
    if ((s = stack_rows(L, "code tables", tn, tw, V + 1, (int)Q - 1, &m->embed, err))) return s;
#define NM(buf, fmt, ...) (snprintf(buf, sizeof buf, "%s" fmt, P, __VA_ARGS__), buf)
    if ((s = load_mat(L, NM(n1, "%s", "text_embed_tokens.weight"), 0, c->text_vocab + 1, D, 1, &m->text_embed, err)) ||
        (s = load_mat(L, NM(n1, "%s", "input_projections.weight"), Q, D, I, 1, &m->in_proj, err)) ||
        (s = load_mat(L, NM(n1, "%s", "lm_heads.weight"), Q, V, D, 1, &m->heads, err)))
        return s;
    for (int i = 0; i < c->layers; i++) {
        dd_weight q, k, v, o, fc1, fc2;
        float *w1, *w2;
        if ((s = load_vec(L, NM(n1, "layers.%d.input_layernorm.weight", i), D, 1, &w1, err)) ||
            (s = load_vec(L, NM(n2, "layers.%d.post_attention_layernorm.weight", i), D, 1, &w2, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.self_attn.q_proj.linear.weight", i), Q, H * HD, D, 1, &q, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.self_attn.k_proj.linear.weight", i), Q, KV * HD, D, 1, &k, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.self_attn.v_proj.linear.weight", i), Q, KV * HD, D, 1, &v, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.self_attn.o_proj.linear.weight", i), Q, D, H * HD, 1, &o, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.mlp.fc1.weight", i), Q, 2 * F, D, 1, &fc1, err)) ||
            (s = load_mat(L, NM(n1, "layers.%d.mlp.fc2.weight", i), Q, D, F, 1, &fc2, err)))
            return s;
        cut_slices(m, i, &q, &k, &v, &o, &fc1, &fc2, w1, w2);
    }
#undef NM
    return DD_OK;
}

/* Every layer matrix must share one storage type, and one group size when quantized (backends dispatch once per
 * model); a config that declares quantization must describe quantized layer matrices. csm picks the tensor
 * names used in messages. */
static dd_status check_types(loader *L, int family, dd_error *err) {
    dd_model *m = L->m;
    dd_config *c = &m->cfg;
    c->has_head0 = m->head0.rows > 0 || c->per_position; /* Moshi: c0 from position 0's head */
    c->has_in_proj = m->in_proj.rows > 0;
    c->has_pos = m->pos != NULL;
    if (!c->has_in_proj && c->input_dim != c->dim)
        return dd_fail(err, DD_EMODEL, "%s: no in_proj but input_dim %d != dim %d", L->label, c->input_dim, c->dim);
    const dd_weight *w0 = &m->layer[0].wq;
    static const char *const nat[7] = {"qkv", "qkv", "qkv", "out", "fc1", "fc1", "fc2"};
    static const char *const hf[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                      "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    static const char *const moshi[7] = {"self_attn.q_proj.linear", "self_attn.k_proj.linear",
                                         "self_attn.v_proj.linear", "self_attn.o_proj.linear",
                                         "mlp.fc1",                 "mlp.fc1",
                                         "mlp.fc2"};
    char pre[96];
    snprintf(pre, sizeof pre, "%s", family == DD_FAMILY_CSM ? "depth_decoder.model.layers." : "layers.");
    if (family == DD_FAMILY_QWEN3) snprintf(pre, sizeof pre, "%smodel.layers.", m->prefix);
    static const char *const kyutai[7] = {"self_attn.in_projs.P", "self_attn.in_projs.P",
                                          "self_attn.in_projs.P", "self_attn.out_projs.P",
                                          "gating.P.linear_in",   "gating.P.linear_in",
                                          "gating.P.linear_out"};
    static const char *const kyutai_mlx[7] = {"self_attn.in_proj",  "self_attn.in_proj", "self_attn.in_proj",
                                              "self_attn.out_proj", "gating.linear_in",  "gating.linear_in",
                                              "gating.linear_out"};
    if (family == DD_FAMILY_MOSHI)
        snprintf(pre, sizeof pre, "%s%slayers.",
                 m->kyutai == 2 ? "depformer.slices.P.transformer." : m->kyutai ? "depformer." : "", m->prefix);
    const char *const *nm = family == DD_FAMILY_NATIVE ? nat
                            : family == DD_FAMILY_MOSHI ? (m->kyutai == 2 ? kyutai_mlx : m->kyutai ? kyutai : moshi)
                                                        : hf;
    for (int li = 0; li < c->layers * m->nslices; li++) { /* every position's slice too */
        const dd_layer *l = &m->layer[li];
        const int i = li % c->layers;
        const dd_weight *ws[7] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->fc1, &l->up, &l->fc2};
        for (int k = 0; k < 7; k++) {
            if (ws[k]->rows == 0) continue; /* gpt has no separate up */
            if (ws[k]->type != w0->type || ws[k]->group != w0->group)
                return dd_fail(err, DD_EMODEL,
                               "%s: tensor '%s%d.%s.weight' is %s (group %d) but '%s0.%s.weight' is %s (group %d): "
                               "all layer matrices must share one storage type (group 0: not quantized)",
                               L->label, pre, i, nm[k], dd_dtype_name(ws[k]->type), ws[k]->group, pre, nm[0],
                               dd_dtype_name(w0->type), w0->group);
        }
    }
    c->weight_type = w0->type;
    int quant = w0->type == DD_Q8 || w0->type == DD_Q4;
    if (c->quant_bits && !quant)
        return dd_fail(err, DD_EMODEL, "%s: config declares \"quantization\" (%d-bit) but the layer matrices are %s",
                       L->label, c->quant_bits, dd_dtype_name(w0->type));
    /* what `info` reports is what the layer matrices are (quantized tensors were checked against the config's
     * bits and group as they were read) */
    c->quant_bits = quant ? (w0->type == DD_Q8 ? 8 : 4) : 0;
    c->quant_group = quant ? w0->group : 0;
    return DD_OK;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static dd_status add_map(dd_model *m, const char *path, dd_error *err) {
    dd_st_file *n = realloc(m->maps, (size_t)(m->nmaps + 1) * sizeof *n);
    if (!n) return dd_fail(err, DD_ENOMEM, "%s: out of memory", path);
    m->maps = n;
    dd_status s = dd_st_open(&m->maps[m->nmaps], path, err);
    if (s) return s;
    m->nmaps++;
    return DD_OK;
}

/* A JSON file; *st gets DD_EIO when it is missing, unreadable or not a regular file (a FIFO is never opened, so
 * never waited on), DD_EFORMAT when it is not valid JSON. The status does not depend on err being NULL. */
static json_t *load_json(const char *path, dd_status *st, dd_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        *st = dd_fail(err, DD_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        *st = dd_fail(err, DD_EIO, "%s: not a regular file", path);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    *st = DD_OK;
    if (!j && json_error_code(&je) == json_error_cannot_open_file)
        *st = dd_fail(err, DD_EIO, "%s: %s", path, je.text);
    else if (!j)
        *st = dd_fail(err, DD_EFORMAT, "%s: JSON: %s (line %d)", path, je.text, je.line);
    return j;
}

/* Whether the family's loader can ask for tensor `name`: a whole Qwen3 model (Qwen3-Omni, Qwen3-TTS) needs only its
 * predictor (m->prefix) and the talker's codec table, a whole Moshi only its depth decoder; everything else may be
 * asked for (CSM reads tensors of several top-level modules). Shards holding no wanted tensor are not opened. */
static int wanted(const dd_model *m, const char *name) {
    static const char talker_table[] = "talker.model.codec_embedding.";
    size_t n = strlen(m->prefix);
    if (!n || (m->family != DD_FAMILY_QWEN3 && m->family != DD_FAMILY_MOSHI)) return 1;
    if (strncmp(name, m->prefix, n) == 0) return 1;
    return m->family == DD_FAMILY_QWEN3 && strncmp(name, talker_table, sizeof talker_table - 1) == 0;
}

/* Is `file` a shard named by the index's weight_map (NULL: no index)? */
static int in_weight_map(const json_t *wm, const char *file) {
    const char *key;
    json_t *v;
    if (!wm) return 0;
    json_object_foreach((json_t *)wm, key, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), file) == 0) return 1;
    }
    return 0;
}

/* Qwen3: the other .safetensors files of the directory too (the talker's codec table may sit in its own file); the
 * shards of an index (wm) are opened only through it, when they hold a tensor the loader wants. */
static dd_status add_other_files(dd_model *m, const char *dir, const json_t *wm, dd_error *err) {
    DIR *dp = opendir(dir);
    if (!dp) return dd_fail(err, DD_EIO, "%s: cannot list the directory", dir);
    dd_status s = DD_OK;
    struct dirent *e;
    while (!s && (e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0 || e->d_name[0] == '.') continue;
        if (in_weight_map(wm, e->d_name)) continue;
        char sp[1200];
        snprintf(sp, sizeof sp, "%s/%s", dir, e->d_name);
        int seen = 0;
        for (int i = 0; i < m->nmaps && !seen; i++) seen = strcmp(m->maps[i].path, sp) == 0;
        if (!seen && is_file(sp)) s = add_map(m, sp, err);
    }
    closedir(dp);
    return s;
}

/* HF directory: config.json + model.safetensors, or model.safetensors.index.json listing shards, of which only those
 * holding a tensor the family's loader wants are opened (wanted(); a whole Qwen3-Omni's thinker is never mapped).
 * Qwen3: the directory's other .safetensors files too. */
static dd_status open_hf_dir(dd_model *m, const char *dir, dd_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    dd_status s;
    json_t *cj = load_json(path, &s, err);
    if (!cj) return s;
    m->family = dd_config_family(cj);
    m->prefix = "";
    if (m->family == DD_FAMILY_QWEN3) {
        s = dd_config_parse_qwen3(path, cj, &m->cfg, &m->prefix, err);
    } else if (m->family == DD_FAMILY_MOSHI) {
        s = dd_config_parse_moshi(path, cj, &m->cfg, &m->prefix, err);
    } else {
        m->family = DD_FAMILY_CSM;
        s = dd_config_parse_csm(path, cj, &m->cfg, err);
    }
    json_decref(cj);
    if (s) return s;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (is_file(path)) {
        s = add_map(m, path, err);
        return s || m->family != DD_FAMILY_QWEN3 ? s : add_other_files(m, dir, NULL, err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dd_fail(err, DD_EIO, "%s: neither model.safetensors nor model.safetensors.index.json found", dir);
    json_t *ij = load_json(path, &s, err);
    if (!ij) return s;
    json_t *wm = json_object_get(ij, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(ij);
        return dd_fail(err, DD_EMODEL, "%s: \"weight_map\" is not an object", path);
    }
    const char *key;
    json_t *v;
    s = DD_OK;
    int listed = 0;
    json_object_foreach(wm, key, v) {
        const char *shard = json_string_value(v);
        if (!shard || strchr(shard, '/') || strcmp(shard, "..") == 0 || !*shard) {
            s = dd_fail(err, DD_EMODEL, "%s: weight_map['%s']: shard '%s' must be a plain file name", path, key,
                        shard ? shard : "(not a string)");
            break;
        }
        listed = 1;
        if (!wanted(m, key)) continue;
        char sp[1200];
        snprintf(sp, sizeof sp, "%s/%s", dir, shard);
        int seen = 0;
        for (int i = 0; i < m->nmaps && !seen; i++) seen = strcmp(m->maps[i].path, sp) == 0;
        if (!seen && (s = add_map(m, sp, err))) break;
    }
    if (!s && !listed) s = dd_fail(err, DD_EMODEL, "%s: weight_map lists no shards", path);
    if (!s && m->nmaps == 0)
        s = dd_fail(err, DD_EMODEL, "%s: weight_map lists no tensor under '%s'", path, m->prefix);
    if (!s && m->family == DD_FAMILY_QWEN3) s = add_other_files(m, dir, wm, err);
    json_decref(ij);
    if (s) return s;
    /* a tensor name in two shards is ambiguous */
    for (int i = 0; i < m->nmaps; i++)
        for (int k = 0; k < m->maps[i].n; k++)
            for (int j = i + 1; j < m->nmaps; j++)
                if (dd_st_find(&m->maps[j], m->maps[i].t[k].name))
                    return dd_fail(err, DD_EFORMAT, "%s and %s: tensor '%s' appears in both shards", m->maps[i].path,
                                   m->maps[j].path, m->maps[i].t[k].name);
    return DD_OK;
}

/* Native file: config from __metadata__["depthdec.config"], else config.json beside the file. */
static dd_status open_native(dd_model *m, const char *path, dd_error *err) {
    dd_status s = add_map(m, path, err);
    if (s) return s;
    const char *meta = dd_st_meta(&m->maps[0], "depthdec.config");
    json_t *cj;
    char src[1200];
    if (meta) {
        json_error_t je;
        snprintf(src, sizeof src, "%s: __metadata__[depthdec.config]", path);
        cj = json_loads(meta, JSON_REJECT_DUPLICATES, &je);
        if (!cj) return dd_fail(err, DD_EFORMAT, "%s: JSON: %s", src, je.text);
    } else {
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash - path) : 1;
        snprintf(src, sizeof src, "%.*s/config.json", dl, slash ? path : ".");
        if (!is_file(src))
            return dd_fail(err, DD_EMODEL, "%s: no __metadata__[\"depthdec.config\"] and no %s beside it", path, src);
        cj = load_json(src, &s, err);
        if (!cj) return s;
    }
    s = dd_config_parse_native(src, cj, &m->cfg, err);
    json_decref(cj);
    return s;
}

/* ---- Kyutai's own checkpoints (the moshi package: kyutai-labs/moshi, e.g. kyutai/moshiko-pytorch-bf16) ---------
 * The whole LM's state dict in one safetensors file; only the depformer's tensors are read (docs/formats.md):
 *   depformer_in.{p}.weight [D, I] (one per position: depformer_multi_linear; a single one is shared by all),
 *   depformer_text_emb.weight [TV+1, D], depformer_emb.{j}.weight [V+1, D] (j < Q-1), linears.{p}.weight [V, D],
 *   depformer.layers.{i}.norm1.alpha / norm2.alpha [1, 1, D] (RMSNorm),
 *   depformer.layers.{i}.self_attn.in_projs.{p}.weight [D + 2*kv, D] (rows q, k, v) and out_projs.{p}.weight [D, D],
 *     or the older stacked in_proj_weight [Q*(D + 2*kv), D] and out_proj.weight [Q*D, D] (what the package's load
 *     hook splits the same way),
 *   depformer.layers.{i}.gating.{p}.linear_in.weight [2F, D] (rows: the SiLU half, then the multiplied half) and
 *     linear_out.weight [D, F].
 * Q, V, TV, I, D, F, kv width and layers come from these shapes. What shapes cannot tell comes from Kyutai's
 * config.json beside the file when there is one (the LMModel kwargs), else from the moshi package's defaults for
 * Moshi 7B (loaders.py _lm_kwargs, used by the package itself when a repository has no config.json):
 * depformer_num_heads (16), norm ("rms_norm_f32": eps 1e-8; "rms_norm": 1e-5), depformer_pos_emb ("none"),
 * depformer_gating ("silu"), no depformer_weights_per_step_schedule. Anything else is refused by name. */

/* ---- Kyutai's MLX checkpoints (the moshi_mlx package: kyutai-labs/moshi moshi_mlx/, e.g. kyutai/moshiko-mlx-q4) -----
 * The whole Lm's weights as moshi_mlx's Module.save_weights writes them (moshi_mlx/models/lm.py: Lm, DepFormer,
 * DepFormerSlice; modules/transformer.py), one module tree per depformer slice p (docs/formats.md):
 *   depformer.slices.{p}.emb.weight (slice 0: the text table [TV+1, D]; p >= 1: code p-1's [V+1, D]),
 *   depformer.slices.{p}.linear_in.weight [D, I], depformer.slices.{p}.linear_out.weight [V, D],
 *   depformer.slices.{p}.transformer.layers.{i}.norm1.weight / norm2.weight [D] (RMSNorm, eps 1e-8),
 *     .self_attn.in_proj.weight [3D, D] (rows q, k, v: moshi_mlx has no GQA), .self_attn.out_proj.weight [D, D],
 *     .gating.linear_in.weight [2F, D] (the SiLU half, then the multiplied half), .gating.linear_out.weight [D, F].
 * The published q8/q4 files are nn.quantize(model, bits, group_size) of the bf16 model: every Linear and Embedding
 * above is MLX-quantized (X.weight U32 + X.scales + X.biases, bf16), read as any quantized matrix. Each slice has its
 * own norms (Kyutai's conversion copies the PyTorch model's shared ones into every slice); the slice counts as a
 * position's weights, so a schedule (depformer_weights_per_step_schedule) was resolved when the file was written. */

/* Is `path` a safetensors file of Kyutai's (no depthdec config)? 1: the moshi package's (depformer_text_emb.weight),
 * 2: moshi_mlx's (depformer.slices.0.linear_out.weight); else 0. */
static int kyutai_file(const char *path) {
    dd_st_file f;
    if (dd_st_open(&f, path, NULL)) return 0;
    int k = 0;
    if (!dd_st_meta(&f, "depthdec.config")) {
        if (dd_st_find(&f, "depformer_text_emb.weight")) k = 1;
        else if (dd_st_find(&f, "depformer.slices.0.linear_out.weight")) k = 2;
    }
    dd_st_close(&f);
    return k;
}

/* moshi_mlx: a 2-D matrix's rows and columns, dense as stored, MLX-quantized (U32 words beside `X.scales`) as
 * words * 32 / bits, bits those of the heads (mlx_bits; nn.quantize gives every Linear the same). With dense heads
 * a quantized matrix's width cannot be told from its shape: refused. */
static dd_status mlx_dims(loader *L, const char *name, int bits, int64_t *rows, int64_t *cols, dd_error *err) {
    const dd_st_tensor *t = find(L, name, NULL);
    if (!t) return dd_fail(err, DD_EMODEL, "%s: missing tensor '%s' (Kyutai moshi_mlx checkpoint)", L->label, name);
    if (t->ndim != 2) return dd_fail(err, DD_EMODEL, "%s: tensor '%s': %d dims, expected 2", L->label, name, t->ndim);
    char sn[300];
    snprintf(sn, sizeof sn, "%.*s.scales", (int)strlen(name) - 7, name); /* name ends in ".weight" */
    *rows = t->shape[0];
    *cols = t->shape[1];
    if (!find(L, sn, NULL)) return DD_OK;
    if (!bits)
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s' is MLX-quantized but the heads are not", L->label, name);
    if (*cols > INT64_MAX / 32)
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': %lld words per row", L->label, name, (long long)*cols);
    *cols = *cols * 32 / bits;
    return DD_OK;
}

/* moshi_mlx: the quantization bits of the head `name` [V, D] (0 when dense), from its words per row and D. */
static dd_status mlx_bits(loader *L, const char *name, int64_t D, int *bits, dd_error *err) {
    char sn[300];
    snprintf(sn, sizeof sn, "%.*s.scales", (int)strlen(name) - 7, name);
    const dd_st_tensor *t = find(L, name, NULL);
    *bits = 0;
    if (!t || !find(L, sn, NULL) || t->ndim != 2) return DD_OK; /* dense, or refused by the shape checks */
    const int64_t words = t->shape[1];
    if (words < 1 || words > D || (words * 32) % D)
        return dd_fail(err, DD_EMODEL, "%s: quantized tensor '%s': %lld u32 words per row do not pack %lld values",
                       L->label, name, (long long)words, (long long)D);
    *bits = (int)(words * 32 / D);
    if (*bits != 8 && *bits != 4)
        return dd_fail(err, DD_EUNSUPPORTED,
                       "%s: tensor '%s' is MLX-quantized at %d bits (%lld words for %lld columns): the engine takes "
                       "8 or 4", L->label, name, *bits, (long long)words, (long long)D);
    return DD_OK;
}

static dd_status kyutai_shape(loader *L, const char *name, int nd, int64_t *dims, dd_error *err) {
    const dd_st_tensor *t = find(L, name, NULL);
    if (!t) return dd_fail(err, DD_EMODEL, "%s: missing tensor '%s' (Kyutai moshi checkpoint)", L->label, name);
    if (t->ndim != nd) return dd_fail(err, DD_EMODEL, "%s: tensor '%s': %d dims, expected %d", L->label, name, t->ndim, nd);
    for (int i = 0; i < nd; i++) dims[i] = t->shape[i];
    return DD_OK;
}

static dd_status kyutai_hint_str(const char *src, const json_t *cj, const char *key, const char *dflt, const char **out,
                                 dd_error *err) {
    const json_t *v = cj ? json_object_get(cj, key) : NULL;
    *out = dflt;
    if (!v || json_is_null(v)) return DD_OK;
    if (!json_is_string(v)) return dd_fail(err, DD_EMODEL, "%s: \"%s\" is not a string", src, key);
    *out = json_string_value(v);
    return DD_OK;
}

/* The moshi package's file: V, D, TV, I into L->m->cfg, the attention in_proj rows per position *R and the gated
 * width *F; tensors of features the engine does not run refused by name. */
static dd_status kyutai_torch_dims(loader *L, int Q, int64_t *R, int64_t *F, dd_error *err) {
    dd_config *c = &L->m->cfg;
    static const char *const refused[] = {"depformer_norms.0.alpha", "depformer_norms.0.weight", "linears.0.bias",
                                          "depformer.layers.0.layer_scale_1.scale", "depformer.layers.0.norm1.weight",
                                          "depformer.layers.0.linear1.weight", "depformer_text_emb.low_rank.weight",
                                          "depformer_emb.0.low_rank.weight", "depformer.layers.0.norm_cross.weight"};
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (find(L, refused[k], NULL))
            return dd_fail(err, DD_EUNSUPPORTED, "%s: tensor '%s': not supported in a Kyutai depformer", L->label,
                           refused[k]);
    int64_t d2[2];
    dd_status s;
    if ((s = kyutai_shape(L, "linears.0.weight", 2, d2, err))) return s;
    c->codebook_size = (int)d2[0];
    c->dim = (int)d2[1];
    if ((s = kyutai_shape(L, "depformer_text_emb.weight", 2, d2, err))) return s;
    c->text_vocab = (int)d2[0] - 1;
    if ((s = kyutai_shape(L, "depformer_in.0.weight", 2, d2, err))) return s;
    c->input_dim = (int)d2[1];
    if (find(L, "depformer.layers.0.self_attn.in_proj_weight", NULL)) {
        if ((s = kyutai_shape(L, "depformer.layers.0.self_attn.in_proj_weight", 2, d2, err))) return s;
        *R = d2[0] / Q;
    } else {
        if ((s = kyutai_shape(L, "depformer.layers.0.self_attn.in_projs.0.weight", 2, d2, err))) return s;
        *R = d2[0];
    }
    if ((s = kyutai_shape(L, "depformer.layers.0.gating.0.linear_out.weight", 2, d2, err))) return s;
    *F = d2[1];
    return DD_OK;
}

/* moshi_mlx's file: as kyutai_torch_dims, from slice 0's tensors (every slice's are checked at load). D is the
 * norms' length (RMSNorm weights are never quantized), the quantization bits those of the heads. moshi_mlx's
 * attention has no GQA (Attention asserts kv_repeat == 1), so in_proj must hold 3·D rows. */
static dd_status kyutai_mlx_dims(loader *L, int Q, int nl, int64_t *R, int64_t *F, dd_error *err) {
    dd_config *c = &L->m->cfg;
    char nm[256];
    /* features moshi_mlx has but the engine does not run: low-rank or demultiplexed tables (ScaledEmbedding),
     * biases (bias_attn follows "depformer_layer_scale"), layer scales, LayerNorm, an MLP without gating, a slice
     * or layer more than the others have */
    static const char *const emb[] = {"emb.low_rank.weight", "emb.out1.weight", "emb.out2.weight"};
    static const char *const lay[] = {"self_attn.in_proj.bias", "self_attn.out_proj.bias", "gating.linear_in.bias",
                                      "gating.linear_out.bias", "layer_scale_1.scale", "layer_scale_2.scale",
                                      "norm1.bias", "gating.linear1.weight", "cross_attention.in_proj.weight"};
    for (int p = 0; p <= Q; p++) {
        for (size_t k = 0; p < Q && k < sizeof emb / sizeof *emb; k++)
            if (snprintf(nm, sizeof nm, "depformer.slices.%d.%s", p, emb[k]), find(L, nm, NULL))
                return dd_fail(err, DD_EUNSUPPORTED, "%s: tensor '%s': not supported in a Kyutai depformer",
                               L->label, nm);
        for (int i = 0; p < Q && i < nl; i++)
            for (size_t k = 0; k < sizeof lay / sizeof *lay; k++)
                if (snprintf(nm, sizeof nm, "depformer.slices.%d.transformer.layers.%d.%s", p, i, lay[k]),
                    find(L, nm, NULL))
                    return dd_fail(err, DD_EUNSUPPORTED, "%s: tensor '%s': not supported in a Kyutai depformer",
                                   L->label, nm);
        snprintf(nm, sizeof nm, p < Q ? "depformer.slices.%d.transformer.layers.%d.norm1.weight"
                                      : "depformer.slices.%d.emb.weight", p, nl);
        if (find(L, nm, NULL))
            return dd_fail(err, DD_EMODEL, "%s: tensor '%s': more %s than the %d %s", L->label, nm,
                           p < Q ? "layers" : "slices", p < Q ? nl : Q,
                           p < Q ? "of slice 0" : "heads depformer.slices.{k}.linear_out.weight");
    }
    int64_t d2[2], rows, cols;
    int bits;
    dd_status s;
    if ((s = kyutai_shape(L, "depformer.slices.0.transformer.layers.0.norm1.weight", 1, d2, err))) return s;
    const int64_t D = d2[0];
    if (D < 1 || D > DD_MAX_DIM)
        return dd_fail(err, DD_EMODEL, "%s: depformer width %lld out of range (want 1..%d)", L->label, (long long)D,
                       DD_MAX_DIM);
    c->dim = (int)D;
    if ((s = mlx_bits(L, "depformer.slices.0.linear_out.weight", D, &bits, err)) ||
        (s = mlx_dims(L, "depformer.slices.0.linear_out.weight", bits, &rows, &cols, err)))
        return s;
    c->codebook_size = (int)rows;
    if ((s = mlx_dims(L, "depformer.slices.0.emb.weight", bits, &rows, &cols, err))) return s;
    c->text_vocab = (int)rows - 1;
    if ((s = mlx_dims(L, "depformer.slices.0.linear_in.weight", bits, &rows, &cols, err))) return s;
    c->input_dim = (int)cols;
    if ((s = mlx_dims(L, "depformer.slices.0.transformer.layers.0.self_attn.in_proj.weight", bits, R, &cols, err)) ||
        (s = mlx_dims(L, "depformer.slices.0.transformer.layers.0.gating.linear_out.weight", bits, &rows, F, err)))
        return s;
    if (*R != 3 * D)
        return dd_fail(err, DD_EMODEL,
                       "%s: tensor 'depformer.slices.0.transformer.layers.0.self_attn.in_proj.weight': %lld rows, "
                       "expected 3 x %lld (moshi_mlx's attention has no GQA: kv_repeat 1)", L->label, (long long)*R,
                       (long long)D);
    return DD_OK;
}

/* A Kyutai config.json key that restates a dimension the shapes gave: when present it must agree */
static dd_status kyutai_hint_dim(const char *src, const json_t *cj, const char *key, int64_t have, dd_error *err) {
    const json_t *v = cj ? json_object_get(cj, key) : NULL;
    if (!v || json_is_null(v)) return DD_OK;
    if (!json_is_integer(v) || json_integer_value(v) != have)
        return dd_fail(err, DD_EMODEL, "%s: \"%s\" is not %lld, what the tensors hold", src, key, (long long)have);
    return DD_OK;
}

/* mlx: the moshi_mlx layout (kyutai_file() == 2), else the moshi package's */
static dd_status open_kyutai(dd_model *m, const char *path, int mlx, dd_error *err) {
    dd_status s = add_map(m, path, err);
    if (s) return s;
    loader L = {.m = m, .label = path};
    dd_config *c = &m->cfg;
    memset(c, 0, sizeof *c);
    /* the hints: config.json beside the file (Kyutai's keys), when it is Kyutai's (transformers' has
     * depth_decoder_config) */
    char src[1200];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path) : 1;
    snprintf(src, sizeof src, "%.*s/config.json", dl, slash ? path : ".");
    json_t *cj = NULL;
    if (is_file(src)) {
        cj = load_json(src, &s, err);
        if (!cj) return s;
        if (!json_is_object(cj) || json_object_get(cj, "depth_decoder_config")) {
            json_decref(cj);
            cj = NULL;
        }
    }
    int heads = 16;
    const char *norm, *pos, *gating;
    const json_t *hv = cj ? json_object_get(cj, "depformer_num_heads") : NULL;
    if (hv && !json_is_null(hv)) {
        if (!json_is_integer(hv) || json_integer_value(hv) < 1 || json_integer_value(hv) > DD_MAX_HEADS) {
            json_decref(cj);
            return dd_fail(err, DD_EMODEL, "%s: \"depformer_num_heads\" must be an integer in [1, %d]", src,
                           DD_MAX_HEADS);
        }
        heads = (int)json_integer_value(hv);
    }
    const json_t *sched = cj ? json_object_get(cj, "depformer_weights_per_step_schedule") : NULL;
    const json_t *dn = cj ? json_object_get(cj, "depformer_norm") : NULL;
    const json_t *lr = cj ? json_object_get(cj, "depformer_low_rank_embeddings") : NULL;
    if ((s = kyutai_hint_str(src, cj, "norm", "rms_norm_f32", &norm, err)) ||
        (s = kyutai_hint_str(src, cj, "depformer_pos_emb", "none", &pos, err)) ||
        (s = kyutai_hint_str(src, cj, "depformer_gating", "silu", &gating, err)))
        goto out;
    /* moshi_mlx (LmConfig.from_config_dict, TransformerLayer) builds the depformer with RMSNorm at eps 1e-8 and
     * SiLU-gated MLPs whatever "norm" and "depformer_gating" say, and its files hold every slice's weights (a
     * schedule was resolved when they were converted): for mlx only the positional embedding and the context count */
    if (mlx) c->norm_eps = 1e-8f;
    else if (strcmp(norm, "rms_norm_f32") == 0) c->norm_eps = 1e-8f;
    else if (strcmp(norm, "rms_norm") == 0) c->norm_eps = 1e-5f;
    else s = dd_fail(err, DD_EUNSUPPORTED, "%s: norm \"%s\": only rms_norm and rms_norm_f32 are supported", src, norm);
    if (!s && strcmp(pos, "none") != 0)
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_pos_emb \"%s\": only \"none\" is supported", src, pos);
    if (mlx) sched = dn = lr = NULL; /* low-rank tables are refused by their tensors' names */
    if (!s && !mlx && strcmp(gating, "silu") != 0)
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_gating \"%s\": only \"silu\" is supported", src, gating);
    if (!s && sched && !json_is_null(sched))
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_weights_per_step_schedule is not supported", src);
    if (!s && dn && !json_is_null(dn))
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_norm is not supported", src);
    if (!s && lr && !json_is_null(lr))
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_low_rank_embeddings is not supported", src);
    if (s) goto out;
    /* shapes */
    char nm[256];
    int Q = 0, L_ = 0;
    const char *head_fmt = mlx ? "depformer.slices.%d.linear_out.weight" : "linears.%d.weight";
    const char *norm_fmt = mlx ? "depformer.slices.0.transformer.layers.%d.norm1.weight" : "depformer.layers.%d.norm1.alpha";
    while (Q <= DD_MAX_LEVELS && (snprintf(nm, sizeof nm, head_fmt, Q), find(&L, nm, NULL))) Q++;
    while (L_ <= DD_MAX_LAYERS && (snprintf(nm, sizeof nm, norm_fmt, L_), find(&L, nm, NULL))) L_++;
    if (Q < 2 || Q > DD_MAX_LEVELS) {
        s = dd_fail(err, DD_EMODEL, "%s: %d heads %s (want 2..%d)", path, Q,
                    mlx ? "depformer.slices.{k}.linear_out.weight" : "linears.{k}.weight", DD_MAX_LEVELS);
        goto out;
    }
    if (L_ < 1 || L_ > DD_MAX_LAYERS) {
        snprintf(nm, sizeof nm, norm_fmt, L_ < 1 ? 0 : L_);
        s = dd_fail(err, DD_EMODEL, "%s: %d depformer layers (tensor '%s'; want 1..%d)", path, L_, nm, DD_MAX_LAYERS);
        goto out;
    }
    int64_t R, F, D;
    if ((s = mlx ? kyutai_mlx_dims(&L, Q, L_, &R, &F, err) : kyutai_torch_dims(&L, Q, &R, &F, err))) goto out;
    D = c->dim;
    if (c->codebook_size < 1 || c->codebook_size > DD_MAX_VOCAB - 1 || D < 1 || D > DD_MAX_DIM ||
        c->text_vocab < 1 || c->text_vocab > DD_MAX_TEXT_VOCAB || c->input_dim < 1 || c->input_dim > DD_MAX_DIM ||
        F < 1 || F > DD_MAX_FFN) {
        s = dd_fail(err, DD_EMODEL, "%s: dims out of range (V %d, D %lld, text %d, input %d, ffn %lld)", path,
                    c->codebook_size, (long long)D, c->text_vocab, c->input_dim, (long long)F);
        goto out;
    }
    /* the defaults stand in only for Moshi 7B's depformer (kyutai/moshiko|moshika-pytorch-*, whose repositories hold
     * no config.json; moshi_mlx's own default, models.config_v0_1(), for kyutai/moshiko|moshika-mlx-*): other dims
     * without config.json could load with the wrong head count and still fit */
    if (!cj && !(D == 1024 && Q == 8 && L_ == 6 && c->input_dim == 4096 && F == 2816)) {
        s = dd_fail(err, DD_EMODEL,
                    "%s: not Moshi 7B's depformer dims (D %lld, Q %d, layers %d, input %d, ffn %lld) and no Kyutai "
                    "config.json beside it: give one with \"depformer_num_heads\"%s (the LMModel kwargs)",
                    path, (long long)D, Q, L_, c->input_dim, (long long)F, mlx ? "" : " and \"norm\"");
        goto out;
    }
    /* keys restating what the tensors hold must agree (moshi_mlx's strict load would fail otherwise); moshi_mlx
     * attends to the current position and the `depformer_context` before it (Attention.__call__), default dep_q:
     * the whole frame needs Q - 1 */
    if ((s = kyutai_hint_dim(src, cj, "dep_q", Q, err)) || (s = kyutai_hint_dim(src, cj, "card", c->codebook_size, err)) ||
        (s = kyutai_hint_dim(src, cj, "text_card", c->text_vocab, err)) || (s = kyutai_hint_dim(src, cj, "dim", c->input_dim, err)) ||
        (s = kyutai_hint_dim(src, cj, "depformer_dim", D, err)) ||
        (s = kyutai_hint_dim(src, cj, "depformer_num_layers", L_, err)))
        goto out;
    const json_t *ctx = cj ? json_object_get(cj, "depformer_context") : NULL;
    if (mlx && ctx && !json_is_null(ctx) && (!json_is_integer(ctx) || json_integer_value(ctx) < Q - 1)) {
        s = dd_fail(err, DD_EUNSUPPORTED, "%s: depformer_context must be an integer >= %d (dep_q - 1): moshi_mlx "
                    "would attend to a window shorter than the frame", src, Q - 1);
        goto out;
    }
    if (D % heads) {
        s = dd_fail(err, DD_EMODEL, "%s: depformer width %lld not divisible by depformer_num_heads %d%s", path,
                    (long long)D, heads, cj ? "" : " (the default; give config.json with \"depformer_num_heads\")");
        goto out;
    }
    int64_t HD = D / heads, kvw = (R - D) / 2;
    if (R <= D || (R - D) % 2 || kvw % HD || heads % (kvw / HD)) {
        s = dd_fail(err, DD_EMODEL, "%s: attention in_proj of %lld rows per position: not q [%lld] + k + v of "
                    "whole heads of %lld", path, (long long)R, (long long)D, (long long)HD);
        goto out;
    }
    c->levels = Q;
    c->layers = L_;
    c->heads = heads;
    c->kv_heads = (int)(kvw / HD);
    c->head_dim = (int)HD;
    c->ffn_dim = (int)F;
    c->block = DD_BLOCK_LLAMA;
    c->per_position = 1;
    m->kyutai = mlx ? 2 : 1;
    m->prefix = "";
    s = dd_config_check(path, c, err);
out:
    json_decref(cj);
    return s;
}

static dd_status load_alpha(loader *L, const char *name, int64_t D, float **out, dd_error *err) {
    const char *file;
    const dd_st_tensor *t = find(L, name, &file);
    if (!t) return dd_fail(err, DD_EMODEL, "%s: missing tensor '%s'", L->label, name);
    dd_dtype ty;
    if (!dense_type(t->dtype, &ty))
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': dtype %s (want F32, F16 or BF16)", file, name,
                       dd_st_dtype_name(t->dtype));
    dd_status s = want_shape(L, file, t, 3, (int64_t[]){1, 1, D}, err);
    if (s) return s;
    float *v = dd_model_own(L->m, malloc((size_t)D * sizeof(float)));
    if (!v) return dd_fail(err, DD_ENOMEM, "%s: out of memory for tensor '%s'", L->label, name);
    dd_weight w = {.type = ty, .rows = 1, .cols = D, .data = t->data, .row_bytes = (size_t)D * dd_dtype_size(ty)};
    dd_weight_row_f32(&w, 0, v);
    L->used++;
    *out = v;
    return DD_OK;
}

/* The n matrices [rows, cols] named `fmt` with k0 + k (k < n; fmt holds one %d) stacked into one owned view */
static dd_status load_stack(loader *L, const char *what, const char *fmt, int k0, int n, int64_t rows, int64_t cols,
                            dd_weight *out, dd_error *err) {
    dd_weight tw[DD_MAX_LEVELS];
    char tn[DD_MAX_LEVELS][256];
    dd_status s;
    for (int k = 0; k < n; k++) {
        snprintf(tn[k], sizeof tn[k], fmt, k0 + k);
        if ((s = load_mat(L, tn[k], 0, rows, cols, 1, &tw[k], err))) return s;
    }
    return stack_rows(L, what, tn, tw, rows, n, out, err);
}

static dd_status load_kyutai_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    const dd_config *c = &m->cfg;
    const int64_t D = c->dim, V = c->codebook_size, Q = c->levels, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
                  F = c->ffn_dim, I = c->input_dim, R = (H + 2 * KV) * HD;
    dd_status s;
    char n1[256], n2[256];
    dd_weight tw[DD_MAX_LEVELS];
    char tn[DD_MAX_LEVELS][256];
    if ((s = load_stack(L, "code tables", "depformer_emb.%d.weight", 0, (int)Q - 1, V + 1, D, &m->embed, err)) ||
        (s = load_mat(L, "depformer_text_emb.weight", 0, c->text_vocab + 1, D, 1, &m->text_embed, err)))
        return s;
    /* depformer_in: one per position, or one shared (not multi-linear) */
    int shared = !find(L, "depformer_in.1.weight", NULL);
    for (int p = 0; p < Q; p++) {
        snprintf(tn[p], sizeof tn[p], "depformer_in.%d.weight", shared ? 0 : p);
        if (shared && p) tw[p] = tw[0];
        else if ((s = load_mat(L, tn[p], 0, D, I, 1, &tw[p], err))) return s;
    }
    snprintf(n1, sizeof n1, "depformer_in.%d.weight", (int)Q);
    if (find(L, n1, NULL))
        return dd_fail(err, DD_EMODEL, "%s: tensor '%s': more depformer_in than the %d heads", L->label, n1, (int)Q);
    if ((s = stack_rows(L, "input projections", tn, tw, D, (int)Q, &m->in_proj, err)) ||
        (s = load_stack(L, "heads", "linears.%d.weight", 0, (int)Q, V, D, &m->heads, err)))
        return s;
    for (int i = 0; i < c->layers; i++) {
        float *w1, *w2;
        snprintf(n1, sizeof n1, "depformer.layers.%d.norm1.alpha", i);
        snprintf(n2, sizeof n2, "depformer.layers.%d.norm2.alpha", i);
        if ((s = load_alpha(L, n1, D, &w1, err)) || (s = load_alpha(L, n2, D, &w2, err))) return s;
        dd_weight qkv = {0}, out = {0};
        snprintf(n1, sizeof n1, "depformer.layers.%d.self_attn.in_proj_weight", i);
        int stacked = find(L, n1, NULL) != NULL;
        if (stacked) {
            snprintf(n2, sizeof n2, "depformer.layers.%d.self_attn.out_proj.weight", i);
            if ((s = load_mat(L, n1, 0, Q * R, D, 1, &qkv, err)) || (s = load_mat(L, n2, 0, Q * D, D, 1, &out, err)))
                return s;
        }
        for (int64_t p = 0; p < Q; p++) {
            dd_layer *l = &m->layer[p * c->layers + i];
            l->norm1_w = w1;
            l->norm2_w = w2;
            dd_weight wi, wo, gi, go;
            if (stacked) {
                wi = dd_weight_rows(&qkv, p * R, R);
                wo = dd_weight_rows(&out, p * D, D);
            } else {
                snprintf(n1, sizeof n1, "depformer.layers.%d.self_attn.in_projs.%d.weight", i, (int)p);
                snprintf(n2, sizeof n2, "depformer.layers.%d.self_attn.out_projs.%d.weight", i, (int)p);
                if ((s = load_mat(L, n1, 0, R, D, 1, &wi, err)) || (s = load_mat(L, n2, 0, D, H * HD, 1, &wo, err)))
                    return s;
            }
            snprintf(n1, sizeof n1, "depformer.layers.%d.gating.%d.linear_in.weight", i, (int)p);
            snprintf(n2, sizeof n2, "depformer.layers.%d.gating.%d.linear_out.weight", i, (int)p);
            if ((s = load_mat(L, n1, 0, 2 * F, D, 1, &gi, err)) || (s = load_mat(L, n2, 0, D, F, 1, &go, err)))
                return s;
            l->wq = dd_weight_rows(&wi, 0, H * HD);
            l->wk = dd_weight_rows(&wi, H * HD, KV * HD);
            l->wv = dd_weight_rows(&wi, H * HD + KV * HD, KV * HD);
            l->wo = wo;
            l->fc1 = dd_weight_rows(&gi, 0, F);
            l->up = dd_weight_rows(&gi, F, F);
            l->fc2 = go;
        }
        if (!stacked) { /* a schedule would share fewer sets than positions: more sets than positions is refused */
            snprintf(n1, sizeof n1, "depformer.layers.%d.self_attn.in_projs.%d.weight", i, (int)Q);
            if (find(L, n1, NULL))
                return dd_fail(err, DD_EMODEL, "%s: tensor '%s': more weight sets than the %d positions", L->label, n1,
                               (int)Q);
        }
    }
    return DD_OK;
}

/* moshi_mlx's Lm (the layout above kyutai_file): slice p's tables, input projection, head and transformer layers
 * into position p's weights. Tables, input projections and heads are stacked into owned copies (stack_rows: dense or
 * MLX-quantized as stored); the layer matrices are used in place, each slice with its own norms. */
static dd_status load_kyutai_mlx_tensors(loader *L, dd_error *err) {
    dd_model *m = L->m;
    const dd_config *c = &m->cfg;
    const int64_t D = c->dim, V = c->codebook_size, Q = c->levels, H = c->heads, KV = c->kv_heads, HD = c->head_dim,
                  F = c->ffn_dim, I = c->input_dim, R = (H + 2 * KV) * HD;
    dd_status s;
    char n1[256], n2[256];
    if ((s = load_stack(L, "code tables", "depformer.slices.%d.emb.weight", 1, (int)Q - 1, V + 1, D, &m->embed, err)) ||
        (s = load_mat(L, "depformer.slices.0.emb.weight", 0, c->text_vocab + 1, D, 1, &m->text_embed, err)) ||
        (s = load_stack(L, "input projections", "depformer.slices.%d.linear_in.weight", 0, (int)Q, D, I, &m->in_proj,
                        err)) ||
        (s = load_stack(L, "heads", "depformer.slices.%d.linear_out.weight", 0, (int)Q, V, D, &m->heads, err)))
        return s;
    for (int p = 0; p < Q; p++)
        for (int i = 0; i < c->layers; i++) {
            dd_layer *l = &m->layer[p * c->layers + i];
            dd_weight wi, gi;
#define NM(buf, fmt) (snprintf(buf, sizeof buf, "depformer.slices.%d.transformer.layers.%d." fmt, p, i), buf)
            if ((s = load_vec(L, NM(n1, "norm1.weight"), D, 1, &l->norm1_w, err)) ||
                (s = load_vec(L, NM(n2, "norm2.weight"), D, 1, &l->norm2_w, err)) ||
                (s = load_mat(L, NM(n1, "self_attn.in_proj.weight"), 0, R, D, 1, &wi, err)) ||
                (s = load_mat(L, NM(n1, "self_attn.out_proj.weight"), 0, D, H * HD, 1, &l->wo, err)) ||
                (s = load_mat(L, NM(n1, "gating.linear_in.weight"), 0, 2 * F, D, 1, &gi, err)) ||
                (s = load_mat(L, NM(n1, "gating.linear_out.weight"), 0, D, F, 1, &l->fc2, err)))
                return s;
#undef NM
            l->wq = dd_weight_rows(&wi, 0, H * HD);
            l->wk = dd_weight_rows(&wi, H * HD, KV * HD);
            l->wv = dd_weight_rows(&wi, (H + KV) * HD, KV * HD);
            l->fc1 = dd_weight_rows(&gi, 0, F);
            l->up = dd_weight_rows(&gi, F, F);
        }
    return DD_OK;
}

/* Resolve tensors of an opened model (maps + cfg set). Shared with the in-memory synthetic models. */
dd_status dd_model_load_from_maps(dd_model *m, const char *label, int family, dd_error *err) {
    loader L = {.m = m, .label = label};
    m->family = family;
    if (!m->prefix) m->prefix = "";
    m->nslices = m->cfg.per_position ? m->cfg.levels : 1;
    m->embed_rows = m->cfg.codebook_size + (m->cfg.per_position ? 1 : 0);
    m->layer = calloc((size_t)m->cfg.layers * m->nslices, sizeof *m->layer);
    if (!m->layer) return dd_fail(err, DD_ENOMEM, "%s: out of memory", label);
    dd_status s = family == DD_FAMILY_CSM     ? load_csm_tensors(&L, err)
                  : family == DD_FAMILY_QWEN3 ? load_qwen3_tensors(&L, err)
                  : family == DD_FAMILY_MOSHI ? (m->kyutai == 2   ? load_kyutai_mlx_tensors(&L, err)
                                                 : m->kyutai ? load_kyutai_tensors(&L, err)
                                                             : load_moshi_tensors(&L, err))
                                              : load_native_tensors(&L, err);
    if (!s) s = check_types(&L, family, err);
    if (!s && m->cfg.has_rope) s = rope_init(&L, err);
    if (!s && m->cfg.block == DD_BLOCK_GPT && m->cfg.has_rope)
        s = dd_fail(err, DD_EMODEL, "%s: RoPE given for a gpt block (gpt uses learned positions)", label);
    m->tensor_count = L.used;
    return s;
}

/* The file an HF CSM directory holds (DIR/model.safetensors or DIR/model.safetensors.index.json, with a config.json
 * of model_type "csm" beside it) stands for its directory: users pass the file they see. Writes DIR into dir and
 * returns 1 then; 0 otherwise (any other file, or a config.json that is missing, unreadable or not CSM's). */
static int csm_dir_of_file(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (strcmp(base, "model.safetensors") != 0 && strcmp(base, "model.safetensors.index.json") != 0) return 0;
    int dl = slash ? (int)(slash - path) : 1;
    if (slash && dl == 0) dl = 1; /* "/model.safetensors": the root */
    char cfg[1200];
    snprintf(dir, cap, "%.*s", dl, slash ? path : ".");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    dd_status st;
    json_t *j = is_file(cfg) ? load_json(cfg, &st, NULL) : NULL;
    int hf = j && dd_config_family(j) != DD_FAMILY_NATIVE;
    json_decref(j);
    return hf;
}

dd_status dd_model_load(dd_model **out, const char *path, dd_error *err) {
    dd_error_clear(err);
    if (!out) return dd_fail(err, DD_EINVAL, "dd_model_load: out is NULL");
    *out = NULL;
    if (!path || !*path) return dd_fail(err, DD_EINVAL, "dd_model_load: empty model path");
    dd_model *m = calloc(1, sizeof *m);
    if (!m) return dd_fail(err, DD_ENOMEM, "%s: out of memory", path);
    snprintf(m->source, sizeof m->source, "%s", path);
    char dir[1100];
    int csm = is_dir(path);
    int kyutai = !csm && is_file(path) ? kyutai_file(path) : 0;
    if (kyutai) { /* Kyutai's own checkpoint (moshi or moshi_mlx): only the depformer is read */
        dd_status s = open_kyutai(m, path, kyutai == 2, err);
        if (!s) s = dd_model_load_from_maps(m, path, DD_FAMILY_MOSHI, err);
        if (s) {
            dd_model_free(m);
            return s;
        }
        *out = m;
        return DD_OK;
    }
    if (!csm && csm_dir_of_file(path, dir, sizeof dir)) {
        csm = 1;
        path = dir;
    }
    dd_status s = csm ? open_hf_dir(m, path, err) : open_native(m, path, err);
    if (!s) s = dd_model_load_from_maps(m, path, csm ? m->family : DD_FAMILY_NATIVE, err);
    if (s) {
        dd_model_free(m);
        return s;
    }
    *out = m;
    return DD_OK;
}

dd_status dd_model_from_image(dd_model **out, const char *label, uint8_t *img, size_t size, dd_error *err) {
    *out = NULL;
    dd_model *m = calloc(1, sizeof *m);
    dd_st_file *f = m ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        free(m);
        free(img);
        return dd_fail(err, DD_ENOMEM, "%s: out of memory", label);
    }
    m->maps = f;
    snprintf(m->source, sizeof m->source, "%s", label);
    dd_status s = dd_st_open_mem(f, label, img, size, err);
    if (!s) {
        m->nmaps = 1;
        json_error_t je;
        json_t *cj = json_loads(dd_st_meta(f, "depthdec.config"), 0, &je);
        s = cj ? dd_config_parse_native(label, cj, &m->cfg, err) : dd_fail(err, DD_EMODEL, "%s: config", label);
        json_decref(cj);
    }
    if (!s) s = dd_model_load_from_maps(m, label, 0, err);
    if (s) {
        dd_model_free(m);
        return s;
    }
    *out = m;
    return DD_OK;
}

/* ---- the talker's next input embedding (Qwen3) -------------------------------------------------------------- */

dd_status dd_next_embedding(const dd_model *m, int n, const int32_t *codes, float *out, dd_error *err) {
    dd_error_clear(err);
    if (!m || n < 0 || (n && (!codes || !out)))
        return dd_fail(err, DD_EINVAL, "dd_next_embedding: model, codes and out are required (n = %d)", n);
    const dd_config *c = &m->cfg;
    if (m->family != DD_FAMILY_QWEN3 || !m->embed_last.rows)
        return dd_fail(err, DD_EUNSUPPORTED,
                       "%s: no talker-space code tables (the next input embedding needs a Qwen3 predictor loaded from "
                       "its HF directory, with model.codec_embedding.%d)",
                       m->source, c->levels - 2);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    for (int64_t i = 0; i < (int64_t)n * Q; i++)
        if (codes[i] < 0 || codes[i] >= V)
            return dd_fail(err, DD_EINVAL, "codes[%lld, %lld] = %d outside [0, %d)", (long long)(i / Q),
                           (long long)(i % Q), codes[i], V);
    float *row = malloc((size_t)I * sizeof *row);
    double *acc = malloc((size_t)I * sizeof *acc);
    if (!row || !acc) {
        free(row), free(acc);
        return dd_fail(err, DD_ENOMEM, "dd_next_embedding: out of memory");
    }
    for (int r = 0; r < n; r++) { /* talker[c0] + sum_{j=1..Q-2} codec_embedding.{j-1}[c_j] + last[c_(Q-1)] */
        const int32_t *cr = codes + (size_t)r * Q;
        for (int i = 0; i < I; i++) acc[i] = 0;
        for (int j = 0; j < Q; j++) {
            if (j < Q - 1) dd_weight_row_f32(&m->embed, (int64_t)j * V + cr[j], row);
            else dd_weight_row_f32(&m->embed_last, cr[j], row);
            for (int i = 0; i < I; i++) acc[i] += row[i];
        }
        for (int i = 0; i < I; i++) out[(size_t)r * I + i] = (float)acc[i];
    }
    free(row);
    free(acc);
    return DD_OK;
}

/* ---- a model from named tensors in memory ----------------------------------------------------------------- */

/* w's bytes (data, and scales/biases when quantized) copied into buffers the model owns; w then points there. */
static dd_status own_weight(dd_model *m, dd_weight *w, dd_error *err) {
    if (w->rows == 0) return DD_OK;
    size_t nb = (size_t)w->rows * w->row_bytes;
    uint8_t *d = dd_model_own(m, malloc(nb ? nb : 1));
    if (!d) return dd_fail(err, DD_ENOMEM, "tensors: out of memory copying weights");
    memcpy(d, w->data, nb);
    w->data = d;
    if (w->scales) {
        size_t sb = (size_t)w->rows * w->sb_row_bytes;
        uint8_t *sc = dd_model_own(m, malloc(sb ? sb : 1)), *bi = sc ? dd_model_own(m, malloc(sb ? sb : 1)) : NULL;
        if (!bi) return dd_fail(err, DD_ENOMEM, "tensors: out of memory copying weights");
        memcpy(sc, w->scales, sb);
        memcpy(bi, w->biases, sb);
        w->scales = sc;
        w->biases = bi;
    }
    return DD_OK;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const dd_st_tensor *)a)->name, ((const dd_st_tensor *)b)->name);
}

/* The caller's tensors as the table a mapped file gives (names and data borrowed, sorted by name), checked:
 * names present, unique and short, dtypes f32/f16/bf16, dims non-negative, byte sizes without overflow. */
static dd_status views_table(dd_st_file *f, const dd_tensor_view *tv, size_t n, dd_error *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "tensors");
    if (n > (size_t)INT32_MAX) return dd_fail(err, DD_EINVAL, "tensors: %zu tensors (at most %d)", n, INT32_MAX);
    f->t = calloc(n ? n : 1, sizeof *f->t);
    if (!f->t) return dd_fail(err, DD_ENOMEM, "tensors: out of memory");
    for (size_t i = 0; i < n; i++) {
        const dd_tensor_view *v = &tv[i];
        dd_st_tensor *t = &f->t[i];
        if (!v->name || !*v->name) return dd_fail(err, DD_EINVAL, "tensors[%zu]: name is NULL or empty", i);
        if (strnlen(v->name, 256) >= 256)
            return dd_fail(err, DD_EINVAL, "tensors[%zu] '%.64s...': name of 256 bytes or more", i, v->name);
        t->name = v->name;
        switch (v->dtype) {
        case DD_F32: t->dtype = DD_ST_F32; break;
        case DD_F16: t->dtype = DD_ST_F16; break;
        case DD_BF16: t->dtype = DD_ST_BF16; break;
        default:
            return dd_fail(err, DD_EINVAL, "tensors: tensor '%s': dtype %d (%s) (want f32, f16 or bf16)", v->name,
                           (int)v->dtype, dd_dtype_name(v->dtype));
        }
        if (v->ndim < 0 || v->ndim > DD_TENSOR_MAX_DIMS)
            return dd_fail(err, DD_EINVAL, "tensors: tensor '%s': ndim %d (want 0..%d)", v->name, v->ndim,
                           DD_TENSOR_MAX_DIMS);
        t->ndim = v->ndim;
        size_t bytes = dd_st_dtype_size(t->dtype);
        for (int d = 0; d < v->ndim; d++) {
            if (v->shape[d] < 0)
                return dd_fail(err, DD_EINVAL, "tensors: tensor '%s': shape[%d] = %lld is negative", v->name, d,
                               (long long)v->shape[d]);
            t->shape[d] = v->shape[d];
            if ((uint64_t)v->shape[d] > SIZE_MAX || !dd_mul_ok(bytes, (size_t)v->shape[d], &bytes))
                return dd_fail(err, DD_EINVAL, "tensors: tensor '%s': shape overflows the size type", v->name);
        }
        if (bytes && !v->data) return dd_fail(err, DD_EINVAL, "tensors: tensor '%s': data is NULL", v->name);
        t->begin = 0;
        t->end = bytes;
        t->data = v->data;
    }
    f->n = (int)n;
    qsort(f->t, n, sizeof *f->t, cmp_tensor_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(f->t[i - 1].name, f->t[i].name) == 0)
            return dd_fail(err, DD_EINVAL, "tensors: tensor '%s' given twice", f->t[i].name);
    return DD_OK;
}

dd_status dd_model_from_tensors(dd_model **out, const char *config_json, const dd_tensor_view *tensors, size_t n,
                                dd_error *err) {
    dd_error_clear(err);
    if (!out) return dd_fail(err, DD_EINVAL, "dd_model_from_tensors: out is NULL");
    *out = NULL;
    if (!config_json) return dd_fail(err, DD_EINVAL, "dd_model_from_tensors: config_json is NULL");
    if (!tensors && n) return dd_fail(err, DD_EINVAL, "dd_model_from_tensors: tensors is NULL (n = %zu)", n);
    json_error_t je;
    json_t *cj = json_loads(config_json, JSON_REJECT_DUPLICATES, &je);
    if (!cj) return dd_fail(err, DD_EFORMAT, "tensors: config JSON: %s (line %d)", je.text, je.line);
    dd_model *m = calloc(1, sizeof *m);
    dd_st_file *f = m ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        free(m);
        json_decref(cj);
        return dd_fail(err, DD_ENOMEM, "tensors: out of memory");
    }
    m->maps = f;
    m->nmaps = 1; /* borrowed table: dd_st_close frees only its array */
    snprintf(m->source, sizeof m->source, "tensors");
    /* an HF config.json (model_type: CSM or a Qwen3 code predictor) or a native config (format "depthdec") */
    int family = dd_config_family(cj);
    if (family == DD_FAMILY_NATIVE && json_object_get(cj, "model_type")) family = DD_FAMILY_CSM; /* names the type */
    dd_status s = family == DD_FAMILY_CSM     ? dd_config_parse_csm("tensors: config", cj, &m->cfg, err)
                  : family == DD_FAMILY_QWEN3 ? dd_config_parse_qwen3("tensors: config", cj, &m->cfg, &m->prefix, err)
                  : family == DD_FAMILY_MOSHI ? dd_config_parse_moshi("tensors: config", cj, &m->cfg, &m->prefix, err)
                                              : dd_config_parse_native("tensors: config", cj, &m->cfg, err);
    json_decref(cj);
    if (!s) s = views_table(f, tensors, n, err);
    /* the one name map the file loader uses */
    if (!s) s = dd_model_load_from_maps(m, "tensors", family, err);
    /* the weights it resolved point into the caller's buffers: copy them (vectors are already owned float32; CSM's
     * heads, Qwen3's heads and code tables and Moshi's code tables are owned copies already) */
    if (!s && (family == DD_FAMILY_NATIVE || family == DD_FAMILY_MOSHI)) s = own_weight(m, &m->heads, err);
    if (!s) s = own_weight(m, &m->head0, err);
    if (!s) s = own_weight(m, &m->in_proj, err);
    if (!s) s = own_weight(m, &m->text_embed, err);
    if (!s && family != DD_FAMILY_QWEN3 && family != DD_FAMILY_MOSHI) s = own_weight(m, &m->embed, err);
    for (int i = 0; !s && i < m->cfg.layers * m->nslices; i++) { /* Moshi: each position's slice copied alone */
        dd_layer *l = &m->layer[i];
        dd_weight *ws[7] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->fc1, &l->up, &l->fc2};
        for (int k = 0; !s && k < 7; k++) s = own_weight(m, ws[k], err);
    }
    if (s) {
        dd_model_free(m);
        return s;
    }
    /* nothing points at the caller's memory any more */
    dd_st_close(f);
    free(f);
    m->maps = NULL;
    m->nmaps = 0;
    *out = m;
    return DD_OK;
}
