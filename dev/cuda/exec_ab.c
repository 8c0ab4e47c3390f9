/* Lab: the cuda backend's executors side by side at each batch, in one process (issue 14's crossover and curve).
 * For a synthetic model and weight type, one decoder (max_batch 512); per batch B, each executor that can take it —
 * the latency executor (lat, in groups of <= 8 up to 48 streams), the throughput executor (tput) and the frame
 * kernel (frame, at a few batches only: it is slow) — decodes `frames` frames (c0 given, T 0.9, top-k 50, the
 * bench's request) after EXEC_AB_WARM (default 2) warm-up frames (the throughput executor captures its graph at
 * the second); prints one JSON line per (B, executor) with the median ms per frame and
 * whether its codes equal the first executor's at that batch (they must: the numerics contract).
 * Uses the test hooks dd_cuda_test_crossover / dd_cuda_test_tput (src/cuda/backend.cu), so it links the static
 * library:
 *   cc -O2 -Iinclude dev/cuda/exec_ab.c build-cuda/libdepthdec.a -L/usr/local/cuda/lib64 -lcudart -lstdc++ \
 *       -ljansson -lm -lpthread -o build-cuda/exec_ab
 *   build-cuda/exec_ab gpt bf16 [frames] [B ...] */
#include "depthdec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dd_cuda_test_crossover(dd_decoder *d, int nmax);
int dd_cuda_test_tput(dd_decoder *d, int nmin);

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "gpt";
    dd_dtype wt = DD_BF16;
    if (argc > 2) {
        const dd_dtype all[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
        int k = 0;
        while (k < 5 && strcmp(argv[2], dd_dtype_name(all[k]))) k++;
        if (k == 5) {
            fprintf(stderr, "exec_ab: unknown weight type %s\n", argv[2]);
            return 2;
        }
        wt = all[k];
    }
    const int frames = argc > 3 ? atoi(argv[3]) : 10;
    const int warm = getenv("EXEC_AB_WARM") ? atoi(getenv("EXEC_AB_WARM")) : 2; /* frames before the timed ones */
    int bs[32], nb = 0;
    for (int i = 4; i < argc && nb < 32; i++) bs[nb++] = atoi(argv[i]);
    if (!nb) {
        const int def[] = {1, 8, 9, 16, 24, 32, 48, 64, 128, 256, 512};
        for (int i = 0; i < (int)(sizeof def / sizeof *def); i++) bs[nb++] = def[i];
    }
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, wt, 1, &e)) {
        fprintf(stderr, "exec_ab: %s\n", e.msg);
        return 1;
    }
    const dd_config *c = dd_model_config(m);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CUDA;
    p.max_batch = 512;
    dd_decoder *d;
    if (dd_decoder_create(&d, m, &p, &e)) {
        fprintf(stderr, "exec_ab: %s\n", e.msg);
        return 1;
    }
    const int I = c->input_dim, Q = c->levels, V = c->codebook_size, NMAX = 512;
    float *h = malloc((size_t)NMAX * I * 4);
    int32_t *c0 = malloc(NMAX * 4), *codes = malloc((size_t)NMAX * Q * 4), *ref = malloc((size_t)NMAX * Q * 4);
    uint64_t *seeds = malloc(NMAX * 8), *fr = malloc(NMAX * 8);
    for (size_t i = 0; i < (size_t)NMAX * I; i++) h[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
    for (int i = 0; i < NMAX; i++) c0[i] = (int32_t)(rnd() % (uint64_t)V), seeds[i] = rnd(), fr[i] = i;
    dd_sampling s = dd_sampling_default();
    double *t = malloc(sizeof(double) * (frames > 0 ? frames : 1));
    const char *names[3] = {"lat", "tput", "frame"};
    for (int bi = 0; bi < nb; bi++) {
        const int B = bs[bi];
        if (B < 1 || B > NMAX) continue;
        int have_ref = 0;
        for (int x = 0; x < 3; x++) {
            if (x == 0 && B > 48) continue;
            if (x == 2 && (getenv("EXEC_AB_NOFRAME") || (B != 16 && B != 64 && B != 256))) continue;
            if (x == 0 && getenv("EXEC_AB_NOLAT")) continue;
            dd_cuda_test_crossover(d, x == 0 ? 48 : 0);
            if (!dd_cuda_test_tput(d, x == 1 ? 1 : 0) && x == 1) continue;
            int bad = 0;
            for (int f = -warm; f < frames; f++) {
                const double t0 = now_ms();
                if (dd_decode(d, B, h, c0, seeds, fr, &s, codes, &e)) {
                    fprintf(stderr, "exec_ab: %s B %d: %s\n", names[x], B, e.msg);
                    return 1;
                }
                if (f >= 0) t[f] = now_ms() - t0;
            }
            if (!have_ref) memcpy(ref, codes, (size_t)B * Q * 4), have_ref = 1;
            else bad = memcmp(ref, codes, (size_t)B * Q * 4) != 0;
            qsort(t, frames, sizeof *t, cmp_d);
            uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a of the last frame's codes: equal across processes */
            for (size_t i = 0; i < (size_t)B * Q; i++) hash = (hash ^ (uint32_t)codes[i]) * 0x100000001b3ull;
            printf("{\"model\": \"%s\", \"weights\": \"%s\", \"batch\": %d, \"executor\": \"%s\", \"ms_per_frame\": "
                   "%.3f, \"min_ms\": %.3f, \"stream_frames_per_s\": %.0f, \"codes_equal_first\": %s, "
                   "\"codes_hash\": \"%016llx\"}\n",
                   kind, dd_dtype_name(wt), B, names[x], t[frames / 2], t[0], B * 1000.0 / t[frames / 2],
                   bad ? "false" : "true", (unsigned long long)hash);
            fflush(stdout);
        }
    }
    dd_decoder_free(d);
    dd_model_free(m);
    free(h), free(c0), free(codes), free(ref), free(seeds), free(fr), free(t);
    return 0;
}
