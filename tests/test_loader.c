/* Tests of the model loader: src/safetensors.c (the container), src/config.c (native and HF CSM configs) and
 * src/model.c (name maps, dtype and shape checks), against SPEC §4.
 *
 * Every file is built inside the test, in a mkdtemp() directory that the group teardown removes. Valid native
 * files come from the synthetic models (dd_model_save), taken apart into tensor lists and re-serialized with
 * edits (dd_st_serialize); broken containers are written byte by byte; HF CSM directories (one file or sharded,
 * transformers 4 or 5 configs) are generated from random weights. Each malformed case must fail with the right
 * status, leave *out NULL (it is poisoned first), give a message naming the file and the tensor or config key,
 * and return the same status when err is NULL. Valid variants of one model must give bitwise identical
 * teacher-forced logits on the reference backend.
 *
 * Data are fresh random each run; the seed is printed and DD_TEST_SEED=<n> replays a run. DD_TEST_VERBOSE=1
 * prints every error message the loader produced. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64];
static uint64_t g_rng;
static int g_verbose;

/* The synthetic base models, saved once per run: [kind][weight type]. */
static const char *const k_kind[2] = {"tiny-gpt", "tiny-llama"};
static const dd_dtype k_wt[5] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
static char g_base[2][5][128];
static uint64_t g_seed[2][5];
enum { GPT = 0, LLAMA = 1 };
enum { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3, Q4 = 4 };

#define H62 4611686018427387904LL /* 2^62 */

/* ---- helpers ---------------------------------------------------------------------------------------------- */

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [-a, a) */
static float rnd_unif(float a) { return (float)(((double)(rnd() >> 11) * 0x1p-53 * 2.0 - 1.0) * a); }

__attribute__((format(printf, 3, 4))) static void tp(char *buf, size_t cap, const char *fmt, ...) {
    int k = snprintf(buf, cap, "%s/", g_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, cap - (size_t)k, fmt, ap);
    va_end(ap);
}
#define TP(buf, ...) tp(buf, sizeof buf, __VA_ARGS__)

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    uint8_t *p = malloc((size_t)sz + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static void write_str(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static void mkdir_ok(const char *p) { assert_true(mkdir(p, 0755) == 0 || errno == EEXIST); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* dd_model_load(path) must fail with `code`, leave *out NULL, name the file at fault (`named`: path itself, or
 * e.g. the config.json beside it) and `also` when given, and return the same code when err is NULL. */
static void expect_fail_(int line, const char *path, dd_status code, const char *named, const char *also) {
    dd_model *m = (dd_model *)1;
    dd_error e;
    memset(&e, 0x55, sizeof e);
    double t0 = now_s();
    dd_status st = dd_model_load(&m, path, &e);
    double dt = now_s() - t0;
    int terminated = memchr(e.msg, 0, sizeof e.msg) != NULL;
    e.msg[sizeof e.msg - 1] = 0;
    int ok = st == code && e.code == code && m == NULL && terminated && strstr(e.msg, named) &&
             (!also || strstr(e.msg, also));
    if (!ok)
        print_error("test_loader.c:%d: %s: status %d (want %d), out %p, msg \"%s\" (want \"%s\"%s%s%s)\n", line, path,
                    st, code, (void *)m, e.msg, named, also ? " and \"" : "", also ? also : "", also ? "\"" : "");
    else if (g_verbose)
        print_message("    [%s] %s\n", dd_status_name(st), e.msg);
    if (st == DD_OK && m && m != (dd_model *)1) dd_model_free(m);
    assert_true(ok);
    assert_true(dt < 5.0); /* every refusal is quick */
    m = (dd_model *)1;
    st = dd_model_load(&m, path, NULL);
    if (st != code) print_error("test_loader.c:%d: %s: with err NULL status %d (want %d)\n", line, path, st, code);
    assert_int_equal(st, code);
    assert_null(m);
}
#define expect_fail(path, code, also) expect_fail_(__LINE__, path, code, path, also)
/* the message names `named` (the file at fault, e.g. the config.json beside path or a shard inside it) */
#define expect_fail_in(path, code, named, also) expect_fail_(__LINE__, path, code, named, also)

static dd_model *load_ok_(int line, const char *path) {
    dd_model *m = (dd_model *)1;
    dd_error e;
    memset(&e, 0x55, sizeof e);
    dd_status st = dd_model_load(&m, path, &e);
    if (st != DD_OK || e.code != DD_OK || e.msg[0])
        print_error("test_loader.c:%d: load %s: status %d, err.code %d, msg \"%.*s\"\n", line, path, st, e.code,
                    (int)sizeof e.msg - 1, e.msg);
    assert_int_equal(st, DD_OK);
    assert_int_equal(e.code, DD_OK);
    assert_int_equal(e.msg[0], 0);
    assert_non_null(m);
    assert_true(m != (dd_model *)1);
    return m;
}
#define load_ok(path) load_ok_(__LINE__, path)

/* ---- tensor sets: a safetensors image as an editable list of tensors -------------------------------------- */

#define TS_MAX 160

typedef struct tset {
    dd_st_out t[TS_MAX];
    int n;
    void **bufs; /* data of tensors added or replaced here */
    int nbufs;
    dd_st_file src; /* the image the unedited tensors point into (zeroed when built from scratch) */
    json_t *cfg;    /* __metadata__["depthdec.config"] parsed, or NULL */
} tset;

static tset *ts_new(void) {
    tset *ts = calloc(1, sizeof *ts);
    assert_non_null(ts);
    return ts;
}

static void ts_free(tset *ts) {
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
static tset *ts_load(const char *path) {
    tset *ts = ts_new();
    size_t n;
    uint8_t *buf = slurp(path, &n);
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

static int ts_find(const tset *ts, const char *name) {
    for (int i = 0; i < ts->n; i++)
        if (strcmp(ts->t[i].name, name) == 0) return i;
    return -1;
}
static const dd_st_out *ts_get(const tset *ts, const char *name) {
    int i = ts_find(ts, name);
    if (i < 0) print_error("tensor %s not in the set\n", name);
    assert_true(i >= 0);
    return &ts->t[i];
}

/* Element count; a zero dimension makes it 0 whatever the others are (hostile shapes). */
static size_t elems(int nd, const int64_t *sh) {
    for (int i = 0; i < nd; i++)
        if (sh[i] == 0) return 0;
    size_t c = 1;
    for (int i = 0; i < nd; i++) assert_true(dd_mul_ok(c, (size_t)sh[i], &c));
    return c;
}

static void fill(void *p, dd_st_dtype dt, size_t count, float center, float a) {
    switch (dt) {
    case DD_ST_F32:
        for (size_t i = 0; i < count; i++) ((float *)p)[i] = center + rnd_unif(a);
        break;
    case DD_ST_F16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)p)[i] = dd_f32_to_f16(center + rnd_unif(a));
        break;
    case DD_ST_BF16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)p)[i] = dd_f32_to_bf16(center + rnd_unif(a));
        break;
    default: {
        size_t nb = count * dd_st_dtype_size(dt);
        for (size_t i = 0; i < nb; i++) ((uint8_t *)p)[i] = (uint8_t)rnd();
    }
    }
}

/* Replace tensor `name` (or add it, at the end or the front) with dtype dt, shape sh and fresh random data:
 * floats center +- a for float types, random bytes otherwise. Returns the data. */
static void *ts_putf(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh, float center, float a,
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
static void *ts_put(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh) {
    return ts_putf(ts, name, dt, nd, sh, 0.0f, 0.1f, 0);
}

static void ts_drop(tset *ts, const char *name) {
    int i = ts_find(ts, name);
    if (i < 0) print_error("drop: tensor %s not in the set\n", name);
    assert_true(i >= 0);
    memmove(&ts->t[i], &ts->t[i + 1], (size_t)(ts->n - i - 1) * sizeof *ts->t);
    ts->n--;
}

static void ts_rename(tset *ts, const char *from, const char *to) {
    int i = ts_find(ts, from);
    assert_true(i >= 0);
    snprintf(ts->t[i].name, sizeof ts->t[i].name, "%s", to);
}

/* Config key = JSON text (any value), or delete it when json is NULL. */
static void json_set(json_t *o, const char *key, const char *json) {
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

static void write_st(const char *path, const dd_st_out *t, int n, const char *key, const char *val) {
    uint8_t *buf;
    size_t size;
    dd_error e = {0};
    assert_int_equal(dd_st_serialize(t, n, key, val, &buf, &size, &e), DD_OK);
    assert_int_equal(dd_write_file_atomic(path, buf, size, &e), DD_OK);
    free(buf);
}

/* Write with the config in __metadata__ (none when ts->cfg is NULL). */
static void ts_write(const tset *ts, const char *path) {
    char *cfg = ts->cfg ? json_dumps(ts->cfg, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    write_st(path, ts->t, ts->n, cfg ? "depthdec.config" : NULL, cfg);
    free(cfg);
}

static void write_json(const char *path, const json_t *j) {
    assert_int_equal(json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER), 0);
}

/* A saved copy of the tensor list and config, to undo one edit. */
typedef struct snap {
    dd_st_out t[TS_MAX];
    int n;
    json_t *cfg;
} snap;

static snap *ts_save(const tset *ts) {
    snap *s = malloc(sizeof *s);
    assert_non_null(s);
    memcpy(s->t, ts->t, sizeof s->t);
    s->n = ts->n;
    s->cfg = ts->cfg ? json_deep_copy(ts->cfg) : NULL;
    return s;
}
static void ts_restore(tset *ts, snap *s) {
    memcpy(ts->t, s->t, sizeof s->t);
    ts->n = s->n;
    json_decref(ts->cfg);
    ts->cfg = s->cfg;
    free(s);
}

/* Element i of a dense tensor as float32. */
static float elem_f32(const dd_st_out *t, size_t i) {
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
static void check_rows(const dd_weight *w, const dd_st_out *t, int64_t r0, int64_t nrows) {
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
static void check_mat(const dd_weight *w, const dd_st_out *t) {
    check_rows(w, t, 0, (int64_t)elems(t->ndim, t->shape) / t->shape[t->ndim - 1]);
}
static void check_vec(const float *v, const dd_st_out *t) {
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
static void expect_same_scores(const dd_model *a, const dd_model *b) {
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
    for (size_t i = 0; i < (size_t)n * I; i++) h[i] = rnd_unif(2.0f);
    for (size_t i = 0; i < (size_t)n * Q; i++) codes[i] = (int32_t)(rnd() % (uint64_t)V);
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
static void expect_config_matches(const dd_config *c, const json_t *j) {
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
static const char *prefix_of(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", name);
    size_t n = strlen(buf);
    static const char *const suf[] = {".weight", ".scales", ".biases"};
    for (int i = 0; i < 3; i++)
        if (n > 7 && strcmp(buf + n - 7, suf[i]) == 0) buf[n - 7] = 0;
    return buf;
}

/* ---- valid native files ----------------------------------------------------------------------------------- */

/* Every base model (2 kinds x 5 weight types) loads; config fields match what was written, every tensor of the
 * file is used, the weight views hold the stored values (qkv split, llama fc1 = gate | up), weight byte counts
 * are right, and the scores equal the in-memory synthetic model built from the same seed. */
static void test_valid_native(void **state) {
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            const char *path = g_base[k][w];
            dd_model *m = load_ok(path);
            tset *ts = ts_load(path);
            const dd_config *c = dd_model_config(m);
            expect_config_matches(c, ts->cfg);
            assert_int_equal(c->block, k == GPT ? DD_BLOCK_GPT : DD_BLOCK_LLAMA);
            assert_int_equal(c->weight_type, k_wt[w]);
            assert_int_equal(c->quant_bits, w == Q8 ? 8 : w == Q4 ? 4 : 0);
            if (c->quant_bits) assert_int_equal(c->quant_group, 64);
            assert_int_equal(c->has_head0, 1);
            assert_int_equal(c->has_in_proj, 1);
            assert_int_equal(c->has_pos, k == GPT);
            assert_int_equal(c->embed_in_input_space, 0);
            assert_int_equal(dd_model_tensor_count(m), ts->n);
            assert_string_equal(dd_model_source(m), path);
            /* weight bytes = every matrix (with scales and biases); vectors and positions are not weights */
            uint64_t wb = 0;
            for (int i = 0; i < ts->n; i++)
                if (ts->t[i].ndim >= 2 && strcmp(ts->t[i].name, "pos.weight") != 0)
                    wb += elems(ts->t[i].ndim, ts->t[i].shape) * dd_st_dtype_size(ts->t[i].dtype);
            assert_int_equal(dd_model_weight_bytes(m), wb);
            if (w <= BF16) {
                int64_t H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim;
                check_mat(&m->head0, ts_get(ts, "head0.weight"));
                check_mat(&m->in_proj, ts_get(ts, "in_proj.weight"));
                check_mat(&m->embed, ts_get(ts, "embed.weight"));
                check_mat(&m->heads, ts_get(ts, "heads.weight"));
                check_vec(m->norm_w, ts_get(ts, "norm.weight"));
                if (k == GPT) {
                    check_vec(m->in_bias, ts_get(ts, "in_proj.bias"));
                    check_vec(m->norm_b, ts_get(ts, "norm.bias"));
                    check_vec(m->pos, ts_get(ts, "pos.weight"));
                } else {
                    assert_null(m->norm_b);
                    assert_null(m->pos);
                    assert_non_null(m->rope_inv_freq);
                }
                for (int i = 0; i < c->layers; i++) {
                    const dd_layer *l = &m->layer[i];
                    char nm[64];
#define T(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), ts_get(ts, nm))
                    const dd_st_out *qkv = T("qkv.weight");
                    check_rows(&l->wq, qkv, 0, H * HD);
                    check_rows(&l->wk, qkv, H * HD, KV * HD);
                    check_rows(&l->wv, qkv, (H + KV) * HD, KV * HD);
                    check_mat(&l->wo, T("out.weight"));
                    check_mat(&l->fc2, T("fc2.weight"));
                    check_vec(l->norm1_w, T("norm1.weight"));
                    check_vec(l->norm2_w, T("norm2.weight"));
                    if (k == GPT) {
                        check_mat(&l->fc1, T("fc1.weight"));
                        assert_int_equal(l->up.rows, 0);
                        check_vec(l->norm1_b, T("norm1.bias"));
                        check_vec(l->norm2_b, T("norm2.bias"));
                        const dd_st_out *bq = T("qkv.bias");
                        check_vec(l->bq, bq);
                        assert_true(l->bk == l->bq + H * HD && l->bv == l->bq + (H + KV) * HD);
                        check_vec(l->bo, T("out.bias"));
                        check_vec(l->b1, T("fc1.bias"));
                        check_vec(l->b2, T("fc2.bias"));
                    } else {
                        const dd_st_out *fc1 = T("fc1.weight");
                        check_rows(&l->fc1, fc1, 0, F);
                        check_rows(&l->up, fc1, F, F);
                        assert_null(l->norm1_b);
                        assert_null(l->bq);
                        assert_null(l->b1);
                    }
#undef T
                }
            }
            dd_model *s = NULL;
            dd_error e = {0};
            assert_int_equal(dd_model_synthetic(&s, k_kind[k], k_wt[w], g_seed[k][w], &e), DD_OK);
            expect_same_scores(m, s);
            dd_model_free(s);
            ts_free(ts);
            dd_model_free(m);
        }
}

/* ---- the container: hand-written headers ------------------------------------------------------------------ */

/* u64 header length (strlen(hdr) unless len >= 0), the header bytes, ndata random data bytes. */
static void raw_st(const char *path, const char *hdr, size_t ndata, int64_t len) {
    size_t hl = strlen(hdr), n = 8 + hl + ndata;
    uint8_t *b = malloc(n);
    assert_non_null(b);
    uint64_t l = len >= 0 ? (uint64_t)len : (uint64_t)hl;
    memcpy(b, &l, 8);
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (uint8_t)rnd();
    write_bytes(path, b, n);
    free(b);
}

#define E(name, dt, shape, offs) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"
#define ALPHA E("alpha", "F32", "[1]", "[0,4]")

/* Every container rule of SPEC §4 (the reference crate's, plus duplicate keys): DD_EFORMAT, file and tensor
 * (or metadata key) named. */
static void test_container_errors(void **state) {
    static const struct { const char *hdr; size_t ndata; const char *also, *also2; } cases[] = {
        /* not JSON / not an object / bad JSON */
        {"hello world", 0, NULL, NULL},
        {"[1, 2]", 0, NULL, NULL},
        {"[{\"alpha\":{}}]", 0, NULL, NULL},
        {"\"{}\"", 0, NULL, NULL},
        {" {}", 0, NULL, NULL},
        {"{\"alpha\": ", 0, NULL, NULL},
        {"{} x", 0, NULL, NULL},
        {"{}{}", 0, NULL, NULL},
        {"{" ALPHA ",}", 4, NULL, NULL},
        {"{'alpha': 1}", 0, NULL, NULL},
        /* invalid UTF-8: a stray byte, an overlong NUL, a UTF-16 surrogate, a cut sequence, Latin-1 */
        {"{" E("al\xffpha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("al\xc0\x80pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("al\xed\xa0\x80pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("alpha\xe2\x82", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{\"__metadata__\":{\"k\":\"caf\xe9\"}}", 0, NULL, NULL},
        {"{" E("al\\u0000pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        /* duplicate keys: tensors, metadata, inside an entry */
        {"{" ALPHA "," E("alpha", "F32", "[1]", "[4,8]") "}", 8, "alpha", NULL},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, NULL, NULL},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, NULL},
        /* entries */
        {"{\"alpha\":5}", 0, "alpha", NULL},
        {"{\"alpha\":null}", 0, "alpha", NULL},
        {"{\"alpha\":[\"F32\",[1],[0,4]]}", 4, "alpha", NULL},
        {"{\"alpha\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "alpha", NULL},
        /* dtypes */
        {"{" E("alpha", "F33", "[1]", "[0,4]") "}", 4, "alpha", "F33"},
        {"{" E("alpha", "f32", "[1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "", "[1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        /* shapes: negative, real, string, bool, null, nested, not an array */
        {"{" E("alpha", "F32", "[-1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1.0]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1.5]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1e0]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[\"1\"]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[true]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[null]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[[1]]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "1", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "null", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[2, -2]", "[0,16]") "}", 16, "alpha", NULL},
        {"{" E("alpha", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[18446744073709551616]", "[0,4]") "}", 4, NULL, NULL},
        /* data_offsets: arity, negative, real, string, end < begin, not an array */
        {"{" E("alpha", "F32", "[1]", "[0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,4,8]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[-4,0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,-4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0.0,4.0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[\"0\",\"4\"]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,true]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[0]", "[4,0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[8,4]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "4") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "{\"begin\":0,\"end\":4}") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,18446744073709551616]") "}", 4, NULL, NULL},
        /* shape x dtype size != span */
        {"{" E("alpha", "F32", "[3]", "[0,8]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F16", "[2,2]", "[0,16]") "}", 16, "alpha", NULL},
        {"{" E("alpha", "U8", "[]", "[0,0]") "}", 0, "alpha", NULL},
        {"{" E("alpha", "F32", "[0]", "[0,4]") "}", 4, "alpha", NULL},
        /* layout: gap, overlap, same region, not starting at 0, trailing bytes, truncated */
        {"{" ALPHA "," E("beta", "F32", "[1]", "[8,12]") "}", 12, "beta", "gap"},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "," E("beta", "F32", "[2]", "[4,12]") "}", 12, "beta", "overlap"},
        {"{" ALPHA "," E("beta", "F32", "[1]", "[0,4]") "}", 4, "overlap", NULL},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "," E("beta", "F32", "[0]", "[4,4]") "}", 8, "beta", NULL},
        {"{" E("alpha", "F32", "[1]", "[4,8]") "}", 8, "alpha", "gap"},
        {"{" ALPHA "}", 5, "trailing", NULL},
        {"{}", 1, "trailing", NULL},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "}", 7, "alpha", NULL},
        {"{" ALPHA "," E("beta", "F32", "[1]", "[4,8]") "}", 4, "beta", NULL},
        /* __metadata__: not an object, non-string values */
        {"{\"__metadata__\":\"x\"}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":[]}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":[\"a\",\"b\"]}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":5}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":{\"kk\":1}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":null}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":true}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":{\"a\":\"b\"}}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":[\"a\"]}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"ok\":\"a\",\"kk\":2.5}," ALPHA "}", 4, "kk", NULL},
        /* shape x dtype overflowing size_t */
        {"{" E("alpha", "F32", "[4611686018427387904, 8]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "F32", "[4611686018427387904]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "U8", "[4294967296, 4294967296]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "F64", "[2305843009213693952]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "BOOL", "[2,2,2,2,2,2,2,2]", "[0,256]") "," E("beta", "I64",
                                                                         "[9223372036854775807, 2]", "[256,256]") "}",
         256, "beta", "overflow"},
    };
    char path[128];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TP(path, "bad_%02zu.safetensors", i);
        raw_st(path, cases[i].hdr, cases[i].ndata, -1);
        expect_fail(path, DD_EFORMAT, cases[i].also);
        if (cases[i].also2) expect_fail(path, DD_EFORMAT, cases[i].also2);
        unlink(path);
    }

    /* files too short for the length prefix, including the empty file */
    for (size_t n = 0; n < 8; n++) {
        TP(path, "short_%zu.safetensors", n);
        write_bytes(path, "\x02\0\0\0\0\0\0", n);
        expect_fail(path, DD_EFORMAT, "too short");
        unlink(path);
    }
    /* header length: 0, 1, over the 100 MB limit (file small), 2^64-1, past the end of the file by one byte */
    static const struct { const char *hdr; int64_t len; size_t ndata; const char *also; } lens[] = {
        {"", 0, 0, NULL},
        {"{}", 0, 2, NULL},
        {"{}", 1, 1, NULL},
        {"{} ", 100000001, 16, "100 MB"},
        {"{} ", (int64_t)DD_ST_MAX_HEADER + 1, 0, "100 MB"},
        {"{} ", -2 /* all ones */, 0, "100 MB"},
        {"{}", 3, 0, "past the end"},
        {"{" ALPHA "}", (int64_t)strlen("{" ALPHA "}") + 5, 4, "past the end"},
        {"{" ALPHA "}", 5, 4, NULL}, /* length cuts the JSON short */
    };
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        TP(path, "len_%zu.safetensors", i);
        if (lens[i].len == -2) {
            raw_st(path, lens[i].hdr, lens[i].ndata, 0);
            FILE *f = fopen(path, "r+b");
            assert_non_null(f);
            assert_int_equal(fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f), 8);
            fclose(f);
        } else {
            raw_st(path, lens[i].hdr, lens[i].ndata, lens[i].len);
        }
        expect_fail(path, DD_EFORMAT, lens[i].also);
        unlink(path);
    }
    /* a real model file cut short by one byte, or with one byte appended */
    size_t n;
    uint8_t *img = slurp(g_base[GPT][Q8], &n);
    TP(path, "cut.safetensors");
    write_bytes(path, img, n - 1);
    expect_fail(path, DD_EFORMAT, NULL);
    img = realloc(img, n + 1);
    assert_non_null(img);
    img[n] = 0;
    write_bytes(path, img, n + 1);
    expect_fail(path, DD_EFORMAT, "trailing");
    free(img);
    unlink(path);
}

/* What the container must accept: every dtype, scalars, zero-size tensors, unpadded headers (so data sit at odd
 * addresses), tensors listed out of offset order, metadata; the loader then says what is missing (DD_EMODEL). */
static void test_container_valid(void **state) {
    static const char *const dts[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                      "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
    char hdr[4096], path[128];
    int k = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"\"}");
    size_t off = 0;
    /* listed in reverse offset order */
    size_t begins[15], sizes[15];
    for (int i = 0; i < 15; i++) {
        sizes[i] = dd_st_dtype_size((dd_st_dtype)i) * 3;
        begins[i] = off;
        off += sizes[i];
    }
    for (int i = 14; i >= 0; i--)
        k += snprintf(hdr + k, sizeof hdr - (size_t)k, ",\"t_%s\":{\"data_offsets\":[%zu,%zu],\"shape\":[3],\"dtype\":\"%s\"}",
                      dts[i], begins[i], begins[i] + sizes[i], dts[i]);
    k += snprintf(hdr + k, sizeof hdr - (size_t)k,
                  ",\"scalar\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[%zu,%zu]}"
                  ",\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[%zu,%zu]}"
                  ",\"zero_huge\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4611686018427387904],"
                  "\"data_offsets\":[%zu,%zu]}}",
                  off, off + 8, off + 8, off + 8, off + 8, off + 8);
    assert_true((size_t)k < sizeof hdr);
    if (k % 2 == 0) { /* make the header length odd: data start misaligned */
        memmove(hdr + k, hdr + k - 1, 2);
        hdr[k - 1] = ' ';
        k++;
    }
    TP(path, "valid_all.safetensors");
    raw_st(path, hdr, off + 8, -1);
    dd_st_file f;
    dd_error e = {0};
    dd_status st = dd_st_open(&f, path, &e);
    if (st) print_error("%s\n", e.msg);
    assert_int_equal(st, DD_OK);
    assert_int_equal(f.n, 18);
    const uint8_t *data = f.map + 8 + k;
    for (int i = 0; i < 15; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t_%s", dts[i]);
        const dd_st_tensor *t = dd_st_find(&f, nm);
        assert_non_null(t);
        assert_int_equal(t->dtype, i);
        assert_string_equal(dd_st_dtype_name(t->dtype), dts[i]);
        assert_int_equal(t->ndim, 1);
        assert_int_equal(t->shape[0], 3);
        assert_int_equal(t->begin, begins[i]);
        assert_int_equal(t->end, begins[i] + sizes[i]);
        assert_ptr_equal(t->data, data + begins[i]);
    }
    const dd_st_tensor *t = dd_st_find(&f, "scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->end - t->begin, 8);
    assert_int_equal((uintptr_t)data & 1, 1); /* the data section starts at an odd address */
    assert_non_null(dd_st_find(&f, "empty"));
    assert_non_null(dd_st_find(&f, "zero_huge"));
    assert_null(dd_st_find(&f, "t_F31"));
    assert_string_equal(dd_st_meta(&f, "format"), "pt");
    assert_string_equal(dd_st_meta(&f, "x"), "");
    assert_null(dd_st_meta(&f, "depthdec.config"));
    dd_st_close(&f);
    expect_fail(path, DD_EMODEL, "config");

    /* the smallest valid container */
    TP(path, "valid_empty.safetensors");
    raw_st(path, "{}", 0, -1);
    assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
    assert_int_equal(f.n, 0);
    dd_st_close(&f);
    raw_st(path, "{}      ", 0, -1); /* space padding, as the reference writer pads */
    assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
    dd_st_close(&f);
    expect_fail(path, DD_EMODEL, "config");
}

/* ---- files that are not there ----------------------------------------------------------------------------- */

static void test_missing_files(void **state) {
    char path[256];
    TP(path, "nope.safetensors");
    expect_fail(path, DD_EIO, "No such file");
    TP(path, "no/such/dir/model.safetensors");
    expect_fail(path, DD_EIO, NULL);
    /* a directory without config.json */
    TP(path, "emptydir");
    mkdir_ok(path);
    expect_fail(path, DD_EIO, "config.json");
    /* a directory with a config but no weights */
    TP(path, "emptydir/config.json");
    write_bytes(path, "{\"model_type\":\"csm\",\"depth_decoder_config\":{\"num_codebooks\":4,\"vocab_size\":8,"
                      "\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":2,\"head_dim\":4,\"backbone_hidden_size\":8}}",
                strlen("{\"model_type\":\"csm\",\"depth_decoder_config\":{\"num_codebooks\":4,\"vocab_size\":8,"
                       "\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                       "\"num_attention_heads\":2,\"head_dim\":4,\"backbone_hidden_size\":8}}"));
    TP(path, "emptydir");
    expect_fail(path, DD_EIO, "model.safetensors");
    /* not regular files: /dev/null, a FIFO (must not block waiting for a writer) */
    expect_fail("/dev/null", DD_EIO, NULL);
    TP(path, "fifo.safetensors");
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(30); /* a hang kills the test binary rather than the CI job */
    expect_fail(path, DD_EIO, NULL);
    TP(path, "fifodir");
    mkdir_ok(path);
    TP(path, "fifodir/config.json");
    assert_int_equal(mkfifo(path, 0600), 0);
    TP(path, "fifodir");
    expect_fail(path, DD_EIO, "config.json");
    alarm(0);
    /* bad arguments */
    dd_model *m = (dd_model *)1;
    dd_error e = {0};
    assert_int_equal(dd_model_load(&m, "", &e), DD_EINVAL);
    assert_null(m);
    m = (dd_model *)1;
    assert_int_equal(dd_model_load(&m, NULL, &e), DD_EINVAL);
    assert_null(m);
    assert_int_equal(dd_model_load(NULL, g_base[GPT][F32], &e), DD_EINVAL);
    assert_int_equal(e.code, DD_EINVAL);
}

/* ---- engine rules on native files ------------------------------------------------------------------------- */

static int optional_native(const char *name) {
    static const char *const opt[] = {"head0.weight", "in_proj.bias", "pos.weight", ".qkv.bias",
                                      ".out.bias",    ".fc1.bias",    ".fc2.bias"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++) {
        size_t k = strlen(opt[i]);
        if (n >= k && strcmp(name + n - k, opt[i]) == 0 && (opt[i][0] == '.' || n == k)) return 1;
    }
    return 0;
}

/* Drop each tensor in turn: required ones fail naming the tensor, optional ones load with fewer tensors used. */
static void test_missing_tensors(void **state) {
    static const int which[][2] = {{GPT, F32}, {GPT, Q8}, {LLAMA, BF16}, {LLAMA, Q4}};
    char path[128], pre[160];
    TP(path, "drop.safetensors");
    for (size_t c = 0; c < sizeof which / sizeof *which; c++) {
        tset *ts = ts_load(g_base[which[c][0]][which[c][1]]);
        int full = ts->n;
        for (int i = 0; i < full; i++) {
            snap *s = ts_save(ts);
            char name[160];
            snprintf(name, sizeof name, "%s", ts->t[i].name);
            char sc[180];
            snprintf(sc, sizeof sc, "%s.scales", prefix_of(name, pre, sizeof pre));
            int quant = strstr(name, ".weight") && ts_find(ts, sc) >= 0;
            ts_drop(ts, name);
            ts_write(ts, path);
            if (optional_native(name)) {
                dd_model *m = load_ok(path);
                assert_int_equal(dd_model_tensor_count(m), full - (quant ? 3 : 1));
                dd_model_free(m);
            } else {
                expect_fail(path, DD_EMODEL, prefix_of(name, pre, sizeof pre));
            }
            ts_restore(ts, s);
        }
        ts_free(ts);
    }
}

/* Every tensor with each dimension one too large, with its first two dimensions merged, and with a leading 1:
 * DD_EMODEL naming the tensor (for MLX parts: the matrix). */
static void test_wrong_shapes(void **state) {
    static const int which[][2] = {{GPT, F32}, {GPT, Q8}, {LLAMA, F16}, {LLAMA, Q4}};
    char path[128], pre[160];
    TP(path, "shape.safetensors");
    for (size_t c = 0; c < sizeof which / sizeof *which; c++) {
        tset *ts = ts_load(g_base[which[c][0]][which[c][1]]);
        for (int i = 0; i < ts->n; i++) {
            dd_st_out t = ts->t[i];
            for (int v = 0; v <= t.ndim; v++) {
                int64_t sh[DD_ST_MAX_DIMS];
                int nd = t.ndim;
                memcpy(sh, t.shape, sizeof sh);
                if (v < nd) {
                    sh[v] += 1;
                } else if (nd >= 2) {
                    sh[1] *= sh[0];
                    memmove(sh, sh + 1, (size_t)(nd - 1) * sizeof *sh);
                    nd--;
                } else {
                    memmove(sh + 1, sh, (size_t)nd * sizeof *sh);
                    sh[0] = 1;
                    nd++;
                }
                ts_put(ts, t.name, t.dtype, nd, sh);
                ts_write(ts, path);
                expect_fail(path, DD_EMODEL, prefix_of(t.name, pre, sizeof pre));
                ts->t[i] = t;
            }
        }
        ts_free(ts);
    }
}

enum { OP_END, OP_DROP, OP_PUT, OP_CFG, OP_META };
typedef struct edit {
    int op;
    const char *name; /* tensor or config key */
    const char *json; /* OP_CFG: value (NULL deletes); OP_META: the whole depthdec.config text */
    dd_st_dtype dt;
    int nd;
    int64_t sh[DD_ST_MAX_DIMS];
} edit;
typedef struct mcase {
    int kind, wt;
    dd_status want;
    const char *also;
    edit e[4];
} mcase;

#define DROP(n) {.op = OP_DROP, .name = n}
#define PUT(n, t, d, ...) {.op = OP_PUT, .name = n, .dt = DD_ST_##t, .nd = d, .sh = {__VA_ARGS__}}
#define CFG(k, j) {.op = OP_CFG, .name = k, .json = j}
#define META(j) {.op = OP_META, .json = j}

/* Apply c's edits to its base model and write the result to path. */
static void build_case(const mcase *c, const char *path) {
    tset *ts = ts_load(g_base[c->kind][c->wt]);
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

static void run_cases(const mcase *cases, size_t n, const char *tag) {
    char path[128];
    for (size_t i = 0; i < n; i++) {
        TP(path, "%s_%02zu.safetensors", tag, i);
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

/* Wrong dtypes, MLX quantization mistakes, tensors a block type does not take, hostile zero-size shapes. */
static void test_tensor_rules(void **state) {
    static const mcase cases[] = {
        /* dense types */
        {GPT, F32, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", I32, 2, 192, 64)}},
        {GPT, F32, DD_EMODEL, "layers.1.fc2.weight", {PUT("layers.1.fc2.weight", U32, 2, 64, 256)}},
        {GPT, F32, DD_EMODEL, "head0.weight", {PUT("head0.weight", I64, 2, 64, 128)}},
        {GPT, F32, DD_EMODEL, "heads.weight", {PUT("heads.weight", BOOL, 3, 7, 64, 64)}},
        {GPT, F32, DD_EMODEL, "embed.weight", {PUT("embed.weight", F8_E4M3, 3, 7, 64, 64)}},
        {GPT, F32, DD_EMODEL, "in_proj.weight", {PUT("in_proj.weight", F64, 2, 64, 128)}},
        {GPT, F32, DD_EMODEL, "norm.weight", {PUT("norm.weight", F64, 1, 64)}},
        {GPT, F32, DD_EMODEL, "layers.0.norm1.bias", {PUT("layers.0.norm1.bias", I8, 1, 64)}},
        {GPT, F32, DD_EMODEL, "pos.weight", {PUT("pos.weight", U8, 2, 8, 64)}},
        {GPT, F32, DD_EMODEL, "layers.1.qkv.bias", {PUT("layers.1.qkv.bias", I16, 1, 192)}},
        /* layer matrices of one model share one storage type */
        {GPT, F32, DD_EMODEL, "layers.1.out.weight", {PUT("layers.1.out.weight", F16, 2, 64, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.0.fc2.weight", {PUT("layers.0.fc2.weight", F32, 2, 64, 128)}},
        /* in(): no in_proj with input_dim != dim; a bias without its matrix */
        {GPT, F32, DD_EMODEL, "in_proj", {DROP("in_proj.weight"), DROP("in_proj.bias")}},
        {GPT, F32, DD_EMODEL, "in_proj.bias", {DROP("in_proj.weight")}},
        /* MLX parts on a dense weight */
        {GPT, F32, DD_EMODEL, "layers.0.qkv.biases", {PUT("layers.0.qkv.biases", F16, 2, 192, 1)}},
        {GPT, F32, DD_EMODEL, "layers.0.qkv", {PUT("layers.0.qkv.scales", F16, 2, 192, 1)}},
        {GPT, F32, DD_EMODEL, "quantization", {CFG("quantization", "{\"bits\":8,\"group_size\":64}")}},
        /* MLX affine */
        {GPT, Q8, DD_EMODEL, "layers.0.fc1.biases", {DROP("layers.0.fc1.biases")}},
        {GPT, Q8, DD_EMODEL, "layers.0.fc1.scales", {DROP("layers.0.fc1.scales")}},
        {GPT, Q8, DD_EMODEL, "heads.biases", {DROP("heads.biases")}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.biases", {PUT("layers.1.qkv.biases", F32, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.scales", {PUT("layers.1.qkv.scales", BF16, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.scales",
         {PUT("layers.1.qkv.scales", I32, 2, 192, 1), PUT("layers.1.qkv.biases", I32, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.0.out.weight", {PUT("layers.0.out.weight", F16, 2, 64, 16)}},
        {GPT, Q8, DD_EMODEL, "layers.0.out.weight", {PUT("layers.0.out.weight", I32, 2, 64, 16)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", U32, 2, 192, 12)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", U32, 2, 192, 2)}},
        {GPT, Q8, DD_EMODEL, "heads.weight", {PUT("heads.weight", U32, 3, 7, 64, 32)}},
        {GPT, Q8, DD_EMODEL, "group size 16",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 4), PUT("layers.0.qkv.biases", F16, 2, 192, 4)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.scales",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 3), PUT("layers.0.qkv.biases", F16, 2, 192, 3)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.scales",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 0), PUT("layers.0.qkv.biases", F16, 2, 192, 0)}},
        {GPT, Q8, DD_EMODEL, "group size 256", /* 256 columns in one group */
         {PUT("layers.1.fc2.scales", F16, 2, 64, 1), PUT("layers.1.fc2.biases", F16, 2, 64, 1)}},
        {GPT, Q8, DD_EMODEL, "heads.scales",
         {PUT("heads.scales", F16, 3, 7, 64, 4), PUT("heads.biases", F16, 3, 7, 64, 4)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc2.weight", /* a valid group 32, but the config says 64 */
         {PUT("layers.1.fc2.scales", F16, 2, 64, 8), PUT("layers.1.fc2.biases", F16, 2, 64, 8)}},
        /* quantization config disagreeing with the tensors, or invalid */
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":4,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":32}")}},
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":128}")}},
        {LLAMA, Q4, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":48}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":0}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":\"64\"}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"bits\":3,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"bits\":16,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "mode", {CFG("quantization", "{\"bits\":8,\"group_size\":64,\"mode\":\"gptq\"}")}},
        {GPT, Q8, DD_EMODEL, "mode", {CFG("quantization", "{\"bits\":8,\"group_size\":64,\"mode\":1}")}},
        {GPT, Q8, DD_EMODEL, "quantization", {CFG("quantization", "\"8bit\"")}},
        {LLAMA, Q4, DD_EMODEL, "layers.0.fc1.weight", {PUT("layers.0.fc1.weight", U32, 2, 256, 16)}},
        /* mixed storage among layer matrices */
        {GPT, Q8, DD_EMODEL, "layers.1.fc2",
         {DROP("layers.1.fc2.scales"), DROP("layers.1.fc2.biases"), PUT("layers.1.fc2.weight", F16, 2, 64, 256)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc1",
         {CFG("quantization", NULL), PUT("layers.1.fc1.weight", U32, 2, 256, 8)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc1",
         {CFG("quantization", NULL), PUT("layers.1.fc1.scales", F16, 2, 256, 2),
          PUT("layers.1.fc1.biases", F16, 2, 256, 2)}},
        /* valid: bits and group follow from the shapes when the config has no quantization; defaults */
        {GPT, Q8, DD_OK, NULL, {CFG("quantization", NULL)}},
        {LLAMA, Q4, DD_OK, NULL, {CFG("quantization", NULL)}},
        {GPT, Q8, DD_OK, NULL, {CFG("quantization", "{\"bits\":8}")}},
        {GPT, Q4, DD_OK, NULL, {CFG("quantization", "{\"bits\":4,\"group_size\":64,\"mode\":\"affine\"}")}},
        /* tensors a llama block does not take */
        {LLAMA, BF16, DD_EMODEL, "layers.0", {PUT("layers.0.norm1.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.1", {PUT("layers.1.norm2.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "norm.bias", {PUT("norm.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "pos.weight", {PUT("pos.weight", BF16, 2, 8, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.1.fc1.bias", {PUT("layers.1.fc1.bias", BF16, 1, 256)}},
        /* hostile shapes the container accepts (zero elements, huge dimensions) */
        {GPT, F32, DD_EMODEL, "embed.weight", {PUT("embed.weight", F32, 8, 0, H62, H62, H62, H62, H62, H62, H62)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight",
         {PUT("layers.0.qkv.weight", U32, 2, 0, H62), PUT("layers.0.qkv.scales", F16, 2, 0, H62),
          PUT("layers.0.qkv.biases", F16, 2, 0, H62)}},
        {GPT, Q8, DD_EMODEL, "heads.weight",
         {PUT("heads.weight", U32, 3, 0, 64, H62), PUT("heads.scales", F16, 3, 0, 64, H62 / 2),
          PUT("heads.biases", F16, 3, 0, 64, H62 / 2)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv",
         {PUT("layers.0.qkv.weight", U32, 2, 192, 16), PUT("layers.0.qkv.scales", F16, 2, 0, H62),
          PUT("layers.0.qkv.biases", F16, 2, 0, H62)}},
    };
    run_cases(cases, sizeof cases / sizeof *cases, "rule");
}

/* Config values: missing keys, out of range, wrong types, inconsistent, wrong format/version/block. */
static void test_config_rules(void **state) {
    static const mcase cases[] = {
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "1")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "0")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "65")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "\"8\"")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "8.5")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "8.0")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "true")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "null")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "[8]")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "-8")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "4294967304")}}, /* 2^32 + 8 */
        {GPT, F32, DD_EMODEL, "\"codebook_size\"", {CFG("codebook_size", "0")}},
        {GPT, F32, DD_EMODEL, "\"codebook_size\"", {CFG("codebook_size", "65537")}},
        {GPT, F32, DD_EMODEL, "\"input_dim\"", {CFG("input_dim", "0")}},
        {GPT, F32, DD_EMODEL, "\"dim\"", {CFG("dim", "0")}},
        {GPT, F32, DD_EMODEL, "\"dim\"", {CFG("dim", "-64")}},
        {GPT, F32, DD_EMODEL, "\"dim\"", {CFG("dim", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"layers\"", {CFG("layers", "0")}},
        {GPT, F32, DD_EMODEL, "\"layers\"", {CFG("layers", "1000000")}},
        {GPT, F32, DD_EMODEL, "\"heads\"", {CFG("heads", "0")}},
        {GPT, F32, DD_EMODEL, "\"kv_heads\"", {CFG("kv_heads", "0")}},
        {GPT, F32, DD_EMODEL, "kv_heads", {CFG("kv_heads", "3")}},
        {LLAMA, BF16, DD_EMODEL, "kv_heads", {CFG("kv_heads", "8")}},
        {GPT, F32, DD_EMODEL, "\"head_dim\"", {CFG("head_dim", "0")}},
        {GPT, F32, DD_EMODEL, "\"head_dim\"", {CFG("head_dim", "100000")}},
        {GPT, F32, DD_EMODEL, "\"ffn_dim\"", {CFG("ffn_dim", "0")}},
        {GPT, F32, DD_EMODEL, "\"ffn_dim\"", {CFG("ffn_dim", "1000000000")}},
        {GPT, F32, DD_EMODEL, "heads*head_dim", {CFG("heads", "256"), CFG("head_dim", "512")}},
        {GPT, F32, DD_EMODEL, "norm_eps", {CFG("norm_eps", "-1e-05")}},
        {GPT, F32, DD_EMODEL, "norm_eps", {CFG("norm_eps", "0")}},
        {GPT, F32, DD_EMODEL, "norm_eps", {CFG("norm_eps", "1")}},
        {GPT, F32, DD_EMODEL, "norm_eps", {CFG("norm_eps", "\"1e-5\"")}},
        {GPT, F32, DD_EMODEL, "\"format\"", {CFG("format", "\"mlx\"")}},
        {GPT, F32, DD_EMODEL, "\"format\"", {CFG("format", "1")}},
        {GPT, F32, DD_EMODEL, "\"format\"", {CFG("format", NULL)}},
        {GPT, F32, DD_EMODEL, "\"version\"", {CFG("version", "2")}},
        {GPT, F32, DD_EMODEL, "\"version\"", {CFG("version", "0")}},
        {GPT, F32, DD_EMODEL, "\"version\"", {CFG("version", "\"1\"")}},
        {GPT, F32, DD_EMODEL, "\"version\"", {CFG("version", "1.0")}},
        {GPT, F32, DD_EMODEL, "\"block\"", {CFG("block", "\"foo\"")}},
        {GPT, F32, DD_EMODEL, "\"block\"", {CFG("block", "\"GPT\"")}},
        {GPT, F32, DD_EMODEL, "\"block\"", {CFG("block", "1")}},
        {GPT, F32, DD_EMODEL, "\"block\"", {CFG("block", NULL)}},
        {LLAMA, BF16, DD_EMODEL, "norm.bias", {CFG("block", "\"gpt\""), CFG("rope", "null")}},
        {GPT, F32, DD_EMODEL, "layers.0", {CFG("block", "\"llama\"")}}, /* gpt tensors under a llama config */
        /* rope */
        {GPT, F32, DD_EMODEL, "RoPE", {CFG("rope", "{\"theta\":10000.0}")}},
        {GPT, F32, DD_EMODEL, "\"rope\"", {CFG("rope", "5")}},
        {GPT, F32, DD_EMODEL, "\"rope\"", {CFG("rope", "\"yes\"")}},
        {LLAMA, BF16, DD_EMODEL, "\"theta\"", {CFG("rope", "{}")}},
        {LLAMA, BF16, DD_EMODEL, "theta", {CFG("rope", "{\"theta\":0.5}")}},
        {LLAMA, BF16, DD_EMODEL, "theta", {CFG("rope", "{\"theta\":-10000}")}},
        {LLAMA, BF16, DD_EMODEL, "\"theta\"", {CFG("rope", "{\"theta\":\"1e4\"}")}},
        {LLAMA, BF16, DD_EMODEL, "rope.scaling", {CFG("rope", "{\"theta\":1e4,\"scaling\":7}")}},
        {LLAMA, BF16, DD_EMODEL, "\"low_freq_factor\"", {CFG("rope", "{\"theta\":1e4,\"scaling\":{\"factor\":32}}")}},
        {LLAMA, BF16, DD_EMODEL, "llama3",
         {CFG("rope", "{\"theta\":1e4,\"scaling\":{\"factor\":0.5,\"low_freq_factor\":1,\"high_freq_factor\":4,"
                      "\"original_max_position_embeddings\":8192}}")}},
        {LLAMA, BF16, DD_EMODEL, "llama3",
         {CFG("rope", "{\"theta\":1e4,\"scaling\":{\"factor\":32,\"low_freq_factor\":4,\"high_freq_factor\":1,"
                      "\"original_max_position_embeddings\":8192}}")}},
        {LLAMA, BF16, DD_EMODEL, "llama3",
         {CFG("rope", "{\"theta\":1e4,\"scaling\":{\"factor\":32,\"low_freq_factor\":1,\"high_freq_factor\":4,"
                      "\"original_max_position_embeddings\":0}}")}},
        {LLAMA, BF16, DD_EMODEL, "head_dim", {CFG("head_dim", "15")}},
        /* the config text itself */
        {GPT, F32, DD_EFORMAT, "depthdec.config", {META("{\"format\":")}},
        {GPT, F32, DD_EFORMAT, "depthdec.config", {META("")}},
        {GPT, F32, DD_EFORMAT, "depthdec.config", {META("\"depthdec\"")}},
        {GPT, F32, DD_EFORMAT, "depthdec.config", {META("{\"format\":\"depthdec\",\"format\":\"depthdec\"}")}},
        {GPT, F32, DD_EMODEL, "depthdec.config", {META("[1, 2]")}},
        {GPT, F32, DD_EMODEL, "\"version\"", {META("{\"format\":\"depthdec\"}")}},
        {GPT, F32, DD_EMODEL, "config", {META("{}")}},
        /* valid: keys with defaults */
        {GPT, F32, DD_OK, NULL, {CFG("kv_heads", NULL)}},
        {GPT, F32, DD_OK, NULL, {CFG("norm_eps", NULL)}},
        {GPT, F32, DD_OK, NULL, {CFG("rope", NULL)}},
        {GPT, F32, DD_OK, NULL, {CFG("comment", "\"extra keys are ignored\"")}},
    };
    run_cases(cases, sizeof cases / sizeof *cases, "cfg");

    /* every required key, deleted */
    static const char *const req[] = {"format", "version", "block",    "levels",  "codebook_size",
                                      "input_dim", "dim",  "layers",   "heads",   "head_dim", "ffn_dim"};
    for (size_t i = 0; i < sizeof req / sizeof *req; i++) {
        for (int k = 0; k < 2; k++) {
            mcase c = {k, k == GPT ? F32 : Q8, DD_EMODEL, req[i], {CFG(req[i], NULL)}};
            run_cases(&c, 1, "cfgdel");
        }
    }
}

/* A hostile config must be refused before anything is sized from it: quickly, with DD_EMODEL, and (outside
 * valgrind/ASan, in a child process) within an address-space limit of 256 MB above what the process holds. */
static int under_tool(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#else
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload") != NULL;
#endif
}

static int load_status_limited(const char *path, size_t extra) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(100);
        fclose(f);
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) != 0) _exit(101);
        rlim_t lim = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + extra;
        if (rl.rlim_max == RLIM_INFINITY || lim < rl.rlim_max) rl.rlim_cur = lim;
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(102);
        dd_model *m = NULL;
        dd_status s = dd_model_load(&m, path, NULL);
        dd_model_free(m);
        _exit((int)s);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void test_huge_config(void **state) {
    static const mcase cases[] = {
        {GPT, F32, DD_EMODEL, "\"dim\"", {CFG("dim", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"input_dim\"", {CFG("input_dim", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"ffn_dim\"", {CFG("ffn_dim", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"codebook_size\"", {CFG("codebook_size", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"levels\"", {CFG("levels", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"layers\"", {CFG("layers", "1000000000")}},
        {GPT, F32, DD_EMODEL, "\"heads\"", {CFG("heads", "1000000000")}},
        {LLAMA, Q4, DD_EMODEL, "\"dim\"", {CFG("dim", "9223372036854775807")}},
        /* every value at its limit: nothing is sized from the config; the tensors are simply wrong */
        {GPT, F32, DD_EMODEL, "head0.weight",
         {META("{\"format\":\"depthdec\",\"version\":1,\"block\":\"gpt\",\"levels\":64,\"codebook_size\":65536,"
               "\"input_dim\":16384,\"dim\":16384,\"layers\":64,\"heads\":32,\"kv_heads\":32,\"head_dim\":512,"
               "\"ffn_dim\":65536,\"norm_eps\":1e-5,\"rope\":null}")}},
    };
    char path[128];
    int limited = !under_tool();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TP(path, "huge_%zu.safetensors", i);
        build_case(&cases[i], path);
        double t0 = now_s();
        expect_fail(path, DD_EMODEL, cases[i].also);
        double dt = now_s() - t0;
        if (dt > 2.0) print_error("%s: refusal took %.2f s\n", path, dt);
        assert_true(dt < 2.0);
        if (limited) assert_int_equal(load_status_limited(path, (size_t)256 << 20), DD_EMODEL);
        unlink(path);
    }
    if (limited) assert_int_equal(load_status_limited(g_base[GPT][F32], (size_t)256 << 20), DD_OK);
}

/* ---- config beside the file ------------------------------------------------------------------------------- */

static void cfg_equal(const dd_config *a, const dd_config *b) {
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

/* The same model with its config in config.json beside the file instead of __metadata__: identical config and
 * logits. Metadata wins over a sidecar; a broken or wrong sidecar, or none at all, is refused. */
static void test_sidecar(void **state) {
    char dir[128], path[160], cj[160];
    for (int k = 0; k < 2; k++) {
        int w = k == GPT ? F32 : Q8;
        TP(dir, "side_%d", k);
        mkdir_ok(dir);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        snprintf(cj, sizeof cj, "%s/config.json", dir);
        tset *ts = ts_load(g_base[k][w]);
        json_t *cfg = ts->cfg;
        ts->cfg = NULL;
        ts_write(ts, path); /* no metadata */
        expect_fail_in(path, DD_EMODEL, path, cj);
        expect_fail(path, DD_EMODEL, "depthdec.config");

        write_json(cj, cfg);
        dd_model *a = load_ok(g_base[k][w]), *b = load_ok(path);
        cfg_equal(dd_model_config(a), dd_model_config(b));
        expect_config_matches(dd_model_config(b), cfg);
        assert_int_equal(dd_model_tensor_count(a), dd_model_tensor_count(b));
        assert_int_equal(dd_model_tensor_count(b), ts->n);
        expect_same_scores(a, b);
        dd_model_free(b);

        /* other metadata (MLX writes {"format": "mlx"}) and a sidecar */
        write_st(path, ts->t, ts->n, "format", "mlx");
        b = load_ok(path);
        expect_same_scores(a, b);
        dd_model_free(b);

        /* relative path without a directory part: ./config.json */
        char cwd[1024];
        assert_non_null(getcwd(cwd, sizeof cwd));
        assert_int_equal(chdir(dir), 0);
        b = load_ok("model.safetensors");
        assert_int_equal(chdir(cwd), 0);
        expect_same_scores(a, b);
        dd_model_free(b);

        /* broken sidecars */
        write_str(cj, "{\"format\": \"depthdec\",");
        expect_fail_in(path, DD_EFORMAT, cj, NULL);
        write_str(cj, "");
        expect_fail_in(path, DD_EFORMAT, cj, NULL);
        write_str(cj, "{\"levels\":1,\"levels\":1}");
        expect_fail_in(path, DD_EFORMAT, cj, NULL);
        json_t *bad = json_deep_copy(cfg);
        json_set(bad, "levels", "1");
        write_json(cj, bad);
        expect_fail_in(path, DD_EMODEL, cj, "\"levels\"");
        json_set(bad, "levels", NULL);
        write_json(cj, bad);
        expect_fail_in(path, DD_EMODEL, cj, "\"levels\"");
        json_decref(bad);
        write_str(cj, "[]");
        expect_fail_in(path, DD_EMODEL, cj, NULL);

        /* metadata wins: a broken sidecar beside a file with metadata does not matter */
        ts->cfg = cfg;
        ts_write(ts, path);
        write_str(cj, "not json");
        b = load_ok(path);
        expect_same_scores(a, b);
        dd_model_free(b);

        /* a directory named config.json is no config */
        ts->cfg = NULL;
        ts_write(ts, path);
        ts->cfg = cfg;
        unlink(cj);
        mkdir_ok(cj);
        expect_fail(path, DD_EMODEL, "config.json");
        rmdir(cj);
        dd_model_free(a);
        ts_free(ts);
    }
}

/* ---- MLX misaligned data ---------------------------------------------------------------------------------- */

/* A 1-byte U8 tensor first puts every later tensor at an odd offset (MLX writes unpadded headers): the model
 * loads, ignores the pad, and scores bitwise like the aligned file, for every weight type. */
static void test_misaligned(void **state) {
    char path[128];
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            tset *ts = ts_load(g_base[k][w]);
            ts_putf(ts, "aaa.pad", DD_ST_U8, 1, (int64_t[]){1}, 0, 0, 1);
            TP(path, "misaligned_%d_%d.safetensors", k, w);
            ts_write(ts, path);
            dd_st_file f;
            dd_error e = {0};
            assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
            for (int i = 0; i < f.n; i++) {
                if (strcmp(f.t[i].name, "aaa.pad") == 0) continue;
                assert_int_equal(f.t[i].begin & 1, 1);
                assert_int_equal((uintptr_t)f.t[i].data & 1, 1);
            }
            dd_st_close(&f);
            dd_model *a = load_ok(g_base[k][w]), *b = load_ok(path);
            cfg_equal(dd_model_config(a), dd_model_config(b));
            assert_int_equal(dd_model_tensor_count(a), dd_model_tensor_count(b));
            expect_same_scores(a, b);
            dd_model_free(a);
            dd_model_free(b);
            ts_free(ts);
            unlink(path);
        }
}

/* ---- MLX affine layouts ----------------------------------------------------------------------------------- */

/* The f32 base quantized here (bits 8/4, group 32/64, scales and biases F16/BF16/F32, stacked tensors
 * included or not) must score bitwise like the f32 file holding the dequantized values: the loader reads bits
 * and group from the shapes, packs from the least significant bits, and views stacked tensors row by row. */
static void test_quant_layouts(void **state) {
    static const struct { int kind, bits, group; dd_st_dtype sb; int stacks; } cases[] = {
        {GPT, 8, 64, DD_ST_F16, 0},  {GPT, 4, 64, DD_ST_BF16, 1}, {GPT, 8, 32, DD_ST_F32, 1},
        {GPT, 4, 32, DD_ST_F16, 1},  {LLAMA, 4, 64, DD_ST_F32, 0}, {LLAMA, 8, 32, DD_ST_BF16, 1},
    };
    char qpath[128], dpath[128];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int bits = cases[c].bits, group = cases[c].group, per = 32 / bits;
        uint32_t mask = (1u << bits) - 1;
        tset *q = ts_load(g_base[cases[c].kind][F32]), *d = ts_load(g_base[cases[c].kind][F32]);
        int nq = 0, n0 = d->n;
        for (int i = 0; i < n0; i++) {
            dd_st_out t = d->t[i];
            if (t.ndim < 2 || strcmp(t.name, "pos.weight") == 0) continue;
            if (t.ndim == 3 && !cases[c].stacks) continue;
            int64_t K = t.shape[t.ndim - 1], rows = (int64_t)elems(t.ndim, t.shape) / K, words = K / per,
                    ng = K / group;
            int64_t sh[3];
            memcpy(sh, t.shape, sizeof sh);
            char base[160], nm[170];
            prefix_of(t.name, base, sizeof base);
            sh[t.ndim - 1] = words;
            uint32_t *qw = ts_put(q, t.name, DD_ST_U32, t.ndim, sh);
            sh[t.ndim - 1] = ng;
            snprintf(nm, sizeof nm, "%s.scales", base);
            uint8_t *sc = ts_put(q, nm, cases[c].sb, t.ndim, sh);
            snprintf(nm, sizeof nm, "%s.biases", base);
            uint8_t *bi = ts_put(q, nm, cases[c].sb, t.ndim, sh);
            float *dq = ts_put(d, t.name, DD_ST_F32, t.ndim, t.shape);
            float *x = malloc((size_t)K * 4), *fs = malloc((size_t)ng * 4), *fb = malloc((size_t)ng * 4);
            assert_true(x && fs && fb);
            size_t es = dd_st_dtype_size(cases[c].sb);
            for (int64_t r = 0; r < rows; r++) {
                memcpy(x, (const uint8_t *)t.data + (size_t)(r * K) * 4, (size_t)K * 4);
                dd_quantize_row(x, K, bits, group, qw + r * words, fs, fb);
                for (int64_t g = 0; g < ng; g++) {
                    float sv[2] = {fs[g], fb[g]};
                    uint8_t *dst[2] = {sc + (size_t)(r * ng + g) * es, bi + (size_t)(r * ng + g) * es};
                    for (int j = 0; j < 2; j++) {
                        if (cases[c].sb == DD_ST_F32) {
                            memcpy(dst[j], &sv[j], 4);
                        } else {
                            uint16_t h = cases[c].sb == DD_ST_F16 ? dd_f32_to_f16(sv[j]) : dd_f32_to_bf16(sv[j]);
                            memcpy(dst[j], &h, 2);
                            sv[j] = cases[c].sb == DD_ST_F16 ? dd_f16_to_f32(h) : dd_bf16_to_f32(h);
                        }
                    }
                    fs[g] = sv[0];
                    fb[g] = sv[1];
                }
                for (int64_t i2 = 0; i2 < K; i2++) {
                    uint32_t qv = (qw[r * words + i2 / per] >> (bits * (i2 % per))) & mask;
                    float sq = fs[i2 / group] * (float)qv; /* two roundings, as MLX */
                    dq[r * K + i2] = sq + fb[i2 / group];
                }
            }
            free(x);
            free(fs);
            free(fb);
            nq++;
        }
        json_set(q->cfg, "quantization", NULL);
        char qc[96];
        snprintf(qc, sizeof qc, "{\"group_size\":%d,\"bits\":%d,\"mode\":\"affine\"}", group, bits);
        json_set(q->cfg, "quantization", qc);
        TP(qpath, "quant_%zu.safetensors", c);
        TP(dpath, "dequant_%zu.safetensors", c);
        ts_write(q, qpath);
        ts_write(d, dpath);
        dd_model *mq = load_ok(qpath), *md = load_ok(dpath);
        const dd_config *cq = dd_model_config(mq);
        assert_int_equal(cq->quant_bits, bits);
        assert_int_equal(cq->quant_group, group);
        assert_int_equal(cq->weight_type, bits == 8 ? DD_Q8 : DD_Q4);
        assert_int_equal(dd_model_config(md)->weight_type, DD_F32);
        assert_int_equal(dd_model_tensor_count(mq), n0 + 2 * nq);
        assert_int_equal(dd_model_tensor_count(md), n0);
        expect_same_scores(mq, md);
        dd_model_free(mq);
        dd_model_free(md);
        ts_free(q);
        ts_free(d);
        unlink(qpath);
        unlink(dpath);
    }
}

/* ---- HF CSM directories ----------------------------------------------------------------------------------- */

#define CQ 4
#define CV 20
#define CI 40
#define CD 32
#define CL 2
#define CH 4
#define CKV 2
#define CHD 12
#define CF 48
#define CSM_USED (5 + 9 * CL)
static const char *const k_tab_bb = "backbone_model.embed_tokens.embed_audio_tokens.weight";
static const char *const k_tab_dd = "depth_decoder.model.embed_tokens.weight";
static const char *const k_shard[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};

/* Random bf16 CSM weights with the HF names of SPEC §4, plus backbone / codec / text tensors to be ignored. */
static tset *csm_tensors(void) {
    tset *ts = ts_new();
    float sI = 1.7f / sqrtf(CI), sD = 1.7f / sqrtf(CD), sF = 1.7f / sqrtf(CF), sA = 1.7f / sqrtf(CH * CHD);
    ts_putf(ts, "backbone_model.layers.0.foo", DD_ST_I64, 1, (int64_t[]){3}, 0, 0, 0);
    ts_putf(ts, "lm_head.weight", DD_ST_BF16, 2, (int64_t[]){CV, CI}, 0, 2 * sI, 0);
    ts_putf(ts, k_tab_bb, DD_ST_BF16, 2, (int64_t[]){CQ * CV, CI}, 0, 1.0f, 0);
    ts_putf(ts, "codec_model.x", DD_ST_U8, 2, (int64_t[]){2, 3}, 0, 0, 0);
    ts_putf(ts, "embed_text_tokens.weight", DD_ST_BF16, 2, (int64_t[]){7, CI}, 0, 1.0f, 0);
    ts_putf(ts, "depth_decoder.model.inputs_embeds_projector.weight", DD_ST_BF16, 2, (int64_t[]){CD, CI}, 0, sI, 0);
    char nm[160];
    for (int i = 0; i < CL; i++) {
#define N(s) (snprintf(nm, sizeof nm, "depth_decoder.model.layers.%d." s, i), nm)
        ts_putf(ts, N("input_layernorm.weight"), DD_ST_BF16, 1, (int64_t[]){CD}, 1.0f, 0.1f, 0);
        ts_putf(ts, N("self_attn.q_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CH * CHD, CD}, 0, sD, 0);
        ts_putf(ts, N("self_attn.k_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CKV * CHD, CD}, 0, sD, 0);
        ts_putf(ts, N("self_attn.v_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CKV * CHD, CD}, 0, sD, 0);
        ts_putf(ts, N("self_attn.o_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CD, CH * CHD}, 0, 0.5f * sA, 0);
        ts_putf(ts, N("post_attention_layernorm.weight"), DD_ST_BF16, 1, (int64_t[]){CD}, 1.0f, 0.1f, 0);
        ts_putf(ts, N("mlp.gate_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CF, CD}, 0, sD, 0);
        ts_putf(ts, N("mlp.up_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CF, CD}, 0, sD, 0);
        ts_putf(ts, N("mlp.down_proj.weight"), DD_ST_BF16, 2, (int64_t[]){CD, CF}, 0, 0.5f * sF, 0);
#undef N
    }
    ts_putf(ts, "depth_decoder.model.norm.weight", DD_ST_BF16, 1, (int64_t[]){CD}, 1.0f, 0.1f, 0);
    ts_putf(ts, "depth_decoder.codebooks_head.weight", DD_ST_BF16, 3, (int64_t[]){CQ - 1, CD, CV}, 0, 2 * sD, 0);
    ts_putf(ts, "backbone_model.norm.weight", DD_ST_F32, 1, (int64_t[]){CI}, 1.0f, 0.1f, 0);
    return ts;
}

enum { CSM_V4 = 1, CSM_V4_TYPE = 2, CSM_THETA_OUT = 4, CSM_NO_BBHS = 8 };

static json_t *csm_config(int flags) {
    json_t *rp = json_pack("{s:s, s:f, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "rope_theta", 500000.0, "factor",
                           32.0, "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                           "original_max_position_embeddings", 8192);
    json_t *d = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:s, s:i, s:b}", "model_type",
                          "csm_depth_decoder_model", "num_codebooks", CQ, "vocab_size", CV, "hidden_size", CD,
                          "intermediate_size", CF, "num_hidden_layers", CL, "num_attention_heads", CH,
                          "num_key_value_heads", CKV, "head_dim", CHD, "rms_norm_eps", 1e-5, "backbone_hidden_size",
                          CI, "hidden_act", "silu", "max_position_embeddings", 33, "attention_bias", 0);
    assert_true(rp && d);
    if (flags & (CSM_V4 | CSM_THETA_OUT)) {
        json_object_set_new(d, "rope_theta", json_real(500000.0));
        json_object_del(rp, "rope_theta");
    }
    if (flags & CSM_V4_TYPE) {
        json_object_del(rp, "rope_type");
        json_object_set_new(rp, "type", json_string("llama3"));
    }
    json_object_set_new(d, flags & CSM_V4 ? "rope_scaling" : "rope_parameters", rp);
    if (flags & CSM_NO_BBHS) json_object_del(d, "backbone_hidden_size");
    json_t *o = json_pack("{s:[s], s:s, s:i, s:i, s:o}", "architectures", "CsmForConditionalGeneration", "model_type",
                          "csm", "hidden_size", CI, "num_codebooks", CQ, "depth_decoder_config", d);
    assert_non_null(o);
    return o;
}

/* dir/config.json + model.safetensors, or two shards + model.safetensors.index.json. */
static void csm_write(const char *dir, const tset *ts, const json_t *cfg, int sharded) {
    char p[256];
    mkdir_ok(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_json(p, cfg);
    if (!sharded) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_st(p, ts->t, ts->n, "format", "pt");
        return;
    }
    int k = ts->n / 2;
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", dir, k_shard[s]);
        write_st(p, ts->t + (s ? k : 0), s ? ts->n - k : k, "format", "pt");
    }
    json_t *wm = json_object();
    for (int i = 0; i < ts->n; i++) json_object_set_new(wm, ts->t[i].name, json_string(k_shard[i >= k]));
    json_t *ix = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)12345, "weight_map", wm);
    assert_non_null(ix);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_json(p, ix);
    json_decref(ix);
}

/* Edit dir's index: weight_map[key] = json (key NULL: weight_map itself). */
static void index_edit(const char *dir, const char *key, const char *json) {
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_error_t je;
    json_t *ix = json_load_file(p, 0, &je);
    assert_non_null(ix);
    if (key) json_set(json_object_get(ix, "weight_map"), key, json);
    else json_set(ix, "weight_map", json);
    write_json(p, ix);
    json_decref(ix);
}

static void csm_check(const dd_model *m, const tset *ts, const char *table) {
    const dd_config *c = dd_model_config(m);
    assert_int_equal(c->block, DD_BLOCK_LLAMA);
    assert_int_equal(c->levels, CQ);
    assert_int_equal(c->codebook_size, CV);
    assert_int_equal(c->input_dim, CI);
    assert_int_equal(c->dim, CD);
    assert_int_equal(c->layers, CL);
    assert_int_equal(c->heads, CH);
    assert_int_equal(c->kv_heads, CKV);
    assert_int_equal(c->head_dim, CHD);
    assert_int_equal(c->ffn_dim, CF);
    assert_true(c->norm_eps == 1e-5f);
    assert_int_equal(c->has_rope, 1);
    assert_true(c->rope_theta == 500000.0);
    assert_int_equal(c->rope_scaling, 1);
    assert_true(c->rope_factor == 32.0 && c->rope_low_freq_factor == 1.0 && c->rope_high_freq_factor == 4.0 &&
                c->rope_original_max_pos == 8192.0);
    assert_int_equal(c->has_head0, 1);
    assert_int_equal(c->has_in_proj, 1);
    assert_int_equal(c->has_pos, 0);
    assert_int_equal(c->embed_in_input_space, 1);
    assert_int_equal(c->quant_bits, 0);
    assert_int_equal(c->weight_type, DD_BF16);
    assert_int_equal(dd_model_tensor_count(m), CSM_USED);
    check_mat(&m->head0, ts_get(ts, "lm_head.weight"));
    check_mat(&m->embed, ts_get(ts, table));
    check_mat(&m->in_proj, ts_get(ts, "depth_decoder.model.inputs_embeds_projector.weight"));
    check_vec(m->norm_w, ts_get(ts, "depth_decoder.model.norm.weight"));
    assert_null(m->norm_b);
    assert_null(m->in_bias);
    char nm[160];
    for (int i = 0; i < CL; i++) {
        const dd_layer *l = &m->layer[i];
#define T(s) (snprintf(nm, sizeof nm, "depth_decoder.model.layers.%d." s, i), ts_get(ts, nm))
        check_vec(l->norm1_w, T("input_layernorm.weight"));
        check_vec(l->norm2_w, T("post_attention_layernorm.weight"));
        assert_null(l->norm1_b);
        assert_null(l->norm2_b);
        check_mat(&l->wq, T("self_attn.q_proj.weight"));
        check_mat(&l->wk, T("self_attn.k_proj.weight"));
        check_mat(&l->wv, T("self_attn.v_proj.weight"));
        check_mat(&l->wo, T("self_attn.o_proj.weight"));
        check_mat(&l->fc1, T("mlp.gate_proj.weight"));
        check_mat(&l->up, T("mlp.up_proj.weight"));
        check_mat(&l->fc2, T("mlp.down_proj.weight"));
        assert_null(l->bq);
#undef T
    }
    /* codebooks_head [Q-1, D, V] is input-major: heads row (l, v) column d = W[l][d][v] */
    const dd_st_out *hw = ts_get(ts, "depth_decoder.codebooks_head.weight");
    assert_int_equal(m->heads.rows, (CQ - 1) * CV);
    assert_int_equal(m->heads.cols, CD);
    float row[CD];
    for (int l = 0; l < CQ - 1; l++)
        for (int v = 0; v < CV; v++) {
            dd_weight_row_f32(&m->heads, (int64_t)l * CV + v, row);
            for (int d = 0; d < CD; d++) {
                float want = elem_f32(hw, ((size_t)l * CD + d) * CV + v);
                assert_memory_equal(&row[d], &want, 4);
            }
        }
}

static void test_csm_valid(void **state) {
    char dir[128];
    tset *ts = csm_tensors();
    json_t *cfg = csm_config(0);
    TP(dir, "csm");
    csm_write(dir, ts, cfg, 0);
    dd_model *a = load_ok(dir);
    csm_check(a, ts, k_tab_bb);
    assert_string_equal(dd_model_source(a), dir);

    /* transformers 4.x config (rope_theta + rope_scaling, with "rope_type" or "type"), theta outside
     * rope_parameters, backbone width from the top-level hidden_size */
    static const int flags[] = {CSM_V4, CSM_V4 | CSM_V4_TYPE, CSM_THETA_OUT, CSM_NO_BBHS};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        json_t *c4 = csm_config(flags[i]);
        TP(dir, "csm_flags_%zu", i);
        csm_write(dir, ts, c4, 0);
        json_decref(c4);
        dd_model *b = load_ok(dir);
        csm_check(b, ts, k_tab_bb);
        expect_same_scores(a, b);
        dd_model_free(b);
    }
    /* the table under the depth decoder's name, and under both names */
    ts_rename(ts, k_tab_bb, k_tab_dd);
    TP(dir, "csm_table_dd");
    csm_write(dir, ts, cfg, 0);
    dd_model *b = load_ok(dir);
    csm_check(b, ts, k_tab_dd);
    expect_same_scores(a, b);
    dd_model_free(b);
    const dd_st_out *tab = ts_get(ts, k_tab_dd);
    dd_st_out both = *tab;
    snprintf(both.name, sizeof both.name, "%s", k_tab_bb);
    ts->t[ts->n++] = both;
    TP(dir, "csm_table_both");
    csm_write(dir, ts, cfg, 0);
    b = load_ok(dir);
    csm_check(b, ts, k_tab_dd);
    expect_same_scores(a, b);
    dd_model_free(b);
    ts->n--;
    ts_rename(ts, k_tab_dd, k_tab_bb);

    /* sharded over two files through model.safetensors.index.json */
    TP(dir, "csm_sharded");
    csm_write(dir, ts, cfg, 1);
    b = load_ok(dir);
    csm_check(b, ts, k_tab_bb);
    expect_same_scores(a, b);
    dd_model_free(b);
    /* a shard every tensor of which is unused still opens fine; shards listed twice are opened once */
    char p[256];
    snprintf(p, sizeof p, "%s/extra.safetensors", dir);
    dd_st_out extra = *ts_get(ts, "codec_model.x");
    snprintf(extra.name, sizeof extra.name, "codec_model.y");
    write_st(p, &extra, 1, NULL, NULL);
    index_edit(dir, "codec_model.y", "\"extra.safetensors\"");
    b = load_ok(dir);
    expect_same_scores(a, b);
    dd_model_free(b);

    dd_model_free(a);
    json_decref(cfg);
    ts_free(ts);
}

static void test_csm_errors(void **state) {
    char dir[128], p[256], idx[256];
    tset *ts = csm_tensors();
    json_t *cfg = csm_config(0);

    /* sharded: a missing shard, a tensor in two shards, path traversal, absolute paths, bad index */
    TP(dir, "csmx_missing");
    csm_write(dir, ts, cfg, 1);
    index_edit(dir, "lm_head.weight", "\"model-00003-of-00003.safetensors\"");
    expect_fail(dir, DD_EIO, "model-00003-of-00003.safetensors");

    TP(dir, "csmx_dup");
    csm_write(dir, ts, cfg, 1);
    {
        int k = ts->n / 2;
        dd_st_out t2[TS_MAX];
        memcpy(t2, ts->t + k, (size_t)(ts->n - k) * sizeof *t2);
        t2[ts->n - k] = ts->t[1]; /* lm_head.weight, also in shard 1 */
        snprintf(p, sizeof p, "%s/%s", dir, k_shard[1]);
        write_st(p, t2, ts->n - k + 1, "format", "pt");
    }
    snprintf(p, sizeof p, "%s/%s", dir, k_shard[1]);
    expect_fail_in(dir, DD_EFORMAT, p, "lm_head.weight");

    TP(p, "x");
    write_st(p, ts->t, ts->n, "format", "pt"); /* a complete model where "../x" points */
    static const char *const bad_shards[] = {"\"../x\"", "\"..\"", "\"/etc/passwd\"", "\"sub/x\"", "\"\"", "5",
                                             "null"};
    for (size_t i = 0; i < sizeof bad_shards / sizeof *bad_shards; i++) {
        TP(dir, "csmx_trav_%zu", i);
        csm_write(dir, ts, cfg, 1);
        index_edit(dir, "lm_head.weight", bad_shards[i]);
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        expect_fail_in(dir, DD_EMODEL, idx, "lm_head.weight");
    }
    TP(dir, "csmx_trav_0");
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    expect_fail_in(dir, DD_EMODEL, idx, "'../x'");

    TP(dir, "csmx_index");
    csm_write(dir, ts, cfg, 1);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    index_edit(dir, NULL, "[]");
    expect_fail_in(dir, DD_EMODEL, idx, "weight_map");
    index_edit(dir, NULL, "{}");
    expect_fail(dir, DD_EMODEL, idx);
    json_t *wm = json_object();
    json_t *ix = json_pack("{s:o}", "weight_map", wm);
    write_json(idx, ix);
    json_decref(ix);
    expect_fail(dir, DD_EMODEL, idx);
    write_str(idx, "{\"weight_map\": {");
    expect_fail(dir, DD_EFORMAT, idx);
    write_str(idx, "{\"weight_map\":{},\"weight_map\":{}}");
    expect_fail(dir, DD_EFORMAT, idx);
    unlink(idx);
    expect_fail(dir, DD_EIO, "model.safetensors");

    /* a malformed shard */
    TP(dir, "csmx_badshard");
    csm_write(dir, ts, cfg, 1);
    snprintf(p, sizeof p, "%s/%s", dir, k_shard[1]);
    {
        size_t n;
        uint8_t *img = slurp(p, &n);
        write_bytes(p, img, n - 2);
        free(img);
    }
    expect_fail(dir, DD_EFORMAT, k_shard[1]);

    /* configs */
    /* in_cfg: the message names config.json (else a tensor of model.safetensors) */
    static const struct { const char *path, *key, *json; dd_status want; const char *also; int in_cfg; } cfgs[] = {
        {NULL, "model_type", "\"llama\"", DD_EMODEL, "model_type", 1},
        {NULL, "model_type", NULL, DD_EMODEL, "model_type", 1},
        {NULL, "depth_decoder_config", NULL, DD_EMODEL, "depth_decoder_config", 1},
        {NULL, "depth_decoder_config", "[]", DD_EMODEL, "depth_decoder_config", 1},
        {"depth_decoder_config", "num_codebooks", "1", DD_EMODEL, "\"num_codebooks\"", 1},
        {"depth_decoder_config", "num_codebooks", NULL, DD_EMODEL, "\"num_codebooks\"", 1},
        {"depth_decoder_config", "vocab_size", "0", DD_EMODEL, "\"vocab_size\"", 1},
        {"depth_decoder_config", "hidden_size", "1000000000", DD_EMODEL, "\"hidden_size\"", 1},
        {"depth_decoder_config", "num_key_value_heads", "3", DD_EMODEL, "kv_heads", 1},
        {"depth_decoder_config", "rms_norm_eps", "-1", DD_EMODEL, "norm_eps", 1},
        {"depth_decoder_config", "hidden_act", "\"gelu\"", DD_EMODEL, "hidden_act", 1},
        {"depth_decoder_config", "backbone_hidden_size", "0", DD_EMODEL, "\"backbone_hidden_size\"", 1},
        {"depth_decoder_config", "rope_parameters", "{\"rope_type\":\"yarn\",\"rope_theta\":1e4,\"factor\":4}",
         DD_EMODEL, "yarn", 1},
        {"depth_decoder_config", "rope_parameters", "{\"rope_type\":\"llama3\",\"rope_theta\":1e4}", DD_EMODEL,
         "\"factor\"", 1},
        {"depth_decoder_config", "rope_parameters", "{\"rope_type\":\"default\"}", DD_EMODEL, "rope_theta", 1},
        {"depth_decoder_config", "head_dim", "13", DD_EMODEL, "head_dim", 1},
        {"depth_decoder_config", "intermediate_size", "49", DD_EMODEL, "mlp.gate_proj.weight", 0},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        json_t *c = json_deep_copy(cfg);
        json_set(cfgs[i].path ? json_object_get(c, cfgs[i].path) : c, cfgs[i].key, cfgs[i].json);
        TP(dir, "csmx_cfg_%zu", i);
        csm_write(dir, ts, c, 0);
        json_decref(c);
        snprintf(p, sizeof p, "%s/config.json", dir);
        expect_fail_in(dir, cfgs[i].want, cfgs[i].in_cfg ? p : dir, cfgs[i].also);
    }
    TP(dir, "csmx_cfg_0");
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_str(p, "{\"model_type\": \"csm\"");
    expect_fail(dir, DD_EFORMAT, p);
    write_str(p, "{\"model_type\":\"csm\",\"model_type\":\"csm\"}");
    expect_fail(dir, DD_EFORMAT, p);
    unlink(p);
    expect_fail(dir, DD_EIO, p);

    /* tensors: missing, wrong shape (the head stored output-major), wrong dtype, quantized head */
    static const char *const req[] = {"lm_head.weight" /* optional */,
                                      "depth_decoder.model.inputs_embeds_projector.weight",
                                      "depth_decoder.model.norm.weight",
                                      "depth_decoder.codebooks_head.weight",
                                      "depth_decoder.model.layers.1.mlp.up_proj.weight",
                                      "depth_decoder.model.layers.0.self_attn.k_proj.weight",
                                      "depth_decoder.model.layers.1.post_attention_layernorm.weight"};
    for (size_t i = 0; i < sizeof req / sizeof *req; i++) {
        snap *s = ts_save(ts);
        ts_drop(ts, req[i]);
        TP(dir, "csmx_drop_%zu", i);
        csm_write(dir, ts, cfg, 0);
        if (i == 0) {
            dd_model *m = load_ok(dir);
            assert_int_equal(dd_model_config(m)->has_head0, 0);
            assert_int_equal(dd_model_tensor_count(m), CSM_USED - 1);
            dd_model_free(m);
        } else {
            expect_fail(dir, DD_EMODEL, req[i]);
        }
        ts_restore(ts, s);
    }
    {
        snap *s = ts_save(ts);
        ts_drop(ts, k_tab_bb);
        TP(dir, "csmx_notable");
        csm_write(dir, ts, cfg, 0);
        expect_fail(dir, DD_EMODEL, "embed_audio_tokens");
        ts_restore(ts, s);
    }
    static const struct { const char *name; dd_st_dtype dt; int nd; int64_t sh[3]; dd_status want; } shp[] = {
        {"depth_decoder.codebooks_head.weight", DD_ST_BF16, 3, {CQ - 1, CV, CD}, DD_EMODEL},
        {"depth_decoder.codebooks_head.weight", DD_ST_BF16, 2, {(CQ - 1) * CD, CV}, DD_EMODEL},
        {"depth_decoder.codebooks_head.weight", DD_ST_I32, 3, {CQ - 1, CD, CV}, DD_EMODEL},
        {"backbone_model.embed_tokens.embed_audio_tokens.weight", DD_ST_BF16, 2, {(CQ - 1) * CV, CI}, DD_EMODEL},
        {"backbone_model.embed_tokens.embed_audio_tokens.weight", DD_ST_BF16, 2, {CQ * CV, CD}, DD_EMODEL},
        {"lm_head.weight", DD_ST_BF16, 2, {CV, CD}, DD_EMODEL},
        {"depth_decoder.model.inputs_embeds_projector.weight", DD_ST_BF16, 2, {CI, CD}, DD_EMODEL},
        {"depth_decoder.model.layers.0.self_attn.q_proj.weight", DD_ST_BF16, 2, {CKV * CHD, CD}, DD_EMODEL},
        {"depth_decoder.model.layers.1.self_attn.o_proj.weight", DD_ST_BF16, 2, {CH * CHD, CD}, DD_EMODEL},
        {"depth_decoder.model.layers.0.mlp.down_proj.weight", DD_ST_BF16, 2, {CF, CD}, DD_EMODEL},
        {"depth_decoder.model.layers.0.mlp.gate_proj.weight", DD_ST_F32, 2, {CF, CD}, DD_EMODEL}, /* mixed */
        {"depth_decoder.model.layers.1.input_layernorm.weight", DD_ST_BF16, 1, {CD + 1}, DD_EMODEL},
        {"depth_decoder.model.norm.weight", DD_ST_U16, 1, {CD}, DD_EMODEL},
        {"depth_decoder.codebooks_head.scales", DD_ST_BF16, 3, {CQ - 1, CD, 1}, DD_EUNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof shp / sizeof *shp; i++) {
        snap *s = ts_save(ts);
        ts_put(ts, shp[i].name, shp[i].dt, shp[i].nd, shp[i].sh);
        TP(dir, "csmx_shape_%zu", i);
        csm_write(dir, ts, cfg, 0);
        char pre[160];
        expect_fail(dir, shp[i].want, prefix_of(shp[i].name, pre, sizeof pre));
        ts_restore(ts, s);
    }
    json_decref(cfg);
    ts_free(ts);
}

/* ---- fixtures written by PyTorch / transformers (when present) -------------------------------------------- */

static void test_fixtures(void **state) {
    static const char *const native[] = {"tests/fixtures/gpt_f16.safetensors", "tests/fixtures/gpt_bf16.safetensors",
                                         "tests/fixtures/gpt_q8.safetensors"};
    int found = 0;
    for (size_t i = 0; i < sizeof native / sizeof *native; i++) {
        if (access(native[i], R_OK) != 0) continue;
        found++;
        dd_model *m = load_ok(native[i]);
        dd_st_file f;
        dd_error e = {0};
        assert_int_equal(dd_st_open(&f, native[i], &e), DD_OK);
        assert_int_equal(dd_model_tensor_count(m), f.n);
        dd_st_close(&f);
        dd_model_free(m);
    }
    if (access("tests/fixtures/csm_tiny/config.json", R_OK) == 0) {
        found++;
        dd_model *m = load_ok("tests/fixtures/csm_tiny");
        const dd_config *c = dd_model_config(m);
        assert_int_equal(c->block, DD_BLOCK_LLAMA);
        assert_int_equal(c->embed_in_input_space, 1);
        assert_int_equal(dd_model_tensor_count(m), 5 + 9 * c->layers);
        dd_model_free(m);
    }
    if (!found) skip();
}

/* ---- main ------------------------------------------------------------------------------------------------- */

static int rm_rf(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return -1;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(p);
        if (!d) return -1;
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[512];
            snprintf(sub, sizeof sub, "%s/%s", p, e->d_name);
            rm_rf(sub);
        }
        closedir(d);
        return rmdir(p);
    }
    return unlink(p);
}

static int setup(void **state) {
    const char *env = getenv("DD_TEST_SEED");
    if (env) {
        g_rng = strtoull(env, NULL, 0);
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&g_rng, sizeof g_rng, 1, f) != 1) g_rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (f) fclose(f);
    }
    g_verbose = getenv("DD_TEST_VERBOSE") && atoi(getenv("DD_TEST_VERBOSE")) > 0;
    printf("test_loader: seed %" PRIu64 " (DD_TEST_SEED=%" PRIu64 " replays it)\n", g_rng, g_rng);
    snprintf(g_dir, sizeof g_dir, "/tmp/dd_loader_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            g_seed[k][w] = rnd();
            dd_model *m = NULL;
            dd_error e = {0};
            if (dd_model_synthetic(&m, k_kind[k], k_wt[w], g_seed[k][w], &e)) {
                fprintf(stderr, "synthetic %s: %s\n", k_kind[k], e.msg);
                return -1;
            }
            snprintf(g_base[k][w], sizeof g_base[k][w], "%s/base_%s_%s.safetensors", g_dir, k_kind[k],
                     dd_dtype_name(k_wt[w]));
            dd_status s = dd_model_save(m, g_base[k][w], &e);
            dd_model_free(m);
            if (s) {
                fprintf(stderr, "save: %s\n", e.msg);
                return -1;
            }
        }
    return 0;
}

static int teardown(void **state) { return rm_rf(g_dir); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_native),    cmocka_unit_test(test_container_errors),
        cmocka_unit_test(test_container_valid), cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_missing_tensors), cmocka_unit_test(test_wrong_shapes),
        cmocka_unit_test(test_tensor_rules),    cmocka_unit_test(test_config_rules),
        cmocka_unit_test(test_huge_config),     cmocka_unit_test(test_sidecar),
        cmocka_unit_test(test_misaligned),      cmocka_unit_test(test_quant_layouts),
        cmocka_unit_test(test_csm_valid),       cmocka_unit_test(test_csm_errors),
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
