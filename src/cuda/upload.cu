/* Weights to the device, kept in their stored type: dd_weight views (any alignment, row slices of one or more
 * tensors) are permuted on the host into the A-fragment order of cu_common.cuh and copied once at decoder
 * creation. Quantized (s, b) pairs go next to their m-tile. Gather tables are copied row-major with 16-byte
 * aligned row pitches. */
#include "cu_common.cuh"

#include <stdlib.h>
#include <string.h>

dd_status cu_alloc(void **out, size_t bytes, void ***allocs, int *nallocs, dd_error *err) {
    *out = NULL;
    void **na = (void **)realloc(*allocs, (size_t)(*nallocs + 1) * sizeof *na);
    if (!na) return dd_fail(err, DD_ENOMEM, "backend cuda: out of host memory");
    *allocs = na;
    cudaError_t ce = cudaMalloc(out, bytes ? bytes : 16);
    if (ce != cudaSuccess) {
        *out = NULL;
        return dd_fail(err, DD_ENOMEM, "backend cuda: cannot allocate %zu bytes of device memory: %s", bytes,
                       cudaGetErrorString(ce));
    }
    na[(*nallocs)++] = *out;
    return DD_OK;
}

void cu_free_all(void **allocs, int nallocs) {
    for (int i = 0; i < nallocs; i++) cudaFree(allocs[i]);
    free(allocs);
}

dd_status cu_upload_f32(float **out, const float *src, size_t n, void ***allocs, int *nallocs, dd_error *err) {
    *out = NULL;
    if (!src) return DD_OK;
    dd_status s = cu_alloc((void **)out, n * 4, allocs, nallocs, err);
    if (s) return s;
    CU_TRY(cudaMemcpy(*out, src, n * 4, cudaMemcpyHostToDevice), err, "upload");
    return DD_OK;
}

static int elem_bytes_x2(int type) { /* twice the bytes per element (q4: 1) */
    switch (type) {
    case DD_F32: return 8;
    case DD_F16:
    case DD_BF16: return 4;
    case DD_Q8: return 2;
    default: return 1;
    }
}

dd_status cu_mat_layout(cu_mat *out, const cu_rows *src, int nsrc, int pair, dd_error *err) {
    memset(out, 0, sizeof *out);
    const dd_weight *w0 = src[0].w;
    int64_t K = w0->cols, N = 0;
    for (int i = 0; i < nsrc; i++) {
        const dd_weight *w = src[i].w;
        if (w->type != w0->type || w->cols != K || (w->scales && (w->group != w0->group || w->sb_type != w0->sb_type)))
            return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: matrices fused into one (q/k/v or gate/up) must share "
                                                 "type, width and quantization");
        N += src[i].n;
    }
    if (pair) {
        if (nsrc != 2 || src[0].n != src[1].n) return dd_fail(err, DD_EINVAL, "backend cuda: gate/up shapes differ");
        N = src[0].n;
    }
    int type = w0->type, quant = type == DD_Q8 || type == DD_Q4;
    if (N < 1 || K < 1 || N > (1 << 30) || K > (1 << 24))
        return dd_fail(err, DD_EINVAL, "backend cuda: matrix %lld x %lld unsupported", (long long)N, (long long)K);
    out->type = type;
    out->N = (int)N;
    out->K = (int)K;
    out->KT = (int)((K + 15) / 16);
    int mth = (int)((N + 15) / 16);
    out->MT = pair ? 2 * mth : mth;
    out->pair = pair;
    out->tile_bytes = 32 * 8 * elem_bytes_x2(type) / 2;
    out->lane_bytes = out->tile_bytes / 32;
    switch (type) {
    case DD_BF16: out->wm = WM_BF16; break;
    case DD_F16: out->wm = WM_F16; break;
    case DD_F32: out->wm = WM_F32; break;
    default: out->wm = (w0->group % 16 == 0 && w0->group <= 16 * CU_CKT) ? WM_QINT : WM_QDEQ; break;
    }
    size_t es = 0;
    if (quant) {
        out->group = w0->group;
        out->NG = (int)(K / w0->group);
        out->sbtype = w0->sb_type;
        es = dd_dtype_size((dd_dtype)w0->sb_type);
        out->sb_bytes = (int)(2 * es);
    }
    return DD_OK;
}

dd_status cu_mat_upload(cu_mat *out, const cu_rows *src, int nsrc, int pair, void ***allocs, int *nallocs,
                        dd_error *err) {
    dd_status s0 = cu_mat_layout(out, src, nsrc, pair, err);
    if (s0) return s0;
    const int64_t K = out->K, N = out->N;
    const int type = out->type, quant = type == DD_Q8 || type == DD_Q4;
    const size_t es = quant ? dd_dtype_size((dd_dtype)src[0].w->sb_type) : 0;
    size_t fbytes = (size_t)out->MT * out->KT * out->tile_bytes;
    size_t sbytes = quant ? (size_t)out->MT * out->NG * 16 * out->sb_bytes : 0;
    uint8_t *hf = (uint8_t *)calloc(fbytes, 1), *hs = sbytes ? (uint8_t *)calloc(sbytes, 1) : NULL;
    if (!hf || (sbytes && !hs)) {
        free(hf);
        free(hs);
        return dd_fail(err, DD_ENOMEM, "backend cuda: out of host memory preparing weights");
    }
    /* destination of column cc (0..15) of tile row r (0..15) inside a tile, in elements */
    int pos[16][16];
    for (int r = 0; r < 16; r++)
        for (int cc = 0; cc < 16; cc++) {
            int g = r & 7, rh = r >> 3, c = (cc & 7) >> 1, e = ((cc >> 3) ? 4 : 0) + (rh ? 2 : 0) + (cc & 1);
            pos[r][cc] = (g * 4 + c) * 8 + e;
        }
    for (int mt = 0; mt < out->MT; mt++)
        for (int r = 0; r < 16; r++) {
            const dd_weight *w = NULL;
            int64_t row = 0;
            if (pair) {
                int64_t lr = (int64_t)(mt >> 1) * 16 + r;
                if (lr < N) {
                    w = src[mt & 1].w;
                    row = src[mt & 1].r0 + lr;
                }
            } else {
                int64_t vr = (int64_t)mt * 16 + r;
                for (int i = 0; i < nsrc && vr < N; i++) {
                    if (vr < src[i].n) {
                        w = src[i].w;
                        row = src[i].r0 + vr;
                        break;
                    }
                    vr -= src[i].n;
                }
            }
            if (!w) continue;
            const uint8_t *p = w->data + (size_t)row * w->row_bytes;
            for (int64_t k = 0; k < K; k++) {
                int kt = (int)(k >> 4), e = pos[r][k & 15];
                uint8_t *tile = hf + ((size_t)mt * out->KT + kt) * out->tile_bytes;
                switch (type) {
                case DD_F32: memcpy(tile + (size_t)e * 4, p + 4 * k, 4); break;
                case DD_F16:
                case DD_BF16: memcpy(tile + (size_t)e * 2, p + 2 * k, 2); break;
                case DD_Q8: tile[e] = p[k]; break;
                default: {
                    uint8_t q = (p[k >> 1] >> (4 * (k & 1))) & 15;
                    tile[e >> 1] |= (uint8_t)(q << (4 * (e & 1)));
                    break;
                }
                }
            }
            if (quant)
                for (int g = 0; g < out->NG; g++) {
                    uint8_t *d = hs + (((size_t)mt * out->NG + g) * 16 + r) * out->sb_bytes;
                    memcpy(d, w->scales + (size_t)row * w->sb_row_bytes + g * es, es);
                    memcpy(d + es, w->biases + (size_t)row * w->sb_row_bytes + g * es, es);
                }
        }
    void *df = NULL, *ds = NULL;
    dd_status s = cu_alloc(&df, fbytes, allocs, nallocs, err);
    if (!s && sbytes) s = cu_alloc(&ds, sbytes, allocs, nallocs, err);
    cudaError_t ce = cudaSuccess;
    if (!s) ce = cudaMemcpy(df, hf, fbytes, cudaMemcpyHostToDevice);
    if (!s && ce == cudaSuccess && sbytes) ce = cudaMemcpy(ds, hs, sbytes, cudaMemcpyHostToDevice);
    free(hf);
    free(hs);
    if (s) return s;
    if (ce != cudaSuccess) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: upload: %s", cudaGetErrorString(ce));
    out->frag = (const uint8_t *)df;
    out->sb = (const uint8_t *)ds;
    return DD_OK;
}

dd_status cu_raw_upload(cu_raw *out, const dd_weight *w, int64_t r0, int64_t nrows, void ***allocs, int *nallocs,
                        dd_error *err) {
    memset(out, 0, sizeof *out);
    out->type = w->type;
    out->rows = (int)nrows;
    out->cols = (int)w->cols;
    out->pitch = (w->row_bytes + 15) / 16 * 16;
    int quant = w->type == DD_Q8 || w->type == DD_Q4;
    if (quant) {
        out->sbtype = w->sb_type;
        out->group = w->group;
        out->sb_pitch = (w->sb_row_bytes + 15) / 16 * 16;
    }
    size_t db = out->pitch * (size_t)nrows, sb = out->sb_pitch * (size_t)nrows;
    uint8_t *h = (uint8_t *)calloc(db + 2 * sb + 16, 1);
    if (!h) return dd_fail(err, DD_ENOMEM, "backend cuda: out of host memory preparing a table");
    for (int64_t r = 0; r < nrows; r++) {
        memcpy(h + (size_t)r * out->pitch, w->data + (size_t)(r0 + r) * w->row_bytes, w->row_bytes);
        if (quant) {
            memcpy(h + db + (size_t)r * out->sb_pitch, w->scales + (size_t)(r0 + r) * w->sb_row_bytes,
                   w->sb_row_bytes);
            memcpy(h + db + sb + (size_t)r * out->sb_pitch, w->biases + (size_t)(r0 + r) * w->sb_row_bytes,
                   w->sb_row_bytes);
        }
    }
    void *d = NULL;
    dd_status s = cu_alloc(&d, db + 2 * sb + 16, allocs, nallocs, err);
    if (!s && cudaMemcpy(d, h, db + 2 * sb + 16, cudaMemcpyHostToDevice) != cudaSuccess)
        s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: table upload failed");
    free(h);
    if (s) return s;
    out->data = (const uint8_t *)d;
    if (quant) {
        out->scales = out->data + db;
        out->biases = out->data + db + sb;
    }
    return DD_OK;
}
