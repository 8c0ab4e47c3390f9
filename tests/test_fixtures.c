/* End-to-end parity with PyTorch / transformers: fixtures made by scripts/make_fixtures.py (float64 references
 * of GPT2Model-based native models in f16/bf16/q8 and a tiny CsmForConditionalGeneration in HF layout) and
 * scripts/make_fixtures_families.py / make_fixtures_qwen3tts.py (the Qwen3-Omni and Qwen3-TTS code predictors as
 * their reference code saves them; no head0 there: c0 is given, the fixture's codes column 0) and Kyutai Moshi's
 * depformer (transformers' MoshiForConditionalGeneration / MoshiDepthDecoder; a text token per row, logits of all Q
 * levels, level 0 from position 0; references with whole-frame attention as the original);
 * scripts/make_fixtures_qwen3_layouts.py: the whole Qwen3-Omni checkpoint (sharded; its predictor holds
 * qwen3omni_tiny's weights, so it passes qwen3omni_tiny's references) and Qwen3-Omni predictor directories quantized
 * by MLX itself (q8 group 32, q4 group 64: layer matrices, heads and code tables);
 * scripts/make_fixtures_kyutai_mlx.py: Kyutai's MLX checkpoints as moshi_mlx writes and quantizes them (q8, q4, bf16).
 * For every backend available in this build: teacher-forced logits within 1e-4 * max|ref| (per fixture),
 * level-0 logits likewise, and greedy codes identical. Outputs are NaN-poisoned before each call.
 * DD_TEST_ONLY=<pattern> runs the tests whose names match (cmocka's filter, e.g. "test_moshi_*"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "harness.h"
#include "loader_util.h"
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

/* m against fixture `name` on every backend; frees m */
static void check_model(dd_model *m, const char *name) {
    dd_error e;
    const dd_config *c = dd_model_config(m);
    int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    const int N = 6;
    float *hidden = load_arr(name, "hidden", 1, 2, (int64_t[]){N, I});
    int32_t *codes = load_arr(name, "codes", 0, 2, (int64_t[]){N, Q});
    const int has0 = c->has_head0; /* else c0 is given: codes[:, 0] (greedy[:, 0] is the same c0) */
    float *ref, *ref0 = NULL;
    int32_t *text = NULL;
    if (c->per_position) { /* Moshi: one text token per row; logits of all Q levels, level 0 from position 0 */
        text = load_arr(name, "text", 0, 1, (int64_t[]){N});
        float *all = load_arr(name, "logits", 1, 3, (int64_t[]){N, Q, V});
        ref = malloc((size_t)N * (Q - 1) * V * sizeof *ref);
        ref0 = malloc((size_t)N * V * sizeof *ref0);
        for (int r = 0; r < N; r++) {
            memcpy(ref0 + (size_t)r * V, all + (size_t)r * Q * V, (size_t)V * sizeof *ref);
            memcpy(ref + (size_t)r * (Q - 1) * V, all + ((size_t)r * Q + 1) * V, (size_t)(Q - 1) * V * sizeof *ref);
        }
        free(all);
    } else {
        ref = load_arr(name, "logits", 1, 3, (int64_t[]){N, Q - 1, V});
        if (has0) ref0 = load_arr(name, "logits0", 1, 2, (int64_t[]){N, V});
    }
    int32_t *greedy = load_arr(name, "greedy", 0, 2, (int64_t[]){N, Q});
    size_t nl = (size_t)N * (Q - 1) * V;
    float *lg = malloc(nl * sizeof *lg), *l0 = malloc((size_t)N * V * sizeof *l0);
    int32_t *out = malloc((size_t)N * Q * sizeof *out);
    double refmax = 0, ref0max = 0;
    for (size_t i = 0; i < nl; i++) refmax = fmax(refmax, fabs(ref[i]));
    for (int i = 0; has0 && i < N * V; i++) ref0max = fmax(ref0max, fabs(ref0[i]));
    int32_t *c0 = malloc((size_t)N * sizeof *c0);
    for (int i = 0; i < N; i++) c0[i] = greedy[i * Q];
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
        if (dd_score_text(d, N, hidden, text, codes, lg, has0 ? l0 : NULL, &e)) fail_msg("%s", e.msg);
        double err = 0, err0 = 0;
        for (size_t i = 0; i < nl; i++) err = fmax(err, isnan(lg[i]) ? INFINITY : fabs(lg[i] - ref[i]));
        for (int i = 0; has0 && i < N * V; i++) err0 = fmax(err0, isnan(l0[i]) ? INFINITY : fabs(l0[i] - ref0[i]));
        for (int i = 0; i < N * Q; i++) out[i] = -7;
        dd_sampling greedy_s = {.temperature = 0.0f, .top_k = 0};
        if (dd_decode_text(d, N, hidden, text, has0 ? NULL : c0, NULL, NULL, &greedy_s, out, &e)) fail_msg("%s", e.msg);
        int agree = 0;
        for (int i = 0; i < N * Q; i++) agree += out[i] == greedy[i];
        if (c->per_position) { /* c0 given (the greedy one): the rest follows the same */
            for (int i = 0; i < N * Q; i++) out[i] = -7;
            if (dd_decode_text(d, N, hidden, text, c0, NULL, NULL, &greedy_s, out, &e)) fail_msg("%s", e.msg);
            for (int i = 0; i < N * Q; i++) assert_int_equal(out[i], greedy[i]);
        }
        printf("  %-14s %-4s max rel logit err %.3g (levels 1..%d), level-0 %s%.3g; greedy codes %d/%d identical\n",
               name, dd_backend_name(be), err / refmax, Q - 1, has0 ? "" : "(no head0) ", has0 ? err0 / ref0max : 0.0,
               agree, N * Q);
        assert_true(err <= TH_LOGIT_REL * refmax);
        if (has0) assert_true(err0 <= TH_LOGIT_REL * ref0max);
        assert_int_equal(agree, N * Q);
        dd_decoder_free(d);
    }
    free(hidden);
    free(codes);
    free(ref);
    free(ref0);
    free(text);
    free(greedy);
    free(c0);
    free(lg);
    free(l0);
    free(out);
    dd_model_free(m);
}

static void check_fixture(const char *model_path, const char *name) {
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, model_path, &e)) fail_msg("%s", e.msg);
    check_model(m, name);
}

/* A Qwen3 directory converted to the native layout (qk_norm in the config, q_norm/k_norm tensors, the code tables
 * in model space: for Qwen3-TTS the projection, bias included, is applied at export, so f32 storage keeps the
 * fixture's tolerance) and read back passes the same fixture */
static void check_native_copy(const char *model_path, const char *name, dd_dtype dense) {
    dd_model *m, *n;
    dd_error e;
    if (dd_model_load(&m, model_path, &e)) fail_msg("%s", e.msg);
    dd_export_params p = dd_export_default_params();
    p.convert = 1;
    p.dense_type = dense;
    if (dd_model_export_mem(&n, m, &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dd_model_config(n)->has_qk_norm, dd_model_config(m)->has_qk_norm);
    assert_int_equal(dd_model_config(n)->per_position, dd_model_config(m)->per_position);
    assert_int_equal(dd_model_config(n)->text_vocab, dd_model_config(m)->text_vocab);
    assert_int_equal(dd_model_config(n)->embed_in_input_space, 0);
    printf("  %s as native %s:\n", name, dd_dtype_name(dense));
    dd_model_free(m);
    check_model(n, name);
}

static void test_gpt_f16(void **st) { (void)st; check_fixture(FX "gpt_f16.safetensors", "gpt_f16"); }
static void test_gpt_bf16(void **st) { (void)st; check_fixture(FX "gpt_bf16.safetensors", "gpt_bf16"); }
static void test_gpt_q8(void **st) { (void)st; check_fixture(FX "gpt_q8.safetensors", "gpt_q8"); }
static void test_csm_tiny(void **st) { (void)st; check_fixture(FX "csm_tiny", "csm_tiny"); }
/* The talker's next input embedding of the fixture's greedy codes (the reference code's own sum, float64) */
static void check_next_embedding(const char *model_path, const char *name) {
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, model_path, &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int N = 6, Q = c->levels, I = c->input_dim;
    int32_t *greedy = load_arr(name, "greedy", 0, 2, (int64_t[]){N, Q});
    float *ref = load_arr(name, "next_embed", 1, 2, (int64_t[]){N, I}), *out = malloc((size_t)N * I * 4);
    th_poison(out, (size_t)N * I);
    if (dd_next_embedding(m, N, greedy, out, &e)) fail_msg("%s", e.msg);
    double err = 0, mx = 0;
    for (int i = 0; i < N * I; i++) {
        err = fmax(err, isnan(out[i]) ? INFINITY : fabs(out[i] - ref[i]));
        mx = fmax(mx, fabs(ref[i]));
    }
    printf("  %s: the talker's next input embedding, max rel err %.3g\n", name, err / mx);
    assert_true(err <= 1e-6 * mx);
    greedy[3] = c->codebook_size; /* a code out of range is refused, by position */
    assert_int_equal(dd_next_embedding(m, N, greedy, out, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "codes[0, 3]"));
    /* a converted native copy keeps only projected tables: refused */
    dd_model *n;
    dd_export_params p = dd_export_default_params();
    if (dd_model_export_mem(&n, m, &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dd_next_embedding(n, N, greedy, out, &e), DD_EUNSUPPORTED);
    dd_model_free(n);
    free(greedy);
    free(ref);
    free(out);
    dd_model_free(m);
}

/* the Qwen3-Omni predictor directory holds the talker's codec table in a second file */
static void test_qwen3omni_tiny(void **st) {
    (void)st;
    check_fixture(FX "qwen3omni_tiny", "qwen3omni_tiny");
    check_next_embedding(FX "qwen3omni_tiny", "qwen3omni_tiny");
}
static void test_qwen3tts_tiny(void **st) {
    (void)st;
    check_fixture(FX "qwen3tts_tiny", "qwen3tts_tiny");
    check_next_embedding(FX "qwen3tts_tiny", "qwen3tts_tiny");
}
/* Bad Qwen3 directories: refused with the file and tensor named, nothing loaded */
static void test_qwen3_bad_dirs(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("qwen3"), 0);
    char p[256], q[256];
    size_t n;
    uint8_t *cfg = th_slurp(FX "qwen3omni_tiny/config.json", &n), *mdl;
    TH_PATH(p, "config.json");
    th_write_bytes(p, cfg, n);
    mdl = th_slurp(FX "qwen3omni_tiny/model.safetensors", &n);
    TH_PATH(q, "model.safetensors");
    th_write_bytes(q, mdl, n);
    dd_model *m = (dd_model *)1;
    dd_error e;
    /* the talker's codec table (c0's input row) is in a file the directory lacks */
    assert_int_equal(dd_model_load(&m, th_dir, &e), DD_EMODEL);
    assert_null(m);
    assert_non_null(strstr(e.msg, "talker.model.codec_embedding.weight"));
    /* the file passed for its directory says the same */
    assert_int_equal(dd_model_load(&m, q, &e), DD_EMODEL);
    assert_non_null(strstr(e.msg, "talker.model.codec_embedding.weight"));
    /* a config whose code-group count disagrees with the tensors: the first tensor off names itself */
    char *c2 = strdup((const char *)cfg), *at = strstr(c2, "\"num_code_groups\": 8");
    assert_non_null(at);
    at[strlen("\"num_code_groups\": ")] = '9';
    TH_PATH(p, "config.json");
    th_write_bytes(p, c2, strlen(c2));
    uint8_t *tab = th_slurp(FX "qwen3omni_tiny/talker_codec_embedding.safetensors", &n);
    TH_PATH(p, "talker_codec_embedding.safetensors");
    th_write_bytes(p, tab, n);
    assert_int_equal(dd_model_load(&m, th_dir, &e), DD_EMODEL);
    assert_non_null(strstr(e.msg, "lm_head.7.weight"));
    printf("  refused: %s\n", e.msg);
    free(c2);
    free(cfg);
    free(mdl);
    free(tab);
    assert_int_equal(th_rm_rf(th_dir), 0);
}

/* Kyutai Moshi's depformer as transformers saves it: the whole MoshiForConditionalGeneration (sharded, tensors under
 * depth_decoder.) and MoshiDepthDecoder alone; moshi_q12 has Q 12 > transformers' sliding window 8 (its fixture
 * follows the original's whole-frame attention, where transformers' cached generate differs) */
static void test_moshi_tiny(void **st) {
    (void)st;
    check_fixture(FX "moshi_tiny", "moshi_tiny");
    check_fixture(FX "moshi_tiny/model.safetensors.index.json", "moshi_tiny");
    check_fixture(FX "moshi_tiny_depth", "moshi_tiny");
    check_fixture(FX "moshi_q12", "moshi_q12");
}

/* Kyutai's own checkpoint (the moshi package's LMModel state dict, whole tiny LM in one file; config.json beside it
 * with the kwargs shapes cannot tell): the newer per-step names (in_projs.{p}) and the older stacked ones
 * (in_proj_weight, out_proj.weight), and converted to the native layout; references from the package's own
 * depformer forward (float64) */
static void test_kyutai_tiny(void **st) {
    (void)st;
    check_fixture(FX "kyutai_tiny/model.safetensors", "kyutai_tiny");
    check_fixture(FX "kyutai_tiny_legacy/model.safetensors", "kyutai_tiny");
    check_native_copy(FX "kyutai_tiny/model.safetensors", "kyutai_tiny", DD_F32); /* converted to the native layout */
}

/* Kyutai checkpoints refused with the file and key or tensor named: no config.json beside (the defaults of Moshi 7B:
 * 16 heads do not divide the tiny width 32), config keys depthdec does not run */
static void kyutai_refused(const char *cfg, const char *want) {
    char p[256];
    size_t n;
    uint8_t *b = th_slurp(FX "kyutai_tiny/model.safetensors", &n);
    TH_PATH(p, "model.safetensors");
    th_write_bytes(p, b, n);
    free(b);
    char cp[256];
    TH_PATH(cp, "config.json");
    if (cfg) th_write_bytes(cp, cfg, strlen(cfg));
    else remove(cp);
    dd_model *m = NULL;
    dd_error e;
    assert_int_not_equal(dd_model_load(&m, p, &e), DD_OK);
    assert_null(m);
    printf("  refused: %s\n", e.msg);
    assert_non_null(strstr(e.msg, want));
}

static void test_kyutai_bad(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("kyutai"), 0);
    kyutai_refused(NULL, "depformer_num_heads");
    kyutai_refused("{\"depformer_num_heads\": 4, \"norm\": \"rms_norm\", \"depformer_pos_emb\": \"sin\"}",
                   "depformer_pos_emb");
    kyutai_refused("{\"depformer_num_heads\": 4, \"norm\": \"layer_norm\"}", "config.json: norm");
    kyutai_refused("{\"depformer_num_heads\": 3, \"norm\": \"rms_norm\"}", "depformer_num_heads 3");
    kyutai_refused("{\"depformer_num_heads\": 4, \"depformer_weights_per_step_schedule\": [0, 0, 1, 1, 2, 2]}",
                   "schedule");
    assert_int_equal(th_rm_rf(th_dir), 0);
}

/* Kyutai's MLX checkpoints (moshi_mlx's Lm as its Module.save_weights writes it: the whole tiny Lm in one file, the
 * kwargs in config.json beside): q8 group 64 and q4 group 32 as nn.quantize made kyutai/moshiko-mlx-q8/-q4 (every
 * Linear and Embedding quantized, bf16 scales; each slice with its own norms), bf16 as moshika-mlx-bf16 (the norms
 * the same in every slice, so it converts to the native layout); references float64 from the stored weights, checked
 * by the script against moshi_mlx's own float32 run. The q8 model's differing per-slice norms have no place in the
 * native layout: its export is refused by name. */
static void test_kyutai_mlx(void **st) {
    (void)st;
    static const struct { const char *path, *name; dd_dtype type; int group; } fx[] = {
        {FX "kyutai_mlx_q8/model.q8.safetensors", "kyutai_mlx_q8", DD_Q8, 64},
        {FX "kyutai_mlx_q4/model.q4.safetensors", "kyutai_mlx_q4", DD_Q4, 32},
        {FX "kyutai_mlx_bf16/model.safetensors", "kyutai_mlx_bf16", DD_BF16, 0}};
    dd_error e;
    for (size_t k = 0; k < sizeof fx / sizeof *fx; k++) {
        dd_model *m;
        if (dd_model_load(&m, fx[k].path, &e)) fail_msg("%s", e.msg);
        const dd_config *c = dd_model_config(m);
        assert_int_equal(c->weight_type, fx[k].type);
        assert_int_equal(c->quant_group, fx[k].group);
        assert_true(c->per_position && c->levels == 4 && c->layers == 2 && c->kv_heads == c->heads);
        assert_true(c->norm_eps == 1e-8f); /* moshi_mlx's RMSNorm, whatever "norm" says */
        check_model(m, fx[k].name);
    }
    check_native_copy(FX "kyutai_mlx_bf16/model.safetensors", "kyutai_mlx_bf16", DD_F32);
    dd_model *m, *n = (dd_model *)1;
    if (dd_model_load(&m, fx[0].path, &e)) fail_msg("%s", e.msg);
    dd_export_params p = dd_export_default_params();
    assert_int_equal(dd_model_export_mem(&n, m, &p, &e), DD_EUNSUPPORTED);
    printf("  refused: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "slice 1's RMSNorm"));
    dd_model_free(m);
}

static void put_file(const char *src, const char *name, const char *text);

/* One edit of the q4 fixture (tensors dropped, added or replaced; config.json text) refused with `code`, naming `want` */
static void kyutai_mlx_refused(tset *ts, const char *cfg, dd_status code, const char *want) {
    char p[256], cp[256];
    TH_PATH(p, "model.q4.safetensors");
    TH_PATH(cp, "config.json");
    ts_write(ts, p);
    if (cfg) th_write_bytes(cp, cfg, strlen(cfg));
    else remove(cp);
    expect_fail_in(p, code, want, NULL);
    dd_error e;
    dd_model *m;
    dd_model_load(&m, p, &e);
    printf("  refused: %s\n", e.msg);
}

static void test_kyutai_mlx_bad(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("kyutai_mlx"), 0);
    size_t n;
    char *cfg = (char *)th_slurp(FX "kyutai_mlx_q4/config.json", &n), *c2 = malloc(n + 200), *at;
    tset *ts = ts_load(FX "kyutai_mlx_q4/model.q4.safetensors");
    char p[256];
    TH_PATH(p, "model.q4.safetensors");
    ts_write(ts, p);
    put_file(NULL, "config.json", cfg);
    dd_model *m = load_ok(p); /* the copy loads */
    dd_model_free(m);
    /* config.json: none (16 heads and the other defaults are only for Moshi 7B's dims), a positional embedding, a
     * window shorter than the frame, a dimension the tensors contradict */
    kyutai_mlx_refused(ts, NULL, DD_EMODEL, "depformer_num_heads");
    strcpy(c2, cfg);
    assert_non_null(at = strstr(c2, "\"none\""));
    memcpy(at, "\"rope\"", 6);
    kyutai_mlx_refused(ts, c2, DD_EUNSUPPORTED, "depformer_pos_emb \"rope\"");
    strcpy(c2, cfg);
    assert_non_null(at = strstr(c2, "\"depformer_context\": 4"));
    at[strlen("\"depformer_context\": ")] = '2';
    kyutai_mlx_refused(ts, c2, DD_EUNSUPPORTED, "depformer_context");
    strcpy(c2, cfg);
    assert_non_null(at = strstr(c2, "\"dep_q\": 4"));
    at[strlen("\"dep_q\": ")] = '5';
    kyutai_mlx_refused(ts, c2, DD_EMODEL, "\"dep_q\" is not 4");
    /* tensors: a quantized matrix without its scales, a missing matrix, features the engine does not run (biases,
     * low-rank tables), a slice or layer more than the rest, GQA (moshi_mlx has none), 2-bit, group 16 */
    snap *sv = ts_save(ts);
    ts_drop(ts, "depformer.slices.3.linear_in.scales");
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "depformer.slices.3.linear_in.biases");
    ts_restore(ts, sv);
    sv = ts_save(ts);
    ts_drop(ts, "depformer.slices.2.transformer.layers.1.gating.linear_out.weight");
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "depformer.slices.2.transformer.layers.1.gating.linear_out");
    ts_restore(ts, sv);
    static const char *const added[] = {"depformer.slices.2.transformer.layers.1.self_attn.in_proj.bias",
                                        "depformer.slices.1.emb.low_rank.weight", "depformer.slices.0.emb.out1.weight"};
    for (size_t k = 0; k < sizeof added / sizeof *added; k++) {
        sv = ts_save(ts);
        ts_put(ts, added[k], DD_ST_BF16, 1, (int64_t[]){64});
        kyutai_mlx_refused(ts, cfg, DD_EUNSUPPORTED, added[k]);
        ts_restore(ts, sv);
    }
    sv = ts_save(ts);
    ts_put(ts, "depformer.slices.4.emb.weight", DD_ST_BF16, 2, (int64_t[]){33, 64});
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "more slices");
    ts_restore(ts, sv);
    sv = ts_save(ts);
    ts_put(ts, "depformer.slices.2.transformer.layers.2.norm1.weight", DD_ST_BF16, 1, (int64_t[]){64});
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "more layers");
    ts_restore(ts, sv);
    sv = ts_save(ts);
    ts_put(ts, "depformer.slices.0.transformer.layers.0.self_attn.in_proj.weight", DD_ST_U32, 2, (int64_t[]){128, 8});
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "no GQA");
    ts_restore(ts, sv);
    sv = ts_save(ts); /* 2-bit heads: 4 words for 64 columns */
    ts_put(ts, "depformer.slices.0.linear_out.weight", DD_ST_U32, 2, (int64_t[]){32, 4});
    kyutai_mlx_refused(ts, cfg, DD_EUNSUPPORTED, "at 2 bits");
    ts_restore(ts, sv);
    sv = ts_save(ts); /* group 16: 4 groups of 64 columns */
    ts_put(ts, "depformer.slices.1.linear_out.scales", DD_ST_BF16, 2, (int64_t[]){32, 4});
    ts_put(ts, "depformer.slices.1.linear_out.biases", DD_ST_BF16, 2, (int64_t[]){32, 4});
    kyutai_mlx_refused(ts, cfg, DD_EMODEL, "group size 16");
    ts_restore(ts, sv);
    ts_free(ts);
    free(cfg);
    free(c2);
    assert_int_equal(th_rm_rf(th_dir), 0);
}

/* The fixture file `src` copied into th_dir as `name`; `text` (NUL-terminated) written there instead when not NULL */
static void put_file(const char *src, const char *name, const char *text) {
    char p[256];
    size_t n;
    uint8_t *b = text ? NULL : th_slurp(src, &n);
    TH_PATH(p, name);
    th_write_bytes(p, text ? (const void *)text : b, text ? strlen(text) : n);
    free(b);
}

/* Bad Moshi directories: refused naming the file and tensor, nothing loaded */
static void test_moshi_bad_dirs(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("moshi"), 0);
    size_t n;
    char *cfg = (char *)th_slurp(FX "moshi_tiny_depth/config.json", &n), *c2 = strdup(cfg), *at;
    put_file(NULL, "config.json", cfg);
    put_file(FX "moshi_tiny_depth/model.safetensors", "model.safetensors", NULL);
    dd_model *m = (dd_model *)1;
    dd_error e;
    assert_int_equal(dd_model_load(&m, th_dir, &e), DD_OK); /* the copy loads */
    dd_model_free(m);
    /* one more codebook in the config than the tensors have: the first stack off names itself */
    assert_non_null(at = strstr(c2, "\"num_codebooks\": 8"));
    at[strlen("\"num_codebooks\": ")] = '9';
    put_file(NULL, "config.json", c2);
    m = (dd_model *)1;
    assert_int_equal(dd_model_load(&m, th_dir, &e), DD_EMODEL);
    assert_null(m);
    assert_non_null(strstr(e.msg, "embed_tokens.7.weight"));
    printf("  refused: %s\n", e.msg);
    /* an odd ffn_dim (fc1 must hold gate and up halves) */
    strcpy(c2, cfg);
    assert_non_null(at = strstr(c2, "\"ffn_dim\": 64"));
    at[strlen("\"ffn_dim\": 6")] = '3';
    put_file(NULL, "config.json", c2);
    assert_int_equal(dd_model_load(&m, th_dir, &e), DD_EMODEL);
    assert_non_null(strstr(e.msg, "ffn_dim 63 is odd"));
    printf("  refused: %s\n", e.msg);
    /* the full model's index lists a shard that is gone */
    assert_int_equal(th_rm_rf(th_dir), 0);
    assert_int_equal(th_tmpdir("moshi"), 0);
    const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00004.safetensors",
                           "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors"};
    for (int i = 0; i < 5; i++) {
        char src[256];
        snprintf(src, sizeof src, FX "moshi_tiny/%s", files[i]);
        put_file(src, files[i], NULL);
    }
    assert_int_not_equal(dd_model_load(&m, th_dir, &e), DD_OK);
    assert_non_null(strstr(e.msg, "model-00004-of-00004.safetensors"));
    printf("  refused: %s\n", e.msg);
    free(c2);
    free(cfg);
    assert_int_equal(th_rm_rf(th_dir), 0);
}

/* Moshi converted to the native layout (per_position, text_vocab, stacks [Q, out, in]) and read back: dense f32 /
 * bf16 pass the fixture as it is */
static void test_moshi_native(void **st) {
    (void)st;
    check_native_copy(FX "moshi_tiny", "moshi_tiny", DD_BF16);
    check_native_copy(FX "moshi_q12", "moshi_q12", DD_F32);
}

static void test_qwen3_native(void **st) {
    (void)st;
    check_native_copy(FX "qwen3omni_tiny", "qwen3omni_tiny", DD_BF16);
    check_native_copy(FX "qwen3tts_tiny", "qwen3tts_tiny", DD_F32);
}

/* The whole Qwen3-Omni checkpoint (Qwen3OmniMoeForConditionalGeneration.save_pretrained, 3 shards; the predictor and
 * the talker's codec table in shards 1-2, shard 3 only the thinker): the predictor is qwen3omni_tiny's, so it passes
 * qwen3omni_tiny's references, through the directory or its index file */
static void test_qwen3omni_full(void **st) {
    (void)st;
    check_fixture(FX "qwen3omni_full", "qwen3omni_tiny");
    check_fixture(FX "qwen3omni_full/model.safetensors.index.json", "qwen3omni_tiny");
    check_next_embedding(FX "qwen3omni_full", "qwen3omni_tiny");
}

#define OMNI_SHARDS 3
static const char *const omni_files[] = {"config.json", "model.safetensors.index.json",
                                         "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors"};

/* th_dir = a copy of qwen3omni_full, leaving out file `skip` (NULL: none) */
static void omni_copy(const char *skip) {
    assert_int_equal(th_rm_rf(th_dir), 0);
    mkdir_ok(th_dir);
    for (size_t i = 0; i < sizeof omni_files / sizeof *omni_files; i++) {
        if (skip && strcmp(omni_files[i], skip) == 0) continue;
        char src[256];
        snprintf(src, sizeof src, FX "qwen3omni_full/%s", omni_files[i]);
        put_file(src, omni_files[i], NULL);
    }
}

/* th_dir's config.json with `edit` applied to its talker_config (jansson), or to the top object when top */
static void omni_config(void (*edit)(json_t *top, json_t *talker)) {
    char p[256];
    json_error_t je;
    json_t *j = json_load_file(FX "qwen3omni_full/config.json", 0, &je);
    assert_non_null(j);
    edit(j, json_object_get(j, "talker_config"));
    TH_PATH(p, "config.json");
    write_json(p, j);
    json_decref(j);
}
static void no_talker(json_t *top, json_t *t) { (void)t, json_object_del(top, "talker_config"); }
static void no_predictor(json_t *top, json_t *t) { (void)top, json_object_del(t, "code_predictor_config"); }
static void no_text_config(json_t *top, json_t *t) { (void)top, json_object_del(t, "text_config"); }
static void wide_talker(json_t *top, json_t *t) { (void)top, json_set(json_object_get(t, "text_config"), "hidden_size", "48"); }
static void groups_differ(json_t *top, json_t *t) { (void)top, json_set(t, "num_code_groups", "16"); }

/* Bad whole Qwen3-Omni directories: refused naming the file, shard, key or tensor; a shard holding nothing the
 * predictor needs is never opened (its absence does not matter) */
static void test_qwen3omni_full_bad(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("omni"), 0);
    char p[256], shard[128] = "";
    /* the thinker-only shard is not needed: the directory without it passes the fixture */
    omni_copy("model-00003-of-00003.safetensors");
    check_fixture(th_dir, "qwen3omni_tiny");
    /* a shard that holds predictor tensors is missing: named */
    omni_copy("model-00001-of-00003.safetensors");
    expect_fail_in(th_dir, DD_EIO, "model-00001-of-00003.safetensors", NULL);
    /* a predictor tensor missing from its shard and from the index: named */
    omni_copy(NULL);
    const char *gone = "talker.code_predictor.lm_head.3.weight";
    json_error_t je;
    json_t *ix = json_load_file(FX "qwen3omni_full/model.safetensors.index.json", 0, &je);
    assert_non_null(ix);
    json_t *wm = json_object_get(ix, "weight_map");
    assert_true(json_is_string(json_object_get(wm, gone)));
    snprintf(shard, sizeof shard, "%s", json_string_value(json_object_get(wm, gone)));
    json_object_del(wm, gone);
    TH_PATH(p, "model.safetensors.index.json");
    write_json(p, ix);
    json_decref(ix);
    char src[256];
    snprintf(src, sizeof src, FX "qwen3omni_full/%s", shard);
    tset *ts = ts_load(src);
    ts_drop(ts, gone);
    TH_PATH(p, shard);
    ts_write(ts, p);
    ts_free(ts);
    expect_fail_in(th_dir, DD_EMODEL, th_dir, gone);
    /* configs: no talker (enable_audio_output false), no code predictor, no talker text_config, a talker wider than
     * the predictor (Qwen3-Omni has no projection), the talker's code-group count disagreeing */
    omni_copy(NULL);
    char cfg[256];
    TH_PATH(cfg, "config.json");
    omni_config(no_talker);
    expect_fail_in(th_dir, DD_EMODEL, cfg, "\"talker_config\"");
    omni_config(no_predictor);
    expect_fail_in(th_dir, DD_EMODEL, cfg, "talker_config.code_predictor_config");
    omni_config(no_text_config);
    expect_fail_in(th_dir, DD_EMODEL, cfg, "talker_config.text_config");
    omni_config(wide_talker);
    expect_fail_in(th_dir, DD_EMODEL, cfg, "talker_config.text_config.hidden_size 48 differs");
    omni_config(groups_differ);
    expect_fail_in(th_dir, DD_EMODEL, cfg, "talker_config.num_code_groups");
    assert_int_equal(th_rm_rf(th_dir), 0);
}

/* Qwen3-Omni predictor directories quantized by MLX (layer matrices, heads lm_head.{j}, code tables
 * codec_embedding.{j} and the talker's table: U32 + bf16 scales/biases); references from the float32-dequantized
 * weights. Converted to native f32 (the dequantized values exactly) they pass too. */
static void test_qwen3_mlx(void **st) {
    (void)st;
    check_fixture(FX "qwen3omni_mlx_q8", "qwen3omni_mlx_q8");
    check_next_embedding(FX "qwen3omni_mlx_q8", "qwen3omni_mlx_q8");
    check_fixture(FX "qwen3omni_mlx_q4", "qwen3omni_mlx_q4");
    check_next_embedding(FX "qwen3omni_mlx_q4", "qwen3omni_mlx_q4");
    check_native_copy(FX "qwen3omni_mlx_q4", "qwen3omni_mlx_q4", DD_F32);
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, FX "qwen3omni_mlx_q8", &e)) fail_msg("%s", e.msg);
    assert_int_equal(dd_model_config(m)->quant_bits, 8);
    assert_int_equal(dd_model_config(m)->quant_group, 32);
    dd_model_free(m);
}

/* th_dir = qwen3omni_mlx_q8 with its model.safetensors edited by `edit` and config.json `cfg` (NULL: as is) */
static void mlx_case(void (*edit)(tset *), const char *cfg) {
    assert_int_equal(th_rm_rf(th_dir), 0);
    mkdir_ok(th_dir);
    put_file(FX "qwen3omni_mlx_q8/talker_codec_embedding.safetensors", "talker_codec_embedding.safetensors", NULL);
    put_file(FX "qwen3omni_mlx_q8/config.json", "config.json", cfg);
    tset *ts = ts_load(FX "qwen3omni_mlx_q8/model.safetensors");
    if (edit) edit(ts);
    char p[256];
    TH_PATH(p, "model.safetensors");
    ts_write(ts, p);
    ts_free(ts);
}
/* lm_head.4 dense bf16 among quantized heads */
static void head_dense(tset *ts) {
    ts_drop(ts, "lm_head.4.scales");
    ts_drop(ts, "lm_head.4.biases");
    ts_put(ts, "lm_head.4.weight", DD_ST_BF16, 2, (int64_t[]){64, 64});
}
/* codec_embedding.2 quantized with group 64 (1 scale per row half) among group-32 tables */
static void table_group64(tset *ts) {
    ts_put(ts, "model.codec_embedding.2.scales", DD_ST_BF16, 2, (int64_t[]){64, 1});
    ts_put(ts, "model.codec_embedding.2.biases", DD_ST_BF16, 2, (int64_t[]){64, 1});
}
/* lm_head.0 without its biases */
static void head_no_biases(tset *ts) { ts_drop(ts, "lm_head.0.biases"); }

static void test_qwen3_mlx_bad(void **st) {
    (void)st;
    assert_int_equal(th_tmpdir("qmlx"), 0);
    size_t n;
    char *cfg = (char *)th_slurp(FX "qwen3omni_mlx_q8/config.json", &n);
    mlx_case(NULL, NULL); /* the copy loads */
    dd_model *m = load_ok(th_dir);
    dd_model_free(m);
    mlx_case(head_dense, NULL);
    expect_fail_in(th_dir, DD_EMODEL, "lm_head.4.weight", "heads must share one dtype");
    mlx_case(table_group64, NULL);
    expect_fail_in(th_dir, DD_EMODEL, "model.codec_embedding.2", "group");
    mlx_case(head_no_biases, NULL);
    expect_fail_in(th_dir, DD_EMODEL, "lm_head.0.scales", "lm_head.0.biases");
    /* the config's quantization disagrees with the tensors: the first quantized tensor read names itself */
    json_error_t je;
    json_t *j = json_loads(cfg, 0, &je);
    assert_non_null(j);
    json_set(j, "quantization", "{\"group_size\": 32, \"bits\": 4}");
    char *c2 = json_dumps(j, 0);
    mlx_case(NULL, c2);
    expect_fail_in(th_dir, DD_EMODEL, "config says 4-bit", NULL);
    free(c2);
    /* without the config's quantization, the stacking itself refuses a table of another group */
    json_object_del(j, "quantization");
    json_object_del(j, "quantization_config");
    c2 = json_dumps(j, 0);
    mlx_case(NULL, c2);
    m = load_ok(th_dir); /* bits and group from the shapes */
    assert_int_equal(dd_model_config(m)->quant_bits, 8);
    dd_model_free(m);
    mlx_case(table_group64, c2);
    expect_fail_in(th_dir, DD_EMODEL, "model.codec_embedding.2.weight", "code tables must share one quantization");
    free(c2);
    /* mlx-lm's per-module overrides are not supported: refused by key */
    json_set(j, "quantization", "{\"group_size\": 32, \"bits\": 8, \"lm_head.0\": {\"group_size\": 64, \"bits\": 4}}");
    c2 = json_dumps(j, 0);
    mlx_case(NULL, c2);
    expect_fail_in(th_dir, DD_EUNSUPPORTED, "config.json", "quantization[\"lm_head.0\"]");
    free(c2);
    json_decref(j);
    free(cfg);
    assert_int_equal(th_rm_rf(th_dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_f16),
        cmocka_unit_test(test_gpt_bf16),
        cmocka_unit_test(test_gpt_q8),
        cmocka_unit_test(test_csm_tiny),
        cmocka_unit_test(test_qwen3omni_tiny),
        cmocka_unit_test(test_qwen3tts_tiny),
        cmocka_unit_test(test_qwen3_native),
        cmocka_unit_test(test_qwen3_bad_dirs),
        cmocka_unit_test(test_qwen3omni_full),
        cmocka_unit_test(test_qwen3omni_full_bad),
        cmocka_unit_test(test_qwen3_mlx),
        cmocka_unit_test(test_qwen3_mlx_bad),
        cmocka_unit_test(test_moshi_tiny),
        cmocka_unit_test(test_moshi_native),
        cmocka_unit_test(test_moshi_bad_dirs),
        cmocka_unit_test(test_kyutai_tiny),
        cmocka_unit_test(test_kyutai_bad),
        cmocka_unit_test(test_kyutai_mlx),
        cmocka_unit_test(test_kyutai_mlx_bad),
    };
    lt_verbose = getenv("DD_TEST_VERBOSE") && atoi(getenv("DD_TEST_VERBOSE")) > 0; /* print the refusals */
    if (getenv("DD_TEST_ONLY") && *getenv("DD_TEST_ONLY")) cmocka_set_test_filter(getenv("DD_TEST_ONLY")); /* e.g. "test_moshi_*" */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
