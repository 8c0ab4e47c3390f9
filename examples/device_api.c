/* examples/device_api.c — depthdec's device-pointer API beside its host API, on the same inputs, as a program whose
 * backbone already runs on the GPU uses it:
 *   1. a cuda decoder of a small synthetic model (dd_model_synthetic "tiny-gpt", bf16);
 *   2. dd_decode (host arrays) and dd_decode_device (device arrays, enqueued on the program's own stream, no host
 *      synchronisation) on the same hidden states, seeds and frame indices: identical codes;
 *   3. dd_score_device against dd_score: identical logits;
 *   4. the device call captured in a CUDA graph (cudaStreamBeginCapture) and replayed: identical codes again;
 *   5. a non-finite hidden value: the device call returns DD_OK, the frame writes nothing, and dd_decoder_sync
 *      reports the error with the message dd_decode gives.
 * Prints what it checked and exits 0; 1 on a library or CUDA error or a mismatch; 2 when no CUDA device is present.
 * Built by `make CUDA=1` ($(BUILD)/examples/device_api) and run by tests/test_examples.c where a GPU is. */
#include "depthdec.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 4 }; /* streams */

static int fail(const char *what, const dd_error *e) {
    fprintf(stderr, "device_api: %s: %s: %s\n", what, dd_status_name(e->code), e->msg);
    return 1;
}
#define CUDA(call)                                                                                                 \
    do {                                                                                                           \
        cudaError_t ce_ = (call);                                                                                  \
        if (ce_ != cudaSuccess) {                                                                                  \
            fprintf(stderr, "device_api: %s: %s\n", #call, cudaGetErrorString(ce_));                               \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rnd(float a) { /* uniform in [-a, a), xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return a * ((float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

int main(void) {
    if (!dd_backend_available(DD_BACKEND_CUDA)) {
        printf("device_api: no CUDA device\n");
        return 2;
    }
    dd_error e;
    dd_model *m;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_BF16, 7, &e)) return fail("model", &e);
    const dd_config *c = dd_model_config(m);
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CUDA;
    p.max_batch = N;
    dd_decoder *d;
    if (dd_decoder_create(&d, m, &p, &e)) return fail("decoder", &e);

    /* inputs on the host, and the same on the device */
    const size_t hb = (size_t)N * I * sizeof(float), cb = (size_t)N * Q * sizeof(int32_t),
                 lb = (size_t)N * (Q - 1) * V * sizeof(float);
    float *h = malloc(hb), *lh = malloc(lb), *ld = malloc(lb);
    int32_t *codes_h = malloc(cb), *codes_d = malloc(cb);
    uint64_t seeds[N], frames[N];
    for (int i = 0; i < N * I; i++) h[i] = rnd(1.7f);
    for (int s = 0; s < N; s++) seeds[s] = 1000 + (uint64_t)s, frames[s] = 42;
    float *dh, *dl;
    int32_t *dcodes;
    uint64_t *dseeds, *dframes;
    CUDA(cudaMalloc((void **)&dh, hb));
    CUDA(cudaMalloc((void **)&dl, lb));
    CUDA(cudaMalloc((void **)&dcodes, cb));
    CUDA(cudaMalloc((void **)&dseeds, sizeof seeds));
    CUDA(cudaMalloc((void **)&dframes, sizeof frames));
    CUDA(cudaMemcpy(dh, h, hb, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(dseeds, seeds, sizeof seeds, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(dframes, frames, sizeof frames, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    dd_sampling s = dd_sampling_default();

    /* 2. one sampled frame (c0 from head0) through both APIs */
    if (dd_decode(d, N, h, NULL, seeds, frames, &s, codes_h, &e)) return fail("dd_decode", &e);
    if (dd_decode_device(d, N, dh, NULL, dseeds, dframes, &s, dcodes, stream, &e)) return fail("dd_decode_device", &e);
    if (dd_decoder_sync(d, &e)) return fail("dd_decoder_sync", &e);
    CUDA(cudaMemcpy(codes_d, dcodes, cb, cudaMemcpyDeviceToHost));
    for (int st = 0; st < N; st++) {
        printf("stream %d frame 42: host", st);
        for (int l = 0; l < Q; l++) printf(" %d", codes_h[st * Q + l]);
        printf(" | device");
        for (int l = 0; l < Q; l++) printf(" %d", codes_d[st * Q + l]);
        printf("\n");
    }
    int same = !memcmp(codes_h, codes_d, cb);
    printf("device codes = host codes: %s\n", same ? "ok" : "DIFFERENT");

    /* 3. teacher-forced logits of those codes */
    if (dd_score(d, N, h, codes_h, lh, NULL, &e)) return fail("dd_score", &e);
    if (dd_score_device(d, N, dh, dcodes, dl, NULL, stream, &e)) return fail("dd_score_device", &e);
    if (dd_decoder_sync(d, &e)) return fail("dd_decoder_sync", &e);
    CUDA(cudaMemcpy(ld, dl, lb, cudaMemcpyDeviceToHost));
    int same_l = !memcmp(lh, ld, lb);
    printf("device logits = host logits (bits): %s\n", same_l ? "ok" : "DIFFERENT");

    /* 4. the frame captured in a graph, replayed twice */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    dd_status st = dd_decode_device(d, N, dh, NULL, dseeds, dframes, &s, dcodes, stream, &e);
    CUDA(cudaStreamEndCapture(stream, &g));
    if (st) return fail("dd_decode_device (captured)", &e);
    CUDA(cudaGraphInstantiate(&ge, g, 0));
    int same_g = 1;
    for (int rep = 0; rep < 2; rep++) {
        CUDA(cudaMemsetAsync(dcodes, 0xFF, cb, stream));
        CUDA(cudaGraphLaunch(ge, stream));
        if (dd_decoder_sync(d, &e)) return fail("dd_decoder_sync", &e);
        CUDA(cudaMemcpy(codes_d, dcodes, cb, cudaMemcpyDeviceToHost));
        same_g &= !memcmp(codes_h, codes_d, cb);
    }
    printf("graph replays = host codes: %s\n", same_g ? "ok" : "DIFFERENT");

    /* 5. a NaN in row 2: found on the device, reported by the next synchronising call */
    h[2 * I + 5] = NAN;
    CUDA(cudaMemcpy(dh, h, hb, cudaMemcpyHostToDevice));
    CUDA(cudaMemset(dcodes, 0x5A, cb));
    if (dd_decode_device(d, N, dh, NULL, dseeds, dframes, &s, dcodes, stream, &e)) return fail("dd_decode_device", &e);
    st = dd_decoder_sync(d, &e);
    CUDA(cudaMemcpy(codes_d, dcodes, cb, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (int i = 0; i < N * Q; i++) untouched &= codes_d[i] == 0x5A5A5A5A;
    printf("NaN hidden: dd_decoder_sync: %s: %s; codes untouched: %s\n", dd_status_name(st), e.msg,
           untouched ? "ok" : "WRITTEN");
    int ok = same && same_l && same_g && untouched && st == DD_ENUMERIC && strstr(e.msg, "hidden row 2");

    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(stream);
    cudaFree(dh), cudaFree(dl), cudaFree(dcodes), cudaFree(dseeds), cudaFree(dframes);
    free(h), free(lh), free(ld), free(codes_h), free(codes_d);
    dd_decoder_free(d);
    dd_model_free(m);
    return ok ? 0 : 1;
}
