/* Thread safety (issue 7, point 3): one dd_model shared by several threads, each with its own dd_decoder, decoding
 * (greedy and sampled, with and without c0) and scoring concurrently. Every result must be bit-identical to the
 * same call made single-threaded beforehand. Also: several threads loading the same file and building synthetic
 * models at once. Built and run normally by `make test`, and under ThreadSanitizer by scripts/sanitize.sh
 * (build-tsan/test_threads), where any data race fails the run.
 *
 * Worker threads never call cmocka (it is not thread-safe): they count mismatches and keep the first message,
 * and the main thread asserts after joining. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "depthdec.h"
#include "registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define NROWS 3
#define ITERS 3

/* Inputs of one thread's job, and the outputs a single-threaded run produced for them. */
typedef struct job {
    const dd_model *m;
    dd_backend backend;
    int cpu_threads;
    int id;
    float *hidden;     /* [NROWS, I] */
    int32_t *c0;       /* [NROWS] */
    uint64_t seeds[NROWS], frames[NROWS];
    int32_t *tf_codes; /* [NROWS, Q] teacher-forcing input */
    /* reference outputs */
    int32_t *greedy, *sampled; /* [NROWS, Q] */
    float *logits, *logits0;   /* [NROWS, Q-1, V], [NROWS, V] */
    /* results of the threaded run */
    int failures;
    char first[600];
} job;

static void note(job *j, const char *fmt, const char *what, const char *msg) {
    if (j->failures++ == 0) snprintf(j->first, sizeof j->first, fmt, j->id, what, msg ? msg : "");
}

/* The calls under test, into caller-provided outputs. Returns 0 or the first failing status. */
static dd_status run_calls(dd_decoder *d, const job *j, int32_t *greedy, int32_t *sampled, float *logits,
                           float *logits0, dd_error *e) {
    const dd_config *c = dd_model_config(j->m);
    dd_sampling g = {0.0f, 0}, s = dd_sampling_default();
    dd_status st = dd_decode(d, NROWS, j->hidden, j->c0, j->seeds, j->frames, &g, greedy, e);
    if (!st) st = dd_decode(d, NROWS, j->hidden, c->has_head0 ? NULL : j->c0, j->seeds, j->frames, &s, sampled, e);
    if (!st) st = dd_score(d, NROWS, j->hidden, j->tf_codes, logits, c->has_head0 ? logits0 : NULL, e);
    return st;
}

static dd_status make_decoder(const job *j, dd_decoder **d, dd_error *e) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = j->backend;
    p.max_batch = NROWS;
    p.threads = j->cpu_threads;
    return dd_decoder_create(d, j->m, &p, e);
}

static void job_init(job *j, const dd_model *m, dd_backend b, int id) {
    memset(j, 0, sizeof *j);
    const dd_config *c = dd_model_config(m);
    int I = c->input_dim, Q = c->levels, V = c->codebook_size;
    j->m = m;
    j->backend = b;
    j->cpu_threads = 2;
    j->id = id;
    j->hidden = malloc(sizeof(float) * NROWS * I);
    j->c0 = malloc(sizeof(int32_t) * NROWS);
    j->tf_codes = malloc(sizeof(int32_t) * NROWS * Q);
    j->greedy = malloc(sizeof(int32_t) * NROWS * Q);
    j->sampled = malloc(sizeof(int32_t) * NROWS * Q);
    j->logits = malloc(sizeof(float) * NROWS * (Q - 1) * V);
    j->logits0 = malloc(sizeof(float) * NROWS * V);
    assert_non_null(j->hidden && j->c0 && j->tf_codes && j->greedy && j->sampled && j->logits && j->logits0);
    uint64_t s = 0x1234567ull + 977ull * (uint64_t)id;
    for (int i = 0; i < NROWS * I; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        j->hidden[i] = (float)((int)(s >> 40) % 2001 - 1000) / 1000.0f;
    }
    for (int r = 0; r < NROWS; r++) {
        j->c0[r] = (r * 13 + id * 7) % V;
        j->seeds[r] = 1000u + 17u * (uint64_t)id + (uint64_t)r;
        j->frames[r] = (uint64_t)(r + id);
        for (int l = 0; l < Q; l++) j->tf_codes[r * Q + l] = (l * 11 + r * 5 + id) % V;
    }
}

static void job_free(job *j) {
    free(j->hidden);
    free(j->c0);
    free(j->tf_codes);
    free(j->greedy);
    free(j->sampled);
    free(j->logits);
    free(j->logits0);
}

/* Thread body: own decoder, ITERS rounds of every call, each compared bit for bit with the reference. */
static void *worker(void *arg) {
    job *j = arg;
    const dd_config *c = dd_model_config(j->m);
    int Q = c->levels, V = c->codebook_size;
    size_t nc = sizeof(int32_t) * NROWS * Q, nl = sizeof(float) * NROWS * (Q - 1) * V, nl0 = sizeof(float) * NROWS * V;
    int32_t *greedy = malloc(nc), *sampled = malloc(nc);
    float *logits = malloc(nl), *logits0 = malloc(nl0);
    dd_decoder *d = NULL;
    dd_error e;
    if (!greedy || !sampled || !logits || !logits0) {
        note(j, "thread %d: %s%s", "out of memory", NULL);
    } else if (make_decoder(j, &d, &e)) {
        note(j, "thread %d: %s: %s", "decoder create", e.msg);
    } else {
        for (int it = 0; it < ITERS; it++) {
            memset(greedy, 0xff, nc);
            memset(sampled, 0xff, nc);
            memset(logits, 0xff, nl); /* NaN */
            memset(logits0, 0xff, nl0);
            if (run_calls(d, j, greedy, sampled, logits, logits0, &e)) {
                note(j, "thread %d: %s: %s", "call failed", e.msg);
                break;
            }
            if (memcmp(greedy, j->greedy, nc)) note(j, "thread %d: %s%s", "greedy codes differ", NULL);
            if (memcmp(sampled, j->sampled, nc)) note(j, "thread %d: %s%s", "sampled codes differ", NULL);
            if (memcmp(logits, j->logits, nl)) note(j, "thread %d: %s%s", "logits differ", NULL);
            if (c->has_head0 && memcmp(logits0, j->logits0, nl0)) note(j, "thread %d: %s%s", "logits0 differ", NULL);
        }
    }
    dd_decoder_free(d);
    free(greedy);
    free(sampled);
    free(logits);
    free(logits0);
    return NULL;
}

/* Reference outputs of every job single-threaded, then all jobs at once, one thread each. */
static void check_shared_model(const dd_model *m, const char *label) {
    /* the registry's host-memory backends (ref, cpu), as before: concurrent decoders of the cuda backend are not
     * covered here */
    for (int r = 0; r < dd_registry_count; r++) {
        if (!dd_registry[r].test.host_memory) continue;
        const dd_backend be = dd_registry[r].info.id;
        if (!dd_backend_available(be)) {
            print_message("  %s: backend %s not in this build: skipped\n", label, dd_backend_name(be));
            continue;
        }
        job jobs[NTHREADS];
        dd_error e;
        for (int t = 0; t < NTHREADS; t++) {
            job_init(&jobs[t], m, be, t);
            dd_decoder *d;
            if (make_decoder(&jobs[t], &d, &e)) fail_msg("%s: %s", label, e.msg);
            if (run_calls(d, &jobs[t], jobs[t].greedy, jobs[t].sampled, jobs[t].logits, jobs[t].logits0, &e))
                fail_msg("%s (%s): single-threaded run: %s", label, dd_backend_name(be), e.msg);
            dd_decoder_free(d);
        }
        pthread_t th[NTHREADS];
        for (int t = 0; t < NTHREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, worker, &jobs[t]), 0);
        for (int t = 0; t < NTHREADS; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
        int bad = 0;
        for (int t = 0; t < NTHREADS; t++) {
            if (jobs[t].failures) {
                print_error("%s (%s): %d failures; first: %s\n", label, dd_backend_name(be),
                            jobs[t].failures, jobs[t].first);
                bad = 1;
            }
        }
        for (int t = 0; t < NTHREADS; t++) job_free(&jobs[t]);
        if (bad) fail_msg("%s (%s): threaded results differ from the single-threaded run", label,
                          dd_backend_name(be));
        print_message("  %s (%s): %d threads x %d rounds identical to single-threaded\n", label,
                      dd_backend_name(be), NTHREADS, ITERS);
    }
}

static void test_shared_tiny_llama_q4(void **state) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-llama", DD_Q4, 7, &e)) fail_msg("%s", e.msg);
    check_shared_model(m, "tiny-llama q4");
    dd_model_free(m);
}

static void test_shared_tiny_gpt_bf16(void **state) {
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, "tiny-gpt", DD_BF16, 3, &e)) fail_msg("%s", e.msg);
    check_shared_model(m, "tiny-gpt bf16");
    dd_model_free(m);
}

static void test_shared_csm_fixture(void **state) {
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, "tests/fixtures/csm_tiny", &e)) fail_msg("%s", e.msg);
    check_shared_model(m, "csm_tiny (HF dir)");
    dd_model_free(m);
}

/* ---- concurrent loading ------------------------------------------------------------------------------------ */

typedef struct load_job {
    int id;
    dd_config cfg;
    int tensors;
    dd_status st;
    char msg[512];
} load_job;

static void *loader(void *arg) {
    load_job *j = arg;
    dd_model *m = NULL;
    dd_error e;
    /* even ids load the same HF directory, odd ids the same native file, all at once; every fourth also builds a
     * synthetic model (the in-memory path) */
    j->st = dd_model_load(&m, j->id % 2 ? "tests/fixtures/gpt_q8.safetensors" : "tests/fixtures/csm_tiny", &e);
    if (j->st) {
        snprintf(j->msg, sizeof j->msg, "%s", e.msg);
        return NULL;
    }
    j->cfg = *dd_model_config(m);
    j->tensors = dd_model_tensor_count(m);
    dd_model_free(m);
    if (j->id % 4 == 0) {
        j->st = dd_model_synthetic(&m, "tiny-gpt", DD_Q8, 1, &e);
        if (j->st) snprintf(j->msg, sizeof j->msg, "%s", e.msg);
        dd_model_free(m);
    }
    return NULL;
}

static void test_concurrent_load(void **state) {
    enum { N = 8 };
    load_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, loader, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N; i++) {
        if (jobs[i].st) fail_msg("thread %d: %s", i, jobs[i].msg);
        const load_job *ref = &jobs[i % 2];
        assert_memory_equal(&jobs[i].cfg, &ref->cfg, sizeof ref->cfg);
        assert_int_equal(jobs[i].tensors, ref->tensors);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_tiny_llama_q4),
        cmocka_unit_test(test_shared_tiny_gpt_bf16),
        cmocka_unit_test(test_shared_csm_fixture),
        cmocka_unit_test(test_concurrent_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
