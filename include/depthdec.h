/* depthdec — exact, fast inference for the depth decoder of RVQ speech LMs.
 *
 * One header, two opaque handles:
 *   dd_model    weights + config, loaded from a .safetensors file (native layout) or an HF directory
 *               (config.json + model.safetensors or a sharded index). Immutable once loaded: one model may be
 *               shared by any number of decoders in any number of threads.
 *   dd_decoder  per-user state (KV cache, scratch, backend resources) for one backend and a maximum batch.
 *               A decoder is used by one thread at a time.
 *
 * Every call that can fail returns a dd_status and, when `err` is not NULL, fills it with the same code and a
 * one-line message that names the file, tensor or argument and the offending value. The library never prints
 * and never exits.
 */
#ifndef DEPTHDEC_H
#define DEPTHDEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DD_VERSION_STRING "0.1.0"

/* DD_API marks what libdepthdec.so exports: the library is compiled with -fvisibility=hidden, so the functions of
 * this header are its whole exported surface (yyjson's yyjson_api). */
#if defined(__GNUC__) && __GNUC__ >= 4
#define DD_API __attribute__((visibility("default")))
#else
#define DD_API
#endif

typedef enum dd_status {
    DD_OK = 0,
    DD_EINVAL = 1,       /* a bad argument: NULL pointer, n > max_batch, code 2051 >= V, T = -1, K = -3 */
    DD_EIO = 2,          /* a file could not be opened, mapped or read: "x.safetensors: No such file" */
    DD_EFORMAT = 3,      /* a malformed file: header length beyond file, overlapping offsets, bad JSON */
    DD_EMODEL = 4,       /* a well-formed file that is not a usable model: missing tensor, wrong shape, bad config */
    DD_ENOMEM = 5,       /* an allocation failed */
    DD_ENUMERIC = 6,     /* non-finite input, or a level whose logits have no finite value */
    DD_EUNSUPPORTED = 7, /* a valid request this build cannot serve: backend not built, no GPU, no head0 */
} dd_status;

typedef struct dd_error {
    dd_status code;
    char msg[512];
} dd_error;

/* Short name of a status ("invalid argument", ...). Static storage. */
DD_API const char *dd_status_name(dd_status s);

/* ---- model ------------------------------------------------------------------------------------------------ */

typedef struct dd_model dd_model;

typedef enum dd_block { DD_BLOCK_GPT = 0, DD_BLOCK_LLAMA = 1 } dd_block;

/* Weight storage types. DD_Q8/DD_Q4 are MLX affine quantization (w = scale*q + bias per group). */
typedef enum dd_dtype { DD_F32 = 0, DD_F16 = 1, DD_BF16 = 2, DD_Q8 = 3, DD_Q4 = 4 } dd_dtype;

DD_API const char *dd_dtype_name(dd_dtype t); /* "f32", "f16", "bf16", "q8", "q4" */

typedef struct dd_config {
    dd_block block;
    int levels;        /* Q: codes per frame */
    int codebook_size; /* V */
    int input_dim;     /* width of the backbone hidden state h */
    int dim;           /* D */
    int layers;
    int heads;
    int kv_heads;
    int head_dim;
    int ffn_dim;
    float norm_eps;
    int has_rope;
    double rope_theta;
    int rope_scaling; /* llama3 frequency scaling on/off, with the four values below */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
    int has_head0;   /* the model can sample c0 itself */
    int has_in_proj; /* else in() is the identity and input_dim == dim */
    int has_pos;     /* learned positions */
    int embed_in_input_space; /* CSM: code embeddings live in backbone space and go through in() */
    int quant_bits;  /* 0 = dense; 8 or 4 = MLX affine */
    int quant_group; /* group size when quantized */
    dd_dtype weight_type; /* storage type of the layer matrices */
    int has_qk_norm;      /* Qwen3: q and k RMS-normed per head (over head_dim, weights q_norm/k_norm) before RoPE */
    /* Kyutai Moshi's depformer (docs/semantics.md): every linear has one weight slice per position (pass p uses
     * slice p of every layer matrix, of in_proj and of the heads), the temporal hidden state enters at every
     * position through in_proj slice p, position 0 embeds the frame's text token and predicts c0 (has_head0 is 1:
     * the model samples c0 itself), position k >= 1 embeds c(k-1); the code tables have codebook_size + 1 rows
     * (the last = the pad/initial id, a valid input code); no RoPE, no final norm. */
    int per_position; /* 1 for Moshi's depformer, else 0 */
    int text_vocab;   /* Moshi: text ids are in [0, text_vocab] (text_vocab + 1 rows); 0 = the model takes no text */
} dd_config;

/* Load a model from `path`: a .safetensors file (native layout; config in __metadata__["depthdec.config"] or a
 * config.json beside it) or a directory (HF layouts: CSM, the Qwen3 code predictors, Kyutai Moshi's depformer as
 * transformers saves MoshiForConditionalGeneration or MoshiDepthDecoder). The file is mapped, fully validated, and either the whole
 * model loads or nothing does (*out stays NULL). Free with dd_model_free. Thread-safe. */
DD_API dd_status dd_model_load(dd_model **out, const char *path, dd_error *err);

/* Qwen3 code predictors: the talker's next input embedding for n frames of codes [n, levels] (c0 included) into
 * out [n, input_dim]: the talker's codec table at c0 plus codec_embedding.{j-1} at c_j for j = 1..levels-1 (the
 * last table too, which no pass reads), unprojected, summed in double and rounded once (the talker adds its own
 * text/pad embedding). Needs the model loaded from its HF directory (the converted native file keeps only the
 * projected tables): else DD_EUNSUPPORTED. */
DD_API dd_status dd_next_embedding(const dd_model *m, int n, const int32_t *codes, float *out, dd_error *err);

/* Build one of the embedded synthetic models in memory: kind "gpt" (the seed's dims), "csm" (CSM-1B depth dims),
 * "qwen3tts" (Qwen3-TTS's code predictor dims: q/k norms, no head0), "moshi" (Kyutai Moshi's depformer dims: 8 x
 * 2048, D 1024, 6 layers, 16 x 64, gated width 2816, text vocab 32000, temporal width 4096; per-position weights) or
 * "tiny-gpt" / "tiny-wide" (tiny-gpt with a feed-forward width of 3200) / "tiny-llama" / "tiny-qwen3" / "tiny-moshi"
 * (small models for tests). Weights are deterministic functions of `seed`, scaled so that activations stay O(1),
 * stored as `weights` (q8/q4 with group 64). Free with dd_model_free. */
DD_API dd_status dd_model_synthetic(dd_model **out, const char *kind, dd_dtype weights, uint64_t seed, dd_error *err);

/* One named tensor in memory, for dd_model_from_tensors: `ndim` dims (0..8) of `shape`, elements of `dtype`
 * (DD_F32, DD_F16 or DD_BF16) stored contiguously in row-major (C) order at `data`, which may be misaligned and
 * may be NULL only when the tensor has no element. A PyTorch tensor's `.contiguous()` storage or a NumPy
 * C-contiguous array is this layout. */
#define DD_TENSOR_MAX_DIMS 8
typedef struct dd_tensor_view {
    const char *name; /* e.g. "depth_decoder.model.layers.0.self_attn.q_proj.weight"; < 256 bytes */
    dd_dtype dtype;
    int ndim;
    int64_t shape[DD_TENSOR_MAX_DIMS];
    const void *data;
} dd_tensor_view;

/* Build a model from named tensors in memory, with no file: what dd_model_load does with a directory or file once
 * it has read it. `config_json` is the text of the config: an HF CSM config.json (`"model_type": "csm"`; the
 * tensors then carry the HF CSM names and layouts dd_model_load accepts in a directory, e.g. `lm_head.weight`,
 * `depth_decoder.codebooks_head.weight [Q-1, D, V]`, `depth_decoder.model.layers.{i}.mlp.up_proj.weight`; an
 * `nn.Module`'s `state_dict()` of a transformers `CsmForConditionalGeneration` is such a list; likewise a Qwen3 code
 * predictor's or Moshi's config.json with the names of their directories, e.g. a `MoshiForConditionalGeneration`
 * state_dict with its config) or a native
 * config (`"format": "depthdec"`, native names; dense weights only: MLX-quantized tensors need U32, which
 * dd_tensor_view does not carry). Tensors the model does not use (an HF CSM backbone, codec, text embeddings)
 * may be given and are ignored without being read. The values the model uses are copied: the caller's buffers
 * may be freed or changed as soon as the call returns. Errors (DD_EINVAL: NULL arguments, a duplicate or empty
 * name, a dtype other than f32/f16/bf16, a negative dim; DD_EFORMAT: the config is not JSON; DD_EMODEL: a missing
 * tensor, a wrong shape, a bad config) name the tensor: "tensors: tensor 'lm_head.weight': shape [3, 4], expected
 * [64, 96]". The whole model is built or nothing is (*out stays NULL). Free with dd_model_free;
 * dd_model_source is "tensors". Thread-safe. */
DD_API dd_status dd_model_from_tensors(dd_model **out, const char *config_json, const dd_tensor_view *tensors,
                                       size_t n, dd_error *err);

/* NULL is a no-op. The model must outlive every decoder created on it. */
DD_API void dd_model_free(dd_model *m);

/* Valid for the model's lifetime. m must not be NULL. */
DD_API const dd_config *dd_model_config(const dd_model *m);
/* Number of tensors the engine uses, and the name it was loaded from ("synthetic gpt" for built ones). */
DD_API int dd_model_tensor_count(const dd_model *m);
DD_API const char *dd_model_source(const dd_model *m);
/* Bytes of weights read per frame of one stream batch (all passes, c0 given): the bandwidth floor's numerator. */
DD_API uint64_t dd_model_weight_bytes_per_frame(const dd_model *m);
/* Bytes of all weights the engine uses. */
DD_API uint64_t dd_model_weight_bytes(const dd_model *m);

/* Write the model as a native-layout .safetensors file (config in __metadata__), atomically: a failed write leaves
 * no file behind. Used to hand the synthetic models to other programs. = dd_model_export(m, path, NULL, err). */
DD_API dd_status dd_model_save(const dd_model *m, const char *path, dd_error *err);

/* Write any loaded model (native or HF CSM) as a native-layout .safetensors file, optionally MLX-affine quantized
 * (what `depthdec quantize` does). bits 0 = keep types; 8 or 4 quantize the layer matrices, in_proj, head0 and
 * heads (and the code embeddings when `embeddings`) with MLX's rule, group 32/64/128, scales/biases stored as
 * scale_type (f32 default; f16/bf16 round the scale itself). Norms and biases are written as float32. A CSM model's
 * input-space code table is written as in(table) in model space (changes rounding slightly). Atomic. */
typedef struct dd_export_params {
    int bits;
    int group;
    int embeddings;
    dd_dtype scale_type;
    int convert;         /* bits 0 only: 1 = store every matrix as `dense_type` (dequantizing quantized ones) */
    dd_dtype dense_type; /* f32, f16 or bf16 */
    void (*progress)(void *ctx, int done, int total); /* called after each matrix; may be NULL */
    void *progress_ctx;
} dd_export_params;
DD_API dd_export_params dd_export_default_params(void); /* bits 0, group 64, embeddings 0, scale_type f32 */
DD_API dd_status dd_model_export(const dd_model *m, const char *path, const dd_export_params *p, dd_error *err);
/* The same image loaded back in memory as a new model (free with dd_model_free): a quantized copy. */
DD_API dd_status dd_model_export_mem(dd_model **out, const dd_model *m, const dd_export_params *p, dd_error *err);

/* ---- decoder ---------------------------------------------------------------------------------------------- */

typedef enum dd_backend { DD_BACKEND_AUTO = 0, DD_BACKEND_REF = 1, DD_BACKEND_CPU = 2, DD_BACKEND_CUDA = 3 } dd_backend;

DD_API const char *dd_backend_name(dd_backend b); /* "auto", "ref", "cpu", "cuda"; "?" for an unknown value */
/* Parse "auto" or a backend's name ("ref", "cpu", "cuda": every row of dd_backend_info_get, built or not); returns
 * DD_EINVAL for anything else (s NULL included) and leaves *out untouched then. */
DD_API dd_status dd_backend_parse(const char *s, dd_backend *out);
/* 1 when this build includes the backend and it can run here (cuda: a device is present); "auto" always 1. */
DD_API int dd_backend_available(dd_backend b);

/* One row of the library's backend table, as callers see it. */
typedef struct dd_backend_info {
    dd_backend id;
    const char *name;             /* "ref", "cpu", "cuda" */
    const char *bandwidth_method; /* what dd_measure_read_bandwidth times: "streaming read", "device-to-device copy" */
    int demo_frames;              /* frames a quick demo or benchmark runs by default on it (3 ref, 20 cpu, 200 cuda) */
} dd_backend_info;
/* The concrete backends this library knows, built into it or not, slowest first (ref, cpu, cuda): auto picks the
 * last one that is available. dd_backend_at(i) for i in [0, dd_backend_count()), else DD_BACKEND_AUTO. */
DD_API int dd_backend_count(void);
DD_API dd_backend dd_backend_at(int i);
/* The row of b; NULL for DD_BACKEND_AUTO or an unknown value. The row is the library's (static, read-only): it lives
 * as long as the process. Thread-safe. */
DD_API const dd_backend_info *dd_backend_info_get(dd_backend b);

typedef struct dd_decoder dd_decoder;

typedef struct dd_decoder_params {
    dd_backend backend; /* DD_BACKEND_AUTO picks the fastest available: cuda, else cpu, else ref */
    int max_batch;      /* streams per call, 1..4096 */
    int threads;        /* cpu backend: 0 = one per core */
} dd_decoder_params;

DD_API dd_decoder_params dd_decoder_default_params(void); /* auto, max_batch 64, threads 0 */

/* Create a decoder on `m`. Allocates everything the hot loop needs; decode/score allocate nothing more. */
DD_API dd_status dd_decoder_create(dd_decoder **out, const dd_model *m, const dd_decoder_params *p, dd_error *err);
DD_API void dd_decoder_free(dd_decoder *d); /* NULL is a no-op */
DD_API dd_backend dd_decoder_backend(const dd_decoder *d); /* the backend actually in use */
DD_API int dd_decoder_max_batch(const dd_decoder *d);

typedef struct dd_sampling {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 or >= V = no top-k */
} dd_sampling;

DD_API dd_sampling dd_sampling_default(void); /* T 0.9, K 50 (CSM's) */

/* Decode one frame for each of n streams (1 <= n <= max_batch).
 *   hidden  [n, input_dim] float32, the backbone's final hidden state per stream
 *   c0      [n] level-0 codes, or NULL: the engine samples c0 from head0 (DD_EUNSUPPORTED without head0)
 *   seeds   [n], frames [n]: the noise keys of each stream (NULL = all 0)
 *   codes   [n, levels] out: c0 .. c(Q-1)
 * Inputs are checked before any work; on error nothing is written to `codes`. A stream's codes depend only on
 * (model, its hidden, c0, seed, frame, sampling): not on n, its row, the backend or the thread count. On a cuda
 * decoder that has taken a dd_decode_device/dd_score_device call, dd_decode and dd_score first wait for the device
 * and return a pending device-detected error of those calls (see dd_decoder_sync) instead of running. */
DD_API dd_status dd_decode(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                           const uint64_t *frames, const dd_sampling *s, int32_t *codes, dd_error *err);

/* Models that condition on the frame's text token (Kyutai Moshi's depformer: config text_vocab > 0) take one text id
 * per row, text [n] in [0, text_vocab], through these two calls; dd_decode / dd_score are them with text NULL, which
 * such a model refuses (DD_EINVAL, "text tokens required"), as a model without text refuses a text array. Moshi also
 * accepts input codes up to codebook_size inclusive (its tables' pad/initial row): c0 and score's codes are in
 * [0, codebook_size]; the codes it decodes are in [0, codebook_size). Otherwise as dd_decode / dd_score. */
DD_API dd_status dd_decode_text(dd_decoder *d, int n, const float *hidden, const int32_t *text, const int32_t *c0,
                                const uint64_t *seeds, const uint64_t *frames, const dd_sampling *s, int32_t *codes,
                                dd_error *err);
DD_API dd_status dd_score_text(dd_decoder *d, int n, const float *hidden, const int32_t *text, const int32_t *codes,
                               float *logits, float *logits0, dd_error *err);

/* Teacher-forced logits for n rows.
 *   hidden  [n, input_dim]; codes [n, levels] (code level Q-1 is not read but must be in range)
 *   logits  [n, levels-1, V] out: logits of levels 1..Q-1 given codes 0..Q-2
 *   logits0 [n, V] out or NULL: head0 · hidden (DD_EUNSUPPORTED when requested and the model has no head0; Moshi:
 *           the logits of c0 at position 0, given the row's hidden state and text token) */
DD_API dd_status dd_score(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                          float *logits0, dd_error *err);

/* ---- device pointers on the caller's stream (cuda decoders; docs/device_api.md) ------------------------------- */

/* dd_decode on device memory, enqueued on `stream` (a cudaStream_t passed as void *; NULL = the legacy default
 * stream) without host synchronisation, allocation or host<->device copy, so that the call can be captured in the
 * caller's CUDA graph (cudaStreamBeginCapture, torch.cuda.graph):
 *   hidden  device [n, input_dim] float32         c0      device [n] int32, or NULL (sample c0 from head0)
 *   seeds   device [n] uint64, or NULL (all 0)    frames  device [n] uint64, or NULL (all 0)
 *   codes   device [n, levels] int32 out
 * All pointers must be device (or managed) memory of the decoder's device, aligned to their element size, and
 * stay valid until the frame has run on the stream. Checked on the host before anything is enqueued (the error
 * names the argument; nothing is enqueued then): d is a cuda decoder (else DD_EUNSUPPORTED naming the backend),
 * the model takes no text tokens (a Moshi depformer needs one per stream, which these calls cannot pass:
 * DD_EUNSUPPORTED; use dd_decode_text / dd_score_text), 1 <= n <= max_batch, the sampling parameters, head0 when c0 is NULL, the pointers. What needs the data is found
 * on the device: a non-finite hidden value, a c0 outside [0, V), a level with no finite logit. Such a frame writes
 * nothing to `codes`, and the first such error since the last synchronising call is returned by the next one
 * (dd_decoder_sync, dd_decode or dd_score on this decoder) with the message dd_decode gives ("hidden row 2,
 * element 7: non-finite value nan"). The sampling parameters are kernel arguments: a captured graph replays with
 * the temperature and top_k it was captured with (seeds and frames are read from device memory at each replay).
 * The first call for each batch size n <= 8 (the latency executor's plan) and variant (c0 given or not) builds a
 * plan synchronously: make it outside a capture (inside one it fails with DD_EUNSUPPORTED, capture untouched).
 * A decoder's calls must be ordered (one stream, or the caller's events); not thread-safe per decoder. */
DD_API dd_status dd_decode_device(dd_decoder *d, int n, const float *hidden, const int32_t *c0, const uint64_t *seeds,
                                  const uint64_t *frames, const dd_sampling *s, int32_t *codes, void *stream,
                                  dd_error *err);
/* dd_score on device memory, enqueued on `stream` like dd_decode_device: hidden device [n, input_dim] float32,
 * codes device [n, levels] int32 (out of range: reported as dd_score does, at the next synchronising call),
 * logits device [n, levels-1, V] float32 out, logits0 device [n, V] out or NULL. Nothing is written to logits or
 * logits0 by a failed frame. */
DD_API dd_status dd_score_device(dd_decoder *d, int n, const float *hidden, const int32_t *codes, float *logits,
                                 float *logits0, void *stream, dd_error *err);
/* Wait for the device work of every earlier call on the decoder (cudaDeviceSynchronize: replays of captured graphs
 * on any stream included) and return the first device-detected error of a dd_*_device frame since the last
 * synchronising call (then cleared), else DD_OK. DD_OK at once on ref/cpu decoders, and on a cuda decoder that
 * never took a device call. Must not be called while a stream of the device is being captured. */
DD_API dd_status dd_decoder_sync(dd_decoder *d, dd_error *err);

/* Measure the read bandwidth this backend's weights stream at, in GB/s (1e9 bytes/s), as `depthdec bench` quotes
 * it: cpu/ref: a multi-threaded streaming read of a 1 GiB buffer (threads 0 = one per core), best of 5;
 * cuda: a large device-to-device copy, counting bytes read plus written. Allocates and frees its buffers.
 * DD_BACKEND_AUTO measures the backend auto picks; DD_EUNSUPPORTED when the backend is not built or cannot run. */
DD_API dd_status dd_measure_read_bandwidth(dd_backend b, int threads, double *gbps, dd_error *err);
/* A streaming read over a buffer of `bytes` (>= 1 MiB; e.g. one pass's weights, which may fit a cache), read
 * repeatedly so that each timed repetition covers at least 1 GiB; best of 5. ref/cpu: host threads over host memory;
 * cuda: every SM reading device memory through L2 (a buffer that fits L2 is served from it). */
DD_API dd_status dd_measure_read_bandwidth_size(dd_backend b, int threads, uint64_t bytes, double *gbps,
                                                dd_error *err);

/* ---- input arrays: the one check the CLI and the Python package both apply ------------------------------------ */

/* Which input an array is. */
typedef enum dd_input { DD_INPUT_HIDDEN = 0, DD_INPUT_C0 = 1, DD_INPUT_CODES = 2, DD_INPUT_TEXT = 3 } dd_input;

/* Whether an array described NumPy-style (dtype kind 'f' float, 'i' signed, 'u' unsigned, 'b' bool, ... and its
 * item size in bytes; ndim and shape) is acceptable as `what` for model m, before its values are looked at:
 *   hidden  float (itemsize 2, 4 or 8: float16/float64 are converted to float32), [N, input_dim], N >= 1
 *   c0      signed integer (itemsize 4 or 8: int32/int64), [rows]
 *   codes   signed integer (itemsize 4 or 8), [rows, levels]
 *   text    signed integer (itemsize 4 or 8), [rows]; only for a model with text_vocab > 0 (else refused)
 * rows = N of the hidden array (ignored for hidden). DD_EINVAL with a message starting with `label` (e.g. the file
 * and option, "h.npy (--hidden)") that names the dtype or shape and what is wanted, e.g.
 * "c.npy (--codes): dtype int8, want int32 or int64". Values (finite, codes in [0, V)) are checked by
 * dd_decode/dd_score. Thread-safe; m must not be NULL. */
DD_API dd_status dd_input_check(const dd_model *m, dd_input what, char kind, int itemsize, int ndim,
                                const int64_t *shape, int64_t rows, const char *label, dd_error *err);

/* ---- sampling rule, exposed for tests and other engines ---------------------------------------------------- */

/* Philox4x32-10 (Random123 constants): out = philox(ctr, key). */
DD_API void dd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Sample one level by SPEC §3 from logits[0..V). Allocation-free. DD_ENUMERIC when no logit is finite, DD_EINVAL
 * on a bad temperature or top_k. */
DD_API dd_status dd_sample_logits(const float *logits, int V, const dd_sampling *s, uint64_t seed, uint64_t frame,
                                  int level, int32_t *code, dd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DEPTHDEC_H */
