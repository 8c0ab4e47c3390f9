/* The kernel harness: every fast implementation of the src/kernels.h contracts — each registry row's kernel hooks
 * (src/registry.h): the CPU backend's at every instruction set this machine supports (generic C, AVX2, AVX-512),
 * with 1 and 2 threads, and the CUDA backend's when built with DD_WITH_CUDA and a device is present — against the float64 reference maths of
 * tests/harness.c (written from the contract text), on fresh random inputs (seed printed; DD_TEST_SEED=<n>
 * replays a run).
 *
 * linear: shapes include T = 1 .. 70 (more than one tile of rows and more than 32), N with tails of every tile
 *   width, odd K (dense tails), every weight type (f32, f16, bf16, MLX q8 / q4 with groups 8 .. 128 and f16 /
 *   bf16 / f32 scales), weights at odd (misaligned) addresses, row strides wider than the rows, every norm
 *   prologue, every activation, bias, residual (separate and in place) and constant add.
 * attend: MHA and GQA, with and without RoPE, 1 .. 32 new positions after 0 .. 31 cached ones, odd head dims.
 * Outputs (and the cache rows an attend must write) are poisoned with NaN first, so an unwritten element fails.
 *
 * Tolerances: harness.h (TH_TOL_LINEAR, TH_TOL_ATTEND, TH_TOL_ROPE), one rule for every weight type. A backend
 * or instruction set that cannot run a case says so and the case is skipped, never run wrongly.
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

#include "cpu/cpu.h"
#include "depthdec.h"
#include "harness.h"
#include "kernels.h"

/* ---- implementations under test -------------------------------------------------------------------------- */

/* Every backend of the registry with the kernel hooks (src/registry.h: linear_host, attend_host), at every
 * variant that runs here, with 1 and 2 threads for a threaded backend. */
typedef struct impl {
    const dd_backend_row *row;
    int v, threads;
    char name[40];
} impl;

static impl g_impl[16];
static int g_nimpl;

static void list_impls(void) {
    th_variant var[16];
    int nvar = th_variants(var, 16, 0);
    g_nimpl = 0;
    for (int i = 0; i < nvar; i++) {
        const dd_backend_test *t = &var[i].row->test;
        if (!t->linear_host || !t->attend_host) continue;
        for (int th = t->threaded ? 1 : 0; th <= (t->threaded ? 2 : 0) && g_nimpl < 16; th++) {
            impl *p = &g_impl[g_nimpl++];
            *p = (impl){var[i].row, var[i].v, th, ""};
            snprintf(p->name, sizeof p->name, th ? "%s-t%d" : "%s", var[i].name, th);
        }
    }
}

static dd_status run_linear(const impl *im, const dd_linear_args *a, dd_error *e) {
    return im->row->test.linear_host(a, im->v, im->threads, e);
}

static dd_status run_attend(const impl *im, const dd_attend_args *a, dd_error *e) {
    return im->row->test.attend_host(a, im->v, im->threads, e);
}

/* ---- linear ---------------------------------------------------------------------------------------------- */

static int g_lin_checked;
static double g_worst; /* largest |got - want| / tol seen: how close the runs came to the tolerance */

/* One case (harness.h: random inputs, float64 reference) through every implementation. */
static void check_linear_case(const th_lcase *c) {
    th_linear L;
    th_linear_make(&L, c);
    float *y = malloc((size_t)c->T * L.ldy * sizeof(float));
    assert_non_null(y);
    for (int ii = 0; ii < g_nimpl; ii++) {
        const impl *im = &g_impl[ii];
        /* T > 32 and a broadcast add (lda 0) are extensions of the cpu driver (cpu.h; its row's linear_ext), not
         * of the kernels.h contract every backend implements */
        if (!im->row->test.linear_ext && (c->T > 32 || (c->add && c->add_bcast))) continue;
        dd_linear_args a = th_linear_args(&L, y);
        dd_error e;
        dd_status st = run_linear(im, &a, &e);
        if (st == DD_EUNSUPPORTED) {
            printf("  %s: %s: skipped\n", im->name, e.msg);
            continue;
        }
        assert_int_equal(st, DD_OK);
        assert_int_equal(th_linear_check(&L, y, im->name, &g_worst), 0);
        g_lin_checked++;
    }
    free(y);
    th_linear_free(&L);
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
            th_lcase c = th_lcase_rand(shapes[s][0], shapes[s][1], shapes[s][2], types[ty], 0, DD_F32);
            check_linear_case(&c);
        }
    /* dense tails: K not a multiple of any vector width */
    static const int odd[][3] = {{1, 5, 17}, {3, 6, 33}, {4, 11, 100}, {9, 3, 7}, {2, 9, 1}, {1, 2, 15}, {6, 5, 31}};
    for (size_t s = 0; s < sizeof odd / sizeof *odd; s++)
        for (size_t ty = 0; ty < 3; ty++) {
            th_lcase c = th_lcase_rand(odd[s][0], odd[s][1], odd[s][2], types[ty], 0, DD_F32);
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
            int g = groups[rnd_below(3)];
            while (shapes[s][2] % g) g /= 2;
            th_lcase c = th_lcase_rand(shapes[s][0], shapes[s][1], shapes[s][2], bits == 8 ? DD_Q8 : DD_Q4, g,
                                       sbts[rnd_below(3)]);
            check_linear_case(&c);
        }
    /* small groups (8, 16: below some vector widths — the scalar fallback) and every scale type */
    static const int small[][4] = {{1, 9, 64, 8}, {3, 5, 48, 16}, {2, 7, 32, 32}, {5, 4, 128, 128}};
    for (size_t s = 0; s < sizeof small / sizeof *small; s++)
        for (size_t sb = 0; sb < 3; sb++)
            for (int bits = 8; bits >= 4; bits -= 4) {
                th_lcase c = th_lcase_rand(small[s][0], small[s][1], small[s][2], bits == 8 ? DD_Q8 : DD_Q4,
                                           small[s][3], sbts[sb]);
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
                th_lcase c = {.T = 6, .N = 23, .K = 128, .type = mix & 1 ? DD_Q8 : DD_BF16, .group = 64,
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
    static const int cases[][7] = {
        /* T, p0, H, KVH, HD, rope, q/k norm (Qwen3) */
        {1, 0, 4, 4, 16, 0, 0},  {2, 0, 4, 2, 16, 1, 0},  {1, 5, 8, 2, 128, 1, 0}, {1, 31, 16, 16, 64, 0, 0},
        {3, 7, 6, 3, 10, 1, 0},  {1, 20, 4, 1, 24, 1, 0}, {5, 10, 2, 2, 7, 0, 0},  {32, 0, 2, 1, 32, 1, 0},
        {2, 0, 16, 16, 64, 0, 0}, {1, 30, 8, 2, 128, 1, 0}, {4, 12, 3, 1, 18, 1, 0}, {1, 1, 1, 1, 1, 0, 0},
        {2, 0, 16, 8, 128, 1, 1}, {1, 9, 4, 2, 32, 1, 1}, {3, 4, 6, 3, 10, 1, 1}, {1, 14, 2, 2, 7, 0, 1},
    };
    int checked = 0;
    double worst = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int *k = cases[ci];
        th_attend A;
        th_attend_make_qk(&A, k[0], k[1], k[2], k[3], k[4], k[5], k[5] && ci % 2 ? 500000.0 : 10000.0, k[6]);
        const size_t nout = (size_t)A.T * A.H * A.HD, ncache = (size_t)A.Q * A.kvw;
        float *out = malloc(nout * sizeof(float)), *kc = malloc(ncache * sizeof(float)),
              *vc = malloc(ncache * sizeof(float));
        assert_true(out && kc && vc);
        for (int ii = 0; ii < g_nimpl; ii++) {
            const impl *im = &g_impl[ii];
            dd_attend_args a = th_attend_args(&A, out, kc, vc);
            dd_error e;
            dd_status st = run_attend(im, &a, &e);
            if (st == DD_EUNSUPPORTED) {
                printf("  %s: %s: skipped\n", im->name, e.msg);
                continue;
            }
            assert_int_equal(st, DD_OK);
            assert_int_equal(th_attend_check(&A, out, kc, vc, im->name, &worst), 0);
            checked++;
        }
        free(out);
        free(kc);
        free(vc);
        th_attend_free(&A);
    }
    printf("  attend: %d (case, implementation) runs within tolerance (worst abs error %.3g)\n", checked, worst);
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
            if (i % 5 == 0) x[i] = rnd_sym(1.0f) * ldexpf(1.0f, -(i % 60));
            if (i % 997 == 0) x[i] = 0.0f;
            v[i] = g[i] = x[i];
            u[i] = rnd_sym(3.0f);
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
    th_seed_init("test_kernels");
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
