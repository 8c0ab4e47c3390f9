/* depthdec — the command-line program: a thin layer over include/depthdec.h (SPEC §5).
 * Exit codes: 0 success, 2 usage error, 1 any other error; errors are one line on stderr: "depthdec: FILE: why". */
#include "depthdec.h"
#include "npy.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2

static const char *USAGE =
    "usage: depthdec COMMAND [options]\n"
    "\n"
    "  info MODEL                          config, tensor count, bytes per frame, quantization\n"
    "  demo [--backend B] [--frames N] [--threads N] [--synthetic gpt|csm|qwen3tts|moshi]\n"
    "                                      decode frames of an embedded synthetic model (default: GPT dims)\n"
    "  generate --model M --hidden H.npy [--c0 C.npy] --out CODES.npy [--seed S] [--frame F]\n"
    "           [--temperature T] [--top-k K] [--greedy] [--backend B] [--threads N] [--batch N]\n"
    "           [--next-embed E.npy]       (Qwen3: also the talker's next input embedding of each frame)\n"
    "           [--text T.npy]             (Moshi: the frame's text token per row, int32 [N], required)\n"
    "  score --model M --hidden H.npy --codes C.npy --out LOGITS.npy [--logits0 L0.npy] [--backend B] [--text T.npy]\n"
    "  bench [--model M | --synthetic gpt|csm|qwen3tts|moshi] [--weights f32|f16|bf16|q8|q4] [--batch B] [--frames N]\n"
    "        [--backend B] [--threads N] [--json FILE]\n"
    "  export (--synthetic gpt|csm|qwen3tts|moshi|tiny-gpt|tiny-wide|tiny-llama|tiny-qwen3|tiny-moshi [--weights W] | --model M [--weights f32|f16|bf16])\n"
    "         --out FILE.safetensors      write a native file (converting/dequantizing with --weights)\n"
    "  quantize IN OUT --bits 8|4 [--group-size 32|64|128] [--embeddings] [--scale-type f32|f16|bf16]\n"
    "  quality (MODEL | --synthetic KIND) [--group-size G] [--rows N] [--backend B]\n"
    "          [--hidden H.npy --codes C.npy]   8- and 4-bit logit error and top-1 agreement per level\n"
    "\n"
    "MODEL is a native .safetensors file or an HF directory: CSM, a Qwen3 code predictor or Kyutai Moshi's\n"
    "depformer (config.json + model.safetensors[.index.json]; Qwen3: + the talker codec table's .safetensors;\n"
    "Moshi: MoshiForConditionalGeneration or MoshiDepthDecoder as transformers saves them).\n";
/* then the "Backends: ..." line (print_usage), then: */
static const char *USAGE_TAIL =
    "Rows of --hidden are consecutive frames of one stream: row n uses seed S and frame F + n.\n"
    "Defaults: --temperature 0.9 --top-k 50 (CSM's); --greedy means temperature 0.\n"
    "generate/score/export/quantize print one 'depthdec: wrote ...' line on stderr; long work shows progress on a\n"
    "terminal; --quiet (any command) silences both (errors are always printed).\n"
    "Run 'depthdec COMMAND --help' for one command.\n";

/* The library's backends, from its table (dd_backend_at: slowest first; reverse: fastest first), joined by sep and,
 * before the last, by last_sep; "auto" first when with_auto; "N on NAME" (its default demo/bench frames) when
 * frames. The CLI lists no backend itself. */
static const char *backend_list(char *buf, size_t cap, int with_auto, int reverse, int frames, const char *sep,
                                const char *last_sep) {
    int n = dd_backend_count(), total = n + (with_auto ? 1 : 0);
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < total && len < cap; k++) {
        int i = k - (with_auto ? 1 : 0);
        const dd_backend_info *b = i < 0 ? NULL : dd_backend_info_get(dd_backend_at(reverse ? n - 1 - i : i));
        const char *s = k == 0 ? "" : k == total - 1 ? last_sep : sep;
        if (!b) len += (size_t)snprintf(buf + len, cap - len, "%sauto", s);
        else if (frames) len += (size_t)snprintf(buf + len, cap - len, "%s%d on %s", s, b->demo_frames, b->name);
        else len += (size_t)snprintf(buf + len, cap - len, "%s%s", s, b->name);
    }
    return buf;
}

static void print_usage(void) {
    char order[200], names[200];
    fputs(USAGE, stdout);
    printf("Backends: auto (default: the fastest available: %s), %s.\n",
           backend_list(order, sizeof order, 0, 1, 0, ", else ", ", else "),
           backend_list(names, sizeof names, 0, 0, 0, ", ", ", "));
    fputs(USAGE_TAIL, stdout);
}

static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "depthdec: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (run 'depthdec --help' for usage)\n"); /* one line (SPEC §5) */
    va_end(ap);
    exit(EXIT_USAGE);
}

/* Talking: after generate/score/export/quantize one summary line on stderr ("depthdec: wrote ..."), and progress
 * for long work ("\r"-updated, only once it has run ~2 s) when stderr is a terminal; --quiet silences both. Errors
 * are printed whatever --quiet says. */
static int g_quiet, g_tty;

static void summary(const char *fmt, ...) {
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "depthdec: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static double now_ms(void);

/* Progress "what: done/total unit" for work started at t0 (ms); shown only on a terminal, after 2 s. */
static int g_progress_shown;
static void progress_line(double t0, const char *what, long long done, long long total, const char *unit) {
    if (!g_tty || now_ms() - t0 < 2000) return;
    fprintf(stderr, "\rdepthdec: %s: %lld/%lld %s, %.0f s ", what, done, total, unit, (now_ms() - t0) / 1e3);
    g_progress_shown = 1;
}
static void progress_end(void) {
    if (g_progress_shown) fprintf(stderr, "\n");
    g_progress_shown = 0;
}

/* Library errors: the message already names the file/tensor/argument. */
static int fail(const dd_error *e) {
    progress_end();
    fprintf(stderr, "depthdec: %s\n", e->msg);
    return 1;
}

/* ---- option parsing: --name value pairs and flags ------------------------------------------------------- */

typedef struct opts {
    int argc;
    char **argv;
    int *used;
} opts;

static const char *opt_str(opts *o, const char *name) {
    for (int i = 0; i < o->argc; i++)
        if (strcmp(o->argv[i], name) == 0) {
            if (i + 1 >= o->argc) die_usage("%s needs a value", name);
            o->used[i] = o->used[i + 1] = 1;
            return o->argv[i + 1];
        }
    return NULL;
}

static int opt_flag(opts *o, const char *name) {
    for (int i = 0; i < o->argc; i++)
        if (strcmp(o->argv[i], name) == 0) {
            o->used[i] = 1;
            return 1;
        }
    return 0;
}

static long long parse_int(const char *name, const char *v, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die_usage("%s '%s': want an integer in [%lld, %lld]", name, v, lo, hi);
    return x;
}

static unsigned long long parse_u64(const char *name, const char *v) {
    char *end;
    errno = 0;
    if (*v == '-') die_usage("%s '%s': want a non-negative integer", name, v);
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *end) die_usage("%s '%s': want a non-negative 64-bit integer", name, v);
    return x;
}

static float parse_float(const char *name, const char *v) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end) die_usage("%s '%s': want a number", name, v);
    return x;
}

/* Positional arguments left over (not consumed by an option). Any leftover "--x" is an unknown option. */
static int positionals(opts *o, const char **pos, int max) {
    int n = 0;
    for (int i = 0; i < o->argc; i++) {
        if (o->used[i]) continue;
        if (o->argv[i][0] == '-' && o->argv[i][1]) {
            for (int j = 0; j < o->argc; j++)
                if (o->used[j] && strcmp(o->argv[j], o->argv[i]) == 0) die_usage("%s given more than once", o->argv[i]);
            die_usage("unknown option '%s'", o->argv[i]);
        }
        if (n == max) die_usage("unexpected argument '%s'", o->argv[i]);
        pos[n++] = o->argv[i];
    }
    return n;
}

static dd_backend opt_backend(opts *o) {
    const char *b = opt_str(o, "--backend");
    dd_backend be = DD_BACKEND_AUTO;
    char want[200];
    if (b && dd_backend_parse(b, &be))
        die_usage("--backend '%s': want %s", b, backend_list(want, sizeof want, 1, 0, 0, ", ", " or "));
    return be;
}

static dd_dtype parse_weights(const char *w) {
    static const dd_dtype all[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(w, dd_dtype_name(all[i])) == 0) return all[i];
    die_usage("--weights '%s': want f32, f16, bf16, q8 or q4", w);
    return DD_F32;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Deterministic O(1) hidden states for demo/bench (a backbone's final norm output has this scale). */
static void fill_hidden(float *h, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        h[i] = (float)((double)(s >> 11) * 0x1p-53 * 3.4641016 - 1.7320508); /* uniform, unit variance */
    }
}

static dd_decoder *make_decoder(const dd_model *m, dd_backend b, int max_batch, int threads) {
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = b;
    p.max_batch = max_batch;
    p.threads = threads;
    dd_decoder *d;
    dd_error e;
    if (dd_decoder_create(&d, m, &p, &e)) {
        fail(&e);
        return NULL;
    }
    return d;
}

/* ---- info ------------------------------------------------------------------------------------------------ */

static void print_config(const dd_model *m) {
    const dd_config *c = dd_model_config(m);
    printf("model        %s\n", dd_model_source(m));
    printf("block        %s\n", c->block == DD_BLOCK_GPT ? "gpt (LayerNorm, GELU)"
                                 : c->has_qk_norm          ? "llama with q/k norms (Qwen3 code predictor: RMSNorm, "
                                                             "per-head q/k RMSNorm before RoPE, SwiGLU)"
                                 : c->per_position         ? "Moshi depformer (RMSNorm, SwiGLU, no RoPE, no final norm; "
                                                             "per-position weights: pass p uses slice p of every matrix)"
                                                           : "llama (RMSNorm, SwiGLU, RoPE)");
    printf("levels       %d (%d passes per frame)\n", c->levels, c->per_position ? c->levels : c->levels - 1);
    if (c->text_vocab)
        printf("text         token per frame in [0, %d] (position 0's input; %d = the extra row); codes as input in "
               "[0, %d] (%d = pad/initial)\n", c->text_vocab, c->text_vocab, c->codebook_size, c->codebook_size);
    printf("codebook     %d\n", c->codebook_size);
    printf("input_dim    %d%s\n", c->input_dim, c->has_in_proj ? " (in_proj)" : " (no in_proj)");
    printf("dim          %d, %d layers, %d heads x %d (kv heads %d), ffn %d, eps %g\n", c->dim, c->layers, c->heads,
           c->head_dim, c->kv_heads, c->ffn_dim, (double)c->norm_eps);
    if (c->has_rope) {
        printf("rope         theta %g", c->rope_theta);
        if (c->rope_scaling)
            printf(", llama3 scaling factor %g low %g high %g original %g", c->rope_factor, c->rope_low_freq_factor,
                   c->rope_high_freq_factor, c->rope_original_max_pos);
        printf("\n");
    }
    printf("positions    %s\n", c->has_pos ? "learned" : (c->has_rope ? "rope" : "none"));
    printf("head0        %s\n", c->per_position ? "position 0's head (samples c0)"
                                 : c->has_head0   ? "yes (can sample c0)"
                                                  : "no (c0 must be given)");
    printf("embeddings   %s\n", c->embed_in_input_space ? "input space (through in_proj each pass)" : "model space");
    printf("weights      %s", dd_dtype_name(c->weight_type));
    if (c->quant_bits) printf(" (MLX affine, %d-bit, group %d)", c->quant_bits, c->quant_group);
    printf("\n");
    printf("tensors      %d used\n", dd_model_tensor_count(m));
    printf("bytes        %.1f MB of weights, %.1f MB read per frame\n", dd_model_weight_bytes(m) / 1e6,
           dd_model_weight_bytes_per_frame(m) / 1e6);
}

static int cmd_info(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec info MODEL\n");
        return 0;
    }
    const char *pos[1];
    if (positionals(o, pos, 1) != 1) die_usage("info needs one MODEL argument");
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, pos[0], &e)) return fail(&e);
    print_config(m);
    dd_model_free(m);
    return 0;
}

/* ---- demo ------------------------------------------------------------------------------------------------ */

static int cmd_demo(opts *o) {
    if (opt_flag(o, "--help")) {
        char dflt[200];
        printf("usage: depthdec demo [--backend B] [--frames N] [--threads N] [--weights W] [--synthetic KIND]\n"
               "Decodes N frames (default: %s) of one stream with the embedded\n"
               "synthetic GPT-dims model (D 1024, 4 layers, 16 heads, F 4096, Q 32, V 2048; bf16 weights), or with\n"
               "--synthetic csm|qwen3tts|moshi another family's dims (c0 and Moshi's text token made up per frame\n"
               "where the model needs them).\n",
               backend_list(dflt, sizeof dflt, 0, 0, 1, ", ", ", "));
        return 0;
    }
    dd_backend b = opt_backend(o);
    const char *fr = opt_str(o, "--frames"), *th = opt_str(o, "--threads"), *wt = opt_str(o, "--weights"),
               *syn = opt_str(o, "--synthetic");
    int threads = th ? (int)parse_int("--threads", th, 0, 1024) : 0;
    dd_dtype w = wt ? parse_weights(wt) : DD_BF16;
    int frames = fr ? (int)parse_int("--frames", fr, 1, 100000) : 0; /* 0: the backend's default, below */
    const char *pos[1];
    if (positionals(o, pos, 0)) die_usage("demo takes no arguments");
    static const char *const kinds[][2] = {{"gpt", "GPT-dims"},
                                           {"csm", "CSM-1B-dims"},
                                           {"qwen3tts", "Qwen3-TTS code-predictor-dims"},
                                           {"moshi", "Moshi depformer-dims"}};
    const char *title = NULL;
    if (!syn) syn = "gpt";
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        if (!strcmp(syn, kinds[k][0])) title = kinds[k][1];
    if (!title) die_usage("--synthetic '%s': want gpt, csm, qwen3tts or moshi", syn);
    dd_error e;
    dd_model *m;
    double t0 = now_ms();
    if (dd_model_synthetic(&m, syn, w, 0, &e)) return fail(&e);
    dd_decoder *d = make_decoder(m, b, 1, threads);
    if (!d) {
        dd_model_free(m);
        return 1;
    }
    dd_backend used = dd_decoder_backend(d);
    if (!frames) frames = dd_backend_info_get(used)->demo_frames;
    const dd_config *c = dd_model_config(m);
    printf("depthdec %s demo: synthetic %s depth decoder (THE WEIGHTS ARE SYNTHETIC: deterministic random\n"
           "numbers, not a trained model, so the codes are not speech). Built in %.0f ms.\n",
           DD_VERSION_STRING, title, now_ms() - t0);
    printf("model: D %d, %d layers, %d heads x %d, ffn %d, %d levels x %d codes, %s weights; backend %s\n", c->dim,
           c->layers, c->heads, c->head_dim, c->ffn_dim, c->levels, c->codebook_size, dd_dtype_name(w),
           dd_backend_name(used));
    float *h = malloc((size_t)c->input_dim * sizeof *h);
    int32_t *codes = malloc((size_t)c->levels * sizeof *codes);
    double *ms = malloc((size_t)frames * sizeof *ms);
    dd_sampling s = dd_sampling_default();
    int rc = 0;
    for (int f = 0; f < frames && !rc; f++) {
        fill_hidden(h, (size_t)c->input_dim, (uint64_t)f + 1);
        uint64_t seed = 42, frame = (uint64_t)f;
        /* made-up inputs where the family needs them: c0 (no head0: the talker gives it), the text token (Moshi) */
        int32_t c0 = (int32_t)(((unsigned)f * 7919u) % (unsigned)c->codebook_size);
        int32_t text = c->text_vocab ? (int32_t)(((unsigned)f * 104729u) % (unsigned)(c->text_vocab + 1)) : 0;
        double a = now_ms();
        if (dd_decode_text(d, 1, h, c->text_vocab ? &text : NULL, c->has_head0 ? NULL : &c0, &seed, &frame, &s, codes,
                           &e))
            rc = fail(&e);
        ms[f] = now_ms() - a;
        if (!rc && (f < 3 || f == frames - 1)) {
            printf("frame %3d:", f);
            for (int l = 0; l < c->levels; l++) printf(" %d", codes[l]);
            printf("\n");
        } else if (!rc && f == 3) {
            printf("...\n");
        }
    }
    if (!rc) {
        qsort(ms, (size_t)frames, sizeof *ms, cmp_double);
        double med = ms[frames / 2];
        printf("%d frames: median %.2f ms/frame, %.1f frames/s, real-time factor %.3f (frame = 80 ms; < 1 is "
               "faster than real time)\n",
               frames, med, 1000.0 / med, med / 80.0);
    }
    free(h);
    free(codes);
    free(ms);
    dd_decoder_free(d);
    dd_model_free(m);
    return rc;
}

/* ---- generate / score ------------------------------------------------------------------------------------ */

/* The library's input check (dd_input_check, the one the Python package applies too) on a .npy file's dtype and
 * shape; label "FILE (OPTION)". */
static int npy_input_ok(const dd_model *m, dd_input what, const dd_npy *a, int64_t rows, const char *path,
                        const char *opt) {
    static const struct { char kind; int size; } k[] = {
        [DD_NPY_F32] = {'f', 4}, [DD_NPY_F16] = {'f', 2}, [DD_NPY_F64] = {'f', 8}, [DD_NPY_I32] = {'i', 4},
        [DD_NPY_I64] = {'i', 8}};
    char label[1100];
    dd_error e;
    snprintf(label, sizeof label, "%s (%s)", path, opt);
    if (dd_input_check(m, what, k[a->dtype].kind, k[a->dtype].size, a->ndim, a->shape, rows, label, &e)) {
        fail(&e);
        return 0;
    }
    return 1;
}

static float *read_hidden(const dd_model *m, const char *path, int64_t *n) {
    int input_dim = dd_model_config(m)->input_dim;
    dd_npy a;
    dd_error e;
    if (dd_npy_read(path, &a, &e)) {
        fail(&e);
        return NULL;
    }
    float *h = NULL;
    if (!npy_input_ok(m, DD_INPUT_HIDDEN, &a, 0, path, "--hidden")) h = NULL;
    else if (dd_npy_to_f32(&a, path, "--hidden", 2, (int64_t[]){-1, input_dim}, &h, &e)) fail(&e);
    else *n = a.shape[0];
    dd_npy_free(&a);
    /* Checked here, before any work, so that the message names the file's row (the library only knows the
     * row within one batch). */
    for (int64_t r = 0; h && r < *n; r++)
        for (int i = 0; i < input_dim; i++)
            if (!isfinite(h[r * input_dim + i])) {
                fprintf(stderr, "depthdec: %s (--hidden): row %lld, element %d: non-finite value %g\n", path,
                        (long long)r, i, (double)h[r * input_dim + i]);
                free(h);
                return NULL;
            }
    return h;
}

/* Integer inputs: codes [n, Q] (ndim 2), c0 [n] (ndim 1, DD_INPUT_C0) or Moshi's text tokens [n] (DD_INPUT_TEXT),
 * each value checked to lie in [0, hi) (message names the file row and the `noun`: "code", "token"). A model that
 * takes no text refuses --text (the library's input check says so). */
static int32_t *read_ids(const dd_model *m, dd_input what, const char *path, const char *opt, int ndim,
                         const int64_t *shape, int hi, const char *noun) {
    dd_npy a;
    dd_error e;
    if (dd_npy_read(path, &a, &e)) {
        fail(&e);
        return NULL;
    }
    int32_t *c = NULL;
    if (npy_input_ok(m, what, &a, shape[0], path, opt) && dd_npy_to_i32(&a, path, opt, ndim, shape, &c, &e)) fail(&e);
    dd_npy_free(&a);
    int64_t per_row = ndim == 2 ? shape[1] : 1;
    for (size_t i = 0; c && i < (size_t)(shape[0] * per_row); i++)
        if (c[i] < 0 || c[i] >= hi) {
            if (ndim == 2)
                fprintf(stderr, "depthdec: %s (%s): row %lld, level %lld: %s %d outside [0, %d)\n", path, opt,
                        (long long)(i / per_row), (long long)(i % per_row), noun, (int)c[i], hi);
            else
                fprintf(stderr, "depthdec: %s (%s): row %lld: %s %d outside [0, %d)\n", path, opt, (long long)i, noun,
                        (int)c[i], hi);
            free(c);
            return NULL;
        }
    return c;
}

static int32_t *read_codes(const dd_model *m, const char *path, const char *what, int ndim, const int64_t *shape,
                           int V) {
    return read_ids(m, ndim == 1 ? DD_INPUT_C0 : DD_INPUT_CODES, path, what, ndim, shape, V, "code");
}

/* Text tokens when the model takes them: --text required then; 1 = ok (*t may stay NULL), 0 = failed (reported). */
static int want_text(const dd_model *m, const char *model, const char *tp, int64_t n, int32_t **t) {
    *t = NULL;
    const int TV = dd_model_config(m)->text_vocab;
    if (!TV && !tp) return 1;
    if (!tp) {
        fprintf(stderr, "depthdec: %s: the model (Moshi's depformer) needs the frame's text token per row: --text T.npy\n",
                model);
        return 0;
    }
    return (*t = read_ids(m, DD_INPUT_TEXT, tp, "--text", 1, (int64_t[]){n}, TV + 1, "token")) != NULL;
}

static int cmd_generate(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec generate --model M --hidden H.npy [--c0 C.npy] --out CODES.npy [--seed S]\n"
               "       [--frame F] [--temperature T] [--top-k K] [--greedy] [--backend B] [--threads N] [--batch N]\n"
               "       [--next-embed E.npy] [--text T.npy]\n"
               "H.npy float32/float16 [N, input_dim]; C.npy int32/int64 [N]; writes int32 [N, levels].\n"
               "Row n is frame F + n of one stream seeded S; without --c0, c0 is sampled from head0.\n"
               "--text (Moshi's depformer, required there): int32/int64 [N], the frame's text token per row, in\n"
               "[0, text_vocab]; Moshi samples c0 itself (from position 0) unless --c0 is given (then in [0, V]).\n"
               "--next-embed (Qwen3 predictors loaded from their HF directory): also writes float32 [N, input_dim],\n"
               "the talker's next input embedding of each frame's codes (c0's talker row + the predictor's tables).\n");
        return 0;
    }
    const char *model = opt_str(o, "--model"), *hid = opt_str(o, "--hidden"), *c0p = opt_str(o, "--c0"),
               *out = opt_str(o, "--out"), *sd = opt_str(o, "--seed"), *fr = opt_str(o, "--frame"),
               *tp = opt_str(o, "--temperature"), *tk = opt_str(o, "--top-k"), *th = opt_str(o, "--threads"),
               *bt = opt_str(o, "--batch"), *nep = opt_str(o, "--next-embed"), *txp = opt_str(o, "--text");
    int greedy = opt_flag(o, "--greedy");
    dd_backend b = opt_backend(o);
    const char *pos[1];
    if (positionals(o, pos, 0)) die_usage("generate takes no positional arguments");
    if (!model || !hid || !out) die_usage("generate needs --model, --hidden and --out");
    dd_sampling s = dd_sampling_default();
    if (tp) s.temperature = parse_float("--temperature", tp);
    if (tk) s.top_k = (int)parse_int("--top-k", tk, -2147483647LL, 2147483647LL);
    if (greedy) s.temperature = 0.0f;
    if (!isfinite(s.temperature) || s.temperature < 0) die_usage("--temperature %s: must be finite and >= 0", tp);
    if (s.top_k < 0) die_usage("--top-k %s: must be >= 0", tk);
    uint64_t seed = sd ? parse_u64("--seed", sd) : 0, frame0 = fr ? parse_u64("--frame", fr) : 0;
    int threads = th ? (int)parse_int("--threads", th, 0, 1024) : 0;
    int batch = bt ? (int)parse_int("--batch", bt, 1, 4096) : 64;

    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, model, &e)) return fail(&e);
    const dd_config *c = dd_model_config(m);
    int64_t n = 0;
    int rc = 1;
    int32_t *c0 = NULL, *codes = NULL, *text = NULL;
    uint64_t *seeds = NULL, *frames = NULL;
    float *emb = NULL, *h = NULL;
    dd_decoder *d = NULL;
    /* a model that cannot give the next embedding fails before any work (no partial output) */
    if (nep && dd_next_embedding(m, 0, NULL, NULL, &e)) {
        fprintf(stderr, "depthdec: --next-embed: %s\n", e.msg);
        goto done;
    }
    if (!(h = read_hidden(m, hid, &n))) goto done;
    if (c0p && !(c0 = read_codes(m, c0p, "--c0", 1, (int64_t[]){n}, c->codebook_size + (c->per_position ? 1 : 0))))
        goto done;
    if (!want_text(m, model, txp, n, &text)) goto done;
    if (!c0 && !c->has_head0) {
        fprintf(stderr, "depthdec: %s: the model has no head0, so --c0 is required\n", model);
        goto done;
    }
    if (batch > n) batch = (int)n;
    if (!(d = make_decoder(m, b, batch, threads))) goto done;
    codes = malloc((size_t)n * c->levels * sizeof *codes);
    seeds = malloc((size_t)n * sizeof *seeds);
    frames = malloc((size_t)n * sizeof *frames);
    if (!codes || !seeds || !frames) {
        fprintf(stderr, "depthdec: out of memory for %lld rows\n", (long long)n);
        goto done;
    }
    for (int64_t r = 0; r < n; r++) {
        seeds[r] = seed;
        frames[r] = frame0 + (uint64_t)r;
    }
    double t0 = now_ms();
    for (int64_t r = 0; r < n; r += batch) {
        int k = (int)(n - r < batch ? n - r : batch);
        progress_line(t0, "generate", r, n, "rows");
        if (dd_decode_text(d, k, h + r * c->input_dim, text ? text + r : NULL, c0 ? c0 + r : NULL, seeds + r,
                           frames + r, &s, codes + r * c->levels, &e)) {
            /* name the file row, not the batch row */
            progress_end();
            fprintf(stderr, "depthdec: %s: rows %lld..%lld: %s\n", hid, (long long)r, (long long)(r + k - 1), e.msg);
            goto done;
        }
    }
    progress_end();
    if (nep) {
        if (!(emb = malloc((size_t)n * c->input_dim * sizeof *emb))) {
            fprintf(stderr, "depthdec: out of memory for %lld rows\n", (long long)n);
            goto done;
        }
        if (dd_next_embedding(m, (int)n, codes, emb, &e)) {
            fprintf(stderr, "depthdec: --next-embed: %s\n", e.msg);
            goto done;
        }
    }
    if (dd_npy_write(out, DD_NPY_I32, 2, (int64_t[]){n, c->levels}, codes, &e)) {
        fail(&e);
        goto done;
    }
    if (nep && dd_npy_write(nep, DD_NPY_F32, 2, (int64_t[]){n, c->input_dim}, emb, &e)) {
        fail(&e);
        unlink(out); /* both outputs or neither */
        goto done;
    }
    summary("wrote %s: %lld rows x %d codes (int32), seed %llu, frames %llu..%llu, backend %s, %.2f s%s%s", out,
            (long long)n, c->levels, (unsigned long long)seed, (unsigned long long)frame0,
            (unsigned long long)(frame0 + (uint64_t)n - 1), dd_backend_name(dd_decoder_backend(d)),
            (now_ms() - t0) / 1e3, nep ? "; next input embeddings (float32) to " : "", nep ? nep : "");
    rc = 0;
done:
    free(h);
    free(c0);
    free(text);
    free(codes);
    free(seeds);
    free(frames);
    free(emb);
    dd_decoder_free(d);
    dd_model_free(m);
    return rc;
}

static int cmd_score(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec score --model M --hidden H.npy --codes C.npy --out LOGITS.npy [--logits0 L0.npy]\n"
               "       [--backend B] [--threads N] [--text T.npy]\n"
               "Writes float32 [N, levels-1, V]: teacher-forced logits of levels 1..Q-1 given the codes, and with\n"
               "--logits0 float32 [N, V] = head0 . hidden (needs head0; Moshi: the logits of c0 at position 0).\n"
               "--text (Moshi, required there): int32/int64 [N] text tokens; its codes may hold V (pad/initial).\n");
        return 0;
    }
    const char *model = opt_str(o, "--model"), *hid = opt_str(o, "--hidden"), *cp = opt_str(o, "--codes"),
               *out = opt_str(o, "--out"), *l0p = opt_str(o, "--logits0"), *th = opt_str(o, "--threads"),
               *tp = opt_str(o, "--text");
    dd_backend b = opt_backend(o);
    const char *pos[1];
    if (positionals(o, pos, 0)) die_usage("score takes no positional arguments");
    if (!model || !hid || !cp || !out) die_usage("score needs --model, --hidden, --codes and --out");
    int threads = th ? (int)parse_int("--threads", th, 0, 1024) : 0;
    dd_model *m;
    dd_error e;
    if (dd_model_load(&m, model, &e)) return fail(&e);
    const dd_config *c = dd_model_config(m);
    int Q = c->levels, V = c->codebook_size, rc = 1;
    int64_t n = 0;
    int32_t *codes = NULL, *text = NULL;
    float *lg = NULL, *l0 = NULL;
    dd_decoder *d = NULL;
    float *h = read_hidden(m, hid, &n);
    if (!h) goto done;
    if (!(codes = read_codes(m, cp, "--codes", 2, (int64_t[]){n, Q}, V + (c->per_position ? 1 : 0)))) goto done;
    if (!want_text(m, model, tp, n, &text)) goto done;
    if (l0p && !c->has_head0) {
        fprintf(stderr, "depthdec: %s: the model has no head0, so --logits0 cannot be written\n", model);
        goto done;
    }
    int batch = n < 64 ? (int)n : 64;
    if (!(d = make_decoder(m, b, batch, threads))) goto done;
    lg = malloc((size_t)n * (Q - 1) * V * sizeof *lg);
    l0 = l0p ? malloc((size_t)n * V * sizeof *l0) : NULL;
    if (!lg || (l0p && !l0)) {
        fprintf(stderr, "depthdec: out of memory for %lld rows of logits\n", (long long)n);
        goto done;
    }
    double t0 = now_ms();
    for (int64_t r = 0; r < n; r += batch) {
        int k = (int)(n - r < batch ? n - r : batch);
        progress_line(t0, "score", r, n, "rows");
        if (dd_score_text(d, k, h + r * c->input_dim, text ? text + r : NULL, codes + r * Q, lg + r * (Q - 1) * V,
                          l0 ? l0 + r * V : NULL, &e)) {
            progress_end();
            fprintf(stderr, "depthdec: %s / %s: rows %lld..%lld: %s\n", hid, cp, (long long)r, (long long)(r + k - 1),
                    e.msg);
            goto done;
        }
    }
    /* all or nothing: the logits go to a staging name first and are renamed over --out only once --logits0 is
     * written too, so a failure leaves neither new file and any earlier --out untouched */
    progress_end();
    char stage[1200];
    snprintf(stage, sizeof stage, "%s.tmp.%d.score", out, (int)getpid());
    if (dd_npy_write(l0p ? stage : out, DD_NPY_F32, 3, (int64_t[]){n, Q - 1, V}, lg, &e)) {
        if (l0p) snprintf(e.msg, sizeof e.msg, "%s: cannot write: %s", out, strerror(errno ? errno : EIO));
        fail(&e);
        goto done;
    }
    if (l0p && dd_npy_write(l0p, DD_NPY_F32, 2, (int64_t[]){n, V}, l0, &e)) {
        fail(&e);
        remove(stage);
        goto done;
    }
    if (l0p && rename(stage, out) != 0) {
        fprintf(stderr, "depthdec: %s: %s\n", out, strerror(errno));
        remove(stage);
        remove(l0p);
        goto done;
    }
    if (l0p)
        summary("wrote %s: %lld rows x %d levels x %d logits (float32) and %s: %lld rows x %d (level 0), backend %s, "
                "%.2f s", out, (long long)n, Q - 1, V, l0p, (long long)n, V, dd_backend_name(dd_decoder_backend(d)),
                (now_ms() - t0) / 1e3);
    else
        summary("wrote %s: %lld rows x %d levels x %d logits (float32), backend %s, %.2f s", out, (long long)n, Q - 1,
                V, dd_backend_name(dd_decoder_backend(d)), (now_ms() - t0) / 1e3);
    rc = 0;
done:
    free(h);
    free(codes);
    free(text);
    free(lg);
    free(l0);
    dd_decoder_free(d);
    dd_model_free(m);
    return rc;
}

/* ---- bench ----------------------------------------------------------------------------------------------- */

/* Times one warm-up frame and then `frames` frames of `batch` streams on decoder d (c0 given, fixed hidden states,
 * seeds and frame indices, default sampling): ms[0 .. frames) sorted ascending. 0, or 1 with the error printed. */
static int time_frames(const dd_model *m, dd_decoder *d, int batch, int frames, int progress, double *ms) {
    const dd_config *c = dd_model_config(m);
    size_t nh = (size_t)batch * c->input_dim;
    float *h = malloc(nh * sizeof *h);
    int32_t *c0 = malloc((size_t)batch * sizeof *c0), *codes = malloc((size_t)batch * c->levels * sizeof *codes);
    int32_t *text = c->text_vocab ? malloc((size_t)batch * sizeof *text) : NULL; /* Moshi: a text token per stream */
    uint64_t *seeds = malloc((size_t)batch * sizeof *seeds), *fidx = malloc((size_t)batch * sizeof *fidx);
    int rc = 0;
    dd_error e;
    if (!h || !c0 || !codes || !seeds || !fidx || (c->text_vocab && !text)) {
        fprintf(stderr, "depthdec: out of memory\n");
        rc = 1;
    }
    if (!rc) {
        fill_hidden(h, nh, 7);
        for (int i = 0; i < batch; i++) {
            c0[i] = (int32_t)((i * 7919u) % (unsigned)c->codebook_size);
            if (text) text[i] = (int32_t)((i * 104729u) % (unsigned)(c->text_vocab + 1));
            seeds[i] = (uint64_t)i;
        }
    }
    dd_sampling s = dd_sampling_default();
    double t0 = now_ms();
    for (int f = -1; !rc && f < frames; f++) {
        if (progress && f >= 0) progress_line(t0, "bench", f, frames, "frames");
        for (int i = 0; i < batch; i++) fidx[i] = (uint64_t)(f + 1);
        double a = now_ms();
        if (dd_decode_text(d, batch, h, text, c0, seeds, fidx, &s, codes, &e)) rc = fail(&e);
        if (f >= 0) ms[f] = now_ms() - a;
    }
    if (progress) progress_end();
    if (!rc) qsort(ms, (size_t)frames, sizeof *ms, cmp_double);
    free(h);
    free(c0);
    free(text);
    free(codes);
    free(seeds);
    free(fidx);
    return rc;
}

/* The median ms of `frames` timed frames of `batch` streams on a decoder made for that batch. */
static int median_frame_ms(const dd_model *m, dd_backend b, int batch, int threads, int frames, double *med,
                           dd_backend *used) {
    dd_decoder *d = make_decoder(m, b, batch, threads);
    if (!d) return 1;
    *used = dd_decoder_backend(d);
    double *ms = malloc((size_t)frames * sizeof *ms);
    int rc = ms ? time_frames(m, d, batch, frames, 0, ms) : (fprintf(stderr, "depthdec: out of memory\n"), 1);
    if (!rc) *med = ms[frames / 2];
    free(ms);
    dd_decoder_free(d);
    return rc;
}

/* The batch sizes measured by bench --capacity (at most 13 doublings + 12 bisection steps per budget). */
typedef struct cap_pts {
    int n;
    int b[64];
    double t[64];
} cap_pts;

/* the median frame time of batch B, measured once per batch size; 0, or 1 with the error printed */
static int cap_measure(cap_pts *p, const dd_model *m, dd_backend b, int threads, int frames, int B, double *t,
                       dd_backend *used) {
    for (int q = 0; q < p->n; q++)
        if (p->b[q] == B) {
            *t = p->t[q];
            return 0;
        }
    if (p->n == (int)(sizeof p->b / sizeof p->b[0])) {
        fprintf(stderr, "depthdec: capacity: too many batch sizes measured\n");
        return 1;
    }
    if (isatty(2)) fprintf(stderr, "\rdepthdec: capacity: batch %d ...", B);
    if (median_frame_ms(m, b, B, threads, frames, t, used)) return 1;
    if (isatty(2)) fprintf(stderr, "\r\033[K");
    p->b[p->n] = B;
    p->t[p->n++] = *t;
    return 0;
}

/* bench --capacity: the largest batch whose median frame time stays within each budget (a stream needs a frame
 * every 80 ms; 20 ms is the share a depth decoder may take when a backbone and a codec run too): batches double
 * from 1 until the largest budget is exceeded or --max-batch is reached, then, per budget, a bisection between the
 * largest batch measured within it and the smallest larger batch measured over it. Frame times are medians; noise
 * can make them non-monotonic, so the answer is a batch measured within the budget whose bisection partner was not. */
static int bench_capacity(const dd_model *m, dd_backend b, int threads, int frames, int max_batch,
                          const double *budgets, int nbud, const char *mname, const char *wname, const char *js) {
    cap_pts p = {0};
    dd_backend used = b;
    double bmax = 0, t;
    for (int i = 0; i < nbud; i++) bmax = budgets[i] > bmax ? budgets[i] : bmax;
    for (int B = 1;; B = B * 2 > max_batch ? max_batch : B * 2) {
        if (cap_measure(&p, m, b, threads, frames, B, &t, &used)) return 1;
        if (t > bmax || B == max_batch) break;
    }
    int cap[8];
    double capt[8];
    for (int k = 0; k < nbud; k++) {
        int g = 0, x = 0; /* largest batch within the budget; smallest larger batch over it */
        for (int q = 0; q < p.n; q++)
            if (p.t[q] <= budgets[k] && p.b[q] > g) g = p.b[q];
        for (int q = 0; q < p.n; q++)
            if (p.b[q] > g && p.t[q] > budgets[k] && (!x || p.b[q] < x)) x = p.b[q];
        while (g && x && x - g > 1) {
            int mid = g + (x - g) / 2;
            if (cap_measure(&p, m, b, threads, frames, mid, &t, &used)) return 1;
            if (t <= budgets[k]) g = mid;
            else x = mid;
        }
        cap[k] = g;
        capt[k] = 0;
        for (int q = 0; q < p.n; q++)
            if (p.b[q] == g) capt[k] = p.t[q];
    }
    for (int i = 1; i < p.n; i++) /* the measured curve in batch order */
        for (int j = i; j > 0 && p.b[j - 1] > p.b[j]; j--) {
            int tb = p.b[j];
            double tt = p.t[j];
            p.b[j] = p.b[j - 1], p.t[j] = p.t[j - 1];
            p.b[j - 1] = tb, p.t[j - 1] = tt;
        }
    printf("capacity: %s (%s weights), backend %s, median of %d frames per batch size (+1 warm-up), batches up to "
           "%d\n", mname, wname, dd_backend_name(used), frames, max_batch);
    for (int i = 0; i < p.n; i++)
        printf("  batch %4d  %10.3f ms/frame  %10.1f stream-frames/s\n", p.b[i], p.t[i], p.b[i] * 1000.0 / p.t[i]);
    for (int k = 0; k < nbud; k++) {
        if (cap[k])
            printf("  budget %g ms/frame: %d concurrent real-time streams (batch %d: %.3f ms/frame)%s\n", budgets[k],
                   cap[k], cap[k], capt[k], cap[k] == max_batch ? "; the largest batch tried (--max-batch)" : "");
        else
            printf("  budget %g ms/frame: 0 concurrent real-time streams (batch 1: %.3f ms/frame)\n", budgets[k],
                   p.t[0]);
    }
    if (!js) return 0;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", js, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    int ok = fp != NULL;
    if (fp) {
        ok = fprintf(fp, "{\"backend\": \"%s\", \"model\": \"%s\", \"weights\": \"%s\", \"frames\": %d, "
                         "\"threads\": %d, \"max_batch\": %d, \"curve\": [",
                     dd_backend_name(used), mname, wname, frames, threads, max_batch) > 0;
        for (int i = 0; i < p.n; i++)
            ok = fprintf(fp, "%s{\"batch\": %d, \"ms_per_frame\": %.6f}", i ? ", " : "", p.b[i], p.t[i]) > 0 && ok;
        ok = fprintf(fp, "], \"capacity\": [") > 0 && ok;
        for (int k = 0; k < nbud; k++)
            ok = fprintf(fp, "%s{\"budget_ms\": %g, \"streams\": %d, \"ms_per_frame\": %.6f}", k ? ", " : "",
                         budgets[k], cap[k], capt[k]) > 0 && ok;
        ok = fprintf(fp, "]}\n") > 0 && ok;
        ok = (fclose(fp) == 0) && ok;
    }
    if (!ok || rename(tmp, js) != 0) {
        fprintf(stderr, "depthdec: %s: %s\n", js, strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}

static int cmd_bench(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec bench [--model M | --synthetic gpt|csm|qwen3tts|moshi] [--weights f32|f16|bf16|q8|q4] [--batch B]\n"
               "       [--frames N] [--backend B] [--threads N] [--json FILE]\n"
               "       depthdec bench --capacity [--budget MS[,MS...]] [--max-batch N] [the model and backend options]\n"
               "Times whole frames (all passes, c0 given) of B streams; prints the median ms/frame beside the\n"
               "floor = weight bytes per frame / read bandwidth measured in the same run.\n"
               "--capacity: the largest batch whose median frame time stays within each budget (default 80,20 ms:\n"
               "a stream needs a frame every 80 ms; 20 ms is a depth decoder's share beside a backbone and a codec),\n"
               "i.e. how many concurrent real-time streams this backend serves here; batches double from 1 up to\n"
               "--max-batch (default 512), then bisect; --frames per batch size (default 5).\n");
        return 0;
    }
    const char *model = opt_str(o, "--model"), *syn = opt_str(o, "--synthetic"), *wt = opt_str(o, "--weights"),
               *bt = opt_str(o, "--batch"), *fr = opt_str(o, "--frames"), *th = opt_str(o, "--threads"),
               *js = opt_str(o, "--json"), *bud = opt_str(o, "--budget"), *mb = opt_str(o, "--max-batch");
    const int capacity = opt_flag(o, "--capacity");
    if (!capacity && (bud || mb)) die_usage("--budget and --max-batch go with --capacity");
    if (capacity && bt) die_usage("--capacity chooses the batches itself: no --batch");
    double budgets[8];
    int nbud = 0;
    if (capacity) { /* "80,20" */
        const char *q = bud ? bud : "80,20";
        while (*q) {
            char *end;
            errno = 0;
            double v = strtod(q, &end);
            if (end == q || errno || !(v > 0) || v > 1e7 || (*end && *end != ','))
                die_usage("--budget '%s': want milliseconds > 0, comma-separated (e.g. 80,20)", bud);
            if (nbud == 8) die_usage("--budget '%s': at most 8 budgets", bud);
            budgets[nbud++] = v;
            q = *end ? end + 1 : end;
        }
    }
    const int max_batch = mb ? (int)parse_int("--max-batch", mb, 1, 4096) : 512;
    dd_backend b = opt_backend(o);
    const char *pos[1];
    if (positionals(o, pos, 0)) die_usage("bench takes no positional arguments");
    if (model && syn) die_usage("give either --model or --synthetic, not both");
    if (model && wt) die_usage("--weights applies to --synthetic models only (a file has its own types)");
    if (syn && strcmp(syn, "gpt") && strcmp(syn, "csm") && strcmp(syn, "qwen3tts") && strcmp(syn, "moshi"))
        die_usage("--synthetic '%s': want gpt, csm, qwen3tts or moshi", syn);
    if (!model && !syn) syn = "gpt";
    dd_dtype w = wt ? parse_weights(wt) : DD_BF16;
    int batch = bt ? (int)parse_int("--batch", bt, 1, 4096) : 1;
    int threads = th ? (int)parse_int("--threads", th, 0, 1024) : 0;
    int frames = fr ? (int)parse_int("--frames", fr, 1, 1000000) : 0; /* 0: the backend's default, below */
    dd_model *m;
    dd_error e;
    if (model ? dd_model_load(&m, model, &e) : dd_model_synthetic(&m, syn, w, 0, &e)) return fail(&e);
    if (capacity) {
        int rc = bench_capacity(m, b, threads, frames ? frames : 5, max_batch, budgets, nbud, model ? model : syn,
                                model ? dd_dtype_name(dd_model_config(m)->weight_type) : dd_dtype_name(w), js);
        dd_model_free(m);
        return rc;
    }
    const dd_config *c = dd_model_config(m);
    dd_decoder *d = make_decoder(m, b, batch, threads);
    if (!d) {
        dd_model_free(m);
        return 1;
    }
    dd_backend used = dd_decoder_backend(d);
    if (!frames) frames = dd_backend_info_get(used)->demo_frames;
    double *ms = malloc((size_t)frames * sizeof *ms);
    int rc = ms ? time_frames(m, d, batch, frames, 1, ms) : (fprintf(stderr, "depthdec: out of memory\n"), 1);
    double gbps = 0, ws_gbps = 0;
    /* each of the Q-1 passes reads (about) the same matrices: one pass's share is the working set a cache would
     * have to hold for the later passes of a frame to be served from it; measured where the backend can */
    uint64_t ws_bytes = dd_model_weight_bytes_per_frame(m) / (uint64_t)(c->levels - 1);
    if (c->per_position) ws_bytes = dd_model_weight_bytes_per_frame(m); /* Moshi: each pass its own slices */
    if (!rc && dd_measure_read_bandwidth(used, threads, &gbps, &e)) rc = fail(&e);
    if (!rc && ws_bytes >= (1u << 20)) {
        dd_status st = dd_measure_read_bandwidth_size(used, threads, ws_bytes, &ws_gbps, &e);
        if (st == DD_EUNSUPPORTED) ws_gbps = 0; /* not measured for this backend (cuda): said below */
        else if (st) rc = fail(&e);
    }
    if (!rc) {
        double med = ms[frames / 2];
        uint64_t bytes = dd_model_weight_bytes_per_frame(m);
        double floor_ms = bytes / (gbps * 1e9) * 1e3;
        const char *mname = model ? model : syn;
        const char *wname = model ? dd_dtype_name(c->weight_type) : dd_dtype_name(w);
        printf("bench: %s (%s weights), backend %s, batch %d, %d frames (+1 warm-up)\n", mname, wname,
               dd_backend_name(used), batch, frames);
        printf("  ms/frame       median %.3f  (min %.3f, max %.3f)\n", med, ms[0], ms[frames - 1]);
        printf("  stream-frames  %.1f /s  (real-time factor %.4f per stream at 80 ms/frame)\n", batch * 1000.0 / med,
               med / 80.0);
        printf("  weights        %.1f MB read per frame -> %.2f GB/s achieved\n", bytes / 1e6, bytes / (med * 1e6));
        printf("  read bandwidth %.2f GB/s measured now (%s) -> floor %.3f ms/frame, ratio to floor %.3f\n", gbps,
               dd_backend_info_get(used)->bandwidth_method, floor_ms, med / floor_ms);
        double ws_floor = ws_gbps > 0 ? bytes / (ws_gbps * 1e9) * 1e3 : 0;
        if (ws_gbps > 0)
            printf("  read bandwidth %.2f GB/s over %s working set (%.1f MB) -> floor %.3f ms/frame, ratio "
                   "%.3f\n", ws_gbps, c->per_position ? "a frame's" : "one pass's", ws_bytes / 1e6, ws_floor,
                   med / ws_floor);
        /* what the floors mean: the first reads a buffer larger than any cache, so it is a DRAM (or HBM) figure;
         * weights that stay in a cache between passes are read faster, and that ratio can drop below 1 */
        long l3 = used == DD_BACKEND_CUDA ? 0 : sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (c->per_position)
            printf("  floors         = %.1f MB per frame / a read bandwidth: the first from a buffer larger than the\n"
                   "                 caches (a DRAM figure), the second from one frame's weights (per-position\n"
                   "                 weights: each of the %d passes reads its own slices, so a frame is the working set)",
                   bytes / 1e6, c->levels);
        else
            printf("  floors         = %.1f MB per frame / a read bandwidth: the first from a buffer larger than the\n"
                   "                 caches (a DRAM figure; ratio < 1: faster than streaming every weight from memory),\n"
                   "                 the second from one pass's weights (the %d passes of a frame read the same layers)",
                   bytes / 1e6, c->levels - 1);
        if (l3 > 0) printf(";\n                 this host's L3 (%.0f MB) %s that working set", l3 / 1e6,
                           (double)l3 >= (double)ws_bytes ? "holds" : "cannot hold");
        if (ws_gbps <= 0)
            printf(ws_bytes < (1u << 20) ? " (not measured: under 1 MiB)" : " (not measured for this backend)");
        printf(".\n");
        if (js) {
            char tmp[1100];
            snprintf(tmp, sizeof tmp, "%s.tmp.%d", js, (int)getpid());
            FILE *fp = fopen(tmp, "w");
            int ok = fp != NULL;
            if (fp) {
                time_t now = time(NULL);
                char date[32];
                strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
                ok = fprintf(fp,
                             "{\"backend\": \"%s\", \"model\": \"%s\", \"weights\": \"%s\", \"batch\": %d, "
                             "\"frames\": %d, \"threads\": %d, \"ms_per_frame\": %.6f, \"ms_min\": %.6f, "
                             "\"ms_max\": %.6f, \"stream_frames_per_s\": %.3f, \"weight_bytes_per_frame\": %llu, "
                             "\"read_GBps\": %.3f, \"floor_ms_per_frame\": %.6f, \"ratio_to_floor\": %.4f, "
                             "\"working_set_bytes\": %llu, \"read_GBps_working_set\": %.3f, "
                             "\"floor_ms_working_set\": %.6f, \"ratio_to_working_set_floor\": %.4f, "
                             "\"date\": \"%s\"}\n",
                             dd_backend_name(used), mname, wname, batch, frames, threads, med, ms[0], ms[frames - 1],
                             batch * 1000.0 / med, (unsigned long long)bytes, gbps, floor_ms, med / floor_ms,
                             (unsigned long long)ws_bytes, ws_gbps, ws_floor, ws_floor > 0 ? med / ws_floor : 0.0,
                             date) > 0;
                ok = (fclose(fp) == 0) && ok;
            }
            if (!ok || rename(tmp, js) != 0) {
                fprintf(stderr, "depthdec: %s: %s\n", js, strerror(errno));
                remove(tmp);
                rc = 1;
            }
        }
    }
    free(ms);
    dd_decoder_free(d);
    dd_model_free(m);
    return rc;
}

/* ---- export ---------------------------------------------------------------------------------------------- */

static int cmd_export(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec export (--synthetic gpt|csm|qwen3tts|moshi|tiny-gpt|tiny-wide|tiny-llama|tiny-qwen3|tiny-moshi [--weights W] | --model M) --out F\n"
               "Writes the model as a native .safetensors file (config in __metadata__), e.g. for other engines.\n");
        return 0;
    }
    const char *model = opt_str(o, "--model"), *syn = opt_str(o, "--synthetic"), *wt = opt_str(o, "--weights"),
               *out = opt_str(o, "--out");
    const char *pos[1];
    if (positionals(o, pos, 0)) die_usage("export takes no positional arguments");
    if (!out || (!model == !syn)) die_usage("export needs --out and one of --synthetic or --model");
    dd_dtype w = wt ? parse_weights(wt) : DD_BF16;
    dd_export_params ep = dd_export_default_params();
    if (model && wt) {
        /* --model M --weights f32|f16|bf16: convert every matrix (dequantizing MLX ones) */
        if (w != DD_F32 && w != DD_F16 && w != DD_BF16) die_usage("export --model: --weights must be f32, f16 or bf16 "
                                                                 "(use quantize for q8/q4)");
        ep.convert = 1;
        ep.dense_type = w;
    }
    dd_model *m;
    dd_error e;
    double t0 = now_ms();
    if (model ? dd_model_load(&m, model, &e) : dd_model_synthetic(&m, syn, w, 0, &e)) return fail(&e);
    int rc = dd_model_export(m, out, &ep, &e) ? fail(&e) : 0;
    if (!rc)
        summary("wrote %s: native safetensors of %s, %d tensors, %s weights, %.2f s", out, dd_model_source(m),
                dd_model_tensor_count(m), model && !wt ? dd_dtype_name(dd_model_config(m)->weight_type)
                                                       : dd_dtype_name(w), (now_ms() - t0) / 1e3);
    dd_model_free(m);
    return rc;
}

/* ---- quantize -------------------------------------------------------------------------------------------- */

static void progress(void *ctx, int done, int total) {
    progress_line(*(const double *)ctx, "quantizing", done, total, "matrices");
    if (done == total) progress_end();
}

static dd_export_params quant_params(opts *o, int need_bits) {
    const char *bits = opt_str(o, "--bits"), *gs = opt_str(o, "--group-size"), *st = opt_str(o, "--scale-type");
    dd_export_params p = dd_export_default_params();
    if (need_bits && !bits) die_usage("quantize needs --bits 8 or --bits 4");
    if (bits) {
        p.bits = (int)parse_int("--bits", bits, 0, 64);
        if (p.bits != 8 && p.bits != 4) die_usage("--bits %s: want 8 or 4", bits);
    }
    if (gs) {
        p.group = (int)parse_int("--group-size", gs, 0, 1 << 20);
        if (p.group != 32 && p.group != 64 && p.group != 128) die_usage("--group-size %s: want 32, 64 or 128", gs);
    }
    if (st) {
        p.scale_type = parse_weights(st);
        if (p.scale_type != DD_F32 && p.scale_type != DD_F16 && p.scale_type != DD_BF16)
            die_usage("--scale-type %s: want f32, f16 or bf16", st);
    }
    p.embeddings = opt_flag(o, "--embeddings");
    return p;
}

static int cmd_quantize(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec quantize IN OUT --bits 8|4 [--group-size 32|64|128] [--embeddings]\n"
               "       [--scale-type f32|f16|bf16]\n"
               "Writes OUT, a native .safetensors with MLX affine weights (X.weight U32, X.scales, X.biases) for the\n"
               "layer matrices, in_proj, head0 and heads (and the code embeddings with --embeddings). IN is any\n"
               "model depthdec loads. Default group size 64, scales/biases float32.\n");
        return 0;
    }
    dd_export_params p = quant_params(o, 1);
    const char *pos[2];
    if (positionals(o, pos, 2) != 2) die_usage("quantize needs IN and OUT");
    dd_model *m;
    dd_error e;
    double t0 = now_ms();
    if (dd_model_load(&m, pos[0], &e)) return fail(&e);
    p.progress = progress;
    p.progress_ctx = &t0;
    int rc = dd_model_export(m, pos[1], &p, &e) ? fail(&e) : 0;
    if (!rc)
        summary("wrote %s: %d-bit MLX affine weights, group %d, scales %s, %s, from %s, %.2f s", pos[1], p.bits,
                p.group, dd_dtype_name(p.scale_type), p.embeddings ? "embeddings quantized too" : "embeddings kept",
                pos[0], (now_ms() - t0) / 1e3);
    dd_model_free(m);
    return rc;
}

/* ---- quality --------------------------------------------------------------------------------------------- */

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmd_quality(opts *o) {
    if (opt_flag(o, "--help")) {
        printf("usage: depthdec quality (MODEL | --synthetic KIND) [--group-size G] [--rows N] [--backend B]\n"
               "       [--hidden H.npy --codes C.npy] [--weights W]\n"
               "Quantizes MODEL in memory to 8 and 4 bits and compares teacher-forced logits with the dense model\n"
               "on N rows (random hidden states and codes, or the given files): per level, the max and mean of\n"
               "|logit error| / max|dense logit| and the top-1 agreement.\n");
        return 0;
    }
    dd_export_params p = quant_params(o, 0);
    const char *syn = opt_str(o, "--synthetic"), *rw = opt_str(o, "--rows"), *hp = opt_str(o, "--hidden"),
               *cp = opt_str(o, "--codes"), *wt = opt_str(o, "--weights"), *th = opt_str(o, "--threads");
    dd_backend b = opt_backend(o);
    const char *pos[1];
    int np = positionals(o, pos, 1);
    if ((np == 1) == (syn != NULL)) die_usage("quality needs a MODEL or --synthetic KIND");
    if (!hp != !cp) die_usage("--hidden and --codes go together");
    int rows = rw ? (int)parse_int("--rows", rw, 1, 100000) : 16;
    int threads = th ? (int)parse_int("--threads", th, 0, 1024) : 0;
    dd_model *m, *mq[2] = {NULL, NULL};
    dd_error e;
    if (syn ? dd_model_synthetic(&m, syn, wt ? parse_weights(wt) : DD_BF16, 0, &e) : dd_model_load(&m, pos[0], &e))
        return fail(&e);
    const dd_config *c = dd_model_config(m);
    int Q = c->levels, V = c->codebook_size, rc = 1;
    int64_t n = rows;
    float *h = NULL, *ld = NULL, *lq[2] = {NULL, NULL};
    int32_t *codes = NULL, *text = NULL;
    if (hp) {
        if (!(h = read_hidden(m, hp, &n)) || !(codes = read_codes(m, cp, "--codes", 2, (int64_t[]){n, Q}, V)))
            goto done;
    } else {
        h = malloc((size_t)n * c->input_dim * sizeof *h);
        codes = malloc((size_t)n * Q * sizeof *codes);
        if (!h || !codes) goto done;
        fill_hidden(h, (size_t)n * c->input_dim, 99);
        uint64_t s = 12345;
        for (int64_t i = 0; i < n * Q; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            codes[i] = (int32_t)((s >> 33) % (uint64_t)V);
        }
    }
    if (c->text_vocab) { /* Moshi: a text token per row (deterministic; --text is not an option of quality) */
        if (!(text = malloc((size_t)n * sizeof *text))) goto done;
        for (int64_t i = 0; i < n; i++) text[i] = (int32_t)((i * 104729u) % (unsigned)(c->text_vocab + 1));
    }
    for (int qi = 0; qi < 2; qi++) { /* both quantized copies first: a refused group size prints nothing else */
        p.bits = qi == 0 ? 8 : 4;
        if (dd_model_export_mem(&mq[qi], m, &p, &e)) {
            fail(&e);
            goto done;
        }
    }
    size_t nl = (size_t)n * (Q - 1) * V;
    ld = malloc(nl * sizeof *ld);
    lq[0] = malloc(nl * sizeof *lq[0]);
    lq[1] = malloc(nl * sizeof *lq[1]);
    if (!ld || !lq[0] || !lq[1]) goto done;
    int batch = n < 16 ? (int)n : 16;
    dd_decoder *d = make_decoder(m, b, batch, threads);
    if (!d) goto done;
    int ok = 1;
    double t0 = now_ms();
    for (int64_t r = 0; r < n && ok; r += batch) {
        int k = (int)(n - r < batch ? n - r : batch);
        progress_line(t0, "quality: dense model", r, n, "rows");
        if (dd_score_text(d, k, h + r * c->input_dim, text ? text + r : NULL, codes + r * Q, ld + r * (Q - 1) * V,
                          NULL, &e))
            ok = !fail(&e);
    }
    const char *bname = dd_backend_name(dd_decoder_backend(d));
    progress_end();
    dd_decoder_free(d);
    for (int qi = 0; qi < 2 && ok; qi++) { /* every score first: an error prints nothing on stdout */
        dd_decoder *dq = make_decoder(mq[qi], b, batch, threads);
        if (!dq) {
            ok = 0;
            break;
        }
        for (int64_t r = 0; r < n && ok; r += batch) {
            int k = (int)(n - r < batch ? n - r : batch);
            progress_line(t0, qi == 0 ? "quality: 8-bit model" : "quality: 4-bit model", r, n, "rows");
            if (dd_score_text(dq, k, h + r * c->input_dim, text ? text + r : NULL, codes + r * Q,
                              lq[qi] + r * (Q - 1) * V, NULL, &e))
                ok = !fail(&e);
        }
        progress_end();
        dd_decoder_free(dq);
    }
    if (ok)
        printf("quality: %s, %lld rows (%s), backend %s; error = |quantized - dense| / max|dense| per level\n",
               dd_model_source(m), (long long)n, hp ? "given inputs" : "random hidden states and codes", bname);
    for (int qi = 0; qi < 2 && ok; qi++) {
        p.bits = qi == 0 ? 8 : 4;
        printf("\n%d-bit, group %d (scales %s):\n level   max err   mean err   top-1 agree\n", p.bits, p.group,
               dd_dtype_name(p.scale_type));
        double wmax = 0, wmean = 0;
        int64_t agree_all = 0;
        for (int l = 0; l < Q - 1; l++) {
            double mx = 0, se = 0, refmax = 0;
            int64_t agree = 0;
            for (int64_t r = 0; r < n; r++) {
                const float *a = ld + ((size_t)r * (Q - 1) + l) * V, *q = lq[qi] + ((size_t)r * (Q - 1) + l) * V;
                for (int v = 0; v < V; v++) refmax = fmax(refmax, fabs(a[v]));
                agree += argmax(a, V) == argmax(q, V);
            }
            for (int64_t r = 0; r < n; r++) {
                const float *a = ld + ((size_t)r * (Q - 1) + l) * V, *q = lq[qi] + ((size_t)r * (Q - 1) + l) * V;
                for (int v = 0; v < V; v++) {
                    double d2 = fabs((double)q[v] - a[v]) / refmax;
                    mx = fmax(mx, d2);
                    se += d2;
                }
            }
            double mean = se / ((double)n * V);
            printf("  %3d   %.2e   %.2e   %5.1f%%\n", l + 1, mx, mean, 100.0 * agree / n);
            wmax = fmax(wmax, mx);
            wmean += mean / (Q - 1);
            agree_all += agree;
        }
        printf("  all   %.2e   %.2e   %5.1f%%\n", wmax, wmean, 100.0 * agree_all / ((double)n * (Q - 1)));
    }
    rc = ok ? 0 : 1;
done:
    free(h);
    free(codes);
    free(text);
    free(ld);
    free(lq[0]);
    free(lq[1]);
    dd_model_free(mq[0]);
    dd_model_free(mq[1]);
    dd_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) die_usage("no command given");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_usage();
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("depthdec %s\n", DD_VERSION_STRING);
        return 0;
    }
    int *used = calloc((size_t)argc, sizeof *used);
    if (!used) return 1;
    opts o = {argc - 2, argv + 2, used};
    g_quiet = opt_flag(&o, "--quiet");
    g_tty = !g_quiet && isatty(2);
    int rc;
    if (!strcmp(cmd, "info")) rc = cmd_info(&o);
    else if (!strcmp(cmd, "demo")) rc = cmd_demo(&o);
    else if (!strcmp(cmd, "generate")) rc = cmd_generate(&o);
    else if (!strcmp(cmd, "score")) rc = cmd_score(&o);
    else if (!strcmp(cmd, "bench")) rc = cmd_bench(&o);
    else if (!strcmp(cmd, "export")) rc = cmd_export(&o);
    else if (!strcmp(cmd, "quantize")) rc = cmd_quantize(&o);
    else if (!strcmp(cmd, "quality")) rc = cmd_quality(&o);
    else {
        free(used);
        die_usage("unknown command '%s'", cmd);
        return EXIT_USAGE;
    }
    free(used);
    return rc;
}
