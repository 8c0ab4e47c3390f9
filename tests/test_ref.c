/* The reference backend against naive math and against itself:
 *  - weight rows of every storage type (f16 via the compiler's _Float16, bf16 by bit shifts, MLX q8/q4 by the
 *    written-out formula) decode to the values an independent conversion gives;
 *  - a quantized model scores exactly like its dequantized float32 twin (both layouts, q8 and q4);
 *  - decode is reproducible from (seed, frame) and independent of the batch and the row;
 *  - decode = score + the sampler: teacher-forcing the decoded codes and sampling each level's logits with
 *    dd_sample_logits reproduces every code (at T 0.9, K 50 and at T 0), so the two paths compute one function;
 *  - llama3 RoPE frequencies against HF's formula written out here;
 *  - argument checks: nothing written to the outputs on error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "harness.h"
#include "model/model.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dd_decoder *dec(const dd_model *m, int max_batch) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_REF;
    p.max_batch = max_batch;
    dd_decoder *d;
    dd_error e;
    if (dd_decoder_create(&d, m, &p, &e)) fail_msg("%s", e.msg);
    return d;
}

static float *rand_hidden(const dd_model *m, int n) {
    int I = dd_model_config(m)->input_dim;
    float *h = malloc((size_t)n * I * sizeof *h);
    for (int i = 0; i < n * I; i++) h[i] = (float)(rnd_unif() * 3.4 - 1.7);
    return h;
}

static void test_weight_rows(void **st) {
    (void)st;
    enum { K = 96 };
    uint16_t h16[K], b16[K];
    float want[K], got[K];
    for (int i = 0; i < K; i++) {
        _Float16 x = (_Float16)((rnd_unif() - 0.5) * pow(2.0, (int)(rnd_unif() * 30) - 15));
        if (i == 5) x = (_Float16)6e-8; /* subnormal */
        if (i == 6) x = (_Float16)-0.0;
        memcpy(&h16[i], &x, 2);
        want[i] = (float)x;
    }
    dd_weight w = {.type = DD_F16, .rows = 1, .cols = K, .data = (uint8_t *)h16, .row_bytes = 2 * K};
    dd_weight_row_f32(&w, 0, got);
    assert_memory_equal(got, want, sizeof want);
    for (int i = 0; i < K; i++) {
        float f = (float)(rnd_unif() * 100 - 50);
        uint32_t u;
        memcpy(&u, &f, 4);
        b16[i] = (uint16_t)(u >> 16);
        u &= 0xffff0000u;
        memcpy(&want[i], &u, 4);
    }
    w = (dd_weight){.type = DD_BF16, .rows = 1, .cols = K, .data = (uint8_t *)b16, .row_bytes = 2 * K};
    dd_weight_row_f32(&w, 0, got);
    assert_memory_equal(got, want, sizeof want);
    /* MLX affine, misaligned on purpose: w = scale * q + bias, f16 scales/biases, group 32 */
    for (int bits = 8; bits >= 4; bits -= 4) {
        uint8_t buf[1 + K * 8 / 8 + 64], sb[1 + 3 * 2 * 2];
        uint8_t *q = buf + 1, *sc = sb + 1, *bi = sb + 1 + 6;
        int qv[K];
        memset(buf, 0, sizeof buf);
        for (int i = 0; i < K; i++) {
            qv[i] = (int)(rnd_unif() * (1 << bits));
            int per = 32 / bits;
            uint32_t word;
            memcpy(&word, q + 4 * (i / per), 4);
            word |= (uint32_t)qv[i] << (bits * (i % per));
            memcpy(q + 4 * (i / per), &word, 4);
        }
        float s[3], b[3];
        for (int g = 0; g < 3; g++) {
            _Float16 hs = (_Float16)(rnd_unif() * 0.1 - 0.05), hb = (_Float16)(rnd_unif() - 0.5);
            memcpy(sc + 2 * g, &hs, 2);
            memcpy(bi + 2 * g, &hb, 2);
            s[g] = (float)hs;
            b[g] = (float)hb;
        }
        for (int i = 0; i < K; i++) {
            float sq = s[i / 32] * (float)qv[i];
            want[i] = sq + b[i / 32];
        }
        w = (dd_weight){.type = bits == 8 ? DD_Q8 : DD_Q4, .rows = 1, .cols = K, .data = q,
                        .row_bytes = (size_t)K * bits / 8, .scales = sc, .biases = bi, .sb_type = DD_F16,
                        .group = 32, .sb_row_bytes = 6};
        dd_weight_row_f32(&w, 0, got);
        assert_memory_equal(got, want, sizeof want);
    }
}

/* A quantized model and its dequantized float32 twin (export --weights f32) give bitwise-equal logits. */
static void twin(const char *kind, dd_dtype t) {
    dd_model *m, *f;
    dd_error e;
    if (dd_model_synthetic(&m, kind, t, 5, &e)) fail_msg("%s", e.msg);
    dd_export_params p = dd_export_default_params();
    p.convert = 1;
    p.dense_type = DD_F32;
    if (dd_model_export_mem(&f, m, &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dd_model_config(f)->weight_type, DD_F32);
    const dd_config *c = dd_model_config(m);
    int n = 3;
    float *h = rand_hidden(m, n);
    int32_t *codes = malloc((size_t)n * c->levels * sizeof *codes);
    for (int i = 0; i < n * c->levels; i++) codes[i] = (int32_t)(rnd_unif() * c->codebook_size);
    size_t nl = (size_t)n * (c->levels - 1) * c->codebook_size;
    float *a = malloc(nl * 4), *b = malloc(nl * 4), *a0 = malloc((size_t)n * c->codebook_size * 4),
          *b0 = malloc((size_t)n * c->codebook_size * 4);
    dd_decoder *dm = dec(m, n), *df = dec(f, n);
    if (dd_score(dm, n, h, codes, a, a0, &e) || dd_score(df, n, h, codes, b, b0, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(a, b, nl * 4);
    assert_memory_equal(a0, b0, (size_t)n * c->codebook_size * 4);
    printf("  %s %s: scores bitwise equal to its dequantized f32 twin\n", kind, dd_dtype_name(t));
    dd_decoder_free(dm);
    dd_decoder_free(df);
    free(h);
    free(codes);
    free(a);
    free(b);
    free(a0);
    free(b0);
    dd_model_free(f);
    dd_model_free(m);
}

static void test_quantized_twins(void **st) {
    (void)st;
    twin("tiny-gpt", DD_Q8);
    twin("tiny-gpt", DD_Q4);
    twin("tiny-llama", DD_Q8);
    twin("tiny-llama", DD_Q4);
    twin("tiny-llama", DD_BF16);
}

/* decode(rows) == score(decoded codes) + dd_sample_logits per level, and batch/row independence. */
static void consistency(const char *model_path, const char *kind, dd_sampling s) {
    dd_model *m;
    dd_error e;
    if (model_path ? dd_model_load(&m, model_path, &e) : dd_model_synthetic(&m, kind, DD_F16, 9, &e))
        fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    int n = 5, Q = c->levels, V = c->codebook_size;
    float *h = rand_hidden(m, n);
    uint64_t seeds[5], frames[5];
    for (int i = 0; i < n; i++) {
        seeds[i] = ((uint64_t)(rnd_unif() * 4294967296.0) << 32) | (uint64_t)(rnd_unif() * 4294967296.0);
        frames[i] = (uint64_t)(rnd_unif() * 1e12);
    }
    int32_t *codes = malloc((size_t)n * Q * 4), *one = malloc((size_t)Q * 4);
    dd_decoder *d = dec(m, n);
    if (dd_decode(d, n, h, NULL, seeds, frames, &s, codes, &e)) fail_msg("%s", e.msg);
    /* same stream alone, in reverse row order: same codes */
    for (int r = n - 1; r >= 0; r--) {
        if (dd_decode(d, 1, h + (size_t)r * c->input_dim, NULL, seeds + r, frames + r, &s, one, &e))
            fail_msg("%s", e.msg);
        assert_memory_equal(one, codes + (size_t)r * Q, (size_t)Q * 4);
    }
    size_t nl = (size_t)n * (Q - 1) * V;
    float *lg = malloc(nl * 4), *l0 = malloc((size_t)n * V * 4);
    if (dd_score(d, n, h, codes, lg, l0, &e)) fail_msg("%s", e.msg);
    for (int r = 0; r < n; r++)
        for (int l = 0; l < Q; l++) {
            const float *z = l == 0 ? l0 + (size_t)r * V : lg + ((size_t)r * (Q - 1) + l - 1) * V;
            int32_t code = -1;
            if (dd_sample_logits(z, V, &s, seeds[r], frames[r], l, &code, &e)) fail_msg("%s", e.msg);
            if (code != codes[(size_t)r * Q + l])
                fail_msg("%s row %d level %d: decode drew %d, score+sample %d", model_path ? model_path : kind, r, l,
                         codes[(size_t)r * Q + l], code);
        }
    /* a different frame index changes the draws (T > 0) */
    if (s.temperature > 0) {
        uint64_t f2[5];
        for (int i = 0; i < n; i++) f2[i] = frames[i] + 1;
        int32_t *c2 = malloc((size_t)n * Q * 4);
        if (dd_decode(d, n, h, NULL, seeds, f2, &s, c2, &e)) fail_msg("%s", e.msg);
        int same = 0;
        for (int i = 0; i < n * Q; i++) same += c2[i] == codes[i];
        assert_true(same < n * Q / 2);
        free(c2);
    }
    dd_decoder_free(d);
    free(h);
    free(codes);
    free(one);
    free(lg);
    free(l0);
    dd_model_free(m);
}

static void test_decode_is_score_plus_sample(void **st) {
    (void)st;
    dd_sampling csm = dd_sampling_default(), greedy = {0.0f, 0}, hot = {1.7f, 3};
    consistency(NULL, "tiny-gpt", csm);
    consistency(NULL, "tiny-llama", csm);
    consistency(NULL, "tiny-llama", greedy);
    consistency(NULL, "tiny-gpt", hot);
    consistency("tests/fixtures/csm_tiny", NULL, csm);
    consistency("tests/fixtures/gpt_q8.safetensors", NULL, csm);
}

/* llama3 RoPE: HF's _compute_llama3_parameters written out (wavelen thresholds, smooth interpolation). */
static void test_rope_frequencies(void **st) {
    (void)st;
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, "tests/fixtures/csm_tiny", &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    assert_true(c->has_rope && c->rope_scaling);
    int hd = c->head_dim;
    for (int j = 0; j < hd / 2; j++) {
        double base = 1.0 / pow(c->rope_theta, 2.0 * j / hd), wl = 2 * M_PI / base;
        double lo = c->rope_original_max_pos / c->rope_low_freq_factor,
               hi = c->rope_original_max_pos / c->rope_high_freq_factor, want;
        if (wl < hi) want = base;
        else if (wl > lo) want = base / c->rope_factor;
        else {
            double sm = (c->rope_original_max_pos / wl - c->rope_low_freq_factor) /
                        (c->rope_high_freq_factor - c->rope_low_freq_factor);
            want = (1 - sm) * base / c->rope_factor + sm * base;
        }
        assert_true(fabs(m->rope_inv_freq[j] - want) <= 1e-15 * want);
    }
    dd_model_free(m);
}

static void test_errors_write_nothing(void **st) {
    (void)st;
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_F32, 1, &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    int Q = c->levels;
    dd_decoder *d = dec(m, 2);
    float *h = rand_hidden(m, 3);
    int32_t codes[3 * 8], c0[3] = {1, 2, 3};
    dd_sampling s = dd_sampling_default();
    for (int i = 0; i < 3 * Q; i++) codes[i] = -99;
    assert_int_equal(dd_decode(d, 3, h, NULL, NULL, NULL, &s, codes, &e), DD_EINVAL); /* > max_batch */
    assert_non_null(strstr(e.msg, "max_batch 2"));
    h[c->input_dim + 7] = NAN;
    assert_int_equal(dd_decode(d, 2, h, NULL, NULL, NULL, &s, codes, &e), DD_ENUMERIC);
    assert_non_null(strstr(e.msg, "row 1, element 7"));
    h[c->input_dim + 7] = 0.5f;
    c0[1] = c->codebook_size;
    assert_int_equal(dd_decode(d, 2, h, c0, NULL, NULL, &s, codes, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "c0 row 1: code 64"));
    c0[1] = -1;
    assert_int_equal(dd_decode(d, 2, h, c0, NULL, NULL, &s, codes, &e), DD_EINVAL);
    s.temperature = -1;
    assert_int_equal(dd_decode(d, 1, h, NULL, NULL, NULL, &s, codes, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "temperature"));
    s.temperature = NAN;
    assert_int_equal(dd_decode(d, 1, h, NULL, NULL, NULL, &s, codes, &e), DD_EINVAL);
    s = dd_sampling_default();
    s.top_k = -3;
    assert_int_equal(dd_decode(d, 1, h, NULL, NULL, NULL, &s, codes, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "top_k -3"));
    for (int i = 0; i < 3 * Q; i++) assert_int_equal(codes[i], -99);
    /* score: a code out of range at any level */
    int32_t tc[2 * 8];
    for (int i = 0; i < 2 * Q; i++) tc[i] = 1;
    tc[Q + 5] = 1000;
    size_t nl = (size_t)2 * (Q - 1) * c->codebook_size;
    float *lg = malloc(nl * 4);
    for (size_t i = 0; i < nl; i++) lg[i] = 12345.0f;
    assert_int_equal(dd_score(d, 2, h, tc, lg, NULL, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "codes row 1, level 5: code 1000"));
    for (size_t i = 0; i < nl; i++) assert_true(lg[i] == 12345.0f);
    /* a backend this build lacks, or a bad max_batch */
    dd_decoder_params p = dd_decoder_default_params();
    p.max_batch = 0;
    dd_decoder *bad = (dd_decoder *)1;
    assert_int_equal(dd_decoder_create(&bad, m, &p, &e), DD_EINVAL);
    assert_null(bad);
    for (int i = 0; i < dd_backend_count(); i++) { /* each backend the library knows but cannot run here */
        if (dd_backend_available(dd_backend_at(i))) continue;
        p = dd_decoder_default_params();
        p.backend = dd_backend_at(i);
        assert_int_equal(dd_decoder_create(&bad, m, &p, &e), DD_EUNSUPPORTED);
        assert_null(bad);
        assert_non_null(strstr(e.msg, dd_backend_name(p.backend)));
    }
    free(lg);
    free(h);
    dd_decoder_free(d);
    dd_model_free(m);
}

int main(void) {
    th_seed_init("test_ref");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weight_rows),
        cmocka_unit_test(test_quantized_twins),
        cmocka_unit_test(test_decode_is_score_plus_sample),
        cmocka_unit_test(test_rope_frequencies),
        cmocka_unit_test(test_errors_write_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
