/* Tests of the native config (src/model/config.c, SPEC §4) on files made from the synthetic base models: every config
 * value missing, out of range, of the wrong type or inconsistent; the config text itself broken; hostile values
 * refused before anything is sized from them (quickly, and within an address-space limit); and the config in a
 * config.json beside the file instead of __metadata__ (identical config and logits; metadata wins; broken or
 * wrong sidecars refused). Each refusal names the file and the key (loader_util.h). Data are fresh random each
 * run (seed printed; DD_TEST_SEED=<n> replays). DD_TEST_VERBOSE=1 prints every loader message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "loader_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- config values ----------------------------------------------------------------------------------------- */

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
        TH_PATH(path, "huge_%zu.safetensors", i);
        build_case(&cases[i], path);
        double t0 = th_now();
        expect_fail(path, DD_EMODEL, cases[i].also);
        double dt = th_now() - t0;
        if (dt > 2.0) print_error("%s: refusal took %.2f s\n", path, dt);
        assert_true(dt < 2.0);
        if (limited) assert_int_equal(load_status_limited(path, (size_t)256 << 20), DD_EMODEL);
        unlink(path);
    }
    if (limited) assert_int_equal(load_status_limited(lt_base[GPT][F32], (size_t)256 << 20), DD_OK);
}

/* ---- config beside the file ------------------------------------------------------------------------------- */

/* The same model with its config in config.json beside the file instead of __metadata__: identical config and
 * logits. Metadata wins over a sidecar; a broken or wrong sidecar, or none at all, is refused. */
static void test_sidecar(void **state) {
    char dir[128], path[160], cj[160];
    for (int k = 0; k < 2; k++) {
        int w = k == GPT ? F32 : Q8;
        TH_PATH(dir, "side_%d", k);
        mkdir_ok(dir);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        snprintf(cj, sizeof cj, "%s/config.json", dir);
        tset *ts = ts_load(lt_base[k][w]);
        json_t *cfg = ts->cfg;
        ts->cfg = NULL;
        ts_write(ts, path); /* no metadata */
        expect_fail_in(path, DD_EMODEL, path, cj);
        expect_fail(path, DD_EMODEL, "depthdec.config");

        write_json(cj, cfg);
        dd_model *a = load_ok(lt_base[k][w]), *b = load_ok(path);
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

/* ---- main ------------------------------------------------------------------------------------------------- */

int main(void) {
    th_seed_init("test_config");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_rules),
        cmocka_unit_test(test_huge_config),
        cmocka_unit_test(test_sidecar),
    };
    return cmocka_run_group_tests(tests, lt_setup_bases, lt_teardown);
}
