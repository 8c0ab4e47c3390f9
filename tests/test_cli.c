/* The command-line program as scripts use it (SPEC §5): exit codes (0 / 2 usage / 1 other) with one line on
 * stderr "depthdec: ..." naming the file or argument, no output file (nor "<out>.tmp.*") left after a failure,
 * --help everywhere, generate/score against the PyTorch fixtures, float16 hidden and int64 codes, reproducibility
 * from (seed, frame) (SPEC §3 consequences), info, bench --json (SPEC §6 fields) and the demo.
 * Runs DD_CLI (the binary of this build) through /bin/sh with stdout and stderr captured to files, inside a
 * mkdtemp() directory that is removed at the end. Exactness checks use --backend ref. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "npy.h"
#include "util.h" /* dd_f32_to_f16 / dd_f16_to_f32 for the float16 copy of hidden */

#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DD_CLI
#define DD_CLI "build/depthdec"
#endif
#define FX "tests/fixtures/"

static char g_dir[] = "/tmp/dd_test_cli.XXXXXX";
static char *g_out, *g_err; /* stdout and stderr of the last run() */

/* ---- helpers --------------------------------------------------------------------------------------------- */

/* A path inside the temp dir; the strings live until group teardown. */
static char **g_paths;
static size_t g_npaths;
static const char *P(const char *name) {
    char *b = malloc(strlen(g_dir) + strlen(name) + 2);
    char **np = realloc(g_paths, (g_npaths + 1) * sizeof *np);
    if (!b || !np) abort();
    sprintf(b, "%s/%s", g_dir, name);
    g_paths = np;
    g_paths[g_npaths++] = b;
    return b;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return s;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Run "DD_CLI <args>" (args formatted, shell syntax); returns the exit status, fills g_out / g_err. */
static int run(const char *fmt, ...) {
    char args[4096], cmd[5000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s >%s/stdout.txt 2>%s/stderr.txt", DD_CLI, args, g_dir, g_dir);
    int st = system(cmd);
    free(g_out);
    free(g_err);
    g_out = slurp(P("stdout.txt"), NULL);
    g_err = slurp(P("stderr.txt"), NULL);
    assert_non_null(g_out);
    assert_non_null(g_err);
    if (st == -1 || !WIFEXITED(st)) fail_msg("'%s' did not exit normally (status %d)", cmd, st);
    return WEXITSTATUS(st);
}

/* Run a command that must succeed (exit 0). */
static void run_ok(const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = run("%s", args);
    if (rc != 0) fail_msg("depthdec %s: exit %d, stderr: %s", args, rc, g_err);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* No "*.tmp.*" file anywhere in the temp dir's top level (the outputs' atomic-write temp names). */
static void assert_no_tmp_files(void) {
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) fail_msg("left behind: %s/%s", g_dir, e->d_name);
    closedir(d);
}

/* The failing run's contract: exit code `want_rc`, stderr is exactly one line starting "depthdec: " that contains
 * every needle (NULL-terminated list), and `out` (may be NULL) was not written. */
static void expect_fail(int want_rc, const char *out, const char *const *needles, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (out) remove(out);
    int rc = run("%s", args);
    if (rc != want_rc) fail_msg("depthdec %s: exit %d, want %d; stderr: %s", args, rc, want_rc, g_err);
    if (strncmp(g_err, "depthdec: ", 10) != 0) fail_msg("depthdec %s: stderr does not start 'depthdec: ': %s", args, g_err);
    size_t len = strlen(g_err);
    char *nl = strchr(g_err, '\n');
    if (len == 0 || !nl || nl != g_err + len - 1) fail_msg("depthdec %s: stderr is not one line: %s", args, g_err);
    for (int i = 0; needles[i]; i++)
        if (!strstr(g_err, needles[i])) fail_msg("depthdec %s: stderr lacks '%s': %s", args, needles[i], g_err);
    if (out && exists(out)) fail_msg("depthdec %s: failed but wrote %s", args, out);
    if (g_out && *g_out) fail_msg("depthdec %s: failed but printed on stdout: %s", args, g_out); /* no partial output */
    assert_no_tmp_files();
}
#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void write_npy(const char *path, dd_npy_dtype t, int ndim, const int64_t *shape, const void *data) {
    dd_error e;
    if (dd_npy_write(path, t, ndim, shape, data, &e)) fail_msg("%s", e.msg);
}

/* Read a .npy that must have dtype t and the given shape; returns its data (free()). */
static void *read_npy(const char *path, dd_npy_dtype t, int ndim, const int64_t *shape) {
    dd_npy a;
    dd_error e;
    if (dd_npy_read(path, &a, &e)) fail_msg("%s", e.msg);
    if (a.dtype != t || a.ndim != ndim) fail_msg("%s: dtype %d ndim %d, want %d / %d", path, a.dtype, a.ndim, t, ndim);
    for (int i = 0; i < ndim; i++)
        if (a.shape[i] != shape[i]) fail_msg("%s: dim %d is %lld, want %lld", path, i, (long long)a.shape[i],
                                             (long long)shape[i]);
    return a.data;
}

/* Deterministic hidden states, uniform with unit variance. */
static float *make_hidden(int n, int dim, uint64_t seed) {
    float *h = malloc((size_t)n * dim * sizeof *h);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < (size_t)n * dim; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        h[i] = (float)((double)(s >> 11) * 0x1p-53 * 3.4641016 - 1.7320508);
    }
    return h;
}

static int equal_i32(const int32_t *a, const int32_t *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* Models: the committed fixtures, and tiny-gpt / tiny-llama exported by the CLI in group setup. */
typedef struct fixture {
    const char *name, *model;
} fixture;
static const fixture FIXTURES[] = {
    {"gpt_bf16", FX "gpt_bf16.safetensors"},
    {"gpt_f16", FX "gpt_f16.safetensors"},
    {"gpt_q8", FX "gpt_q8.safetensors"},
    {"csm_tiny", FX "csm_tiny"},
};
#define NFIX (sizeof FIXTURES / sizeof *FIXTURES)
#define FQ 8  /* fixture levels */
#define FV 64 /* fixture codebook */
#define FI 96 /* fixture input_dim */
#define FN 6  /* fixture rows */
#define TI 128 /* tiny-gpt / tiny-llama input_dim (Q 8, V 64 as the fixtures) */

static char g_tiny[600], g_llama[600], g_nohead0[600];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

static int group_setup(void **state) {
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny_gpt.safetensors", g_dir);
    snprintf(g_llama, sizeof g_llama, "%s/tiny_llama.safetensors", g_dir);
    snprintf(g_nohead0, sizeof g_nohead0, "%s/nohead0.safetensors", g_dir);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "%s export --synthetic tiny-gpt --weights f16 --out %s && "
                              "%s export --synthetic tiny-llama --weights f16 --out %s", DD_CLI, g_tiny, DD_CLI, g_llama);
    if (system(cmd) != 0) return -1;
    /* The synthetic models all have head0: rename the tensor in the header (same length) so the loader ignores
     * it, which gives a model without head0 (c0 must be given, no --logits0). */
    size_t n;
    char *b = slurp(g_tiny, &n);
    if (!b || n < 8) return -1;
    uint64_t hl;
    memcpy(&hl, b, 8);
    char *hit = memmem(b + 8, hl, "\"head0.weight\"", 14);
    if (!hit) return -1;
    hit[1] = 'x';
    FILE *f = fopen(g_nohead0, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    free(b);
    return ok ? 0 : -1;
}

static int group_teardown(void **state) {
    free(g_out);
    free(g_err);
    g_out = g_err = NULL;
    for (size_t i = 0; i < g_npaths; i++) free(g_paths[i]);
    free(g_paths);
    return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- exit codes and messages ----------------------------------------------------------------------------- */

static void test_usage_errors(void **state) {
    const char *O = P("u_out.npy"), *H = FX "gpt_bf16_hidden.npy", *M = FX "gpt_bf16.safetensors";
    const char *C = FX "gpt_bf16_codes.npy";
    char base[2000];
    snprintf(base, sizeof base, "generate --model %s --hidden %s --out %s --backend ref", M, H, O);
    expect_fail(2, NULL, NEEDLES("command"), "");
    expect_fail(2, NULL, NEEDLES("frobnicate"), "frobnicate");
    expect_fail(2, O, NEEDLES("--bogus"), "%s --bogus", base);
    expect_fail(2, O, NEEDLES("--bogus"), "%s --bogus 3", base);
    expect_fail(2, O, NEEDLES("--out"), "generate --model %s --hidden %s", M, H);
    expect_fail(2, O, NEEDLES("--hidden"), "generate --model %s --out %s", M, O);
    expect_fail(2, O, NEEDLES("--codes"), "score --model %s --hidden %s --out %s", M, H, O);
    expect_fail(2, O, NEEDLES("--seed"), "%s --seed", base);
    expect_fail(2, O, NEEDLES("--temperature", "-1"), "%s --temperature -1", base);
    expect_fail(2, O, NEEDLES("--temperature", "nan"), "%s --temperature nan", base);
    expect_fail(2, O, NEEDLES("--top-k", "-3"), "%s --top-k -3", base);
    expect_fail(2, O, NEEDLES("--backend", "foo"), "generate --model %s --hidden %s --out %s --backend foo", M, H, O);
    expect_fail(2, O, NEEDLES("--backend", "more than once"), "%s --backend cpu", base);
    expect_fail(2, O, NEEDLES("--seed", "abc"), "%s --seed abc", base);
    expect_fail(2, O, NEEDLES("--frame", "-1"), "%s --frame -1", base);
    expect_fail(2, O, NEEDLES("--batch", "0"), "%s --batch 0", base);
    expect_fail(2, O, NEEDLES("--top-k", "1x"), "%s --top-k 1x", base);
    expect_fail(2, O, NEEDLES("--backend", "foo"), "score --model %s --hidden %s --codes %s --out %s --backend foo", M,
                H, C, O);
    expect_fail(2, O, NEEDLES("--weights", "q3"), "export --synthetic tiny-gpt --weights q3 --out %s", O);
    expect_fail(2, NULL, NEEDLES("--weights", "q3"), "bench --synthetic gpt --weights q3");
    expect_fail(2, NULL, NEEDLES("--frames", "0"), "bench --model %s --frames 0 --backend ref", g_tiny);
    expect_fail(2, NULL, NEEDLES("--frames", "0"), "demo --frames 0 --backend ref");
    expect_fail(2, NULL, NEEDLES("--synthetic", "tiny-gpt"), "bench --synthetic tiny-gpt");
    expect_fail(2, NULL, NEEDLES("--budget", "80,x"), "bench --capacity --model %s --budget 80,x", g_tiny);
    expect_fail(2, NULL, NEEDLES("--budget", "0"), "bench --capacity --model %s --budget 0", g_tiny);
    expect_fail(2, NULL, NEEDLES("--capacity", "--batch"), "bench --capacity --model %s --batch 4", g_tiny);
    expect_fail(2, NULL, NEEDLES("--max-batch", "--capacity"), "bench --model %s --max-batch 4", g_tiny);
    expect_fail(2, NULL, NEEDLES("--max-batch", "0"), "bench --capacity --model %s --max-batch 0", g_tiny);
    expect_fail(2, NULL, NEEDLES("info"), "info");
    expect_fail(2, NULL, NEEDLES("--bits"), "quantize %s %s", M, P("q.safetensors"));
}

static void test_runtime_errors(void **state) {
    const char *O = P("r_out.npy"), *L0 = P("r_l0.npy"), *M = FX "gpt_bf16.safetensors";
    const char *H = FX "gpt_bf16_hidden.npy", *C = FX "gpt_bf16_codes.npy";
    float *h = make_hidden(FN, FI, 1);
    int32_t codes[FN * FQ];
    for (int i = 0; i < FN * FQ; i++) codes[i] = (i * 7) % FV;

    /* model files */
    expect_fail(1, O, NEEDLES("nope.safetensors"), "generate --model %s --hidden %s --out %s", P("nope.safetensors"),
                H, O);
    size_t n;
    char *b = slurp(M, &n);
    assert_non_null(b);
    spit(P("trunc.safetensors"), b, n / 2);
    free(b);
    expect_fail(1, O, NEEDLES("trunc.safetensors"), "generate --model %s --hidden %s --out %s --backend ref",
                P("trunc.safetensors"), H, O);
    expect_fail(1, O, NEEDLES("trunc.safetensors"), "score --model %s --hidden %s --codes %s --out %s",
                P("trunc.safetensors"), H, C, O);
    expect_fail(1, NULL, NEEDLES("trunc.safetensors"), "info %s", P("trunc.safetensors"));
    expect_fail(1, NULL, NEEDLES("nope.safetensors"), "info %s", P("nope.safetensors"));

    /* hidden: missing, wrong input_dim, NaN (the row is the file's, also when it is not in the first batch) */
    expect_fail(1, O, NEEDLES("missing_hidden.npy"), "generate --model %s --hidden %s --out %s", M,
                P("missing_hidden.npy"), O);
    write_npy(P("h95.npy"), DD_NPY_F32, 2, (int64_t[]){2, FI - 1}, h);
    expect_fail(1, O, NEEDLES("h95.npy"), "generate --model %s --hidden %s --out %s --backend ref", M, P("h95.npy"), O);
    expect_fail(1, O, NEEDLES("h95.npy"), "score --model %s --hidden %s --codes %s --out %s --backend ref", M,
                P("h95.npy"), C, O);
    float hn[FN * FI];
    memcpy(hn, h, sizeof hn);
    hn[3 * FI + 5] = NAN;
    write_npy(P("hnan.npy"), DD_NPY_F32, 2, (int64_t[]){FN, FI}, hn);
    expect_fail(1, O, NEEDLES("hnan.npy", "row 3"), "generate --model %s --hidden %s --out %s --backend ref", M,
                P("hnan.npy"), O);
    expect_fail(1, O, NEEDLES("hnan.npy", "row 3"), "generate --model %s --hidden %s --out %s --backend ref --batch 2",
                M, P("hnan.npy"), O);
    expect_fail(1, O, NEEDLES("hnan.npy", "row 3"), "score --model %s --hidden %s --codes %s --out %s --backend ref",
                M, P("hnan.npy"), C, O);
    hn[3 * FI + 5] = INFINITY;
    write_npy(P("hinf.npy"), DD_NPY_F32, 2, (int64_t[]){FN, FI}, hn);
    expect_fail(1, O, NEEDLES("hinf.npy", "row 3"), "generate --model %s --hidden %s --out %s --backend ref", M,
                P("hinf.npy"), O);
    /* fortran order: a C-order file with the header flag flipped (same length) */
    write_npy(P("hfort.npy"), DD_NPY_F32, 2, (int64_t[]){FN, FI}, h);
    b = slurp(P("hfort.npy"), &n);
    char *fo = strstr(b + 10, "False");
    assert_non_null(fo);
    memcpy(fo, " True", 5);
    spit(P("hfort.npy"), b, n);
    free(b);
    expect_fail(1, O, NEEDLES("hfort.npy", "fortran"), "generate --model %s --hidden %s --out %s --backend ref", M,
                P("hfort.npy"), O);
    /* a dtype that is not allowed for hidden */
    write_npy(P("hint.npy"), DD_NPY_I32, 2, (int64_t[]){FN, FQ}, codes);
    expect_fail(1, O, NEEDLES("hint.npy"), "generate --model %s --hidden %s --out %s --backend ref", M, P("hint.npy"),
                O);

    /* codes: >= V and negative (row / level / value named), wrong shape, int64 beyond int32, wrong dtype */
    int32_t cb[FN * FQ];
    memcpy(cb, codes, sizeof cb);
    cb[2 * FQ + 5] = FV;
    write_npy(P("cbig.npy"), DD_NPY_I32, 2, (int64_t[]){FN, FQ}, cb);
    expect_fail(1, O, NEEDLES("cbig.npy", "row 2", "level 5", "64"),
                "score --model %s --hidden %s --codes %s --out %s --backend ref", M, H, P("cbig.npy"), O);
    memcpy(cb, codes, sizeof cb);
    cb[1 * FQ + 0] = -5;
    write_npy(P("cneg.npy"), DD_NPY_I32, 2, (int64_t[]){FN, FQ}, cb);
    expect_fail(1, O, NEEDLES("cneg.npy", "row 1", "level 0", "-5"),
                "score --model %s --hidden %s --codes %s --out %s --backend ref --logits0 %s", M, H, P("cneg.npy"), O,
                L0);
    assert_false(exists(L0));
    write_npy(P("cshort.npy"), DD_NPY_I32, 2, (int64_t[]){FN, FQ - 1}, codes);
    expect_fail(1, O, NEEDLES("cshort.npy"), "score --model %s --hidden %s --codes %s --out %s --backend ref", M, H,
                P("cshort.npy"), O);
    int64_t c64[FN * FQ];
    for (int i = 0; i < FN * FQ; i++) c64[i] = codes[i];
    c64[9] = (int64_t)1 << 40;
    write_npy(P("c64big.npy"), DD_NPY_I64, 2, (int64_t[]){FN, FQ}, c64);
    expect_fail(1, O, NEEDLES("c64big.npy", "1099511627776"),
                "score --model %s --hidden %s --codes %s --out %s --backend ref", M, H, P("c64big.npy"), O);
    write_npy(P("cf32.npy"), DD_NPY_F32, 2, (int64_t[]){FN, FQ}, h);
    expect_fail(1, O, NEEDLES("cf32.npy"), "score --model %s --hidden %s --codes %s --out %s --backend ref", M, H,
                P("cf32.npy"), O);
    expect_fail(1, O, NEEDLES("missing_codes.npy"), "score --model %s --hidden %s --codes %s --out %s", M, H,
                P("missing_codes.npy"), O);

    /* c0: wrong length, out of range (row and value named), int64 beyond int32 */
    int32_t c0[FN] = {1, 2, 3, 4, 5, 6};
    write_npy(P("c0short.npy"), DD_NPY_I32, 1, (int64_t[]){FN - 1}, c0);
    expect_fail(1, O, NEEDLES("c0short.npy"), "generate --model %s --hidden %s --c0 %s --out %s --backend ref", M, H,
                P("c0short.npy"), O);
    write_npy(P("c02d.npy"), DD_NPY_I32, 2, (int64_t[]){FN, 1}, c0);
    expect_fail(1, O, NEEDLES("c02d.npy"), "generate --model %s --hidden %s --c0 %s --out %s --backend ref", M, H,
                P("c02d.npy"), O);
    c0[4] = FV;
    write_npy(P("c0big.npy"), DD_NPY_I32, 1, (int64_t[]){FN}, c0);
    expect_fail(1, O, NEEDLES("c0big.npy", "row 4", "64"),
                "generate --model %s --hidden %s --c0 %s --out %s --backend ref --batch 4", M, H, P("c0big.npy"), O);
    int64_t c064[FN] = {1, 2, 3, -((int64_t)1 << 40), 5, 6};
    write_npy(P("c064big.npy"), DD_NPY_I64, 1, (int64_t[]){FN}, c064);
    expect_fail(1, O, NEEDLES("c064big.npy"), "generate --model %s --hidden %s --c0 %s --out %s --backend ref", M, H,
                P("c064big.npy"), O);

    /* a model without head0: generate needs --c0, score cannot write --logits0 (and writes neither file) */
    float *ht = make_hidden(4, TI, 2);
    int32_t ct[4 * FQ];
    for (int i = 0; i < 4 * FQ; i++) ct[i] = (i * 5) % FV;
    write_npy(P("ht.npy"), DD_NPY_F32, 2, (int64_t[]){4, TI}, ht);
    write_npy(P("ct.npy"), DD_NPY_I32, 2, (int64_t[]){4, FQ}, ct);
    expect_fail(1, O, NEEDLES("nohead0.safetensors"), "generate --model %s --hidden %s --out %s --backend ref",
                g_nohead0, P("ht.npy"), O);
    expect_fail(1, O, NEEDLES("nohead0.safetensors", "logits0"),
                "score --model %s --hidden %s --codes %s --out %s --logits0 %s --backend ref", g_nohead0, P("ht.npy"),
                P("ct.npy"), O, L0);
    assert_false(exists(L0));
    /* ... while the same model with c0 given, and score without --logits0, work */
    write_npy(P("c0t.npy"), DD_NPY_I32, 1, (int64_t[]){4}, ct);
    run_ok("generate --model %s --hidden %s --c0 %s --out %s --backend ref", g_nohead0, P("ht.npy"), P("c0t.npy"), O);
    run_ok("score --model %s --hidden %s --codes %s --out %s --backend ref", g_nohead0, P("ht.npy"), P("ct.npy"), O);
    remove(O);

    /* outputs that cannot be written; score's two outputs are all or nothing */
    const char *bad = P("no_such_dir/x.npy");
    expect_fail(1, NULL, NEEDLES("no_such_dir/x.npy"), "generate --model %s --hidden %s --out %s --backend ref", M, H,
                bad);
    expect_fail(1, L0, NEEDLES("no_such_dir/x.npy"),
                "score --model %s --hidden %s --codes %s --out %s --logits0 %s --backend ref", M, H, C, bad, L0);
    expect_fail(1, O, NEEDLES("no_such_dir/x.npy"),
                "score --model %s --hidden %s --codes %s --out %s --logits0 %s --backend ref", M, H, C, O, bad);
    expect_fail(1, O, NEEDLES("no_such_dir/x.safetensors"), "export --synthetic tiny-gpt --out %s",
                P("no_such_dir/x.safetensors"));
    assert_false(exists(P("no_such_dir")));
    free(h);
    free(ht);
}

/* ---- help ------------------------------------------------------------------------------------------------ */

static void test_help(void **state) {
    static const char *cmds[] = {"info", "demo", "generate", "score", "bench", "export", "quantize", "quality"};
    assert_int_equal(run("--help"), 0);
    assert_non_null(strstr(g_out, "usage: depthdec"));
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) assert_non_null(strstr(g_out, cmds[i]));
    assert_string_equal(g_err, "");
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        if (run("%s --help", cmds[i]) != 0) fail_msg("%s --help: exit not 0 (%s)", cmds[i], g_err);
        char want[64];
        snprintf(want, sizeof want, "usage: depthdec %s", cmds[i]);
        if (!strstr(g_out, want)) fail_msg("%s --help: stdout lacks '%s': %s", cmds[i], want, g_out);
        assert_string_equal(g_err, "");
    }
}

/* ---- fixtures: greedy codes and teacher-forced logits ---------------------------------------------------- */

static void test_fixture_greedy(void **state) {
    const char *O = P("g.npy");
    for (size_t f = 0; f < NFIX; f++) {
        char hp[256], gp[256];
        snprintf(hp, sizeof hp, FX "%s_hidden.npy", FIXTURES[f].name);
        snprintf(gp, sizeof gp, FX "%s_greedy.npy", FIXTURES[f].name);
        int32_t *ref = read_npy(gp, DD_NPY_I32, 2, (int64_t[]){FN, FQ});
        /* ref exactly; auto (the fastest backend built) too: the fixtures keep top-2 gaps > 1e-3 * max|logit| */
        for (int be = 0; be < 2; be++) {
            run_ok("generate --model %s --hidden %s --out %s --greedy%s", FIXTURES[f].model, hp, O,
                   be == 0 ? " --backend ref" : "");
            int32_t *got = read_npy(O, DD_NPY_I32, 2, (int64_t[]){FN, FQ});
            if (!equal_i32(got, ref, FN * FQ)) fail_msg("%s: greedy codes differ (%s)", FIXTURES[f].name,
                                                        be == 0 ? "ref" : "auto");
            free(got);
        }
        free(ref);
    }
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]));
    return m;
}

static void test_fixture_score(void **state) {
    const char *O = P("s.npy"), *L0 = P("s0.npy"), *O64 = P("s64.npy"), *C64 = P("codes64.npy");
    const size_t nl = (size_t)FN * (FQ - 1) * FV, n0 = (size_t)FN * FV;
    for (size_t f = 0; f < NFIX; f++) {
        const char *nm = FIXTURES[f].name;
        char hp[256], cp[256], lp[256], l0p[256];
        snprintf(hp, sizeof hp, FX "%s_hidden.npy", nm);
        snprintf(cp, sizeof cp, FX "%s_codes.npy", nm);
        snprintf(lp, sizeof lp, FX "%s_logits.npy", nm);
        snprintf(l0p, sizeof l0p, FX "%s_logits0.npy", nm);
        float *ref = read_npy(lp, DD_NPY_F32, 3, (int64_t[]){FN, FQ - 1, FV});
        float *ref0 = read_npy(l0p, DD_NPY_F32, 2, (int64_t[]){FN, FV});
        run_ok("score --model %s --hidden %s --codes %s --out %s --logits0 %s --backend ref", FIXTURES[f].model, hp,
               cp, O, L0);
        float *got = read_npy(O, DD_NPY_F32, 3, (int64_t[]){FN, FQ - 1, FV});
        float *got0 = read_npy(L0, DD_NPY_F32, 2, (int64_t[]){FN, FV});
        double err = max_diff(got, ref, nl), err0 = max_diff(got0, ref0, n0);
        if (!(err <= 1e-4 * max_abs(ref, nl))) fail_msg("%s: logits err %g, max|ref| %g", nm, err, max_abs(ref, nl));
        if (!(err0 <= 1e-4 * max_abs(ref0, n0)))
            fail_msg("%s: logits0 err %g, max|ref| %g", nm, err0, max_abs(ref0, n0));
        /* int64 codes: the same logits, bit for bit */
        int32_t *c = read_npy(cp, DD_NPY_I32, 2, (int64_t[]){FN, FQ});
        int64_t c64[FN * FQ];
        for (int i = 0; i < FN * FQ; i++) c64[i] = c[i];
        write_npy(C64, DD_NPY_I64, 2, (int64_t[]){FN, FQ}, c64);
        run_ok("score --model %s --hidden %s --codes %s --out %s --backend ref", FIXTURES[f].model, hp, C64, O64);
        float *g64 = read_npy(O64, DD_NPY_F32, 3, (int64_t[]){FN, FQ - 1, FV});
        assert_memory_equal(g64, got, nl * sizeof *got);
        free(ref);
        free(ref0);
        free(got);
        free(got0);
        free(c);
        free(g64);
    }
}

/* float16 hidden = float32 hidden holding the same (rounded) values; int64 c0 = int32 c0. */
static void test_f16_hidden_int64_c0(void **state) {
    const char *models[] = {g_tiny, FX "csm_tiny"};
    const int dims[] = {TI, FI};
    const int N = 5;
    for (int mi = 0; mi < 2; mi++) {
        int I = dims[mi];
        float *h = make_hidden(N, I, 30 + mi);
        uint16_t *h16 = malloc((size_t)N * I * sizeof *h16);
        for (int i = 0; i < N * I; i++) {
            h16[i] = dd_f32_to_f16(h[i]);
            h[i] = dd_f16_to_f32(h16[i]);
        }
        write_npy(P("h16.npy"), DD_NPY_F16, 2, (int64_t[]){N, I}, h16);
        write_npy(P("h16as32.npy"), DD_NPY_F32, 2, (int64_t[]){N, I}, h);
        run_ok("generate --model %s --hidden %s --out %s --seed 5 --frame 2 --backend ref", models[mi], P("h16.npy"),
               P("a.npy"));
        run_ok("generate --model %s --hidden %s --out %s --seed 5 --frame 2 --backend ref", models[mi],
               P("h16as32.npy"), P("b.npy"));
        int32_t *a = read_npy(P("a.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        int32_t *b = read_npy(P("b.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        assert_true(equal_i32(a, b, (size_t)N * FQ));
        free(a);
        free(b);
        run_ok("generate --model %s --hidden %s --out %s --greedy --backend ref", models[mi], P("h16.npy"), P("a.npy"));
        run_ok("generate --model %s --hidden %s --out %s --greedy --backend ref", models[mi], P("h16as32.npy"),
               P("b.npy"));
        a = read_npy(P("a.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        b = read_npy(P("b.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        assert_true(equal_i32(a, b, (size_t)N * FQ));
        free(a);
        free(b);
        /* c0 as int32 and int64 */
        int32_t c0[5] = {0, 63, 17, 5, 40};
        int64_t c064[5] = {0, 63, 17, 5, 40};
        write_npy(P("c0_32.npy"), DD_NPY_I32, 1, (int64_t[]){N}, c0);
        write_npy(P("c0_64.npy"), DD_NPY_I64, 1, (int64_t[]){N}, c064);
        run_ok("generate --model %s --hidden %s --c0 %s --out %s --seed 9 --backend ref", models[mi], P("h16.npy"),
               P("c0_32.npy"), P("a.npy"));
        run_ok("generate --model %s --hidden %s --c0 %s --out %s --seed 9 --backend ref", models[mi], P("h16.npy"),
               P("c0_64.npy"), P("b.npy"));
        a = read_npy(P("a.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        b = read_npy(P("b.npy"), DD_NPY_I32, 2, (int64_t[]){N, FQ});
        assert_true(equal_i32(a, b, (size_t)N * FQ));
        for (int r = 0; r < N; r++) assert_int_equal(a[r * FQ], c0[r]);
        free(a);
        free(b);
        free(h);
        free(h16);
    }
}

/* ---- reproducibility (SPEC §3 consequences) -------------------------------------------------------------- */

static int32_t *gen(const char *model, const char *hidden, const char *extra, int n) {
    run_ok("generate --model %s --hidden %s --out %s --backend ref %s", model, hidden, P("rep.npy"), extra);
    int32_t *c = read_npy(P("rep.npy"), DD_NPY_I32, 2, (int64_t[]){n, FQ});
    for (int i = 0; i < n * FQ; i++)
        if (c[i] < 0 || c[i] >= FV) fail_msg("code %d out of range at %d", c[i], i);
    return c;
}

static void test_reproducible(void **state) {
    const char *models[] = {g_tiny, g_llama, FX "csm_tiny"};
    const int dims[] = {TI, TI, FI};
    enum { N = 8 };
    for (int mi = 0; mi < 3; mi++) {
        const char *M = models[mi];
        int I = dims[mi];
        float *h = make_hidden(N, I, 40 + mi);
        write_npy(P("hr.npy"), DD_NPY_F32, 2, (int64_t[]){N, I}, h);
        const char *S = "--seed 1234567890123 --frame 100 --temperature 0.9 --top-k 50";
        int32_t *a = gen(M, P("hr.npy"), S, N);
        int32_t *b = gen(M, P("hr.npy"), S, N);
        assert_true(equal_i32(a, b, N * FQ)); /* same seed, same frame: the same codes */
        free(b);
        /* row n of the run = a one-row run at frame 100 + n */
        for (int r = 0; r < N; r++) {
            write_npy(P("h1.npy"), DD_NPY_F32, 2, (int64_t[]){1, I}, h + (size_t)r * I);
            char ex[200];
            snprintf(ex, sizeof ex, "--seed 1234567890123 --frame %d", 100 + r);
            int32_t *one = gen(M, P("h1.npy"), ex, 1);
            if (!equal_i32(one, a + r * FQ, FQ)) fail_msg("model %s row %d differs from its one-row run", M, r);
            free(one);
        }
        /* the defaults are T 0.9, K 50 */
        b = gen(M, P("hr.npy"), "--seed 1234567890123 --frame 100", N);
        assert_true(equal_i32(a, b, N * FQ));
        free(b);
        /* batch size does not matter (odd tails too) */
        for (int bi = 0; bi < 3; bi++) {
            char ex[200];
            snprintf(ex, sizeof ex, "%s --batch %d", S, (int[]){1, 3, 64}[bi]);
            b = gen(M, P("hr.npy"), ex, N);
            if (!equal_i32(a, b, N * FQ)) fail_msg("model %s: --batch %d changes the codes", M, (int[]){1, 3, 64}[bi]);
            free(b);
        }
        /* another seed, another frame: different codes (8 rows x 8 levels at T 0.9, K 50) */
        b = gen(M, P("hr.npy"), "--seed 1234567890124 --frame 100", N);
        int diff = 0;
        for (int i = 0; i < N * FQ; i++) diff += a[i] != b[i];
        if (diff < N) fail_msg("model %s: another seed changes only %d of %d codes", M, diff, N * FQ);
        free(b);
        b = gen(M, P("hr.npy"), "--seed 1234567890123 --frame 101", N);
        diff = 0;
        for (int i = 0; i < N * FQ; i++) diff += a[i] != b[i];
        if (diff < N) fail_msg("model %s: another frame changes only %d of %d codes", M, diff, N * FQ);
        free(b);
        /* --c0 is honored */
        int32_t c0[N];
        for (int r = 0; r < N; r++) c0[r] = (r * 13 + 7) % FV;
        write_npy(P("c0r.npy"), DD_NPY_I32, 1, (int64_t[]){N}, c0);
        char ex[600];
        snprintf(ex, sizeof ex, "%s --c0 %s", S, P("c0r.npy"));
        b = gen(M, P("hr.npy"), ex, N);
        for (int r = 0; r < N; r++) assert_int_equal(b[r * FQ], c0[r]);
        free(b);
        /* --top-k 1 (any temperature) = --greedy = --temperature 0 */
        int32_t *g = gen(M, P("hr.npy"), "--greedy --seed 3", N);
        b = gen(M, P("hr.npy"), "--top-k 1 --seed 99 --frame 7", N);
        assert_true(equal_i32(g, b, N * FQ));
        free(b);
        b = gen(M, P("hr.npy"), "--temperature 0", N);
        assert_true(equal_i32(g, b, N * FQ));
        free(b);
        free(g);
        free(a);
        free(h);
    }
}

/* ---- info, bench, demo ----------------------------------------------------------------------------------- */

/* Qwen3-TTS (HF directory): greedy codes given c0 and the talker's next input embedding, as the fixtures (made by
 * qwen-tts); a model without talker-space tables refuses --next-embed before writing anything */
static void test_qwen3_next_embed(void **state) {
    (void)state;
    const char *O = P("q.npy"), *E = P("qe.npy"), *C0 = P("qc0.npy");
    int32_t *greedy = read_npy(FX "qwen3tts_tiny_greedy.npy", DD_NPY_I32, 2, (int64_t[]){6, 8}), c0[6];
    for (int i = 0; i < 6; i++) c0[i] = greedy[i * 8];
    dd_error e;
    assert_int_equal(dd_npy_write(C0, DD_NPY_I32, 1, (int64_t[]){6}, c0, &e), DD_OK);
    run_ok("generate --model " FX "qwen3tts_tiny --hidden " FX "qwen3tts_tiny_hidden.npy --c0 %s --greedy --out %s "
           "--next-embed %s", C0, O, E);
    int32_t *got = read_npy(O, DD_NPY_I32, 2, (int64_t[]){6, 8});
    float *emb = read_npy(E, DD_NPY_F32, 2, (int64_t[]){6, 48}),
          *want = read_npy(FX "qwen3tts_tiny_next_embed.npy", DD_NPY_F32, 2, (int64_t[]){6, 48});
    assert_true(equal_i32(got, greedy, 48));
    assert_true(max_diff(emb, want, 6 * 48) <= 1e-6 * max_abs(want, 6 * 48));
    assert_non_null(strstr(g_err, "next input embeddings"));
    remove(O);
    remove(E);
    assert_int_not_equal(run("generate --model " FX "gpt_bf16.safetensors --hidden " FX "gpt_bf16_hidden.npy --out %s "
                             "--next-embed %s", O, E), 0);
    assert_non_null(strstr(g_err, "--next-embed"));
    assert_false(exists(O) || exists(E));
    free(got), free(emb), free(want), free(greedy);
}

/* Moshi (transformers' MoshiForConditionalGeneration directory): greedy codes given hidden + --text equal the
 * fixture; score with --text and --logits0 matches the fixture's logits (level 0 and 1..Q-1); --text is required
 * for Moshi and refused for others, out-of-range tokens name the file row, and nothing is written on error */
static void test_moshi_text(void **state) {
    (void)state;
    const char *O = P("m.npy"), *L = P("ml.npy"), *L0 = P("ml0.npy"), *T = P("mt.npy");
    run_ok("generate --model " FX "moshi_tiny --hidden " FX "moshi_tiny_hidden.npy --text " FX "moshi_tiny_text.npy "
           "--greedy --out %s", O);
    int32_t *got = read_npy(O, DD_NPY_I32, 2, (int64_t[]){6, 8});
    int32_t *greedy = read_npy(FX "moshi_tiny_greedy.npy", DD_NPY_I32, 2, (int64_t[]){6, 8});
    assert_true(equal_i32(got, greedy, 48));
    run_ok("score --model " FX "moshi_tiny --hidden " FX "moshi_tiny_hidden.npy --codes " FX "moshi_tiny_codes.npy "
           "--text " FX "moshi_tiny_text.npy --out %s --logits0 %s", L, L0);
    float *lg = read_npy(L, DD_NPY_F32, 3, (int64_t[]){6, 7, 64}), *l0 = read_npy(L0, DD_NPY_F32, 2, (int64_t[]){6, 64});
    float *want = read_npy(FX "moshi_tiny_logits.npy", DD_NPY_F32, 3, (int64_t[]){6, 8, 64});
    float w0[6 * 64], w1[6 * 7 * 64];
    for (int r = 0; r < 6; r++) {
        memcpy(w0 + r * 64, want + r * 8 * 64, 64 * sizeof(float));
        memcpy(w1 + r * 7 * 64, want + (r * 8 + 1) * 64, 7 * 64 * sizeof(float));
    }
    assert_true(max_diff(lg, w1, 6 * 7 * 64) <= 1e-4 * max_abs(w1, 6 * 7 * 64));
    assert_true(max_diff(l0, w0, 6 * 64) <= 1e-4 * max_abs(w0, 6 * 64));
    remove(O), remove(L), remove(L0);
    /* --text missing, out of range, or given to a model without text: refused, nothing written */
    assert_int_not_equal(run("generate --model " FX "moshi_tiny --hidden " FX "moshi_tiny_hidden.npy --out %s", O), 0);
    assert_non_null(strstr(g_err, "--text"));
    dd_error e;
    int32_t bad[6] = {0, 1, 2, 41, 4, 5};
    assert_int_equal(dd_npy_write(T, DD_NPY_I32, 1, (int64_t[]){6}, bad, &e), DD_OK);
    assert_int_not_equal(run("generate --model " FX "moshi_tiny --hidden " FX "moshi_tiny_hidden.npy --text %s --out %s",
                             T, O), 0);
    assert_non_null(strstr(g_err, "row 3: token 41 outside [0, 41)"));
    assert_int_not_equal(run("generate --model " FX "gpt_bf16.safetensors --hidden " FX "gpt_bf16_hidden.npy --text %s "
                             "--out %s", T, O), 0);
    assert_non_null(strstr(g_err, "takes no text"));
    assert_false(exists(O));
    remove(T);
    free(got), free(greedy), free(lg), free(l0), free(want);
}

static void test_info(void **state) {
    run_ok("info %s", g_tiny);
    const char *want[] = {"block        gpt", "levels       8", "codebook     64", "input_dim    128",
                          "tensors      32", "head0        yes", "weights      f16"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(g_out, want[i])) fail_msg("info: lacks '%s':\n%s", want[i], g_out);
    run_ok("info %s", FX "csm_tiny");
    assert_non_null(strstr(g_out, "block        llama"));
    assert_non_null(strstr(g_out, "levels       8"));
    assert_non_null(strstr(g_out, "codebook     64"));
    assert_non_null(strstr(g_out, "tensors "));
    run_ok("info %s", FX "gpt_q8.safetensors");
    assert_non_null(strstr(g_out, "8-bit"));
    run_ok("info %s", g_nohead0);
    assert_non_null(strstr(g_out, "head0        no"));
    assert_non_null(strstr(g_out, "tensors      31"));
}

static void test_bench_json(void **state) {
    const char *J = P("bench.json");
    /* the GPT dims on cpu: one pass's working set (~105 MB) is measured as well (a tiny model's is under 1 MiB) */
    run_ok("bench --synthetic gpt --frames 1 --backend cpu --json %s", J);
    assert_non_null(strstr(g_out, "over one pass's working set"));
    json_error_t je;
    json_t *o = json_load_file(J, 0, &je);
    assert_non_null(o);
    assert_true(json_number_value(json_object_get(o, "working_set_bytes")) > 100e6);
    assert_true(json_number_value(json_object_get(o, "read_GBps_working_set")) > 0);
    json_decref(o);
    run_ok("bench --model %s --frames 2 --backend ref --json %s", g_tiny, J);
    assert_non_null(strstr(g_out, "ms/frame"));
    o = json_load_file(J, 0, &je);
    if (!o) fail_msg("%s: %s", J, je.text);
    assert_true(json_is_object(o));
    assert_string_equal(json_string_value(json_object_get(o, "backend")), "ref");
    const char *model = json_string_value(json_object_get(o, "model"));
    assert_non_null(model);
    assert_non_null(strstr(model, "tiny_gpt.safetensors"));
    assert_string_equal(json_string_value(json_object_get(o, "weights")), "f16");
    assert_int_equal(json_integer_value(json_object_get(o, "batch")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "frames")), 2);
    static const char *nums[] = {"ms_per_frame", "stream_frames_per_s", "weight_bytes_per_frame", "read_GBps",
                                 "floor_ms_per_frame", "ratio_to_floor"};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        json_t *v = json_object_get(o, nums[i]);
        if (!json_is_number(v)) fail_msg("bench json: %s missing or not a number", nums[i]);
        double x = json_number_value(v);
        if (!(x > 0) || !isfinite(x)) fail_msg("bench json: %s = %g, want > 0", nums[i], x);
    }
    /* consistency: floor = bytes / bandwidth, ratio = ms / floor */
    double ms = json_number_value(json_object_get(o, "ms_per_frame"));
    double bytes = json_number_value(json_object_get(o, "weight_bytes_per_frame"));
    double gbps = json_number_value(json_object_get(o, "read_GBps"));
    double fl = json_number_value(json_object_get(o, "floor_ms_per_frame"));
    double ratio = json_number_value(json_object_get(o, "ratio_to_floor"));
    assert_true(fabs(fl - bytes / (gbps * 1e9) * 1e3) <= 1e-2 * fl);
    assert_true(fabs(ratio - ms / fl) <= 1e-2 * ratio);
    /* the second floor: the read bandwidth over one pass's working set (weight bytes / (Q-1)), measured on host
     * backends, and the same arithmetic */
    double ws = json_number_value(json_object_get(o, "working_set_bytes"));
    double wgbps = json_number_value(json_object_get(o, "read_GBps_working_set"));
    double wfl = json_number_value(json_object_get(o, "floor_ms_working_set"));
    double wratio = json_number_value(json_object_get(o, "ratio_to_working_set_floor"));
    if (ws >= 1048576) {
        assert_true(wgbps > 0);
        assert_true(fabs(wfl - bytes / (wgbps * 1e9) * 1e3) <= 1e-2 * wfl);
        assert_true(fabs(wratio - ms / wfl) <= 1e-2 * wratio);
    }
    json_decref(o);
    assert_no_tmp_files();
}

/* bench --capacity on the tiny model (cpu): every reported capacity is a measured batch within its budget whose
 * next measured batch (if any) is over it; budgets chosen from this run's own batch-1 and batch-4 times so that the
 * answers are neither 0 nor the cap by construction of the test, whatever the host's speed */
static void test_bench_capacity(void **state) {
    const char *J = P("capacity.json");
    json_error_t je;
    run_ok("bench --capacity --model %s --backend cpu --threads 1 --budget 1e6 --max-batch 4 --frames 3 --json %s",
           g_tiny, J);
    json_t *o = json_load_file(J, 0, &je);
    if (!o) fail_msg("%s: %s", J, je.text);
    json_t *curve = json_object_get(o, "curve");
    assert_int_equal(json_array_size(curve), 3); /* batches 1, 2, 4: all within 1e6 ms */
    double t1 = json_number_value(json_object_get(json_array_get(curve, 0), "ms_per_frame"));
    double t4 = json_number_value(json_object_get(json_array_get(curve, 2), "ms_per_frame"));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(o, "capacity"), 0), "streams")), 4);
    assert_non_null(strstr(g_out, "4 concurrent real-time streams"));
    json_decref(o);
    /* a budget far above batch 1's time and one below it */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "bench --capacity --model %%s --backend cpu --threads 1 --budget %g,%g --max-batch 64 "
             "--frames 3 --json %%s", 40 * (t1 > t4 ? t1 : t4), t1 / 1000);
    run_ok(cmd, g_tiny, J);
    o = json_load_file(J, 0, &je);
    if (!o) fail_msg("%s: %s", J, je.text);
    curve = json_object_get(o, "curve");
    json_t *caps = json_object_get(o, "capacity");
    assert_int_equal(json_array_size(caps), 2);
    for (size_t k = 0; k < 2; k++) {
        json_t *c = json_array_get(caps, k);
        double budget = json_number_value(json_object_get(c, "budget_ms"));
        int n = (int)json_integer_value(json_object_get(c, "streams"));
        int found = n == 0, prev = 0;
        for (size_t i = 0; i < json_array_size(curve); i++) {
            json_t *pt = json_array_get(curve, i);
            int b = (int)json_integer_value(json_object_get(pt, "batch"));
            double t = json_number_value(json_object_get(pt, "ms_per_frame"));
            assert_true(b > prev); /* sorted, each batch once */
            prev = b;
            if (b == n) {
                found = 1;
                assert_true(t <= budget);
            }
            if (n && b > n) { /* the next measured batch is over the budget (or n is the cap) */
                if (!(t > budget)) fail_msg("capacity %d for %g ms, but batch %d took %g ms", n, budget, b, t);
                break;
            }
        }
        if (!found) fail_msg("capacity %d for %g ms is not a measured batch", n, budget);
        if (k == 1) assert_int_equal(n, 0); /* below batch 1's own time */
    }
    assert_non_null(strstr(g_out, "0 concurrent real-time streams"));
    json_decref(o);
    assert_no_tmp_files();
}

static void test_demo(void **state) {
    run_ok("demo --backend ref --frames 1");
    const char *want[] = {"SYNTHETIC", "ms/frame", "frames/s", "real-time factor", "backend ref", "frame   0:"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(g_out, want[i])) fail_msg("demo: lacks '%s':\n%s", want[i], g_out);
    /* another family's dims: Moshi's depformer (1.3 GB of bf16 weights built in memory; a text token per frame) */
    run_ok("demo --synthetic moshi --backend cpu --frames 1");
    const char *want2[] = {"Moshi depformer-dims", "8 levels x 2048 codes", "backend cpu", "frame   0:"};
    for (size_t i = 0; i < sizeof want2 / sizeof *want2; i++)
        if (!strstr(g_out, want2[i])) fail_msg("demo --synthetic moshi: lacks '%s':\n%s", want2[i], g_out);
    assert_int_equal(run("demo --synthetic nonsense"), 2);
}

/* The CLI talks (issue 16): one "depthdec: wrote ..." line on stderr after generate, score, export and quantize,
 * naming the file and the rows or what was written; --quiet: nothing on stderr. (stderr is a file here, not a
 * terminal, so no progress lines.) */
static void expect_summary(const char *cmd_fmt_args, const char *out, const char *what) {
    char q[4200];
    run_ok("%s", cmd_fmt_args);
    if (strncmp(g_err, "depthdec: wrote ", 16) != 0 || !strstr(g_err, out) || !strstr(g_err, what))
        fail_msg("depthdec %s: want one 'depthdec: wrote %s ...%s...' line on stderr, got: '%s'", cmd_fmt_args, out,
                 what, g_err);
    char *nl = strchr(g_err, '\n');
    if (!nl || nl[1]) fail_msg("depthdec %s: stderr is not one line: '%s'", cmd_fmt_args, g_err);
    if (!strstr(g_err, " s\n")) fail_msg("depthdec %s: summary lacks the time: '%s'", cmd_fmt_args, g_err);
    snprintf(q, sizeof q, "%s --quiet", cmd_fmt_args);
    run_ok("%s", q);
    if (g_err[0]) fail_msg("depthdec %s: stderr not empty: '%s'", q, g_err);
}

static void test_summary_lines(void **state) {
    char a[3000];
    const char *O = P("sum.npy"), *X = P("sum.safetensors"), *Q8 = P("sum_q8.safetensors");
    const char *H = FX "gpt_bf16_hidden.npy", *M = FX "gpt_bf16.safetensors", *C = FX "gpt_bf16_codes.npy";
    snprintf(a, sizeof a, "generate --model %s --hidden %s --out %s --backend ref", M, H, O);
    expect_summary(a, O, "6 rows x 8 codes");
    snprintf(a, sizeof a, "score --model %s --hidden %s --codes %s --out %s --backend ref", M, H, C, O);
    expect_summary(a, O, "6 rows x 7 levels x 64 logits");
    snprintf(a, sizeof a, "export --synthetic tiny-gpt --out %s", X);
    expect_summary(a, X, "tensors");
    snprintf(a, sizeof a, "quantize %s %s --bits 8 --group-size 32", X, Q8);
    expect_summary(a, Q8, "8-bit");
}

/* The file inside an HF CSM directory loads as the directory; a group size that does not divide a width is
 * refused with one that does. */
static void test_csm_file_and_group_hint(void **state) {
    run_ok("info " FX "csm_tiny/model.safetensors");
    if (!strstr(g_out, "llama") || !strstr(g_out, "levels       8")) fail_msg("info of the CSM file: %s", g_out);
    const char *O = P("g64.safetensors");
    expect_fail(1, O, NEEDLES("not divisible by --group-size 64", "try --group-size 32"),
                "quantize " FX "csm_tiny %s --bits 8", O);
    expect_fail(1, NULL, NEEDLES("not divisible by --group-size 64", "try --group-size 32"),
                "quality " FX "csm_tiny --rows 2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_lines),
        cmocka_unit_test(test_csm_file_and_group_hint),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_fixture_greedy),
        cmocka_unit_test(test_fixture_score),
        cmocka_unit_test(test_f16_hidden_int64_c0),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_qwen3_next_embed),
        cmocka_unit_test(test_moshi_text),
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_bench_capacity),
        cmocka_unit_test(test_demo),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
