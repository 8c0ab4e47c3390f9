/* GPU tests of the cuda backend (src/cuda/). Every test skips, saying so plainly, when the build has no CUDA
 * backend ("skipped: built without CUDA") or the machine no usable device ("skipped: no CUDA device").
 *
 *   linear     dd_cuda_linear_host against the float64 reference of tests/harness.c (TH_TOL_LINEAR), on fresh
 *              random shapes (odd N and K, T from 1 to 40), every weight type (f32, f16, bf16, MLX q8/q4 with
 *              groups 8..128 and every scale type), every norm/activation/epilogue; outputs NaN-poisoned. Each case runs on both device
 *              schedules (small-batch and large-batch, forced) and the two results must be bit-identical, and
 *              the first and last row must come out bit-identical when computed alone (T = 1): the foundation of
 *              batch invariance.
 *   attend     dd_cuda_attend_host against the harness's float64 reference (TH_TOL_ATTEND, TH_TOL_ROPE): MHA/GQA,
 *              RoPE, odd head dims, 1..32 new positions, up to 64 keys; outputs and new cache rows NaN-poisoned.
 *   sample     dd_cuda_sample_host bit-identical to dd_sample_core on many random rows with ties, NaN, +-inf,
 *              rows without a finite logit, every temperature/top-k regime (greedy, K = 1, K >= V, tiny T).
 *   e2e        through the public API against the ref backend: teacher-forced logits within 1e-4 * max|ref|,
 *              decoded codes identical to ref's on >= 99.9% of (stream, level) pairs (tiny GPT, llama and Moshi
 *              models in every weight type, plus one stream-frame of the GPT-, CSM- and Moshi-dims models; Moshi
 *              with a text token per stream, level-0 logits and pad ids V among the input codes).
 *   invariance a stream decoded alone and inside a batch of 256 (at several rows) gives the same codes, and its
 *              teacher-forced logits are bit-identical (GPT dims bf16 and q8, CSM dims, tiny models, tiny Moshi);
 *              a batch of 512 runs; a stream alone runs on the latency executor, the batch on the frame kernel.
 *   executors  the latency executor (lat.cu) against the frame kernel on the same inputs: bit-identical logits,
 *              identical codes (tiny models in every weight type at n 1/3/8, tiny Moshi at n 1/3 and 8/13;
 *              GPT, CSM and Moshi dims unless quick).
 *   device_api dd_decode_device / dd_score_device on device arrays on a non-blocking stream == dd_decode /
 *              dd_score on the same inputs, bit for bit (tiny GPT and llama models, several weight types, n 1/3/8
 *              on the latency executor, 20 on it in groups, 60 on the frame kernel; c0 given and sampled, greedy
 *              and sampled, NULL seeds/frames, score with and without level-0 logits); device outputs poisoned.
 *   device_capture  several frames of dd_decode_device and a dd_score_device captured in a CUDA graph
 *              (cudaStreamBeginCapture), replayed 3 times on fresh inputs written into the captured buffers, with
 *              host-path calls in between: each replay's codes and logits == the host path's.
 *   device_errors   a NaN hidden, a c0 or score code out of range: the device call returns DD_OK, writes nothing
 *              (outputs poisoned before), and dd_decoder_sync (or the next host call) returns the host path's
 *              error and message; the first of several failures is the one reported; bad pointers (host memory),
 *              a first call inside a capture; a Moshi decoder refused by the device calls (no text argument).
 *   device_api_host_backends  (runs everywhere) ref/cpu decoders refuse the device calls naming the backend.
 * Timings are not tests: depthdec bench, dev/cuda/lat_timeline.cu.
 * DD_TEST_QUICK=1 keeps only small cases (for compute-sanitizer runs; 2 and 3 fewer still, for racecheck: see
 * test_executors and test_device_api); DD_TEST_ONLY=<name> runs one test;
 * DD_TEST_SEED=<n> replays a seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "depthdec.h"
#include "harness.h"
#include "kernels.h"
#include "model/model.h"
#include "sample.h"

#ifdef DD_WITH_CUDA
#include <cuda_runtime_api.h>
void dd_cuda_test_force_big(int on);                            /* src/cuda/host_entry.cu */
int dd_cuda_test_crossover(dd_decoder *d, int nmax); /* src/cuda/backend.cu: latency executor up to nmax streams
                                                     * (< 0: unchanged); returns the bound before */
int dd_cuda_test_tput(dd_decoder *d, int nmin); /* src/cuda/backend.cu: throughput executor from nmin streams (< 0:
                                                  * unchanged); 0 none, 1 some linears on the frame kernel, 2 all on
                                                  * the tile */
/* the kernel entry points (dd_cuda_linear_host, _attend_host, _sample_host) are hooks of the registry's cuda row */
static const dd_backend_test *cu_hooks(void) { return &dd_registry_row(DD_BACKEND_CUDA)->test; }
#endif

static int cuda_ready(void) {
#ifndef DD_WITH_CUDA
    printf("skipped: built without CUDA\n");
    return 0;
#else
    if (!dd_backend_available(DD_BACKEND_CUDA)) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    return 1;
#endif
}
#define NEED_CUDA()                                                                                                \
    do {                                                                                                           \
        if (!cuda_ready()) {                                                                                       \
            skip();                                                                                                \
            return;                                                                                                \
        }                                                                                                          \
    } while (0)

static int g_quick;

#ifdef DD_WITH_CUDA

/* ---- linear ---------------------------------------------------------------------------------------------- */

static int g_lin_runs;
static double g_lin_worst;

/* One case (harness.h: random inputs, float64 reference) on both device schedules, then its first and last row
 * alone. */
static void check_linear(const th_lcase *c) {
    const int T = c->T, N = c->N;
    th_linear L;
    th_linear_make(&L, c);
    const int ldy = L.ldy;
    float *y[2];
    for (int big = 0; big < 2; big++) {
        y[big] = malloc((size_t)T * ldy * sizeof(float));
        assert_non_null(y[big]);
        dd_linear_args a = th_linear_args(&L, y[big]);
        dd_error e;
        dd_cuda_test_force_big(big);
        dd_status st = cu_hooks()->linear_host(&a, 0, 0, &e);
        dd_cuda_test_force_big(0);
        if (st) fail_msg("linear T=%d N=%d K=%d %s: %s", T, N, c->K, dd_dtype_name(c->type), e.msg);
        assert_int_equal(th_linear_check(&L, y[big], big ? "cuda (large schedule)" : "cuda (small schedule)",
                                         &g_lin_worst),
                         0);
        g_lin_runs++;
    }
    /* both schedules: the same bits */
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++)
            if (th_bits(y[0][(size_t)t * ldy + j]) != th_bits(y[1][(size_t)t * ldy + j]))
                fail_msg("linear T=%d N=%d K=%d %s: schedules differ at [%d,%d]: %.9g vs %.9g", T, N, c->K,
                         dd_dtype_name(c->type), t, j, y[0][(size_t)t * ldy + j], y[1][(size_t)t * ldy + j]);
    /* the first and the last row alone (T = 1) give the same bits as inside the batch */
    if (T > 1 && !(c->res && c->inplace)) {
        int rows[2] = {0, T - 1};
        for (int ri = 0; ri < 2; ri++) {
            int t = rows[ri];
            float *y1 = malloc((size_t)T * ldy * sizeof(float));
            assert_non_null(y1);
            dd_linear_args a = th_linear_args(&L, y1); /* then narrowed to row t */
            a.x = L.x + (size_t)t * L.ldx;
            a.T = 1;
            a.residual = L.res ? L.res + (size_t)t * L.ldr : NULL;
            a.ldr = L.ldr;
            a.add = L.add ? L.add + (size_t)t * L.lda : NULL;
            dd_error e;
            assert_int_equal(cu_hooks()->linear_host(&a, 0, 0, &e), DD_OK);
            for (int j = 0; j < N; j++)
                if (th_bits(y1[j]) != th_bits(y[0][(size_t)t * ldy + j]))
                    fail_msg("linear T=%d N=%d K=%d %s: row %d alone differs at column %d: %.9g vs %.9g", T, N, c->K,
                             dd_dtype_name(c->type), t, j, y1[j], y[0][(size_t)t * ldy + j]);
            free(y1);
        }
    }
    free(y[0]);
    free(y[1]);
    th_linear_free(&L);
}

/* Random options (harness.h); a LayerNorm here always has its bias. */
static th_lcase rand_case(int T, int N, int K, dd_dtype type, int group) {
    static const dd_dtype sbts[] = {DD_F16, DD_BF16, DD_F32};
    dd_dtype sbt = sbts[rnd_below(3)];
    th_lcase c = th_lcase_rand(T, N, K, type, group, sbt);
    c.norm_bias = 1;
    return c;
}

static void test_linear(void **state) {
    (void)state;
    NEED_CUDA();
    static const dd_dtype types[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    static const int groups[] = {8, 16, 32, 64, 128};
    const int ncase = g_quick ? 12 : 90;
    for (int i = 0; i < ncase; i++) {
        dd_dtype ty = types[i % 5];
        int T = i % 7 == 0 ? 9 + rnd_below(32) : 1 + rnd_below(8);
        int N = 1 + rnd_below(i % 3 ? 80 : 400);
        int K, g = 0;
        if (ty == DD_Q8 || ty == DD_Q4) {
            g = groups[rnd_below(5)];
            K = g * (1 + rnd_below(g >= 64 ? 12 : 24));
        } else {
            K = i % 4 == 0 ? 1 + rnd_below(40) : 16 * (1 + rnd_below(70)) + (i % 2 ? rnd_below(16) : 0);
        }
        th_lcase c = rand_case(T, N, K, ty, g);
        check_linear(&c);
    }
    /* the seed's shapes: qkv, fc1 with SwiGLU pairs, fc2 with a long K */
    if (!g_quick) {
        th_lcase a = rand_case(2, 3072, 1024, DD_BF16, 0);
        check_linear(&a);
        th_lcase b = rand_case(1, 512, 1024, DD_Q8, 64);
        b.act = DD_ACT_SWIGLU;
        check_linear(&b);
        th_lcase d = rand_case(3, 100, 8192, DD_BF16, 0);
        check_linear(&d);
    }
    printf("  linear: %d runs within tolerance (worst %.3f of tolerance); schedules and rows bit-identical\n",
           g_lin_runs, g_lin_worst);
}

/* ---- attend ---------------------------------------------------------------------------------------------- */

static void test_attend(void **state) {
    (void)state;
    NEED_CUDA();
    const int ncase = g_quick ? 6 : 40;
    double worst = 0;
    for (int ci = 0; ci < ncase; ci++) {
        static const int hd_list[] = {1, 7, 10, 16, 18, 24, 64, 128};
        int HD = hd_list[rnd_below(8)], KV = 1 + rnd_below(4), H = KV * (1 + rnd_below(4));
        int rope = HD > 1 && rnd_below(2);
        int T = 1 + rnd_below(ci % 5 == 0 ? 32 : 3), p0 = rnd_below(33 - T);
        if (ci == 1) T = 32, p0 = 32; /* 64 keys: the most a frame can have (DD_MAX_LEVELS) */
        th_attend A;
        th_attend_make_qk(&A, T, p0, H, KV, HD, rope, ci % 2 ? 500000.0 : 10000.0, ci % 3 == 2); /* Qwen3 q/k norms */
        float *out = malloc((size_t)T * H * HD * 4), *kc = malloc((size_t)A.Q * A.kvw * 4),
              *vc = malloc((size_t)A.Q * A.kvw * 4);
        assert_true(out && kc && vc);
        dd_attend_args a = th_attend_args(&A, out, kc, vc);
        dd_error e;
        if (cu_hooks()->attend_host(&a, 0, 0, &e)) fail_msg("attend: %s", e.msg);
        assert_int_equal(th_attend_check(&A, out, kc, vc, "cuda", &worst), 0);
        free(out), free(kc), free(vc);
        th_attend_free(&A);
    }
    printf("  attend: %d cases, worst abs error %.3g\n", ncase, worst);
}

/* ---- sampler --------------------------------------------------------------------------------------------- */

static void test_sample(void **state) {
    (void)state;
    NEED_CUDA();
    static const int Vs[] = {1, 2, 3, 5, 64, 257, 2048, 2051, 5000};
    static const float Ts[] = {0.0f, 0.9f, 1.0f, 0.5f, 1.7f, 1e-30f, 3.0f};
    const int rounds = g_quick ? 6 : 120, n = 48;
    int checked = 0, none = 0;
    for (int r = 0; r < rounds; r++) {
        int V = Vs[rnd_below(9)];
        float T = Ts[rnd_below(7)];
        int Kk[] = {0, 1, 2, 50, V - 1, V, V + 7};
        int K = Kk[rnd_below(7)];
        if (K < 0) K = 0;
        int level = rnd_below(32);
        float *z = malloc((size_t)n * V * 4);
        uint64_t seeds[48], frames[48];
        for (int s = 0; s < n; s++) {
            seeds[s] = rnd64();
            frames[s] = rnd_below(4) ? (uint64_t)rnd_below(1000) : rnd64();
            int mode = rnd_below(6);
            for (int i = 0; i < V; i++) {
                float v = rnd_sym(4.0f);
                if (mode == 1) v = (float)rnd_below(5); /* many ties */
                if (mode == 2 && rnd_below(4) == 0) v = NAN;
                if (mode == 3 && rnd_below(8) == 0) v = rnd_below(2) ? INFINITY : -INFINITY;
                if (mode == 4) v = rnd_below(3) ? -INFINITY : (rnd_below(2) ? NAN : v); /* few or no finite */
                if (mode == 5 && rnd_below(3) == 0) v = 0.0f * (rnd_below(2) ? 1 : -1);
                z[(size_t)s * V + i] = v;
            }
        }
        int32_t codes[48];
        dd_error e;
        dd_status st = cu_hooks()->sample_host(z, n, V, T, K, seeds, frames, level, codes, &e);
        if (st != DD_OK && st != DD_ENUMERIC) fail_msg("sample: %s", e.msg);
        for (int s = 0; s < n; s++) {
            int32_t want = dd_sample_core(z + (size_t)s * V, V, T, K, seeds[s], frames[s], level);
            if (codes[s] != want)
                fail_msg("sample V=%d T=%g K=%d level %d row %d: device %d, cpu %d", V, (double)T, K, level, s,
                         codes[s], want);
            none += want < 0;
            checked++;
        }
        free(z);
    }
    printf("  sample: %d rows bit-identical to dd_sample_core (%d without a finite logit)\n", checked, none);
}

/* ---- end to end ----------------------------------------------------------------------------------------- */

static dd_decoder *make(dd_model *m, dd_backend b, int max_batch) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = b;
    p.max_batch = max_batch;
    dd_decoder *d;
    dd_error e;
    if (dd_decoder_create(&d, m, &p, &e)) fail_msg("decoder: %s", e.msg);
    return d;
}

static float *rand_hidden(const dd_model *m, int n) {
    const dd_config *c = dd_model_config(m);
    float *h = malloc((size_t)n * c->input_dim * 4);
    for (size_t i = 0; i < (size_t)n * c->input_dim; i++) h[i] = rnd_sym(1.7f);
    return h;
}

/* Moshi's text token per stream (the extra id text_vocab too), or NULL for a model without text */
static int32_t *rand_text(const dd_model *m, int n) {
    const int TV = dd_model_config(m)->text_vocab;
    if (!TV) return NULL;
    int32_t *t = malloc((size_t)n * sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < n; i++) t[i] = i % 7 == 3 ? TV : (int32_t)(rnd64() % (uint64_t)(TV + 1));
    return t;
}

/* teacher-forced codes; Moshi's inputs include its tables' pad/initial id V in some rows */
static int32_t *rand_codes_in(const dd_model *m, int n) {
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels;
    int32_t *codes = th_rand_codes(m, n, Q);
    if (c->per_position)
        for (int r = 0; r < n; r += 2) codes[(size_t)r * Q + (r / 2) % Q] = c->codebook_size;
    return codes;
}

static long g_pairs, g_agree;

/* cuda vs ref on n streams: logits (score) and codes (decode, sampled and greedy) */
static void e2e(const char *kind, dd_dtype wt, int n, int full) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size;
    dd_decoder *ref = make(m, DD_BACKEND_REF, n), *cu = make(m, DD_BACKEND_CUDA, n);
    dd_cuda_test_crossover(cu, n); /* batches up to 8 on the latency executor (not yet the default) */
    float *h = rand_hidden(m, n);
    int32_t *codes = rand_codes_in(m, n), *text = rand_text(m, n);
    size_t nl = (size_t)n * (Q - 1) * V;
    float *lr = malloc(nl * 4), *lc = malloc(nl * 4);
    float *l0r = c->has_head0 ? malloc((size_t)n * V * 4) : NULL, *l0c = c->has_head0 ? malloc((size_t)n * V * 4) : NULL;
    th_poison(lc, nl);
    if (l0c) th_poison(l0c, (size_t)n * V);
    assert_int_equal(dd_score_text(ref, n, h, text, codes, lr, l0r, &e), DD_OK);
    if (dd_score_text(cu, n, h, text, codes, lc, l0c, &e)) fail_msg("score: %s", e.msg);
    double mx = 0, err = 0;
    for (size_t i = 0; i < nl; i++) {
        mx = fmax(mx, fabs(lr[i]));
        err = fmax(err, isnan(lc[i]) ? INFINITY : fabs(lc[i] - lr[i]));
    }
    if (l0c)
        for (int i = 0; i < n * V; i++) err = fmax(err, isnan(l0c[i]) ? INFINITY : fabs(l0c[i] - l0r[i]));
    int32_t *cr = malloc((size_t)n * Q * 4), *cc = malloc((size_t)n * Q * 4);
    uint64_t *seeds = malloc((size_t)n * 8), *frames = malloc((size_t)n * 8);
    for (int i = 0; i < n; i++) seeds[i] = rnd64(), frames[i] = (uint64_t)i;
    long pairs = 0, agree = 0;
    dd_sampling ss[2] = {dd_sampling_default(), {0.0f, 0}};
    int32_t *c0b = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) c0b[i] = codes[(size_t)i * Q];
    for (int si = 0; si < (full ? 2 : 1); si++)
        for (int withc0 = c->has_head0 && full ? 0 : 1; withc0 <= 1; withc0++) {
            const int32_t *c0 = withc0 ? c0b : NULL;
            assert_int_equal(dd_decode_text(ref, n, h, text, c0, seeds, frames, &ss[si], cr, &e), DD_OK);
            for (int i = 0; i < n * Q; i++) cc[i] = -7;
            if (dd_decode_text(cu, n, h, text, c0, seeds, frames, &ss[si], cc, &e)) fail_msg("decode: %s", e.msg);
            for (int i = 0; i < n * Q; i++) agree += cc[i] == cr[i];
            pairs += (long)n * Q;
        }
    free(c0b);
    printf("  %-10s %-4s n=%-3d max logit err %.3g of max|ref| %.3g; codes %ld/%ld identical to ref\n", kind,
           dd_dtype_name(wt), n, err / mx, mx, agree, pairs);
    assert_true(err <= TH_LOGIT_REL * mx);
    g_pairs += pairs;
    g_agree += agree;
    free(h), free(codes), free(text), free(lr), free(lc), free(l0r), free(l0c), free(cr), free(cc), free(seeds),
        free(frames);
    dd_decoder_free(ref);
    dd_decoder_free(cu);
    dd_model_free(m);
}

static void test_e2e(void **state) {
    (void)state;
    NEED_CUDA();
    static const dd_dtype types[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    g_pairs = g_agree = 0;
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < 5; t++) {
            /* DD_TEST_QUICK=2 (racecheck, ~100x slower): one weight type per block kind, 2 streams */
            if (g_quick >= 2 && types[t] != (k ? DD_Q4 : DD_BF16)) continue;
            e2e(k ? "tiny-llama" : "tiny-gpt", types[t], g_quick >= 2 ? 2 : g_quick ? 4 : 64, 1);
            if (!g_quick) e2e(k ? "tiny-llama" : "tiny-gpt", types[t], 5, 1); /* on the latency executor */
        }
    /* Moshi's depformer (per-position weights, text token, level 0 from position 0's head) */
    for (int t = 0; t < 5; t++) {
        if (g_quick >= 2 && types[t] != DD_BF16) continue;
        e2e("tiny-moshi", types[t], g_quick >= 2 ? 2 : g_quick ? 4 : 64, 1); /* the frame kernel (quick: latency) */
        if (!g_quick) e2e("tiny-moshi", types[t], 3, 1);                     /* the latency executor */
    }
    if (!g_quick) { /* ref takes seconds per stream-frame at these sizes: score and one sampled decode */
        e2e("gpt", DD_BF16, 1, 0);
        e2e("csm", DD_BF16, 1, 0);
        e2e("moshi", DD_BF16, 1, 0);
    }
    printf("  codes identical to ref: %ld of %ld (stream, level) pairs = %.4f%%\n", g_agree, g_pairs,
           100.0 * g_agree / g_pairs);
    assert_true(g_agree >= TH_CODES_SAME * g_pairs);
}

/* a stream alone and inside a batch of 256: same codes, bit-identical logits */
static void invariance(const char *kind, dd_dtype wt, int B) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    dd_decoder *d = make(m, DD_BACKEND_CUDA, B);
    /* the default executors: alone the latency executor; a batch of up to 48 its groups of <= 8, else the frame
     * kernel */
    float *h = rand_hidden(m, B);
    int32_t *codes = rand_codes_in(m, B), *out = malloc((size_t)B * Q * 4), one[64], *text = rand_text(m, B);
    uint64_t *seeds = malloc((size_t)B * 8), *frames = malloc((size_t)B * 8);
    for (int i = 0; i < B; i++) seeds[i] = rnd64(), frames[i] = 1000 + (uint64_t)i;
    dd_sampling s = dd_sampling_default();
    int32_t *c0b = malloc((size_t)B * 4);
    for (int i = 0; i < B; i++) c0b[i] = codes[(size_t)i * Q];
    const int32_t *c0 = c->has_head0 ? NULL : c0b; /* sample c0 on the device when the model can */
    if (dd_decode_text(d, B, h, text, c0, seeds, frames, &s, out, &e)) fail_msg("decode: %s", e.msg);
    size_t nl = (size_t)(Q - 1) * V;
    float *lb = malloc((size_t)B * nl * 4), *l1 = malloc(nl * 4);
    if (dd_score_text(d, B, h, text, codes, lb, NULL, &e)) fail_msg("score: %s", e.msg);
    const int rows[] = {0, 1, 137 % B, B - 1};
    for (int ri = 0; ri < 4; ri++) {
        int r = rows[ri];
        const int32_t *tr = text ? text + r : NULL;
        if (dd_decode_text(d, 1, h + (size_t)r * I, tr, c0 ? c0b + r : NULL, seeds + r, frames + r, &s, one, &e))
            fail_msg("decode: %s", e.msg);
        for (int l = 0; l < Q; l++)
            if (one[l] != out[(size_t)r * Q + l])
                fail_msg("%s %s: stream %d level %d: alone %d, in a batch of %d %d", kind, dd_dtype_name(wt), r, l,
                         one[l], B, out[(size_t)r * Q + l]);
        if (dd_score_text(d, 1, h + (size_t)r * I, tr, codes + (size_t)r * Q, l1, NULL, &e))
            fail_msg("score: %s", e.msg);
        for (size_t i = 0; i < nl; i++)
            if (th_bits(l1[i]) != th_bits(lb[(size_t)r * nl + i]))
                fail_msg("%s %s: stream %d logit %zu: alone %.9g, in a batch of %d %.9g", kind, dd_dtype_name(wt), r,
                         i, l1[i], B, lb[(size_t)r * nl + i]);
    }
    printf("  %-10s %-4s streams alone == inside a batch of %d (codes and logit bits)\n", kind, dd_dtype_name(wt), B);
    free(h), free(codes), free(text), free(out), free(seeds), free(frames), free(c0b), free(lb), free(l1);
    dd_decoder_free(d);
    dd_model_free(m);
}

static void test_invariance(void **state) {
    (void)state;
    NEED_CUDA();
    invariance("tiny-gpt", DD_BF16, g_quick ? 12 : 256);
    invariance("tiny-llama", DD_Q4, g_quick ? 12 : 256);
    invariance("tiny-moshi", DD_BF16, g_quick ? 12 : 256);
    if (g_quick) return;
    invariance("tiny-moshi", DD_Q8, 20); /* the latency executor in groups */
    invariance("tiny-gpt", DD_F32, 256);
    invariance("gpt", DD_BF16, 256);
    invariance("gpt", DD_BF16, 20); /* the latency executor in groups */
    invariance("gpt", DD_Q8, 256);
    invariance("csm", DD_BF16, 256);
    invariance("gpt", DD_BF16, 512);
}

/* The latency executor (lat.cu, batches up to its crossover; tput = 0) or the throughput executor (tput.cu; tput =
 * 1) against the frame kernel (frame.cu) on the same decoder and inputs: bit-identical logits (score, with and
 * without level-0 logits) and identical codes (decode: sampled and greedy, c0 given and sampled). */
static void executors_vs(const char *kind, dd_dtype wt, int n, int tput) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size;
    dd_decoder *d = make(m, DD_BACKEND_CUDA, n);
    float *h = rand_hidden(m, n);
    int32_t *codes = rand_codes_in(m, n), *c0 = malloc((size_t)n * 4), *text = rand_text(m, n);
    for (int i = 0; i < n; i++) c0[i] = codes[(size_t)i * Q];
    uint64_t *seeds = malloc((size_t)n * 8), *frames = malloc((size_t)n * 8);
    for (int i = 0; i < n; i++) seeds[i] = rnd64(), frames[i] = rnd64() >> 20;
    const size_t nl = (size_t)n * (Q - 1) * V, n0 = c->has_head0 ? (size_t)n * V : 0;
    float *lg[2], *l0[2];
    int32_t *cd[2][4];
    dd_sampling ss[2] = {dd_sampling_default(), {0.0f, 0}};
    const char *name = tput ? "throughput executor" : "latency executor";
    if (tput && !dd_cuda_test_tput(d, 0)) fail_msg("%s %s n=%d: no throughput executor on this device", kind,
                                                    dd_dtype_name(wt), n);
    if (tput == 2 && dd_cuda_test_tput(d, 0) != 2)
        fail_msg("%s %s n=%d: a linear of the model is not on the throughput executor's tile", kind,
                 dd_dtype_name(wt), n);
    for (int x = 0; x < 2; x++) { /* x = 0: the executor under test, 1: the frame kernel */
        dd_cuda_test_crossover(d, x || tput ? 0 : n);
        dd_cuda_test_tput(d, x || !tput ? 0 : 1);
        lg[x] = malloc(nl * 4);
        l0[x] = n0 ? malloc(n0 * 4) : NULL;
        for (size_t i = 0; i < nl; i++) lg[x][i] = NAN;
        for (size_t i = 0; i < n0; i++) l0[x][i] = NAN;
        if (dd_score_text(d, n, h, text, codes, lg[x], l0[x], &e)) fail_msg("score: %s", e.msg);
        for (int k = 0; k < 4; k++) {
            cd[x][k] = malloc((size_t)n * Q * 4);
            for (int i = 0; i < n * Q; i++) cd[x][k][i] = -7;
            const int32_t *cc = (k & 2) || !c->has_head0 ? c0 : NULL;
            if (dd_decode_text(d, n, h, text, cc, seeds, frames, &ss[k & 1], cd[x][k], &e))
                fail_msg("decode: %s", e.msg);
            /* the throughput executor replays a frame's launches as a graph from the second call of the same
             * request on (captured then): repeat the call twice, poisoned, and compare with the first */
            for (int r = 0; tput && x == 0 && r < 2; r++) {
                int32_t *again = malloc((size_t)n * Q * 4);
                for (int i = 0; i < n * Q; i++) again[i] = -7;
                if (dd_decode_text(d, n, h, text, cc, seeds, frames, &ss[k & 1], again, &e))
                    fail_msg("decode again: %s", e.msg);
                for (int i = 0; i < n * Q; i++)
                    if (again[i] != cd[x][k][i])
                        fail_msg("%s %s n=%d: decode %d, call %d (graph): stream %d level %d: %d, first call %d", kind,
                                 dd_dtype_name(wt), n, k, r + 2, i / Q, i % Q, again[i], cd[x][k][i]);
                free(again);
            }
        }
        if (tput && x == 0) { /* the score twice more: its graph's logits */
            float *again = malloc(nl * 4);
            for (int r = 0; r < 2; r++) {
                for (size_t i = 0; i < nl; i++) again[i] = NAN;
                if (dd_score_text(d, n, h, text, codes, again, l0[x], &e)) fail_msg("score again: %s", e.msg);
                for (size_t i = 0; i < nl; i++)
                    if (th_bits(again[i]) != th_bits(lg[x][i]))
                        fail_msg("%s %s n=%d: score call %d (graph): logit %zu: %.9g, first call %.9g", kind,
                                 dd_dtype_name(wt), n, r + 2, i, again[i], lg[x][i]);
            }
            free(again);
        }
    }
    for (size_t i = 0; i < nl; i++)
        if (th_bits(lg[0][i]) != th_bits(lg[1][i]))
            fail_msg("%s %s n=%d: logit %zu (stream %zu): %s %.9g, frame kernel %.9g", kind, dd_dtype_name(wt), n,
                     i, i / ((size_t)(Q - 1) * V), name, lg[0][i], lg[1][i]);
    for (size_t i = 0; i < n0; i++)
        if (th_bits(l0[0][i]) != th_bits(l0[1][i]))
            fail_msg("%s %s n=%d: level-0 logit %zu: %.9g vs %.9g", kind, dd_dtype_name(wt), n, i, l0[0][i], l0[1][i]);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < n * Q; i++)
            if (cd[0][k][i] != cd[1][k][i] || cd[0][k][i] < 0)
                fail_msg("%s %s n=%d: decode %d: stream %d level %d: %s %d, frame kernel %d", kind,
                         dd_dtype_name(wt), n, k, i / Q, i % Q, name, cd[0][k][i], cd[1][k][i]);
    printf("  %-10s %-4s n=%d: %s == frame kernel (logit bits, codes)\n", kind, dd_dtype_name(wt), n, name);
    for (int x = 0; x < 2; x++) {
        free(lg[x]), free(l0[x]);
        for (int k = 0; k < 4; k++) free(cd[x][k]);
    }
    free(h), free(codes), free(c0), free(text), free(seeds), free(frames);
    dd_decoder_free(d);
    dd_model_free(m);
}

static void executors(const char *kind, dd_dtype wt, int n) { executors_vs(kind, wt, n, 0); }

/* The default crossover where the throughput executor takes every linear (backend.cu, from exec_ab's measurements
 * of 2026-12-06): the latency executor up to 3 streams when a pass's weights are bf16 and at most 128 MB, else one
 * stream. The models named here must be ones the throughput executor covers entirely: the check fails otherwise. */
static void crossover_is(const char *kind, dd_dtype wt, int want) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    dd_decoder *d = make(m, DD_BACKEND_CUDA, 16);
    const int covers = dd_cuda_test_tput(d, -1), lt = dd_cuda_test_crossover(d, -1);
    if (covers != 2)
        fail_msg("%s %s: not every linear on the throughput executor (%d)", kind, dd_dtype_name(wt), covers);
    if (lt != want)
        fail_msg("%s %s: the latency executor takes up to %d streams, expected %d", kind, dd_dtype_name(wt), lt, want);
    dd_decoder_free(d);
    dd_model_free(m);
}

/* The throughput executor (tensor-core linears where the shape suits the tile, the frame kernel for the other ops)
 * against the frame kernel: GPT, CSM (gate/up pairs, K 8192) and Moshi (per-position weights) dims at token counts
 * that are and are not multiples of the tiles (64, 128), so the tile and split choices vary; tiny models (no linear
 * suits the tile: every op on the frame kernel in runs between none) and quantized weights (not on the tile). */
static void test_tput(void **state) {
    (void)state;
    NEED_CUDA();
    crossover_is("gpt", DD_BF16, 3);   /* 100 MB a pass */
    crossover_is("csm", DD_BF16, 1);   /* ~210 MB a pass */
    crossover_is("gpt", DD_Q8, 1);     /* QINT weights */
    executors_vs("tiny-gpt", DD_BF16, 12, 1);
    executors_vs("gpt", DD_BF16, 9, 1);
    if (g_quick >= 3) return; /* DD_TEST_QUICK=3: racecheck of the tile and the attention kernels (tp_attend3<64>) */
    executors_vs("gpt", DD_Q8, 9, 2); /* q8 / q4 on the tile (2: every linear there; QINT: group partials closed
                                       * between wgmma groups) */
    if (g_quick >= 2) return;
    executors_vs("gpt", DD_BF16, 64, 1);
    executors_vs("gpt", DD_BF16, 100, 1);
    executors_vs("csm", DD_BF16, 33, 1);
    executors_vs("gpt", DD_Q4, 40, 2);
    executors_vs("csm", DD_Q8, 17, 2);
    if (g_quick) return;
    executors_vs("gpt", DD_BF16, 300, 1);
    executors_vs("gpt", DD_Q8, 20, 2);
    executors_vs("gpt", DD_Q8, 260, 2);
    executors_vs("moshi", DD_Q8, 12, 1); /* per-position slices, gate/up pairs (fc1 5632 rows), fc2 K 2816 */
    executors_vs("csm", DD_BF16, 130, 1);
    executors_vs("moshi", DD_BF16, 24, 1);
}

static void test_executors(void **state) {
    (void)state;
    NEED_CUDA();
    static const dd_dtype types[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    static const int ns[] = {1, 3, 8};
    if (g_quick >= 3) { /* DD_TEST_QUICK=3: racecheck of the latency executor (quick 2 outlasts 400 s there): one
                         * case per block kind, bf16 and q8/q4 linears, attention with and without RoPE, the sampler */
        executors("tiny-gpt", DD_BF16, 1);
        executors("tiny-llama", DD_Q4, 3);
        executors("tiny-wide", DD_BF16, 1); /* fc2 K 3200: split over two SMs at a slab boundary, slab sums folded */
        return;
    }
    /* fc2's K over four slabs (the last partial): the latency executor's K split (bf16: first half two slabs, second
     * half one and a chunk) and unsplit folds (q8), against the frame kernel's slab sums */
    executors("tiny-wide", DD_BF16, 1);
    executors("tiny-wide", DD_Q8, 3);
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < 5; t++)
            for (int i = 0; i < 3; i++) {
                if (g_quick >= 2 && (types[t] != (k ? DD_Q4 : DD_BF16) || i == 2)) continue;
                executors(k ? "tiny-llama" : "tiny-gpt", types[t], ns[i]);
            }
    /* Qwen3's block (q/k norms before RoPE, in_proj with bias): both executors bit-identical */
    executors("tiny-qwen3", DD_BF16, 1);
    executors("tiny-qwen3", DD_Q8, 3);
    if (g_quick < 2) executors("tiny-qwen3", DD_Q4, 8);
    /* Moshi's depformer: per-position slices of every linear, the text row, in_proj per pass, no final norm */
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 2; i++) {
            if (g_quick >= 2 && types[t] != DD_BF16 && types[t] != DD_Q4) continue;
            executors("tiny-moshi", types[t], ns[i]);
        }
    if (g_quick < 2) {
        executors("tiny-moshi", DD_BF16, 8);
        executors("tiny-moshi", DD_Q8, 13); /* groups (7, 6) */
    }
    if (g_quick < 2) { /* over 8 streams: the latency executor in groups (3 of 7, 7, 6; 2 of 6, 5) */
        executors("tiny-gpt", DD_BF16, 20);
        executors("tiny-llama", DD_Q4, 11);
    }
    if (g_quick) return;
    executors("gpt", DD_BF16, 1);
    executors("gpt", DD_BF16, 8);
    executors("gpt", DD_Q8, 1);
    executors("gpt", DD_Q4, 2);
    executors("csm", DD_BF16, 1);
    executors("csm", DD_BF16, 5);
    executors("csm", DD_Q8, 1);
    executors("gpt", DD_BF16, 17);
    executors("moshi", DD_BF16, 1);
    executors("moshi", DD_BF16, 8);
    executors("moshi", DD_Q4, 2);
}


/* ---- the device API (dd_decode_device, dd_score_device, dd_decoder_sync) ------------------------------------ */

#define CUDA_OK(call)                                                                                              \
    do {                                                                                                           \
        cudaError_t ce_ = (call);                                                                                  \
        if (ce_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(ce_));                                 \
    } while (0)

static void *dalloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes < 4 ? 4 : bytes));
    return p;
}
static void *dup_dev(const void *h, size_t bytes) {
    void *p = dalloc(bytes);
    CUDA_OK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}
static void down(void *h, const void *d, size_t bytes) { CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }

static void same_words(const void *a, const void *b, size_t n, const char *what, const char *kind, dd_dtype wt,
                       int N) {
    const uint32_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            fail_msg("%s %s n=%d: %s word %zu: device API 0x%08x, host API 0x%08x", kind, dd_dtype_name(wt), N, what,
                     i, x[i], y[i]);
}

/* one model, one batch size: every variant through both APIs */
static void device_api(const char *kind, dd_dtype wt, int n, cudaStream_t stream) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    dd_decoder *d = make(m, DD_BACKEND_CUDA, 64);
    float *h = rand_hidden(m, n);
    int32_t *codes = th_rand_codes(m, n, Q), *c0 = malloc((size_t)n * 4), *ch = malloc((size_t)n * Q * 4),
            *cd = malloc((size_t)n * Q * 4);
    for (int i = 0; i < n; i++) c0[i] = codes[(size_t)i * Q];
    uint64_t *seeds = malloc((size_t)n * 8), *frames = malloc((size_t)n * 8);
    for (int i = 0; i < n; i++) seeds[i] = rnd64(), frames[i] = rnd64() >> 24;
    float *dh = dup_dev(h, (size_t)n * I * 4);
    int32_t *dc0 = dup_dev(c0, (size_t)n * 4), *dcodes = dup_dev(codes, (size_t)n * Q * 4),
            *dout = dalloc((size_t)n * Q * 4);
    uint64_t *dseeds = dup_dev(seeds, (size_t)n * 8), *dframes = dup_dev(frames, (size_t)n * 8);
    dd_sampling ss[2] = {dd_sampling_default(), {0.0f, 0}};
    int cases = 0;
    for (int withc0 = c->has_head0 ? 0 : 1; withc0 <= 1; withc0++)
        for (int si = 0; si < 2; si++)
            for (int keys = 0; keys < 2; keys++) { /* keys 0: NULL seeds and frames */
                for (int i = 0; i < n * Q; i++) ch[i] = -7;
                if (dd_decode(d, n, h, withc0 ? c0 : NULL, keys ? seeds : NULL, keys ? frames : NULL, &ss[si], ch,
                              &e))
                    fail_msg("decode: %s", e.msg);
                CUDA_OK(cudaMemsetAsync(dout, 0xFF, (size_t)n * Q * 4, stream));
                if (dd_decode_device(d, n, dh, withc0 ? dc0 : NULL, keys ? dseeds : NULL, keys ? dframes : NULL,
                                     &ss[si], dout, stream, &e))
                    fail_msg("decode_device: %s", e.msg);
                if (dd_decoder_sync(d, &e)) fail_msg("sync: %s", e.msg);
                down(cd, dout, (size_t)n * Q * 4);
                same_words(cd, ch, (size_t)n * Q, withc0 ? "codes (c0 given)" : "codes (c0 sampled)", kind, wt, n);
                cases++;
            }
    const size_t nl = (size_t)n * (Q - 1) * V, n0 = (size_t)n * V;
    float *lh = malloc(nl * 4), *ld = malloc(nl * 4), *l0h = malloc(n0 * 4), *l0d = malloc(n0 * 4);
    float *dl = dalloc(nl * 4), *dl0 = dalloc(n0 * 4);
    for (int with0 = 0; with0 <= c->has_head0; with0++) {
        th_poison(lh, nl);
        th_poison(l0h, n0);
        if (dd_score(d, n, h, codes, lh, with0 ? l0h : NULL, &e)) fail_msg("score: %s", e.msg);
        CUDA_OK(cudaMemsetAsync(dl, 0xFF, nl * 4, stream));
        CUDA_OK(cudaMemsetAsync(dl0, 0xFF, n0 * 4, stream));
        if (dd_score_device(d, n, dh, dcodes, dl, with0 ? dl0 : NULL, stream, &e)) fail_msg("score_device: %s", e.msg);
        if (dd_decoder_sync(d, &e)) fail_msg("sync: %s", e.msg);
        down(ld, dl, nl * 4);
        same_words(ld, lh, nl, "logits", kind, wt, n);
        if (with0) {
            down(l0d, dl0, n0 * 4);
            same_words(l0d, l0h, n0, "level-0 logits", kind, wt, n);
        }
        cases++;
    }
    printf("  %-10s %-4s n=%-2d device API == host API (%d calls: codes, logit bits)\n", kind, dd_dtype_name(wt), n,
           cases);
    cudaFree(dh), cudaFree(dc0), cudaFree(dcodes), cudaFree(dout), cudaFree(dseeds), cudaFree(dframes);
    cudaFree(dl), cudaFree(dl0);
    free(h), free(codes), free(c0), free(ch), free(cd), free(seeds), free(frames), free(lh), free(ld), free(l0h),
        free(l0d);
    dd_decoder_free(d);
    dd_model_free(m);
}

static void test_device_api(void **state) {
    (void)state;
    NEED_CUDA();
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    static const dd_dtype types[] = {DD_F32, DD_BF16, DD_Q8, DD_Q4, DD_F16};
    /* n <= 8: the latency executor; 20: it again, in groups of at most 8; 60: the frame kernel (over the crossover) */
    static const int ns[] = {1, 3, 8, 20, 60};
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < (g_quick ? 1 : 5); t++)
            for (int i = 0; i < 5; i++) {
                /* compute-sanitizer: both executors once (quick 2); racecheck, the latency executor only (quick 3) */
                if (g_quick >= 2 && (k || (i != 1 && (g_quick >= 3 || i != 4)))) continue;
                device_api(k ? "tiny-llama" : "tiny-gpt", types[(t + k) % 5], ns[i], stream);
            }
    CUDA_OK(cudaStreamDestroy(stream));
}

/* F frames of dd_decode_device (sampled, c0 from head0, per-frame keys) and one dd_score_device, captured; each
 * replay on fresh inputs equals the host path */
static void device_capture(const char *kind, dd_dtype wt, int n) {
    enum { F = 5 };
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    dd_decoder *d = make(m, DD_BACKEND_CUDA, n);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const size_t hb = (size_t)n * I * 4, cb = (size_t)n * Q * 4, nl = (size_t)n * (Q - 1) * V;
    float *dh[F], *dl = dalloc(nl * 4);
    int32_t *dout[F], *dcodes = dalloc(cb);
    uint64_t *dseeds = dalloc((size_t)n * 8), *dframes[F];
    for (int f = 0; f < F; f++) dh[f] = dalloc(hb), dout[f] = dalloc(cb), dframes[f] = dalloc((size_t)n * 8);
    float *h = malloc(hb * F), *lh = malloc(nl * 4), *ld = malloc(nl * 4);
    int32_t *ch = malloc(cb), *cd = malloc(cb), *codes;
    uint64_t *seeds = malloc((size_t)n * 8), *frames = malloc((size_t)n * 8 * F);
    const int32_t *c0 = NULL;
    int32_t *c0b = malloc((size_t)n * 4), *dc0 = dalloc((size_t)n * 4);
    dd_sampling s = dd_sampling_default();
    /* the first call of each variant builds the latency executor's plan: not allowed inside the capture */
    CUDA_OK(cudaMemset(dh[0], 0, hb));
    CUDA_OK(cudaMemset(dcodes, 0, cb));
    CUDA_OK(cudaMemset(dc0, 0, (size_t)n * 4));
    if (c->has_head0) {
        if (dd_decode_device(d, n, dh[0], NULL, NULL, NULL, &s, dout[0], stream, &e)) fail_msg("warm-up: %s", e.msg);
    } else {
        c0 = dc0;
        if (dd_decode_device(d, n, dh[0], dc0, NULL, NULL, &s, dout[0], stream, &e)) fail_msg("warm-up: %s", e.msg);
    }
    if (dd_score_device(d, n, dh[0], dcodes, dl, NULL, stream, &e)) fail_msg("warm-up: %s", e.msg);
    if (dd_decoder_sync(d, &e)) fail_msg("warm-up: %s", e.msg);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int f = 0; f < F; f++)
        if (dd_decode_device(d, n, dh[f], c0, dseeds, dframes[f], &s, dout[f], stream, &e))
            fail_msg("captured decode: %s", e.msg);
    if (dd_score_device(d, n, dh[F - 1], dcodes, dl, NULL, stream, &e)) fail_msg("captured score: %s", e.msg);
    CUDA_OK(cudaStreamEndCapture(stream, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        for (size_t i = 0; i < (size_t)n * I * F; i++) h[i] = rnd_sym(1.7f);
        for (int i = 0; i < n; i++) seeds[i] = rnd64(), c0b[i] = (int32_t)rnd_below(V);
        for (int i = 0; i < n * F; i++) frames[i] = rnd64() >> 30;
        codes = th_rand_codes(m, n, Q);
        for (int f = 0; f < F; f++) {
            CUDA_OK(cudaMemcpy(dh[f], h + (size_t)f * n * I, hb, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(dframes[f], frames + (size_t)f * n, (size_t)n * 8, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemset(dout[f], 0xFF, cb));
        }
        CUDA_OK(cudaMemcpy(dseeds, seeds, (size_t)n * 8, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dcodes, codes, cb, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dc0, c0b, (size_t)n * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dl, 0xFF, nl * 4));
        CUDA_OK(cudaGraphLaunch(ge, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        if (dd_decoder_sync(d, &e)) fail_msg("replay %d: %s", rep, e.msg);
        for (int f = 0; f < F; f++) { /* the host path between replays moves the same device epochs */
            for (int i = 0; i < n * Q; i++) ch[i] = -7;
            if (dd_decode(d, n, h + (size_t)f * n * I, c0 ? c0b : NULL, seeds, frames + (size_t)f * n, &s, ch, &e))
                fail_msg("decode: %s", e.msg);
            down(cd, dout[f], cb);
            for (int i = 0; i < n * Q; i++)
                if (cd[i] != ch[i])
                    fail_msg("%s %s n=%d replay %d frame %d: stream %d level %d: graph %d, host path %d", kind,
                             dd_dtype_name(wt), n, rep, f, i / Q, i % Q, cd[i], ch[i]);
        }
        th_poison(lh, nl);
        if (dd_score(d, n, h + (size_t)(F - 1) * n * I, codes, lh, NULL, &e)) fail_msg("score: %s", e.msg);
        down(ld, dl, nl * 4);
        same_words(ld, lh, nl, "graph logits", kind, wt, n);
        free(codes);
    }
    printf("  %-10s %-4s n=%-2d %d captured frames + score, 3 replays == host path\n", kind, dd_dtype_name(wt), n, F);
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    for (int f = 0; f < F; f++) cudaFree(dh[f]), cudaFree(dout[f]), cudaFree(dframes[f]);
    cudaFree(dl), cudaFree(dcodes), cudaFree(dseeds), cudaFree(dc0);
    free(h), free(lh), free(ld), free(ch), free(cd), free(seeds), free(frames), free(c0b);
    CUDA_OK(cudaStreamDestroy(stream));
    dd_decoder_free(d);
    dd_model_free(m);
}

static void test_device_capture(void **state) {
    (void)state;
    NEED_CUDA();
    device_capture("tiny-gpt", DD_BF16, 3);  /* latency executor */
    device_capture("tiny-gpt", DD_BF16, 20); /* latency executor, groups of 7, 7, 6 */
    device_capture("tiny-gpt", DD_BF16, 60); /* frame kernel (over the crossover, 48) */
    device_capture("tiny-llama", DD_Q4, 1);
    if (!g_quick) device_capture("tiny-llama", DD_F32, 12);
}

/* a device call's failure: the call says DD_OK, writes nothing, and the sync returns `want` with its message */
static void expect_sync(dd_decoder *d, dd_status want, const char *msg, const int32_t *dpoison, size_t words,
                        const char *what) {
    dd_error e;
    dd_status st = dd_decoder_sync(d, &e);
    if (st != want || strcmp(e.msg, msg))
        fail_msg("%s: dd_decoder_sync gave %d \"%s\", want %d \"%s\"", what, st, e.msg, want, msg);
    uint32_t *w = malloc(words * 4);
    down(w, dpoison, words * 4);
    for (size_t i = 0; i < words; i++)
        if (w[i] != 0x5A5A5A5Au) fail_msg("%s: output word %zu written (0x%08x) by a failed frame", what, i, w[i]);
    free(w);
    if (dd_decoder_sync(d, &e)) fail_msg("%s: the error was not cleared: %s", what, e.msg);
}

static void device_errors(int n) {
    dd_model *m;
    dd_error e, eh;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_BF16, rnd64(), &e)) fail_msg("%s", e.msg);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    dd_decoder *d = make(m, DD_BACKEND_CUDA, n);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float *h = rand_hidden(m, n), *hbad = malloc((size_t)n * I * 4);
    int32_t *codes = th_rand_codes(m, n, Q), *c0 = malloc((size_t)n * 4), *ch = malloc((size_t)n * Q * 4);
    for (int i = 0; i < n; i++) c0[i] = codes[(size_t)i * Q];
    const size_t cb = (size_t)n * Q * 4, nl = (size_t)n * (Q - 1) * V;
    float *dh = dup_dev(h, (size_t)n * I * 4), *dl = dalloc(nl * 4), *lh = malloc(nl * 4);
    int32_t *dc0 = dup_dev(c0, (size_t)n * 4), *dcodes = dup_dev(codes, cb), *dout = dalloc(cb);
    dd_sampling s = dd_sampling_default();
    char want[512];
    /* warm up (plans), and check a good frame passes */
    if (dd_decode_device(d, n, dh, dc0, NULL, NULL, &s, dout, stream, &e) ||
        dd_decode_device(d, n, dh, NULL, NULL, NULL, &s, dout, stream, &e) ||
        dd_score_device(d, n, dh, dcodes, dl, NULL, stream, &e) || dd_decoder_sync(d, &e))
        fail_msg("good frames: %s", e.msg);

    /* non-finite hidden (two of them: the first in row-major order is named) */
    const int r = n - 1, el = (int)rnd_below(I);
    memcpy(hbad, h, (size_t)n * I * 4);
    hbad[(size_t)r * I + el] = NAN;
    if (el + 1 < I) hbad[(size_t)r * I + el + 1 + rnd_below(I - el - 1)] = INFINITY;
    assert_int_equal(dd_decode(d, n, hbad, c0, NULL, NULL, &s, ch, &eh), DD_ENUMERIC);
    snprintf(want, sizeof want, "%s", eh.msg);
    float *dhbad = dup_dev(hbad, (size_t)n * I * 4);
    CUDA_OK(cudaMemset(dout, 0x5A, cb));
    if (dd_decode_device(d, n, dhbad, dc0, NULL, NULL, &s, dout, stream, &e)) fail_msg("enqueue: %s", e.msg);
    expect_sync(d, DD_ENUMERIC, want, dout, (size_t)n * Q, "NaN hidden, c0 given");
    CUDA_OK(cudaMemset(dout, 0x5A, cb));
    if (dd_decode_device(d, n, dhbad, NULL, NULL, NULL, &s, dout, stream, &e)) fail_msg("enqueue: %s", e.msg);
    expect_sync(d, DD_ENUMERIC, want, dout, (size_t)n * Q, "NaN hidden, c0 sampled");
    CUDA_OK(cudaMemset(dl, 0x5A, nl * 4));
    if (dd_score_device(d, n, dhbad, dcodes, dl, NULL, stream, &e)) fail_msg("enqueue: %s", e.msg);
    expect_sync(d, DD_ENUMERIC, want, (const int32_t *)dl, nl, "NaN hidden, score");

    /* c0 out of range in one row, then a good frame and a second bad one: the first failure is reported */
    int32_t *c0bad = malloc((size_t)n * 4);
    memcpy(c0bad, c0, (size_t)n * 4);
    const int rr = (int)rnd_below(n);
    c0bad[rr] = rnd_below(2) ? V + (int)rnd_below(5) : -1 - (int)rnd_below(5);
    assert_int_equal(dd_decode(d, n, h, c0bad, NULL, NULL, &s, ch, &eh), DD_EINVAL);
    snprintf(want, sizeof want, "%s", eh.msg);
    int32_t *dc0bad = dup_dev(c0bad, (size_t)n * 4), *dout2 = dalloc(cb);
    CUDA_OK(cudaMemset(dout, 0x5A, cb));
    if (dd_decode_device(d, n, dh, dc0bad, NULL, NULL, &s, dout, stream, &e)) fail_msg("enqueue: %s", e.msg);
    if (dd_decode_device(d, n, dh, dc0, NULL, NULL, &s, dout2, stream, &e)) fail_msg("enqueue: %s", e.msg);
    if (dd_decode_device(d, n, dhbad, dc0, NULL, NULL, &s, dout2, stream, &e)) fail_msg("enqueue: %s", e.msg);
    expect_sync(d, DD_EINVAL, want, dout, (size_t)n * Q, "c0 out of range");

    /* a score code out of range */
    int32_t *cbad = malloc(cb);
    memcpy(cbad, codes, cb);
    cbad[(size_t)rr * Q + rnd_below(Q)] = V;
    assert_int_equal(dd_score(d, n, h, cbad, lh, NULL, &eh), DD_EINVAL);
    snprintf(want, sizeof want, "%s", eh.msg);
    int32_t *dcbad = dup_dev(cbad, cb);
    CUDA_OK(cudaMemset(dl, 0x5A, nl * 4));
    if (dd_score_device(d, n, dh, dcbad, dl, NULL, stream, &e)) fail_msg("enqueue: %s", e.msg);
    expect_sync(d, DD_EINVAL, want, (const int32_t *)dl, nl, "score code out of range");

    /* the next host call reports a pending device error (and writes nothing), the one after works */
    assert_int_equal(dd_decode(d, n, hbad, c0, NULL, NULL, &s, ch, &eh), DD_ENUMERIC);
    if (dd_decode_device(d, n, dhbad, dc0, NULL, NULL, &s, dout, stream, &e)) fail_msg("enqueue: %s", e.msg);
    for (int i = 0; i < n * Q; i++) ch[i] = -7;
    dd_status st = dd_decode(d, n, h, c0, NULL, NULL, &s, ch, &e);
    if (st != DD_ENUMERIC || strcmp(e.msg, eh.msg)) fail_msg("host call after a failed device frame: %d %s", st, e.msg);
    for (int i = 0; i < n * Q; i++) assert_int_equal(ch[i], -7);
    if (dd_decode(d, n, h, c0, NULL, NULL, &s, ch, &e)) fail_msg("host call: %s", e.msg);

    /* arguments checked on the host: nothing enqueued */
    st = dd_decode_device(d, n, h, dc0, NULL, NULL, &s, dout, stream, &e);
    if (st != DD_EINVAL || !strstr(e.msg, "hidden") || !strstr(e.msg, "host memory"))
        fail_msg("host hidden: %d %s", st, e.msg);
    st = dd_decode_device(d, n, dh, dc0, NULL, NULL, &s, ch, stream, &e);
    if (st != DD_EINVAL || !strstr(e.msg, "codes")) fail_msg("host codes: %d %s", st, e.msg);
    st = dd_decode_device(d, n + 1, dh, dc0, NULL, NULL, &s, dout, stream, &e);
    if (st != DD_EINVAL || !strstr(e.msg, "max_batch")) fail_msg("n: %d %s", st, e.msg);
    dd_sampling bad = {-1.0f, 0};
    st = dd_decode_device(d, n, dh, dc0, NULL, NULL, &bad, dout, stream, &e);
    if (st != DD_EINVAL || !strstr(e.msg, "temperature")) fail_msg("temperature: %d %s", st, e.msg);
    st = dd_score_device(d, n, dh, dcodes, (float *)lh, NULL, stream, &e);
    if (st != DD_EINVAL || !strstr(e.msg, "logits")) fail_msg("host logits: %d %s", st, e.msg);
    if (dd_decoder_sync(d, &e)) fail_msg("sync after refused calls: %s", e.msg);

    printf("  tiny-gpt   bf16 n=%-2d device errors reported by the sync with the host path's messages, outputs "
           "untouched\n", n);
    cudaFree(dh), cudaFree(dl), cudaFree(dc0), cudaFree(dcodes), cudaFree(dout), cudaFree(dhbad), cudaFree(dc0bad),
        cudaFree(dout2), cudaFree(dcbad);
    free(h), free(hbad), free(codes), free(c0), free(ch), free(lh), free(c0bad), free(cbad);
    CUDA_OK(cudaStreamDestroy(stream));
    dd_decoder_free(d);
    dd_model_free(m);
}

static void test_device_errors(void **state) {
    (void)state;
    NEED_CUDA();
    device_errors(3);
    device_errors(20);
    /* the first call of a batch size inside a capture: refused, the capture left intact */
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_BF16, rnd64(), &e)) fail_msg("%s", e.msg);
    dd_decoder *d = make(m, DD_BACKEND_CUDA, 4);
    const dd_config *c = dd_model_config(m);
    float *dh = dalloc((size_t)2 * c->input_dim * 4);
    int32_t *dout = dalloc((size_t)2 * c->levels * 4);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMemset(dh, 0, (size_t)2 * c->input_dim * 4));
    cudaGraph_t g;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    dd_status st = dd_decode_device(d, 2, dh, NULL, NULL, NULL, NULL, dout, stream, &e);
    CUDA_OK(cudaStreamEndCapture(stream, &g));
    if (st != DD_EUNSUPPORTED || !strstr(e.msg, "before the capture")) fail_msg("first call in a capture: %d %s", st, e.msg);
    CUDA_OK(cudaGraphDestroy(g));
    if (dd_decode_device(d, 2, dh, NULL, NULL, NULL, NULL, dout, stream, &e) || dd_decoder_sync(d, &e))
        fail_msg("after the capture: %s", e.msg);
    dd_decoder_free(d);
    dd_model_free(m);
    /* Moshi's depformer needs a text token per stream, which the device calls cannot take: refused by name */
    if (dd_model_synthetic(&m, "tiny-moshi", DD_BF16, rnd64(), &e)) fail_msg("%s", e.msg);
    c = dd_model_config(m);
    d = make(m, DD_BACKEND_CUDA, 2);
    float *dh2 = dalloc((size_t)2 * c->input_dim * 4), *dl2 = dalloc((size_t)2 * c->levels * c->codebook_size * 4);
    int32_t *dout2 = dalloc((size_t)2 * c->levels * 4);
    CUDA_OK(cudaMemset(dh2, 0, (size_t)2 * c->input_dim * 4));
    CUDA_OK(cudaMemset(dout2, 0, (size_t)2 * c->levels * 4));
    st = dd_decode_device(d, 2, dh2, NULL, NULL, NULL, NULL, dout2, stream, &e);
    if (st != DD_EUNSUPPORTED || !strstr(e.msg, "text") || !strstr(e.msg, "dd_decode_device"))
        fail_msg("Moshi on dd_decode_device: %d %s", st, e.msg);
    st = dd_score_device(d, 2, dh2, dout2, dl2, NULL, stream, &e);
    if (st != DD_EUNSUPPORTED || !strstr(e.msg, "text") || !strstr(e.msg, "dd_score_device"))
        fail_msg("Moshi on dd_score_device: %d %s", st, e.msg);
    printf("  tiny-moshi: the device calls refused (%s)\n", e.msg);
    if (dd_decoder_sync(d, &e)) fail_msg("sync after refused Moshi calls: %s", e.msg);
    CUDA_OK(cudaStreamDestroy(stream));
    cudaFree(dh), cudaFree(dout), cudaFree(dh2), cudaFree(dl2), cudaFree(dout2);
    dd_decoder_free(d);
    dd_model_free(m);
}

/* bench's second floor on the device: the read bandwidth over a buffer of a given size (one pass's working set) */
static void test_read_bandwidth(void **state) {
    (void)state;
    NEED_CUDA();
    dd_error e;
    double small = 0, big = 0;
    if (dd_measure_read_bandwidth_size(DD_BACKEND_CUDA, 0, (uint64_t)8 << 20, &small, &e)) fail_msg("%s", e.msg);
    if (dd_measure_read_bandwidth_size(DD_BACKEND_CUDA, 0, (uint64_t)1 << 30, &big, &e)) fail_msg("%s", e.msg);
    printf("  read bandwidth: 8 MiB %.0f GB/s, 1 GiB %.0f GB/s\n", small, big);
    assert_true(isfinite(small) && small > 1.0 && isfinite(big) && big > 1.0);
    assert_int_equal(dd_measure_read_bandwidth_size(DD_BACKEND_CUDA, 0, 1000, &small, &e), DD_EINVAL);
}

#else /* !DD_WITH_CUDA */

static void test_linear(void **state) { (void)state; NEED_CUDA(); }
static void test_attend(void **state) { (void)state; NEED_CUDA(); }
static void test_sample(void **state) { (void)state; NEED_CUDA(); }
static void test_e2e(void **state) { (void)state; NEED_CUDA(); }
static void test_invariance(void **state) { (void)state; NEED_CUDA(); }
static void test_executors(void **state) { (void)state; NEED_CUDA(); }
static void test_tput(void **state) { (void)state; NEED_CUDA(); }
static void test_device_api(void **state) { (void)state; NEED_CUDA(); }
static void test_device_capture(void **state) { (void)state; NEED_CUDA(); }
static void test_device_errors(void **state) { (void)state; NEED_CUDA(); }
static void test_read_bandwidth(void **state) { (void)state; NEED_CUDA(); }

#endif

/* ref and cpu decoders refuse the device calls, naming the backend; their sync has nothing to wait for */
static void test_device_api_host_backends(void **state) {
    (void)state;
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_F32, 1, &e)) fail_msg("%s", e.msg);
    const dd_backend bs[] = {DD_BACKEND_REF, DD_BACKEND_CPU};
    float h[64] = {0}, lg[4096];
    int32_t codes[64] = {0};
    for (int i = 0; i < 2; i++) {
        if (!dd_backend_available(bs[i])) continue;
        dd_decoder_params p = dd_decoder_default_params();
        p.backend = bs[i];
        p.max_batch = 1;
        dd_decoder *d;
        if (dd_decoder_create(&d, m, &p, &e)) fail_msg("%s", e.msg);
        char name[64];
        snprintf(name, sizeof name, "backend %s", dd_backend_name(bs[i]));
        dd_status st = dd_decode_device(d, 1, h, NULL, NULL, NULL, NULL, codes, NULL, &e);
        if (st != DD_EUNSUPPORTED || !strstr(e.msg, name) || !strstr(e.msg, "dd_decode_device"))
            fail_msg("decode_device on %s: %d %s", name, st, e.msg);
        st = dd_score_device(d, 1, h, codes, lg, NULL, NULL, &e);
        if (st != DD_EUNSUPPORTED || !strstr(e.msg, name) || !strstr(e.msg, "dd_score_device"))
            fail_msg("score_device on %s: %d %s", name, st, e.msg);
        assert_int_equal(dd_decoder_sync(d, &e), DD_OK);
        dd_decoder_free(d);
    }
    assert_int_equal(dd_decode_device(NULL, 1, h, NULL, NULL, NULL, NULL, codes, NULL, &e), DD_EINVAL);
    assert_int_equal(dd_decoder_sync(NULL, &e), DD_EINVAL);
    dd_model_free(m);
}

int main(void) {
    th_seed_init("test_cuda");
    if (getenv("DD_TEST_QUICK")) {
        const int q = atoi(getenv("DD_TEST_QUICK"));
        g_quick = q >= 3 ? 3 : q >= 2 ? 2 : 1; /* 1 quick; 2 compute-sanitizer sizes; 3 racecheck of test_executors */
    }
    if (g_quick) printf("test_cuda: quick (DD_TEST_QUICK=%d)\n", g_quick);
    if (getenv("DD_TEST_ONLY") && *getenv("DD_TEST_ONLY")) cmocka_set_test_filter(getenv("DD_TEST_ONLY")); /* e.g. "test_linear" */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_linear, th_reseed),     cmocka_unit_test_setup(test_attend, th_reseed),
        cmocka_unit_test_setup(test_sample, th_reseed),     cmocka_unit_test_setup(test_e2e, th_reseed),
        cmocka_unit_test_setup(test_invariance, th_reseed), cmocka_unit_test_setup(test_executors, th_reseed),
        cmocka_unit_test_setup(test_tput, th_reseed),
        cmocka_unit_test_setup(test_device_api, th_reseed), cmocka_unit_test_setup(test_device_capture, th_reseed),
        cmocka_unit_test_setup(test_device_errors, th_reseed), cmocka_unit_test(test_device_api_host_backends),
        cmocka_unit_test(test_read_bandwidth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
