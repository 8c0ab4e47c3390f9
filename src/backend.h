/* The backend interface: what a backend implements and what the decoder hands it. The decoder (decoder.c) has
 * already checked every argument (counts, finiteness of hidden, code ranges, temperature, top_k) before a backend
 * runs, so backends only compute. */
#ifndef DD_BACKEND_H
#define DD_BACKEND_H

#include "depthdec.h"
#include "model.h"

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
} dd_backend_vt;

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
