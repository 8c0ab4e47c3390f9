/* The cuda backend's decoder state (backend.cu owns it; the latency executor, lat.cu, reads the weights and
 * buffers from it). */
#ifndef DD_CU_STATE_CUH
#define DD_CU_STATE_CUH

#include "cu_common.cuh"

enum { PROG_DECODE_C0 = 0, PROG_DECODE = 1, PROG_SCORE = 2, PROG_SCORE_L0 = 3, NPROG = 4 };

typedef struct lt_exec lt_exec; /* lat.cu */
typedef struct tp_exec tp_exec; /* tput.cu */
typedef struct cu_devstat cu_devstat; /* devapi.cu */

typedef struct cu_state {
    void **allocs;
    int nallocs;
    cu_scratch sc;
    int B;
    /* weights. Layer matrices and vectors are per layer entry: ns entries of L layers, entry p L + li = layer li
     * of slice p (ns = 1; per-position models, Moshi: ns = Q, pass p uses slice p, as dd_model_layer) */
    int ns;
    cu_mat head0, in_proj, *qkv, *wo, *fc1, *fc2, *heads; /* heads [Q-1], level l at l - 1; Moshi [Q], at l */
    cu_mat *inps; /* Moshi: in_proj's slices [Q] (position p's at p; in_proj unused), else NULL */
    float *in_bias, *pos, *norm_w, *norm_b;
    float **bqkv, **bo, **b1, **b2, **n1w, **n1b, **n2w, **n2b;
    float **qn, **kn; /* Qwen3: per-layer q/k norm weights [HD], NULL otherwise */
    cu_raw table; /* gather table of code embeddings: native embed (Moshi: V + 1 rows a level), or CSM in(table)
                   * (float32) */
    cu_raw text;  /* Moshi: text_embed [text_vocab + 1, D], position 0's table (row = the frame's text token) */
    double *rope;
    /* activations */
    float *x, *qkvb, *att, *ff, *logits, *logits0, *kc, *vc; /* logits [B, Q-1, V]; Moshi [B, Q, V], level 0 too */
    /* packed io: in = hidden | seeds | frames | c0 | codes_in | text (Moshi) ; out = err[2] | codes */
    uint8_t *d_in, *h_in, *d_out, *h_out;
    size_t off_seeds, off_frames, off_c0, off_codes_in, off_text, in_bytes;
    cu_op *h_prog[NPROG], *d_prog[NPROG];
    int nprog[NPROG];
    lt_exec *lt; /* the latency executor (small batches), or NULL */
    int lt_max;  /* batches of at most this many streams run on it, in groups of at most lt_max_batch streams
                  * (test hook: dd_cuda_test_crossover) */
    unsigned char lt_built[NPROG][9]; /* the latency executor's plan of (variant, n) is built (n <= 8) */
    tp_exec *tp; /* the throughput executor (tensor-core linears, sm_90a), or NULL */
    int tp_min;  /* batches of at least this many streams (past lt_max) run on it (test hook: dd_cuda_test_tput) */
    int dev;          /* the device the decoder lives on */
    int dev_used;     /* a dd_*_device call was made: host calls and dd_decoder_sync wait and check first */
    cu_devstat *ds;   /* device: error state of the device API (devapi.cu) */
    const dd_model *m;
} cu_state;

/* backend.cu: the device matrix that a frame plan's LINEAR names (dd_plan_linear.mat, .entry: plan.h) and that
 * matrix's device bias and norm vectors (a head's: the final norm's; NULL where the model has none). Both
 * translations of the plan use it: the frame programs (backend.cu, build) and the latency executor's op list
 * (lat.cu, lt_translate). */
void cu_plan_mat(const cu_state *st, int mat, int entry, const cu_mat **w, const float **bias, const float **nw,
                 const float **nb);
/* backend.cu: enqueue one frame of program `variant` for n streams whose inputs are in st->d_in, on `stream`. */
dd_status cu_launch_frame(cu_state *st, int variant, int n, float temp, int topk, cudaStream_t stream, dd_error *err);
/* backend.cu: 1 when a frame of n streams would run on the latency executor with every plan it needs not yet built
 * (building one synchronises: not allowed inside a stream capture) */
int cu_lt_needs_build(const cu_state *st, int variant, int n);

/* devapi.cu: the device API of the cuda backend (dd_decode_device, dd_score_device, dd_decoder_sync). */
dd_status cu_devapi_init(cu_state *st, dd_error *err);
/* When a device call was made: wait for the device and return (and clear) the first error of a device-API frame. */
dd_status cu_devapi_pending(cu_state *st, dd_error *err);
dd_status cu_decode_device(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                           const uint64_t *frames, const dd_sampling *s, int32_t *codes, void *stream, dd_error *err);
dd_status cu_score_device(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                          float *logits0, void *stream, dd_error *err);
dd_status cu_decoder_sync(dd_decoder *d, dd_error *err);

/* lat.cu: the latency executor. lt_create returns DD_OK with *out NULL when the model or device does not suit
 * it; lt_max_batch says up to which batch one launch runs; lt_run enqueues one frame of streams r0 .. r0 + n - 1
 * (inputs already in st->d_in) on `stream`, with no host synchronisation (capturable); r0 == 0 resets the error
 * words, so a batch in groups is launched in row order. */
dd_status lt_create(lt_exec **out, cu_state *st, const dd_model *m, dd_error *err);
void lt_free(lt_exec *x);
int lt_max_batch(const lt_exec *x);
int lt_default_crossover(const lt_exec *x); /* batches run on it by default */
int lt_can(lt_exec *x, int variant, int n, dd_error *err, dd_status *s); /* builds the plan on first use */
dd_status lt_run(lt_exec *x, int variant, int n, int r0, float temp, int topk, cudaStream_t stream, dd_error *err);

/* tput.cu: the throughput executor. tp_create returns DD_OK with *out NULL when the device or build lacks sm_90a;
 * max_tokens: the most tokens one linear of a frame has (streams x positions a pass). tp_run enqueues one frame of
 * program `variant` for n streams (inputs in st->d_in) on `stream`, no host synchronisation (capturable). */
dd_status tp_create(tp_exec **out, cu_state *st, int max_tokens, dd_error *err);
void tp_free(tp_exec *x);
int tp_covers(const tp_exec *x); /* every linear of the model's programs runs on its tensor-core tile */
dd_status tp_run(tp_exec *x, int variant, int n, float temp, int topk, cudaStream_t stream, dd_error *err);

#endif
