/* The device API of the cuda backend: dd_decode_device / dd_score_device / dd_decoder_sync (docs/device_api.md).
 *
 * A frame on the caller's stream is four enqueued operations, none of which synchronises with the host, allocates
 * or copies between host and device, so the whole frame can be captured in a CUDA graph:
 *   1. memset of this frame's input-error key (cu_devstat.key = ~0)
 *   2. dv_stage: the caller's device arrays into the decoder's packed input block st->d_in (the layout the
 *      programs were built against: hidden | seeds | frames | c0 | codes_in), checking what dd_decode/dd_score
 *      check on the host: hidden finite, codes in [0, V). A bad code is staged as 0 so that no gather reads
 *      outside the table; the first bad element (in the host checks' order) goes to the key.
 *   3. the frame itself (cu_launch_frame: the latency executor or the frame kernel, the host path's launch)
 *   4. dv_finish: when the key or the frame's error words say the frame failed, it records the first failure
 *      since the last synchronising call in cu_devstat (sticky) and writes nothing; else it copies the codes
 *      (or logits) to the caller's arrays.
 * The synchronising calls (dd_decoder_sync, and dd_decode/dd_score once a device call was made) wait for the
 * device, read cu_devstat and turn a recorded failure into the message the host path gives. */
#include "cu_state.cuh"

#include <stdint.h>
#include <string.h>

/* kinds of input error (key >> 48), in the order the host path checks them: the smaller key is reported */
enum { DV_HIDDEN = 1, DV_C0 = 2, DV_CODES = 3 };
#define DV_NONE (~0ull)
#define DV_INDEX(key) ((size_t)((key) & ((1ull << 48) - 1)))

struct cu_devstat {
    unsigned long long key; /* this frame: min over bad inputs of (kind << 48 | flat index), DV_NONE when none */
    unsigned long long skey; /* the first failed frame since the last synchronising call: its key, */
    int set;                 /* whether there is one, */
    int e0, e1;              /* its frame error words (CU_ERR_CLEAR: none), */
    int val;                 /* and its bad input value (float bits for hidden, else the code) */
};

/* hidden (n I floats) -> in[0 ..); seeds, frames (n u64, NULL: 0) -> in + off_seeds / off_frames; codes (nc int32,
 * per_row per row; kind DV_C0 or DV_CODES) -> in + off_codes, out-of-range codes staged as 0. Grid-stride. */
__global__ void dv_stage(uint8_t *in, size_t off_seeds, size_t off_frames, size_t off_codes, const float *hidden,
                         size_t nh, const uint64_t *seeds, const uint64_t *frames, int n, const int32_t *codes,
                         size_t nc, int kind, int V, unsigned long long *key) {
    const size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    float *h = (float *)in;
    for (size_t i = t0; i < nh; i += step) {
        const float x = hidden[i];
        h[i] = x;
        if (!isfinite(x)) atomicMin(key, (unsigned long long)DV_HIDDEN << 48 | i);
    }
    uint64_t *s = (uint64_t *)(in + off_seeds), *f = (uint64_t *)(in + off_frames);
    for (size_t i = t0; i < (size_t)n; i += step) {
        s[i] = seeds ? seeds[i] : 0;
        f[i] = frames ? frames[i] : 0;
    }
    int32_t *c = (int32_t *)(in + off_codes);
    for (size_t i = t0; i < nc; i += step) {
        int32_t v = codes[i];
        if (v < 0 || v >= V) {
            atomicMin(key, (unsigned long long)kind << 48 | i);
            v = 0;
        }
        c[i] = v;
    }
}

/* After the frame: on failure record it (first one wins) and copy nothing; else src -> dst (cnt words) and
 * src2 -> dst2 (cnt2). hidden_in: the staged hidden (the bad value), codes: the caller's codes (likewise). */
__global__ void dv_finish(cu_devstat *ds, const int *ferr, const float *hidden_in, const int32_t *codes,
                          const int *src, int *dst, size_t cnt, const int *src2, int *dst2, size_t cnt2) {
    const unsigned long long key = ds->key;
    const int e0 = ferr[0], e1 = ferr[1];
    if (key != DV_NONE || e0 != CU_ERR_CLEAR || e1 != CU_ERR_CLEAR) {
        if (blockIdx.x == 0 && threadIdx.x == 0 && !ds->set) {
            ds->set = 1;
            ds->skey = key;
            ds->e0 = e0;
            ds->e1 = e1;
            ds->val = key == DV_NONE             ? 0
                      : (key >> 48) == DV_HIDDEN ? __float_as_int(hidden_in[DV_INDEX(key)])
                                                 : codes[DV_INDEX(key)];
        }
        return;
    }
    const size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = t0; i < cnt; i += step) dst[i] = src[i];
    for (size_t i = t0; i < cnt2; i += step) dst2[i] = src2[i];
}

static unsigned dv_blocks(size_t work) {
    size_t b = (work + 255) / 256;
    return b < 1 ? 1 : b > 1024 ? 1024 : (unsigned)b;
}

dd_status cu_devapi_init(cu_state *st, dd_error *err) {
    void *p;
    dd_status s = cu_alloc(&p, sizeof(cu_devstat), &st->allocs, &st->nallocs, err);
    if (s) return s;
    st->ds = (cu_devstat *)p;
    cu_devstat h;
    memset(&h, 0, sizeof h);
    h.key = h.skey = DV_NONE;
    CU_TRY(cudaMemcpy(st->ds, &h, sizeof h, cudaMemcpyHostToDevice), err, "device API state");
    return DD_OK;
}

dd_status cu_devapi_pending(cu_state *st, dd_error *err) {
    if (!st->dev_used) return DD_OK;
    CU_TRY(cudaDeviceSynchronize(), err, "waiting for the device calls");
    cu_devstat h;
    CU_TRY(cudaMemcpy(&h, st->ds, sizeof h, cudaMemcpyDeviceToHost), err, "device API state");
    if (!h.set) return DD_OK;
    CU_TRY(cudaMemset(&st->ds->set, 0, sizeof h.set), err, "device API state");
    const dd_config *c = &st->m->cfg;
    const int I = c->input_dim, Q = c->levels, V = c->codebook_size;
    if (h.skey != DV_NONE) {
        const size_t i = DV_INDEX(h.skey);
        const int kind = (int)(h.skey >> 48);
        float x;
        memcpy(&x, &h.val, sizeof x);
        if (kind == DV_HIDDEN) return dd_fail_hidden(err, (int)(i / I), (int)(i % I), x);
        if (kind == DV_C0) return dd_fail_code(err, "c0", (int)i, 0, 1, h.val, V);
        return dd_fail_code(err, "codes", (int)(i / Q), (int)(i % Q), Q, h.val, V);
    }
    const int e[2] = {h.e0, h.e1};
    return cu_check_error_words(&st->sc, e, err);
}

dd_status cu_decoder_sync(dd_decoder *d, dd_error *err) { return cu_devapi_pending((cu_state *)d->impl, err); }

/* p is memory the decoder's device can read or write (device or managed, of its device), aligned to `align` */
static dd_status dv_ptr(const cu_state *st, const char *fn, const char *name, const void *p, size_t align,
                        dd_error *err) {
    cudaPointerAttributes a;
    cudaError_t ce = cudaPointerGetAttributes(&a, p);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return dd_fail(err, DD_EINVAL, "%s: %s (%p): not memory CUDA knows: %s", fn, name, p, cudaGetErrorString(ce));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return dd_fail(err, DD_EINVAL, "%s: %s (%p) is %s memory: want device memory of cuda device %d", fn, name, p,
                       a.type == cudaMemoryTypeHost ? "pinned host" : "host", st->dev);
    if (a.type == cudaMemoryTypeDevice && a.device != st->dev)
        return dd_fail(err, DD_EINVAL, "%s: %s (%p) is memory of cuda device %d: the decoder is on device %d", fn,
                       name, p, a.device, st->dev);
    if ((uintptr_t)p % align)
        return dd_fail(err, DD_EINVAL, "%s: %s (%p) is not aligned to %zu bytes", fn, name, p, align);
    return DD_OK;
}

/* the caller's current device, set to the decoder's for the call and restored after it */
struct dv_device {
    int prev = -1;
    dd_status enter(int dev, dd_error *err) {
        CU_TRY(cudaGetDevice(&prev), err, "current device");
        if (prev != dev) CU_TRY(cudaSetDevice(dev), err, "setting the decoder's device");
        return DD_OK;
    }
    ~dv_device() {
        int cur;
        if (prev >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev) cudaSetDevice(prev);
    }
};

/* One frame of program v on `stream` (the file comment's steps 1-4); copies src -> dst, src2 -> dst2 (words). */
static dd_status dv_frame(cu_state *st, const char *fn, int v, int n, const float *hidden, const int32_t *codes,
                          int kind, size_t off_codes, size_t nc, const uint64_t *seeds, const uint64_t *frames,
                          float temp, int topk, cudaStream_t stream, const void *src, void *dst, size_t cnt,
                          const void *src2, void *dst2, size_t cnt2, dd_error *err) {
    const dd_config *c = &st->m->cfg;
    if (cu_lt_needs_build(st, v, n)) { /* building a plan copies synchronously: not in a capture */
        cudaStreamCaptureStatus cs;
        CU_TRY(cudaStreamIsCapturing(stream, &cs), err, "stream capture status");
        if (cs != cudaStreamCaptureStatusNone)
            return dd_fail(err, DD_EUNSUPPORTED,
                           "%s: the first call for a batch of %d on this decoder (%s) builds the latency executor's "
                           "plan, which synchronises: make one such call before the capture",
                           fn, n, v == PROG_DECODE_C0 ? "c0 given" : v == PROG_DECODE ? "c0 sampled" : "score");
    }
    dv_device guard;
    dd_status r = guard.enter(st->dev, err);
    if (r) return r;
    st->dev_used = 1;
    const size_t nh = (size_t)n * c->input_dim;
    CU_TRY(cudaMemsetAsync(&st->ds->key, 0xFF, sizeof st->ds->key, stream), err, "device API state");
    size_t work = nh > nc ? nh : nc;
    dv_stage<<<dv_blocks(work), 256, 0, stream>>>(st->d_in, st->off_seeds, st->off_frames, off_codes, hidden, nh,
                                                  seeds, frames, n, codes, nc, kind, c->codebook_size, &st->ds->key);
    CU_TRY(cudaGetLastError(), err, "launch of the staging kernel");
    if ((r = cu_launch_frame(st, v, n, temp, topk, stream, err))) return r;
    work = cnt > cnt2 ? cnt : cnt2;
    dv_finish<<<dv_blocks(work), 256, 0, stream>>>(st->ds, st->sc.err, (const float *)st->d_in, codes,
                                                   (const int *)src, (int *)dst, cnt, (const int *)src2, (int *)dst2,
                                                   cnt2);
    CU_TRY(cudaGetLastError(), err, "launch of the output kernel");
    return DD_OK;
}

dd_status cu_decode_device(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                           const uint64_t *frames, const dd_sampling *s, int32_t *codes, void *stream,
                           dd_error *err) {
    cu_state *st = (cu_state *)d->impl;
    const char *fn = "dd_decode_device";
    dd_status r;
    if ((r = dv_ptr(st, fn, "hidden", hidden, 4, err)) || (c0 && (r = dv_ptr(st, fn, "c0", c0, 4, err))) ||
        (seeds && (r = dv_ptr(st, fn, "seeds", seeds, 8, err))) ||
        (frames && (r = dv_ptr(st, fn, "frames", frames, 8, err))) || (r = dv_ptr(st, fn, "codes", codes, 4, err)))
        return r;
    const int Q = d->m->cfg.levels;
    return dv_frame(st, fn, c0 ? PROG_DECODE_C0 : PROG_DECODE, n, hidden, c0, DV_C0, st->off_c0, c0 ? (size_t)n : 0,
                    seeds, frames, s->temperature, s->top_k, (cudaStream_t)stream, st->d_out + 8, codes,
                    (size_t)n * Q, NULL, NULL, 0, err);
}

dd_status cu_score_device(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                          float *logits0, void *stream, dd_error *err) {
    cu_state *st = (cu_state *)d->impl;
    const char *fn = "dd_score_device";
    dd_status r;
    if ((r = dv_ptr(st, fn, "hidden", hidden, 4, err)) || (r = dv_ptr(st, fn, "codes", codes, 4, err)) ||
        (r = dv_ptr(st, fn, "logits", logits, 4, err)) || (logits0 && (r = dv_ptr(st, fn, "logits0", logits0, 4, err))))
        return r;
    const int Q = d->m->cfg.levels, V = d->m->cfg.codebook_size;
    return dv_frame(st, fn, logits0 ? PROG_SCORE_L0 : PROG_SCORE, n, hidden, codes, DV_CODES, st->off_codes_in,
                    (size_t)n * Q, NULL, NULL, 0, 0, (cudaStream_t)stream, st->logits, logits, (size_t)n * (Q - 1) * V,
                    st->logits0, logits0, logits0 ? (size_t)n * V : 0, err);
}
