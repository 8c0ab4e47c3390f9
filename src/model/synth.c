/* Embedded synthetic models: deterministic weights built in memory as a native-layout safetensors image, then
 * loaded through the same parser and name map as a file (so a synthetic model is exactly what dd_model_save
 * writes). Weights come from splitmix64 through exact float operations only (no libm), so every machine builds
 * bit-identical models. Scales keep activations O(1): fan-in scaled uniform weights, norms near 1. */
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct synth_dims {
    const char *name;
    int llama;
    int Q, V, I, D, L, H, KV, HD, F;
    double theta; /* llama only */
    int scaling;
    int qwen3; /* q/k norms, in_proj with bias (the talker's width -> D), no llama3 scaling */
    int head0; /* a level-0 head (the Qwen3 predictors have none: the talker gives c0) */
    int TV;    /* > 0: Kyutai Moshi's depformer (per-position weights, text ids 0..TV), else 0 */
} synth_dims;

static const synth_dims kinds[] = {
    {"gpt", 0, 32, 2048, 2048, 1024, 4, 16, 16, 64, 4096, 0, 0, 0, 1, 0},
    {"csm", 1, 32, 2051, 2048, 1024, 4, 8, 2, 128, 8192, 500000.0, 1, 0, 1, 0},
    /* Qwen3-TTS 12 Hz's code predictor (issue 17's dims): 16 code groups of 2048, talker width 2048 */
    {"qwen3tts", 1, 16, 2048, 2048, 1024, 5, 16, 8, 128, 3072, 1000000.0, 0, 1, 0, 0},
    {"tiny-gpt", 0, 8, 64, 128, 64, 2, 4, 4, 16, 256, 0, 0, 0, 1, 0},
    /* tiny-gpt with a wide feed-forward: fc2's K 3200 spans four slabs of the CUDA split-K contract (the last one
     * partial), the case the GPT / CSM dims reach only at full size */
    {"tiny-wide", 0, 8, 64, 128, 64, 2, 4, 4, 16, 3200, 0, 0, 0, 1, 0},
    {"tiny-llama", 1, 8, 64, 128, 64, 2, 4, 2, 16, 128, 500000.0, 1, 0, 1, 0},
    /* a test model of the Qwen3 block; it keeps a head0 so the generic c0-sampling tests run on it too */
    {"tiny-qwen3", 1, 8, 64, 128, 64, 3, 4, 2, 32, 128, 1000000.0, 0, 1, 1, 0}, /* H HD = 128 != D on purpose */
    /* Kyutai Moshi's depformer (kyutai-labs/moshi loaders.py _lm_kwargs, transformers MoshiDepthConfig): dep_q 8
     * codebooks of 2048, temporal width 4096, D 1024, 6 layers, 16 heads of 64, dim_feedforward 4224 -> gated width
     * 2 * 4224 / 3 = 2816 (fc1 [5632, 1024] per position), text vocab 32000 (+1 row) */
    {"moshi", 1, 8, 2048, 4096, 1024, 6, 16, 16, 64, 2816, 0, 0, 0, 1, 32000},
    {"tiny-moshi", 1, 8, 64, 128, 64, 2, 4, 2, 16, 128, 0, 0, 0, 1, 50}, /* GQA on purpose (the published has none) */
};

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [-a, a) from the top 24 bits: exact float arithmetic */
static float unif(uint64_t *s, float a) { return ((float)(splitmix(s) >> 40) * 0x1p-23f - 1.0f) * a; }

typedef struct builder {
    dd_st_list l;
    dd_dtype wt; /* matrix storage */
    uint64_t seed;
} builder;

/* Fill n floats: center + uniform(-a, a), each tensor from its own stream so adding one changes no other. */
static float *gen(builder *b, size_t n, float center, float a) {
    float *x = b->l.st ? NULL : malloc(n * sizeof *x);
    if (!x) {
        if (!b->l.st) b->l.st = dd_fail(b->l.err, DD_ENOMEM, "synthetic model: out of memory");
        return NULL;
    }
    uint64_t s = b->seed ^ (0x1234567ull * (uint64_t)(b->l.n + 1));
    for (size_t i = 0; i < n; i++) x[i] = center + unif(&s, a);
    return x;
}

/* Store float values x (freed here) as a tensor of dense type t. */
static void put_dense(builder *b, const char *name, int nd, const int64_t *shape, float *x, size_t n, dd_dtype t) {
    if (b->l.st || !x) {
        free(x);
        return;
    }
    if (t == DD_F32) {
        dd_st_list_add(&b->l, name, DD_ST_F32, nd, shape, dd_st_list_own(&b->l, x));
        return;
    }
    uint16_t *h = dd_st_list_alloc(&b->l, n * 2);
    if (h)
        for (size_t i = 0; i < n; i++) h[i] = t == DD_F16 ? dd_f32_to_f16(x[i]) : dd_f32_to_bf16(x[i]);
    free(x);
    dd_st_list_add(&b->l, name, t == DD_F16 ? DD_ST_F16 : DD_ST_BF16, nd, shape, h);
}

/* A matrix `base`.weight of shape [..rows, cols] in the builder's storage type (q8/q4: MLX affine, group 64,
 * f16 scales and biases). */
static void put_mat(builder *b, const char *base, int nd, const int64_t *shape, float a) {
    size_t rows = 1;
    for (int i = 0; i < nd - 1; i++) rows *= (size_t)shape[i];
    int64_t K = shape[nd - 1];
    float *x = gen(b, rows * (size_t)K, 0.0f, a);
    char name[160];
    snprintf(name, sizeof name, "%s.weight", base);
    if (b->wt != DD_Q8 && b->wt != DD_Q4) {
        put_dense(b, name, nd, shape, x, rows * (size_t)K, b->wt);
        return;
    }
    if (!x) return;
    int bits = b->wt == DD_Q8 ? 8 : 4, group = 64;
    int64_t words = K * bits / 32, ng = K / group;
    uint32_t *q = dd_st_list_alloc(&b->l, rows * (size_t)words * 4);
    uint16_t *sc = dd_st_list_alloc(&b->l, rows * (size_t)ng * 2), *bi = dd_st_list_alloc(&b->l, rows * (size_t)ng * 2);
    float *fs = malloc((size_t)ng * 4), *fb = malloc((size_t)ng * 4);
    if (q && sc && bi && fs && fb) {
        for (size_t r = 0; r < rows; r++) {
            dd_quantize_row(x + r * K, K, bits, group, q + r * words, fs, fb);
            for (int64_t g = 0; g < ng; g++) {
                sc[r * ng + g] = dd_f32_to_f16(fs[g]);
                bi[r * ng + g] = dd_f32_to_f16(fb[g]);
            }
        }
    } else if (!b->l.st) {
        b->l.st = dd_fail(b->l.err, DD_ENOMEM, "synthetic model: out of memory");
    }
    free(fs);
    free(fb);
    free(x);
    int64_t sh[8];
    memcpy(sh, shape, (size_t)nd * sizeof *sh);
    sh[nd - 1] = words;
    dd_st_list_add(&b->l, name, DD_ST_U32, nd, sh, q);
    sh[nd - 1] = ng;
    snprintf(name, sizeof name, "%s.scales", base);
    dd_st_list_add(&b->l, name, DD_ST_F16, nd, sh, sc);
    snprintf(name, sizeof name, "%s.biases", base);
    dd_st_list_add(&b->l, name, DD_ST_F16, nd, sh, bi);
}

static void put_vec(builder *b, const char *name, int64_t n, float center, float a, dd_dtype t) {
    put_dense(b, name, 1, &n, gen(b, (size_t)n, center, a), (size_t)n, t == DD_Q8 || t == DD_Q4 ? DD_F16 : t);
}

/* Moshi's depformer in the native per-position layout (docs/formats.md): per-position stacks [Q, rows, cols]. */
static void put_per_position(builder *b, const synth_dims *k, dd_dtype vt) {
    const int64_t Q = k->Q, V = k->V, I = k->I, D = k->D, H = k->H, KV = k->KV, HD = k->HD, F = k->F;
    const float sI = 1.7320508f / sqrtf((float)I), sD = 1.7320508f / sqrtf((float)D),
                sF = 1.7320508f / sqrtf((float)F), sA = 1.7320508f / sqrtf((float)(H * HD));
    put_dense(b, "text_embed.weight", 2, (int64_t[]){k->TV + 1, D}, gen(b, (size_t)((k->TV + 1) * D), 0.0f, 1.0f),
              (size_t)((k->TV + 1) * D), vt);
    put_dense(b, "embed.weight", 3, (int64_t[]){Q - 1, V + 1, D}, gen(b, (size_t)((Q - 1) * (V + 1) * D), 0.0f, 1.0f),
              (size_t)((Q - 1) * (V + 1) * D), vt);
    put_mat(b, "in_proj", 3, (int64_t[]){Q, D, I}, sI);
    char nm[160];
    for (int i = 0; i < k->L; i++) {
#define P(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), nm)
        put_vec(b, P("norm1.weight"), D, 1.0f, 0.1f, vt);
        put_mat(b, P("qkv"), 3, (int64_t[]){Q, (H + 2 * KV) * HD, D}, sD);
        put_mat(b, P("out"), 3, (int64_t[]){Q, D, H * HD}, 0.5f * sA);
        put_vec(b, P("norm2.weight"), D, 1.0f, 0.1f, vt);
        put_mat(b, P("fc1"), 3, (int64_t[]){Q, 2 * F, D}, sD);
        put_mat(b, P("fc2"), 3, (int64_t[]){Q, D, F}, 0.5f * sF);
#undef P
    }
    put_mat(b, "heads", 3, (int64_t[]){Q, V, D}, 2.0f * sD);
}

dd_status dd_model_synthetic(dd_model **out, const char *kind, dd_dtype wt, uint64_t seed, dd_error *err) {
    dd_error_clear(err);
    if (!out) return dd_fail(err, DD_EINVAL, "dd_model_synthetic: out is NULL");
    *out = NULL;
    const synth_dims *k = NULL;
    for (size_t i = 0; kind && i < sizeof kinds / sizeof *kinds; i++)
        if (strcmp(kind, kinds[i].name) == 0) k = &kinds[i];
    if (!k)
        return dd_fail(err, DD_EINVAL,
                       "synthetic model '%s': unknown (gpt, csm, qwen3tts, moshi, tiny-gpt, tiny-wide, tiny-llama, "
                       "tiny-qwen3, tiny-moshi)",
                       kind ? kind : "(null)");
    if ((unsigned)wt > DD_Q4) return dd_fail(err, DD_EINVAL, "synthetic model: bad weight type %d", (int)wt);
    builder b = {.l = {.what = "synthetic model", .err = err}, .wt = wt, .seed = seed * 0x9E3779B97F4A7C15ull + 12345};
    dd_dtype vt = (wt == DD_Q8 || wt == DD_Q4) ? DD_F16 : wt; /* storage of non-matrix tensors */
    int64_t Q = k->Q, V = k->V, I = k->I, D = k->D, H = k->H, KV = k->KV, HD = k->HD, F = k->F;
    float sI = 1.7320508f / sqrtf((float)I), sD = 1.7320508f / sqrtf((float)D), sF = 1.7320508f / sqrtf((float)F),
          sA = 1.7320508f / sqrtf((float)(H * HD));
    if (k->TV) {
        put_per_position(&b, k, vt);
        goto config;
    }
    /* head0 and heads get a larger spread so sampling has something to choose between */
    if (k->head0) put_mat(&b, "head0", 2, (int64_t[]){V, I}, 2.0f * sI);
    put_mat(&b, "in_proj", 2, (int64_t[]){D, I}, sI);
    if (!k->llama || k->qwen3) put_vec(&b, "in_proj.bias", D, 0.0f, 0.02f, vt);
    put_dense(&b, "embed.weight", 3, (int64_t[]){Q - 1, V, D}, gen(&b, (size_t)((Q - 1) * V * D), 0.0f, 1.0f),
              (size_t)((Q - 1) * V * D), vt);
    if (!k->llama)
        put_dense(&b, "pos.weight", 2, (int64_t[]){Q, D}, gen(&b, (size_t)(Q * D), 0.0f, 0.3f), (size_t)(Q * D), vt);
    char nm[160];
    for (int i = 0; i < k->L; i++) {
#define P(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, i), nm)
        put_vec(&b, P("norm1.weight"), D, 1.0f, 0.1f, vt);
        if (!k->llama) put_vec(&b, P("norm1.bias"), D, 0.0f, 0.05f, vt);
        put_mat(&b, P("qkv"), 2, (int64_t[]){(H + 2 * KV) * HD, D}, sD);
        if (!k->llama) put_vec(&b, P("qkv.bias"), (H + 2 * KV) * HD, 0.0f, 0.02f, vt);
        put_mat(&b, P("out"), 2, (int64_t[]){D, H * HD}, 0.5f * sA);
        if (!k->llama) put_vec(&b, P("out.bias"), D, 0.0f, 0.02f, vt);
        put_vec(&b, P("norm2.weight"), D, 1.0f, 0.1f, vt);
        if (!k->llama) put_vec(&b, P("norm2.bias"), D, 0.0f, 0.05f, vt);
        put_mat(&b, P("fc1"), 2, (int64_t[]){k->llama ? 2 * F : F, D}, sD);
        if (!k->llama) put_vec(&b, P("fc1.bias"), F, 0.0f, 0.02f, vt);
        put_mat(&b, P("fc2"), 2, (int64_t[]){D, F}, 0.5f * sF);
        if (!k->llama) put_vec(&b, P("fc2.bias"), D, 0.0f, 0.02f, vt);
        if (k->qwen3) {
            put_vec(&b, P("q_norm.weight"), HD, 1.0f, 0.3f, vt);
            put_vec(&b, P("k_norm.weight"), HD, 1.0f, 0.3f, vt);
        }
#undef P
    }
    put_vec(&b, "norm.weight", D, 1.0f, 0.1f, vt);
    if (!k->llama) put_vec(&b, "norm.bias", D, 0.0f, 0.05f, vt);
    put_mat(&b, "heads", 3, (int64_t[]){Q - 1, V, D}, 2.0f * sD);

config:;
    char cfg[1024], rope[256] = "null", quant[128] = "", moshi[80] = "";
    if (k->TV) snprintf(moshi, sizeof moshi, ",\"per_position\":true,\"text_vocab\":%d", k->TV);
    else if (k->llama && !k->scaling)
        snprintf(rope, sizeof rope, "{\"theta\":%.1f,\"scaling\":null}", k->theta);
    else if (k->llama)
        snprintf(rope, sizeof rope,
                 "{\"theta\":%.1f,\"scaling\":{\"factor\":32.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                 "\"original_max_position_embeddings\":8192}}",
                 k->theta);
    if (wt == DD_Q8 || wt == DD_Q4)
        snprintf(quant, sizeof quant, ",\"quantization\":{\"group_size\":64,\"bits\":%d,\"mode\":\"affine\"}",
                 wt == DD_Q8 ? 8 : 4);
    snprintf(cfg, sizeof cfg,
             "{\"format\":\"depthdec\",\"version\":1,\"block\":\"%s\",\"levels\":%d,\"codebook_size\":%d,"
             "\"input_dim\":%d,\"dim\":%d,\"layers\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
             "\"ffn_dim\":%d,\"norm_eps\":%s,\"rope\":%s%s%s%s}",
             k->llama ? "llama" : "gpt", k->Q, k->V, k->I, k->D, k->L, k->H, k->KV, k->HD, k->F,
             k->qwen3 ? "1e-06" : k->TV ? "1e-08" : "1e-05", rope, quant, k->qwen3 ? ",\"qk_norm\":true" : "", moshi);

    uint8_t *img = NULL;
    size_t size = 0;
    dd_status s = dd_st_list_finish(&b.l, "depthdec.config", cfg, &img, &size);
    if (s) return s;
    char label[128];
    snprintf(label, sizeof label, "synthetic %s %s", k->name, dd_dtype_name(wt));
    return dd_model_from_image(out, label, img, size, err);
}
