/* The backend interface: what a backend implements and what the decoder hands it. The decoder (decoder.c) has
 * already checked every argument (counts, finiteness of hidden, code ranges, temperature, top_k) before a backend
 * runs, so backends only compute. */
#ifndef DD_BACKEND_H
#define DD_BACKEND_H

#include "depthdec.h"
#include "model/model.h"

typedef struct dd_backend_vt {
    const char *name;
    /* Allocate d->impl for up to d->max_batch streams; everything the hot loop needs. */
    dd_status (*init)(dd_decoder *d, dd_error *err);
    void (*destroy)(dd_decoder *d);
    /* codes [n, Q] out (a decoder-owned buffer; copied to the caller only on success). c0 NULL = sample level 0
     * from head0. DD_ENUMERIC when a level has no finite logit. */
    dd_status (*decode)(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                        const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err);
    /* logits [n, Q-1, V] out; logits0 [n, V] out or NULL. */
    dd_status (*score)(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                       float *logits0, dd_error *err);
    /* Device pointers on the caller's stream (dd_decode_device / dd_score_device / dd_decoder_sync); NULL on
     * backends that compute on the host. The decoder has checked n, the sampling parameters, NULLs and head0;
     * the backend checks where the pointers live and detects the data errors on the device. */
    dd_status (*decode_device)(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                               const uint64_t *frames, const dd_sampling *s, int32_t *codes, void *stream,
                               dd_error *err);
    dd_status (*score_device)(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                              float *logits0, void *stream, dd_error *err);
    dd_status (*sync)(dd_decoder *d, dd_error *err);
} dd_backend_vt;

/* The messages of the data checks (decoder.c), shared with the cuda backend, which finds the same errors on the
 * device and reports them at the next synchronising call: "hidden row 2, element 7: non-finite value nan";
 * "c0 row 1: code 99 outside [0, 16)" (per_row 1) or "codes row 1, level 3: code -1 outside [0, 16)". */
dd_status dd_fail_hidden(dd_error *err, int row, int elem, float v);
dd_status dd_fail_code(dd_error *err, const char *what, int row, int level, int per_row, int32_t v, int V);

struct dd_decoder {
    const dd_model *m;
    dd_backend backend;
    int max_batch;
    int threads;
    const dd_backend_vt *vt;
    void *impl;
    int32_t *codes_tmp; /* [max_batch, Q] */
    /* The current call's text tokens [n] (models with text_vocab > 0, checked in range), else NULL: set by
     * dd_decode_text / dd_score_text for the duration of the backend's decode or score call (a per-call input
     * beside the vtable's arguments, so backends that do not run such models need no change). */
    const int32_t *text;
};

/* The backends themselves (which exist, their vtables, probes and hooks) are rows of registry.h. */

#endif
