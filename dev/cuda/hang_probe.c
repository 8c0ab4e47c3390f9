/* Lab: one request of one model on one cuda executor, for finding which executor and request kind stalls
 * (2026-12-04: test_fixtures' Kyutai MLX fixtures never finished on cuda). Run each case as its own process under
 * `timeout`: a kernel that never ends cannot be interrupted from inside.
 *   cc -O2 -Iinclude dev/cuda/hang_probe.c build-cuda/libdepthdec.a -L/usr/local/cuda/lib64 -lcudart -lstdc++ \
 *       -ljansson -lm -lpthread -o build-cuda/hang_probe
 *   build-cuda/hang_probe MODEL lat|frame|tput score|greedy|greedy_c0|sample N */
#include "depthdec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dd_cuda_test_crossover(dd_decoder *d, int nmax);
int dd_cuda_test_tput(dd_decoder *d, int nmin);

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: hang_probe MODEL lat|frame|tput score|greedy|greedy_c0|sample N\n");
        return 2;
    }
    const char *ex = argv[2], *op = argv[3];
    const int n = atoi(argv[4]);
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, argv[1], &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    const dd_config *c = dd_model_config(m);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CUDA;
    p.max_batch = n;
    dd_decoder *d;
    if (dd_decoder_create(&d, m, &p, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    dd_cuda_test_crossover(d, !strcmp(ex, "lat") ? n : 0);
    dd_cuda_test_tput(d, !strcmp(ex, "tput") ? 1 : 0);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    float *h = malloc((size_t)n * I * 4), *lg = malloc((size_t)n * Q * V * 4), *l0 = malloc((size_t)n * V * 4);
    int32_t *codes = malloc((size_t)n * Q * 4), *text = malloc((size_t)n * 4), *c0 = malloc((size_t)n * 4);
    for (int i = 0; i < n * I; i++) h[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int i = 0; i < n * Q; i++) codes[i] = (i * 13) % V;
    for (int i = 0; i < n; i++) text[i] = i % (c->text_vocab ? c->text_vocab : 1), c0[i] = codes[i * Q];
    const int32_t *tx = c->per_position ? text : NULL;
    dd_sampling g = {0.0f, 0}, sd = dd_sampling_default();
    dd_status s;
    if (!strcmp(op, "score")) s = dd_score_text(d, n, h, tx, codes, lg, c->has_head0 ? l0 : NULL, &e);
    else if (!strcmp(op, "greedy")) s = dd_decode_text(d, n, h, tx, c->has_head0 ? NULL : c0, NULL, NULL, &g, codes, &e);
    else if (!strcmp(op, "greedy_c0")) s = dd_decode_text(d, n, h, tx, c0, NULL, NULL, &g, codes, &e);
    else s = dd_decode_text(d, n, h, tx, c->has_head0 ? NULL : c0, NULL, NULL, &sd, codes, &e);
    printf("%s %s %s n=%d: %s%s\n", argv[1], ex, op, n, s ? "error: " : "ok", s ? e.msg : "");
    dd_decoder_free(d);
    dd_model_free(m);
    free(h), free(lg), free(l0), free(codes), free(text), free(c0);
    return s != 0;
}
