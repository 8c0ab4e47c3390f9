/* Host entry points outside the decoder: device presence, the copy bandwidth `depthdec bench` divides by, and the
 * dd_cuda_*_host test entry points of src/kernels.h. Each test entry builds a one-op program and runs it through
 * the same frame kernel (and the same schedule choice) as the decoder; it allocates and frees everything it uses
 * (slow, for tests only). */
#include "cu_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {

int dd_cuda_device_present(void) {
    static int present = -1;
    if (present >= 0) return present;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        cudaGetLastError();
        return present = 0;
    }
    return present = cu_grid_size() > 0;
}

dd_status dd_cuda_copy_bandwidth(double *gbps, dd_error *err) {
    if (!gbps) return dd_fail(err, DD_EINVAL, "dd_cuda_copy_bandwidth: gbps is NULL");
    if (!dd_cuda_device_present()) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    dd_status st = DD_OK;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess ||
        cudaMemset(a, 0x5A, bytes) != cudaSuccess) {
        st = dd_fail(err, DD_ENOMEM, "backend cuda: bandwidth: cannot allocate 2 GiB of device memory");
    } else {
        float best = 1e30f;
        for (int rep = 0; rep < 12 && !st; rep++) {
            cudaEventRecord(e0);
            cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e1);
            float ms = 0;
            if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
                st = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: bandwidth measurement failed");
            else if (rep >= 2 && ms < best)
                best = ms;
        }
        if (!st) *gbps = 2.0 * (double)bytes / (best * 1e-3) / 1e9; /* read + written */
    }
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return st;
}

/* A streaming read of `bytes` of device memory by the whole grid, `passes` times (through L2: a buffer that fits
 * it is served from it, as the passes of a frame re-read the same weights); XOR-folded so no load is dropped. */
__global__ void dd_cuda_read_kernel(const uint4 *p, size_t n4, int passes, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int r = 0; r < passes; r++)
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const uint4 v = __ldcg(p + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    if (acc == 0x9E3779B9u) *sink = acc; /* (almost) never: keeps the loads */
}

/* The read bandwidth over a device buffer of `bytes` (>= 1 MiB), in GB/s: every SM reads it, re-read so that a
 * timed repetition covers >= 1 GiB, best of 5 after a warm-up (bench's second floor: one pass's working set). */
dd_status dd_cuda_read_bandwidth(uint64_t bytes, double *gbps, dd_error *err) {
    if (!gbps) return dd_fail(err, DD_EINVAL, "dd_cuda_read_bandwidth: gbps is NULL");
    if (bytes < ((uint64_t)1 << 20) || bytes > ((uint64_t)1 << 40))
        return dd_fail(err, DD_EINVAL, "bandwidth: buffer of %llu bytes outside [1 MiB, 1 TiB]", (unsigned long long)bytes);
    if (!dd_cuda_device_present()) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
    const size_t n4 = (size_t)bytes / 16, b = n4 * 16;
    const int passes = b >= ((size_t)1 << 30) ? 1 : (int)((((size_t)1 << 30) + b - 1) / b);
    void *a = NULL, *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    dd_status st = DD_OK;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaMalloc(&a, b) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess || cudaMemset(a, 0x5A, b) != cudaSuccess) {
        st = dd_fail(err, DD_ENOMEM, "backend cuda: bandwidth: cannot allocate %.0f MB of device memory", b / 1e6);
    } else {
        float best = 1e30f;
        for (int rep = 0; rep < 6 && !st; rep++) {
            cudaEventRecord(e0);
            dd_cuda_read_kernel<<<sms * 8, 256>>>((const uint4 *)a, n4, passes, (unsigned *)sink);
            cudaEventRecord(e1);
            float ms = 0;
            if (cudaGetLastError() != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
                st = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: bandwidth measurement failed");
            else if (rep >= 1 && ms < best)
                best = ms;
        }
        if (!st) *gbps = (double)b * passes / (best * 1e-3) / 1e9;
    }
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(sink);
    return st;
}

/* test hook: run every linear of the test entry points on the large schedule (to check both schedules agree) */
static int g_force_big = 0;
void dd_cuda_test_force_big(int on) { g_force_big = on != 0; }

} /* extern "C" */

/* ---- one-op programs -------------------------------------------------------------------------------------- */

typedef struct host_job {
    void **allocs;
    int nallocs;
    cu_scratch s;
    int have_scratch;
} host_job;

static void job_free(host_job *j) {
    if (j->have_scratch) cu_scratch_free(&j->s);
    cu_free_all(j->allocs, j->nallocs);
}

static dd_status up(host_job *j, void **d, const void *h, size_t bytes, dd_error *err) {
    *d = NULL;
    if (!h) return DD_OK;
    dd_status s = cu_alloc(d, bytes, &j->allocs, &j->nallocs, err);
    if (s) return s;
    CU_TRY(cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice), err, "upload");
    return DD_OK;
}

static dd_status run_one(host_job *j, const cu_op *op, int n, float temp, int topk, const uint64_t *d_seeds,
                         const uint64_t *d_frames, int max_tokens, int max_k, int max_groups, dd_error *err) {
    dd_status s = cu_scratch_init(&j->s, max_tokens, max_k, max_groups, 0, err);
    if (s) return s;
    j->have_scratch = 1;
    void *d_op;
    if ((s = up(j, &d_op, op, sizeof *op, err))) return s;
    if ((s = cu_run_program(&j->s, (const cu_op *)d_op, 1, n, temp, topk, d_seeds, d_frames, g_force_big, 0,
                            err)))
        return s;
    CU_TRY(cudaDeviceSynchronize(), err, "frame kernel");
    return cu_check_errors(&j->s, err);
}

extern "C" dd_status dd_cuda_linear_host(const dd_linear_args *a, dd_error *err) {
    dd_error_clear(err);
    /* one weight segment (the frame kernel fuses q/k/v at upload, not here) */
    if (!a || !a->y || !a->x || a->nseg != 1 || !a->seg[0].w || a->T < 1 || a->seg[0].w->rows < 1 ||
        a->seg[0].w->cols < 1)
        return dd_fail(err, DD_EINVAL, "dd_cuda_linear_host: bad arguments");
    const dd_weight *w = a->seg[0].w, *w2 = a->seg[0].w2;
    const float *bias = a->seg[0].bias, *bias2 = a->seg[0].bias2;
    if (!dd_cuda_device_present()) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
    if (a->act == DD_ACT_SWIGLU && (!w2 || w2->rows != w->rows))
        return dd_fail(err, DD_EINVAL, "dd_cuda_linear_host: SwiGLU needs w2 of the same shape");
    if (a->norm != DD_NORM_NONE && !a->norm_w) return dd_fail(err, DD_EINVAL, "dd_cuda_linear_host: norm_w is NULL");
    const int T = a->T, N = (int)w->rows, K = (int)w->cols;
    host_job j;
    memset(&j, 0, sizeof j);
    cu_op op;
    memset(&op, 0, sizeof op);
    op.type = CU_OP_LINEAR;
    cu_linear &L = op.lin;
    L.tmul = 1;
    L.fuse = -1;
    dd_status s;
    cu_rows rows[2] = {{w, 0, N}, {w2, 0, N}};
    s = cu_mat_upload(&L.w, rows, a->act == DD_ACT_SWIGLU ? 2 : 1, a->act == DD_ACT_SWIGLU, &j.allocs, &j.nallocs,
                      err);
    size_t xn = (size_t)(T - 1) * a->ldx + K, yn = (size_t)(T - 1) * a->ldy + N;
    void *d;
    if (!s && !(s = up(&j, &d, a->x, xn * 4, err))) L.x = (const float *)d;
    if (!s && !(s = up(&j, &d, a->y, yn * 4, err))) L.y = (float *)d; /* keeps what the kernel must not write */
    if (!s && !(s = up(&j, &d, bias, (size_t)N * 4, err))) L.bias = (const float *)d;
    if (!s && a->act == DD_ACT_SWIGLU && !(s = up(&j, &d, bias2, (size_t)N * 4, err))) L.bias2 = (const float *)d;
    if (!s && a->norm != DD_NORM_NONE && !(s = up(&j, &d, a->norm_w, (size_t)K * 4, err))) L.norm_w = (const float *)d;
    if (!s && a->norm == DD_NORM_LAYER && !(s = up(&j, &d, a->norm_b, (size_t)K * 4, err)))
        L.norm_b = (const float *)d;
    if (!s && a->residual) {
        if (a->residual == a->y) {
            L.res = L.y;
        } else if (!(s = up(&j, &d, a->residual, ((size_t)(T - 1) * a->ldr + N) * 4, err))) {
            L.res = (const float *)d;
        }
    }
    if (!s && a->add && !(s = up(&j, &d, a->add, ((size_t)(T - 1) * a->lda + N) * 4, err))) L.add = (const float *)d;
    L.norm = a->norm;
    L.eps = a->eps;
    L.act = a->act;
    L.ldx = a->ldx;
    L.ldy = a->ldy;
    L.ldr = a->residual == a->y ? a->ldy : a->ldr;
    L.lda = a->lda;
    if (!s) s = run_one(&j, &op, T, 0, 0, NULL, NULL, T, K, L.w.NG, err);
    if (!s && cudaMemcpy(a->y, L.y, yn * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: copy back failed");
    job_free(&j);
    return s;
}

extern "C" dd_status dd_cuda_attend_host(const dd_attend_args *a, dd_error *err) {
    dd_error_clear(err);
    /* one stream, dense rows (the test hook) */
    if (!a || !a->out || !a->kcache || !a->vcache || !a->qkv || a->B != 1 || a->P < 1 || a->p0 < 0 || a->H < 1 ||
        a->KVH < 1 || a->HD < 1 || a->H % a->KVH || a->p0 + a->P > DD_MAX_LEVELS || a->HD > DD_MAX_HEAD_DIM ||
        a->ldo != a->H * a->HD || a->ldq != (a->H + 2 * a->KVH) * a->HD)
        return dd_fail(err, DD_EINVAL, "dd_cuda_attend_host: bad arguments");
    if (!dd_cuda_device_present()) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
    const int T = a->P, Q = a->p0 + a->P, kvw = a->KVH * a->HD, qw = (a->H + 2 * a->KVH) * a->HD;
    host_job j;
    memset(&j, 0, sizeof j);
    cu_op op;
    memset(&op, 0, sizeof op);
    op.type = CU_OP_ATTEND;
    cu_attend &A = op.att;
    A.P = T;
    A.p0 = a->p0;
    A.H = a->H;
    A.KVH = a->KVH;
    A.HD = a->HD;
    A.cstride = (size_t)Q * kvw;
    dd_status s = DD_OK;
    double *cs = NULL;
    int half = a->HD / 2;
    if (a->inv_freq && half > 0) {
        cs = (double *)malloc((size_t)Q * half * 2 * sizeof(double));
        if (!cs) return dd_fail(err, DD_ENOMEM, "dd_cuda_attend_host: out of memory");
        dd_rope_table(cs, a->inv_freq, a->HD, Q);
    }
    void *d;
    if (cs && !(s = up(&j, &d, cs, (size_t)Q * half * 2 * sizeof(double), err))) A.rope = (const double *)d;
    free(cs);
    if (!s && a->q_norm && !(s = up(&j, &d, a->q_norm, (size_t)a->HD * 4, err))) A.qn = (const float *)d;
    if (!s && a->k_norm && !(s = up(&j, &d, a->k_norm, (size_t)a->HD * 4, err))) A.kn = (const float *)d;
    A.qk_eps = a->qk_eps;
    if (!s && !(s = up(&j, &d, a->qkv, (size_t)T * qw * 4, err))) A.qkv = (const float *)d;
    if (!s && !(s = up(&j, &d, a->kcache, (size_t)Q * kvw * 4, err))) A.kc = (float *)d;
    if (!s && !(s = up(&j, &d, a->vcache, (size_t)Q * kvw * 4, err))) A.vc = (float *)d;
    if (!s && !(s = up(&j, &d, a->out, (size_t)T * a->H * a->HD * 4, err))) A.out = (float *)d;
    if (!s) s = run_one(&j, &op, 1, 0, 0, NULL, NULL, 8, 16, 1, err);
    if (!s && (cudaMemcpy(a->out, A.out, (size_t)T * a->H * a->HD * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
               cudaMemcpy(a->kcache + (size_t)a->p0 * kvw, A.kc + (size_t)a->p0 * kvw, (size_t)T * kvw * 4,
                          cudaMemcpyDeviceToHost) != cudaSuccess ||
               cudaMemcpy(a->vcache + (size_t)a->p0 * kvw, A.vc + (size_t)a->p0 * kvw, (size_t)T * kvw * 4,
                          cudaMemcpyDeviceToHost) != cudaSuccess))
        s = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: copy back failed");
    job_free(&j);
    return s;
}

/* Codes of rows without a finite logit are -1 (and DD_ENUMERIC names the first); the others are sampled. */
extern "C" dd_status dd_cuda_sample_host(const float *logits, int n, int V, float T, int K, const uint64_t *seeds,
                                         const uint64_t *frames, int level, int32_t *codes, dd_error *err) {
    dd_error_clear(err);
    if (!logits || !codes || n < 1 || V < 1 || !isfinite(T) || T < 0 || K < 0 || level < 0 || level > 255)
        return dd_fail(err, DD_EINVAL, "dd_cuda_sample_host: bad arguments");
    if (!dd_cuda_device_present()) return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
    host_job j;
    memset(&j, 0, sizeof j);
    cu_op op;
    memset(&op, 0, sizeof op);
    op.type = CU_OP_SAMPLE;
    cu_sample &S = op.smp;
    S.ldl = V;
    S.V = V;
    S.level = level;
    S.ldo = 1;
    void *d, *ds = NULL, *df = NULL;
    dd_status s = up(&j, &d, logits, (size_t)n * V * 4, err);
    S.logits = (const float *)d;
    if (!s) s = cu_alloc(&d, (size_t)n * 4, &j.allocs, &j.nallocs, err);
    S.code_out = (int32_t *)d;
    if (!s) s = up(&j, &ds, seeds, (size_t)n * 8, err);
    if (!s) s = up(&j, &df, frames, (size_t)n * 8, err);
    dd_status rs = s;
    if (!s) rs = run_one(&j, &op, n, T, K, (const uint64_t *)ds, (const uint64_t *)df, 8, 16, 1, err);
    if ((!rs || rs == DD_ENUMERIC) &&
        cudaMemcpy(codes, S.code_out, (size_t)n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        rs = dd_fail(err, DD_EUNSUPPORTED, "backend cuda: copy back failed");
    job_free(&j);
    return rs;
}
