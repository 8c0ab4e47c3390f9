/* Runs the example programs of examples/ (built by `make` beside the CLI: DD_CLI's folder + examples/) and checks
 * that each exits 0 and prints what it promises. host_api builds a model from tensors in memory, decodes greedy and
 * sampled frames and checks dd_score's argmax against the greedy codes itself (exit 1 otherwise). device_api (built
 * by `make CUDA=1`, run where a GPU is) checks the device-pointer API against the host API itself. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void example_path(char *buf, size_t cap, const char *name) {
    const char *cli = DD_CLI; /* "<build>/depthdec" */
    const char *slash = strrchr(cli, '/');
    int dl = slash ? (int)(slash - cli) : 1;
    snprintf(buf, cap, "%.*s/examples/%s", dl, slash ? cli : ".", name);
}

/* run examples/<name> with its output into out; returns its exit status */
static int run_example(const char *path, char *out, size_t cap) {
    FILE *p = popen(path, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    print_message("%s", out);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_host_api(void **state) {
    char path[512], out[8192];
    example_path(path, sizeof path, "host_api");
    assert_int_equal(run_example(path, out, sizeof out), 0);
    assert_non_null(strstr(out, "model: tensors, Q 4, V 16, input_dim 24, dim 16, 1 layer(s), 14 tensors"));
    assert_non_null(strstr(out, "stream 13 frame 0: greedy"));
    assert_non_null(strstr(out, "score argmax = greedy codes: ok"));
}

/* built by `make CUDA=1` only; exit 2 = no CUDA device */
static void test_device_api(void **state) {
    char path[512], out[8192];
    example_path(path, sizeof path, "device_api");
    if (access(path, X_OK) != 0) {
        printf("skipped: %s not built (make CUDA=1)\n", path);
        skip();
        return;
    }
    int st = run_example(path, out, sizeof out);
    if (st == 2) {
        printf("skipped: no CUDA device\n");
        skip();
        return;
    }
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "device codes = host codes: ok"));
    assert_non_null(strstr(out, "device logits = host logits (bits): ok"));
    assert_non_null(strstr(out, "graph replays = host codes: ok"));
    assert_non_null(strstr(out, "NaN hidden: dd_decoder_sync: "));
    assert_non_null(strstr(out, "hidden row 2, element 5: non-finite value nan; codes untouched: ok"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_host_api), cmocka_unit_test(test_device_api)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
