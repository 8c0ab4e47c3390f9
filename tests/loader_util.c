/* The loader test programs' shared part (loader_util.h): expectations on loaded and refused files, tensor sets,
 * edit cases, and the base models. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "loader_util.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const lt_kind[2] = {"tiny-gpt", "tiny-llama"};
const dd_dtype lt_wt[5] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
char lt_base[2][5][128];
uint64_t lt_base_seed[2][5];
int lt_verbose;

/* ---- setup ------------------------------------------------------------------------------------------------- */

int lt_setup(void **state) {
    lt_verbose = getenv("DD_TEST_VERBOSE") && atoi(getenv("DD_TEST_VERBOSE")) > 0;
    return th_tmpdir("loader");
}

int lt_setup_bases(void **state) {
    if (lt_setup(state)) return -1;
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            lt_base_seed[k][w] = rnd64();
            dd_model *m = NULL;
            dd_error e = {0};
            if (dd_model_synthetic(&m, lt_kind[k], lt_wt[w], lt_base_seed[k][w], &e)) {
                fprintf(stderr, "synthetic %s: %s\n", lt_kind[k], e.msg);
                return -1;
            }
            snprintf(lt_base[k][w], sizeof lt_base[k][w], "%s/base_%s_%s.safetensors", th_dir, lt_kind[k],
                     dd_dtype_name(lt_wt[w]));
            dd_status s = dd_model_save(m, lt_base[k][w], &e);
            dd_model_free(m);
            if (s) {
                fprintf(stderr, "save: %s\n", e.msg);
                return -1;
            }
        }
    return 0;
}

int lt_teardown(void **state) { return th_rm_rf(th_dir); }

/* ---- expectations and files -------------------------------------------------------------------------------- */

void write_str(const char *path, const char *s) { th_write_bytes(path, s, strlen(s)); }

void mkdir_ok(const char *p) { assert_true(mkdir(p, 0755) == 0 || errno == EEXIST); }

void expect_fail_(const char *file, int line, const char *path, dd_status code, const char *named, const char *also) {
    dd_model *m = (dd_model *)1;
    dd_error e;
    memset(&e, 0x55, sizeof e);
    double t0 = th_now();
    dd_status st = dd_model_load(&m, path, &e);
    double dt = th_now() - t0;
    int terminated = memchr(e.msg, 0, sizeof e.msg) != NULL;
    e.msg[sizeof e.msg - 1] = 0;
    int ok = st == code && e.code == code && m == NULL && terminated && strstr(e.msg, named) &&
             (!also || strstr(e.msg, also));
    if (!ok)
        print_error("%s:%d: %s: status %d (want %d), out %p, msg \"%s\" (want \"%s\"%s%s%s)\n", file, line, path,
                    st, code, (void *)m, e.msg, named, also ? " and \"" : "", also ? also : "", also ? "\"" : "");
    else if (lt_verbose)
        print_message("    [%s] %s\n", dd_status_name(st), e.msg);
    if (st == DD_OK && m && m != (dd_model *)1) dd_model_free(m);
    assert_true(ok);
    assert_true(dt < 5.0); /* every refusal is quick */
    m = (dd_model *)1;
    st = dd_model_load(&m, path, NULL);
    if (st != code) print_error("%s:%d: %s: with err NULL status %d (want %d)\n", file, line, path, st, code);
    assert_int_equal(st, code);
    assert_null(m);
}

dd_model *load_ok_(const char *file, int line, const char *path) {
    dd_model *m = (dd_model *)1;
    dd_error e;
    memset(&e, 0x55, sizeof e);
    dd_status st = dd_model_load(&m, path, &e);
    if (st != DD_OK || e.code != DD_OK || e.msg[0])
        print_error("%s:%d: load %s: status %d, err.code %d, msg \"%.*s\"\n", file, line, path, st, e.code,
                    (int)sizeof e.msg - 1, e.msg);
    assert_int_equal(st, DD_OK);
    assert_int_equal(e.code, DD_OK);
    assert_int_equal(e.msg[0], 0);
    assert_non_null(m);
    assert_true(m != (dd_model *)1);
    return m;
}


/* ---- tensor sets: a safetensors image as an editable list of tensors -------------------------------------- */

tset *ts_new(void) {
    tset *ts = calloc(1, sizeof *ts);
    assert_non_null(ts);
    return ts;
}

void ts_free(tset *ts) {
    for (int i = 0; i < ts->nbufs; i++) free(ts->bufs[i]);
    free(ts->bufs);
    dd_st_close(&ts->src);
    json_decref(ts->cfg);
    free(ts);
}

static void *ts_alloc(tset *ts, size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    void **nb = realloc(ts->bufs, (size_t)(ts->nbufs + 1) * sizeof *nb);
    assert_non_null(nb);
    ts->bufs = nb;
    ts->bufs[ts->nbufs++] = p;
    return p;
}

static int cmp_data(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const dd_st_out *)a)->data, y = (uintptr_t)((const dd_st_out *)b)->data;
    return x < y ? -1 : x > y;
}

/* Take a native file apart (in file order). */
tset *ts_load(const char *path) {
    tset *ts = ts_new();
    size_t n;
    uint8_t *buf = th_slurp(path, &n);
    dd_error e = {0};
    assert_int_equal(dd_st_open_mem(&ts->src, path, buf, n, &e), DD_OK);
    assert_true(ts->src.n <= TS_MAX);
    for (int i = 0; i < ts->src.n; i++) {
        const dd_st_tensor *s = &ts->src.t[i];
        dd_st_out *o = &ts->t[ts->n++];
        snprintf(o->name, sizeof o->name, "%s", s->name);
        o->dtype = s->dtype;
        o->ndim = s->ndim;
        memcpy(o->shape, s->shape, sizeof o->shape);
        o->data = s->data;
    }
    qsort(ts->t, (size_t)ts->n, sizeof *ts->t, cmp_data);
    const char *meta = dd_st_meta(&ts->src, "depthdec.config");
    if (meta) {
        json_error_t je;
        ts->cfg = json_loads(meta, 0, &je);
        assert_non_null(ts->cfg);
    }
    return ts;
}

int ts_find(const tset *ts, const char *name) {
    for (int i = 0; i < ts->n; i++)
        if (strcmp(ts->t[i].name, name) == 0) return i;
    return -1;
}
const dd_st_out *ts_get(const tset *ts, const char *name) {
    int i = ts_find(ts, name);
    if (i < 0) print_error("tensor %s not in the set\n", name);
    assert_true(i >= 0);
    return &ts->t[i];
}

/* Element count; a zero dimension makes it 0 whatever the others are (hostile shapes). */
size_t elems(int nd, const int64_t *sh) {
    for (int i = 0; i < nd; i++)
        if (sh[i] == 0) return 0;
    size_t c = 1;
    for (int i = 0; i < nd; i++) assert_true(dd_mul_ok(c, (size_t)sh[i], &c));
    return c;
}

static void fill(void *p, dd_st_dtype dt, size_t count, float center, float a) {
    switch (dt) {
    case DD_ST_F32:
        for (size_t i = 0; i < count; i++) ((float *)p)[i] = center + rnd_sym(a);
        break;
    case DD_ST_F16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)p)[i] = dd_f32_to_f16(center + rnd_sym(a));
        break;
    case DD_ST_BF16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)p)[i] = dd_f32_to_bf16(center + rnd_sym(a));
        break;
    default: {
        size_t nb = count * dd_st_dtype_size(dt);
        for (size_t i = 0; i < nb; i++) ((uint8_t *)p)[i] = (uint8_t)rnd64();
    }
    }
}

/* Replace tensor `name` (or add it, at the end or the front) with dtype dt, shape sh and fresh random data:
 * floats center +- a for float types, random bytes otherwise. Returns the data. */
void *ts_putf(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh, float center, float a,
              int front) {
    int i = ts_find(ts, name);
    if (i < 0) {
        assert_true(ts->n < TS_MAX);
        if (front) {
            memmove(&ts->t[1], &ts->t[0], (size_t)ts->n * sizeof *ts->t);
            i = 0;
        } else {
            i = ts->n;
        }
        ts->n++;
    }
    dd_st_out *o = &ts->t[i];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dt;
    o->ndim = nd;
    for (int d = 0; d < nd; d++) o->shape[d] = sh[d];
    size_t cnt = elems(nd, sh), nb = cnt * dd_st_dtype_size(dt);
    assert_true(nb < ((size_t)256 << 20));
    void *p = ts_alloc(ts, nb);
    fill(p, dt, cnt, center, a);
    o->data = p;
    return p;
}
void *ts_put(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh) {
    return ts_putf(ts, name, dt, nd, sh, 0.0f, 0.1f, 0);
}

void ts_drop(tset *ts, const char *name) {
    int i = ts_find(ts, name);
    if (i < 0) print_error("drop: tensor %s not in the set\n", name);
    assert_true(i >= 0);
    memmove(&ts->t[i], &ts->t[i + 1], (size_t)(ts->n - i - 1) * sizeof *ts->t);
    ts->n--;
}

void ts_rename(tset *ts, const char *from, const char *to) {
    int i = ts_find(ts, from);
    assert_true(i >= 0);
    snprintf(ts->t[i].name, sizeof ts->t[i].name, "%s", to);
}

/* Config key = JSON text (any value), or delete it when json is NULL. */
void json_set(json_t *o, const char *key, const char *json) {
    if (!json) {
        json_object_del(o, key);
        return;
    }
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
    if (!v) print_error("bad test JSON %s: %s\n", json, je.text);
    assert_non_null(v);
    assert_int_equal(json_object_set_new(o, key, v), 0);
}

void write_st(const char *path, const dd_st_out *t, int n, const char *key, const char *val) {
    uint8_t *buf;
    size_t size;
    dd_error e = {0};
    assert_int_equal(dd_st_serialize(t, n, key, val, &buf, &size, &e), DD_OK);
    assert_int_equal(dd_write_file_atomic(path, buf, size, &e), DD_OK);
    free(buf);
}

/* Write with the config in __metadata__ (none when ts->cfg is NULL). */
void ts_write(const tset *ts, const char *path) {
    char *cfg = ts->cfg ? json_dumps(ts->cfg, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    write_st(path, ts->t, ts->n, cfg ? "depthdec.config" : NULL, cfg);
    free(cfg);
}

void write_json(const char *path, const json_t *j) {
    assert_int_equal(json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER), 0);
}

snap *ts_save(const tset *ts) {
    snap *s = malloc(sizeof *s);
    assert_non_null(s);
    memcpy(s->t, ts->t, sizeof s->t);
    s->n = ts->n;
    s->cfg = ts->cfg ? json_deep_copy(ts->cfg) : NULL;
    return s;
}
void ts_restore(tset *ts, snap *s) {
    memcpy(ts->t, s->t, sizeof s->t);
    ts->n = s->n;
    json_decref(ts->cfg);
    ts->cfg = s->cfg;
    free(s);
}

/* Element i of a dense tensor as float32. */
float elem_f32(const dd_st_out *t, size_t i) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case DD_ST_F32: return dd_ldf32(p + 4 * i);
    case DD_ST_F16: return dd_f16_to_f32(dd_ld16(p + 2 * i));
    case DD_ST_BF16: return dd_bf16_to_f32(dd_ld16(p + 2 * i));
    default: fail_msg("elem_f32: %s is %s", t->name, dd_st_dtype_name(t->dtype));
    }
    return 0;
}

/* w's rows [0, nrows) are rows [r0, r0 + nrows) of tensor t (viewed as [prod(shape[:-1]), shape[-1]]). */
void check_rows(const dd_weight *w, const dd_st_out *t, int64_t r0, int64_t nrows) {
    int64_t cols = t->shape[t->ndim - 1], rows = (int64_t)elems(t->ndim, t->shape) / cols;
    assert_int_equal(w->rows, nrows);
    assert_int_equal(w->cols, cols);
    assert_true(r0 + nrows <= rows);
    float *row = malloc((size_t)cols * sizeof *row);
    assert_non_null(row);
    for (int64_t r = 0; r < nrows; r++) {
        dd_weight_row_f32(w, r, row);
        for (int64_t k = 0; k < cols; k++) {
            float want = elem_f32(t, (size_t)((r0 + r) * cols + k));
            if (memcmp(&row[k], &want, 4) != 0) fail_msg("%s row %lld col %lld: %g != %g", t->name,
                                                         (long long)(r0 + r), (long long)k, row[k], want);
        }
    }
    free(row);
}
void check_mat(const dd_weight *w, const dd_st_out *t) {
    check_rows(w, t, 0, (int64_t)elems(t->ndim, t->shape) / t->shape[t->ndim - 1]);
}
void check_vec(const float *v, const dd_st_out *t) {
    assert_non_null(v);
    size_t n = elems(t->ndim, t->shape);
    for (size_t i = 0; i < n; i++) {
        float want = elem_f32(t, i);
        if (memcmp(&v[i], &want, 4) != 0) fail_msg("%s[%zu]: %g != %g", t->name, i, v[i], want);
    }
}

/* ---- scoring ---------------------------------------------------------------------------------------------- */

static void score_ref(const dd_model *m, int n, const float *h, const int32_t *codes, float *logits, float *logits0) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_REF;
    p.max_batch = n;
    p.threads = 1;
    dd_decoder *d = NULL;
    dd_error e = {0};
    dd_status st = dd_decoder_create(&d, m, &p, &e);
    if (st) print_error("decoder: %s\n", e.msg);
    assert_int_equal(st, DD_OK);
    st = dd_score(d, n, h, codes, logits, logits0, &e);
    if (st) print_error("score: %s\n", e.msg);
    assert_int_equal(st, DD_OK);
    dd_decoder_free(d);
}

/* a and b must give bitwise identical logits (and logits0) on the same random rows. */
void expect_same_scores(const dd_model *a, const dd_model *b) {
    const dd_config *ca = dd_model_config(a), *cb = dd_model_config(b);
    assert_int_equal(ca->levels, cb->levels);
    assert_int_equal(ca->codebook_size, cb->codebook_size);
    assert_int_equal(ca->input_dim, cb->input_dim);
    assert_int_equal(ca->has_head0, cb->has_head0);
    int n = 3, Q = ca->levels, V = ca->codebook_size, I = ca->input_dim;
    size_t nl = (size_t)n * (Q - 1) * V, nl0 = (size_t)n * V;
    float *h = malloc((size_t)n * I * sizeof *h), *la = malloc(nl * 4), *lb = malloc(nl * 4), *a0 = malloc(nl0 * 4),
          *b0 = malloc(nl0 * 4);
    int32_t *codes = malloc((size_t)n * Q * sizeof *codes);
    assert_true(h && la && lb && a0 && b0 && codes);
    for (size_t i = 0; i < (size_t)n * I; i++) h[i] = rnd_sym(2.0f);
    for (size_t i = 0; i < (size_t)n * Q; i++) codes[i] = (int32_t)(rnd64() % (uint64_t)V);
    memset(la, 0xff, nl * 4); /* NaN: an unwritten logit fails */
    memset(lb, 0xff, nl * 4);
    memset(a0, 0xff, nl0 * 4);
    memset(b0, 0xff, nl0 * 4);
    score_ref(a, n, h, codes, la, ca->has_head0 ? a0 : NULL);
    score_ref(b, n, h, codes, lb, cb->has_head0 ? b0 : NULL);
    for (size_t i = 0; i < nl; i++) assert_true(isfinite(la[i]));
    assert_memory_equal(la, lb, nl * 4);
    if (ca->has_head0) {
        for (size_t i = 0; i < nl0; i++) assert_true(isfinite(a0[i]));
        assert_memory_equal(a0, b0, nl0 * 4);
    }
    free(h);
    free(la);
    free(lb);
    free(a0);
    free(b0);
    free(codes);
}

/* dd_config fields against the native config JSON that was written. */
void expect_config_matches(const dd_config *c, const json_t *j) {
    static const char *const keys[] = {"levels", "codebook_size", "input_dim", "dim", "layers",
                                       "heads", "kv_heads", "head_dim", "ffn_dim"};
    const int got[] = {c->levels, c->codebook_size, c->input_dim, c->dim, c->layers,
                       c->heads, c->kv_heads, c->head_dim, c->ffn_dim};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        assert_int_equal(got[i], json_integer_value(json_object_get(j, keys[i])));
    assert_int_equal(c->block, strcmp(json_string_value(json_object_get(j, "block")), "llama") == 0 ? DD_BLOCK_LLAMA
                                                                                                      : DD_BLOCK_GPT);
    assert_true(c->norm_eps == (float)json_number_value(json_object_get(j, "norm_eps")));
    const json_t *rope = json_object_get(j, "rope");
    assert_int_equal(c->has_rope, rope && !json_is_null(rope));
    if (c->has_rope) {
        assert_true(c->rope_theta == json_number_value(json_object_get(rope, "theta")));
        const json_t *sc = json_object_get(rope, "scaling");
        assert_int_equal(c->rope_scaling, sc && !json_is_null(sc));
        if (c->rope_scaling) {
            assert_true(c->rope_factor == json_number_value(json_object_get(sc, "factor")));
            assert_true(c->rope_low_freq_factor == json_number_value(json_object_get(sc, "low_freq_factor")));
            assert_true(c->rope_high_freq_factor == json_number_value(json_object_get(sc, "high_freq_factor")));
            assert_true(c->rope_original_max_pos ==
                        json_number_value(json_object_get(sc, "original_max_position_embeddings")));
        }
    }
    const json_t *q = json_object_get(j, "quantization");
    if (q) {
        assert_int_equal(c->quant_bits, json_integer_value(json_object_get(q, "bits")));
        assert_int_equal(c->quant_group, json_integer_value(json_object_get(q, "group_size")));
    } else {
        assert_int_equal(c->quant_bits, 0);
    }
}

/* "x.weight" / "x.scales" / "x.biases" -> "x" (what every message about that matrix contains). */
const char *prefix_of(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", name);
    size_t n = strlen(buf);
    static const char *const suf[] = {".weight", ".scales", ".biases"};
    for (int i = 0; i < 3; i++)
        if (n > 7 && strcmp(buf + n - 7, suf[i]) == 0) buf[n - 7] = 0;
    return buf;
}

/* ---- edit cases ------------------------------------------------------------------------------------------ */

/* Apply c's edits to its base model and write the result to path. */
void build_case(const mcase *c, const char *path) {
    tset *ts = ts_load(lt_base[c->kind][c->wt]);
    const char *meta = NULL;
    for (int i = 0; i < 4 && c->e[i].op != OP_END; i++) {
        const edit *e = &c->e[i];
        switch (e->op) {
        case OP_DROP: ts_drop(ts, e->name); break;
        case OP_PUT: ts_put(ts, e->name, e->dt, e->nd, e->sh); break;
        case OP_CFG: json_set(ts->cfg, e->name, e->json); break;
        case OP_META: meta = e->json; break;
        }
    }
    if (meta) write_st(path, ts->t, ts->n, "depthdec.config", meta);
    else ts_write(ts, path);
    ts_free(ts);
}

void run_cases(const mcase *cases, size_t n, const char *tag) {
    char path[128];
    for (size_t i = 0; i < n; i++) {
        TH_PATH(path, "%s_%02zu.safetensors", tag, i);
        build_case(&cases[i], path);
        if (cases[i].want == DD_OK) {
            dd_model *m = load_ok(path);
            dd_model_free(m);
        } else {
            expect_fail(path, cases[i].want, cases[i].also);
        }
        unlink(path);
    }
}

void cfg_equal(const dd_config *a, const dd_config *b) {
    assert_int_equal(a->block, b->block);
    assert_int_equal(a->levels, b->levels);
    assert_int_equal(a->codebook_size, b->codebook_size);
    assert_int_equal(a->input_dim, b->input_dim);
    assert_int_equal(a->dim, b->dim);
    assert_int_equal(a->layers, b->layers);
    assert_int_equal(a->heads, b->heads);
    assert_int_equal(a->kv_heads, b->kv_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->ffn_dim, b->ffn_dim);
    assert_true(a->norm_eps == b->norm_eps);
    assert_int_equal(a->has_rope, b->has_rope);
    assert_true(a->rope_theta == b->rope_theta);
    assert_int_equal(a->rope_scaling, b->rope_scaling);
    assert_true(a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
                a->rope_high_freq_factor == b->rope_high_freq_factor &&
                a->rope_original_max_pos == b->rope_original_max_pos);
    assert_int_equal(a->has_head0, b->has_head0);
    assert_int_equal(a->has_in_proj, b->has_in_proj);
    assert_int_equal(a->has_pos, b->has_pos);
    assert_int_equal(a->embed_in_input_space, b->embed_in_input_space);
    assert_int_equal(a->quant_bits, b->quant_bits);
    assert_int_equal(a->quant_group, b->quant_group);
    assert_int_equal(a->weight_type, b->weight_type);
}

