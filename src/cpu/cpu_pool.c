/* A persistent fork-join thread pool for the CPU backend.
 *
 * Worker 0 is the caller; workers 1..n-1 are pthreads started once by dd_cpu_pool_create. A run publishes the
 * job and bumps a generation counter; workers wait for a new generation by spinning a short while (the frame loop
 * issues a run every few microseconds, so the next job is usually there before the spin ends) and then sleeping
 * on a condition variable. The caller runs its share, then spins until every worker has reported done: one join
 * per run, nothing allocated, no thread created after create.
 *
 * Memory ordering: the job fields are written before the seq_cst increment of `gen`, and read after a worker
 * observes the new `gen` (acquire), so workers see the job. Each worker's writes are released by its decrement
 * of `pending` and acquired by the caller's load that sees zero. The sleep path is the Dekker pattern on two
 * seq_cst variables: the caller stores gen then loads `sleepers`; a worker increments `sleepers` (under the mutex)
 * then loads gen — at least one of them sees the other's store, so no wake-up is lost.
 */
#include "cpu.h"
#include "util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define DD_PAUSE() __builtin_ia32_pause()
#else
#define DD_PAUSE() ((void)0)
#endif

/* ~0.5-1 ms of spinning (pause is 40-140 cycles) before a worker sleeps. */
#define SPIN_ITERS (1 << 14)
/* The caller waits for the last workers (work is claimed dynamically, so this is the tail of one chunk) and
 * yields sooner: a worker it waits for may need its core. */
#define JOIN_SPIN_ITERS (1 << 11)

typedef struct worker {
    struct dd_cpu_pool *pool;
    int tid;
} worker;

struct dd_cpu_pool {
    int n;
    pthread_t *th;
    worker *w;
    int started; /* pthreads successfully created */
    dd_cpu_job job;
    void *ctx;
    atomic_uint gen;
    atomic_int pending;
    atomic_int sleepers;
    atomic_int quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *arg) {
    worker *w = arg;
    dd_cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && ++spins < SPIN_ITERS) DD_PAUSE();
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) return NULL;
        p->job(p->ctx, w->tid, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

/* Publish a new generation (job already stored) and wake sleepers. */
static void publish(dd_cpu_pool *p) {
    atomic_fetch_add(&p->gen, 1); /* seq_cst */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

int dd_cpu_default_threads(int requested) {
    if (requested > 0) return requested;
    int n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    return n > 256 ? 256 : n;
}

dd_status dd_cpu_pool_create(dd_cpu_pool **out, int nthreads, dd_error *err) {
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    dd_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory for the thread pool");
    p->n = nthreads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->quit, 0);
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return dd_fail(err, DD_ENOMEM, "cpu backend: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->cv, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return dd_fail(err, DD_ENOMEM, "cpu backend: pthread_cond_init failed");
    }
    if (nthreads > 1) {
        p->th = calloc((size_t)nthreads, sizeof *p->th);
        p->w = calloc((size_t)nthreads, sizeof *p->w);
        if (!p->th || !p->w) {
            dd_cpu_pool_free(p);
            return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory for %d threads", nthreads);
        }
        for (int i = 1; i < nthreads; i++) {
            p->w[i] = (worker){p, i};
            int rc = pthread_create(&p->th[i], NULL, worker_main, &p->w[i]);
            if (rc) {
                dd_cpu_pool_free(p);
                return dd_fail(err, DD_ENOMEM, "cpu backend: cannot start thread %d of %d (error %d)", i, nthreads,
                               rc);
            }
            p->started = i;
        }
    }
    *out = p;
    return DD_OK;
}

void dd_cpu_pool_free(dd_cpu_pool *p) {
    if (!p) return;
    if (p->started > 0) {
        atomic_store(&p->quit, 1);
        publish(p);
        for (int i = 1; i <= p->started; i++) pthread_join(p->th[i], NULL);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->w);
    free(p);
}

int dd_cpu_pool_threads(const dd_cpu_pool *p) { return p->n; }

void dd_cpu_pool_run(dd_cpu_pool *p, dd_cpu_job job, void *ctx) {
    if (p->n == 1) {
        job(ctx, 0, 1);
        return;
    }
    p->job = job;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    publish(p);
    job(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        DD_PAUSE();
        /* a worker may have been descheduled (more threads than free cores): let it run */
        if (++spins > JOIN_SPIN_ITERS) sched_yield();
    }
}
