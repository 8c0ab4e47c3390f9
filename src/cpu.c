/* The fast CPU backend (dd_cpu_backend): SPEC §1-§3 for a batch of streams, layer by layer, with the fused
 * kernels of cpu_ops.c on a persistent thread pool.
 *
 * A decode call runs its n streams in groups of up to G = min(max_batch, 256) streams. Within a group every pass
 * processes all streams' new positions together (R = b*P rows: b streams, P = 2 new positions in pass 1, then 1),
 * so each weight is read from memory once per pass for the whole group. Row r = s*P + t is stream s's position
 * p0 + t. Per pass:
 *   per layer   qkv   = linear(norm1 prologue, q/k/v as three segments of one pass)
 *               att   = attend (append K/V to the frame cache, RoPE from float tables, causal softmax)
 *               x    += linear(att, wo)                       (bias, residual epilogue)
 *               ff    = linear(norm2 prologue, fc1; GELU)     gpt
 *                     = linear(norm2 prologue, gate|up pairs; SwiGLU)  llama
 *               x    += linear(ff, fc2)
 *   head        logits = linear(final-norm prologue, heads[l-1]) over each stream's last row
 *   sample      per stream: dd_sample_core (the shared SPEC §3 rule) and the gather of the drawn code's
 *               embedding row as the next pass's input (+ learned position).
 * CSM-layout models (code embeddings in backbone space): in_proj is applied per pass to the gathered table rows
 * (one more linear per pass, counted by dd_model_weight_bytes_per_frame); no in(table) is precomputed, so the
 * rounding is the reference's.
 *
 * Everything is allocated by cpu_init for G streams; decode and score allocate nothing. A stream's results do
 * not depend on n, its row, or the thread count (see cpu.h, "Exactness").
 */
#include "registry.h" /* backend.h, and the declaration of this backend's vtable */
#include "cpu.h"
#include "sample.h"
#include "util.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_MAX 256

typedef struct cpu_state {
    const dd_cpu_kern *kern;
    dd_cpu_pool *pool;
    int nth;
    int G;           /* streams per group */
    int qkvw;        /* (H + 2 KVH) HD */
    size_t kvw;      /* KVH HD */
    size_t ldc;      /* floats of one stream's cache, all layers: L * Q * kvw */
    float *x;        /* [2G, D] residual stream of this pass's rows */
    float *xin;      /* [2G, I] CSM: inputs in backbone space (h, gathered table rows) */
    float *qkv;      /* [2G, qkvw] */
    float *att;      /* [2G, H HD] */
    float *ff;       /* [2G, F] */
    float *logits;   /* [G, V] */
    float *kc, *vc;  /* [G][L][Q][kvw] this frame's cache */
    float *rcos, *rsin; /* [Q][HD/2] RoPE tables (llama) */
    float **scratch; /* [nth] x [2G * D]: the linear's per-thread normalized rows */
    int32_t *fail;   /* [G] 1 + first level with no finite logit, 0 = none */
} cpu_state;

static void *alloc64(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    return p;
}

static void cpu_destroy(dd_decoder *d) {
    cpu_state *st = d->impl;
    if (!st) return;
    dd_cpu_pool_free(st->pool);
    free(st->x);
    free(st->xin);
    free(st->qkv);
    free(st->att);
    free(st->ff);
    free(st->logits);
    free(st->kc);
    free(st->vc);
    free(st->rcos);
    free(st->rsin);
    for (int i = 0; st->scratch && i < st->nth; i++) free(st->scratch[i]);
    free(st->scratch);
    free(st->fail);
    free(st);
    d->impl = NULL;
}

static dd_status cpu_init(dd_decoder *d, dd_error *err) {
    const dd_config *c = &d->m->cfg;
    cpu_state *st = calloc(1, sizeof *st);
    if (!st) return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory");
    d->impl = st;
    st->kern = dd_cpu_kernels();
    dd_status s = dd_cpu_pool_create(&st->pool, dd_cpu_default_threads(d->threads), err);
    if (s) return s;
    st->nth = dd_cpu_pool_threads(st->pool);
    int G = d->max_batch < GROUP_MAX ? d->max_batch : GROUP_MAX;
    st->G = G;
    size_t R = 2 * (size_t)G, D = c->dim, I = c->input_dim, F = c->ffn_dim, V = c->codebook_size, Q = c->levels;
    size_t HD = c->head_dim, HH = (size_t)c->heads * HD;
    st->qkvw = (c->heads + 2 * c->kv_heads) * c->head_dim;
    st->kvw = (size_t)c->kv_heads * HD;
    st->ldc = (size_t)c->layers * Q * st->kvw;
    const size_t f = sizeof(float);
    int ok = (st->x = alloc64(R * D * f)) && (st->qkv = alloc64(R * st->qkvw * f)) &&
             (st->att = alloc64(R * HH * f)) && (st->ff = alloc64(R * F * f)) && (st->logits = alloc64(G * V * f)) &&
             (st->kc = alloc64(G * st->ldc * f)) && (st->vc = alloc64(G * st->ldc * f)) &&
             (st->fail = calloc((size_t)G, sizeof(int32_t))) &&
             (st->scratch = calloc((size_t)st->nth, sizeof(float *)));
    if (ok && c->embed_in_input_space) ok = (st->xin = alloc64(R * I * f)) != NULL;
    for (int i = 0; ok && i < st->nth; i++) ok = (st->scratch[i] = alloc64(R * D * f)) != NULL;
    if (ok && c->has_rope) {
        ok = (st->rcos = alloc64(Q * (HD / 2) * f)) && (st->rsin = alloc64(Q * (HD / 2) * f));
        if (ok) dd_cpu_rope_tables(st->rcos, st->rsin, d->m->rope_inv_freq, c->head_dim, c->levels);
    }
    if (!ok)
        return dd_fail(err, DD_ENOMEM, "cpu backend: out of memory for %d streams (%s)", G, d->m->source);
    return DD_OK;
}

/* ---- passes ----------------------------------------------------------------------------------------------- */

static dd_cpu_linear lin(const cpu_state *st, float *y, size_t ldy, const float *x, size_t ldx, int T,
                         const dd_weight *w, const float *bias) {
    return (dd_cpu_linear){.y = y, .ldy = ldy, .x = x, .ldx = ldx, .T = T, .nseg = 1, .seg = {{w, NULL, bias, NULL}},
                           .kern = st->kern, .scratch = st->scratch};
}

/* All layers over the R = b*P rows in st->x (positions p0 .. p0+P-1 of each stream). */
static void run_layers(cpu_state *st, const dd_model *m, int b, int P, int p0) {
    const dd_config *c = &m->cfg;
    const int gpt = c->block == DD_BLOCK_GPT, nrm = gpt ? DD_NORM_LAYER : DD_NORM_RMS;
    const int R = b * P;
    const size_t D = c->dim, HH = (size_t)c->heads * c->head_dim, F = c->ffn_dim;
    for (int li = 0; li < c->layers; li++) {
        const dd_layer *l = &m->layer[li];
        dd_cpu_linear L = lin(st, st->qkv, st->qkvw, st->x, D, R, &l->wq, l->bq);
        L.nseg = 3;
        L.seg[1] = (dd_cpu_seg){&l->wk, NULL, l->bk, NULL};
        L.seg[2] = (dd_cpu_seg){&l->wv, NULL, l->bv, NULL};
        L.norm = nrm;
        L.norm_w = l->norm1_w;
        L.norm_b = l->norm1_b;
        L.eps = c->norm_eps;
        dd_cpu_linear_run(st->pool, &L);

        dd_cpu_attend A = {.out = st->att, .ldo = HH, .kc = st->kc + (size_t)li * c->levels * st->kvw,
                           .vc = st->vc + (size_t)li * c->levels * st->kvw, .ldc = st->ldc, .qkv = st->qkv,
                           .ldq = (size_t)st->qkvw, .B = b, .P = P, .p0 = p0, .H = c->heads, .KVH = c->kv_heads,
                           .HD = c->head_dim, .cos = st->rcos, .sin = st->rsin, .kern = st->kern};
        dd_cpu_attend_run(st->pool, &A);

        L = lin(st, st->x, D, st->att, HH, R, &l->wo, l->bo);
        L.residual = st->x;
        L.ldr = D;
        dd_cpu_linear_run(st->pool, &L);

        L = lin(st, st->ff, F, st->x, D, R, &l->fc1, l->b1);
        if (!gpt) L.seg[0].w2 = &l->up;
        L.act = gpt ? DD_ACT_GELU : DD_ACT_SWIGLU;
        L.norm = nrm;
        L.norm_w = l->norm2_w;
        L.norm_b = l->norm2_b;
        L.eps = c->norm_eps;
        dd_cpu_linear_run(st->pool, &L);

        L = lin(st, st->x, D, st->ff, F, R, &l->fc2, l->b2);
        L.residual = st->x;
        L.ldr = D;
        dd_cpu_linear_run(st->pool, &L);
    }
}

/* logits of level `level` (1..Q-1) for the b streams' last rows into y (stride ldy). */
static void run_head(cpu_state *st, const dd_model *m, int b, int P, int level, float *y, size_t ldy) {
    const dd_config *c = &m->cfg;
    const size_t D = c->dim;
    dd_weight hw = dd_weight_rows(&m->heads, (int64_t)(level - 1) * c->codebook_size, c->codebook_size);
    dd_cpu_linear L = lin(st, y, ldy, st->x + (size_t)(P - 1) * D, (size_t)P * D, b, &hw, NULL);
    L.norm = c->block == DD_BLOCK_GPT ? DD_NORM_LAYER : DD_NORM_RMS;
    L.norm_w = m->norm_w;
    L.norm_b = m->norm_b;
    L.eps = c->norm_eps;
    dd_cpu_linear_run(st->pool, &L);
}

/* in() over `T` rows of st->xin into st->x (CSM layout: every position's input is in backbone space). */
static void run_in_proj_xin(cpu_state *st, const dd_model *m, int T) {
    const dd_config *c = &m->cfg;
    dd_cpu_linear L = lin(st, st->x, c->dim, st->xin, c->input_dim, T, &m->in_proj, m->in_bias);
    dd_cpu_linear_run(st->pool, &L);
}

/* Position `pos`'s input from code `code` of level pos-1, into row `row`: the embedding row (native, + learned
 * position) into st->x, or the flat table row (CSM) into st->xin for in() to project. */
static void gather(cpu_state *st, const dd_model *m, int row, int pos, int32_t code) {
    const dd_config *c = &m->cfg;
    int64_t er = (int64_t)(pos - 1) * c->codebook_size + code;
    if (c->embed_in_input_space) {
        dd_weight_row_f32(&m->embed, er, st->xin + (size_t)row * c->input_dim);
        return;
    }
    float *x = st->x + (size_t)row * c->dim;
    dd_weight_row_f32(&m->embed, er, x);
    if (m->pos)
        for (int i = 0; i < c->dim; i++) x[i] += m->pos[(size_t)pos * c->dim + i];
}

/* One job per stream after a head: the code of `level` (sampled from logits, or given) and the next pass's input.
 * level 0 also builds pass 1's first row from h when no linear in() does. */
typedef struct step_ctx {
    cpu_state *st;
    const dd_model *m;
    int b, level, next; /* next: build the next pass's input */
    const float *logits;
    size_t ldl;
    const int32_t *given; /* [b] codes of this level, or NULL = sample */
    size_t ldg;
    const uint64_t *seeds, *frames; /* [b] or NULL */
    float T;
    int K;
    int32_t *codes; /* [b, Q] out, or NULL */
    const float *hidden; /* [b, I] level 0 only */
    atomic_int claim;    /* the next stream to take */
} step_ctx;

static void step_job(void *ctx, int tid, int nth) {
    (void)tid;
    (void)nth;
    step_ctx *sc = ctx;
    cpu_state *st = sc->st;
    const dd_model *m = sc->m;
    const dd_config *c = &m->cfg;
    for (int s = atomic_fetch_add_explicit(&sc->claim, 1, memory_order_relaxed); s < sc->b;
         s = atomic_fetch_add_explicit(&sc->claim, 1, memory_order_relaxed)) {
        int32_t code;
        if (sc->given) {
            code = sc->given[(size_t)s * sc->ldg];
        } else {
            code = dd_sample_core(sc->logits + (size_t)s * sc->ldl, c->codebook_size, sc->T, sc->K,
                                  sc->seeds ? sc->seeds[s] : 0, sc->frames ? sc->frames[s] : 0, sc->level);
            if (code < 0) {
                if (!st->fail[s]) st->fail[s] = sc->level + 1;
                code = 0; /* keep going; the call reports the error after the group */
            }
        }
        if (sc->codes) sc->codes[(size_t)s * c->levels + sc->level] = code;
        if (!sc->next) continue;
        if (sc->level > 0) {
            gather(st, m, s, sc->level + 1, code);
            continue;
        }
        /* pass 1 rows: 2s = in(h), 2s+1 = emb0(c0) */
        const float *h = sc->hidden + (size_t)s * c->input_dim;
        if (c->embed_in_input_space) {
            memcpy(st->xin + (size_t)(2 * s) * c->input_dim, h, (size_t)c->input_dim * sizeof(float));
        } else if (!c->has_in_proj) {
            float *x = st->x + (size_t)(2 * s) * c->dim;
            memcpy(x, h, (size_t)c->dim * sizeof(float));
            if (m->pos)
                for (int i = 0; i < c->dim; i++) x[i] += m->pos[i];
        }
        gather(st, m, 2 * s + 1, 1, code);
    }
}

static void run_step(cpu_state *st, step_ctx *sc) {
    atomic_store_explicit(&sc->claim, 0, memory_order_relaxed);
    if (sc->b == 1) step_job(sc, 0, 1);
    else dd_cpu_pool_run(st->pool, step_job, sc);
}

/* The frame of b streams. Level 0's codes come from `c0` (or are sampled from logits0 when c0 is NULL and
 * sampling); later levels from `given` (score: teacher forcing) or sampling. Head outputs go to out_logits
 * (stride per stream ld_logits, per level V) when not NULL, else to st->logits. */
typedef struct frame_io {
    const float *hidden;
    const int32_t *c0;      /* [b] or NULL */
    const int32_t *given;   /* [b, Q] teacher-forced codes, or NULL */
    const uint64_t *seeds, *frames;
    const dd_sampling *s;
    int32_t *codes;         /* [b, Q] out or NULL */
    float *logits;          /* [b, Q-1, V] out or NULL */
    float *logits0;         /* [b, V] out or NULL (score) */
} frame_io;

static void run_frame(cpu_state *st, const dd_model *m, int b, const frame_io *io) {
    const dd_config *c = &m->cfg;
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim, D = c->dim;
    memset(st->fail, 0, (size_t)b * sizeof(int32_t));
    step_ctx sc = {.st = st, .m = m, .b = b, .level = 0, .next = 1, .seeds = io->seeds, .frames = io->frames,
                   .codes = io->codes, .hidden = io->hidden, .T = io->s ? io->s->temperature : 0,
                   .K = io->s ? io->s->top_k : 0};
    /* level 0 */
    if (io->logits0 || (!io->c0 && !io->given)) {
        float *l0 = io->logits0 ? io->logits0 : st->logits;
        dd_cpu_linear L = lin(st, l0, V, io->hidden, I, b, &m->head0, NULL);
        dd_cpu_linear_run(st->pool, &L);
        sc.logits = l0;
        sc.ldl = V;
    }
    if (io->given) {
        sc.given = io->given;
        sc.ldg = Q;
    } else if (io->c0) {
        sc.given = io->c0;
        sc.ldg = 1;
    }
    run_step(st, &sc);
    if (c->embed_in_input_space) {
        run_in_proj_xin(st, m, 2 * b);
        if (m->pos)
            for (int r = 0; r < 2 * b; r++)
                for (int i = 0; i < D; i++) st->x[(size_t)r * D + i] += m->pos[(size_t)(r & 1) * D + i];
    } else if (c->has_in_proj) {
        dd_cpu_linear L = lin(st, st->x, 2 * (size_t)D, io->hidden, I, b, &m->in_proj, m->in_bias);
        L.add = m->pos;
        L.lda = 0;
        dd_cpu_linear_run(st->pool, &L);
    }
    /* passes 1 .. Q-1 */
    for (int l = 1; l < Q; l++) {
        int P = l == 1 ? 2 : 1, p0 = l == 1 ? 0 : l;
        run_layers(st, m, b, P, p0);
        float *y = io->logits ? io->logits + (size_t)(l - 1) * V : st->logits;
        size_t ldy = io->logits ? (size_t)(Q - 1) * V : (size_t)V;
        run_head(st, m, b, P, l, y, ldy);
        sc.level = l;
        sc.next = l < Q - 1;
        sc.logits = y;
        sc.ldl = ldy;
        sc.given = io->given ? io->given + l : NULL;
        sc.ldg = Q;
        if (sc.given && !sc.next) break; /* score: the last level's code is not read */
        run_step(st, &sc);
        if (sc.next && c->embed_in_input_space) run_in_proj_xin(st, m, b);
    }
}

/* ---- backend entry points --------------------------------------------------------------------------------- */

static dd_status cpu_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                            const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err) {
    cpu_state *st = d->impl;
    const dd_config *c = &d->m->cfg;
    for (int g0 = 0; g0 < n; g0 += st->G) {
        int b = n - g0 < st->G ? n - g0 : st->G;
        frame_io io = {.hidden = hidden + (size_t)g0 * c->input_dim, .c0 = c0 ? c0 + g0 : NULL,
                       .seeds = seeds ? seeds + g0 : NULL, .frames = frames ? frames + g0 : NULL, .s = s,
                       .codes = codes + (size_t)g0 * c->levels};
        run_frame(st, d->m, b, &io);
        for (int r = 0; r < b; r++)
            if (st->fail[r])
                return dd_fail(err, DD_ENUMERIC, "row %d: level %d: no finite logit", g0 + r, st->fail[r] - 1);
    }
    return DD_OK;
}

static dd_status cpu_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                           float *logits0, dd_error *err) {
    cpu_state *st = d->impl;
    const dd_config *c = &d->m->cfg;
    for (int g0 = 0; g0 < n; g0 += st->G) {
        int b = n - g0 < st->G ? n - g0 : st->G;
        frame_io io = {.hidden = hidden + (size_t)g0 * c->input_dim, .given = codes + (size_t)g0 * c->levels,
                       .logits = logits + (size_t)g0 * (c->levels - 1) * c->codebook_size,
                       .logits0 = logits0 ? logits0 + (size_t)g0 * c->codebook_size : NULL};
        run_frame(st, d->m, b, &io);
    }
    return DD_OK;
}

const dd_backend_vt dd_cpu_backend = {"cpu", cpu_init, cpu_destroy, cpu_decode, cpu_score};

dd_status dd_cpu_decoder_use_isa(dd_decoder *d, dd_cpu_isa isa, dd_error *err) {
    if (!d || d->vt != &dd_cpu_backend) return dd_fail(err, DD_EINVAL, "dd_cpu_decoder_use_isa: not a cpu decoder");
    const dd_cpu_kern *k = dd_cpu_kernels_for(isa);
    if (!k) return dd_fail(err, DD_EUNSUPPORTED, "cpu kernels: instruction set %s not available here",
                           dd_cpu_isa_name(isa));
    ((cpu_state *)d->impl)->kern = k;
    return DD_OK;
}
