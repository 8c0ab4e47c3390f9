/* The kernel harness: every fast implementation of the src/kernels.h contracts — the CPU backend's at every
 * instruction set this machine supports (generic C, AVX2, AVX-512), with 1 and 2 threads, and the CUDA
 * backend's when built with DD_WITH_CUDA and a device is present — against naive double-precision math written
 * here from the contract text, on fresh random inputs (seed printed; DD_TEST_SEED=<n> replays a run).
 *
 * linear: shapes include T = 1 .. 70 (more than one tile of rows and more than 32), N with tails of every tile
 *   width, odd K (dense tails), every weight type (f32, f16, bf16, MLX q8 / q4 with groups 8 .. 128 and f16 /
 *   bf16 / f32 scales), weights at odd (misaligned) addresses, row strides wider than the rows, every norm
 *   prologue, every activation, bias, residual (separate and in place) and constant add.
 * attend: MHA and GQA, with and without RoPE, 1 .. 32 new positions after 0 .. 31 cached ones, odd head dims.
 * Outputs (and the cache rows an attend must write) are poisoned with NaN first, so an unwritten element fails.
 *
 * Tolerance (one rule for every weight type, since every type is widened to float32 exactly and only the float32
 * accumulation differs): |got - want| <= RTOL * (mag + |want|) + ATOL, where mag is the sum of the absolute
 * values of the terms the reference added up (the scale of float32 accumulation error). A backend or
 * instruction set that cannot run a case says so and the case is skipped, never run wrongly.
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

#include "cpu.h"
#include "depthdec.h"
#include "kernels.h"
#include "util.h"

#define RTOL 4e-6
#define ATOL 1e-6

/* ---- RNG ------------------------------------------------------------------------------------------------- */

static uint64_t g_rng;
static uint64_t rnd64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(void) { return (double)(rnd64() >> 11) * 0x1p-53; }  /* [0, 1) */
static float sym(float a) { return (float)((2 * unif() - 1) * a); }     /* [-a, a) */
static int below(int n) { return (int)(rnd64() % (uint64_t)n); }

/* ---- implementations under test -------------------------------------------------------------------------- */

enum { IMPL_CPU = 0, IMPL_CUDA = 1 };
typedef struct impl {
    int kind, isa, threads;
    char name[32];
} impl;

static impl g_impl[16];
static int g_nimpl;

static void list_impls(void) {
    g_nimpl = 0;
    for (int isa = 0; isa < DD_CPU_NISA; isa++) {
        if (!dd_cpu_isa_supported((dd_cpu_isa)isa)) {
            printf("  cpu %s: not supported by this build or CPU: skipped\n", dd_cpu_isa_name((dd_cpu_isa)isa));
            continue;
        }
        for (int th = 1; th <= 2; th++) {
            impl *p = &g_impl[g_nimpl++];
            *p = (impl){IMPL_CPU, isa, th, ""};
            snprintf(p->name, sizeof p->name, "cpu-%s-t%d", dd_cpu_isa_name((dd_cpu_isa)isa), th);
        }
    }
#ifdef DD_WITH_CUDA
    if (dd_backend_available(DD_BACKEND_CUDA)) {
        impl *p = &g_impl[g_nimpl++];
        *p = (impl){IMPL_CUDA, 0, 0, "cuda"};
    } else {
        printf("  cuda: no device: skipped\n");
    }
#else
    printf("  cuda: not built (make CUDA=1): skipped\n");
#endif
}

static dd_status run_linear(const impl *im, const dd_linear_args *a, dd_error *e) {
#ifdef DD_WITH_CUDA
    if (im->kind == IMPL_CUDA) return dd_cuda_linear_host(a, e);
#endif
    return dd_cpu_linear_host(a, im->isa, im->threads, e);
}

static dd_status run_attend(const impl *im, const dd_attend_args *a, dd_error *e) {
#ifdef DD_WITH_CUDA
    if (im->kind == IMPL_CUDA) return dd_cuda_attend_host(a, e);
#endif
    return dd_cpu_attend_host(a, im->isa, im->threads, e);
}

/* ---- test weights: random values in a chosen storage, plus their exact float values ----------------------- */

typedef struct tw {
    dd_weight w;
    double *val;     /* [rows, cols] the exact stored values */
    uint8_t *alloc[3];
} tw;

static void sb_store(dd_dtype t, uint8_t *p, float v) {
    if (t == DD_F16) {
        uint16_t h = dd_f32_to_f16(v);
        memcpy(p, &h, 2);
    } else if (t == DD_BF16) {
        uint16_t h = dd_f32_to_bf16(v);
        memcpy(p, &h, 2);
    } else {
        memcpy(p, &v, 4);
    }
}

static float sb_load(dd_dtype t, const uint8_t *p) {
    uint16_t h;
    if (t == DD_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    memcpy(&h, p, 2);
    return t == DD_F16 ? dd_f16_to_f32(h) : dd_bf16_to_f32(h);
}

/* rows x cols of `type`, magnitude ~ a, every buffer starting `mis` bytes past an aligned address. */
static void tw_make(tw *t, dd_dtype type, int64_t rows, int64_t cols, int group, dd_dtype sbt, float a, int mis) {
    memset(t, 0, sizeof *t);
    t->val = malloc((size_t)(rows * cols) * sizeof(double));
    assert_non_null(t->val);
    dd_weight *w = &t->w;
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    if (type == DD_F32 || type == DD_F16 || type == DD_BF16) {
        size_t es = dd_dtype_size(type);
        w->row_bytes = (size_t)cols * es;
        t->alloc[0] = malloc(w->row_bytes * rows + 8);
        assert_non_null(t->alloc[0]);
        uint8_t *d = t->alloc[0] + mis;
        w->data = d;
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = sym(a);
            if (type == DD_F32) {
                memcpy(d + 4 * i, &v, 4);
            } else {
                uint16_t h = type == DD_F16 ? dd_f32_to_f16(v) : dd_f32_to_bf16(v);
                memcpy(d + 2 * i, &h, 2);
                v = type == DD_F16 ? dd_f16_to_f32(h) : dd_bf16_to_f32(h);
            }
            t->val[i] = v;
        }
        return;
    }
    int bits = type == DD_Q8 ? 8 : 4, ng = (int)(cols / group);
    size_t ses = dd_dtype_size(sbt);
    w->group = group;
    w->sb_type = sbt;
    w->row_bytes = (size_t)cols * bits / 8;
    w->sb_row_bytes = (size_t)ng * ses;
    for (int i = 0; i < 3; i++) {
        t->alloc[i] = malloc((i ? w->sb_row_bytes : w->row_bytes) * rows + 8);
        assert_non_null(t->alloc[i]);
    }
    uint8_t *d = t->alloc[0] + mis, *sc = t->alloc[1] + mis, *bi = t->alloc[2] + mis;
    w->data = d;
    w->scales = sc;
    w->biases = bi;
    memset(d, 0, w->row_bytes * rows);
    float qmax = (float)((1 << bits) - 1);
    for (int64_t r = 0; r < rows; r++)
        for (int g = 0; g < ng; g++) {
            /* w = s q + b spans about [-a, a] */
            sb_store(sbt, sc + (size_t)r * w->sb_row_bytes + g * ses, (float)(2 * a / qmax * (0.5 + unif())));
            sb_store(sbt, bi + (size_t)r * w->sb_row_bytes + g * ses, sym(a) - a * 0.5f);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            uint32_t q = (uint32_t)below(1 << bits);
            int64_t bit = k * bits;
            d[(size_t)r * w->row_bytes + bit / 8] |= (uint8_t)(q << (bit % 8));
            int g = (int)(k / group);
            float s = sb_load(sbt, sc + (size_t)r * w->sb_row_bytes + g * ses);
            float b = sb_load(sbt, bi + (size_t)r * w->sb_row_bytes + g * ses);
            float sq = s * (float)q; /* MLX: fl(fl(s q) + b) */
            t->val[r * cols + k] = (double)(sq + b);
        }
}

static void tw_free(tw *t) {
    free(t->val);
    for (int i = 0; i < 3; i++) free(t->alloc[i]);
}

static float *fvec(size_t n, float a) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = sym(a);
    return v;
}

/* ---- linear ---------------------------------------------------------------------------------------------- */

typedef struct lcase {
    int T, N, K;
    dd_dtype type;
    int group;
    dd_dtype sbt;
    int norm, norm_bias, act, bias, res, inplace, add, add_bcast, pad, mis;
} lcase;

static int g_lin_checked;
static double g_worst; /* largest |got - want| / tol seen: how close the runs came to the tolerance */

/* The contract in double: want[t, j] and the accumulation scale mag[t, j]. */
static void linear_want(const lcase *c, const float *x, int ldx, const tw *w, const tw *w2, const float *bias,
                        const float *bias2, const float *nw, const float *nb, float eps, const float *res, int ldr,
                        const float *add, int lda, double *want, double *mag) {
    int K = c->K, N = c->N;
    double *n = malloc((size_t)K * sizeof(double));
    for (int t = 0; t < c->T; t++) {
        const float *xt = x + (size_t)t * ldx;
        double mean = 0, var = 0;
        if (c->norm == DD_NORM_LAYER) {
            for (int k = 0; k < K; k++) mean += xt[k];
            mean /= K;
        }
        for (int k = 0; k < K; k++) var += (xt[k] - mean) * (xt[k] - mean);
        var /= K;
        double inv = 1.0 / sqrt(var + eps);
        for (int k = 0; k < K; k++)
            n[k] = c->norm == DD_NORM_NONE ? xt[k] : (xt[k] - mean) * inv * nw[k] + (nb ? nb[k] : 0.0);
        for (int j = 0; j < N; j++) {
            double a = 0, am = 0, u = 0, um = 0;
            for (int k = 0; k < K; k++) {
                double p = n[k] * w->val[(size_t)j * K + k];
                a += p;
                am += fabs(p);
            }
            if (bias) {
                a += bias[j];
                am += fabs(bias[j]);
            }
            double h = a, hm = am;
            if (c->act == DD_ACT_GELU) {
                h = 0.5 * a * erfc(-a / sqrt(2.0));
                hm = 1.2 * am;
            } else if (c->act == DD_ACT_SWIGLU) {
                for (int k = 0; k < K; k++) {
                    double p = n[k] * w2->val[(size_t)j * K + k];
                    u += p;
                    um += fabs(p);
                }
                if (bias2) {
                    u += bias2[j];
                    um += fabs(bias2[j]);
                }
                double si = a / (1 + exp(-a));
                h = si * u;
                hm = 1.2 * am * fabs(u) + fabs(si) * um;
            }
            if (res) {
                h += res[(size_t)t * ldr + j];
                hm += fabs(res[(size_t)t * ldr + j]);
            }
            if (add) {
                h += add[(size_t)t * lda + j];
                hm += fabs(add[(size_t)t * lda + j]);
            }
            want[(size_t)t * N + j] = h;
            mag[(size_t)t * N + j] = hm;
        }
    }
    free(n);
}

static void check_linear_case(const lcase *c) {
    const int T = c->T, N = c->N, K = c->K;
    const int ldx = K + (c->pad ? 3 : 0), ldy = N + (c->pad ? 5 : 0), ldr = N + (c->pad ? 2 : 0);
    const int lda = c->add_bcast ? 0 : N + (c->pad ? 1 : 0);
    tw w, w2;
    float amp = (float)(1.7 / sqrt((double)K));
    tw_make(&w, c->type, N, K, c->group, c->sbt, amp, c->mis);
    if (c->act == DD_ACT_SWIGLU) tw_make(&w2, c->type, N, K, c->group, c->sbt, amp, c->mis ? 3 - c->mis : 0);
    /* x with an offset and a scale, so the LayerNorm mean matters */
    float *x = fvec((size_t)T * ldx, 1.0f);
    for (int i = 0; i < T * ldx; i++) x[i] = x[i] * 1.5f + 0.3f;
    float *bias = c->bias ? fvec(N, 0.5f) : NULL, *bias2 = c->bias && c->act == DD_ACT_SWIGLU ? fvec(N, 0.5f) : NULL;
    float *nw = fvec(K, 0.2f), *nb = c->norm == DD_NORM_LAYER && c->norm_bias ? fvec(K, 0.3f) : NULL;
    for (int k = 0; k < K; k++) nw[k] += 1.0f;
    float *res = c->res ? fvec((size_t)T * ldr, 1.0f) : NULL;
    float *add = c->add ? fvec(c->add_bcast ? (size_t)N : (size_t)T * lda, 1.0f) : NULL;
    const float eps = 1e-5f;
    double *want = malloc((size_t)T * N * sizeof(double)), *mag = malloc((size_t)T * N * sizeof(double));
    linear_want(c, x, ldx, &w, c->act == DD_ACT_SWIGLU ? &w2 : NULL, bias, bias2, nw, nb, eps, res, ldr, add, lda,
                want, mag);
    float *y = malloc((size_t)T * ldy * sizeof(float));
    for (int ii = 0; ii < g_nimpl; ii++) {
        const impl *im = &g_impl[ii];
        /* T > 32 and a broadcast add (lda 0) are extensions of the cpu driver (cpu.h), not of the kernels.h
         * contract every backend implements */
        if (im->kind != IMPL_CPU && (T > 32 || (c->add && c->add_bcast))) continue;
        const float *r = res;
        int ldr_use = ldr;
        if (c->res && c->inplace) {
            /* residual aliasing y: y starts as the residual (stride ldy) */
            for (int i = 0; i < T * ldy; i++) y[i] = NAN;
            for (int t = 0; t < T; t++) memcpy(y + (size_t)t * ldy, res + (size_t)t * ldr, (size_t)N * sizeof(float));
            r = y;
            ldr_use = ldy;
        } else {
            for (int i = 0; i < T * ldy; i++) y[i] = NAN;
        }
        dd_linear_args a = {.y = y, .ldy = ldy, .x = x, .ldx = ldx, .T = T, .w = &w.w, .bias = bias,
                            .w2 = c->act == DD_ACT_SWIGLU ? &w2.w : NULL, .bias2 = bias2, .norm = c->norm,
                            .norm_w = nw, .norm_b = nb, .eps = eps, .act = c->act, .residual = r, .ldr = ldr_use,
                            .add = add, .lda = lda};
        dd_error e;
        dd_status st = run_linear(im, &a, &e);
        if (st == DD_EUNSUPPORTED) {
            printf("  %s: %s: skipped\n", im->name, e.msg);
            continue;
        }
        assert_int_equal(st, DD_OK);
        int bad = 0;
        for (int t = 0; t < T && bad < 3; t++)
            for (int j = 0; j < N && bad < 3; j++) {
                double got = y[(size_t)t * ldy + j], wt = want[(size_t)t * N + j];
                double tol = RTOL * (mag[(size_t)t * N + j] + fabs(wt)) + ATOL;
                if (fabs(got - wt) / tol > g_worst) g_worst = fabs(got - wt) / tol;
                if (!(fabs(got - wt) <= tol)) {
                    printf("  FAIL %s linear T=%d N=%d K=%d %s g%d sb=%s norm=%d nb=%d act=%d bias=%d res=%d/%d "
                           "add=%d/%d pad=%d mis=%d: y[%d,%d] = %.9g, want %.9g (tol %.3g)\n",
                           im->name, T, N, K, dd_dtype_name(c->type), c->group, dd_dtype_name(c->sbt), c->norm,
                           c->norm_bias, c->act, c->bias, c->res, c->inplace, c->add, c->add_bcast, c->pad, c->mis,
                           t, j, got, wt, tol);
                    bad++;
                }
            }
        /* stride padding must be left alone (it was NaN, it stays NaN) */
        for (int t = 0; t < T && !bad; t++)
            for (int j = N; j < ldy; j++)
                if (!isnan(y[(size_t)t * ldy + j])) {
                    printf("  FAIL %s: wrote y[%d,%d] beyond N=%d\n", im->name, t, j, N);
                    bad++;
                    break;
                }
        assert_int_equal(bad, 0);
        g_lin_checked++;
    }
    free(y);
    free(want);
    free(mag);
    free(x);
    free(bias);
    free(bias2);
    free(nw);
    free(nb);
    free(res);
    free(add);
    tw_free(&w);
    if (c->act == DD_ACT_SWIGLU) tw_free(&w2);
}

/* Random epilogue/prologue options on top of a shape and type. */
static lcase rand_opts(int T, int N, int K, dd_dtype type, int group, dd_dtype sbt) {
    lcase c = {.T = T, .N = N, .K = K, .type = type, .group = group, .sbt = sbt};
    c.norm = below(3);
    c.norm_bias = below(2);
    c.act = below(3);
    c.bias = below(2);
    c.res = below(2);
    c.inplace = below(2);
    c.add = below(3) == 0;
    c.add_bcast = below(2);
    c.pad = below(2);
    c.mis = below(3);
    return c;
}

static const int shapes[][3] = {
    /* T, N, K */
    {1, 1, 64},   {1, 7, 64},    {1, 4, 128},  {2, 33, 128},   {3, 64, 256},  {1, 130, 1024}, {4, 9, 192},
    {5, 17, 64},  {8, 12, 128},  {17, 5, 64},  {32, 40, 128},  {33, 6, 64},   {37, 21, 320},  {64, 13, 128},
    {70, 4, 64},  {2, 1031, 64}, {1, 3, 2048}, {9, 8, 512},
};

static void test_linear_dense(void **state) {
    (void)state;
    static const dd_dtype types[] = {DD_F32, DD_F16, DD_BF16};
    int before = g_lin_checked;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t ty = 0; ty < 3; ty++) {
            lcase c = rand_opts(shapes[s][0], shapes[s][1], shapes[s][2], types[ty], 0, DD_F32);
            check_linear_case(&c);
        }
    /* dense tails: K not a multiple of any vector width */
    static const int odd[][3] = {{1, 5, 17}, {3, 6, 33}, {4, 11, 100}, {9, 3, 7}, {2, 9, 1}, {1, 2, 15}, {6, 5, 31}};
    for (size_t s = 0; s < sizeof odd / sizeof *odd; s++)
        for (size_t ty = 0; ty < 3; ty++) {
            lcase c = rand_opts(odd[s][0], odd[s][1], odd[s][2], types[ty], 0, DD_F32);
            check_linear_case(&c);
        }
    printf("  dense linear: %d (case, implementation) runs within tolerance (worst error %.3f of tolerance)\n",
           g_lin_checked - before, g_worst);
}

static void test_linear_quant(void **state) {
    (void)state;
    static const dd_dtype sbts[] = {DD_F16, DD_BF16, DD_F32};
    static const int groups[] = {32, 64, 128};
    int before = g_lin_checked;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int bits = 8; bits >= 4; bits -= 4) {
            int g = groups[below(3)];
            while (shapes[s][2] % g) g /= 2;
            lcase c = rand_opts(shapes[s][0], shapes[s][1], shapes[s][2], bits == 8 ? DD_Q8 : DD_Q4, g,
                                sbts[below(3)]);
            check_linear_case(&c);
        }
    /* small groups (8, 16: below some vector widths — the scalar fallback) and every scale type */
    static const int small[][4] = {{1, 9, 64, 8}, {3, 5, 48, 16}, {2, 7, 32, 32}, {5, 4, 128, 128}};
    for (size_t s = 0; s < sizeof small / sizeof *small; s++)
        for (size_t sb = 0; sb < 3; sb++)
            for (int bits = 8; bits >= 4; bits -= 4) {
                lcase c = rand_opts(small[s][0], small[s][1], small[s][2], bits == 8 ? DD_Q8 : DD_Q4, small[s][3],
                                    sbts[sb]);
                check_linear_case(&c);
            }
    printf("  quantized linear: %d (case, implementation) runs within tolerance (worst error %.3f of tolerance)\n",
           g_lin_checked - before, g_worst);
}

/* Every option alone and together on one mid-size shape, so no combination is left to chance. */
static void test_linear_options(void **state) {
    (void)state;
    int before = g_lin_checked;
    for (int norm = 0; norm < 3; norm++)
        for (int act = 0; act < 3; act++)
            for (int mix = 0; mix < 4; mix++) {
                lcase c = {.T = 6, .N = 23, .K = 128, .type = mix & 1 ? DD_Q8 : DD_BF16, .group = 64,
                           .sbt = DD_F16, .norm = norm, .norm_bias = mix >> 1, .act = act, .bias = mix & 1,
                           .res = mix >= 2, .inplace = mix == 3, .add = mix >= 1, .add_bcast = mix == 2,
                           .pad = mix & 1, .mis = mix % 3};
                check_linear_case(&c);
            }
    printf("  option grid: %d runs within tolerance\n", g_lin_checked - before);
}

/* ---- attend ---------------------------------------------------------------------------------------------- */

static void test_attend(void **state) {
    (void)state;
    static const int cases[][6] = {
        /* T, p0, H, KVH, HD, rope */
        {1, 0, 4, 4, 16, 0},  {2, 0, 4, 2, 16, 1},  {1, 5, 8, 2, 128, 1}, {1, 31, 16, 16, 64, 0},
        {3, 7, 6, 3, 10, 1},  {1, 20, 4, 1, 24, 1}, {5, 10, 2, 2, 7, 0},  {32, 0, 2, 1, 32, 1},
        {2, 0, 16, 16, 64, 0}, {1, 30, 8, 2, 128, 1}, {4, 12, 3, 1, 18, 1}, {1, 1, 1, 1, 1, 0},
    };
    int checked = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int T = cases[ci][0], p0 = cases[ci][1], H = cases[ci][2], KV = cases[ci][3], HD = cases[ci][4];
        int rope = cases[ci][5], Q = p0 + T, kvw = KV * HD, qw = (H + 2 * KV) * HD, half = HD / 2;
        double inv[DD_MAX_HEAD_DIM];
        double theta = rope && ci % 2 ? 500000.0 : 10000.0;
        for (int j = 0; j < half; j++) inv[j] = 1.0 / pow(theta, 2.0 * j / HD);
        float *qkv = fvec((size_t)T * qw, 1.0f), *kc0 = fvec((size_t)Q * kvw, 1.0f), *vc0 = fvec((size_t)Q * kvw, 1.0f);
        /* the reference: rotate in double, write k/v rows, attend */
        double *kr = malloc((size_t)Q * kvw * sizeof(double)), *vr = malloc((size_t)Q * kvw * sizeof(double));
        for (int i = 0; i < p0 * kvw; i++) {
            kr[i] = kc0[i];
            vr[i] = vc0[i];
        }
        double *qr = malloc((size_t)T * H * HD * sizeof(double)), *want = malloc((size_t)T * H * HD * sizeof(double));
        for (int t = 0; t < T; t++) {
            int p = p0 + t;
            for (int h = 0; h < H + KV; h++) {
                const float *v = qkv + (size_t)t * qw + (size_t)h * HD;
                double *o = h < H ? qr + ((size_t)t * H + h) * HD : kr + (size_t)p * kvw + (size_t)(h - H) * HD;
                for (int j = 0; j < HD; j++) o[j] = v[j];
                if (rope)
                    for (int j = 0; j < half; j++) {
                        double c = cos(p * inv[j]), s = sin(p * inv[j]);
                        o[j] = v[j] * c - v[j + half] * s;
                        o[j + half] = v[j + half] * c + v[j] * s;
                    }
            }
            for (int i = 0; i < kvw; i++) vr[(size_t)p * kvw + i] = qkv[(size_t)t * qw + (size_t)(H + KV) * HD + i];
        }
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                int kh = h / (H / KV), n = p0 + t + 1;
                double sc[DD_MAX_LEVELS], mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double d = 0;
                    const double *qh = qr + ((size_t)t * H + h) * HD, *kj = kr + (size_t)j * kvw + kh * HD;
                    for (int i = 0; i < HD; i++) d += qh[i] * kj[i];
                    sc[j] = d / sqrt((double)HD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += sc[j] / sum * vr[(size_t)j * kvw + kh * HD + i];
                    want[((size_t)t * H + h) * HD + i] = o;
                }
            }
        float *out = malloc((size_t)T * H * HD * sizeof(float)), *kc = malloc((size_t)Q * kvw * sizeof(float)),
              *vc = malloc((size_t)Q * kvw * sizeof(float));
        for (int ii = 0; ii < g_nimpl; ii++) {
            const impl *im = &g_impl[ii];
            for (int i = 0; i < T * H * HD; i++) out[i] = NAN;
            for (int i = 0; i < Q * kvw; i++) {
                kc[i] = i < p0 * kvw ? kc0[i] : NAN;
                vc[i] = i < p0 * kvw ? vc0[i] : NAN;
            }
            dd_attend_args a = {.out = out, .kcache = kc, .vcache = vc, .qkv = qkv, .T = T, .p0 = p0, .H = H,
                                .KVH = KV, .HD = HD, .inv_freq = rope ? inv : NULL};
            dd_error e;
            dd_status st = run_attend(im, &a, &e);
            if (st == DD_EUNSUPPORTED) {
                printf("  %s: %s: skipped\n", im->name, e.msg);
                continue;
            }
            assert_int_equal(st, DD_OK);
            int bad = 0;
            for (int i = 0; i < T * H * HD && bad < 3; i++)
                if (!(fabs(out[i] - want[i]) <= 3e-6 + 1e-5 * fabs(want[i]))) {
                    printf("  FAIL %s attend T=%d p0=%d H=%d KVH=%d HD=%d rope=%d: out[%d] = %.9g, want %.9g\n",
                           im->name, T, p0, H, KV, HD, rope, i, out[i], want[i]);
                    bad++;
                }
            for (int i = p0 * kvw; i < Q * kvw && bad < 3; i++)
                if (!(fabs(kc[i] - kr[i]) <= 1e-6 + 1e-6 * fabs(kr[i])) || vc[i] != (float)vr[i]) {
                    printf("  FAIL %s attend T=%d p0=%d H=%d KVH=%d HD=%d rope=%d: cache[%d] = %.9g / %.9g, want "
                           "%.9g / %.9g\n",
                           im->name, T, p0, H, KV, HD, rope, i, kc[i], vc[i], kr[i], vr[i]);
                    bad++;
                }
            for (int i = 0; i < p0 * kvw && !bad; i++)
                if (kc[i] != kc0[i] || vc[i] != vc0[i]) {
                    printf("  FAIL %s attend: cached row element %d changed\n", im->name, i);
                    bad++;
                }
            assert_int_equal(bad, 0);
            checked++;
        }
        free(out);
        free(kc);
        free(vc);
        free(qkv);
        free(kc0);
        free(vc0);
        free(kr);
        free(vr);
        free(qr);
        free(want);
    }
    printf("  attend: %d (case, implementation) runs within tolerance\n", checked);
}

/* ---- activations (leaf kernels of each cpu instruction set) ------------------------------------------------ */

static void test_activations(void **state) {
    (void)state;
    const int n = 100003;
    float *x = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float)), *u = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float));
    for (int isa = 0; isa < DD_CPU_NISA; isa++) {
        const dd_cpu_kern *k = dd_cpu_kernels_for((dd_cpu_isa)isa);
        if (!k) continue;
        for (int i = 0; i < n; i++) {
            /* a sweep over [-30, 30], every 5th value a random small magnitude, plus exact zeros */
            x[i] = (float)((i - n / 2) * (60.0 / n));
            if (i % 5 == 0) x[i] = sym(1.0f) * ldexpf(1.0f, -(i % 60));
            if (i % 997 == 0) x[i] = 0.0f;
            v[i] = g[i] = x[i];
            u[i] = sym(3.0f);
        }
        v[n - 1] = g[n - 1] = NAN; /* beyond the count: must stay untouched */
        k->gelu(v, n - 1);
        k->swiglu(g, u, n - 1);
        double worst_g = 0, worst_s = 0;
        for (int i = 0; i < n - 1; i++) {
            double a = x[i];
            double wg = 0.5 * a * erfc(-a / sqrt(2.0)); /* 1 + erf(x) = erfc(-x), without the cancellation */
            double tg = 5e-7 * fabs(a) + 5e-7 * fabs(wg) + 1e-38;
            double ws = a / (1.0 + exp(-a)) * u[i];
            double ts = 6e-7 * fabs(ws) + (a < -80 ? 1e-35 * fabs(a * u[i]) : 0) + 1e-38;
            if (!(fabs(v[i] - wg) <= tg) || !(fabs(g[i] - ws) <= ts))
                printf("  FAIL %s: a = %.9g: gelu %.9g (want %.9g), silu*u %.9g (want %.9g)\n", k->name, a, v[i], wg,
                       g[i], ws);
            assert_true(fabs(v[i] - wg) <= tg);
            assert_true(fabs(g[i] - ws) <= ts);
            if (fabs(v[i] - wg) / tg > worst_g) worst_g = fabs(v[i] - wg) / tg;
            if (fabs(g[i] - ws) / ts > worst_s) worst_s = fabs(g[i] - ws) / ts;
        }
        assert_true(isnan(v[n - 1]) && isnan(g[n - 1]));
        printf("  %s: gelu and swiglu within tolerance on %d inputs (worst %.2f / %.2f of it)\n", k->name, n - 1,
               worst_g, worst_s);
    }
    free(x);
    free(v);
    free(u);
    free(g);
}

/* ---- dispatch -------------------------------------------------------------------------------------------- */

static void test_isa_dispatch(void **state) {
    (void)state;
    assert_true(dd_cpu_isa_supported(DD_CPU_GENERIC));
    /* the automatic choice is the widest supported set, or the one $DD_CPU_ISA names (read at each call) */
    char *saved = getenv("DD_CPU_ISA") ? strdup(getenv("DD_CPU_ISA")) : NULL;
    unsetenv("DD_CPU_ISA");
    const dd_cpu_kern *k = dd_cpu_kernels();
    assert_non_null(k);
    printf("  automatic choice: %s\n", k->name);
    int best = 0;
    for (int i = 0; i < DD_CPU_NISA; i++)
        if (dd_cpu_isa_supported((dd_cpu_isa)i)) best = i;
    assert_ptr_equal(k, dd_cpu_kernels_for((dd_cpu_isa)best));
    for (int i = 0; i < DD_CPU_NISA; i++) {
        setenv("DD_CPU_ISA", dd_cpu_isa_name((dd_cpu_isa)i), 1);
        if (dd_cpu_isa_supported((dd_cpu_isa)i)) {
            assert_string_equal(dd_cpu_kernels()->name, dd_cpu_isa_name((dd_cpu_isa)i));
            assert_true(dd_cpu_kernels()->nr >= 1 && dd_cpu_kernels()->nr <= DD_CPU_ACC_LD);
            assert_true(dd_cpu_kernels()->tr >= 1 && dd_cpu_kernels()->tr <= DD_CPU_TR_MAX);
        } else {
            assert_ptr_equal(dd_cpu_kernels(), k); /* unsupported here: the automatic choice */
            assert_null(dd_cpu_kernels_for((dd_cpu_isa)i));
        }
    }
    setenv("DD_CPU_ISA", "sse9", 1);
    assert_ptr_equal(dd_cpu_kernels(), k);
    if (saved) setenv("DD_CPU_ISA", saved, 1);
    else unsetenv("DD_CPU_ISA");
    free(saved);
    /* per decoder: dd_cpu_decoder_use_isa sets a cpu decoder's set and refuses the rest */
    dd_model *m = NULL;
    dd_decoder *d = NULL, *r = NULL;
    dd_error e;
    assert_int_equal(dd_model_synthetic(&m, "tiny-gpt", DD_F32, 1, &e), DD_OK);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CPU;
    assert_int_equal(dd_decoder_create(&d, m, &p, &e), DD_OK);
    p.backend = DD_BACKEND_REF;
    assert_int_equal(dd_decoder_create(&r, m, &p, &e), DD_OK);
    for (int i = 0; i < DD_CPU_NISA; i++)
        assert_int_equal(dd_cpu_decoder_use_isa(d, (dd_cpu_isa)i, &e),
                         dd_cpu_isa_supported((dd_cpu_isa)i) ? DD_OK : DD_EUNSUPPORTED);
    assert_int_equal(dd_cpu_decoder_use_isa(d, (dd_cpu_isa)99, &e), DD_EUNSUPPORTED);
    assert_int_equal(dd_cpu_decoder_use_isa(r, DD_CPU_GENERIC, &e), DD_EINVAL);
    dd_decoder_free(d);
    dd_decoder_free(r);
    dd_model_free(m);
}

int main(void) {
    uint64_t seed = (uint64_t)time(NULL);
    const char *s = getenv("DD_TEST_SEED");
    if (s) seed = strtoull(s, NULL, 0);
    printf("test_kernels: seed %llu (DD_TEST_SEED=%llu replays)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    g_rng = seed;
    list_impls();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_dispatch),
        cmocka_unit_test(test_linear_dense),
        cmocka_unit_test(test_linear_quant),
        cmocka_unit_test(test_linear_options),
        cmocka_unit_test(test_attend),
        cmocka_unit_test(test_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
