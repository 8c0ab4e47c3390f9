/* Tests of the shared sampler (src/sample.c) against SPEC §3.
 *
 * Everything the library computes is checked against something written independently here: Philox against the
 * spec's known-answer vectors, the noise against the formula spelled out, the radix-select threshold against
 * qsort, and the whole sampler against a sort-based brute-force sampler. Random inputs come from a fresh seed
 * each run (printed; set DD_TEST_SEED=<n> to replay one).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "depthdec.h"
#include "harness.h"
#include "sample.h"

/* random inputs: the harness's generator (harness.h) */
static float rnd_normalish(void) { return (float)((rnd_unif() + rnd_unif() + rnd_unif() - 1.5) * 4.0); }

/* ---- independent helpers ------------------------------------------------------------------------------------ */

/* SPEC §3 point 3 written out from the raw Philox output. */
static float ref_gumbel(uint64_t seed, uint64_t frame, int level, uint32_t i) {
    uint32_t key[2] = {(uint32_t)(seed & 0xFFFFFFFFu), (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {i / 4, (uint32_t)level, (uint32_t)(frame & 0xFFFFFFFFu), (uint32_t)(frame >> 32)};
    uint32_t out[4];
    dd_philox4x32_10(ctr, key, out);
    uint32_t x = out[i % 4];
    uint32_t top24 = (x >> 8) | 1u;
    float u = (float)top24 / 16777216.0f; /* exact: power-of-two scale */
    double inner = -log((double)u);
    double g = -log(inner);
    return (float)g;
}

/* NaN -> -inf, -0.0 -> +0.0: the value ordering the sampler uses. */
static float canon(float f) {
    if (isnan(f)) return -INFINITY;
    if (f == 0.0f) return 0.0f;
    return f;
}

static int cmp_desc(const void *a, const void *b) {
    float x = canon(*(const float *)a), y = canon(*(const float *)b);
    return (x < y) - (x > y);
}

/* K-th largest (1-based) by sorting a copy. */
static float sorted_kth(const float *z, int V, int K) {
    float *c = malloc((size_t)V * sizeof *c);
    assert_non_null(c);
    memcpy(c, z, (size_t)V * sizeof *c);
    qsort(c, (size_t)V, sizeof *c, cmp_desc);
    float r = canon(c[K - 1]);
    free(c);
    return r;
}

/* Brute-force SPEC §3 sampler: sort-based keep set, formula written out, two-pass argmax (max first, then the
 * lowest index reaching it). Candidates are logits that are neither NaN nor -inf. Returns -1 if no logit is
 * finite. */
static int32_t ref_sample(const float *z, int V, float T, int K, uint64_t seed, uint64_t frame, int level) {
    int nfinite = 0;
    for (int i = 0; i < V; i++) nfinite += isfinite(z[i]) ? 1 : 0;
    if (nfinite == 0) return -1;
    float *s = malloc((size_t)V * sizeof *s);
    char *cand = malloc((size_t)V);
    assert_non_null(s);
    assert_non_null(cand);
    float kth = -INFINITY;
    int use_topk = (T != 0.0f) && K > 0 && K < V;
    if (use_topk) kth = sorted_kth(z, V, K);
    float inv = 1.0f / T;
    for (int i = 0; i < V; i++) {
        cand[i] = !isnan(z[i]) && z[i] != -INFINITY;
        if (use_topk && !(canon(z[i]) >= kth)) cand[i] = 0;
        if (!cand[i]) continue;
        if (T == 0.0f) {
            s[i] = z[i];
        } else {
            volatile float a = z[i] * inv; /* volatile: force the float rounding of the product */
            volatile float b = a + ref_gumbel(seed, frame, level, (uint32_t)i);
            s[i] = isnan(b) ? -INFINITY : b;
        }
    }
    int have = 0;
    float m = -INFINITY;
    for (int i = 0; i < V; i++)
        if (cand[i] && (!have || s[i] > m)) {
            m = s[i];
            have = 1;
        }
    int32_t r = -1;
    for (int i = 0; i < V && r < 0; i++)
        if (cand[i] && s[i] == m) r = i;
    free(s);
    free(cand);
    assert_true(r >= 0);
    return r;
}

static int32_t sample(const float *z, int V, float T, int K, uint64_t seed, uint64_t frame, int level) {
    dd_sampling s = {T, K};
    dd_error err;
    int32_t code = -7;
    dd_status st = dd_sample_logits(z, V, &s, seed, frame, level, &code, &err);
    if (st != DD_OK) fail_msg("dd_sample_logits failed (%d): %s", (int)st, err.msg);
    assert_true(code >= 0 && code < V);
    return code;
}

/* ---- Philox ------------------------------------------------------------------------------------------------- */

static void test_philox_kat(void **state) {
    (void)state;
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        dd_philox4x32_10(&v[t][0], &v[t][4], out);
        for (int j = 0; j < 4; j++) {
            if (out[j] != v[t][6 + j])
                fail_msg("vector %d word %d: got %08x want %08x", t, j, out[j], v[t][6 + j]);
        }
    }
    /* out may alias ctr */
    uint32_t c[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    dd_philox4x32_10(c, &v[2][4], c);
    assert_int_equal(c[0], 0xd16cfe09);
    assert_int_equal(c[3], 0x24126ea1);
}

/* ---- noise -------------------------------------------------------------------------------------------------- */

static void test_gumbel_formula(void **state) {
    (void)state;
    for (int t = 0; t < 200000; t++) {
        uint64_t seed = rnd64(), frame = (t & 1) ? rnd64() : (uint64_t)rnd_below(1000);
        int level = rnd_below(64);
        uint32_t i = (t & 2) ? (uint32_t)rnd64() : (uint32_t)rnd_below(4096);
        float a = dd_gumbel(seed, frame, level, i), b = ref_gumbel(seed, frame, level, i);
        if (th_bits(a) != th_bits(b))
            fail_msg("dd_gumbel(%llu, %llu, %d, %u) = %a, want %a", (unsigned long long)seed,
                     (unsigned long long)frame, level, i, (double)a, (double)b);
        assert_true(isfinite(a) && fabsf(a) < 17.0f);
        if ((t & 7) == 0) {
            uint32_t i4 = i >> 2;
            float g[4];
            dd_gumbel_block(seed, frame, level, i4, g);
            for (uint32_t j = 0; j < 4; j++) {
                float e = dd_gumbel(seed, frame, level, 4 * i4 + j);
                if (th_bits(g[j]) != th_bits(e)) fail_msg("dd_gumbel_block word %u differs", j);
            }
        }
    }
    /* extremes of u: x = 0 gives u = 2^-24, x = ~0 gives u = 1 - 2^-24; both must give finite g */
    double lo = -log(-log((double)0x1p-24f)), hi = -log(-log((double)(16777215.0f * 0x1p-24f)));
    assert_true(isfinite(lo) && isfinite(hi) && lo < hi);
}

/* ---- order keys and threshold ------------------------------------------------------------------------------- */

static float pick_tie_value(void) {
    static const float set[] = {-3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 2.0f, 1e30f, -1e-40f, 1e-40f};
    uint32_t r = rnd_below(100);
    if (r < 4) return NAN;
    if (r < 6) return -NAN;
    if (r < 8) return INFINITY;
    if (r < 10) return -INFINITY;
    if (r < 80) return set[rnd_below((int)(sizeof set / sizeof set[0]))];
    return rnd_normalish();
}

static void test_order_key(void **state) {
    (void)state;
    assert_int_equal(dd_order_key(-0.0f), dd_order_key(0.0f));
    assert_int_equal(dd_order_key(NAN), dd_order_key(-INFINITY));
    assert_int_equal(dd_order_key(-NAN), dd_order_key(-INFINITY));
    uint32_t nanbits = 0x7F800001u; /* signalling NaN payload */
    float snan;
    memcpy(&snan, &nanbits, 4);
    assert_int_equal(dd_order_key(snan), dd_order_key(-INFINITY));
    assert_true(dd_order_key(-INFINITY) < dd_order_key(-3.4e38f));
    assert_true(dd_order_key(3.4e38f) < dd_order_key(INFINITY));
    assert_true(dd_order_key(-1e-45f) < dd_order_key(0.0f));
    assert_true(dd_order_key(0.0f) < dd_order_key(1e-45f));
    for (int t = 0; t < 1000000; t++) {
        float a, b;
        if (t & 1) {
            uint32_t ua = (uint32_t)rnd64(), ub = (uint32_t)rnd64();
            memcpy(&a, &ua, 4);
            memcpy(&b, &ub, 4);
        } else {
            a = pick_tie_value();
            b = pick_tie_value();
        }
        float ca = canon(a), cb = canon(b);
        uint32_t ka = dd_order_key(a), kb = dd_order_key(b);
        if ((ca < cb) != (ka < kb) || (ca == cb) != (ka == kb))
            fail_msg("order key disagrees for %a vs %a", (double)a, (double)b);
        if (th_bits(dd_order_key_to_float(ka)) != th_bits(ca)) fail_msg("key round trip of %a", (double)a);
    }
}

/* dd_topk_threshold for every K = 1..V against one sorted copy. */
static void check_threshold_all_k(const float *z, int V) {
    float *c = malloc((size_t)V * sizeof *c);
    assert_non_null(c);
    memcpy(c, z, (size_t)V * sizeof *c);
    qsort(c, (size_t)V, sizeof *c, cmp_desc);
    for (int K = 1; K <= V; K++) {
        float got = dd_topk_threshold(z, V, K), want = canon(c[K - 1]);
        if (th_bits(got) != th_bits(want))
            fail_msg("V %d K %d: threshold %a, sorted %a", V, K, (double)got, (double)want);
    }
    free(c);
}

static void test_topk_threshold(void **state) {
    (void)state;
    static const int sizes[] = {1, 2, 3, 7, 64, 2048, 2051, 5000};
    float *z = malloc(5000 * sizeof *z);
    assert_non_null(z);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int V = sizes[si];
        int reps = V <= 64 ? 30 : 2;
        for (int rep = 0; rep < reps; rep++) {
            int mode = rep % 3; /* 0: heavy ties + specials, 1: all distinct-ish, 2: tiny set {-0, 0, NaN, 1} */
            for (int i = 0; i < V; i++) {
                if (mode == 0) z[i] = pick_tie_value();
                else if (mode == 1) z[i] = rnd_normalish();
                else {
                    static const float tiny[] = {-0.0f, 0.0f, NAN, 1.0f};
                    z[i] = tiny[rnd_below(4)];
                }
            }
            check_threshold_all_k(z, V);
        }
    }
    /* NaN-only and -inf-only inputs give -inf */
    for (int i = 0; i < 10; i++) z[i] = (i & 1) ? NAN : -NAN;
    for (int K = 1; K <= 10; K++) assert_true(dd_topk_threshold(z, 10, K) == -INFINITY);
    /* -0.0 and +0.0 are one value: the threshold is +0.0 whichever is the K-th */
    float zz[5] = {-0.0f, 1.0f, 0.0f, -0.0f, -2.0f};
    for (int K = 2; K <= 4; K++) assert_int_equal(th_bits(dd_topk_threshold(zz, 5, K)), th_bits(0.0f));
    assert_true(dd_topk_threshold(zz, 5, 5) == -2.0f);
    free(z);
}

/* ---- the sampler -------------------------------------------------------------------------------------------- */

static void test_topk_ties_kept(void **state) {
    (void)state;
    const float z[6] = {5.0f, 4.0f, 3.0f, 3.0f, 1.0f, 0.0f}; /* K = 3: the 3rd and 4th largest are tied */
    const int K = 3;
    uint64_t base = rnd64();
    int found = 0;
    for (uint64_t t = 0; t < 100000 && !found; t++) {
        uint64_t seed = base + t;
        if (ref_sample(z, 6, 1.0f, K, seed, 7, 2) == 3) {
            assert_int_equal(sample(z, 6, 1.0f, K, seed, 7, 2), 3);
            found = 1;
        }
    }
    assert_true(found);
    int count[6] = {0};
    for (uint64_t t = 0; t < 20000; t++) count[sample(z, 6, 1.0f, K, base + t, 3, 1)]++;
    assert_int_equal(count[4], 0);
    assert_int_equal(count[5], 0);
    for (int i = 0; i < 4; i++) assert_true(count[i] > 0);

    /* -0.0 and +0.0 tied at the boundary: both kept, everything below never drawn */
    const float zz[5] = {1.0f, -0.0f, 0.0f, -1.0f, -0.5f};
    int cz[5] = {0};
    for (uint64_t t = 0; t < 20000; t++) cz[sample(zz, 5, 1.0f, 2, base + t, 0, 0)]++;
    assert_true(cz[1] > 0 && cz[2] > 0);
    assert_int_equal(cz[3], 0);
    assert_int_equal(cz[4], 0);

    /* K = 1 with a tie at the top keeps both; below never */
    const float z1[4] = {2.0f, 7.0f, 1.0f, 7.0f};
    int c1[4] = {0};
    for (uint64_t t = 0; t < 2000; t++) c1[sample(z1, 4, 0.9f, 1, base + t, 1, 1)]++;
    assert_true(c1[1] > 0 && c1[3] > 0);
    assert_int_equal(c1[0] + c1[2], 0);
}

static void test_greedy(void **state) {
    (void)state;
    const float z[7] = {1.0f, NAN, 3.0f, -INFINITY, 3.0f, NAN, 2.0f};
    for (int t = 0; t < 100; t++) {
        uint64_t seed = rnd64(), frame = rnd64();
        assert_int_equal(sample(z, 7, 0.0f, 0, seed, frame, t), 2);
        assert_int_equal(sample(z, 7, -0.0f, 0, seed, frame, t), 2);
        assert_int_equal(sample(z, 7, 0.0f, 1, seed, frame, t), 2); /* top_k has no effect on greedy */
    }
    const float z2[4] = {NAN, -5.0f, -5.0f, NAN};
    assert_int_equal(sample(z2, 4, 0.0f, 0, 1, 2, 3), 1);
    const float z3[4] = {NAN, 1.0f, INFINITY, INFINITY}; /* +inf is the largest logit */
    assert_int_equal(sample(z3, 4, 0.0f, 0, 1, 2, 3), 2);
    const float z4[3] = {-0.0f, 0.0f, -1.0f}; /* -0.0 == +0.0: lowest index */
    assert_int_equal(sample(z4, 3, 0.0f, 0, 1, 2, 3), 0);
}

static void test_nonfinite(void **state) {
    (void)state;
    float z[16];
    dd_sampling s = {0.9f, 50};
    dd_error err;
    for (int mode = 0; mode < 4; mode++) {
        for (int i = 0; i < 16; i++) {
            if (mode == 0) z[i] = NAN;
            else if (mode == 1) z[i] = INFINITY;
            else if (mode == 2) z[i] = -INFINITY;
            else z[i] = (i % 3 == 0) ? NAN : (i % 3 == 1) ? INFINITY : -INFINITY;
        }
        for (int greedy = 0; greedy < 2; greedy++) {
            s.temperature = greedy ? 0.0f : 0.9f;
            int32_t code = 0x5EED;
            memset(&err, 0, sizeof err);
            assert_int_equal(dd_sample_logits(z, 16, &s, 1, 2, 5, &code, &err), DD_ENUMERIC);
            assert_int_equal(err.code, DD_ENUMERIC);
            assert_int_equal(code, 0x5EED);
            assert_non_null(strstr(err.msg, "level 5"));
            assert_non_null(strstr(err.msg, "no finite logit"));
            assert_int_equal(dd_sample_core(z, 16, s.temperature, s.top_k, 1, 2, 5), -1);
        }
        /* err may be NULL */
        int32_t code = 0x5EED;
        assert_int_equal(dd_sample_logits(z, 16, &s, 1, 2, 5, &code, NULL), DD_ENUMERIC);
        assert_int_equal(code, 0x5EED);
    }
    /* one finite value among NaNs is always returned, whatever T and K */
    for (int i = 0; i < 16; i++) z[i] = NAN;
    z[11] = -1e30f;
    static const float Ts[] = {0.0f, 0.1f, 0.9f, 1.7f};
    static const int Ks[] = {0, 1, 5, 16, 100};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 5; b++)
            for (uint64_t t = 0; t < 50; t++) assert_int_equal(sample(z, 16, Ts[a], Ks[b], rnd64(), t, 3), 11);
    /* NaN counts as -inf: NaNs never win even when many finite values are tiny */
    for (int i = 0; i < 16; i++) z[i] = (i & 1) ? NAN : -30.0f;
    for (uint64_t t = 0; t < 2000; t++) assert_int_equal(sample(z, 16, 1.0f, 0, rnd64(), t, 1) & 1, 0);
    /* a +inf logit among finite ones wins (inf + g = inf) */
    for (int i = 0; i < 16; i++) z[i] = (float)i;
    z[4] = INFINITY;
    for (uint64_t t = 0; t < 200; t++) assert_int_equal(sample(z, 16, 1.0f, 3, rnd64(), t, 1), 4);
    /* T so small that 1/T overflows: 0 * inf = NaN counts as -inf; the lowest kept candidate wins all-(-inf) ties,
     * and a -inf/NaN logit is never returned */
    const float zt[4] = {NAN, 0.0f, 0.0f, -1.0f};
    assert_int_equal(sample(zt, 4, 1e-40f, 0, 9, 9, 9), 1);
    assert_int_equal(ref_sample(zt, 4, 1e-40f, 0, 9, 9, 9), 1);
    const float zu[3] = {-1.0f, 2.0f, 0.0f};
    assert_int_equal(sample(zu, 3, 1e-40f, 0, 9, 9, 9), 1);
    const float zv[2] = {0.0f, 1.0f}; /* s = {NaN, +inf}: the NaN must not block the later +inf */
    assert_int_equal(sample(zv, 2, 1e-40f, 0, 9, 9, 9), 1);
    assert_int_equal(ref_sample(zv, 2, 1e-40f, 0, 9, 9, 9), 1);
    const float zw[3] = {-INFINITY, -1e38f, 0.0f}; /* every s is -inf: the -inf logit at 0 is not a candidate */
    assert_int_equal(sample(zw, 3, 1e-40f, 0, 9, 9, 9), 1);
    assert_int_equal(ref_sample(zw, 3, 1e-40f, 0, 9, 9, 9), 1);
}

static void expect_einval(const float *z, int V, const dd_sampling *s, int32_t *code, const char *needle) {
    dd_error err;
    memset(&err, 0, sizeof err);
    int32_t before = code ? *code : 0;
    assert_int_equal(dd_sample_logits(z, V, s, 1, 2, 3, code, &err), DD_EINVAL);
    assert_int_equal(err.code, DD_EINVAL);
    if (needle && !strstr(err.msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    if (code) assert_int_equal(*code, before);
    assert_int_equal(dd_sample_logits(z, V, s, 1, 2, 3, code, NULL), DD_EINVAL);
}

static void test_argument_checks(void **state) {
    (void)state;
    const float z[3] = {0.0f, 1.0f, 2.0f};
    int32_t code = 0x5EED;
    dd_sampling s;
    s = (dd_sampling){-1.0f, 0};
    expect_einval(z, 3, &s, &code, "temperature");
    expect_einval(z, 3, &s, &code, "-1");
    s = (dd_sampling){NAN, 0};
    expect_einval(z, 3, &s, &code, "temperature");
    expect_einval(z, 3, &s, &code, "nan");
    s = (dd_sampling){INFINITY, 0};
    expect_einval(z, 3, &s, &code, "temperature");
    expect_einval(z, 3, &s, &code, "inf");
    s = (dd_sampling){-INFINITY, 0};
    expect_einval(z, 3, &s, &code, "temperature");
    s = (dd_sampling){-1e-30f, 0};
    expect_einval(z, 3, &s, &code, "temperature");
    s = (dd_sampling){0.9f, -1};
    expect_einval(z, 3, &s, &code, "top_k");
    expect_einval(z, 3, &s, &code, "-1");
    s = (dd_sampling){0.9f, -3};
    expect_einval(z, 3, &s, &code, "-3");
    s = (dd_sampling){0.9f, 50};
    expect_einval(NULL, 3, &s, &code, "logits");
    expect_einval(z, 3, NULL, &code, NULL);
    expect_einval(z, 3, &s, NULL, "code");
    expect_einval(z, 0, &s, &code, "V");
    expect_einval(z, -5, &s, &code, "V");
    /* checks come before the numeric check: a bad T on all-NaN logits is EINVAL, not ENUMERIC */
    const float zn[2] = {NAN, NAN};
    s = (dd_sampling){-1.0f, 0};
    expect_einval(zn, 2, &s, &code, "temperature");
    assert_int_equal(code, 0x5EED);
}

static void test_reproducible(void **state) {
    (void)state;
    enum { V = 64, N = 4000 };
    float z[V];
    for (int i = 0; i < V; i++) z[i] = 0.0f; /* flat: every index equally likely, draws differ 63/64 of the time */
    int diff_frame = 0, diff_level = 0, diff_seed_hi = 0, diff_frame_hi = 0;
    for (int t = 0; t < N; t++) {
        uint64_t seed = rnd64(), frame = rnd64() >> 1;
        int level = rnd_below(31);
        int32_t c = sample(z, V, 1.0f, 0, seed, frame, level);
        assert_int_equal(sample(z, V, 1.0f, 0, seed, frame, level), c);
        assert_int_equal(dd_sample_core(z, V, 1.0f, 0, seed, frame, level), c);
        diff_frame += sample(z, V, 1.0f, 0, seed, frame + 1, level) != c;
        diff_level += sample(z, V, 1.0f, 0, seed, frame, level + 1) != c;
        diff_seed_hi += sample(z, V, 1.0f, 0, seed ^ (1ull << 40), frame, level) != c;
        diff_frame_hi += sample(z, V, 1.0f, 0, seed, frame ^ (1ull << 40), level) != c;
    }
    /* expected ~ N * 63/64 = 3937 each; 0.9 N is far below */
    assert_true(diff_frame > N * 9 / 10);
    assert_true(diff_level > N * 9 / 10);
    assert_true(diff_seed_hi > N * 9 / 10);
    assert_true(diff_frame_hi > N * 9 / 10);
}

static void test_vs_bruteforce(void **state) {
    (void)state;
    static const float Ts[] = {0.1f, 0.5f, 0.9f, 1.0f, 1.7f, 0.0f};
    float *z = malloc(2051 * sizeof *z);
    assert_non_null(z);
    int cases = 0, numeric = 0;
    for (int t = 0; t < 6000; t++) {
        int V = (t % 100 == 0) ? 2051 : (t % 10 == 0) ? 1 + rnd_below(512) : 1 + rnd_below(40);
        int style = rnd_below(4);
        for (int i = 0; i < V; i++) {
            if (style == 0) z[i] = rnd_normalish();
            else if (style == 1) z[i] = (float)rnd_below(4); /* heavy ties */
            else if (style == 2) z[i] = pick_tie_value();     /* ties, +-0, NaN, +-inf */
            else z[i] = rnd_below(8) == 0 ? NAN : rnd_normalish() * 3.0f;
        }
        int K;
        switch (rnd_below(4)) {
        case 0: K = 0; break;
        case 1: K = 1 + rnd_below(5); break;
        case 2: K = 1 + rnd_below(V + 3); break;
        default: K = 50; break;
        }
        float T = Ts[t % 6 == 5 ? 5 : rnd_below(5)];
        uint64_t seed = rnd64(), frame = (t & 1) ? rnd64() : (uint64_t)t;
        int level = rnd_below(32);
        int32_t want = ref_sample(z, V, T, K, seed, frame, level);
        dd_sampling s = {T, K};
        dd_error err;
        int32_t code = -99;
        dd_status st = dd_sample_logits(z, V, &s, seed, frame, level, &code, &err);
        if (want < 0) {
            assert_int_equal(st, DD_ENUMERIC);
            assert_int_equal(code, -99);
            numeric++;
        } else {
            if (st != DD_OK || code != want)
                fail_msg("case %d (V %d K %d T %g seed %llu frame %llu level %d): got %d (status %d), want %d", t,
                         V, K, (double)T, (unsigned long long)seed, (unsigned long long)frame, level, code, (int)st,
                         want);
        }
        cases++;
    }
    print_message("      %d random cases equal to the brute-force sampler (%d with no finite logit)\n", cases,
                  numeric);
    free(z);
}

static void test_distribution(void **state) {
    (void)state;
    const float z[3] = {0.0f, (float)log(2.0), (float)log(4.0)};
    enum { N = 20000 };
    int count[3] = {0};
    uint64_t base = rnd64();
    for (uint64_t t = 0; t < N; t++) count[sample(z, 3, 1.0f, 0, base + t, 0, 1)]++;
    const double want[3] = {1.0 / 7, 2.0 / 7, 4.0 / 7};
    for (int i = 0; i < 3; i++) {
        double f = (double)count[i] / N;
        if (fabs(f - want[i]) > 0.02) fail_msg("index %d: frequency %.4f, want %.4f +- 0.02", i, f, want[i]);
    }
}

int main(void) {
    th_seed_init("test_sample");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_philox_kat, th_reseed),
        cmocka_unit_test_setup(test_gumbel_formula, th_reseed),
        cmocka_unit_test_setup(test_order_key, th_reseed),
        cmocka_unit_test_setup(test_topk_threshold, th_reseed),
        cmocka_unit_test_setup(test_topk_ties_kept, th_reseed),
        cmocka_unit_test_setup(test_greedy, th_reseed),
        cmocka_unit_test_setup(test_nonfinite, th_reseed),
        cmocka_unit_test_setup(test_argument_checks, th_reseed),
        cmocka_unit_test_setup(test_reproducible, th_reseed),
        cmocka_unit_test_setup(test_vs_bruteforce, th_reseed),
        cmocka_unit_test_setup(test_distribution, th_reseed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
