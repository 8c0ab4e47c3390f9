/* examples/host_api.c — depthdec's host API end to end, as a program that already holds its weights in memory
 * (its own loader, or a framework's tensors) uses it:
 *   1. dd_model_from_tensors: a small CSM-shaped model from named tensors (HF CSM names and layouts, float32,
 *      deterministic pseudo-random values made here) and the text of its config.json; no file is written;
 *   2. dd_decoder_create on the fastest backend available (auto), for a batch of streams;
 *   3. dd_decode: one frame per stream, c0 sampled from the level-0 head (lm_head), greedy and sampled;
 *   4. dd_score: teacher-forced logits, whose argmax must give back the greedy codes.
 * Prints the codes and exits 0, or prints the library's message and exits 1. Built by `make`
 * ($(BUILD)/examples/host_api) and run by tests/test_examples.c. The device-pointer API: examples/device_api.c. */
#include "depthdec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { Q = 4, V = 16, I = 24, D = 16, H = 2, KV = 1, HD = 8, F = 32, N = 3 };

static const char *const config_json =
    "{\"model_type\": \"csm\", \"hidden_size\": 24, \"num_codebooks\": 4,"
    " \"depth_decoder_config\": {\"num_codebooks\": 4, \"vocab_size\": 16, \"backbone_hidden_size\": 24,"
    " \"hidden_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 8, \"intermediate_size\": 32, \"rms_norm_eps\": 1e-5, \"hidden_act\": \"silu\","
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}";

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rnd(float a) { /* uniform in [-a, a), xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return a * ((float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

/* One float32 tensor of up to 3 dims filled with center + U(-a, a). */
static dd_tensor_view make(const char *name, int nd, int64_t d0, int64_t d1, int64_t d2, float center, float a) {
    dd_tensor_view t = {.name = name, .dtype = DD_F32, .ndim = nd, .shape = {d0, d1, d2}};
    size_t n = (size_t)d0 * (nd > 1 ? (size_t)d1 : 1) * (nd > 2 ? (size_t)d2 : 1);
    float *p = malloc(n * sizeof *p);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) p[i] = center + rnd(a);
    t.data = p;
    return t;
}

static int fail(const dd_error *e) {
    fprintf(stderr, "host_api: %s: %s\n", dd_status_name(e->code), e->msg);
    return 1;
}

int main(void) {
    const float sI = 1.7f / sqrtf(I), sD = 1.7f / sqrtf(D), sF = 1.7f / sqrtf(F);
    dd_tensor_view t[] = {
        make("lm_head.weight", 2, V, I, 0, 0, 2 * sI),
        make("depth_decoder.model.embed_tokens.weight", 2, Q * V, I, 0, 0, 1),
        make("depth_decoder.model.inputs_embeds_projector.weight", 2, D, I, 0, 0, sI),
        make("depth_decoder.model.layers.0.input_layernorm.weight", 1, D, 0, 0, 1, 0.1f),
        make("depth_decoder.model.layers.0.post_attention_layernorm.weight", 1, D, 0, 0, 1, 0.1f),
        make("depth_decoder.model.layers.0.self_attn.q_proj.weight", 2, H * HD, D, 0, 0, sD),
        make("depth_decoder.model.layers.0.self_attn.k_proj.weight", 2, KV * HD, D, 0, 0, sD),
        make("depth_decoder.model.layers.0.self_attn.v_proj.weight", 2, KV * HD, D, 0, 0, sD),
        make("depth_decoder.model.layers.0.self_attn.o_proj.weight", 2, D, H * HD, 0, 0, sD),
        make("depth_decoder.model.layers.0.mlp.gate_proj.weight", 2, F, D, 0, 0, sD),
        make("depth_decoder.model.layers.0.mlp.up_proj.weight", 2, F, D, 0, 0, sD),
        make("depth_decoder.model.layers.0.mlp.down_proj.weight", 2, D, F, 0, 0, sF),
        make("depth_decoder.model.norm.weight", 1, D, 0, 0, 1, 0.1f),
        make("depth_decoder.codebooks_head.weight", 3, Q - 1, D, V, 0, 2 * sD),
    };
    const size_t nt = sizeof t / sizeof *t;
    dd_error e;
    dd_model *m = NULL;
    dd_status s = dd_model_from_tensors(&m, config_json, t, nt, &e);
    for (size_t i = 0; i < nt; i++) free((void *)t[i].data); /* the model keeps its own copy */
    if (s) return fail(&e);
    const dd_config *c = dd_model_config(m);
    printf("model: %s, Q %d, V %d, input_dim %d, dim %d, %d layer(s), %d tensors\n", dd_model_source(m), c->levels,
           c->codebook_size, c->input_dim, c->dim, c->layers, dd_model_tensor_count(m));

    dd_decoder_params p = dd_decoder_default_params(); /* auto: the fastest backend available */
    p.max_batch = N;
    dd_decoder *d = NULL;
    if (dd_decoder_create(&d, m, &p, &e)) {
        dd_model_free(m);
        return fail(&e);
    }
    printf("backend: %s\n", dd_backend_name(dd_decoder_backend(d)));

    float hidden[N * I];
    for (int i = 0; i < N * I; i++) hidden[i] = rnd(2.0f);
    uint64_t seeds[N] = {11, 12, 13}, frames[N] = {0, 0, 0};
    int32_t greedy[N * Q], sampled[N * Q];
    float logits[N * (Q - 1) * V];
    dd_sampling g = {.temperature = 0, .top_k = 0}, smp = dd_sampling_default();
    int bad = 0;
    if ((s = dd_decode(d, N, hidden, NULL, seeds, frames, &g, greedy, &e)) ||
        (s = dd_decode(d, N, hidden, NULL, seeds, frames, &smp, sampled, &e)) ||
        (s = dd_score(d, N, hidden, greedy, logits, NULL, &e))) {
        bad = fail(&e);
    } else {
        for (int r = 0; r < N; r++) {
            printf("stream %llu frame 0: greedy", (unsigned long long)seeds[r]);
            for (int l = 0; l < Q; l++) printf(" %d", greedy[r * Q + l]);
            printf("  sampled");
            for (int l = 0; l < Q; l++) printf(" %d", sampled[r * Q + l]);
            printf("\n");
            /* teacher-forced on the greedy codes, level l's argmax is the greedy code of level l */
            for (int l = 1; l < Q; l++) {
                const float *z = logits + ((size_t)r * (Q - 1) + (l - 1)) * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (z[v] > z[best]) best = v;
                if (best != greedy[r * Q + l]) {
                    fprintf(stderr, "host_api: stream %d level %d: score argmax %d != greedy code %d\n", r, l, best,
                            greedy[r * Q + l]);
                    bad = 1;
                }
            }
        }
        if (!bad) printf("score argmax = greedy codes: ok\n");
    }
    dd_decoder_free(d);
    dd_model_free(m);
    return bad;
}
