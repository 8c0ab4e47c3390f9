/* Model configs: the native depthdec JSON (SPEC §4) and HF CSM config.json, both into dd_config, with bounds
 * checked before anything is sized from them. */
#include "config.h"
#include "model.h"
#include "util.h"

#include <math.h>
#include <string.h>

/* Integer field `key` of o into *out. Missing -> DD_EMODEL unless `dflt` >= 0 (then *out = dflt). */
static dd_status get_int(const char *src, const json_t *o, const char *key, int dflt, int lo, int hi, int *out,
                         dd_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt >= 0) {
            *out = dflt;
            return DD_OK;
        }
        return dd_fail(err, DD_EMODEL, "%s: config: missing \"%s\"", src, key);
    }
    if (!json_is_integer(v)) return dd_fail(err, DD_EMODEL, "%s: config: \"%s\" is not an integer", src, key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return dd_fail(err, DD_EMODEL, "%s: config: \"%s\" = %lld outside [%d, %d]", src, key, (long long)i, lo, hi);
    *out = (int)i;
    return DD_OK;
}

static dd_status get_num(const char *src, const json_t *o, const char *key, double dflt, double *out, dd_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (!isnan(dflt)) {
            *out = dflt;
            return DD_OK;
        }
        return dd_fail(err, DD_EMODEL, "%s: config: missing \"%s\"", src, key);
    }
    if (!json_is_number(v)) return dd_fail(err, DD_EMODEL, "%s: config: \"%s\" is not a number", src, key);
    *out = json_number_value(v);
    if (!isfinite(*out)) return dd_fail(err, DD_EMODEL, "%s: config: \"%s\" is not finite", src, key);
    return DD_OK;
}

/* Shared consistency checks, after either parser. */
static dd_status check_config(const char *src, dd_config *c, dd_error *err) {
    if (c->heads % c->kv_heads != 0)
        return dd_fail(err, DD_EMODEL, "%s: config: heads %d not divisible by kv_heads %d", src, c->heads, c->kv_heads);
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return dd_fail(err, DD_EMODEL, "%s: config: norm_eps %g outside (0, 1)", src, (double)c->norm_eps);
    if ((int64_t)c->heads * c->head_dim > DD_MAX_DIM)
        return dd_fail(err, DD_EMODEL, "%s: config: heads*head_dim = %lld exceeds %d", src,
                       (long long)c->heads * c->head_dim, DD_MAX_DIM);
    if (c->has_rope) {
        if (c->head_dim % 2)
            return dd_fail(err, DD_EMODEL, "%s: config: RoPE needs an even head_dim, got %d", src, c->head_dim);
        if (!(c->rope_theta > 1))
            return dd_fail(err, DD_EMODEL, "%s: config: rope theta %g must be > 1", src, c->rope_theta);
        if (c->rope_scaling &&
            !(c->rope_factor >= 1 && c->rope_low_freq_factor > 0 &&
              c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_pos >= 1))
            return dd_fail(err, DD_EMODEL,
                           "%s: config: llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < "
                           "high_freq_factor, original_max_position_embeddings >= 1 (got %g, %g, %g, %g)",
                           src, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                           c->rope_original_max_pos);
    }
    if (c->per_position && (c->has_rope || c->block != DD_BLOCK_LLAMA || c->has_qk_norm))
        return dd_fail(err, DD_EMODEL, "%s: config: per-position weights (Moshi's depformer) go with a llama block "
                       "without RoPE or q/k norms", src);
    if (c->quant_bits && c->quant_bits != 8 && c->quant_bits != 4)
        return dd_fail(err, DD_EMODEL, "%s: config: quantization bits %d (want 8 or 4)", src, c->quant_bits);
    if (c->quant_bits && c->quant_group != 32 && c->quant_group != 64 && c->quant_group != 128)
        return dd_fail(err, DD_EMODEL, "%s: config: quantization group_size %d (want 32, 64 or 128)", src,
                       c->quant_group);
    return DD_OK;
}

/* llama3 scaling keys, shared by native "scaling" and HF rope_scaling / rope_parameters. */
static dd_status parse_llama3(const char *src, const json_t *s, dd_config *c, dd_error *err) {
    dd_status st;
    if ((st = get_num(src, s, "factor", NAN, &c->rope_factor, err)) ||
        (st = get_num(src, s, "low_freq_factor", NAN, &c->rope_low_freq_factor, err)) ||
        (st = get_num(src, s, "high_freq_factor", NAN, &c->rope_high_freq_factor, err)) ||
        (st = get_num(src, s, "original_max_position_embeddings", NAN, &c->rope_original_max_pos, err)))
        return st;
    c->rope_scaling = 1;
    return DD_OK;
}

dd_status dd_config_parse_native(const char *src, const json_t *o, dd_config *c, dd_error *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(o)) return dd_fail(err, DD_EMODEL, "%s: config is not a JSON object", src);
    const json_t *fmt = json_object_get(o, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "depthdec") != 0)
        return dd_fail(err, DD_EMODEL, "%s: config: \"format\" must be \"depthdec\"", src);
    int version;
    dd_status st = get_int(src, o, "version", -1, 1, 1, &version, err);
    if (st) return st;
    const json_t *blk = json_object_get(o, "block");
    const char *b = json_is_string(blk) ? json_string_value(blk) : "";
    if (strcmp(b, "gpt") == 0) c->block = DD_BLOCK_GPT;
    else if (strcmp(b, "llama") == 0) c->block = DD_BLOCK_LLAMA;
    else return dd_fail(err, DD_EMODEL, "%s: config: \"block\" must be \"gpt\" or \"llama\"", src);
    double eps;
    if ((st = get_int(src, o, "levels", -1, 2, DD_MAX_LEVELS, &c->levels, err)) ||
        (st = get_int(src, o, "codebook_size", -1, 1, DD_MAX_VOCAB, &c->codebook_size, err)) ||
        (st = get_int(src, o, "input_dim", -1, 1, DD_MAX_DIM, &c->input_dim, err)) ||
        (st = get_int(src, o, "dim", -1, 1, DD_MAX_DIM, &c->dim, err)) ||
        (st = get_int(src, o, "layers", -1, 1, DD_MAX_LAYERS, &c->layers, err)) ||
        (st = get_int(src, o, "heads", -1, 1, DD_MAX_HEADS, &c->heads, err)) ||
        (st = get_int(src, o, "kv_heads", c->heads, 1, DD_MAX_HEADS, &c->kv_heads, err)) ||
        (st = get_int(src, o, "head_dim", -1, 1, DD_MAX_HEAD_DIM, &c->head_dim, err)) ||
        (st = get_int(src, o, "ffn_dim", -1, 1, DD_MAX_FFN, &c->ffn_dim, err)) ||
        (st = get_num(src, o, "norm_eps", 1e-5, &eps, err)))
        return st;
    c->norm_eps = (float)eps;
    const json_t *qk = json_object_get(o, "qk_norm");
    if (qk && !json_is_null(qk)) {
        if (!json_is_boolean(qk)) return dd_fail(err, DD_EMODEL, "%s: config: \"qk_norm\" must be true or false", src);
        c->has_qk_norm = json_is_true(qk);
    }
    const json_t *pp = json_object_get(o, "per_position");
    if (pp && !json_is_null(pp)) {
        if (!json_is_boolean(pp))
            return dd_fail(err, DD_EMODEL, "%s: config: \"per_position\" must be true or false", src);
        c->per_position = json_is_true(pp);
    }
    if ((st = get_int(src, o, "text_vocab", 0, 0, DD_MAX_TEXT_VOCAB, &c->text_vocab, err))) return st;
    if (c->per_position != (c->text_vocab > 0))
        return dd_fail(err, DD_EMODEL, "%s: config: \"per_position\": true and \"text_vocab\" > 0 go together "
                       "(Moshi's depformer)", src);
    const json_t *rope = json_object_get(o, "rope");
    if (rope && !json_is_null(rope)) {
        if (!json_is_object(rope)) return dd_fail(err, DD_EMODEL, "%s: config: \"rope\" must be null or an object", src);
        c->has_rope = 1;
        if ((st = get_num(src, rope, "theta", NAN, &c->rope_theta, err))) return st;
        const json_t *sc = json_object_get(rope, "scaling");
        if (sc && !json_is_null(sc)) {
            if (!json_is_object(sc))
                return dd_fail(err, DD_EMODEL, "%s: config: \"rope.scaling\" must be null or an object", src);
            if ((st = parse_llama3(src, sc, c, err))) return st;
        }
    }
    const json_t *q = json_object_get(o, "quantization");
    if (q && !json_is_null(q)) {
        if (!json_is_object(q)) return dd_fail(err, DD_EMODEL, "%s: config: \"quantization\" must be an object", src);
        const json_t *mode = json_object_get(q, "mode");
        if (mode && (!json_is_string(mode) || strcmp(json_string_value(mode), "affine") != 0))
            return dd_fail(err, DD_EMODEL, "%s: config: quantization mode must be \"affine\"", src);
        if ((st = get_int(src, q, "bits", -1, 1, 64, &c->quant_bits, err)) ||
            (st = get_int(src, q, "group_size", 64, 1, 1 << 20, &c->quant_group, err)))
            return st;
    }
    return check_config(src, c, err);
}

/* The transformer keys every HF decoder config here shares (CSM's depth decoder, the Qwen3 code predictors, Moshi's
 * depformer): D, layers, heads, kv heads (default: heads), head_dim (default D / heads), rms_norm_eps (default
 * eps_default), hidden_act (silu only). `where` names the object in messages. */
static dd_status parse_hf_block(const char *src, const char *where, const json_t *d, double eps_default, dd_config *c,
                                dd_error *err) {
    c->block = DD_BLOCK_LLAMA;
    dd_status st;
    double eps;
    if ((st = get_int(src, d, "hidden_size", -1, 1, DD_MAX_DIM, &c->dim, err)) ||
        (st = get_int(src, d, "num_hidden_layers", -1, 1, DD_MAX_LAYERS, &c->layers, err)) ||
        (st = get_int(src, d, "num_attention_heads", -1, 1, DD_MAX_HEADS, &c->heads, err)) ||
        (st = get_int(src, d, "num_key_value_heads", c->heads, 1, DD_MAX_HEADS, &c->kv_heads, err)) ||
        (st = get_int(src, d, "head_dim", c->dim / c->heads > 0 ? c->dim / c->heads : -1, 1, DD_MAX_HEAD_DIM,
                      &c->head_dim, err)) ||
        (st = get_num(src, d, "rms_norm_eps", eps_default, &eps, err)))
        return st;
    c->norm_eps = (float)eps;
    const json_t *act = json_object_get(d, "hidden_act");
    if (act && json_is_string(act) && strcmp(json_string_value(act), "silu") != 0)
        return dd_fail(err, DD_EMODEL, "%s: %shidden_act \"%s\" (only silu is supported)", src, where,
                       json_string_value(act));
    return DD_OK;
}

/* The Llama-style keys of CSM's depth decoder and the Qwen3 code predictors: V, ffn, the block's keys, RoPE. */
static dd_status parse_hf_llama(const char *src, const char *where, const json_t *d, dd_config *c, dd_error *err) {
    dd_status st;
    if ((st = get_int(src, d, "vocab_size", -1, 1, DD_MAX_VOCAB, &c->codebook_size, err)) ||
        (st = get_int(src, d, "intermediate_size", -1, 1, DD_MAX_FFN, &c->ffn_dim, err)) ||
        (st = parse_hf_block(src, where, d, 1e-5, c, err)))
        return st;
    /* RoPE: transformers >= 5 writes rope_parameters {rope_type, rope_theta, ...}; 4.x writes rope_theta and
     * rope_scaling {rope_type|type, factor, ...}. */
    c->has_rope = 1;
    const json_t *rp = json_object_get(d, "rope_parameters");
    const json_t *scal = NULL;
    if (json_is_object(rp)) {
        /* some writers keep theta outside (decided before parsing, so a success leaves no error behind) */
        const json_t *th = json_object_get(rp, "rope_theta");
        if ((st = get_num(src, th && !json_is_null(th) ? rp : d, "rope_theta", NAN, &c->rope_theta, err))) return st;
        scal = rp;
    } else {
        if ((st = get_num(src, d, "rope_theta", 10000.0, &c->rope_theta, err))) return st;
        scal = json_object_get(d, "rope_scaling");
    }
    if (scal && json_is_object(scal)) {
        const json_t *ty = json_object_get(scal, "rope_type");
        if (!ty) ty = json_object_get(scal, "type");
        const char *t = json_is_string(ty) ? json_string_value(ty) : "default";
        if (strcmp(t, "llama3") == 0) {
            if ((st = parse_llama3(src, scal, c, err))) return st;
        } else if (strcmp(t, "default") != 0) {
            return dd_fail(err, DD_EMODEL, "%s: rope type \"%s\" is not supported (default or llama3)", src, t);
        }
    }
    return DD_OK;
}

dd_status dd_config_parse_csm(const char *src, const json_t *o, dd_config *c, dd_error *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(o)) return dd_fail(err, DD_EMODEL, "%s: not a JSON object", src);
    const json_t *mt = json_object_get(o, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "csm") != 0)
        return dd_fail(err, DD_EMODEL, "%s: model_type is not \"csm\"", src);
    const json_t *d = json_object_get(o, "depth_decoder_config");
    if (!json_is_object(d)) return dd_fail(err, DD_EMODEL, "%s: missing object \"depth_decoder_config\"", src);
    dd_status st;
    int backbone_hidden = 0;
    if ((st = get_int(src, o, "hidden_size", 0, 0, DD_MAX_DIM, &backbone_hidden, err)) ||
        (st = get_int(src, d, "backbone_hidden_size", backbone_hidden > 0 ? backbone_hidden : -1, 1, DD_MAX_DIM,
                      &c->input_dim, err)) ||
        (st = get_int(src, d, "num_codebooks", -1, 2, DD_MAX_LEVELS, &c->levels, err)) ||
        (st = parse_hf_llama(src, "depth_decoder_config.", d, c, err)))
        return st;
    return check_config(src, c, err);
}

/* An MLX conversion's "quantization": {"group_size": G, "bits": B, ...} (mlx-lm writes it beside the model's own
 * keys): when present, every quantized tensor must have these bits and group (load_mat checks each by name) and the
 * layer matrices must be quantized. Per-module overrides (objects under the same key) are not supported. */
static dd_status parse_hf_quant(const char *src, const json_t *o, dd_config *c, dd_error *err) {
    const json_t *q = json_object_get(o, "quantization");
    if (!q || json_is_null(q)) return DD_OK;
    if (!json_is_object(q)) return dd_fail(err, DD_EMODEL, "%s: \"quantization\" must be an object", src);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)q, key, v) {
        if (json_is_object(v) || json_is_boolean(v))
            return dd_fail(err, DD_EUNSUPPORTED, "%s: quantization[\"%s\"]: per-module quantization settings are not "
                           "supported (one bits and group_size for the whole model)", src, key);
    }
    const json_t *mode = json_object_get(q, "mode");
    if (mode && !json_is_null(mode) && (!json_is_string(mode) || strcmp(json_string_value(mode), "affine") != 0))
        return dd_fail(err, DD_EUNSUPPORTED, "%s: quantization mode must be \"affine\"", src);
    dd_status st;
    if ((st = get_int(src, q, "bits", -1, 1, 64, &c->quant_bits, err)) ||
        (st = get_int(src, q, "group_size", 64, 1, 1 << 20, &c->quant_group, err)))
        return st;
    return DD_OK;
}

/* Qwen3 code predictors, three layouts (docs/formats.md):
 *  - the Qwen3-Omni talker's predictor saved alone (model_type "qwen3_omni_moe_talker_code_predictor", tensors
 *    unprefixed; the talker's width is its own);
 *  - a whole Qwen3-Omni model (Qwen3OmniMoeForConditionalGeneration: "qwen3_omni_moe"; the predictor under
 *    talker_config.code_predictor_config, tensors under "talker.code_predictor.", the talker's width in
 *    talker_config.text_config.hidden_size). The talker feeds its hidden state and codec embedding to the predictor
 *    unprojected, so the two widths must agree;
 *  - a whole Qwen3-TTS model ("qwen3_tts": the predictor under talker_config.code_predictor_config, tensors under
 *    "talker.code_predictor.", the talker's width in talker_config.hidden_size; the loader checks it against the
 *    projection tensor when there is one).
 * input_dim is the talker's width. An MLX "quantization" key at the top level is read too (parse_hf_quant). */
dd_status dd_config_parse_qwen3(const char *src, const json_t *o, dd_config *c, const char **prefix, dd_error *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(o)) return dd_fail(err, DD_EMODEL, "%s: not a JSON object", src);
    const json_t *mt = json_object_get(o, "model_type");
    const char *t = json_is_string(mt) ? json_string_value(mt) : "";
    const json_t *d = o, *talker = NULL, *width_obj = NULL;
    const char *where = "", *width_key = "";
    int omni = strcmp(t, "qwen3_omni_moe") == 0;
    if (strcmp(t, "qwen3_tts") == 0 || omni) {
        talker = json_object_get(o, "talker_config");
        if (!json_is_object(talker))
            return dd_fail(err, DD_EMODEL, "%s: missing object \"talker_config\" (the talker and its code predictor%s)",
                           src, omni ? "; a Qwen3-Omni saved with enable_audio_output false has none" : "");
        d = json_object_get(talker, "code_predictor_config");
        if (!json_is_object(d))
            return dd_fail(err, DD_EMODEL, "%s: missing object \"talker_config.code_predictor_config\"", src);
        where = "talker_config.code_predictor_config.";
        *prefix = "talker.code_predictor.";
        if (omni) {
            width_obj = json_object_get(talker, "text_config");
            if (!json_is_object(width_obj))
                return dd_fail(err, DD_EMODEL, "%s: missing object \"talker_config.text_config\" (the talker's width)",
                               src);
            width_key = "talker_config.text_config.hidden_size";
        } else {
            width_obj = talker;
            width_key = "talker_config.hidden_size";
        }
    } else if (strcmp(t, "qwen3_omni_moe_talker_code_predictor") == 0) {
        *prefix = "";
    } else {
        return dd_fail(err, DD_EMODEL, "%s: model_type \"%s\" is not a Qwen3 code predictor", src, t);
    }
    dd_status st;
    if ((st = get_int(src, d, "num_code_groups", -1, 2, DD_MAX_LEVELS, &c->levels, err)) ||
        (st = parse_hf_llama(src, where, d, c, err)))
        return st;
    c->input_dim = c->dim;
    if (width_obj) {
        const json_t *hs = json_object_get(width_obj, "hidden_size");
        if (!hs || json_is_null(hs)) return dd_fail(err, DD_EMODEL, "%s: config: missing \"%s\"", src, width_key);
        if (!json_is_integer(hs) || json_integer_value(hs) < 1 || json_integer_value(hs) > DD_MAX_DIM)
            return dd_fail(err, DD_EMODEL, "%s: config: \"%s\" must be an integer in [1, %d]", src, width_key,
                           DD_MAX_DIM);
        c->input_dim = (int)json_integer_value(hs);
    }
    if (omni) {
        if (c->input_dim != c->dim)
            return dd_fail(err, DD_EMODEL,
                           "%s: %s %d differs from %shidden_size %d: Qwen3-Omni feeds the talker's hidden state and "
                           "codec embedding to its code predictor unprojected, so they must agree",
                           src, width_key, c->input_dim, where, c->dim);
        /* the talker asks its predictor for num_code_groups - 1 codes: the two counts must agree */
        const json_t *tq = json_object_get(talker, "num_code_groups");
        if (tq && !json_is_null(tq) && (!json_is_integer(tq) || json_integer_value(tq) != c->levels))
            return dd_fail(err, DD_EMODEL, "%s: talker_config.num_code_groups differs from %snum_code_groups %d", src,
                           where, c->levels);
    }
    if ((st = parse_hf_quant(src, o, c, err))) return st;
    c->has_qk_norm = 1;
    return check_config(src, c, err);
}

/* Kyutai Moshi's depformer (transformers MoshiDepthConfig keys): num_codebooks Q, audio_vocab_size V, vocab_size
 * (text ids 0..vocab_size: vocab_size + 1 rows), input_size (the temporal model's width), hidden_size D, layers,
 * heads (kv heads default to heads), head_dim (default D / heads), ffn_dim = fc1's rows = 2 x the gated width (our
 * ffn_dim is the gated width: fc1 is gate rows then up rows, as the native llama layout), rms_norm_eps (default
 * 1e-8, transformers' and the original's rms_norm_f32), hidden_act silu. No RoPE (use_rope=False), no final norm. */
dd_status dd_config_parse_moshi(const char *src, const json_t *o, dd_config *c, const char **prefix, dd_error *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(o)) return dd_fail(err, DD_EMODEL, "%s: not a JSON object", src);
    const json_t *mt = json_object_get(o, "model_type");
    const char *t = json_is_string(mt) ? json_string_value(mt) : "";
    const json_t *d = o;
    const char *where = "";
    if (strcmp(t, "moshi") == 0) {
        d = json_object_get(o, "depth_decoder_config");
        if (!json_is_object(d)) return dd_fail(err, DD_EMODEL, "%s: missing object \"depth_decoder_config\"", src);
        where = "depth_decoder_config.";
        *prefix = "depth_decoder.";
    } else if (strcmp(t, "moshi_depth") == 0) {
        *prefix = "";
    } else {
        return dd_fail(err, DD_EMODEL, "%s: model_type \"%s\" is not moshi or moshi_depth", src, t);
    }
    c->per_position = 1;
    dd_status st;
    int ffn2;
    if ((st = get_int(src, d, "num_codebooks", -1, 2, DD_MAX_LEVELS, &c->levels, err)) ||
        (st = get_int(src, d, "audio_vocab_size", -1, 1, DD_MAX_VOCAB - 1, &c->codebook_size, err)) ||
        (st = get_int(src, d, "vocab_size", -1, 1, DD_MAX_TEXT_VOCAB, &c->text_vocab, err)) ||
        (st = get_int(src, d, "input_size", -1, 1, DD_MAX_DIM, &c->input_dim, err)) ||
        (st = get_int(src, d, "ffn_dim", -1, 2, 2 * DD_MAX_FFN, &ffn2, err)) ||
        (st = parse_hf_block(src, where, d, 1e-8, c, err)))
        return st;
    if (ffn2 % 2)
        return dd_fail(err, DD_EMODEL, "%s: %sffn_dim %d is odd (fc1 holds gate rows then up rows: 2 x the gated width)",
                       src, where, ffn2);
    c->ffn_dim = ffn2 / 2;
    return check_config(src, c, err);
}

dd_status dd_config_check(const char *src, dd_config *c, dd_error *err) { return check_config(src, c, err); }

const char *dd_family_name(int family) {
    static const char *const names[] = {"native", "csm", "qwen3", "moshi"};
    return family >= 0 && family <= DD_FAMILY_MOSHI ? names[family] : "?";
}

/* The model_type of an HF config.json: which loader reads the directory */
dd_family dd_config_family(const json_t *o) {
    const json_t *mt = json_is_object(o) ? json_object_get(o, "model_type") : NULL;
    const char *t = json_is_string(mt) ? json_string_value(mt) : "";
    if (strcmp(t, "csm") == 0) return DD_FAMILY_CSM;
    if (strcmp(t, "qwen3_tts") == 0 || strcmp(t, "qwen3_omni_moe") == 0 ||
        strcmp(t, "qwen3_omni_moe_talker_code_predictor") == 0)
        return DD_FAMILY_QWEN3;
    if (strcmp(t, "moshi") == 0 || strcmp(t, "moshi_depth") == 0) return DD_FAMILY_MOSHI;
    return DD_FAMILY_NATIVE;
}
