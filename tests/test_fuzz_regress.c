/* Fuzz regressions and resource limits (issue 7, points 1 and 4).
 *
 * 1. Every input listed in fuzz/regressions/EXPECTED is replayed through the same code the fuzzers run
 *    (fuzz/fuzz_model.c, fuzz/fuzz_npy.c, included below without their libFuzzer entry points), and must end in
 *    exactly the status listed there, with the harness's checks (a clean error: no model, matching code, a
 *    message; or, for an input that loads, correct decoding) all holding.
 * 2. Resource limits, in a forked child under setrlimit(RLIMIT_AS): a config at every maximum backed by a tiny file
 *    is refused (DD_EMODEL) without allocating; building the GPT-dims synthetic model under 200 MB fails with
 *    DD_ENOMEM and a message; creating a decoder (ref, cpu) with 0, 1, 2, 4 ... 128 MB of address space left
 *    (up to the first step that works) either works or fails with DD_ENOMEM and a message, never crashes.
 *    Under ASan/TSan (which reserve terabytes of shadow address space) the address-space limit cannot be used:
 *    those cases then say they are skipped; the refusal of the huge config is still checked, without the limit.
 * 3. Batch bounds: max_batch outside [1, 4096] and n > max_batch are DD_EINVAL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "harness.h" /* tests/harness.h: th_slurp */

/* the harnesses, with their checks failing the test instead of aborting */
#define FZ_FAIL(what, msg) fail_msg("harness check failed: %s (%s)", what, msg)
#define FZ_NO_ENTRY 1
#include "../fuzz/fuzz_model.c"
#include "../fuzz/fuzz_npy.c"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define REG "fuzz/regressions/"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DD_SANITIZED 1
#endif
#endif
#ifndef DD_SANITIZED
#define DD_SANITIZED 0
#endif

static const char *const status_names[] = {"OK", "EINVAL", "EIO", "EFORMAT", "EMODEL", "ENOMEM", "ENUMERIC",
                                           "EUNSUPPORTED"};

static int parse_status(const char *s) {
    for (int i = 0; i < (int)(sizeof status_names / sizeof *status_names); i++)
        if (strcmp(s, status_names[i]) == 0) return i;
    return -1;
}

/* fuzz/regressions/EXPECTED: "NAME STATUS" per line, '#' comments. NAME model-* is a fuzz_model input, npy-* a
 * fuzz_npy input. */
static void test_regressions(void **state) {
    FILE *f = fopen(REG "EXPECTED", "r");
    if (!f) fail_msg(REG "EXPECTED: %s", strerror(errno));
    char line[512];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        char name[256], want[32];
        if (line[0] == '#' || sscanf(line, "%255s %31s", name, want) != 2) continue;
        int ws = parse_status(want);
        if (ws < 0) fail_msg(REG "EXPECTED: unknown status '%s' for %s", want, name);
        char path[300];
        snprintf(path, sizeof path, REG "%s", name);
        size_t sz;
        uint8_t *data = th_slurp(path, &sz);
        int got = -2;
        if (strncmp(name, "model-", 6) == 0) got = fz_model_one(data, sz);
        else if (strncmp(name, "npy-", 4) == 0) got = fz_npy_one(data, sz);
        else fail_msg(REG "EXPECTED: %s is neither model-* nor npy-*", name);
        free(data);
        if (got != ws) {
            print_error("  %s: status %s, expected %s\n", name, got >= 0 ? status_names[got] : "?", want);
            bad++;
        }
        n++;
    }
    fclose(f);
    print_message("  %d regression inputs replayed\n", n);
    assert_true(n > 0);
    assert_int_equal(bad, 0);
}

/* ---- resource limits --------------------------------------------------------------------------------------- */

/* Run fn in a child under an address-space limit of `limit_mb` above what the child already has mapped (0: no
 * limit). fn returns a dd_status and may fill msg; the child exits with it. Returns the status, -1 on a crash. */
typedef int (*limited_fn)(char *msg, size_t cap);

static long vm_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0;
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (sysconf(_SC_PAGESIZE) / 1024) / 1024;
}

static int run_limited(limited_fn fn, long limit_mb, int above_current, char *msg, size_t cap) {
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        if (limit_mb > 0) {
            rlim_t lim = (rlim_t)(limit_mb + (above_current ? vm_mb() : 0)) << 20;
            struct rlimit rl = {lim, lim};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(100);
        }
        char m[600] = "";
        int s = fn(m, sizeof m);
        if (write(pfd[1], m, strlen(m) + 1) < 0) _exit(101);
        _exit(s);
    }
    close(pfd[1]);
    ssize_t r = read(pfd[0], msg, cap - 1);
    msg[r > 0 ? r : 0] = 0;
    close(pfd[0]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFEXITED(ws)) return -1;
    return WEXITSTATUS(ws);
}

static int load_max_config(char *msg, size_t cap) {
    size_t sz;
    uint8_t *data = th_slurp(REG "model-max-config-tiny-file", &sz);
    /* the file proper is the input after its mode byte (layout 0: one part, verbatim) */
    char path[300];
    snprintf(path, sizeof path, "%s/max-config.safetensors", fz_tmpdir());
    fz_write(path, data + 1, sz - 1);
    free(data);
    dd_model *m = NULL;
    dd_error e;
    dd_status s = dd_model_load(&m, path, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "loaded");
    dd_model_free(m);
    return s;
}

/* A config asking for 64 layers of 16384 dims (and 64 levels of 65536 codes) in a 100-byte file: refused as a
 * bad model, within 200 MB of address space. */
static void test_max_config_tiny_file(void **state) {
    char msg[600];
    int s = run_limited(load_max_config, DD_SANITIZED ? 0 : 200, 1, msg, sizeof msg);
    if (DD_SANITIZED) print_message("  (sanitizer build: checked without the address-space limit)\n");
    print_message("  %s -> %s\n", "64 x 16384 config in a tiny file", msg);
    assert_int_equal(s, DD_EMODEL);
    assert_non_null(strstr(msg, "missing tensor"));
}

static char g_big_header[400];

static int load_big_header(char *msg, size_t cap) {
    dd_model *m = NULL;
    dd_error e;
    dd_status s = dd_model_load(&m, g_big_header, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "loaded");
    dd_model_free(m);
    return s;
}

/* A 60 MB safetensors header (within the format's 100 MB limit) of 4 million __metadata__ entries: parsing it
 * takes several hundred MB of JSON objects. Under a 200 MB address space that must be a clean error with a message
 * (before the fix in st_parse: DD_EFORMAT "header JSON:  (at byte 0)", an empty reason). */
static void test_big_header_enomem(void **state) {
    if (DD_SANITIZED) {
        print_message("  sanitizer build: RLIMIT_AS cannot be used: skipped\n");
        skip();
    }
    snprintf(g_big_header, sizeof g_big_header, "%s/big-header.safetensors", fz_tmpdir());
    FILE *f = fopen(g_big_header, "wb");
    assert_non_null(f);
    const int n = 4000000;
    const char *head = "{\"__metadata__\":{";
    uint64_t len = strlen(head) + (uint64_t)n * 14 - 1 + 2; /* "k%07d":"" is 13 bytes, plus commas, plus }} */
    fwrite(&len, 8, 1, f);
    fputs(head, f);
    for (int i = 0; i < n; i++) fprintf(f, "%s\"k%07d\":\"\"", i ? "," : "", i);
    fputs("}}", f);
    assert_int_equal(fclose(f), 0);
    char msg[600];
    int s = run_limited(load_big_header, 200, 0, msg, sizeof msg);
    unlink(g_big_header);
    print_message("  60 MB header under 200 MB -> %d: %s\n", s, msg);
    /* jansson fails an allocation either silently (empty error text: safetensors.c reports DD_ENOMEM) or, inside
     * its lexer, as "invalid token" (indistinguishable from bad JSON, so DD_EFORMAT); either way a clean error */
    assert_true(s == DD_ENOMEM || s == DD_EFORMAT);
    if (s == DD_ENOMEM) assert_non_null(strstr(msg, "out of memory"));
    assert_true(msg[0] != 0 && !strstr(msg, "JSON:  "));
}

static int synth_gpt(char *msg, size_t cap) {
    dd_model *m = NULL;
    dd_error e;
    dd_status s = dd_model_synthetic(&m, "gpt", DD_F32, 1, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "built");
    dd_model_free(m);
    return s;
}

/* The GPT-dims synthetic model (~0.5 GB of f32 weights) under a 200 MB address space: DD_ENOMEM with a message,
 * not a crash. */
static void test_synthetic_gpt_enomem(void **state) {
    if (DD_SANITIZED) {
        print_message("  sanitizer build: RLIMIT_AS cannot be used: skipped\n");
        skip();
    }
    char msg[600];
    int s = run_limited(synth_gpt, 200, 0, msg, sizeof msg);
    print_message("  synthetic gpt f32 under 200 MB -> %d: %s\n", s, msg);
    assert_int_equal(s, DD_ENOMEM);
    assert_non_null(strstr(msg, "out of memory"));
}

static dd_backend g_backend;
static long g_headroom_mb;
static char g_gpt_q4[400]; /* the GPT-dims synthetic model as q4, saved once by the parent */

/* In the child: load the GPT-dims q4 model from a file (mapped: almost no heap), cap the address space at
 * g_headroom_mb above what is mapped, then create a 64-stream decoder of a backend whose row says host_memory (ref;
 * cpu: two worker threads, whose stacks count too) and decode a frame. Every allocation failure on the way must come back as DD_ENOMEM with a message. */
static int big_decoder(char *msg, size_t cap) {
    dd_model *m = NULL;
    dd_error e;
    dd_status s = dd_model_load(&m, g_gpt_q4, &e);
    if (s) {
        snprintf(msg, cap, "setup: %s", e.msg);
        return 102;
    }
    float *h = calloc(2048, sizeof(float));
    int32_t c0 = 0, codes[32];
    if (!h) return 102;
    /* every block of 4 KB or more gets its own mapping (glibc), so the limit bites even on allocations that
     * free heap space left by the model build would otherwise serve */
    mallopt(M_MMAP_THRESHOLD, 4096);
    rlim_t lim = (rlim_t)(vm_mb() + g_headroom_mb) << 20;
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 100;
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = g_backend;
    p.max_batch = 64;
    p.threads = 2;
    dd_decoder *d = NULL;
    s = dd_decoder_create(&d, m, &p, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "created and decoded");
    if (!s) {
        dd_sampling g = {0.0f, 0};
        s = dd_decode(d, 1, h, &c0, NULL, NULL, &g, codes, &e);
        if (s) snprintf(msg, cap, "decode: %s", e.msg);
    }
    dd_decoder_free(d);
    dd_model_free(m);
    free(h);
    return s;
}

static int save_gpt_q4(char *msg, size_t cap) {
    dd_model *m;
    dd_error e;
    dd_status s = dd_model_synthetic(&m, "gpt", DD_Q4, 1, &e);
    if (!s) s = dd_model_save(m, g_gpt_q4, &e);
    snprintf(msg, cap, "%s", s ? e.msg : "saved");
    dd_model_free(m);
    return s;
}

/* Headroom from nothing upwards: each step must either work or fail cleanly with DD_ENOMEM, the smallest must
 * fail, and the sweep stops at the first that works. */
static void test_decoder_enomem(void **state) {
    if (DD_SANITIZED) {
        print_message("  sanitizer build: RLIMIT_AS cannot be used: skipped\n");
        skip();
    }
    static const long headroom[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
    char msg[600];
    snprintf(g_gpt_q4, sizeof g_gpt_q4, "%s/gpt-q4.safetensors", fz_tmpdir());
    /* built in a child, so that this process's heap (which the children inherit) stays small */
    if (run_limited(save_gpt_q4, 0, 0, msg, sizeof msg) != DD_OK) fail_msg("%s", msg);
    for (int i = 0; i < dd_registry_count; i++) { /* every backend whose decoder lives in host memory */
        const dd_backend_row *r = &dd_registry[i];
        if (!r->test.host_memory || !dd_registry_usable(r)) continue;
        g_backend = r->info.id;
        int nomem = 0;
        for (size_t k = 0; k < sizeof headroom / sizeof *headroom; k++) {
            g_headroom_mb = headroom[k];
            int s = run_limited(big_decoder, 0, 0, msg, sizeof msg);
            print_message("  %s decoder, %3ld MB headroom -> %s: %s\n", r->info.name, headroom[k],
                          s >= 0 && s < 8 ? status_names[s] : "CRASH", msg);
            if (s == 102) fail_msg("could not build the model: %s", msg);
            assert_true(s == DD_ENOMEM || s == DD_OK);
            if (s == DD_ENOMEM) { /* "out of memory ...", or the cpu pool's "cannot start thread ..." */
                nomem++;
                assert_true(strstr(msg, "out of memory") || strstr(msg, "thread"));
            }
            if (k == 0) assert_int_equal(s, DD_ENOMEM);
            /* more headroom cannot make an allocation fail: after the first success the larger steps would only
             * repeat it (a GPT-dims frame on ref: seconds each, most of `make test`'s time when they all ran) */
            if (s == DD_OK) break;
        }
        assert_true(nomem > 0);
    }
    unlink(g_gpt_q4);
}

/* ---- batch bounds ------------------------------------------------------------------------------------------ */

static void test_batch_bounds(void **state) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_F32, 1, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < dd_backend_count(); i++) { /* every backend the library knows */
        if (!dd_backend_available(dd_backend_at(i))) continue;
        dd_decoder_params p = dd_decoder_default_params();
        p.backend = dd_backend_at(i);
        dd_decoder *d = (dd_decoder *)1;
        p.max_batch = 0;
        assert_int_equal(dd_decoder_create(&d, m, &p, &e), DD_EINVAL);
        assert_null(d);
        p.max_batch = 4097;
        assert_int_equal(dd_decoder_create(&d, m, &p, &e), DD_EINVAL);
        assert_non_null(strstr(e.msg, "max_batch"));
        p.max_batch = 2;
        assert_int_equal(dd_decoder_create(&d, m, &p, &e), DD_OK);
        const dd_config *c = dd_model_config(m);
        float *h = calloc(3 * (size_t)c->input_dim, sizeof(float));
        int32_t c0[3] = {0, 0, 0}, codes[3 * 8];
        float *logits = calloc(3 * (size_t)(c->levels - 1) * c->codebook_size, sizeof(float));
        assert_non_null(h);
        assert_non_null(logits);
        memset(codes, 0x77, sizeof codes);
        assert_int_equal(dd_decode(d, 3, h, c0, NULL, NULL, NULL, codes, &e), DD_EINVAL);
        assert_non_null(strstr(e.msg, "max_batch"));
        assert_int_equal(codes[0], 0x77777777); /* nothing written on error */
        assert_int_equal(dd_decode(d, 0, h, c0, NULL, NULL, NULL, codes, &e), DD_EINVAL);
        memset(codes, 0, sizeof codes);
        assert_int_equal(dd_score(d, 3, h, codes, logits, NULL, &e), DD_EINVAL);
        assert_int_equal(dd_score(d, 2, h, codes, logits, NULL, &e), DD_OK);
        free(h);
        free(logits);
        dd_decoder_free(d);
    }
    dd_model_free(m);
}

int main(void) {
    fz_tmpdir(); /* in the parent, so that forked children share it and it is removed at exit */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regressions),
        cmocka_unit_test(test_max_config_tiny_file),
        cmocka_unit_test(test_synthetic_gpt_enomem),
        cmocka_unit_test(test_big_header_enomem),
        cmocka_unit_test(test_decoder_enomem),
        cmocka_unit_test(test_batch_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
