/* Host emulation of cu_sample_block's group-maximum keep set (src/cuda/cu_sample.cuh: cu_samp_candidates and the
 * ranks after it), serial, against dd_sample_core on random rows (the modes of tests/test_cuda.c's test_sample, and
 * i.i.d. / peaked rows); prints how often the candidates overflow CU_SAMP_CAP (the radix fallback) and their count.
 *   cc -O2 -Isrc -Iinclude dev/cuda/samp/gmax_check.c src/sample.c src/util.c -lm -o /tmp/gmax && /tmp/gmax */
#include "sample.h"
#include "sample_math.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GMAX 96
#define CAP 256

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd64(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float rnd_u(void) { return (float)(rnd64() >> 40) * 0x1p-24f; }
static int rnd_below(int n) { return (int)(rnd64() % (uint64_t)n); }
static float rnd_n(void) { return sqrtf(-2.0f * logf(rnd_u() + 1e-12f)) * cosf(6.2831853f * rnd_u()); }

/* -2: not applicable (the radix path), -3: overflow (the radix path); else the code */
static int gmax_sample(const float *z, int V, float T, int K, uint64_t seed, uint64_t frame, int level, int *nc) {
    int G = (V + 31) >> 5;
    if (!(T != 0.0f && K > 0 && K < V && K <= G && G <= GMAX)) return -2;
    uint32_t gm[GMAX], key[CAP];
    int idx[CAP], anyf = 0;
    for (int g = 0; g < G; g++) {
        uint32_t m = 0;
        for (int l = 0; l < 32; l++) {
            int i = 32 * g + l;
            float zi = i < V ? z[i] : -INFINITY;
            anyf |= isfinite(zi) ? 1 : 0;
            uint32_t k = dd_order_key(zi);
            if (k > m) m = k;
        }
        gm[g] = m;
    }
    if (!anyf) return -1;
    uint32_t L = 0;
    for (int a = 0; a < G; a++) {
        int c = 0;
        for (int j = 0; j < G; j++) c += gm[j] >= gm[a];
        if (c >= K && gm[a] > L) L = gm[a];
    }
    int C = 0;
    for (int i = 0; i < V; i++) {
        uint32_t k = dd_order_key(z[i]);
        if (k >= L) {
            if (C < CAP) key[C] = k, idx[C] = i;
            C++;
        }
    }
    *nc = C;
    if (C > CAP) return -3;
    float invT = dd_inv_temperature(T), bs = -INFINITY;
    int bi = -1;
    for (int t = C - 1; t >= 0; t--) { /* any order: the rule is order-free */
        int gt = 0;
        for (int j = 0; j < C; j++) gt += key[j] > key[t];
        int i = idx[t];
        if (gt >= K || dd_logit_dead(z[i])) continue;
        uint32_t x[4];
        dd_noise_words(seed, frame, level, (uint32_t)(i >> 2), x);
        float s = dd_sample_score(z[i], invT, dd_gumbel_word(x[i & 3]));
        if (dd_sample_better(s, i, bs, bi)) bs = s, bi = i;
    }
    return bi;
}

int main(void) {
    static const int Vs[] = {64, 257, 2048, 2051, 3000, 5000};
    static const float Ts[] = {0.9f, 1.0f, 0.5f, 1.7f, 1e-30f, 3.0f};
    long rows = 0, fast = 0, over = 0, sumc = 0, bad = 0, iid = 0, iidover = 0, iidc = 0;
    float *z = malloc(5000 * sizeof(float));
    for (int r = 0; r < 200000; r++) {
        int V = Vs[rnd_below(6)];
        float T = Ts[rnd_below(6)];
        int Kk[] = {1, 2, 50, 50, 64, V - 1};
        int K = Kk[rnd_below(6)];
        int mode = rnd_below(9);
        float sc = 0.5f + 8.0f * rnd_u();
        for (int i = 0; i < V; i++) {
            float v = (2.0f * rnd_u() - 1.0f) * 4.0f;
            if (mode == 1) v = (float)rnd_below(5);
            if (mode == 2 && rnd_below(4) == 0) v = NAN;
            if (mode == 3 && rnd_below(8) == 0) v = rnd_below(2) ? INFINITY : -INFINITY;
            if (mode == 4) v = rnd_below(3) ? -INFINITY : (rnd_below(2) ? NAN : v);
            if (mode == 5 && rnd_below(3) == 0) v = 0.0f * (rnd_below(2) ? 1 : -1);
            if (mode == 6) v = sc * rnd_n();                          /* i.i.d. normal */
            if (mode == 7) v = sc * rnd_n() - (float)i * 1e-3f * sc;  /* a trend over the index */
            if (mode == 8) v = i < 40 ? 10.0f + rnd_n() : rnd_n();    /* peaked: a few large */
            z[i] = v;
        }
        uint64_t seed = rnd64(), frame = rnd64() % 1000;
        int level = rnd_below(32), nc = 0;
        int got = gmax_sample(z, V, T, K, seed, frame, level, &nc);
        rows++;
        if (got == -2) continue;
        if (mode == 6 && V >= 2048 && K == 50) iid++, iidc += nc, iidover += got == -3;
        if (got == -3) {
            over++;
            continue;
        }
        fast++;
        sumc += nc;
        int want = dd_sample_core(z, V, T, K, seed, frame, level);
        if (got != want) {
            if (bad < 10) printf("MISMATCH V %d T %g K %d mode %d: got %d want %d\n", V, (double)T, K, mode, got, want);
            bad++;
        }
    }
    printf("rows %ld: group-max path %ld (mean %.1f candidates), overflow %ld, mismatches %ld\n", rows, fast,
           fast ? (double)sumc / fast : 0.0, over, bad);
    printf("i.i.d. normal V >= 2048 K 50: %ld rows, mean %.1f candidates, overflow %ld\n", iid,
           iid ? (double)iidc / iid : 0.0, iidover);
    free(z);
    return bad != 0;
}
