/* The backend registry (ggml's backend registry): one row per backend this library knows. The public dd_backend_*
 * functions, backend choice (auto included) in decoder.c, dd_measure_read_bandwidth, the CLI and the Python package
 * (through dd_backend_count / dd_backend_at / dd_backend_info_get) and every test iterate it; nothing else lists
 * backends.
 *
 * Adding a backend: its folder of sources, a value in include/depthdec.h's dd_backend enum (the public face), one row
 * in registry.c, and the Makefile line that builds the folder (and defines DD_WITH_<NAME>). A backend left out of a
 * build keeps its row, without a vtable, so that its name still parses and asking for it says how to build it. */
#ifndef DD_REGISTRY_H
#define DD_REGISTRY_H

#include "backend.h"
#include "kernels.h"

/* What the tests need beyond the public API to judge a backend (tests/harness.h: th_backend_*). */
typedef struct dd_backend_test {
    int oracle; /* the reference: the independent oracle the others are judged by (never "optimized") */
    /* Variants: ways to run this one backend that must each agree with the oracle (cpu: one per instruction set).
     * nvariants 0 = a single variant, numbered 0. variant_supported(v): built in and runnable here. use_variant
     * switches a decoder of this backend to variant v (DD_EUNSUPPORTED when not supported). */
    int nvariants;
    const char *(*variant_name)(int v);
    int (*variant_supported)(int v);
    dd_status (*use_variant)(dd_decoder *d, int v, dd_error *err);
    /* The src/kernels.h contracts run once on host buffers (arguments copied to wherever the backend computes and
     * back: slow, for tests). NULL when the backend does not implement the contracts (ref). threads: 0 = the
     * backend's default; only backends with `threaded` use it. */
    dd_status (*linear_host)(const dd_linear_args *a, int variant, int threads, dd_error *err);
    dd_status (*attend_host)(const dd_attend_args *a, int variant, int threads, dd_error *err);
    /* SPEC §3 sampling of n rows of V logits where the backend computes (cuda: on the device), for the bit-identity
     * test against dd_sample_core; NULL when the backend samples with dd_sample_core on the host. */
    dd_status (*sample_host)(const float *logits, int n, int V, float T, int K, const uint64_t *seeds,
                             const uint64_t *frames, int level, int32_t *codes, dd_error *err);
    int threaded;      /* host worker threads: results must not depend on their count (the kernel tests run 1 and 2) */
    int linear_ext;    /* linear_host also takes T > 32 and a broadcast add (lda 0), beyond the kernels.h contract */
    int exact_logits;  /* a stream's logits (not only its codes) are bit-identical whatever the batch, row, threads */
    int host_memory;   /* the decoder's state lives in host memory (the RLIMIT_AS out-of-memory tests apply) */
} dd_backend_test;

typedef struct dd_backend_row {
    dd_backend_info info;    /* the public face: id, name, bandwidth method, demo frames */
    const dd_backend_vt *vt; /* NULL: not built into this library */
    const char *absent;      /* vt NULL: why, after "backend NAME: " ("this build has no CUDA backend (...)") */
    /* DD_OK when the backend can run here, else DD_EUNSUPPORTED with a message naming the backend and why ("backend
     * cuda: no CUDA device is available"); err may be NULL. NULL: it can always run when built. */
    dd_status (*probe)(dd_error *err);
    /* The read bandwidth dd_measure_read_bandwidth reports for it (info.bandwidth_method says how): bytes 0 = its
     * default measure; else over a buffer of that size (dd_measure_read_bandwidth_size; DD_EUNSUPPORTED where the
     * backend does not measure that). */
    dd_status (*read_bandwidth)(int threads, uint64_t bytes, double *gbps, dd_error *err);
    dd_backend_test test;
} dd_backend_row;

/* The table, slowest first: the oracle (ref) is row 0 and auto picks the last available row. */
extern const dd_backend_row dd_registry[];
extern const int dd_registry_count;

/* The row of b; NULL for DD_BACKEND_AUTO or an unknown value. */
const dd_backend_row *dd_registry_row(dd_backend b);
/* 1 when row has a vtable and its probe passes. */
int dd_registry_usable(const dd_backend_row *row);
/* The row a decoder asked for `b` runs on: b's own, or for DD_BACKEND_AUTO the last usable row. DD_EUNSUPPORTED
 * ("backend cuda: no CUDA device is available", "backend NAME: not built into this library") when there is none. */
dd_status dd_registry_pick(dd_backend b, const dd_backend_row **out, dd_error *err);

/* ---- what the rows bind, defined in each backend's own files --------------------------------------------------- */

extern const dd_backend_vt dd_ref_backend; /* ref.c */
/* bandwidth.c: a multi-threaded streaming read of a host buffer of `bytes` (0: 1 GiB; else at least 1 MiB, re-read
 * so that each timed repetition covers >= 1 GiB), threads 0 = one per core, best of 5 */
dd_status dd_host_read_bandwidth(int threads, uint64_t bytes, double *gbps, dd_error *err);
#ifdef DD_WITH_CPU
extern const dd_backend_vt dd_cpu_backend; /* cpu/cpu.c; the rest of its interface is cpu/cpu.h */
#endif

#endif
