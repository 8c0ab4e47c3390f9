/* Quantization: depthdec's MLX affine quantizer against MLX itself (fixtures from scripts/make_quant_fixture.py,
 * made with mlx.core.quantize), the one-step round-trip bound, packing order on hand-made words, files written by
 * dd_model_export (what `depthdec quantize` calls) loading and scoring, and bad arguments refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "harness.h"
#include "model/model.h"
#include "npy.h"
#include "model/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *read_npy(const char *name, dd_npy *a) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s", name);
    dd_error e;
    if (dd_npy_read(path, a, &e)) fail_msg("%s", e.msg);
    return a->data;
}

/* Bit-identical to mlx.core.quantize for bits 8/4 and groups 32/64/128 (float32 scales and biases). */
static void test_matches_mlx(void **st) {
    (void)st;
    dd_npy w;
    const float *x = read_npy("quant_w.npy", &w);
    assert_int_equal(w.dtype, DD_NPY_F32);
    int64_t R = w.shape[0], K = w.shape[1];
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int group = 32; group <= 128; group *= 2) {
            char n[64];
            dd_npy q, s, b;
            snprintf(n, sizeof n, "quant_q%d_g%d_q.npy", bits, group);
            const int64_t *qr = read_npy(n, &q);
            snprintf(n, sizeof n, "quant_q%d_g%d_s.npy", bits, group);
            const float *sr = read_npy(n, &s);
            snprintf(n, sizeof n, "quant_q%d_g%d_b.npy", bits, group);
            const float *br = read_npy(n, &b);
            int64_t words = K * bits / 32, ng = K / group;
            assert_int_equal(q.shape[1], words);
            uint32_t *qw = malloc((size_t)words * 4);
            float *fs = malloc((size_t)ng * 4), *fb = malloc((size_t)ng * 4);
            int mism = 0;
            for (int64_t r = 0; r < R; r++) {
                dd_quantize_row(x + r * K, K, bits, group, qw, fs, fb);
                for (int64_t i = 0; i < words; i++) mism += qw[i] != (uint32_t)qr[r * words + i];
                for (int64_t g = 0; g < ng; g++)
                    mism += memcmp(&fs[g], &sr[r * ng + g], 4) != 0 || memcmp(&fb[g], &br[r * ng + g], 4) != 0;
            }
            printf("  bits %d group %3d: %d mismatches against MLX\n", bits, group, mism);
            assert_int_equal(mism, 0);
            free(qw);
            free(fs);
            free(fb);
            dd_npy_free(&q);
            dd_npy_free(&s);
            dd_npy_free(&b);
        }
    dd_npy_free(&w);
}

/* Every value comes back within one step |scale| (MLX's own test bound), on fresh random rows; values inside the grid
 * within half a step. One step is the exact worst case, not a loose one: the scale is re-fitted so that the edge (the
 * end of larger magnitude) is exactly q0 steps from 0, s = edge / q0 with q0 = round(edge / s0), s0 = range / qmax.
 * That can shrink the step by up to 0.5 / q0 relative, and the other end then lies up to qmax (s0 / s - 1) steps
 * beyond the grid and is clamped: with the ends on opposite sides of 0, |edge| / s0 >= qmax / 2, so q0 >= 7.5 at
 * q4 (127.5 at q8) and the excess is <= 15 (8 / 7.5 - 1) = 1 step. At that extreme the float subtraction can land a
 * few ulps over |s| (seen: seed 7634258703717052815, q4 group 128, 0.00548260 vs step 0.00548261), and inside
 * the grid a value within float rounding of a half step rounds either way: hence a float-rounding allowance on both
 * bounds (qmax 2^-20 steps plus 2^-21 of |w| + |bias|). */
static void test_round_trip_bound(void **st) {
    (void)st;
    const int64_t K = 512;
    float w[512], back[512], fs[16], fb[16];
    uint32_t q[128];
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int group = 32; group <= 128; group *= 2)
            for (int trial = 0; trial < 200; trial++) {
                double scale = pow(10.0, -4 + 5 * rnd_unif()), off = (rnd_unif() - 0.5) * scale * (trial % 3);
                for (int i = 0; i < K; i++) w[i] = (float)((rnd_unif() - 0.5) * scale + off);
                dd_quantize_row(w, K, bits, group, q, fs, fb);
                dd_weight v = {.type = bits == 8 ? DD_Q8 : DD_Q4, .rows = 1, .cols = K, .data = (uint8_t *)q,
                               .row_bytes = (size_t)K * bits / 8, .scales = (uint8_t *)fs, .biases = (uint8_t *)fb,
                               .sb_type = DD_F32, .group = group, .sb_row_bytes = (size_t)(K / group) * 4};
                dd_weight_row_f32(&v, 0, back);
                const float qmax = (float)((1 << bits) - 1);
                for (int i = 0; i < K; i++) {
                    const float step = fabsf(fs[i / group]), b = fb[i / group];
                    const float pos = (w[i] - b) / fs[i / group]; /* the value in steps from the bias */
                    const int inside = pos >= -0.5f && pos <= qmax + 0.5f;
                    /* float rounding: of (w - b) / s (relative to pos <= qmax steps) and of s q + b, w - b */
                    const float fl = step * qmax * 0x1p-20f + (fabsf(w[i]) + fabsf(b)) * 0x1p-21f;
                    const float bound = (inside ? 0.5f : 1.0f) * step + fl;
                    if (!(fabsf(back[i] - w[i]) <= bound))
                        fail_msg("bits %d group %d: w %g came back %g, step %g (%s the grid)", bits, group,
                                 (double)w[i], (double)back[i], (double)step, inside ? "inside" : "outside");
                }
            }
}

/* Packing order from the least significant bits, on hand-made words. */
static void test_packing_order(void **st) {
    (void)st;
    uint32_t w8[2] = {0x04030201u, 0xfffe0080u}, w4[1] = {0x8765432fu};
    float one = 1.0f, zero = 0.0f, out[8];
    dd_weight v8 = {.type = DD_Q8, .rows = 1, .cols = 8, .data = (uint8_t *)w8, .row_bytes = 8,
                    .scales = (uint8_t *)&one, .biases = (uint8_t *)&zero, .sb_type = DD_F32, .group = 8,
                    .sb_row_bytes = 4};
    dd_weight_row_f32(&v8, 0, out);
    const float e8[8] = {1, 2, 3, 4, 128, 0, 254, 255};
    for (int i = 0; i < 8; i++) assert_true(out[i] == e8[i]);
    dd_weight v4 = v8;
    v4.type = DD_Q4;
    v4.data = (uint8_t *)w4;
    v4.row_bytes = 4;
    dd_weight_row_f32(&v4, 0, out);
    const float e4[8] = {15, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 8; i++) assert_true(out[i] == e4[i]);
    /* and the quantizer packs the same way: q = 0..7 for a ramp whose edge is its minimum */
    float ramp[32];
    uint32_t q[4];
    float s, b;
    for (int i = 0; i < 32; i++) ramp[i] = (float)(i % 8);
    dd_quantize_row(ramp, 32, 4, 32, q, &s, &b);
    /* |max| = 7 > |min| = 0 makes the max the edge: s < 0, bias = 7 */
    dd_weight vq = {.type = DD_Q4, .rows = 1, .cols = 32, .data = (uint8_t *)q, .row_bytes = 16,
                    .scales = (uint8_t *)&s, .biases = (uint8_t *)&b, .sb_type = DD_F32, .group = 32,
                    .sb_row_bytes = 4};
    float back[32];
    dd_weight_row_f32(&vq, 0, back);
    for (int i = 0; i < 32; i++) assert_true(fabsf(back[i] - ramp[i]) <= fabsf(s));
    assert_true(b == 7.0f); /* the edge maps exactly to q = 0 */
    assert_int_equal(q[0] & 0xf, 15); /* element 0 (value 0) is 15 steps of s = -7/15 from the edge */
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Score n random rows of m into a new array. */
static float *score(const dd_model *m, int n, const float *h, const int32_t *codes) {
    const dd_config *c = dd_model_config(m);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_REF;
    p.max_batch = n;
    dd_decoder *d;
    dd_error e;
    if (dd_decoder_create(&d, m, &p, &e)) fail_msg("%s", e.msg);
    size_t nl = (size_t)n * (c->levels - 1) * c->codebook_size;
    float *lg = malloc(nl * sizeof *lg);
    th_poison(lg, nl);
    if (dd_score(d, n, h, codes, lg, NULL, &e)) fail_msg("%s", e.msg);
    dd_decoder_free(d);
    return lg;
}

static void random_inputs(const dd_config *c, int n, float **h, int32_t **codes) {
    *h = malloc((size_t)n * c->input_dim * sizeof **h);
    *codes = malloc((size_t)n * c->levels * sizeof **codes);
    for (int i = 0; i < n * c->input_dim; i++) (*h)[i] = (float)(rnd_unif() * 2 - 1);
    for (int i = 0; i < n * c->levels; i++) (*codes)[i] = (int32_t)(rnd_unif() * c->codebook_size);
}

/* A file written by the exporter loads, records the quantization, and scores near the dense model. */
static void check_export(const char *src_path, const char *kind, int bits, int group, double tol) {
    char dir[] = "/tmp/ddquantXXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/q.safetensors", dir);
    dd_model *m, *q;
    dd_error e;
    if (src_path ? dd_model_load(&m, src_path, &e) : dd_model_synthetic(&m, kind, DD_F32, 3, &e)) fail_msg("%s", e.msg);
    dd_export_params p = dd_export_default_params();
    p.bits = bits;
    p.group = group;
    if (dd_model_export(m, path, &p, &e)) fail_msg("%s", e.msg);
    if (dd_model_load(&q, path, &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m), *cq = dd_model_config(q);
    assert_int_equal(cq->quant_bits, bits ? bits : c->quant_bits); /* bits 0 keeps the source's types */
    if (bits) assert_int_equal(cq->quant_group, group);
    assert_int_equal(cq->levels, c->levels);
    assert_int_equal(cq->block, c->block);
    const int n = 4;
    float *h;
    int32_t *codes;
    random_inputs(c, n, &h, &codes);
    float *a = score(m, n, h, codes), *b = score(q, n, h, codes);
    size_t nl = (size_t)n * (c->levels - 1) * c->codebook_size;
    double err = 0;
    for (size_t i = 0; i < nl; i++) err = fmax(err, isnan(b[i]) ? INFINITY : fabs(a[i] - b[i]));
    err /= max_abs(a, nl);
    printf("  %s %d-bit group %d: max rel logit error vs source %.3g (tolerance %.3g)\n", src_path ? src_path : kind,
           bits, group, err, tol);
    assert_true(err <= tol);
    free(a);
    free(b);
    free(h);
    free(codes);
    dd_model_free(q);
    dd_model_free(m);
    remove(path);
    rmdir(dir);
}

static void test_export_files(void **st) {
    (void)st;
    check_export(NULL, "tiny-gpt", 8, 64, 3e-2);
    check_export(NULL, "tiny-gpt", 4, 32, 3e-1);
    check_export(NULL, "tiny-llama", 8, 32, 3e-2);
    check_export(NULL, "tiny-llama", 4, 64, 3e-1);
    /* dense re-export of a native file is exact; of the HF CSM fixture it only rounds in(table) once more */
    check_export("tests/fixtures/gpt_f16.safetensors", NULL, 0, 64, 0.0);
    check_export("tests/fixtures/gpt_q8.safetensors", NULL, 0, 64, 0.0);
    check_export("tests/fixtures/csm_tiny", NULL, 0, 64, 1e-2);
    check_export("tests/fixtures/csm_tiny", NULL, 8, 32, 5e-2);
}

static void test_bad_arguments(void **st) {
    (void)st;
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_F32, 1, &e)) fail_msg("%s", e.msg);
    dd_export_params p = dd_export_default_params();
    const char *path = "/tmp/dd_quant_never_written.safetensors";
    remove(path);
    p.bits = 3;
    assert_int_equal(dd_model_export(m, path, &p, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "bits 3"));
    p.bits = 8;
    p.group = 48;
    assert_int_equal(dd_model_export(m, path, &p, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "group-size 48"));
    p.group = 128; /* tiny-gpt has D = 64: K = 64 is not divisible by 128 */
    assert_int_equal(dd_model_export(m, path, &p, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "not divisible by --group-size 128"));
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    dd_model_free(m);
    /* the CLI refuses them as usage errors */
    assert_int_equal(system(DD_CLI " quantize tests/fixtures/gpt_f16.safetensors /tmp/x.st --bits 3 2>/dev/null") >> 8,
                     2);
    assert_int_equal(system(DD_CLI " quantize tests/fixtures/gpt_f16.safetensors /tmp/x.st --bits 8 --group-size 48 "
                                   "2>/dev/null") >> 8, 2);
    assert_int_equal(system(DD_CLI " quantize tests/fixtures/gpt_f16.safetensors /tmp/dd_q_nd.st --bits 4 "
                                   "--group-size 128 2>/dev/null") >> 8, 1);
    assert_int_equal(access("/tmp/dd_q_nd.st", F_OK), -1);
}

int main(void) {
    th_seed_init("test_quant");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_mlx),     cmocka_unit_test(test_round_trip_bound),
        cmocka_unit_test(test_packing_order),   cmocka_unit_test(test_export_files),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
