/* Tests of native depthdec files (src/model/model.c: tensor names, dtypes and shapes; SPEC §4) made from the synthetic
 * base models (dd_model_save), taken apart into tensor lists and re-serialized with edits (dd_st_serialize):
 * every base model loads with the stored values in its weight views and scores like the in-memory model; each
 * tensor dropped, reshaped, of the wrong dtype or wrongly quantized is refused naming the tensor; MLX affine
 * layouts (bits 8/4, groups 32/64, every scale type, stacked tensors) score bitwise like their dequantized twins;
 * the PyTorch-made fixtures load. Data are fresh random each run (seed printed; DD_TEST_SEED=<n> replays).
 * DD_TEST_VERBOSE=1 prints every loader message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "loader_util.h"
#include "model/quant.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- valid native files ----------------------------------------------------------------------------------- */

/* Every base model (2 kinds x 5 weight types) loads; config fields match what was written, every tensor of the
 * file is used, the weight views hold the stored values (qkv split, llama fc1 = gate | up), weight byte counts
 * are right, and the scores equal the in-memory synthetic model built from the same seed. */
static void test_valid_native(void **state) {
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            const char *path = lt_base[k][w];
            dd_model *m = load_ok(path);
            tset *ts = ts_load(path);
            const dd_config *c = dd_model_config(m);
            expect_config_matches(c, ts->cfg);
            assert_int_equal(c->block, k == GPT ? DD_BLOCK_GPT : DD_BLOCK_LLAMA);
            assert_int_equal(c->weight_type, lt_wt[w]);
            assert_int_equal(c->quant_bits, w == Q8 ? 8 : w == Q4 ? 4 : 0);
            if (c->quant_bits) assert_int_equal(c->quant_group, 64);
            assert_int_equal(c->has_head0, 1);
            assert_int_equal(c->has_in_proj, 1);
            assert_int_equal(c->has_pos, k == GPT);
            assert_int_equal(c->embed_in_input_space, 0);
            assert_int_equal(dd_model_tensor_count(m), ts->n);
            assert_string_equal(dd_model_source(m), path);
            /* weight bytes = every matrix (with scales and biases); vectors and positions are not weights */
            uint64_t wb = 0;
            for (int i = 0; i < ts->n; i++)
                if (ts->t[i].ndim >= 2 && strcmp(ts->t[i].name, "pos.weight") != 0)
                    wb += elems(ts->t[i].ndim, ts->t[i].shape) * dd_st_dtype_size(ts->t[i].dtype);
            assert_int_equal(dd_model_weight_bytes(m), wb);
            if (w <= BF16) {
                int64_t H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim;
                check_mat(&m->head0, ts_get(ts, "head0.weight"));
                check_mat(&m->in_proj, ts_get(ts, "in_proj.weight"));
                check_mat(&m->embed, ts_get(ts, "embed.weight"));
                check_mat(&m->heads, ts_get(ts, "heads.weight"));
                check_vec(m->norm_w, ts_get(ts, "norm.weight"));
                if (k == GPT) {
                    check_vec(m->in_bias, ts_get(ts, "in_proj.bias"));
                    check_vec(m->norm_b, ts_get(ts, "norm.bias"));
                    check_vec(m->pos, ts_get(ts, "pos.weight"));
                } else {
                    assert_null(m->norm_b);
                    assert_null(m->pos);
                    assert_non_null(m->rope_inv_freq);
                }
                for (int i = 0; i < c->layers; i++) {
                    const dd_layer *l = &m->layer[i];
                    char nm[64];
#define T(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), ts_get(ts, nm))
                    const dd_st_out *qkv = T("qkv.weight");
                    check_rows(&l->wq, qkv, 0, H * HD);
                    check_rows(&l->wk, qkv, H * HD, KV * HD);
                    check_rows(&l->wv, qkv, (H + KV) * HD, KV * HD);
                    check_mat(&l->wo, T("out.weight"));
                    check_mat(&l->fc2, T("fc2.weight"));
                    check_vec(l->norm1_w, T("norm1.weight"));
                    check_vec(l->norm2_w, T("norm2.weight"));
                    if (k == GPT) {
                        check_mat(&l->fc1, T("fc1.weight"));
                        assert_int_equal(l->up.rows, 0);
                        check_vec(l->norm1_b, T("norm1.bias"));
                        check_vec(l->norm2_b, T("norm2.bias"));
                        const dd_st_out *bq = T("qkv.bias");
                        check_vec(l->bq, bq);
                        assert_true(l->bk == l->bq + H * HD && l->bv == l->bq + (H + KV) * HD);
                        check_vec(l->bo, T("out.bias"));
                        check_vec(l->b1, T("fc1.bias"));
                        check_vec(l->b2, T("fc2.bias"));
                    } else {
                        const dd_st_out *fc1 = T("fc1.weight");
                        check_rows(&l->fc1, fc1, 0, F);
                        check_rows(&l->up, fc1, F, F);
                        assert_null(l->norm1_b);
                        assert_null(l->bq);
                        assert_null(l->b1);
                    }
#undef T
                }
            }
            dd_model *s = NULL;
            dd_error e = {0};
            assert_int_equal(dd_model_synthetic(&s, lt_kind[k], lt_wt[w], lt_base_seed[k][w], &e), DD_OK);
            expect_same_scores(m, s);
            dd_model_free(s);
            ts_free(ts);
            dd_model_free(m);
        }
}

/* ---- engine rules on native files ------------------------------------------------------------------------- */

static int optional_native(const char *name) {
    static const char *const opt[] = {"head0.weight", "in_proj.bias", "pos.weight", ".qkv.bias",
                                      ".out.bias",    ".fc1.bias",    ".fc2.bias"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++) {
        size_t k = strlen(opt[i]);
        if (n >= k && strcmp(name + n - k, opt[i]) == 0 && (opt[i][0] == '.' || n == k)) return 1;
    }
    return 0;
}

/* Drop each tensor in turn: required ones fail naming the tensor, optional ones load with fewer tensors used. */
static void test_missing_tensors(void **state) {
    static const int which[][2] = {{GPT, F32}, {GPT, Q8}, {LLAMA, BF16}, {LLAMA, Q4}};
    char path[128], pre[160];
    TH_PATH(path, "drop.safetensors");
    for (size_t c = 0; c < sizeof which / sizeof *which; c++) {
        tset *ts = ts_load(lt_base[which[c][0]][which[c][1]]);
        int full = ts->n;
        for (int i = 0; i < full; i++) {
            snap *s = ts_save(ts);
            char name[160];
            snprintf(name, sizeof name, "%s", ts->t[i].name);
            char sc[180];
            snprintf(sc, sizeof sc, "%s.scales", prefix_of(name, pre, sizeof pre));
            int quant = strstr(name, ".weight") && ts_find(ts, sc) >= 0;
            ts_drop(ts, name);
            ts_write(ts, path);
            if (optional_native(name)) {
                dd_model *m = load_ok(path);
                assert_int_equal(dd_model_tensor_count(m), full - (quant ? 3 : 1));
                dd_model_free(m);
            } else {
                expect_fail(path, DD_EMODEL, prefix_of(name, pre, sizeof pre));
            }
            ts_restore(ts, s);
        }
        ts_free(ts);
    }
}

/* Every tensor with each dimension one too large, with its first two dimensions merged, and with a leading 1:
 * DD_EMODEL naming the tensor (for MLX parts: the matrix). */
static void test_wrong_shapes(void **state) {
    static const int which[][2] = {{GPT, F32}, {GPT, Q8}, {LLAMA, F16}, {LLAMA, Q4}};
    char path[128], pre[160];
    TH_PATH(path, "shape.safetensors");
    for (size_t c = 0; c < sizeof which / sizeof *which; c++) {
        tset *ts = ts_load(lt_base[which[c][0]][which[c][1]]);
        for (int i = 0; i < ts->n; i++) {
            dd_st_out t = ts->t[i];
            for (int v = 0; v <= t.ndim; v++) {
                int64_t sh[DD_ST_MAX_DIMS];
                int nd = t.ndim;
                memcpy(sh, t.shape, sizeof sh);
                if (v < nd) {
                    sh[v] += 1;
                } else if (nd >= 2) {
                    sh[1] *= sh[0];
                    memmove(sh, sh + 1, (size_t)(nd - 1) * sizeof *sh);
                    nd--;
                } else {
                    memmove(sh + 1, sh, (size_t)nd * sizeof *sh);
                    sh[0] = 1;
                    nd++;
                }
                ts_put(ts, t.name, t.dtype, nd, sh);
                ts_write(ts, path);
                expect_fail(path, DD_EMODEL, prefix_of(t.name, pre, sizeof pre));
                ts->t[i] = t;
            }
        }
        ts_free(ts);
    }
}

/* Wrong dtypes, MLX quantization mistakes, tensors a block type does not take, hostile zero-size shapes. */
static void test_tensor_rules(void **state) {
    static const mcase cases[] = {
        /* dense types */
        {GPT, F32, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", I32, 2, 192, 64)}},
        {GPT, F32, DD_EMODEL, "layers.1.fc2.weight", {PUT("layers.1.fc2.weight", U32, 2, 64, 256)}},
        {GPT, F32, DD_EMODEL, "head0.weight", {PUT("head0.weight", I64, 2, 64, 128)}},
        {GPT, F32, DD_EMODEL, "heads.weight", {PUT("heads.weight", BOOL, 3, 7, 64, 64)}},
        {GPT, F32, DD_EMODEL, "embed.weight", {PUT("embed.weight", F8_E4M3, 3, 7, 64, 64)}},
        {GPT, F32, DD_EMODEL, "in_proj.weight", {PUT("in_proj.weight", F64, 2, 64, 128)}},
        {GPT, F32, DD_EMODEL, "norm.weight", {PUT("norm.weight", F64, 1, 64)}},
        {GPT, F32, DD_EMODEL, "layers.0.norm1.bias", {PUT("layers.0.norm1.bias", I8, 1, 64)}},
        {GPT, F32, DD_EMODEL, "pos.weight", {PUT("pos.weight", U8, 2, 8, 64)}},
        {GPT, F32, DD_EMODEL, "layers.1.qkv.bias", {PUT("layers.1.qkv.bias", I16, 1, 192)}},
        /* layer matrices of one model share one storage type */
        {GPT, F32, DD_EMODEL, "layers.1.out.weight", {PUT("layers.1.out.weight", F16, 2, 64, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.0.fc2.weight", {PUT("layers.0.fc2.weight", F32, 2, 64, 128)}},
        /* in(): no in_proj with input_dim != dim; a bias without its matrix */
        {GPT, F32, DD_EMODEL, "in_proj", {DROP("in_proj.weight"), DROP("in_proj.bias")}},
        {GPT, F32, DD_EMODEL, "in_proj.bias", {DROP("in_proj.weight")}},
        /* MLX parts on a dense weight */
        {GPT, F32, DD_EMODEL, "layers.0.qkv.biases", {PUT("layers.0.qkv.biases", F16, 2, 192, 1)}},
        {GPT, F32, DD_EMODEL, "layers.0.qkv", {PUT("layers.0.qkv.scales", F16, 2, 192, 1)}},
        {GPT, F32, DD_EMODEL, "quantization", {CFG("quantization", "{\"bits\":8,\"group_size\":64}")}},
        /* MLX affine */
        {GPT, Q8, DD_EMODEL, "layers.0.fc1.biases", {DROP("layers.0.fc1.biases")}},
        {GPT, Q8, DD_EMODEL, "layers.0.fc1.scales", {DROP("layers.0.fc1.scales")}},
        {GPT, Q8, DD_EMODEL, "heads.biases", {DROP("heads.biases")}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.biases", {PUT("layers.1.qkv.biases", F32, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.scales", {PUT("layers.1.qkv.scales", BF16, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.1.qkv.scales",
         {PUT("layers.1.qkv.scales", I32, 2, 192, 1), PUT("layers.1.qkv.biases", I32, 2, 192, 1)}},
        {GPT, Q8, DD_EMODEL, "layers.0.out.weight", {PUT("layers.0.out.weight", F16, 2, 64, 16)}},
        {GPT, Q8, DD_EMODEL, "layers.0.out.weight", {PUT("layers.0.out.weight", I32, 2, 64, 16)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", U32, 2, 192, 12)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight", {PUT("layers.0.qkv.weight", U32, 2, 192, 2)}},
        {GPT, Q8, DD_EMODEL, "heads.weight", {PUT("heads.weight", U32, 3, 7, 64, 32)}},
        {GPT, Q8, DD_EMODEL, "group size 16",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 4), PUT("layers.0.qkv.biases", F16, 2, 192, 4)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.scales",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 3), PUT("layers.0.qkv.biases", F16, 2, 192, 3)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.scales",
         {PUT("layers.0.qkv.scales", F16, 2, 192, 0), PUT("layers.0.qkv.biases", F16, 2, 192, 0)}},
        {GPT, Q8, DD_EMODEL, "group size 256", /* 256 columns in one group */
         {PUT("layers.1.fc2.scales", F16, 2, 64, 1), PUT("layers.1.fc2.biases", F16, 2, 64, 1)}},
        {GPT, Q8, DD_EMODEL, "heads.scales",
         {PUT("heads.scales", F16, 3, 7, 64, 4), PUT("heads.biases", F16, 3, 7, 64, 4)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc2.weight", /* a valid group 32, but the config says 64 */
         {PUT("layers.1.fc2.scales", F16, 2, 64, 8), PUT("layers.1.fc2.biases", F16, 2, 64, 8)}},
        /* quantization config disagreeing with the tensors, or invalid */
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":4,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":32}")}},
        {GPT, Q8, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":128}")}},
        {LLAMA, Q4, DD_EMODEL, "head0.weight", {CFG("quantization", "{\"bits\":8,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":48}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":0}")}},
        {GPT, Q8, DD_EMODEL, "group_size", {CFG("quantization", "{\"bits\":8,\"group_size\":\"64\"}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"bits\":3,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"bits\":16,\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "bits", {CFG("quantization", "{\"group_size\":64}")}},
        {GPT, Q8, DD_EMODEL, "mode", {CFG("quantization", "{\"bits\":8,\"group_size\":64,\"mode\":\"gptq\"}")}},
        {GPT, Q8, DD_EMODEL, "mode", {CFG("quantization", "{\"bits\":8,\"group_size\":64,\"mode\":1}")}},
        {GPT, Q8, DD_EMODEL, "quantization", {CFG("quantization", "\"8bit\"")}},
        {LLAMA, Q4, DD_EMODEL, "layers.0.fc1.weight", {PUT("layers.0.fc1.weight", U32, 2, 256, 16)}},
        /* mixed storage among layer matrices */
        {GPT, Q8, DD_EMODEL, "layers.1.fc2",
         {DROP("layers.1.fc2.scales"), DROP("layers.1.fc2.biases"), PUT("layers.1.fc2.weight", F16, 2, 64, 256)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc1",
         {CFG("quantization", NULL), PUT("layers.1.fc1.weight", U32, 2, 256, 8)}},
        {GPT, Q8, DD_EMODEL, "layers.1.fc1",
         {CFG("quantization", NULL), PUT("layers.1.fc1.scales", F16, 2, 256, 2),
          PUT("layers.1.fc1.biases", F16, 2, 256, 2)}},
        /* valid: bits and group follow from the shapes when the config has no quantization; defaults */
        {GPT, Q8, DD_OK, NULL, {CFG("quantization", NULL)}},
        {LLAMA, Q4, DD_OK, NULL, {CFG("quantization", NULL)}},
        {GPT, Q8, DD_OK, NULL, {CFG("quantization", "{\"bits\":8}")}},
        {GPT, Q4, DD_OK, NULL, {CFG("quantization", "{\"bits\":4,\"group_size\":64,\"mode\":\"affine\"}")}},
        /* tensors a llama block does not take */
        {LLAMA, BF16, DD_EMODEL, "layers.0", {PUT("layers.0.norm1.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.1", {PUT("layers.1.norm2.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "norm.bias", {PUT("norm.bias", BF16, 1, 64)}},
        {LLAMA, BF16, DD_EMODEL, "pos.weight", {PUT("pos.weight", BF16, 2, 8, 64)}},
        {LLAMA, BF16, DD_EMODEL, "layers.1.fc1.bias", {PUT("layers.1.fc1.bias", BF16, 1, 256)}},
        /* hostile shapes the container accepts (zero elements, huge dimensions) */
        {GPT, F32, DD_EMODEL, "embed.weight", {PUT("embed.weight", F32, 8, 0, H62, H62, H62, H62, H62, H62, H62)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv.weight",
         {PUT("layers.0.qkv.weight", U32, 2, 0, H62), PUT("layers.0.qkv.scales", F16, 2, 0, H62),
          PUT("layers.0.qkv.biases", F16, 2, 0, H62)}},
        {GPT, Q8, DD_EMODEL, "heads.weight",
         {PUT("heads.weight", U32, 3, 0, 64, H62), PUT("heads.scales", F16, 3, 0, 64, H62 / 2),
          PUT("heads.biases", F16, 3, 0, 64, H62 / 2)}},
        {GPT, Q8, DD_EMODEL, "layers.0.qkv",
         {PUT("layers.0.qkv.weight", U32, 2, 192, 16), PUT("layers.0.qkv.scales", F16, 2, 0, H62),
          PUT("layers.0.qkv.biases", F16, 2, 0, H62)}},
    };
    run_cases(cases, sizeof cases / sizeof *cases, "rule");
}

/* ---- MLX affine layouts ----------------------------------------------------------------------------------- */

/* The f32 base quantized here (bits 8/4, group 32/64, scales and biases F16/BF16/F32, stacked tensors
 * included or not) must score bitwise like the f32 file holding the dequantized values: the loader reads bits
 * and group from the shapes, packs from the least significant bits, and views stacked tensors row by row. */
static void test_quant_layouts(void **state) {
    static const struct { int kind, bits, group; dd_st_dtype sb; int stacks; } cases[] = {
        {GPT, 8, 64, DD_ST_F16, 0},  {GPT, 4, 64, DD_ST_BF16, 1}, {GPT, 8, 32, DD_ST_F32, 1},
        {GPT, 4, 32, DD_ST_F16, 1},  {LLAMA, 4, 64, DD_ST_F32, 0}, {LLAMA, 8, 32, DD_ST_BF16, 1},
    };
    char qpath[128], dpath[128];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int bits = cases[c].bits, group = cases[c].group, per = 32 / bits;
        uint32_t mask = (1u << bits) - 1;
        tset *q = ts_load(lt_base[cases[c].kind][F32]), *d = ts_load(lt_base[cases[c].kind][F32]);
        int nq = 0, n0 = d->n;
        for (int i = 0; i < n0; i++) {
            dd_st_out t = d->t[i];
            if (t.ndim < 2 || strcmp(t.name, "pos.weight") == 0) continue;
            if (t.ndim == 3 && !cases[c].stacks) continue;
            int64_t K = t.shape[t.ndim - 1], rows = (int64_t)elems(t.ndim, t.shape) / K, words = K / per,
                    ng = K / group;
            int64_t sh[3];
            memcpy(sh, t.shape, sizeof sh);
            char base[160], nm[170];
            prefix_of(t.name, base, sizeof base);
            sh[t.ndim - 1] = words;
            uint32_t *qw = ts_put(q, t.name, DD_ST_U32, t.ndim, sh);
            sh[t.ndim - 1] = ng;
            snprintf(nm, sizeof nm, "%s.scales", base);
            uint8_t *sc = ts_put(q, nm, cases[c].sb, t.ndim, sh);
            snprintf(nm, sizeof nm, "%s.biases", base);
            uint8_t *bi = ts_put(q, nm, cases[c].sb, t.ndim, sh);
            float *dq = ts_put(d, t.name, DD_ST_F32, t.ndim, t.shape);
            float *x = malloc((size_t)K * 4), *fs = malloc((size_t)ng * 4), *fb = malloc((size_t)ng * 4);
            assert_true(x && fs && fb);
            size_t es = dd_st_dtype_size(cases[c].sb);
            for (int64_t r = 0; r < rows; r++) {
                memcpy(x, (const uint8_t *)t.data + (size_t)(r * K) * 4, (size_t)K * 4);
                dd_quantize_row(x, K, bits, group, qw + r * words, fs, fb);
                for (int64_t g = 0; g < ng; g++) {
                    float sv[2] = {fs[g], fb[g]};
                    uint8_t *dst[2] = {sc + (size_t)(r * ng + g) * es, bi + (size_t)(r * ng + g) * es};
                    for (int j = 0; j < 2; j++) {
                        if (cases[c].sb == DD_ST_F32) {
                            memcpy(dst[j], &sv[j], 4);
                        } else {
                            uint16_t h = cases[c].sb == DD_ST_F16 ? dd_f32_to_f16(sv[j]) : dd_f32_to_bf16(sv[j]);
                            memcpy(dst[j], &h, 2);
                            sv[j] = cases[c].sb == DD_ST_F16 ? dd_f16_to_f32(h) : dd_bf16_to_f32(h);
                        }
                    }
                    fs[g] = sv[0];
                    fb[g] = sv[1];
                }
                for (int64_t i2 = 0; i2 < K; i2++) {
                    uint32_t qv = (qw[r * words + i2 / per] >> (bits * (i2 % per))) & mask;
                    float sq = fs[i2 / group] * (float)qv; /* two roundings, as MLX */
                    dq[r * K + i2] = sq + fb[i2 / group];
                }
            }
            free(x);
            free(fs);
            free(fb);
            nq++;
        }
        json_set(q->cfg, "quantization", NULL);
        char qc[96];
        snprintf(qc, sizeof qc, "{\"group_size\":%d,\"bits\":%d,\"mode\":\"affine\"}", group, bits);
        json_set(q->cfg, "quantization", qc);
        TH_PATH(qpath, "quant_%zu.safetensors", c);
        TH_PATH(dpath, "dequant_%zu.safetensors", c);
        ts_write(q, qpath);
        ts_write(d, dpath);
        dd_model *mq = load_ok(qpath), *md = load_ok(dpath);
        const dd_config *cq = dd_model_config(mq);
        assert_int_equal(cq->quant_bits, bits);
        assert_int_equal(cq->quant_group, group);
        assert_int_equal(cq->weight_type, bits == 8 ? DD_Q8 : DD_Q4);
        assert_int_equal(dd_model_config(md)->weight_type, DD_F32);
        assert_int_equal(dd_model_tensor_count(mq), n0 + 2 * nq);
        assert_int_equal(dd_model_tensor_count(md), n0);
        expect_same_scores(mq, md);
        dd_model_free(mq);
        dd_model_free(md);
        ts_free(q);
        ts_free(d);
        unlink(qpath);
        unlink(dpath);
    }
}

/* ---- fixtures written by PyTorch (when present) ----------------------------------------------------------- */

static void test_native_fixtures(void **state) {
    static const char *const native[] = {"tests/fixtures/gpt_f16.safetensors", "tests/fixtures/gpt_bf16.safetensors",
                                         "tests/fixtures/gpt_q8.safetensors"};
    int found = 0;
    for (size_t i = 0; i < sizeof native / sizeof *native; i++) {
        if (access(native[i], R_OK) != 0) continue;
        found++;
        dd_model *m = load_ok(native[i]);
        dd_st_file f;
        dd_error e = {0};
        assert_int_equal(dd_st_open(&f, native[i], &e), DD_OK);
        assert_int_equal(dd_model_tensor_count(m), f.n);
        dd_st_close(&f);
        dd_model_free(m);
    }
    if (!found) skip();
}

/* ---- main ------------------------------------------------------------------------------------------------- */

int main(void) {
    th_seed_init("test_native");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_native),
        cmocka_unit_test(test_missing_tensors),
        cmocka_unit_test(test_wrong_shapes),
        cmocka_unit_test(test_tensor_rules),
        cmocka_unit_test(test_quant_layouts),
        cmocka_unit_test(test_native_fixtures),
    };
    return cmocka_run_group_tests(tests, lt_setup_bases, lt_teardown);
}
