/* The bandwidth ceiling `depthdec bench` divides by: measured in the same run as the benchmark, on this machine. */
#include "backend.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    pthread_barrier_t *bar;
    double t0, t1;
} bw_job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each thread streams its slice once after a common barrier; 8 independent accumulators keep loads in flight. */
static void *bw_thread(void *arg) {
    bw_job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= j->n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += j->p[i + k];
    j->t1 = now_s();
    j->sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    return NULL;
}

static dd_status cpu_bandwidth(int threads, double *gbps, dd_error *err) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return dd_fail(err, DD_ENOMEM, "bandwidth: cannot allocate 1 GiB");
    for (size_t i = 0; i < n; i++) buf[i] = i; /* fault every page in, non-zero data */
    bw_job jobs[256];
    pthread_t tid[256];
    pthread_barrier_t bar;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        size_t per = n / threads / 8 * 8;
        for (int t = 0; t < threads; t++) jobs[t] = (bw_job){.p = buf + per * t, .n = per, .bar = &bar};
        for (int t = 1; t < threads; t++) pthread_create(&tid[t], NULL, bw_thread, &jobs[t]);
        bw_thread(&jobs[0]);
        for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
        pthread_barrier_destroy(&bar);
        double t0 = jobs[0].t0, t1 = jobs[0].t1;
        for (int t = 0; t < threads; t++) {
            if (jobs[t].t0 < t0) t0 = jobs[t].t0;
            if (jobs[t].t1 > t1) t1 = jobs[t].t1;
            sink += jobs[t].sum;
        }
        double g = (double)(per * 8 * threads) / (t1 - t0) / 1e9;
        if (g > best) best = g;
    }
    (void)sink;
    free(buf);
    *gbps = best;
    return DD_OK;
}

dd_status dd_measure_read_bandwidth(dd_backend b, int threads, double *gbps, dd_error *err) {
    dd_error_clear(err);
    if (!gbps) return dd_fail(err, DD_EINVAL, "dd_measure_read_bandwidth: gbps is NULL");
    if (b == DD_BACKEND_CUDA) {
#ifdef DD_WITH_CUDA
        return dd_cuda_copy_bandwidth(gbps, err);
#else
        return dd_fail(err, DD_EUNSUPPORTED, "backend cuda: this build has no CUDA backend");
#endif
    }
    return cpu_bandwidth(threads, gbps, err);
}
