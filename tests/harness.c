/* The shared test harness (harness.h): seeds, poisoning, scratch files, test weights, and the float64 reference
 * maths of the src/kernels.h contracts, written from the contract text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "util.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- seeds and random inputs ------------------------------------------------------------------------------- */

static uint64_t g_seed, g_rng;

uint64_t th_seed_init(const char *prog) {
    const char *env = getenv("DD_TEST_SEED");
    if (env && *env) {
        g_seed = strtoull(env, NULL, 0);
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&g_seed, sizeof g_seed, 1, f) != 1)
            g_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (f) fclose(f);
    }
    printf("%s: seed %" PRIu64 " (DD_TEST_SEED=%" PRIu64 " replays)\n", prog, g_seed, g_seed);
    fflush(stdout);
    g_rng = g_seed;
    return g_seed;
}

int th_reseed(void **state) {
    (void)state;
    g_rng = g_seed;
    return 0;
}

uint64_t rnd64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double rnd_unif(void) { return (double)(rnd64() >> 11) * 0x1p-53; }
float rnd_sym(float a) { return (float)((2 * rnd_unif() - 1) * a); }
int rnd_below(int n) { return (int)(rnd64() % (uint64_t)n); }

float *th_rand_vec(size_t n, float a) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = rnd_sym(a);
    return v;
}

int32_t *th_rand_codes(const dd_model *m, int n, int per_row) {
    int V = dd_model_config(m)->codebook_size;
    int32_t *c = malloc(((size_t)n * per_row + 1) * sizeof(int32_t));
    assert_non_null(c);
    for (size_t i = 0; i < (size_t)n * per_row; i++) c[i] = (int32_t)(rnd64() % (uint64_t)V);
    return c;
}

void th_poison(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* ---- scratch files ----------------------------------------------------------------------------------------- */

char th_dir[64];

int th_tmpdir(const char *tag) {
    snprintf(th_dir, sizeof th_dir, "/tmp/dd_%s_XXXXXX", tag);
    return mkdtemp(th_dir) ? 0 : -1;
}

int th_rm_rf(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return -1;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(p);
        if (!d) return -1;
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[512];
            snprintf(sub, sizeof sub, "%s/%s", p, e->d_name);
            th_rm_rf(sub);
        }
        closedir(d);
        return rmdir(p);
    }
    return unlink(p);
}

void th_path(char *buf, size_t cap, const char *fmt, ...) {
    int k = snprintf(buf, cap, "%s/", th_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, cap - (size_t)k, fmt, ap);
    va_end(ap);
}

void th_write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("%s: cannot create", path);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

uint8_t *th_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    uint8_t *p = malloc((size_t)sz + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    p[sz] = 0;
    *n = (size_t)sz;
    return p;
}

double th_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- test weights -------------------------------------------------------------------------------------------- */

static void sb_store(dd_dtype t, uint8_t *p, float v) {
    if (t == DD_F32) {
        memcpy(p, &v, 4);
    } else {
        uint16_t h = t == DD_F16 ? dd_f32_to_f16(v) : dd_f32_to_bf16(v);
        memcpy(p, &h, 2);
    }
}

static float sb_load(dd_dtype t, const uint8_t *p) {
    if (t == DD_F32) return dd_ldf32(p);
    uint16_t h = dd_ld16(p);
    return t == DD_F16 ? dd_f16_to_f32(h) : dd_bf16_to_f32(h);
}

void th_weight_make(th_weight *t, dd_dtype type, int64_t rows, int64_t cols, int group, dd_dtype sbt, float a,
                    int mis) {
    memset(t, 0, sizeof *t);
    t->val = malloc((size_t)(rows * cols) * sizeof(double));
    assert_non_null(t->val);
    dd_weight *w = &t->w;
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    if (type == DD_F32 || type == DD_F16 || type == DD_BF16) {
        w->row_bytes = (size_t)cols * dd_dtype_size(type);
        t->alloc[0] = malloc(w->row_bytes * rows + 8);
        assert_non_null(t->alloc[0]);
        uint8_t *d = t->alloc[0] + mis;
        w->data = d;
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = rnd_sym(a);
            sb_store(type, d + (size_t)i * dd_dtype_size(type), v);
            t->val[i] = sb_load(type, d + (size_t)i * dd_dtype_size(type));
        }
        return;
    }
    int bits = type == DD_Q8 ? 8 : 4, ng = (int)(cols / group);
    size_t ses = dd_dtype_size(sbt);
    w->group = group;
    w->sb_type = sbt;
    w->row_bytes = (size_t)cols * bits / 8;
    w->sb_row_bytes = (size_t)ng * ses;
    for (int i = 0; i < 3; i++) {
        t->alloc[i] = calloc((i ? w->sb_row_bytes : w->row_bytes) * rows + 8, 1);
        assert_non_null(t->alloc[i]);
    }
    uint8_t *d = t->alloc[0] + mis, *sc = t->alloc[1] + mis, *bi = t->alloc[2] + mis;
    w->data = d;
    w->scales = sc;
    w->biases = bi;
    float qmax = (float)((1 << bits) - 1);
    for (int64_t r = 0; r < rows; r++)
        for (int g = 0; g < ng; g++) {
            /* w = s q + b spans about [-a, a] */
            sb_store(sbt, sc + (size_t)r * w->sb_row_bytes + g * ses, (float)(2 * a / qmax * (0.5 + rnd_unif())));
            sb_store(sbt, bi + (size_t)r * w->sb_row_bytes + g * ses, rnd_sym(a) - a * 0.5f);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            uint32_t q = (uint32_t)rnd_below(1 << bits);
            int64_t bit = k * bits;
            d[(size_t)r * w->row_bytes + bit / 8] |= (uint8_t)(q << (bit % 8));
            int g = (int)(k / group);
            float s = sb_load(sbt, sc + (size_t)r * w->sb_row_bytes + g * ses);
            float b = sb_load(sbt, bi + (size_t)r * w->sb_row_bytes + g * ses);
            float sq = s * (float)q; /* MLX: fl(fl(s q) + b) */
            t->val[r * cols + k] = (double)(sq + b);
        }
}

void th_weight_free(th_weight *t) {
    free(t->val);
    for (int i = 0; i < 3; i++) free(t->alloc[i]);
}

/* ---- linear ------------------------------------------------------------------------------------------------ */

th_lcase th_lcase_rand(int T, int N, int K, dd_dtype type, int group, dd_dtype sbt) {
    th_lcase c = {.T = T, .N = N, .K = K, .type = type, .group = group, .sbt = sbt};
    c.norm = rnd_below(3);
    c.norm_bias = rnd_below(2);
    c.act = rnd_below(3);
    c.bias = rnd_below(2);
    c.res = rnd_below(2);
    c.inplace = rnd_below(2);
    c.add = rnd_below(3) == 0;
    c.add_bcast = rnd_below(2);
    c.pad = rnd_below(2);
    c.mis = rnd_below(3);
    return c;
}

/* The contract of src/kernels.h in float64: want[t, j] and the sum of |terms| mag[t, j] (GELU and SwiGLU scale
 * the error of their argument by at most ~1.2). */
static void linear_ref(th_linear *L) {
    const th_lcase *c = &L->c;
    const int K = c->K, N = c->N;
    double *n = malloc((size_t)K * sizeof(double));
    assert_non_null(n);
    for (int t = 0; t < c->T; t++) {
        const float *xt = L->x + (size_t)t * L->ldx;
        double mean = 0, var = 0;
        if (c->norm == DD_NORM_LAYER) {
            for (int k = 0; k < K; k++) mean += xt[k];
            mean /= K;
        }
        for (int k = 0; k < K; k++) var += (xt[k] - mean) * (xt[k] - mean);
        var /= K;
        double inv = 1.0 / sqrt(var + L->eps);
        for (int k = 0; k < K; k++)
            n[k] = c->norm == DD_NORM_NONE ? xt[k]
                                           : (xt[k] - mean) * inv * L->norm_w[k] + (L->norm_b ? L->norm_b[k] : 0.0);
        for (int j = 0; j < N; j++) {
            double a = 0, am = 0, u = 0, um = 0;
            for (int k = 0; k < K; k++) {
                double p = n[k] * L->w.val[(size_t)j * K + k];
                a += p;
                am += fabs(p);
            }
            if (L->bias) {
                a += L->bias[j];
                am += fabs(L->bias[j]);
            }
            double h = a, hm = am;
            if (c->act == DD_ACT_GELU) {
                h = 0.5 * a * erfc(-a / sqrt(2.0)); /* 1 + erf(x) = erfc(-x), without the cancellation */
                hm = 1.2 * am;
            } else if (c->act == DD_ACT_SWIGLU) {
                for (int k = 0; k < K; k++) {
                    double p = n[k] * L->w2.val[(size_t)j * K + k];
                    u += p;
                    um += fabs(p);
                }
                if (L->bias2) {
                    u += L->bias2[j];
                    um += fabs(L->bias2[j]);
                }
                double si = a / (1 + exp(-a));
                h = si * u;
                hm = 1.2 * am * fabs(u) + fabs(si) * um;
            }
            if (L->res) {
                h += L->res[(size_t)t * L->ldr + j];
                hm += fabs(L->res[(size_t)t * L->ldr + j]);
            }
            if (L->add) {
                h += L->add[(size_t)t * L->lda + j];
                hm += fabs(L->add[(size_t)t * L->lda + j]);
            }
            L->want[(size_t)t * N + j] = h;
            L->mag[(size_t)t * N + j] = hm;
        }
    }
    free(n);
}

void th_linear_make(th_linear *L, const th_lcase *c) {
    memset(L, 0, sizeof *L);
    L->c = *c;
    const int T = c->T, N = c->N, K = c->K, swiglu = c->act == DD_ACT_SWIGLU;
    L->ldx = K + (c->pad ? 3 : 0);
    L->ldy = N + (c->pad ? 5 : 0);
    L->ldr = N + (c->pad ? 2 : 0);
    L->lda = c->add_bcast ? 0 : N + (c->pad ? 1 : 0);
    float amp = (float)(1.7 / sqrt((double)K));
    th_weight_make(&L->w, c->type, N, K, c->group, c->sbt, amp, c->mis);
    if (swiglu) th_weight_make(&L->w2, c->type, N, K, c->group, c->sbt, amp, c->mis ? 3 - c->mis : 0);
    /* x with an offset and a scale, so the LayerNorm mean matters */
    L->x = th_rand_vec((size_t)T * L->ldx, 1.0f);
    for (int i = 0; i < T * L->ldx; i++) L->x[i] = L->x[i] * 1.5f + 0.3f;
    L->bias = c->bias ? th_rand_vec(N, 0.5f) : NULL;
    L->bias2 = c->bias && swiglu ? th_rand_vec(N, 0.5f) : NULL;
    L->norm_w = th_rand_vec(K, 0.2f);
    L->norm_b = c->norm == DD_NORM_LAYER && c->norm_bias ? th_rand_vec(K, 0.3f) : NULL;
    for (int k = 0; k < K; k++) L->norm_w[k] += 1.0f;
    L->res = c->res ? th_rand_vec((size_t)T * L->ldr, 1.0f) : NULL;
    L->add = c->add ? th_rand_vec(c->add_bcast ? (size_t)N : (size_t)T * L->lda, 1.0f) : NULL;
    L->eps = 1e-5f;
    L->want = malloc((size_t)T * N * sizeof(double));
    L->mag = malloc((size_t)T * N * sizeof(double));
    assert_true(L->want && L->mag);
    linear_ref(L);
}

dd_linear_args th_linear_args(const th_linear *L, float *y) {
    const th_lcase *c = &L->c;
    th_poison(y, (size_t)c->T * L->ldy);
    const float *r = L->res;
    int ldr = L->ldr;
    if (c->res && c->inplace) { /* residual aliasing y: y starts as the residual (stride ldy) */
        for (int t = 0; t < c->T; t++)
            memcpy(y + (size_t)t * L->ldy, L->res + (size_t)t * L->ldr, (size_t)c->N * sizeof(float));
        r = y;
        ldr = L->ldy;
    }
    const int swiglu = c->act == DD_ACT_SWIGLU;
    return (dd_linear_args){.y = y, .ldy = L->ldy, .x = L->x, .ldx = L->ldx, .T = c->T, .nseg = 1,
                            .seg = {{&L->w.w, swiglu ? &L->w2.w : NULL, L->bias, L->bias2}}, .norm = c->norm,
                            .norm_w = L->norm_w, .norm_b = L->norm_b, .eps = L->eps, .act = c->act,
                            .residual = r, .ldr = ldr, .add = L->add, .lda = L->lda};
}

int th_linear_check(const th_linear *L, const float *y, const char *who, double *worst) {
    const th_lcase *c = &L->c;
    int bad = 0;
    for (int t = 0; t < c->T && bad < 3; t++)
        for (int j = 0; j < c->N && bad < 3; j++) {
            double got = y[(size_t)t * L->ldy + j], want = L->want[(size_t)t * c->N + j];
            double tol = th_tol_at(TH_TOL_LINEAR, L->mag[(size_t)t * c->N + j] + fabs(want));
            if (fabs(got - want) / tol > *worst) *worst = fabs(got - want) / tol;
            if (!(fabs(got - want) <= tol)) {
                printf("  FAIL %s linear T=%d N=%d K=%d %s g%d sb=%s norm=%d nb=%d act=%d bias=%d res=%d/%d "
                       "add=%d/%d pad=%d mis=%d: y[%d,%d] = %.9g, want %.9g (tol %.3g)\n",
                       who, c->T, c->N, c->K, dd_dtype_name(c->type), c->group, dd_dtype_name(c->sbt), c->norm,
                       c->norm_bias, c->act, c->bias, c->res, c->inplace, c->add, c->add_bcast, c->pad, c->mis, t,
                       j, got, want, tol);
                bad++;
            }
        }
    /* stride padding must be left alone (it was NaN, it stays NaN) */
    for (int t = 0; t < c->T && !bad; t++)
        for (int j = c->N; j < L->ldy; j++)
            if (!isnan(y[(size_t)t * L->ldy + j])) {
                printf("  FAIL %s: wrote y[%d,%d] beyond N=%d\n", who, t, j, c->N);
                bad++;
                break;
            }
    return bad;
}

void th_linear_free(th_linear *L) {
    free(L->want);
    free(L->mag);
    free(L->x);
    free(L->bias);
    free(L->bias2);
    free(L->norm_w);
    free(L->norm_b);
    free(L->res);
    free(L->add);
    th_weight_free(&L->w);
    if (L->c.act == DD_ACT_SWIGLU) th_weight_free(&L->w2);
}

/* ---- attend ------------------------------------------------------------------------------------------------ */

void th_attend_make(th_attend *A, int T, int p0, int H, int KVH, int HD, int rope, double theta) {
    th_attend_make_qk(A, T, p0, H, KVH, HD, rope, theta, 0);
}

void th_attend_make_qk(th_attend *A, int T, int p0, int H, int KVH, int HD, int rope, double theta, int qk) {
    memset(A, 0, sizeof *A);
    A->qk = qk;
    if (qk) {
        A->qn = th_rand_vec((size_t)HD, 0.3f);
        A->kn = th_rand_vec((size_t)HD, 0.3f);
        for (int i = 0; i < HD; i++) A->qn[i] += 1.0f, A->kn[i] += 1.0f;
    }
    assert_true(p0 + T <= DD_MAX_LEVELS && HD <= DD_MAX_HEAD_DIM && H % KVH == 0);
    A->T = T, A->p0 = p0, A->H = H, A->KVH = KVH, A->HD = HD, A->rope = rope;
    const int Q = A->Q = p0 + T, kvw = A->kvw = KVH * HD, qw = A->qw = (H + 2 * KVH) * HD, half = HD / 2;
    for (int j = 0; j < half; j++) A->inv_freq[j] = 1.0 / pow(theta, 2.0 * j / HD);
    A->qkv = th_rand_vec((size_t)T * qw, 1.0f);
    A->kc0 = th_rand_vec((size_t)Q * kvw, 1.0f);
    A->vc0 = th_rand_vec((size_t)Q * kvw, 1.0f);
    A->kr = malloc((size_t)Q * kvw * sizeof(double));
    A->vr = malloc((size_t)Q * kvw * sizeof(double));
    double *qr = malloc((size_t)T * H * HD * sizeof(double));
    A->want = malloc((size_t)T * H * HD * sizeof(double));
    assert_true(A->kr && A->vr && qr && A->want);
    double *kr = A->kr, *vr = A->vr;
    for (int i = 0; i < p0 * kvw; i++) {
        kr[i] = A->kc0[i];
        vr[i] = A->vc0[i];
    }
    /* rotate in double, write the new k / v rows */
    for (int t = 0; t < T; t++) {
        int p = p0 + t;
        for (int h = 0; h < H + KVH; h++) {
            const float *vin = A->qkv + (size_t)t * qw + (size_t)h * HD;
            double v[DD_MAX_HEAD_DIM], ss = 0;
            for (int j = 0; j < HD; j++) v[j] = vin[j], ss += v[j] * v[j];
            if (qk) { /* x / sqrt(mean x^2 + eps) * w, before RoPE */
                const float *w = h < H ? A->qn : A->kn;
                const double inv = 1.0 / sqrt(ss / HD + 1e-6);
                for (int j = 0; j < HD; j++) v[j] = v[j] * inv * w[j];
            }
            double *o = h < H ? qr + ((size_t)t * H + h) * HD : kr + (size_t)p * kvw + (size_t)(h - H) * HD;
            for (int j = 0; j < HD; j++) o[j] = v[j];
            if (rope)
                for (int j = 0; j < half; j++) {
                    double c = cos(p * A->inv_freq[j]), s = sin(p * A->inv_freq[j]);
                    o[j] = v[j] * c - v[j + half] * s;
                    o[j + half] = v[j + half] * c + v[j] * s;
                }
        }
        for (int i = 0; i < kvw; i++) vr[(size_t)p * kvw + i] = A->qkv[(size_t)t * qw + (size_t)(H + KVH) * HD + i];
    }
    /* causal softmax attention: query t sees positions 0 .. p0 + t */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / KVH), n = p0 + t + 1;
            double sc[DD_MAX_LEVELS], mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double d = 0;
                const double *qh = qr + ((size_t)t * H + h) * HD, *kj = kr + (size_t)j * kvw + kh * HD;
                for (int i = 0; i < HD; i++) d += qh[i] * kj[i];
                sc[j] = d / sqrt((double)HD);
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int j = 0; j < n; j++) o += sc[j] / sum * vr[(size_t)j * kvw + kh * HD + i];
                A->want[((size_t)t * H + h) * HD + i] = o;
            }
        }
    free(qr);
}

dd_attend_args th_attend_args(const th_attend *A, float *out, float *kcache, float *vcache) {
    th_poison(out, (size_t)A->T * A->H * A->HD);
    for (int i = 0; i < A->Q * A->kvw; i++) {
        kcache[i] = i < A->p0 * A->kvw ? A->kc0[i] : NAN;
        vcache[i] = i < A->p0 * A->kvw ? A->vc0[i] : NAN;
    }
    return (dd_attend_args){.out = out, .ldo = A->H * A->HD, .kcache = kcache, .vcache = vcache, .ldc = 0,
                            .qkv = A->qkv, .ldq = (A->H + 2 * A->KVH) * A->HD, .B = 1, .P = A->T, .p0 = A->p0,
                            .H = A->H, .KVH = A->KVH, .HD = A->HD, .inv_freq = A->rope ? A->inv_freq : NULL,
                            .q_norm = A->qk ? A->qn : NULL, .k_norm = A->qk ? A->kn : NULL, .qk_eps = 1e-6f};
}

int th_attend_check(const th_attend *A, const float *out, const float *kc, const float *vc, const char *who,
                    double *worst) {
    int bad = 0;
    for (int i = 0; i < A->T * A->H * A->HD && bad < 3; i++) {
        double err = fabs(out[i] - A->want[i]);
        if (err > *worst) *worst = err;
        if (!th_within(out[i], A->want[i], fabs(A->want[i]), TH_TOL_ATTEND)) {
            printf("  FAIL %s attend T=%d p0=%d H=%d KVH=%d HD=%d rope=%d: out[%d] = %.9g, want %.9g\n", who, A->T,
                   A->p0, A->H, A->KVH, A->HD, A->rope, i, out[i], A->want[i]);
            bad++;
        }
    }
    for (int i = A->p0 * A->kvw; i < A->Q * A->kvw && bad < 3; i++)
        if (!th_within(kc[i], A->kr[i], fabs(A->kr[i]), TH_TOL_ROPE) || vc[i] != (float)A->vr[i]) {
            printf("  FAIL %s attend T=%d p0=%d H=%d KVH=%d HD=%d rope=%d: cache[%d] = %.9g / %.9g, want %.9g / "
                   "%.9g\n",
                   who, A->T, A->p0, A->H, A->KVH, A->HD, A->rope, i, kc[i], vc[i], A->kr[i], A->vr[i]);
            bad++;
        }
    for (int i = 0; i < A->p0 * A->kvw && !bad; i++)
        if (kc[i] != A->kc0[i] || vc[i] != A->vc0[i]) {
            printf("  FAIL %s attend: cached row element %d changed\n", who, i);
            bad++;
        }
    return bad;
}

void th_attend_free(th_attend *A) {
    free(A->qn);
    free(A->kn);
    free(A->qkv);
    free(A->kc0);
    free(A->vc0);
    free(A->kr);
    free(A->vr);
    free(A->want);
}

/* ---- backends ------------------------------------------------------------------------------------------------- */

int th_variants(th_variant *out, int cap, int with_oracle) {
    int n = 0;
    for (int i = 0; i < dd_registry_count; i++) {
        const dd_backend_row *r = &dd_registry[i], *picked;
        const dd_backend_test *t = &r->test;
        dd_error e;
        if (t->oracle && !with_oracle) continue;
        if (dd_registry_pick(r->info.id, &picked, &e)) {
            printf("  %s: skipped\n", e.msg); /* "backend cuda: no CUDA device is available" */
            continue;
        }
        for (int v = 0; v < (t->nvariants ? t->nvariants : 1) && n < cap; v++) {
            th_variant *x = &out[n];
            *x = (th_variant){r, v, ""};
            if (!t->nvariants) {
                snprintf(x->name, sizeof x->name, "%s", r->info.name);
            } else if (t->variant_supported(v)) {
                snprintf(x->name, sizeof x->name, "%s-%s", r->info.name, t->variant_name(v));
            } else {
                printf("  %s %s: not supported by this build or machine: skipped\n", r->info.name, t->variant_name(v));
                continue;
            }
            n++;
        }
    }
    return n;
}

dd_decoder *th_decoder(const dd_model *m, dd_backend b, int v, int max_batch, int threads) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = b;
    p.max_batch = max_batch;
    p.threads = threads;
    dd_decoder *d = NULL;
    dd_error e;
    dd_status s = dd_decoder_create(&d, m, &p, &e);
    const dd_backend_row *r = dd_registry_row(b);
    if (!s && v >= 0 && r && r->test.use_variant) s = r->test.use_variant(d, v, &e);
    if (s) printf("  decoder %s: %s\n", dd_backend_name(b), e.msg);
    assert_int_equal(s, DD_OK);
    assert_int_equal(dd_decoder_backend(d), b);
    return d;
}
