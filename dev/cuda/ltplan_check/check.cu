/* Host-only check that the latency executor's plans, now built from the op list translated from the frame plan
 * (src/cuda/lat.cu, lt_translate), are the plans its old builder made (old_build.inc: lat.cu's host code at 0bf2d7c,
 * verbatim), byte for byte: every lt_op, lt_step, lt_piece and lt_sm the kernel reads (so the units' placement, the
 * K splits, the pieces and their L2 residency too), and whether the plan fits at all, for a set of models, every
 * plan kind, n = 1 .. LT_MAX_N streams and both roles (attention and samplers on SMs of their own or not), on two
 * device shapes (132 SMs and a 50 MiB L2 as on the H200; 66 SMs and 25 MiB). No GPU: the decoder state and the
 * executor are fake (every device pointer a distinct made-up address, NULL where the backend's upload gives NULL;
 * the host arrays and io offsets from backend.cu's alloc_entries and io_layout; the matrices' descriptors the ones
 * cu_mat_layout computes for the model's weights, as the upload would), and the plan's device allocation and upload
 * are redirected into host memory (cu_alloc, cudaMemcpy below), so only the plans are compared, nothing is run.
 *
 *   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib && dev/cuda/ltplan_check/build.sh
 *   build-cuda/ltplan_check [--mutate op|step|piece] [-v]
 *       from the repository root (it loads tests/fixtures/...); prints one line per (model, device shape) and a
 *       total; exit 0 when every plan is identical. --mutate changes one field of every translated plan after it
 *       is built (an op's out_off, a step's u1, a piece's c1) to show that the comparison sees it (exit 1 then).
 *
 * Padding: both builders zero each lt_op and lt_piece before filling it and the blob before copying into it; the
 * one struct either copies in from a stack temporary with unspecified padding (the cu_raw of the hidden-state
 * gather) is re-copied field by field into zeroed memory before the comparison. */
#include <cuda_runtime.h>

#include "../../../src/cuda/cu_attend.cuh"
#include "../../../src/cuda/cu_linear.cuh"
#include "../../../src/cuda/cu_sample.cuh"
#include "../../../src/cuda/cu_state.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the plan's device allocation and upload, into host memory */
static size_t g_bytes;
static dd_status chk_alloc(void **out, size_t bytes, void ***allocs, int *nallocs, dd_error *err) {
    (void)allocs, (void)nallocs, (void)err;
    *out = calloc(1, bytes ? bytes : 16);
    g_bytes = bytes;
    return *out ? DD_OK : DD_ENOMEM;
}
static cudaError_t chk_memcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    (void)kind;
    memcpy(dst, src, n);
    return cudaSuccess;
}
#define cu_alloc chk_alloc
#define cudaMemcpy chk_memcpy

#include "../../../src/cuda/backend.cu" /* alloc_entries, io_layout; cu_plan_mat */
#include "../../../src/cuda/lat.cu"

/* the old host code in a namespace of its own; its two functions outside the anonymous namespace renamed (the
 * new ones of the same signature would be found too, by argument-dependent lookup) */
#define lt_slices old_lt_slices
#define mat_bytes old_mat_bytes
namespace old_lt {
#include "old_build.inc"
}
#undef lt_slices
#undef mat_bytes

static uintptr_t g_addr = 0x10000000; /* fake device addresses: each buffer its own range */

static void *fake(size_t bytes) {
    uintptr_t a = g_addr;
    g_addr += ((bytes + 0xFFFF) & ~(uintptr_t)0xFFFF) + 0x10000;
    return (void *)a;
}
static float *fake_f(const void *host, size_t n) { return host ? (float *)fake(n * 4) : NULL; }

/* the descriptor cu_mat_upload makes of these rows, at a fake address */
static void fake_mat(cu_mat *w, const cu_rows *r, int nr, int pair) {
    dd_error err;
    if (cu_mat_layout(w, r, nr, pair, &err)) {
        fprintf(stderr, "ltplan_check: %s\n", err.msg);
        exit(2);
    }
    const size_t fb = (size_t)w->MT * w->KT * w->tile_bytes, sb = w->NG ? (size_t)w->MT * w->NG * 16 * w->sb_bytes : 0;
    w->frag = (const uint8_t *)fake(fb);
    w->sb = sb ? (const uint8_t *)fake(sb) : NULL;
}

static void fake_raw(cu_raw *r, int type, int rows, int cols, int quant) {
    memset(r, 0, sizeof *r);
    r->type = type;
    r->rows = rows;
    r->cols = cols;
    r->pitch = ((size_t)cols * 4 + 15) / 16 * 16;
    r->data = (const uint8_t *)fake(r->pitch * rows);
    if (quant) {
        r->scales = (const uint8_t *)fake(4096);
        r->biases = (const uint8_t *)fake(4096);
        r->sbtype = DD_BF16;
        r->group = 32;
        r->sb_pitch = 64;
    }
}

/* The state cuda_init / upload_weights would make for m and max_batch B, at made-up device addresses. */
static void fake_state(cu_state *st, const dd_model *m, int B) {
    const dd_config *c = &m->cfg;
    const int L = c->layers, Q = c->levels, V = c->codebook_size, D = c->dim, H = c->heads, KV = c->kv_heads,
              HD = c->head_dim, F = c->ffn_dim, NE = m->nslices * L, gpt = c->block == DD_BLOCK_GPT;
    memset(st, 0, sizeof *st);
    st->B = B;
    st->m = m;
    if (!alloc_entries(st, m)) {
        fprintf(stderr, "ltplan_check: out of memory\n");
        exit(2);
    }
    for (int e = 0; e < NE; e++) { /* as upload_weights */
        const dd_layer *l = &m->layer[e];
        cu_rows q[3] = {{&l->wq, 0, l->wq.rows}, {&l->wk, 0, l->wk.rows}, {&l->wv, 0, l->wv.rows}};
        cu_rows ro[1] = {{&l->wo, 0, l->wo.rows}}, r2[1] = {{&l->fc2, 0, l->fc2.rows}};
        cu_rows r1[2] = {{&l->fc1, 0, l->fc1.rows}, {&l->up, 0, l->up.rows}};
        fake_mat(&st->qkv[e], q, 3, 0);
        fake_mat(&st->wo[e], ro, 1, 0);
        fake_mat(&st->fc1[e], r1, gpt ? 1 : 2, !gpt);
        fake_mat(&st->fc2[e], r2, 1, 0);
        st->bqkv[e] = (l->bq || l->bk || l->bv) ? (float *)fake((size_t)(H + 2 * KV) * HD * 4) : NULL;
        st->bo[e] = fake_f(l->bo, D);
        st->b1[e] = fake_f(l->b1, F);
        st->b2[e] = fake_f(l->b2, D);
        st->n1w[e] = fake_f(l->norm1_w, D);
        st->n1b[e] = fake_f(l->norm1_b, D);
        st->n2w[e] = fake_f(l->norm2_w, D);
        st->n2b[e] = fake_f(l->norm2_b, D);
        st->qn[e] = fake_f(l->q_norm, HD);
        st->kn[e] = fake_f(l->k_norm, HD);
    }
    for (int h = 0; h < (c->per_position ? Q : Q - 1); h++) {
        cu_rows r = {&m->heads, (int64_t)h * V, V};
        fake_mat(&st->heads[h], &r, 1, 0);
    }
    if (c->per_position) {
        for (int p = 0; p < Q; p++) {
            cu_rows r = {&m->in_proj, (int64_t)p * D, D};
            fake_mat(&st->inps[p], &r, 1, 0);
        }
    } else {
        cu_rows rh = {&m->head0, 0, m->head0.rows}, ri = {&m->in_proj, 0, m->in_proj.rows};
        if (c->has_head0) fake_mat(&st->head0, &rh, 1, 0);
        if (c->has_in_proj) fake_mat(&st->in_proj, &ri, 1, 0);
    }
    st->in_bias = fake_f(m->in_bias, D);
    st->pos = fake_f(m->pos, (size_t)Q * D);
    st->norm_w = fake_f(m->norm_w, D);
    st->norm_b = fake_f(m->norm_b, D);
    st->rope = c->has_rope ? (double *)fake((size_t)Q * HD * 8) : NULL;
    io_layout(st, c, B);
    st->d_in = (uint8_t *)fake(st->in_bytes);
    st->d_out = (uint8_t *)fake(8 + (size_t)B * Q * 4);
    st->logits = (float *)fake((size_t)B * (c->per_position ? Q : Q - 1) * V * 4);
    st->logits0 = (float *)fake((size_t)B * V * 4);
    st->kc = (float *)fake((size_t)L * B * Q * KV * HD * 4);
    st->vc = (float *)fake((size_t)L * B * Q * KV * HD * 4);
    const int quant = m->embed.type == DD_Q8 || m->embed.type == DD_Q4;
    if (c->embed_in_input_space) fake_raw(&st->table, DD_F32, (int)m->embed.rows, D, 0); /* CSM: in(table) */
    else fake_raw(&st->table, m->embed.type, (int)m->embed.rows, (int)m->embed.cols, quant);
    if (c->per_position) fake_raw(&st->text, m->text_embed.type, (int)m->text_embed.rows, D, 0);
}

static void free_state(cu_state *st) {
    free(st->qkv);
    free(st->bqkv);
}

/* The executor lt_create would make on a device of G SMs and an L2 of l2 bytes, at made-up addresses. */
static lt_exec *fake_exec(cu_state *st, const dd_model *m, int G, double l2) {
    const dd_config *c = &m->cfg;
    lt_exec *x = (lt_exec *)calloc(1, sizeof *x);
    const int D = c->dim, H = c->heads, KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim, V = c->codebook_size,
              L = c->layers, Q = c->levels, NT = 2 * LT_MAX_N;
    x->st = st;
    x->m = m;
    x->G = G;
    x->timeout_ns = 10000000000ull;
    x->keep_budget = 0.75 * l2;
    x->ldx = D;
    x->ldq = (H + 2 * KV) * HD;
    x->lda_ = H * HD;
    x->ldf = F;
    x->ldv = V;
    x->qkv = (u64 **)calloc((size_t)L * 5, sizeof(u64 *));
    x->att = x->qkv + L;
    x->xa = x->att + L;
    x->ff = x->xa + L;
    x->xb = x->ff + L;
    x->fw_stride = (size_t)((D + 15) / 16) * 256;
    /* the LL words: each buffer at an address of its own (lt_create packs them into one allocation) */
    x->x0 = (u64 *)fake((size_t)NT * x->ldx * 8);
    for (int li = 0; li < L; li++) {
        x->qkv[li] = (u64 *)fake((size_t)NT * x->ldq * 8);
        x->att[li] = (u64 *)fake((size_t)NT * x->lda_ * 8);
        x->xa[li] = (u64 *)fake((size_t)NT * x->ldx * 8);
        x->ff[li] = (u64 *)fake((size_t)NT * x->ldf * 8);
        x->xb[li] = (u64 *)fake((size_t)NT * x->ldx * 8);
    }
    x->lg = (u64 *)fake((size_t)LT_MAX_N * V * 8);
    x->lg0 = (u64 *)fake((size_t)LT_MAX_N * V * 8);
    x->fw = (u64 *)fake((size_t)L * x->fw_stride * 8);
    x->xg = c->per_position ? (u64 *)fake((size_t)NT * x->ldx * 8) : NULL;
    x->noise = (u64 *)fake((size_t)LT_MAX_N * Q * V * 8);
    x->epoch = (unsigned *)fake(4);
    x->d_heads = (cu_mat *)fake((size_t)(c->per_position ? Q : Q - 1) * sizeof(cu_mat));
    x->d_pp = c->per_position ? (cu_mat *)fake((size_t)(1 + 4 * L) * Q * sizeof(cu_mat)) : NULL;
    return x;
}

/* One built plan: its blob (host copy) and where the parts start. */
struct shot {
    int ok, nops;
    uint8_t *mem;
    size_t bytes, o_steps, o_pieces, o_sms;
};

static shot take(lt_exec *x, int v, int n) {
    lt_plan *pl = &x->plan[v][n];
    shot s;
    memset(&s, 0, sizeof s);
    s.ok = pl->ok;
    if (pl->ok == 2) {
        s.mem = (uint8_t *)pl->mem;
        s.bytes = g_bytes;
        s.nops = pl->nops;
        s.o_steps = (const uint8_t *)pl->steps - s.mem;
        s.o_pieces = (const uint8_t *)pl->pieces - s.mem;
        s.o_sms = (const uint8_t *)pl->sms - s.mem;
        lt_op *ops = (lt_op *)s.mem;
        for (int i = 0; i < s.nops; i++) { /* the file comment: padding of the copied-in cu_raw */
            if (ops[i].kind != LT_SMP) continue;
            const cu_raw t = ops[i].table;
            cu_raw z;
            memset(&z, 0, sizeof z);
            z.type = t.type, z.rows = t.rows, z.cols = t.cols, z.data = t.data, z.pitch = t.pitch, z.scales = t.scales;
            z.biases = t.biases, z.sbtype = t.sbtype, z.group = t.group, z.sb_pitch = t.sb_pitch;
            memcpy(&ops[i].table, &z, sizeof z);
        }
    }
    memset(pl, 0, sizeof *pl);
    return s;
}

static const char *g_mutate; /* --mutate: op | step | piece */
static int g_verbose;

static void mutate(shot &s, int G) {
    if (!g_mutate || s.ok != 2) return;
    if (!strcmp(g_mutate, "op")) ((lt_op *)s.mem)[s.nops - 1].out_off += 1;
    else if (!strcmp(g_mutate, "step")) ((lt_step *)(s.mem + s.o_steps))[0].u1 += 1;
    else if (!strcmp(g_mutate, "piece") && s.o_sms > s.o_pieces && ((lt_sm *)(s.mem + s.o_sms))[G - 1].q1 > 0)
        ((lt_piece *)(s.mem + s.o_pieces))[0].c1 += 1;
}

struct tally {
    long plans, built, unfit, ops, steps, pieces, bad;
};

/* where the first difference of two blobs lies */
static void where(const shot &a, const shot &b, int G) {
    size_t k = 0;
    while (k < a.bytes && a.mem[k] == b.mem[k]) k++;
    if (k < a.o_steps) {
        const size_t i = k / sizeof(lt_op), f = k % sizeof(lt_op);
        printf("      first difference: op %zu (kind %d / %d), byte %zu of lt_op\n", i, ((lt_op *)a.mem)[i].kind,
               ((lt_op *)b.mem)[i].kind, f);
    } else if (k < a.o_pieces) {
        printf("      first difference: step %zu, byte %zu\n", (k - a.o_steps) / sizeof(lt_step),
               (k - a.o_steps) % sizeof(lt_step));
    } else if (k < a.o_sms) {
        printf("      first difference: piece %zu, byte %zu\n", (k - a.o_pieces) / sizeof(lt_piece),
               (k - a.o_pieces) % sizeof(lt_piece));
    } else {
        printf("      first difference: sm %zu of %d, byte %zu\n", (k - a.o_sms) / sizeof(lt_sm), G,
               (k - a.o_sms) % sizeof(lt_sm));
    }
}

/* Both builders' plans of every kind, n and role for m on a device of G SMs; returns the differences. */
static long check_model(const char *name, const dd_model *m, int G, double l2, tally *T) {
    const dd_config *c = &m->cfg;
    cu_state st;
    fake_state(&st, m, 64);
    lt_exec *x = fake_exec(&st, m, G, l2);
    long bad = 0, built = 0, unfit = 0, ops = 0;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_plan fp;
        if (dd_plan_build(&fp, m, (dd_plan_kind)v, &err)) {
            printf("  %s: plan %d: %s\n", name, v, err.msg);
            bad++;
            continue;
        }
        for (int n = 1; n <= LT_MAX_N; n++)
            for (int role = 0; role < 2; role++) {
                dd_status s1 = old_lt::build_plan_role(x, v, n, role, &err);
                shot a = take(x, v, n);
                dd_status s2 = build_plan_role(x, &fp, v, n, role, &err);
                shot b = take(x, v, n);
                mutate(b, G);
                T->plans++;
                int same = !s1 && !s2 && a.ok == b.ok;
                if (same && a.ok == 2)
                    same = a.bytes == b.bytes && a.nops == b.nops && a.o_steps == b.o_steps &&
                           a.o_pieces == b.o_pieces && a.o_sms == b.o_sms && !memcmp(a.mem, b.mem, a.bytes);
                if (a.ok == 2 && same) {
                    built++;
                    ops += a.nops;
                    const lt_sm *sm = (const lt_sm *)(a.mem + a.o_sms);
                    T->steps += sm[G - 1].t1;
                    T->pieces += sm[G - 1].q1;
                } else if (same) {
                    unfit++;
                }
                if (!same) {
                    bad++;
                    if (bad <= 4) {
                        printf("  %s G %d %-9s n %d role %d: DIFFERENT: old ok %d, %d ops, %zu bytes; new ok %d, %d "
                               "ops, %zu bytes\n",
                               name, G, dd_plan_kind_name((dd_plan_kind)v), n, role, a.ok, a.nops, a.bytes, b.ok,
                               b.nops, b.bytes);
                        if (a.ok == 2 && b.ok == 2 && a.bytes == b.bytes && a.o_steps == b.o_steps &&
                            a.o_pieces == b.o_pieces && a.o_sms == b.o_sms)
                            where(a, b, G);
                    }
                } else if (g_verbose) {
                    printf("  %s G %d %-9s n %d role %d: ok %d, %d ops identical\n", name, G,
                           dd_plan_kind_name((dd_plan_kind)v), n, role, a.ok, a.nops);
                }
                free(a.mem);
                free(b.mem);
            }
        dd_plan_free(&fp);
    }
    printf("%-36s G %3d: %3ld plans identical (%3ld built, %2ld do not fit either way), %6ld ops%s\n", name, G,
           built + unfit, built, unfit, ops, bad ? ", DIFFERENCES" : "");
    T->built += built;
    T->unfit += unfit;
    T->ops += ops;
    T->bad += bad;
    free(x->qkv);
    free(x);
    free_state(&st);
    return bad;
}

/* model variants (the cases' mod bits) */
enum { NO_IN_PROJ = 1, NO_HEAD0 = 2, ADD_POS = 4 };

static float *g_pos[64];
static int g_npos;

static void modify(dd_model *m, int mod) {
    if (mod & NO_IN_PROJ) { /* in() the identity (input_dim = dim), as tests/test_backends.c test_identity_in_proj */
        m->cfg.has_in_proj = 0;
        m->in_proj.rows = 0;
        m->in_bias = NULL;
        m->cfg.input_dim = m->cfg.dim;
    }
    if (mod & NO_HEAD0) {
        m->cfg.has_head0 = 0;
        m->head0.rows = 0;
    }
    if (mod & ADD_POS && !m->pos) { /* learned positions on a model that has none (only the pointer is read) */
        m->pos = g_pos[g_npos++] = (float *)calloc((size_t)m->cfg.levels * m->cfg.dim, sizeof(float));
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutate") && i + 1 < argc) g_mutate = argv[++i];
        else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--mutate op|step|piece] [-v]\n", argv[0]);
            return 2;
        }
    }
    struct {
        const char *name;
        const char *kind; /* synthetic kind, or NULL: `path` */
        dd_dtype wt;
        const char *path;
        int mod;
    } cases[] = {
        {"tiny-gpt f32", "tiny-gpt", DD_F32, NULL, 0},
        {"tiny-gpt bf16", "tiny-gpt", DD_BF16, NULL, 0},
        {"tiny-gpt q4", "tiny-gpt", DD_Q4, NULL, 0},
        {"tiny-gpt q8 no in_proj", "tiny-gpt", DD_Q8, NULL, NO_IN_PROJ},
        {"tiny-gpt bf16 no in_proj, no head0", "tiny-gpt", DD_BF16, NULL, NO_IN_PROJ | NO_HEAD0},
        {"tiny-gpt bf16 no head0", "tiny-gpt", DD_BF16, NULL, NO_HEAD0},
        {"tiny-llama bf16", "tiny-llama", DD_BF16, NULL, 0},
        {"tiny-llama f16 + pos", "tiny-llama", DD_F16, NULL, ADD_POS},
        {"tiny-llama q8 no in_proj", "tiny-llama", DD_Q8, NULL, NO_IN_PROJ},
        {"tiny-llama q4 no in_proj + pos", "tiny-llama", DD_Q4, NULL, NO_IN_PROJ | ADD_POS},
        {"tiny-llama bf16 no in_proj, no head0", "tiny-llama", DD_BF16, NULL, NO_IN_PROJ | NO_HEAD0},
        {"tiny-llama q4 no head0", "tiny-llama", DD_Q4, NULL, NO_HEAD0},
        {"tiny-qwen3 bf16", "tiny-qwen3", DD_BF16, NULL, 0},
        {"tiny-qwen3 q8", "tiny-qwen3", DD_Q8, NULL, 0},
        {"tiny-moshi bf16", "tiny-moshi", DD_BF16, NULL, 0},
        {"tiny-moshi q4", "tiny-moshi", DD_Q4, NULL, 0},
        {"tiny-moshi q8", "tiny-moshi", DD_Q8, NULL, 0},
        {"gpt bf16", "gpt", DD_BF16, NULL, 0},
        {"gpt q8", "gpt", DD_Q8, NULL, 0},
        {"gpt q4", "gpt", DD_Q4, NULL, 0},
        {"gpt bf16 no in_proj", "gpt", DD_BF16, NULL, NO_IN_PROJ},
        {"csm bf16", "csm", DD_BF16, NULL, 0},
        {"csm q8", "csm", DD_Q8, NULL, 0},
        {"csm q4", "csm", DD_Q4, NULL, 0},
        {"qwen3tts bf16", "qwen3tts", DD_BF16, NULL, 0},
        {"qwen3tts q4", "qwen3tts", DD_Q4, NULL, 0},
        {"fixture gpt_f16", NULL, DD_F32, "tests/fixtures/gpt_f16.safetensors", 0},
        {"fixture gpt_bf16", NULL, DD_F32, "tests/fixtures/gpt_bf16.safetensors", 0},
        {"fixture gpt_q8", NULL, DD_F32, "tests/fixtures/gpt_q8.safetensors", 0},
        {"fixture csm_tiny", NULL, DD_F32, "tests/fixtures/csm_tiny", 0},
        {"fixture qwen3tts_tiny", NULL, DD_F32, "tests/fixtures/qwen3tts_tiny", 0},
        {"fixture qwen3omni_tiny", NULL, DD_F32, "tests/fixtures/qwen3omni_tiny", 0},
        {"fixture qwen3omni_mlx_q8", NULL, DD_F32, "tests/fixtures/qwen3omni_mlx_q8", 0},
        {"fixture qwen3omni_mlx_q4", NULL, DD_F32, "tests/fixtures/qwen3omni_mlx_q4", 0},
        {"fixture kyutai_tiny", NULL, DD_F32, "tests/fixtures/kyutai_tiny/model.safetensors", 0},
        {"fixture kyutai_tiny_legacy", NULL, DD_F32, "tests/fixtures/kyutai_tiny_legacy/model.safetensors", 0},
        {"fixture moshi_tiny", NULL, DD_F32, "tests/fixtures/moshi_tiny", 0},
        {"fixture moshi_tiny_depth", NULL, DD_F32, "tests/fixtures/moshi_tiny_depth", 0},
        {"fixture moshi_q12", NULL, DD_F32, "tests/fixtures/moshi_q12", 0},
    };
    const struct {
        int G;
        double l2;
    } devs[] = {{132, 50.0 * 1024 * 1024}, {66, 25.0 * 1024 * 1024}};
    tally T;
    memset(&T, 0, sizeof T);
    int nmodels = 0, failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_model *m = NULL;
        dd_status s = cases[i].kind ? dd_model_synthetic(&m, cases[i].kind, cases[i].wt, 7, &err)
                                    : dd_model_load(&m, cases[i].path, &err);
        if (s) {
            printf("%-36s cannot load: %s\n", cases[i].name, err.msg);
            failed = 1;
            continue;
        }
        modify(m, cases[i].mod);
        const dd_config *c = &m->cfg;
        printf("# %s: %s block, Q %d, L %d, D %d, in %s, head0 %d, pos %d, qk_norm %d, rope %d, slices %d\n",
               cases[i].name, c->block == DD_BLOCK_GPT ? "gpt" : "llama", c->levels, c->layers, c->dim,
               c->per_position ? "per-position" : c->embed_in_input_space ? "proj-per-pass (CSM)"
                                              : c->has_in_proj          ? "proj"
                                                                        : "identity",
               c->has_head0, m->pos != NULL, c->has_qk_norm, c->has_rope, m->nslices);
        for (size_t d = 0; d < sizeof devs / sizeof *devs; d++)
            check_model(cases[i].name, m, devs[d].G, devs[d].l2, &T);
        nmodels++;
        dd_model_free(m);
    }
    for (int i = 0; i < g_npos; i++) free(g_pos[i]);
    printf("ltplan_check: %d models x 2 device shapes, %ld plans (kind x n 1..%d x role): %ld built (%ld ops, %ld "
           "steps, %ld pieces compared), %ld fit neither way; %s\n",
           nmodels, T.plans, LT_MAX_N, T.built, T.ops, T.steps, T.pieces, T.unfit,
           failed || T.bad ? "DIFFERENCES (above)" : "every plan identical to the old builder's");
    if (g_mutate) printf("(--mutate %s: %ld plans reported different)\n", g_mutate, T.bad);
    return failed || T.bad ? 1 : 0;
}
