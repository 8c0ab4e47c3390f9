/* End-to-end parity with PyTorch / transformers: fixtures made by scripts/make_fixtures.py (float64 references
 * of GPT2Model-based native models in f16/bf16/q8 and a tiny CsmForConditionalGeneration in HF layout).
 * For every backend available in this build: teacher-forced logits within 1e-4 * max|ref| (per fixture),
 * level-0 logits likewise, and greedy codes identical. Outputs are NaN-poisoned before each call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "harness.h"
#include "npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX "tests/fixtures/"

static void *load_arr(const char *name, const char *suffix, int want_f32, int ndim, const int64_t *shape) {
    char path[256];
    snprintf(path, sizeof path, FX "%s_%s.npy", name, suffix);
    dd_npy a;
    dd_error e;
    if (dd_npy_read(path, &a, &e)) fail_msg("%s", e.msg);
    void *out = NULL;
    dd_status s = want_f32 ? dd_npy_to_f32(&a, path, suffix, ndim, shape, (float **)&out, &e)
                           : dd_npy_to_i32(&a, path, suffix, ndim, shape, (int32_t **)&out, &e);
    dd_npy_free(&a);
    if (s) fail_msg("%s", e.msg);
    return out;
}

static void check_fixture(const char *model_path, const char *name) {
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, model_path, &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    const int N = 6;
    float *hidden = load_arr(name, "hidden", 1, 2, (int64_t[]){N, I});
    int32_t *codes = load_arr(name, "codes", 0, 2, (int64_t[]){N, Q});
    float *ref = load_arr(name, "logits", 1, 3, (int64_t[]){N, Q - 1, V});
    float *ref0 = load_arr(name, "logits0", 1, 2, (int64_t[]){N, V});
    int32_t *greedy = load_arr(name, "greedy", 0, 2, (int64_t[]){N, Q});
    size_t nl = (size_t)N * (Q - 1) * V;
    float *lg = malloc(nl * sizeof *lg), *l0 = malloc((size_t)N * V * sizeof *l0);
    int32_t *out = malloc((size_t)N * Q * sizeof *out);
    double refmax = 0, ref0max = 0;
    for (size_t i = 0; i < nl; i++) refmax = fmax(refmax, fabs(ref[i]));
    for (int i = 0; i < N * V; i++) ref0max = fmax(ref0max, fabs(ref0[i]));
    for (int b = 0; b < dd_backend_count(); b++) { /* every backend the library knows */
        dd_backend be = dd_backend_at(b);
        if (!dd_backend_available(be)) {
            printf("  %s: backend %s not available in this build/machine: skipped\n", name, dd_backend_name(be));
            continue;
        }
        dd_decoder_params p = dd_decoder_default_params();
        p.backend = be;
        p.max_batch = N;
        dd_decoder *d;
        if (dd_decoder_create(&d, m, &p, &e)) fail_msg("%s", e.msg);
        th_poison(lg, nl);
        th_poison(l0, (size_t)N * V);
        if (dd_score(d, N, hidden, codes, lg, l0, &e)) fail_msg("%s", e.msg);
        double err = 0, err0 = 0;
        for (size_t i = 0; i < nl; i++) err = fmax(err, isnan(lg[i]) ? INFINITY : fabs(lg[i] - ref[i]));
        for (int i = 0; i < N * V; i++) err0 = fmax(err0, isnan(l0[i]) ? INFINITY : fabs(l0[i] - ref0[i]));
        for (int i = 0; i < N * Q; i++) out[i] = -7;
        dd_sampling greedy_s = {.temperature = 0.0f, .top_k = 0};
        if (dd_decode(d, N, hidden, NULL, NULL, NULL, &greedy_s, out, &e)) fail_msg("%s", e.msg);
        int agree = 0;
        for (int i = 0; i < N * Q; i++) agree += out[i] == greedy[i];
        printf("  %-9s %-4s max rel logit err %.3g (levels 1..%d), level-0 %.3g; greedy codes %d/%d identical\n",
               name, dd_backend_name(be), err / refmax, Q - 1, err0 / ref0max, agree, N * Q);
        assert_true(err <= TH_LOGIT_REL * refmax);
        assert_true(err0 <= TH_LOGIT_REL * ref0max);
        assert_int_equal(agree, N * Q);
        dd_decoder_free(d);
    }
    free(hidden);
    free(codes);
    free(ref);
    free(ref0);
    free(greedy);
    free(lg);
    free(l0);
    free(out);
    dd_model_free(m);
}

static void test_gpt_f16(void **st) { (void)st; check_fixture(FX "gpt_f16.safetensors", "gpt_f16"); }
static void test_gpt_bf16(void **st) { (void)st; check_fixture(FX "gpt_bf16.safetensors", "gpt_bf16"); }
static void test_gpt_q8(void **st) { (void)st; check_fixture(FX "gpt_q8.safetensors", "gpt_q8"); }
static void test_csm_tiny(void **st) { (void)st; check_fixture(FX "csm_tiny", "csm_tiny"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_f16),
        cmocka_unit_test(test_gpt_bf16),
        cmocka_unit_test(test_gpt_q8),
        cmocka_unit_test(test_csm_tiny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
