/* Tests of HF CSM directories (src/model/config.c and src/model/model.c: transformers' CsmForConditionalGeneration layout,
 * SPEC §4), generated from random bf16 weights with the HF names plus backbone / codec / text tensors to be
 * ignored: one file or sharded through model.safetensors.index.json, transformers 4 and 5 configs, the audio
 * table under either name; then missing shards, path traversal in the index, broken configs and tensors missing,
 * misshapen or of the wrong dtype, each refused naming the file and the key or tensor (loader_util.h); and the
 * PyTorch-made csm_tiny fixture. Valid variants must score bitwise alike. Data are fresh random each run (seed
 * printed; DD_TEST_SEED=<n> replays). DD_TEST_VERBOSE=1 prints every loader message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "loader_util.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* dir written from ts and cfg (sharded or not) loads, holds ts's values (the audio table under the name `table`)
 * and scores bitwise like a. */
static void expect_csm_like(const dd_model *a, const char *dir, const tset *ts, const json_t *cfg, int sharded,
                            const char *table) {
    csm_write(dir, ts, cfg, sharded);
    dd_model *b = load_ok(dir);
    csm_check(b, ts, table);
    expect_same_scores(a, b);
    dd_model_free(b);
}

static void test_csm_valid(void **state) {
    char dir[128];
    tset *ts = csm_tensors();
    json_t *cfg = csm_config(0);
    TH_PATH(dir, "csm");
    csm_write(dir, ts, cfg, 0);
    dd_model *a = load_ok(dir);
    csm_check(a, ts, k_tab_bb);
    assert_string_equal(dd_model_source(a), dir);

    /* transformers 4.x config (rope_theta + rope_scaling, with "rope_type" or "type"), theta outside
     * rope_parameters, backbone width from the top-level hidden_size */
    static const int flags[] = {CSM_V4, CSM_V4 | CSM_V4_TYPE, CSM_THETA_OUT, CSM_NO_BBHS};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        json_t *c4 = csm_config(flags[i]);
        TH_PATH(dir, "csm_flags_%zu", i);
        expect_csm_like(a, dir, ts, c4, 0, k_tab_bb);
        json_decref(c4);
    }
    /* the table under the depth decoder's name, and under both names */
    ts_rename(ts, k_tab_bb, k_tab_dd);
    TH_PATH(dir, "csm_table_dd");
    expect_csm_like(a, dir, ts, cfg, 0, k_tab_dd);
    const dd_st_out *tab = ts_get(ts, k_tab_dd);
    dd_st_out both = *tab;
    snprintf(both.name, sizeof both.name, "%s", k_tab_bb);
    ts->t[ts->n++] = both;
    TH_PATH(dir, "csm_table_both");
    expect_csm_like(a, dir, ts, cfg, 0, k_tab_dd);
    ts->n--;
    ts_rename(ts, k_tab_dd, k_tab_bb);

    /* sharded over two files through model.safetensors.index.json */
    TH_PATH(dir, "csm_sharded");
    expect_csm_like(a, dir, ts, cfg, 1, k_tab_bb);
    /* a shard every tensor of which is unused still opens fine; shards listed twice are opened once */
    char p[256];
    snprintf(p, sizeof p, "%s/extra.safetensors", dir);
    dd_st_out extra = *ts_get(ts, "codec_model.x");
    snprintf(extra.name, sizeof extra.name, "codec_model.y");
    write_st(p, &extra, 1, NULL, NULL);
    index_edit(dir, "codec_model.y", "\"extra.safetensors\"");
    dd_model *b = load_ok(dir);
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
    TH_PATH(dir, "csmx_missing");
    csm_write(dir, ts, cfg, 1);
    index_edit(dir, "lm_head.weight", "\"model-00003-of-00003.safetensors\"");
    expect_fail(dir, DD_EIO, "model-00003-of-00003.safetensors");

    TH_PATH(dir, "csmx_dup");
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

    TH_PATH(p, "x");
    write_st(p, ts->t, ts->n, "format", "pt"); /* a complete model where "../x" points */
    static const char *const bad_shards[] = {"\"../x\"", "\"..\"", "\"/etc/passwd\"", "\"sub/x\"", "\"\"", "5",
                                             "null"};
    for (size_t i = 0; i < sizeof bad_shards / sizeof *bad_shards; i++) {
        TH_PATH(dir, "csmx_trav_%zu", i);
        csm_write(dir, ts, cfg, 1);
        index_edit(dir, "lm_head.weight", bad_shards[i]);
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        expect_fail_in(dir, DD_EMODEL, idx, "lm_head.weight");
    }
    TH_PATH(dir, "csmx_trav_0");
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    expect_fail_in(dir, DD_EMODEL, idx, "'../x'");

    TH_PATH(dir, "csmx_index");
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
    TH_PATH(dir, "csmx_badshard");
    csm_write(dir, ts, cfg, 1);
    snprintf(p, sizeof p, "%s/%s", dir, k_shard[1]);
    {
        size_t n;
        uint8_t *img = th_slurp(p, &n);
        th_write_bytes(p, img, n - 2);
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
        TH_PATH(dir, "csmx_cfg_%zu", i);
        csm_write(dir, ts, c, 0);
        json_decref(c);
        snprintf(p, sizeof p, "%s/config.json", dir);
        expect_fail_in(dir, cfgs[i].want, cfgs[i].in_cfg ? p : dir, cfgs[i].also);
    }
    TH_PATH(dir, "csmx_cfg_0");
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
        TH_PATH(dir, "csmx_drop_%zu", i);
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
        TH_PATH(dir, "csmx_notable");
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
        TH_PATH(dir, "csmx_shape_%zu", i);
        csm_write(dir, ts, cfg, 0);
        char pre[160];
        expect_fail(dir, shp[i].want, prefix_of(shp[i].name, pre, sizeof pre));
        ts_restore(ts, s);
    }
    json_decref(cfg);
    ts_free(ts);
}

/* ---- the fixture written by transformers (when present) --------------------------------------------------- */

static void test_csm_fixture(void **state) {
    if (access("tests/fixtures/csm_tiny/config.json", R_OK) != 0) skip();
    dd_model *m = load_ok("tests/fixtures/csm_tiny");
    const dd_config *c = dd_model_config(m);
    assert_int_equal(c->block, DD_BLOCK_LLAMA);
    assert_int_equal(c->embed_in_input_space, 1);
    assert_int_equal(dd_model_tensor_count(m), 5 + 9 * c->layers);
    dd_model_free(m);
}

/* ---- dd_model_from_tensors: the same tensors from memory ------------------------------------------------- */

/* Views of the float tensors of a list (other dtypes cannot be expressed by dd_tensor_view and are left out),
 * each copied into its own malloc'd buffer so the test can free them right after the call. */
static size_t views_of(const dd_st_out *t, int n, dd_tensor_view *v, void **bufs) {
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        dd_dtype dt;
        if (t[i].dtype == DD_ST_F32) dt = DD_F32;
        else if (t[i].dtype == DD_ST_F16) dt = DD_F16;
        else if (t[i].dtype == DD_ST_BF16) dt = DD_BF16;
        else continue;
        size_t nb = elems(t[i].ndim, t[i].shape) * dd_st_dtype_size(t[i].dtype);
        bufs[k] = malloc(nb ? nb : 1);
        assert_non_null(bufs[k]);
        memcpy(bufs[k], t[i].data, nb);
        v[k] = (dd_tensor_view){.name = t[i].name, .dtype = dt, .ndim = t[i].ndim, .data = bufs[k]};
        memcpy(v[k].shape, t[i].shape, sizeof v[k].shape);
        k++;
    }
    return k;
}

static void free_bufs(void **bufs, size_t n) {
    for (size_t i = 0; i < n; i++) free(bufs[i]);
}

/* a and b decode bitwise alike: greedy and sampled codes on the cpu backend (c0 sampled from head0). */
static void expect_same_codes(const dd_model *a, const dd_model *b) {
    const dd_config *c = dd_model_config(a);
    enum { N = 4 };
    int Q = c->levels, I = c->input_dim;
    float *h = malloc((size_t)N * I * sizeof *h);
    int32_t ca[N * DD_MAX_LEVELS], cb[N * DD_MAX_LEVELS];
    uint64_t seeds[N] = {1, 2, 3, 4}, frames[N] = {0, 5, 9, 2};
    assert_non_null(h);
    for (size_t i = 0; i < (size_t)N * I; i++) h[i] = rnd_sym(2.0f);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CPU;
    p.threads = 1;
    dd_decoder *da, *db;
    dd_error e;
    assert_int_equal(dd_decoder_create(&da, a, &p, &e), DD_OK);
    assert_int_equal(dd_decoder_create(&db, b, &p, &e), DD_OK);
    for (int greedy = 0; greedy < 2; greedy++) {
        dd_sampling s = dd_sampling_default();
        if (greedy) s.temperature = 0;
        memset(ca, 0xff, sizeof ca);
        memset(cb, 0xff, sizeof cb);
        assert_int_equal(dd_decode(da, N, h, NULL, seeds, frames, &s, ca, &e), DD_OK);
        assert_int_equal(dd_decode(db, N, h, NULL, seeds, frames, &s, cb, &e), DD_OK);
        assert_memory_equal(ca, cb, (size_t)N * Q * sizeof *ca);
    }
    dd_decoder_free(da);
    dd_decoder_free(db);
    free(h);
}

/* dd_model_from_tensors must refuse, with `code`, a message containing `also`, and *out NULL. */
static void expect_tensors_fail_(int line, const char *cfg, const dd_tensor_view *v, size_t n, dd_status code,
                                 const char *also) {
    dd_model *m = (dd_model *)1;
    dd_error e;
    dd_status s = dd_model_from_tensors(&m, cfg, v, n, &e);
    if (lt_verbose || s != code || !strstr(e.msg, also))
        print_message("line %d: status %d (want %d): %s (want '%s' in it)\n", line, s, code, e.msg, also);
    assert_int_equal(s, code);
    assert_int_equal(e.code, code);
    assert_null(m);
    assert_non_null(strstr(e.msg, also));
    assert_int_equal(dd_model_from_tensors(&m, cfg, v, n, NULL), code);
}
#define expect_tensors_fail(cfg, v, n, code, also) expect_tensors_fail_(__LINE__, cfg, v, n, code, also)

static void test_csm_from_tensors(void **state) {
    char dir[128];
    tset *ts = csm_tensors();
    json_t *cfg = csm_config(0);
    char *cj = json_dumps(cfg, 0);
    assert_non_null(cj);
    dd_tensor_view v[TS_MAX];
    void *bufs[TS_MAX];
    dd_error e;

    /* bf16 as written, and every float tensor as f32 and as f16: from memory = from the directory, bitwise */
    for (int pass = 0; pass < 3; pass++) {
        if (pass) {
            dd_st_dtype dt = pass == 1 ? DD_ST_F32 : DD_ST_F16;
            for (int i = 0; i < ts->n; i++)
                if (ts->t[i].dtype == DD_ST_BF16 || ts->t[i].dtype == DD_ST_F32 || ts->t[i].dtype == DD_ST_F16) {
                    dd_st_out o = ts->t[i];
                    int norm = strstr(o.name, "norm") != NULL;
                    ts_putf(ts, o.name, dt, o.ndim, o.shape, norm ? 1.0f : 0.0f, norm ? 0.1f : 0.15f, 0);
                }
        }
        TH_PATH(dir, "csm_tensors_%d", pass);
        csm_write(dir, ts, cfg, 0);
        dd_model *a = load_ok(dir), *b = NULL;
        size_t n = views_of(ts->t, ts->n, v, bufs);
        assert_int_equal(dd_model_from_tensors(&b, cj, v, n, &e), DD_OK);
        assert_int_equal(e.code, DD_OK);
        free_bufs(bufs, n); /* the model holds its own copy */
        assert_string_equal(dd_model_source(b), "tensors");
        cfg_equal(dd_model_config(a), dd_model_config(b));
        assert_int_equal(dd_model_tensor_count(a), dd_model_tensor_count(b));
        if (pass == 0) csm_check(b, ts, k_tab_bb);
        expect_same_scores(a, b);
        expect_same_codes(a, b);
        dd_model_free(a);
        dd_model_free(b);
    }

    /* errors, each naming the tensor (views point into ts, which outlives them) */
    size_t n = 0;
    for (int i = 0; i < ts->n; i++) {
        const dd_st_out *t = &ts->t[i];
        if (t->dtype != DD_ST_F16) continue;
        v[n] = (dd_tensor_view){.name = t->name, .dtype = DD_F16, .ndim = t->ndim, .data = t->data};
        memcpy(v[n].shape, t->shape, sizeof v[n].shape);
        n++;
    }
    dd_model *m = NULL;
    assert_int_equal(dd_model_from_tensors(&m, cj, v, n, &e), DD_OK);
    dd_model_free(m);
    const char *q = "depth_decoder.model.layers.1.self_attn.q_proj.weight";
    size_t iq = 0;
    while (strcmp(v[iq].name, q) != 0) iq++;
    dd_tensor_view keep = v[iq];
    v[iq].shape[1]++;
    expect_tensors_fail(cj, v, n, DD_EMODEL, "tensor 'depth_decoder.model.layers.1.self_attn.q_proj.weight': shape");
    v[iq] = keep;
    v[iq].ndim = 3;
    v[iq].shape[2] = 1;
    expect_tensors_fail(cj, v, n, DD_EMODEL, "expected [48, 32]");
    v[iq] = keep;
    v[iq].dtype = DD_Q8;
    expect_tensors_fail(cj, v, n, DD_EINVAL, "tensor 'depth_decoder.model.layers.1.self_attn.q_proj.weight': dtype");
    v[iq].dtype = (dd_dtype)77;
    expect_tensors_fail(cj, v, n, DD_EINVAL, "q_proj.weight': dtype 77");
    v[iq] = keep;
    v[iq].data = NULL;
    expect_tensors_fail(cj, v, n, DD_EINVAL, "q_proj.weight': data is NULL");
    v[iq] = keep;
    v[iq].shape[0] = -3;
    expect_tensors_fail(cj, v, n, DD_EINVAL, "q_proj.weight': shape[0] = -3");
    v[iq] = keep;
    v[iq].ndim = 9;
    expect_tensors_fail(cj, v, n, DD_EINVAL, "q_proj.weight': ndim 9");
    v[iq] = keep;
    v[iq].name = "depth_decoder.model.layers.1.self_attn.k_proj.weight";
    expect_tensors_fail(cj, v, n, DD_EINVAL, "tensor 'depth_decoder.model.layers.1.self_attn.k_proj.weight' given twice");
    v[iq].name = "";
    expect_tensors_fail(cj, v, n, DD_EINVAL, "name is NULL or empty");
    v[iq].name = "depth_decoder.model.layers.1.self_attn.Q_proj.weight"; /* q_proj is now missing */
    expect_tensors_fail(cj, v, n, DD_EMODEL, "missing tensor 'depth_decoder.model.layers.1.self_attn.q_proj.weight'");
    v[iq] = keep;
    /* the codebooks head is checked in its HF layout [Q-1, D, V] */
    const char *hn = "depth_decoder.codebooks_head.weight";
    size_t ih = 0;
    while (strcmp(v[ih].name, hn) != 0) ih++;
    int64_t t = v[ih].shape[1];
    v[ih].shape[1] = v[ih].shape[2];
    v[ih].shape[2] = t;
    expect_tensors_fail(cj, v, n, DD_EMODEL, "tensor 'depth_decoder.codebooks_head.weight': shape [3, 20, 32], expected [3, 32, 20]");
    v[ih].shape[2] = v[ih].shape[1];
    v[ih].shape[1] = t;
    /* configs */
    expect_tensors_fail("{\"model_type\": \"csm\",", v, n, DD_EFORMAT, "config JSON");
    expect_tensors_fail("{\"model_type\": \"llama\"}", v, n, DD_EMODEL, "model_type is not \"csm\"");
    expect_tensors_fail("{\"model_type\": \"csm\"}", v, n, DD_EMODEL, "depth_decoder_config");
    expect_tensors_fail(NULL, v, n, DD_EINVAL, "config_json is NULL");
    expect_tensors_fail(cj, NULL, 3, DD_EINVAL, "tensors is NULL");
    expect_tensors_fail(cj, v, 0, DD_EMODEL, "missing");
    assert_int_equal(dd_model_from_tensors(NULL, cj, v, n, &e), DD_EINVAL);
    /* still fine after all that */
    assert_int_equal(dd_model_from_tensors(&m, cj, v, n, &e), DD_OK);
    dd_model_free(m);

    free(cj);
    json_decref(cfg);
    ts_free(ts);
}

/* The transformers-made fixture and a native file, from their own tensors in memory: the same model. */
static void test_tensors_fixture_native(void **state) {
    dd_tensor_view v[TS_MAX];
    void *bufs[TS_MAX];
    dd_error e;
    if (access("tests/fixtures/csm_tiny/config.json", R_OK) == 0) {
        dd_model *a = load_ok("tests/fixtures/csm_tiny"), *b = NULL;
        dd_st_file f;
        assert_int_equal(dd_st_open(&f, "tests/fixtures/csm_tiny/model.safetensors", &e), DD_OK);
        dd_st_out *o = calloc((size_t)f.n, sizeof *o);
        assert_non_null(o);
        int k = 0;
        for (int i = 0; i < f.n; i++) {
            if (f.t[i].dtype != DD_ST_F32 && f.t[i].dtype != DD_ST_F16 && f.t[i].dtype != DD_ST_BF16) continue;
            if (strncmp(f.t[i].name, "codec_model.", 12) == 0) continue; /* many; unused either way */
            assert_true(k < TS_MAX);
            snprintf(o[k].name, sizeof o[k].name, "%s", f.t[i].name);
            o[k].dtype = f.t[i].dtype;
            o[k].ndim = f.t[i].ndim;
            memcpy(o[k].shape, f.t[i].shape, sizeof o[k].shape);
            o[k].data = f.t[i].data;
            k++;
        }
        size_t n = views_of(o, k, v, bufs);
        FILE *fp = fopen("tests/fixtures/csm_tiny/config.json", "rb");
        assert_non_null(fp);
        static char cj[1 << 16];
        size_t len = fread(cj, 1, sizeof cj - 1, fp);
        fclose(fp);
        cj[len] = 0;
        assert_int_equal(dd_model_from_tensors(&b, cj, v, n, &e), DD_OK);
        free_bufs(bufs, n);
        cfg_equal(dd_model_config(a), dd_model_config(b));
        expect_same_scores(a, b);
        expect_same_codes(a, b);
        dd_model_free(a);
        dd_model_free(b);
        free(o);
        dd_st_close(&f);
    }
    /* native layout (config with "format": "depthdec"): tiny-gpt f32 and tiny-llama bf16 */
    for (int w = 0; w < 2; w++) {
        dd_model *s = NULL, *b = NULL;
        assert_int_equal(dd_model_synthetic(&s, w ? "tiny-llama" : "tiny-gpt", w ? DD_BF16 : DD_F32, 7, &e), DD_OK);
        char path[128];
        TH_PATH(path, "native_%d.safetensors", w);
        assert_int_equal(dd_model_save(s, path, &e), DD_OK);
        dd_model *a = load_ok(path);
        tset *ts = ts_load(path);
        char *cj = json_dumps(ts->cfg, 0);
        size_t n = views_of(ts->t, ts->n, v, bufs);
        assert_int_equal(dd_model_from_tensors(&b, cj, v, n, &e), DD_OK);
        free_bufs(bufs, n);
        cfg_equal(dd_model_config(a), dd_model_config(b));
        expect_same_scores(a, b);
        expect_same_codes(a, b);
        /* a native shape error names the native tensor */
        n = views_of(ts->t, ts->n, v, bufs);
        for (size_t i = 0; i < n; i++)
            if (strcmp(v[i].name, "layers.0.fc2.weight") == 0) v[i].shape[0]--;
        dd_model *c = NULL;
        assert_int_equal(dd_model_from_tensors(&c, cj, v, n, &e), DD_EMODEL);
        assert_non_null(strstr(e.msg, "tensor 'layers.0.fc2.weight': shape"));
        assert_null(c);
        free_bufs(bufs, n);
        free(cj);
        ts_free(ts);
        dd_model_free(a);
        dd_model_free(b);
        dd_model_free(s);
    }
}

/* ---- main ------------------------------------------------------------------------------------------------- */

int main(void) {
    th_seed_init("test_hf_csm");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csm_valid),
        cmocka_unit_test(test_csm_errors),
        cmocka_unit_test(test_csm_fixture),
        cmocka_unit_test(test_csm_from_tensors),
        cmocka_unit_test(test_tensors_fixture_native),
    };
    return cmocka_run_group_tests(tests, lt_setup, lt_teardown);
}
