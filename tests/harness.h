/* The harness every test program shares (the Makefile links every .c file of tests/ that is not a test_
 * program into each test program): the run's seed and random inputs, output poisoning, the tolerance rule,
 * scratch files, and the kernel harness proper — test weights in every storage type with their exact values,
 * and the float64 reference maths of the src/kernels.h contracts (linear, attend) that test_kernels.c (every CPU
 * instruction set, and CUDA when present) and test_cuda.c judge their kernels with.
 *
 * Seeds: every run draws a fresh seed (from /dev/urandom) unless DD_TEST_SEED=<n> is set, and prints it, so a
 * failure can be replayed. Poisoning: outputs are NaN-filled before the code under test runs, so an element it
 * does not write fails every comparison. Include after <cmocka.h>. */
#ifndef DD_TESTS_HARNESS_H
#define DD_TESTS_HARNESS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "registry.h"

/* ---- backends: the registry's rows (src/registry.h), as every test program walks them ------------------- */

/* One way to run one backend: a registry row and, for a backend with variants (cpu: instruction sets), which. */
typedef struct th_variant {
    const dd_backend_row *row;
    int v;         /* the variant, for row->test.use_variant / linear_host ...; 0 for a backend without variants */
    char name[32]; /* "cuda", "cpu-avx2" */
} th_variant;

/* Every (backend, variant) of the registry that can run here, in table order, into out[0 .. cap): the oracle too
 * when with_oracle. Prints one "skipped" line, saying why, for each backend or variant that cannot. Returns the
 * count. */
int th_variants(th_variant *out, int cap, int with_oracle);
/* A decoder of backend b (dd_decoder_create; fails the test on error), set to variant v when v >= 0 and the
 * backend has variants. */
dd_decoder *th_decoder(const dd_model *m, dd_backend b, int v, int max_batch, int threads);

/* ---- seeds and random inputs (splitmix64) ------------------------------------------------------------------ */

/* The run's seed (DD_TEST_SEED=<n>, else fresh), printed as "<prog>: seed N (DD_TEST_SEED=N replays)"; the
 * generator starts at it. Call once, first thing in main. */
uint64_t th_seed_init(const char *prog);
/* A cmocka setup: the generator restarts at the run's seed, so each test replays on its own (when run alone
 * through a filter, or when an earlier test drew a different amount). */
int th_reseed(void **state);

uint64_t rnd64(void);
double rnd_unif(void);        /* [0, 1) */
float rnd_sym(float a);       /* [-a, a) */
int rnd_below(int n);         /* [0, n), n >= 1 (modulo bias irrelevant here) */
float *th_rand_vec(size_t n, float a); /* n values in [-a, a) (a valid pointer when n is 0); free() it */
int32_t *th_rand_codes(const dd_model *m, int n, int per_row); /* n rows of random codes < codebook_size */

/* ---- poisoning --------------------------------------------------------------------------------------------- */

void th_poison(float *p, size_t n); /* p[0 .. n) = NaN */

static inline uint32_t th_bits(float f) { /* bit-identity comparisons */
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- tolerances -------------------------------------------------------------------------------------------- */

/* One rule for every float32 output checked against a float64 reference: |got - want| <= atol + rtol * scale,
 * where scale is |want|, or for a sum computed in float32 the sum of the absolute values of the terms plus
 * |want| (the scale of float32 accumulation error). One pair of constants per kind of output: every weight
 * type (f32, f16, bf16, MLX q8 / q4) is widened to float32 exactly, so only the float32 arithmetic differs and
 * the weight dtype does not change the rule. NaN never passes. */
typedef struct th_tol {
    double atol, rtol;
} th_tol;

/* linear (kernels.h): scale = sum |terms| + |want| */
#define TH_TOL_LINEAR ((th_tol){1e-6, 4e-6})
/* attend output: scale = |want| (a softmax-weighted mean of float32 values) */
#define TH_TOL_ATTEND ((th_tol){3e-6, 1e-5})
/* attend's cache rows: k rotated by RoPE (one rotation in float32), scale = |want|; v rows are copied exactly */
#define TH_TOL_ROPE ((th_tol){1e-6, 1e-6})
/* end to end through the public API against the ref backend (the fixture threshold): every teacher-forced
 * logit within TH_LOGIT_REL * max |ref logit|; decoded codes identical on >= TH_CODES_SAME of the (stream,
 * level) pairs (SPEC: a float32 near-tie may flip a code now and then, never systematically) */
#define TH_LOGIT_REL 1e-4
#define TH_CODES_SAME 0.999

static inline double th_tol_at(th_tol t, double scale) { return t.atol + t.rtol * scale; }
static inline int th_within(double got, double want, double scale, th_tol t) {
    return fabs(got - want) <= th_tol_at(t, scale);
}

/* ---- scratch files ----------------------------------------------------------------------------------------- */

extern char th_dir[64]; /* this program's scratch directory (th_tmpdir) */

int th_tmpdir(const char *tag); /* mkdtemp /tmp/dd_<tag>_XXXXXX into th_dir; 0 on success */
int th_rm_rf(const char *path); /* remove a file or a directory tree; 0 on success */
/* buf = th_dir "/" printf(fmt, ...) */
__attribute__((format(printf, 3, 4))) void th_path(char *buf, size_t cap, const char *fmt, ...);
#define TH_PATH(buf, ...) th_path(buf, sizeof buf, __VA_ARGS__)
void th_write_bytes(const char *path, const void *p, size_t n); /* fails the test on any error */
uint8_t *th_slurp(const char *path, size_t *n);                 /* the whole file (NUL appended); free() it */
double th_now(void);                                            /* monotonic seconds */

/* ---- test weights -------------------------------------------------------------------------------------------- */

/* A rows x cols dd_weight in any storage type with random values, plus the exact value of every element. */
typedef struct th_weight {
    dd_weight w;
    double *val; /* [rows, cols] the values the storage holds, exactly */
    uint8_t *alloc[3];
} th_weight;

/* Values ~ a: dense types uniform in [-a, a) then rounded to the type; MLX q8 / q4 (group `group`, scales and
 * biases of type sbt) random codes with scales and biases such that w = s q + b spans about [-a, a]. Every buffer
 * starts `mis` bytes past an aligned address (0 .. 7: misaligned weights). */
void th_weight_make(th_weight *t, dd_dtype type, int64_t rows, int64_t cols, int group, dd_dtype sbt, float a,
                    int mis);
void th_weight_free(th_weight *t);

/* ---- linear: one case of the src/kernels.h contract with its float64 reference ---------------------------- */

typedef struct th_lcase {
    int T, N, K;
    dd_dtype type;
    int group;    /* quantized types */
    dd_dtype sbt; /* quantized types: the scales' and biases' type */
    int norm, norm_bias, act, bias, res, inplace, add, add_bcast, pad, mis;
} th_lcase;

/* A shape and weight type with random prologue / epilogue options: norm (none, LayerNorm with or without bias,
 * RMS), activation, bias, residual (separate or in place), a constant add (per row or broadcast: lda 0), padded
 * row strides, misaligned weights. */
th_lcase th_lcase_rand(int T, int N, int K, dd_dtype type, int group, dd_dtype sbt);

typedef struct th_linear {
    th_lcase c;
    int ldx, ldy, ldr, lda; /* row strides: wider than the rows when c.pad; lda 0 for a broadcast add */
    th_weight w, w2;        /* w2: the SwiGLU "up" matrix */
    float *x, *bias, *bias2, *norm_w, *norm_b, *res, *add;
    float eps;
    double *want, *mag; /* [T, N] the contract in float64, and the sum of |terms| behind each element */
} th_linear;

/* Random inputs for case c (x with an offset and a scale so the LayerNorm mean matters) and the reference. */
void th_linear_make(th_linear *L, const th_lcase *c);
/* The arguments of one run into y (T rows of stride ldy): y is poisoned first; with an in-place residual y then
 * holds the residual and the arguments' residual is y. */
dd_linear_args th_linear_args(const th_linear *L, float *y);
/* y against the reference under TH_TOL_LINEAR (printing up to 3 failures, labelled `who`), and the stride
 * padding of y still NaN. Returns the number of failures; *worst keeps the largest error / tolerance seen. */
int th_linear_check(const th_linear *L, const float *y, const char *who, double *worst);
void th_linear_free(th_linear *L);

/* ---- attend: one case of the src/kernels.h contract with its float64 reference ---------------------------- */

typedef struct th_attend {
    int T, p0, H, KVH, HD, rope;
    int qk;                       /* Qwen3's per-head q/k RMSNorm before RoPE (weights qn, kn [HD], eps 1e-6) */
    float *qn, *kn;
    int Q, kvw, qw;               /* p0 + T cache rows of width kvw = KVH HD; qkv rows of width qw */
    double inv_freq[DD_MAX_HEAD_DIM / 2];
    float *qkv, *kc0, *vc0;       /* the new rows; the cache (rows 0 .. p0-1 are the cached positions) */
    double *kr, *vr, *want;       /* reference: every cache row (k rotated), the outputs (T, H HD) */
} th_attend;

/* Random inputs (values in [-1, 1)) and the reference: RoPE with base theta when rope, new k / v rows written,
 * causal softmax attention, all in float64. Needs p0 + T <= DD_MAX_LEVELS. */
void th_attend_make(th_attend *A, int T, int p0, int H, int KVH, int HD, int rope, double theta);
/* The same with q/k norms when qk (random weights near 1) */
void th_attend_make_qk(th_attend *A, int T, int p0, int H, int KVH, int HD, int rope, double theta, int qk);
/* The arguments of one run: out and the cache rows to be written are poisoned, rows 0 .. p0-1 hold the cache. */
dd_attend_args th_attend_args(const th_attend *A, float *out, float *kcache, float *vcache);
/* out under TH_TOL_ATTEND, the new cache rows (k under TH_TOL_ROPE, v exact), the cached rows unchanged.
 * Prints up to 3 failures labelled `who`; returns the number of failures; *worst keeps the largest absolute
 * error of out. */
int th_attend_check(const th_attend *A, const float *out, const float *kcache, const float *vcache,
                    const char *who, double *worst);
void th_attend_free(th_attend *A);

#endif
