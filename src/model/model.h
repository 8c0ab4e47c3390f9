/* Internal view of a loaded model: every weight as a typed, row-sliceable matrix view into mapped (or owned)
 * memory. Backends read weights only through these views. */
#ifndef DD_MODEL_H
#define DD_MODEL_H

#include "depthdec.h"

#include <stddef.h>
#include <stdint.h>

/* Hard bounds on what a config may ask for (a hostile header must not trigger a huge allocation). */
#define DD_MAX_LEVELS 64
#define DD_MAX_VOCAB 65536
#define DD_MAX_DIM 16384
#define DD_MAX_FFN 65536
#define DD_MAX_LAYERS 64
#define DD_MAX_HEADS 256
#define DD_MAX_HEAD_DIM 512
#define DD_MAX_BATCH 4096
#define DD_MAX_TEXT_VOCAB 1048576 /* Moshi: text ids (32000 published) */

/* A matrix W (rows, cols), row-major, y = W x. Dense rows are `cols` elements of `type`; an MLX affine row is
 * cols*bits/32 u32 words plus cols/group scales and biases of `sb_type` (F32/F16/BF16). Pointers may be
 * misaligned: read through memcpy (dd_ld16/dd_ld32). */
typedef struct dd_weight {
    dd_dtype type;
    int64_t rows, cols;
    const uint8_t *data;
    size_t row_bytes; /* bytes per row of data */
    const uint8_t *scales, *biases;
    dd_dtype sb_type;
    int group;
    size_t sb_row_bytes; /* bytes per row of scales (and of biases) */
} dd_weight;

/* Rows [r0, r0+n) of w as a view (no copy). */
dd_weight dd_weight_rows(const dd_weight *w, int64_t r0, int64_t n);
/* Row r of w dequantized/converted to float32 (out has w->cols elements). */
void dd_weight_row_f32(const dd_weight *w, int64_t r, float *out);
/* Bytes of w as stored (data + scales + biases). */
uint64_t dd_weight_bytes(const dd_weight *w);
/* Element size in bytes of a dense type (0 for quantized). */
size_t dd_dtype_size(dd_dtype t);

typedef struct dd_layer {
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b; /* [D]; biases only for gpt (NULL for llama) */
    dd_weight wq, wk, wv;                         /* [H*HD, D], [KVH*HD, D], [KVH*HD, D] */
    float *bq, *bk, *bv;                          /* optional biases (gpt), else NULL */
    dd_weight wo;                                 /* [D, H*HD] */
    float *bo;
    dd_weight fc1;                                /* gpt: [F, D]; llama: gate rows [F, D] */
    dd_weight up;                                 /* llama: up rows [F, D]; gpt: unused (type/rows 0) */
    float *b1;                                    /* gpt fc1 bias [F] or NULL */
    dd_weight fc2;                                /* [D, F] */
    float *b2;
    float *q_norm, *k_norm;                       /* [HD] per-head RMSNorm weights before RoPE (Qwen3), else NULL */
} dd_layer;

struct dd_model {
    dd_config cfg;
    char source[512];
    int tensor_count;

    dd_weight head0;   /* [V, input_dim], rows 0 when absent */
    dd_weight in_proj; /* [D, input_dim], rows 0 when absent */
    float *in_bias;    /* [D] or NULL */
    dd_weight embed;   /* native: [(Q-1)*R, D] (level j at rows j*R, R = embed_rows); CSM: [Q*V, input_dim] flat table */
    int embed_rows;    /* rows of one level's table: V (Moshi: V + 1, the last the pad/initial id) */
    dd_weight text_embed; /* Moshi: [text_vocab + 1, D] position 0's table (the frame's text token); else rows 0 */
    float *pos;        /* [Q, D] f32 copy, or NULL */
    dd_layer *layer;   /* [nslices * L]: layer i of position p's weights at [p * L + i] (dd_model_layer) */
    int nslices;       /* 1, or Q for per-position weights (Moshi; in_proj [Q*D, I] and heads [Q*V, D] too) */
    float *norm_w, *norm_b; /* final norm [D]; bias gpt only */
    dd_weight heads;   /* [(Q-1)*V, D]: head of level l at rows (l-1)*V (Moshi: [Q*V, D], level l at rows l*V) */

    int family;         /* where the tensors came from: DD_FAMILY_* of config.h (native, HF CSM, Qwen3) */
    dd_weight embed_last; /* Qwen3 directories: codec_embedding.{Q-2} [V, input_dim] (only the talker's next input
                           * embedding reads it; m->embed then holds the unprojected talker-space tables) */
    int kyutai;         /* Moshi from Kyutai's own checkpoint: 1 the moshi package's LMModel state dict (PyTorch),
                         * 2 the moshi_mlx package's Lm weights (MLX, dense or quantized); else 0 */
    const char *prefix; /* Qwen3: the predictor's tensor-name prefix ("" or "talker.code_predictor.") */

    /* llama: RoPE inverse frequencies (HD/2), computed in double at load */
    double *rope_inv_freq;

    /* memory: mapped files and owned buffers, released by dd_model_free */
    struct dd_st_file *maps; /* [nmaps] */
    int nmaps;
    void **owned;
    int nowned, cap_owned;
};

/* Layer i's weights at position p (per-position models: slice p; else the one set). Norm vectors are shared by the
 * slices of a layer. */
static inline const dd_layer *dd_model_layer(const dd_model *m, int p, int i) {
    return &m->layer[(m->nslices > 1 ? p : 0) * m->cfg.layers + i];
}

/* The RoPE table of positions 0 .. npos-1, the one builder every backend's table comes from (ref, cpu and cuda;
 * the CPU rounds it to float): cs[(p * HD/2 + j) * 2] = cos(p * inv_freq[j]), cs[(p * HD/2 + j) * 2 + 1] =
 * sin(p * inv_freq[j]), angle and both functions in double. cs has npos * HD doubles. */
void dd_rope_table(double *cs, const double *inv_freq, int HD, int npos);

/* Remember p for release by dd_model_free; returns p, or NULL (and frees p) if bookkeeping fails. */
void *dd_model_own(dd_model *m, void *p);

/* Resolve the tensors of a model whose files are mapped (m->maps) and whose config is parsed (m->cfg).
 * csm: HF CSM names, else native names. Used by dd_model_load and by the synthetic models. */
dd_status dd_model_load_from_maps(dd_model *m, const char *label, int family, dd_error *err);

/* A model from a native-layout safetensors image in memory (config in __metadata__["depthdec.config"]) named
 * `label`; takes ownership of img (freed with the model, or here on failure). The synthetic models and
 * dd_model_export_mem are built this way. */
dd_status dd_model_from_image(dd_model **out, const char *label, uint8_t *img, size_t size, dd_error *err);

#endif
