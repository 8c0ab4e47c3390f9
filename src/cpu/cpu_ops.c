/* The CPU backend's drivers: instruction-set selection, and the fused linear and attention of src/kernels.h run
 * over the thread pool with the leaf kernels of the chosen dd_cpu_kern table (cpu.h).
 *
 * Work split (one fork-join per call, nothing allocated): work items are claimed in order from an atomic
 * counter by whichever thread is free, so a thread that shares its core with another process does less work
 * instead of holding up the join; which thread computes an output never changes its value.
 *   linear   output columns N in chunks of whole tiles (kern.nr rows; ~8 chunks per thread); a thread streams
 *            the rows of W of its chunk once and, for every tile, runs the T activation rows through it in
 *            chunks of kern.tr (the tile stays in L1/L2 across them, so a batch of B streams reads each weight
 *            from memory once per pass).
 *   attend   (stream, kv head) units, one at a time.
 */
#include "cpu.h"
#include "util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- instruction-set selection ---------------------------------------------------------------------------- */

static const dd_cpu_kern *const isa_table[DD_CPU_NISA] = {
    [DD_CPU_GENERIC] = &dd_cpu_kern_generic,
    [DD_CPU_AVX2] = &dd_cpu_kern_avx2,
    [DD_CPU_AVX512] = &dd_cpu_kern_avx512,
};

static const char *const isa_names[DD_CPU_NISA] = {"generic", "avx2", "avx512"};

const char *dd_cpu_isa_name(dd_cpu_isa isa) {
    return (unsigned)isa < DD_CPU_NISA ? isa_names[isa] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
/* F16C from CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"). */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* What the CPU (and the OS: __builtin_cpu_supports checks XCR0 for the AVX/AVX-512 register state) can run. */
static int cpu_has(dd_cpu_isa isa) {
    switch (isa) {
    case DD_CPU_GENERIC: return 1;
#if defined(__x86_64__) || defined(__i386__)
    case DD_CPU_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case DD_CPU_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && has_f16c();
#endif
    default: return 0;
    }
}

int dd_cpu_isa_supported(dd_cpu_isa isa) {
    if ((unsigned)isa >= DD_CPU_NISA || !isa_table[isa]->name) return 0;
    return cpu_has(isa);
}

const dd_cpu_kern *dd_cpu_kernels_for(dd_cpu_isa isa) {
    return dd_cpu_isa_supported(isa) ? isa_table[isa] : NULL;
}

/* Read at each call (a decoder's creation), never cached: no process-global state. */
const dd_cpu_kern *dd_cpu_kernels(void) {
    const char *env = getenv("DD_CPU_ISA");
    for (int i = 0; env && i < DD_CPU_NISA; i++)
        if (strcmp(env, isa_names[i]) == 0 && dd_cpu_isa_supported((dd_cpu_isa)i)) return isa_table[i];
    for (int i = DD_CPU_NISA - 1; i > 0; i--)
        if (dd_cpu_isa_supported((dd_cpu_isa)i)) return isa_table[i];
    return isa_table[DD_CPU_GENERIC];
}

/* ---- linear ----------------------------------------------------------------------------------------------- */

/* Epilogue of one tile: columns j0 .. j0+nc-1 of rows t0 .. t0+tc-1 of y, from the gate/plain sums acc and the
 * up sums acc2 (SwiGLU). h = act(a + bias) then y = h (+ residual) (+ add), in that order. */
static void epilogue(const dd_cpu_linear *L, const dd_linear_seg *sg, int64_t jl, int64_t jg, int t0, int tc, int nc,
                     float *acc, float *acc2) {
    const dd_cpu_kern *kn = L->kern;
    /* the tile's rows are acc[t * ACC_LD + r], r < nc: bias per row, then the activation over the whole block in
     * one vector call (the lanes r >= nc hold leftovers of earlier tiles: computed on, never stored) */
    const int span = (tc - 1) * DD_CPU_ACC_LD + nc;
    for (int t = 0; t < tc; t++) {
        float *a = acc + t * DD_CPU_ACC_LD, *u = acc2 + t * DD_CPU_ACC_LD;
        if (sg->bias)
            for (int r = 0; r < nc; r++) a[r] += sg->bias[jl + r];
        if (L->a.act == DD_ACT_SWIGLU && sg->bias2)
            for (int r = 0; r < nc; r++) u[r] += sg->bias2[jl + r];
    }
    if (L->a.act == DD_ACT_GELU) kn->gelu(acc, span);
    else if (L->a.act == DD_ACT_SWIGLU) kn->swiglu(acc, acc2, span);
    for (int t = 0; t < tc; t++) {
        float *a = acc + t * DD_CPU_ACC_LD;
        size_t row = (size_t)(t0 + t);
        float *y = L->a.y + row * L->a.ldy + jg;
        if (L->a.residual) {
            const float *res = L->a.residual + row * L->a.ldr + jg;
            for (int r = 0; r < nc; r++) a[r] += res[r];
        }
        if (L->a.add) {
            const float *ad = L->a.add + row * L->a.lda + jg;
            for (int r = 0; r < nc; r++) a[r] += ad[r];
        }
        memcpy(y, a, (size_t)nc * sizeof(float));
    }
}

/* Software prefetch distance of the dot tiles, in tiles (see dd_cpu_kern.dot). Only the first row chunk of a
 * tile prefetches (later chunks reuse the tile from cache), and only while the prefetched tile is still this
 * thread's. */
#ifndef PF_TILES
#define PF_TILES 2
#endif
#ifndef CHUNKS_PER_THREAD
#define CHUNKS_PER_THREAD 8
#endif

/* Rows [j0, j1) of the concatenated output columns (global numbering over the segments), every row of x. */
static void linear_rows(const dd_cpu_linear *L, const float *x, size_t ldx, int64_t j0, int64_t j1, float *acc,
                        float *acc2) {
    const dd_cpu_kern *kn = L->kern;
    const int nr = kn->nr, trm = kn->tr;
    int64_t base = 0;
    for (int s = 0; s < L->a.nseg && base < j1; s++) {
        const dd_linear_seg *sg = &L->a.seg[s];
        int64_t n = sg->w->rows;
        int64_t a = j0 > base ? j0 - base : 0, b = j1 - base < n ? j1 - base : n;
        for (int64_t j = a; j < b; j += nr) {
            int nc = b - j < nr ? (int)(b - j) : nr;
            for (int t0 = 0; t0 < L->a.T; t0 += trm) {
                int tc = L->a.T - t0 < trm ? L->a.T - t0 : trm;
                const float *xt = x + (size_t)t0 * ldx;
                int pf = t0 == 0 && j + (int64_t)nr * (PF_TILES + 1) <= b ? PF_TILES : 0;
                kn->dot(acc, xt, ldx, tc, sg->w, j, nc, pf);
                if (L->a.act == DD_ACT_SWIGLU) kn->dot(acc2, xt, ldx, tc, sg->w2, j, nc, pf);
                epilogue(L, sg, j, base + j, t0, tc, nc, acc, acc2);
            }
        }
        base += n;
    }
}

/* One run of a linear: the output rows in `nchunks` chunks of `chunk` rows, claimed in order from `next` by
 * whichever thread is free (dynamic: a thread slowed down by another process on its core does less, instead of
 * holding up the join). Which thread computes a row never changes its value. */
typedef struct linear_run {
    const dd_cpu_linear *L;
    int64_t N, chunk;
    int nchunks;
    atomic_int next;
} linear_run;

static void linear_job(void *ctx, int tid, int nth) {
    (void)nth;
    linear_run *R = ctx;
    const dd_cpu_linear *L = R->L;
    int c = atomic_fetch_add_explicit(&R->next, 1, memory_order_relaxed);
    if (c >= R->nchunks) return;
    const float *x = L->a.x;
    size_t ldx = (size_t)L->a.ldx;
    const int64_t K = L->a.seg[0].w->cols;
    if (L->a.norm != DD_NORM_NONE) {
        /* the prologue: this thread's own normalized copy of the T rows (L1/L2-resident) */
        float *s = L->scratch[tid];
        for (int t = 0; t < L->a.T; t++)
            L->kern->norm_row(s + (size_t)t * K, L->a.x + (size_t)t * L->a.ldx, (int)K, L->a.norm, L->a.norm_w, L->a.norm_b,
                              L->a.eps);
        x = s;
        ldx = (size_t)K;
    }
    float acc[DD_CPU_TR_MAX * DD_CPU_ACC_LD] = {0}, acc2[DD_CPU_TR_MAX * DD_CPU_ACC_LD] = {0};
    for (; c < R->nchunks; c = atomic_fetch_add_explicit(&R->next, 1, memory_order_relaxed)) {
        int64_t j0 = (int64_t)c * R->chunk, j1 = j0 + R->chunk < R->N ? j0 + R->chunk : R->N;
        linear_rows(L, x, ldx, j0, j1, acc, acc2);
    }
}

void dd_cpu_linear_run(dd_cpu_pool *pool, const dd_cpu_linear *L) {
    const int nr = L->kern->nr, nth = dd_cpu_pool_threads(pool);
    linear_run R = {.L = L};
    for (int s = 0; s < L->a.nseg; s++) R.N += L->a.seg[s].w->rows;
    /* about CHUNKS_PER_THREAD chunks per thread, at least 4 tiles each */
    int64_t tiles = (R.N + nr - 1) / nr, per = (tiles + CHUNKS_PER_THREAD * nth - 1) / (CHUNKS_PER_THREAD * nth);
    if (per < 4) per = 4;
    R.chunk = per * nr;
    R.nchunks = (int)((R.N + R.chunk - 1) / R.chunk);
    atomic_init(&R.next, 0);
    dd_cpu_pool_run(pool, linear_job, &R);
}

/* ---- attention -------------------------------------------------------------------------------------------- */

dd_status dd_cpu_rope_tables(float *cos_t, float *sin_t, const double *inv_freq, int HD, int npos, dd_error *err) {
    const size_t n = (size_t)npos * (HD / 2);
    double *cs = malloc(2 * n * sizeof(double) + 1);
    if (!cs) return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory for the RoPE table");
    dd_rope_table(cs, inv_freq, HD, npos);
    for (size_t i = 0; i < n; i++) {
        cos_t[i] = (float)cs[2 * i];
        sin_t[i] = (float)cs[2 * i + 1];
    }
    free(cs);
    return DD_OK;
}

/* HF "rotate half" on one head vector: out[j] = x0 c - x1 s, out[j + HD/2] = x1 c + x0 s, x0 = v[j],
 * x1 = v[j + HD/2]. out may alias v only when it is v. */
static void rope_head(float *out, const float *v, int HD, const float *c, const float *s) {
    int h = HD / 2;
    for (int j = 0; j < h; j++) {
        float x0 = v[j], x1 = v[j + h];
        float a = x0 * c[j], b = x1 * s[j], e = x1 * c[j], f = x0 * s[j];
        out[j] = a - b;
        out[j + h] = e + f;
    }
}

/* Qwen3's per-head q/k norm: out = v rsqrt(mean(v^2) + eps) w over HD (double sum: HD <= 512 terms, off the
 * matrix path) */
static void qk_rms(float *out, const float *v, int HD, const float *w, float eps) {
    double ss = 0;
    for (int i = 0; i < HD; i++) ss += (double)v[i] * v[i];
    const float inv = (float)(1.0 / sqrt(ss / HD + (double)eps));
    for (int i = 0; i < HD; i++) out[i] = v[i] * inv * w[i];
}

typedef struct attend_run {
    const dd_cpu_attend *A;
    atomic_int next;
} attend_run;

static void attend_job(void *ctx, int tid, int nth) {
    (void)tid;
    (void)nth;
    attend_run *R = ctx;
    const dd_cpu_attend *A = R->A;
    const int H = A->a.H, KV = A->a.KVH, HD = A->a.HD, grp = H / KV, half = HD / 2;
    const size_t kvw = (size_t)KV * HD;
    const float scale = (float)(1.0 / sqrt((double)HD));
    const int U = A->a.B * KV;
    float qr[DD_MAX_HEAD_DIM], qn[DD_MAX_HEAD_DIM], kt[DD_MAX_HEAD_DIM];
    for (int u = atomic_fetch_add_explicit(&R->next, 1, memory_order_relaxed); u < U;
         u = atomic_fetch_add_explicit(&R->next, 1, memory_order_relaxed)) {
        int s = u / KV, kh = u % KV;
        float *kc = A->a.kcache + (size_t)s * A->a.ldc, *vc = A->a.vcache + (size_t)s * A->a.ldc;
        for (int t = 0; t < A->a.P; t++) {
            const float *row = A->a.qkv + ((size_t)s * A->a.P + t) * A->a.ldq;
            int p = A->a.p0 + t;
            float *kd = kc + (size_t)p * kvw + (size_t)kh * HD, *vd = vc + (size_t)p * kvw + (size_t)kh * HD;
            const float *kn = row + (size_t)(H + kh) * HD, *vn = row + (size_t)(H + KV + kh) * HD;
            if (A->a.k_norm) {
                qk_rms(kt, kn, HD, A->a.k_norm, A->a.qk_eps);
                kn = kt;
            }
            if (A->cos) rope_head(kd, kn, HD, A->cos + (size_t)p * half, A->sin + (size_t)p * half);
            else memcpy(kd, kn, (size_t)HD * sizeof(float));
            memcpy(vd, vn, (size_t)HD * sizeof(float));
        }
        for (int h = kh * grp; h < (kh + 1) * grp; h++)
            for (int t = 0; t < A->a.P; t++) {
                size_t r = (size_t)s * A->a.P + t;
                int p = A->a.p0 + t;
                const float *q = A->a.qkv + r * A->a.ldq + (size_t)h * HD;
                if (A->a.q_norm) {
                    qk_rms(qn, q, HD, A->a.q_norm, A->a.qk_eps);
                    q = qn;
                }
                if (A->cos) {
                    rope_head(qr, q, HD, A->cos + (size_t)p * half, A->sin + (size_t)p * half);
                    q = qr;
                }
                A->kern->attend_row(A->a.out + r * A->a.ldo + (size_t)h * HD, q, kc + (size_t)kh * HD,
                                    vc + (size_t)kh * HD, kvw, p + 1, HD, scale);
            }
    }
}

void dd_cpu_attend_run(dd_cpu_pool *pool, const dd_cpu_attend *A) {
    attend_run R = {.A = A};
    atomic_init(&R.next, 0);
    dd_cpu_pool_run(pool, attend_job, &R);
}

/* ---- test entry points ------------------------------------------------------------------------------------ */

static dd_status host_kern(int isa, const dd_cpu_kern **k, dd_error *err) {
    *k = isa < 0 ? dd_cpu_kernels() : dd_cpu_kernels_for((dd_cpu_isa)isa);
    if (!*k) return dd_fail(err, DD_EUNSUPPORTED, "cpu kernels: instruction set %s not available here",
                            dd_cpu_isa_name((dd_cpu_isa)isa));
    return DD_OK;
}

dd_status dd_cpu_linear_host(const dd_linear_args *a, int isa, int threads, dd_error *err) {
    const dd_cpu_kern *k;
    dd_status st = host_kern(isa, &k, err);
    if (st) return st;
    int ok_args = a && a->y && a->x && a->T >= 1 && a->nseg >= 1 && a->nseg <= DD_LINEAR_SEGS;
    for (int i = 0; ok_args && i < a->nseg; i++)
        ok_args = a->seg[i].w && a->seg[i].w->cols == a->seg[0].w->cols && (a->act != DD_ACT_SWIGLU || a->seg[i].w2);
    if (!ok_args) return dd_fail(err, DD_EINVAL, "dd_cpu_linear_host: bad arguments");
    dd_cpu_pool *pool;
    if ((st = dd_cpu_pool_create(&pool, dd_cpu_default_threads(threads), err))) return st;
    int nth = dd_cpu_pool_threads(pool);
    size_t per = (size_t)a->T * (size_t)a->seg[0].w->cols;
    float **scr = calloc((size_t)nth, sizeof *scr);
    int ok = scr != NULL;
    for (int i = 0; ok && i < nth; i++) ok = (scr[i] = malloc(per * sizeof(float))) != NULL;
    if (ok) {
        dd_cpu_linear L = {.a = *a, .kern = k, .scratch = scr};
        dd_cpu_linear_run(pool, &L);
    }
    for (int i = 0; scr && i < nth; i++) free(scr[i]);
    free(scr);
    dd_cpu_pool_free(pool);
    return ok ? DD_OK : dd_fail(err, DD_ENOMEM, "dd_cpu_linear_host: out of memory");
}

dd_status dd_cpu_attend_host(const dd_attend_args *a, int isa, int threads, dd_error *err) {
    const dd_cpu_kern *k;
    dd_status st = host_kern(isa, &k, err);
    if (st) return st;
    if (!a || !a->out || !a->kcache || !a->vcache || !a->qkv || a->B < 1 || a->P < 1 || a->p0 < 0 ||
        a->p0 + a->P > DD_MAX_LEVELS || a->KVH < 1 || a->H % a->KVH || a->HD < 1 || a->HD > DD_MAX_HEAD_DIM ||
        (a->inv_freq && a->HD % 2) || a->ldo < a->H * a->HD || a->ldq < (a->H + 2 * a->KVH) * a->HD)
        return dd_fail(err, DD_EINVAL, "dd_cpu_attend_host: bad arguments");
    int npos = a->p0 + a->P, half = a->HD / 2;
    float *ct = NULL, *stb = NULL;
    if (a->inv_freq) {
        ct = malloc((size_t)npos * half * sizeof(float) + 1);
        stb = malloc((size_t)npos * half * sizeof(float) + 1);
        if (!ct || !stb) {
            free(ct);
            free(stb);
            return dd_fail(err, DD_ENOMEM, "dd_cpu_attend_host: out of memory");
        }
        if ((st = dd_cpu_rope_tables(ct, stb, a->inv_freq, a->HD, npos, err))) {
            free(ct);
            free(stb);
            return st;
        }
    }
    dd_cpu_pool *pool;
    if ((st = dd_cpu_pool_create(&pool, dd_cpu_default_threads(threads), err))) {
        free(ct);
        free(stb);
        return st;
    }
    dd_cpu_attend A = {.a = *a, .cos = ct, .sin = stb, .kern = k};
    dd_cpu_attend_run(pool, &A);
    dd_cpu_pool_free(pool);
    free(ct);
    free(stb);
    return DD_OK;
}
