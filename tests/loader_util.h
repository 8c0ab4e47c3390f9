/* What the loader test programs share (test_safetensors, test_config, test_native, test_hf_csm): the checks
 * every loaded or refused file goes through, safetensors images as editable tensor lists, and the synthetic
 * base models they start from. Data are fresh random (harness.h: seed printed, DD_TEST_SEED=<n> replays);
 * DD_TEST_VERBOSE=1 prints every error message the loader produced. Include after <cmocka.h>. */
#ifndef DD_TESTS_LOADER_UTIL_H
#define DD_TESTS_LOADER_UTIL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "model/model.h"
#include "model/safetensors.h"

/* ---- the base models: the synthetic models saved once per program run, [kind][weight type] ---------------- */

enum { GPT = 0, LLAMA = 1 };
enum { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3, Q4 = 4 };
extern const char *const lt_kind[2];     /* "tiny-gpt", "tiny-llama" */
extern const dd_dtype lt_wt[5];          /* DD_F32 .. DD_Q4 */
extern char lt_base[2][5][128];          /* their paths in th_dir */
extern uint64_t lt_base_seed[2][5];      /* the dd_model_synthetic seeds they were made from */
extern int lt_verbose;

/* cmocka group setup / teardown: the scratch directory th_dir (and, with _bases, the ten base models in it);
 * the teardown removes th_dir. Call th_seed_init first. */
int lt_setup(void **state);
int lt_setup_bases(void **state);
int lt_teardown(void **state);

#define H62 4611686018427387904LL /* 2^62 */

/* ---- expectations ---------------------------------------------------------------------------------------- */

/* dd_model_load(path) must fail with `code`, leave *out NULL, name the file at fault (`named`: path itself, or
 * e.g. the config.json beside it) and `also` when given, and return the same code when err is NULL. */
void expect_fail_(const char *file, int line, const char *path, dd_status code, const char *named, const char *also);
#define expect_fail(path, code, also) expect_fail_(__FILE__, __LINE__, path, code, path, also)
/* the message names `named` (the file at fault, e.g. the config.json beside path or a shard inside it) */
#define expect_fail_in(path, code, named, also) expect_fail_(__FILE__, __LINE__, path, code, named, also)

/* dd_model_load(path) must succeed with an empty error. */
dd_model *load_ok_(const char *file, int line, const char *path);
#define load_ok(path) load_ok_(__FILE__, __LINE__, path)

/* a and b must give bitwise identical logits (and logits0) on the same random rows (ref backend). */
void expect_same_scores(const dd_model *a, const dd_model *b);
/* dd_config fields against the native config JSON that was written. */
void expect_config_matches(const dd_config *c, const json_t *j);
/* every field of two configs equal */
void cfg_equal(const dd_config *a, const dd_config *b);

/* ---- tensor sets: a safetensors image as an editable list of tensors -------------------------------------- */

#define TS_MAX 192

typedef struct tset {
    dd_st_out t[TS_MAX];
    int n;
    void **bufs; /* data of tensors added or replaced here */
    int nbufs;
    dd_st_file src; /* the image the unedited tensors point into (zeroed when built from scratch) */
    json_t *cfg;    /* __metadata__["depthdec.config"] parsed, or NULL */
} tset;

tset *ts_new(void);
void ts_free(tset *ts);
tset *ts_load(const char *path); /* take a native file apart (in file order) */
int ts_find(const tset *ts, const char *name);
const dd_st_out *ts_get(const tset *ts, const char *name); /* fails the test when absent */
/* Replace tensor `name` (or add it, at the end or the front) with dtype dt, shape sh and fresh random data:
 * floats center +- a for float types, random bytes otherwise. Returns the data. */
void *ts_putf(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh, float center, float a,
              int front);
void *ts_put(tset *ts, const char *name, dd_st_dtype dt, int nd, const int64_t *sh); /* center 0, a 0.1 */
void ts_drop(tset *ts, const char *name);
void ts_rename(tset *ts, const char *from, const char *to);
void ts_write(const tset *ts, const char *path); /* with the config in __metadata__ (none when ts->cfg is NULL) */

/* A saved copy of the tensor list and config, to undo one edit. */
typedef struct snap {
    dd_st_out t[TS_MAX];
    int n;
    json_t *cfg;
} snap;
snap *ts_save(const tset *ts);
void ts_restore(tset *ts, snap *s); /* frees s */

/* Element count; a zero dimension makes it 0 whatever the others are (hostile shapes). */
size_t elems(int nd, const int64_t *sh);
/* Element i of a dense tensor as float32. */
float elem_f32(const dd_st_out *t, size_t i);
/* w's rows [0, nrows) are rows [r0, r0 + nrows) of tensor t (viewed as [prod(shape[:-1]), shape[-1]]). */
void check_rows(const dd_weight *w, const dd_st_out *t, int64_t r0, int64_t nrows);
void check_mat(const dd_weight *w, const dd_st_out *t);
void check_vec(const float *v, const dd_st_out *t);
/* "x.weight" / "x.scales" / "x.biases" -> "x" (what every message about that matrix contains). */
const char *prefix_of(const char *name, char *buf, size_t cap);

/* ---- files ------------------------------------------------------------------------------------------------- */

void write_st(const char *path, const dd_st_out *t, int n, const char *key, const char *val); /* one meta key */
void write_json(const char *path, const json_t *j);
void write_str(const char *path, const char *s);
void json_set(json_t *o, const char *key, const char *json); /* o[key] = JSON text; delete it when json is NULL */
void mkdir_ok(const char *p);

/* ---- edit cases: a base model with up to 4 edits, and the status loading it must give --------------------- */

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

void build_case(const mcase *c, const char *path); /* apply c's edits to its base model, write to path */
/* each case built, loaded, and checked (DD_OK: loads; else expect_fail with `also`); tag names the files */
void run_cases(const mcase *cases, size_t n, const char *tag);

#endif
