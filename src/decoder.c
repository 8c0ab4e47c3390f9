/* dd_decoder: backend choice (the registry's row, registry.h), the argument checks of SPEC §3 point 6 (before any
 * work), and the guarantee that nothing is written to the caller's outputs on error. */
#include "registry.h"
#include "sample.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

dd_decoder_params dd_decoder_default_params(void) {
    return (dd_decoder_params){.backend = DD_BACKEND_AUTO, .max_batch = 64, .threads = 0};
}

dd_sampling dd_sampling_default(void) { return (dd_sampling){.temperature = 0.9f, .top_k = 50}; }

/* a decoder of m on the backend of `row` */
static dd_status create_on(const dd_backend_row *row, const dd_model *m, const dd_decoder_params *dp, dd_decoder **out,
                           dd_error *err) {
    dd_decoder *d = calloc(1, sizeof *d);
    if (!d) return dd_fail(err, DD_ENOMEM, "decoder: out of memory");
    d->m = m;
    d->backend = row->info.id;
    d->max_batch = dp->max_batch;
    d->threads = dp->threads;
    d->vt = row->vt;
    d->codes_tmp = malloc((size_t)dp->max_batch * m->cfg.levels * sizeof(int32_t));
    dd_status s = d->codes_tmp ? d->vt->init(d, err) : dd_fail(err, DD_ENOMEM, "decoder: out of memory");
    if (s) {
        dd_decoder_free(d);
        return s;
    }
    *out = d;
    return DD_OK;
}

dd_status dd_decoder_create(dd_decoder **out, const dd_model *m, const dd_decoder_params *p, dd_error *err) {
    dd_error_clear(err);
    if (!out) return dd_fail(err, DD_EINVAL, "dd_decoder_create: out is NULL");
    *out = NULL;
    if (!m) return dd_fail(err, DD_EINVAL, "dd_decoder_create: model is NULL");
    dd_decoder_params dp = p ? *p : dd_decoder_default_params();
    if (dp.max_batch < 1 || dp.max_batch > DD_MAX_BATCH)
        return dd_fail(err, DD_EINVAL, "max_batch %d outside [1, %d]", dp.max_batch, DD_MAX_BATCH);
    if (dp.threads < 0 || dp.threads > 1024) return dd_fail(err, DD_EINVAL, "threads %d outside [0, 1024]", dp.threads);
    if (dp.backend != DD_BACKEND_AUTO) {
        const dd_backend_row *row;
        dd_status ps = dd_registry_pick(dp.backend, &row, err);
        return ps ? ps : create_on(row, m, &dp, out, err);
    }
    /* auto: the fastest usable backend that runs this model; one whose init says DD_EUNSUPPORTED (cuda for Qwen3's
     * q/k norms, or for more than 64 levels) hands the model to the next one down (ref runs every model) */
    dd_status s = dd_fail(err, DD_EUNSUPPORTED, "backend auto: no backend can run here");
    for (int i = dd_registry_count - 1; i >= 0 && s == DD_EUNSUPPORTED; i--)
        if (dd_registry_usable(&dd_registry[i])) s = create_on(&dd_registry[i], m, &dp, out, err);
    if (!s) dd_error_clear(err);
    return s;
}

void dd_decoder_free(dd_decoder *d) {
    if (!d) return;
    if (d->vt) d->vt->destroy(d);
    free(d->codes_tmp);
    free(d);
}

dd_backend dd_decoder_backend(const dd_decoder *d) { return d->backend; }
int dd_decoder_max_batch(const dd_decoder *d) { return d->max_batch; }

/* Checks shared by decode and score: batch size and hidden finiteness. */
static dd_status check_batch(const dd_decoder *d, int n, dd_error *err) {
    if (n < 1 || n > d->max_batch)
        return dd_fail(err, DD_EINVAL, "batch of %d rows outside [1, max_batch %d]", n, d->max_batch);
    return DD_OK;
}

static dd_status check_rows(const dd_decoder *d, int n, const float *hidden, dd_error *err) {
    dd_status st = check_batch(d, n, err);
    if (st) return st;
    if (!hidden) return dd_fail(err, DD_EINVAL, "hidden is NULL");
    int I = d->m->cfg.input_dim;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < I; i++)
            if (!isfinite(hidden[(size_t)r * I + i])) return dd_fail_hidden(err, r, i, hidden[(size_t)r * I + i]);
    return DD_OK;
}

dd_status dd_fail_hidden(dd_error *err, int row, int elem, float v) {
    return dd_fail(err, DD_ENUMERIC, "hidden row %d, element %d: non-finite value %g", row, elem, (double)v);
}

dd_status dd_fail_code(dd_error *err, const char *what, int row, int level, int per_row, int32_t v, int V) {
    if (per_row == 1) return dd_fail(err, DD_EINVAL, "%s row %d: code %d outside [0, %d)", what, row, (int)v, V);
    return dd_fail(err, DD_EINVAL, "%s row %d, level %d: code %d outside [0, %d)", what, row, level, (int)v, V);
}

/* Input codes are in [0, V); Moshi's tables have a pad/initial row V, a valid input: [0, V]. */
static dd_status check_codes(const dd_decoder *d, const char *what, const int32_t *c, int n, int per_row,
                             dd_error *err) {
    int V = d->m->embed_rows;
    for (int r = 0; r < n; r++)
        for (int l = 0; l < per_row; l++) {
            int32_t v = c[(size_t)r * per_row + l];
            if (v < 0 || v >= V) return dd_fail_code(err, what, r, l, per_row, v, V);
        }
    return DD_OK;
}

static dd_status check_sampling(const dd_sampling *s, dd_sampling *out, dd_error *err) {
    *out = s ? *s : dd_sampling_default();
    if (!isfinite(out->temperature) || out->temperature < 0)
        return dd_fail(err, DD_EINVAL, "temperature %g: must be finite and >= 0", (double)out->temperature);
    if (out->top_k < 0) return dd_fail(err, DD_EINVAL, "top_k %d: must be >= 0", out->top_k);
    return DD_OK;
}

/* The text tokens: required (and in [0, text_vocab]) exactly when the model takes them. */
static dd_status check_text(const dd_decoder *d, int n, const int32_t *text, dd_error *err) {
    const dd_config *c = &d->m->cfg;
    if (!c->text_vocab)
        return text ? dd_fail(err, DD_EINVAL, "%s: the model takes no text tokens (text given)", d->m->source) : DD_OK;
    if (!text)
        return dd_fail(err, DD_EINVAL, "%s: text tokens required: the model (Moshi's depformer) conditions each frame "
                       "on its text token", d->m->source);
    for (int r = 0; r < n; r++)
        if (text[r] < 0 || text[r] > c->text_vocab)
            return dd_fail(err, DD_EINVAL, "text row %d: token %d outside [0, %d]", r, (int)text[r], c->text_vocab);
    return DD_OK;
}

dd_status dd_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                    const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err) {
    return dd_decode_text(d, n, hidden, NULL, c0, seeds, frames, s, codes, err);
}

dd_status dd_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits, float *logits0,
                   dd_error *err) {
    return dd_score_text(d, n, hidden, NULL, codes, logits, logits0, err);
}

dd_status dd_decode_text(dd_decoder *d, int n, const float *hidden, const int32_t *text, const int32_t *c0,
                         const uint64_t *seeds, const uint64_t *frames, const dd_sampling *s, int32_t *codes,
                         dd_error *err) {
    dd_error_clear(err);
    if (!d) return dd_fail(err, DD_EINVAL, "dd_decode: decoder is NULL");
    if (!codes) return dd_fail(err, DD_EINVAL, "dd_decode: codes is NULL");
    dd_sampling sp;
    dd_status st = check_sampling(s, &sp, err);
    if (st) return st;
    st = check_rows(d, n, hidden, err);
    if (st) return st;
    if (c0 && (st = check_codes(d, "c0", c0, n, 1, err))) return st;
    if (!c0 && !d->m->cfg.has_head0)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: c0 must be given", d->m->source);
    if ((st = check_text(d, n, text, err))) return st;
    d->text = text;
    st = d->vt->decode(d, n, hidden, c0, seeds, frames, &sp, d->codes_tmp, err);
    d->text = NULL;
    if (st) return st;
    memcpy(codes, d->codes_tmp, (size_t)n * d->m->cfg.levels * sizeof(int32_t));
    return DD_OK;
}

dd_status dd_score_text(dd_decoder *d, int n, const float *hidden, const int32_t *text, const int32_t *codes,
                        float *logits, float *logits0, dd_error *err) {
    dd_error_clear(err);
    if (!d) return dd_fail(err, DD_EINVAL, "dd_score: decoder is NULL");
    if (!codes || !logits) return dd_fail(err, DD_EINVAL, "dd_score: codes or logits is NULL");
    dd_status st = check_rows(d, n, hidden, err);
    if (st) return st;
    if ((st = check_codes(d, "codes", codes, n, d->m->cfg.levels, err))) return st;
    if (logits0 && !d->m->cfg.has_head0)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: level-0 logits unavailable", d->m->source);
    if ((st = check_text(d, n, text, err))) return st;
    d->text = text;
    st = d->vt->score(d, n, hidden, codes, logits, logits0, err);
    d->text = NULL;
    return st;
}

/* ---- device pointers on the caller's stream: the host-checkable arguments here, the rest in the backend ---- */

static dd_status device_api(const dd_decoder *d, const char *fn, dd_error *err) {
    if (!d) return dd_fail(err, DD_EINVAL, "%s: decoder is NULL", fn);
    if (!d->vt->decode_device)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: backend %s computes on the host: device pointers need a cuda decoder",
                       fn, d->vt->name);
    if (d->m->cfg.text_vocab) /* the device calls have no text argument */
        return dd_fail(err, DD_EUNSUPPORTED, "%s: %s takes a text token per stream (Moshi's depformer), which the device "
                       "API cannot pass: use dd_decode_text / dd_score_text", fn, d->m->source);
    return DD_OK;
}

dd_status dd_decode_device(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                           const uint64_t *frames, const dd_sampling *s, int32_t *codes, void *stream,
                           dd_error *err) {
    dd_error_clear(err);
    dd_status st = device_api(d, "dd_decode_device", err);
    if (st) return st;
    if (!hidden) return dd_fail(err, DD_EINVAL, "dd_decode_device: hidden is NULL");
    if (!codes) return dd_fail(err, DD_EINVAL, "dd_decode_device: codes is NULL");
    dd_sampling sp;
    if ((st = check_sampling(s, &sp, err)) || (st = check_batch(d, n, err))) return st;
    if (!c0 && !d->m->cfg.has_head0)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: c0 must be given", d->m->source);
    return d->vt->decode_device(d, n, hidden, c0, seeds, frames, &sp, codes, stream, err);
}

dd_status dd_score_device(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                          float *logits0, void *stream, dd_error *err) {
    dd_error_clear(err);
    dd_status st = device_api(d, "dd_score_device", err);
    if (st) return st;
    if (!hidden) return dd_fail(err, DD_EINVAL, "dd_score_device: hidden is NULL");
    if (!codes || !logits) return dd_fail(err, DD_EINVAL, "dd_score_device: codes or logits is NULL");
    if ((st = check_batch(d, n, err))) return st;
    if (logits0 && !d->m->cfg.has_head0)
        return dd_fail(err, DD_EUNSUPPORTED, "%s: no head0 in the model: level-0 logits unavailable", d->m->source);
    return d->vt->score_device(d, n, hidden, codes, logits, logits0, stream, err);
}

dd_status dd_decoder_sync(dd_decoder *d, dd_error *err) {
    dd_error_clear(err);
    if (!d) return dd_fail(err, DD_EINVAL, "dd_decoder_sync: decoder is NULL");
    return d->vt->sync ? d->vt->sync(d, err) : DD_OK;
}
