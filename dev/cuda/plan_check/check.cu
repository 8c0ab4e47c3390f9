/* Host-only check that the CUDA backend's frame programs, now translated from the frame plan (src/cuda/backend.cu,
 * build), are the programs the backend built before (old_build.inc: its builder at 66f3b0c), op for op and byte
 * for byte, for a set of models and every program kind — without a GPU: the decoder state is fake (every device
 * pointer a distinct made-up address, every device matrix a distinct made-up descriptor, NULL where the backend's
 * upload gives NULL), so only the programs are compared, nothing is run.
 *
 *   dev/cuda/plan_check/build.sh     (needs build-cuda/libdepthdec.a: make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda)
 *   build-cuda/plan_check            prints one line per (model, kind); exit 0 when every program is identical
 *
 * Padding: push() zeroes each op before filling it; the one struct copied in from a stack temporary with
 * unspecified padding (the cu_raw of the hidden-state gather, in both builders) is re-copied field by field into
 * zeroed memory before the comparison. */
#include "../../../src/cuda/backend.cu"

#include "old_build.inc"

#include <stdio.h>

static uintptr_t g_addr = 0x10000000; /* fake device addresses: each buffer its own range */
static int g_id = 1;

static void *fake(size_t bytes) {
    uintptr_t a = g_addr;
    g_addr += ((bytes + 0xFFFF) & ~(uintptr_t)0xFFFF) + 0x10000;
    return (void *)a;
}
static float *fake_f(const void *host, size_t n) { return host ? (float *)fake(n * 4) : NULL; }

static void fake_mat(cu_mat *w) {
    memset(w, 0, sizeof *w);
    const int id = g_id++;
    w->type = id;
    w->wm = id + 1;
    w->N = 16 * id;
    w->K = 32 * id;
    w->MT = id + 2;
    w->KT = id + 3;
    w->pair = id & 1;
    w->group = id + 4;
    w->NG = id + 5;
    w->sbtype = id + 6;
    w->tile_bytes = id + 7;
    w->lane_bytes = id + 8;
    w->sb_bytes = id + 9;
    w->frag = (const uint8_t *)fake(4096);
    w->sb = (const uint8_t *)fake(4096);
}

static void fake_raw(cu_raw *r, int rows, int cols) {
    memset(r, 0, sizeof *r);
    r->type = g_id++;
    r->rows = rows;
    r->cols = cols;
    r->data = (const uint8_t *)fake((size_t)rows * cols * 4);
    r->pitch = (size_t)cols * 4;
    r->scales = (const uint8_t *)fake(4096);
    r->biases = (const uint8_t *)fake(4096);
    r->sbtype = g_id++;
    r->group = g_id++;
    r->sb_pitch = (size_t)g_id++;
}

/* The state cuda_init / upload_weights would make for m and max_batch B, with made-up device addresses. */
static void fake_state(cu_state *st, const dd_model *m, int B) {
    const dd_config *c = &m->cfg;
    const int L = c->layers, Q = c->levels, V = c->codebook_size, D = c->dim, H = c->heads,
              KV = c->kv_heads, HD = c->head_dim, F = c->ffn_dim, NE = m->nslices * L;
    memset(st, 0, sizeof *st);
    st->B = B;
    st->m = m;
    if (!alloc_entries(st, m)) {
        fprintf(stderr, "plan_check: out of memory\n");
        exit(1);
    }
    for (int e = 0; e < NE; e++) {
        const dd_layer *l = &m->layer[e];
        fake_mat(&st->qkv[e]);
        fake_mat(&st->wo[e]);
        fake_mat(&st->fc1[e]);
        fake_mat(&st->fc2[e]);
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
    for (int h = 0; h < (c->per_position ? Q : Q - 1); h++) fake_mat(&st->heads[h]);
    if (c->per_position) {
        for (int p = 0; p < Q; p++) fake_mat(&st->inps[p]);
    } else {
        if (c->has_head0) fake_mat(&st->head0);
        if (c->has_in_proj) fake_mat(&st->in_proj);
    }
    st->in_bias = fake_f(m->in_bias, D);
    st->pos = fake_f(m->pos, (size_t)Q * D);
    st->norm_w = fake_f(m->norm_w, D);
    st->norm_b = fake_f(m->norm_b, D);
    st->rope = c->has_rope ? (double *)fake((size_t)Q * HD * 8) : NULL;
    io_layout(st, c, B);
    st->d_in = (uint8_t *)fake(st->in_bytes);
    st->d_out = (uint8_t *)fake(8 + (size_t)B * Q * 4);
    const int qw = (H + 2 * KV) * HD;
    st->x = (float *)fake((size_t)2 * B * D * 4);
    st->qkvb = (float *)fake((size_t)2 * B * qw * 4);
    st->att = (float *)fake((size_t)2 * B * H * HD * 4);
    st->ff = (float *)fake((size_t)2 * B * F * 4);
    st->logits = (float *)fake((size_t)B * (c->per_position ? Q : Q - 1) * V * 4);
    st->logits0 = (float *)fake((size_t)B * V * 4);
    st->kc = (float *)fake((size_t)L * B * Q * KV * HD * 4);
    st->vc = (float *)fake((size_t)L * B * Q * KV * HD * 4);
    /* the gather table: native embed, or CSM's in(table) [rows, D] */
    fake_raw(&st->table, (int)m->embed.rows, c->embed_in_input_space ? D : (int)m->embed.cols);
    if (c->per_position) fake_raw(&st->text, (int)m->text_embed.rows, D);
}

static void free_state(cu_state *st) {
    free(st->qkv);
    free(st->bqkv);
}

/* zero the padding of the one struct copied in from a stack temporary (the file comment) */
static void normalise(prog *p) {
    for (int i = 0; i < p->n; i++) {
        const cu_raw t = p->op[i].smp.table;
        cu_raw z;
        memset(&z, 0, sizeof z);
        z.type = t.type, z.rows = t.rows, z.cols = t.cols, z.data = t.data, z.pitch = t.pitch, z.scales = t.scales;
        z.biases = t.biases, z.sbtype = t.sbtype, z.group = t.group, z.sb_pitch = t.sb_pitch;
        memcpy(&p->op[i].smp.table, &z, sizeof z);
    }
}

static const char *part(size_t off) {
    if (off < offsetof(cu_op, lin)) return "type/bar_after";
    if (off < offsetof(cu_op, att)) return "lin";
    if (off < offsetof(cu_op, smp)) return "att";
    return "smp";
}

/* Builds both programs of every kind for m; 0 when all are identical. */
static int check_model(const char *name, const dd_model *m, int *nprogs, int *nops) {
    const dd_config *c = &m->cfg;
    cu_state st;
    fake_state(&st, m, 5);
    int bad = 0;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_plan pl;
        prog a = {0}, b = {0};
        dd_status s = dd_plan_build(&pl, m, (dd_plan_kind)v, &err);
        if (!s) s = build(&st, m, &pl, &a, &err);
        dd_plan_free(&pl);
        old_build(&st, m, v, &b);
        if (s || a.fail || b.fail) {
            printf("%-34s %-9s FAILED: %s%s\n", name, dd_plan_kind_name((dd_plan_kind)v), s ? err.msg : "",
                   a.fail || b.fail ? " (out of memory)" : "");
            bad = 1;
            free(a.op);
            free(b.op);
            continue;
        }
        normalise(&a);
        normalise(&b);
        int diff = a.n != b.n, first = -1;
        for (int i = 0; i < a.n && i < b.n; i++)
            if (memcmp(&a.op[i], &b.op[i], sizeof(cu_op))) {
                diff = 1;
                if (first < 0) first = i;
            }
        (*nprogs)++;
        *nops += b.n;
        if (!diff) {
            printf("%-34s %-9s %4d ops identical\n", name, dd_plan_kind_name((dd_plan_kind)v), b.n);
        } else {
            bad = 1;
            printf("%-34s %-9s DIFFERENT: %d ops (translated) vs %d (old)\n", name, dd_plan_kind_name((dd_plan_kind)v),
                   a.n, b.n);
            for (int i = first; i >= 0 && i < a.n && i < b.n; i++) {
                if (!memcmp(&a.op[i], &b.op[i], sizeof(cu_op))) continue;
                const uint8_t *x = (const uint8_t *)&a.op[i], *y = (const uint8_t *)&b.op[i];
                printf("    op %d (type %d / %d):", i, a.op[i].type, b.op[i].type);
                int shown = 0;
                for (size_t k = 0; k < sizeof(cu_op) && shown < 6; k++)
                    if (x[k] != y[k]) {
                        printf(" byte %zu (%s +%zu)", k, part(k),
                               k - (k < offsetof(cu_op, lin)   ? 0
                                    : k < offsetof(cu_op, att) ? offsetof(cu_op, lin)
                                    : k < offsetof(cu_op, smp) ? offsetof(cu_op, att)
                                                               : offsetof(cu_op, smp)));
                        shown++;
                        k = (k | 7); /* next word */
                    }
                printf("\n");
                if (i - first > 6) break;
            }
        }
        free(a.op);
        free(b.op);
    }
    free_state(&st);
    return bad;
}

/* in() the identity (no in_proj; input_dim = dim), as tests/test_backends.c test_identity_in_proj makes it;
 * keep_head0 0 drops head0 too (then only the c0-given and score programs exist) */
static void drop_in_proj(dd_model *m, int keep_head0) {
    m->cfg.has_in_proj = 0;
    m->in_proj.rows = 0;
    m->in_bias = NULL;
    m->cfg.input_dim = m->cfg.dim;
    if (!keep_head0) {
        m->cfg.has_head0 = 0;
        m->head0.rows = 0;
    }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    struct {
        const char *name;
        const char *kind; /* synthetic kind, or NULL: `path` */
        dd_dtype wt;
        const char *path;
        int mod; /* 1: no in_proj; 2: no in_proj, no head0; 3: no head0 */
    } cases[] = {
        {"tiny-gpt f32", "tiny-gpt", DD_F32, NULL, 0},
        {"tiny-gpt q4", "tiny-gpt", DD_Q4, NULL, 0},
        {"tiny-gpt bf16 no in_proj", "tiny-gpt", DD_BF16, NULL, 1},
        {"tiny-gpt bf16 no in_proj, no head0", "tiny-gpt", DD_BF16, NULL, 2},
        {"tiny-gpt bf16 no head0", "tiny-gpt", DD_BF16, NULL, 3},
        {"tiny-llama bf16", "tiny-llama", DD_BF16, NULL, 0},
        {"tiny-llama q8 no in_proj", "tiny-llama", DD_Q8, NULL, 1},
        {"tiny-qwen3 bf16", "tiny-qwen3", DD_BF16, NULL, 0},
        {"tiny-moshi bf16", "tiny-moshi", DD_BF16, NULL, 0},
        {"tiny-moshi q4", "tiny-moshi", DD_Q4, NULL, 0},
        {"gpt bf16", "gpt", DD_BF16, NULL, 0},
        {"csm q8", "csm", DD_Q8, NULL, 0},
        {"qwen3tts q4", "qwen3tts", DD_Q4, NULL, 0},
        {"fixture gpt_f16", NULL, DD_F32, "tests/fixtures/gpt_f16.safetensors", 0},
        {"fixture gpt_q8", NULL, DD_F32, "tests/fixtures/gpt_q8.safetensors", 0},
        {"fixture csm_tiny", NULL, DD_F32, "tests/fixtures/csm_tiny", 0},
        {"fixture qwen3tts_tiny", NULL, DD_F32, "tests/fixtures/qwen3tts_tiny", 0},
        {"fixture qwen3omni_tiny", NULL, DD_F32, "tests/fixtures/qwen3omni_tiny", 0},
        {"fixture kyutai_tiny", NULL, DD_F32, "tests/fixtures/kyutai_tiny/model.safetensors", 0},
        {"fixture kyutai_tiny_legacy", NULL, DD_F32, "tests/fixtures/kyutai_tiny_legacy/model.safetensors", 0},
        {"fixture moshi_tiny", NULL, DD_F32, "tests/fixtures/moshi_tiny", 0},
        {"fixture moshi_tiny_depth", NULL, DD_F32, "tests/fixtures/moshi_tiny_depth", 0},
        {"fixture moshi_q12", NULL, DD_F32, "tests/fixtures/moshi_q12", 0},
    };
    int bad = 0, nprogs = 0, nops = 0, nmodels = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_model *m = NULL;
        dd_status s = cases[i].kind ? dd_model_synthetic(&m, cases[i].kind, cases[i].wt, 7, &err)
                                    : dd_model_load(&m, cases[i].path, &err);
        if (s) {
            printf("%-34s cannot load: %s\n", cases[i].name, err.msg);
            bad = 1;
            continue;
        }
        if (cases[i].mod == 1 || cases[i].mod == 2) drop_in_proj(m, cases[i].mod == 1);
        if (cases[i].mod == 3) {
            m->cfg.has_head0 = 0;
            m->head0.rows = 0;
        }
        const dd_config *c = &m->cfg;
        printf("# %s: %s block, Q %d, L %d, in %s, head0 %d, pos %d, qk_norm %d, rope %d, slices %d\n",
               cases[i].name, c->block == DD_BLOCK_GPT ? "gpt" : "llama", c->levels, c->layers,
               c->per_position ? "per-position" : c->embed_in_input_space ? "proj-per-pass (CSM)"
                                              : c->has_in_proj          ? "proj"
                                                                        : "identity",
               c->has_head0, m->pos != NULL, c->has_qk_norm, c->has_rope, m->nslices);
        bad |= check_model(cases[i].name, m, &nprogs, &nops);
        nmodels++;
        dd_model_free(m);
    }
    printf("plan_check: %d models, %d programs, %d ops: %s\n", nmodels, nprogs, nops,
           bad ? "DIFFERENCES (above)" : "every program identical to the old builder's");
    return bad;
}
