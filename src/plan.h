/* The frame plan: SPEC §1's frame for one request kind, written once as a list of ops built from the model.
 *
 * dd_plan_build turns (model, kind) into the ops of a frame for any batch: every op is stated per stream, and a
 * backend executes it for the b streams of a call (rows of a buffer are stream-major: row s*span + t). The CPU
 * backend executes the plan as it is (cpu/cpu.c, run_plan). The CUDA backend translates it twice, with the same
 * rules where they meet (a SAMPLE or CODE_C0 becomes the code source of the op that gathers that level's
 * embedding, the prelude's in(h) op goes first, a LINEAR's matrix is looked up by its tag (cu_plan_mat), CSM's
 * in_proj is applied to the table once at load: DD_IN_PROJ_PER_PASS below):
 *   - into the op program of its frame kernel (cuda/backend.cu, build), every pass written out, with barriers
 *     where an op touches rows an earlier op since the last barrier wrote (or writes rows it read);
 *   - into the op list of its latency executor (cuda/lat.cu, lt_translate): the prelude and one pass, pass 1 (per-
 *     position models: pass 2), as a template that runs at every level, each write of a buffer in a pass bound to
 *     words of its own (a dataflow executor writes each word once a pass).
 * The reference backend (ref.c) does not use the plan: it is the independent oracle, written from SPEC.
 *
 * A frame, per kind (P = 2 new positions in pass 1, else 1; p0 = 0 in pass 1, else l):
 *   prelude     [DECODE, SCORE_L0] LINEAR head0: HIDDEN -> LOGITS0
 *               [DECODE] SAMPLE level 0 | [DECODE_C0] CODE_C0         (SCORE: CODES are the caller's)
 *               the two inputs of pass 1: in(h) and emb0(c0), by GATHERs and in_proj LINEARs (dd_plan_in)
 *   pass l      per layer: LINEAR qkv (norm1) | ATTEND | LINEAR out (+= residual) | LINEAR fc1 (norm2; GELU or
 *               SwiGLU) | LINEAR fc2 (+= residual)
 *               LINEAR head[l-1] (final norm) on each stream's last row -> LOGITS(l)
 *               [DECODE*] SAMPLE level l;   l < Q-1: GATHER emb l(code) as pass l+1's input (+ in_proj, CSM)
 * Per-position models (Moshi, in mode DD_IN_PER_POSITION): Q passes of one position each, p = 0 .. Q-1 (the op's
 * `pass` is p + 1; there is no prelude):
 *   pass p      [p == 0, DECODE_C0] CODE_C0
 *               GATHER the text token's row (p == 0) or emb(p-1)(c(p-1)) into X; LINEAR X += in_proj[p] . h
 *               the layers as above with every matrix's slice p (dd_model_layer(m, p, i))
 *               LINEAR heads[p] (no final norm) -> LOGITS0 (p == 0; DECODE and SCORE_L0 only) or LOGITS(p)
 *               [DECODE*] SAMPLE level p (level 0 only in DECODE)
 * SAMPLE, CODE_C0 and GATHER are per-stream ops (dd_plan_op_per_stream): a backend may run a consecutive run of
 * them as one job per stream (the CPU does: one fork-join per level).
 *
 * The plan holds pointers into the model (weights, biases, norms, learned positions): it lives no longer than
 * the model. It is built once per decoder and kind; running it allocates nothing.
 */
#ifndef DD_PLAN_H
#define DD_PLAN_H

#include "kernels.h"
#include "model/model.h"

#include <stdint.h>

typedef enum dd_plan_kind {
    DD_PLAN_DECODE_C0 = 0, /* decode, c0 given */
    DD_PLAN_DECODE = 1,    /* decode, c0 sampled from head0 */
    DD_PLAN_SCORE = 2,     /* teacher-forced logits of levels 1..Q-1 */
    DD_PLAN_SCORE_L0 = 3,  /* the same plus level-0 logits head0 . h */
    DD_PLAN_NKIND = 4
} dd_plan_kind;

/* How inputs reach model space — decided here, once, for every backend that executes the plan. */
typedef enum dd_plan_in {
    DD_IN_IDENTITY = 0, /* no in_proj (input_dim == dim): h is copied into X; native embeddings are model-space */
    DD_IN_PROJ = 1,     /* native: in_proj applied to h only; embeddings are already model-space */
    /* CSM (embeddings in backbone space): h and the gathered table rows go to XIN and in_proj projects them in
     * every pass (one more linear per pass) — the reference's rounding, and the CPU's. The CUDA backend
     * precomputes in(table) at load instead (SPEC allows it; by its linear's numerics contract a row's in() does
     * not depend on the rows beside it, so these are the numbers a per-pass in_proj would give there) and
     * translates the pattern: a GATHER of table rows into XIN becomes a gather of in(table) rows into the X rows
     * the in_proj LINEAR from XIN writes, a GATHER of h into XIN becomes that LINEAR applied to h, and the LINEAR
     * from XIN itself is dropped. */
    DD_IN_PROJ_PER_PASS = 2,
    /* Moshi: every pass's one input row is a gathered table row (text or code) + in_proj slice p . h */
    DD_IN_PER_POSITION = 3
} dd_plan_in;

/* Activation buffers, named abstractly; a backend binds each to memory (and its row stride). */
typedef enum dd_plan_buf {
    DD_BUF_HIDDEN = 0, /* [b, I]    the caller's backbone states (read only) */
    DD_BUF_XIN,        /* [b P, I]  inputs in backbone space (DD_IN_PROJ_PER_PASS only) */
    DD_BUF_X,          /* [b P, D]  residual stream */
    DD_BUF_QKV,        /* [b P, (H + 2 KVH) HD] */
    DD_BUF_ATT,        /* [b P, H HD] */
    DD_BUF_FF,         /* [b P, F] */
    DD_BUF_LOGITS0,    /* [b, V]    level-0 logits (the caller's in SCORE_L0) */
    DD_BUF_LOGITS,     /* [b, V]    logits of the op's level; in SCORE the caller's [b, Q-1, V], level l at
                        *           column (l-1) V (a decode may reuse one [b, V] buffer for every level) */
    DD_BUF_N
} dd_plan_buf;

/* Rows of a buffer touched by an op: the buffer holds `span` rows per stream in this pass (stream s's rows are
 * s*span .. s*span+span-1); the op touches rows first .. first+n-1 of each stream, n == span (all) or n == 1.
 * A LINEAR or ATTEND over it has T = b * n rows. `level`: the level of DD_BUF_LOGITS rows (1..Q-1), else 0. */
typedef struct dd_plan_rows {
    uint8_t buf, span, first, n, level;
} dd_plan_rows;

typedef enum dd_plan_op_kind {
    DD_OP_LINEAR = 0, /* y = epilogue(prologue(x) @ W^T), the src/kernels.h linear over up to 3 segments */
    DD_OP_ATTEND,     /* append the P new positions' K/V to layer `layer`'s frame cache and attend causally */
    DD_OP_SAMPLE,     /* per stream: CODES[s, level] = the SPEC §3 rule on its logits row (LOGITS(level)/LOGITS0) */
    DD_OP_CODE_C0,    /* per stream: CODES[s, 0] = C0[s] */
    DD_OP_GATHER,     /* per stream: dst row = source row (+ pos[p]) */
    DD_OP_ADD_POS     /* x rows (all P of each stream) += pos[p0 + t] */
} dd_plan_op_kind;

/* Which of the model's matrices a LINEAR applies, for a backend that keeps its own copy of the weights (CUDA's
 * are uploaded in its own layout, q/k/v fused): with `entry` the layer entry (the index into m->layer that
 * dd_model_layer gives) of QKV .. FC2, the index into the plan's head[] of HEAD, the slice (the plan's inp[]) of a
 * per-position model's IN_PROJ, else 0. Its bias and norm vectors are that matrix's (the final norm for HEAD). */
typedef enum dd_plan_mat {
    DD_MAT_HEAD0 = 0,
    DD_MAT_IN_PROJ,
    DD_MAT_QKV, /* wq, wk, wv (bq, bk, bv; norm1) */
    DD_MAT_OUT, /* wo (bo) */
    DD_MAT_FC1, /* fc1 (b1; norm2), with up for SwiGLU */
    DD_MAT_FC2, /* fc2 (b2) */
    DD_MAT_HEAD
} dd_plan_mat;

/* y (T, N) = act(norm(x) @ W^T + bias) (+ y when residual) (+ add), the dd_linear_args contract of kernels.h;
 * `add` is one row (a learned position) added to every output row, or NULL. */
typedef struct dd_plan_linear {
    dd_plan_rows y, x;
    int nseg;
    dd_linear_seg seg[DD_LINEAR_SEGS]; /* kernels.h */
    int norm; /* DD_NORM_* */
    const float *norm_w, *norm_b;
    float eps;
    int act; /* DD_ACT_* */
    int residual;
    const float *add;
    int mat, entry; /* dd_plan_mat: the matrix the segments view (above) */
} dd_plan_linear;

/* qkv: rows of q heads, then k heads, then v heads (P per stream); out: (P per stream, H HD). RoPE (HF rotate
 * half, from dd_rope_table) on q and k when rope. */
typedef struct dd_plan_attend {
    dd_plan_rows out, qkv;
    int layer, P, p0;
    int H, KVH, HD;
    int rope;
    int qk_norm; /* Qwen3: q and k heads RMS-normed with the layer's q_norm / k_norm (eps norm_eps) before RoPE */
    int entry;   /* the layer entry of those norms (dd_plan_mat); `layer` indexes the frame cache */
} dd_plan_attend;

typedef struct dd_plan_sample {
    dd_plan_rows logits; /* one row per stream */
    int level;
} dd_plan_sample;

enum { DD_GATHER_HIDDEN = 0, DD_GATHER_EMBED = 1, DD_GATHER_TEXT = 2 };
/* src DD_GATHER_HIDDEN: HIDDEN row s (its first `width` floats); DD_GATHER_EMBED: row level*R + CODES[s, level]
 * of m->embed (R = m->embed_rows; dequantized; `width` = its columns); DD_GATHER_TEXT: row TEXT[s] of
 * m->text_embed (the caller's text tokens). Then + pos[pos] (D floats) when pos >= 0. */
typedef struct dd_plan_gather {
    dd_plan_rows dst; /* one row per stream */
    int src, level, width, pos;
} dd_plan_gather;

typedef struct dd_plan_add_pos {
    dd_plan_rows x;
    int p0;
} dd_plan_add_pos;

typedef struct dd_plan_op {
    int kind; /* dd_plan_op_kind */
    int pass; /* 0: prelude; l: pass l (1..Q-1) */
    union {
        dd_plan_linear lin;
        dd_plan_attend att;
        dd_plan_sample smp;
        dd_plan_gather gat;
        dd_plan_add_pos pos;
    };
} dd_plan_op;

typedef struct dd_plan {
    dd_plan_kind kind;
    dd_plan_in in;
    int width[DD_BUF_N]; /* floats per row of each buffer (LOGITS: V) */
    int rows_max;        /* rows per stream of the pass buffers, at most (2: pass 1) */
    int n;
    dd_plan_op *op;      /* [n] */
    dd_weight *head;     /* views of m->heads, level l at l-1 (the head LINEARs point here); per-position
                          * models: [Q], level l at l */
    dd_weight *inp;      /* per-position models: [Q] views of m->in_proj, slice p at p; else NULL */
} dd_plan;

/* Build the plan of `kind` for m into *p (zeroed first). DD_EINVAL when the kind needs head0 and m has none;
 * DD_ENOMEM. Free with dd_plan_free (also after a failure). */
dd_status dd_plan_build(dd_plan *p, const dd_model *m, dd_plan_kind kind, dd_error *err);
void dd_plan_free(dd_plan *p);

/* 1 for the ops that act on each stream on its own (SAMPLE, CODE_C0, GATHER). */
static inline int dd_plan_op_per_stream(int kind) {
    return kind == DD_OP_SAMPLE || kind == DD_OP_CODE_C0 || kind == DD_OP_GATHER;
}

const char *dd_plan_kind_name(dd_plan_kind kind);

#endif
