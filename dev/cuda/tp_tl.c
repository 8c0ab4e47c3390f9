/* The throughput executor's real kernel timeline (dev only; links a library built with dev/cuda/tput_tl.patch):
 * each launch of one frame with its first block's start, its griddepcontrol.wait's end in that block, and its last
 * block's end (globaltimer ns), in launch order, as CSV on stdout for dev/cuda/tp_tl_report.py.
 *   build-cuda/tp_tl gpt bf16 256 [warm frames, default 3]
 * The frame is the graph replay of a request seen twice before (as a server runs it). */
#include "depthdec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dd_cuda_test_crossover(dd_decoder *d, int nmax);
int dd_cuda_test_tput(dd_decoder *d, int nmin);
int dd_cuda_tp_tl_reset(void);
int dd_cuda_tp_tl_read(int *kind, unsigned long long *t3, int max);

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tp_tl MODEL WEIGHTS BATCH [WARM]\n");
        return 2;
    }
    const dd_dtype all[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    int k = 0;
    while (k < 5 && strcmp(argv[2], dd_dtype_name(all[k]))) k++;
    if (k == 5) {
        fprintf(stderr, "tp_tl: unknown weight type %s\n", argv[2]);
        return 2;
    }
    const int B = atoi(argv[3]), warm = argc > 4 ? atoi(argv[4]) : 3;
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, argv[1], all[k], 1, &e)) {
        fprintf(stderr, "tp_tl: %s\n", e.msg);
        return 1;
    }
    const dd_config *c = dd_model_config(m);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CUDA;
    p.max_batch = B;
    dd_decoder *d;
    if (B < 1 || dd_decoder_create(&d, m, &p, &e)) {
        fprintf(stderr, "tp_tl: %s\n", B < 1 ? "batch < 1" : e.msg);
        return 1;
    }
    dd_cuda_test_crossover(d, 0);
    if (!dd_cuda_test_tput(d, 1)) {
        fprintf(stderr, "tp_tl: no throughput executor on this device\n");
        return 1;
    }
    const int I = c->input_dim, Q = c->levels, V = c->codebook_size;
    float *h = malloc((size_t)B * I * 4);
    int32_t *c0 = malloc((size_t)B * 4), *codes = malloc((size_t)B * Q * 4);
    uint64_t *seeds = malloc((size_t)B * 8), *fr = malloc((size_t)B * 8);
    for (size_t i = 0; i < (size_t)B * I; i++) h[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
    for (int i = 0; i < B; i++) c0[i] = (int32_t)(rnd() % (uint64_t)V), seeds[i] = rnd(), fr[i] = i;
    dd_sampling s = dd_sampling_default();
    for (int f = 0; f <= warm; f++) {
        if (f == warm && dd_cuda_tp_tl_reset()) {
            fprintf(stderr, "tp_tl: reset failed\n");
            return 1;
        }
        if (dd_decode(d, B, h, c0, seeds, fr, &s, codes, &e)) {
            fprintf(stderr, "tp_tl: %s\n", e.msg);
            return 1;
        }
    }
    enum { MAXL = 20480 };
    int *kind = malloc(MAXL * sizeof *kind);
    unsigned long long *t3 = malloc((size_t)3 * MAXL * sizeof *t3);
    const int n = dd_cuda_tp_tl_read(kind, t3, MAXL);
    if (n < 0) {
        fprintf(stderr, "tp_tl: read failed\n");
        return 1;
    }
    static const char *names[] = {"tp_split", "tp_linear", "tp_epi", "tp_attend", "tp_sample"};
    printf("i,kernel,start_ns,wait_ns,end_ns\n");
    for (int i = 0; i < n; i++)
        printf("%d,%s,%llu,%llu,%llu\n", i, names[kind[i]], t3[3 * i], t3[3 * i + 1], t3[3 * i + 2]);
    fprintf(stderr, "tp_tl: %s %s B%d: %d launches\n", argv[1], argv[2], B, n);
    dd_decoder_free(d);
    dd_model_free(m);
    free(h), free(c0), free(codes), free(seeds), free(fr), free(kind), free(t3);
    return 0;
}
