#ifndef DD_CONFIG_H
#define DD_CONFIG_H
#include "depthdec.h"
#include <jansson.h>
/* The checkpoint families an HF directory may hold (its config.json's model_type) */
typedef enum dd_family { DD_FAMILY_NATIVE = 0, DD_FAMILY_CSM = 1, DD_FAMILY_QWEN3 = 2, DD_FAMILY_MOSHI = 3 } dd_family;
/* Parse the native depthdec config object (SPEC §4); `src` names the file in messages. Bounds-checked. */
dd_status dd_config_parse_native(const char *src, const json_t *o, dd_config *c, dd_error *err);
/* Parse an HF CSM config.json object (model_type "csm", depth_decoder_config, rope_parameters or rope_scaling). */
dd_status dd_config_parse_csm(const char *src, const json_t *o, dd_config *c, dd_error *err);
/* Parse a Qwen3 code predictor's config.json (model_type "qwen3_omni_moe_talker_code_predictor", "qwen3_omni_moe" or
 * "qwen3_tts", and an MLX "quantization" key); *prefix gets the predictor's tensor-name prefix. */
dd_status dd_config_parse_qwen3(const char *src, const json_t *o, dd_config *c, const char **prefix, dd_error *err);
/* Parse Kyutai Moshi's config.json as transformers writes it: model_type "moshi" (MoshiForConditionalGeneration; the
 * depformer's dims under depth_decoder_config, tensors under "depth_decoder.") or "moshi_depth" (MoshiDepthDecoder
 * saved alone, tensors unprefixed); *prefix gets the tensor-name prefix. */
dd_status dd_config_parse_moshi(const char *src, const json_t *o, dd_config *c, const char **prefix, dd_error *err);
/* The consistency checks every parser ends with (a config built from tensor shapes: Kyutai's checkpoints) */
dd_status dd_config_check(const char *src, dd_config *c, dd_error *err);
/* The family's name for `info` ("native", "csm", "qwen3", "moshi") */
const char *dd_family_name(int family);
/* DD_FAMILY_CSM / DD_FAMILY_QWEN3 / DD_FAMILY_MOSHI by model_type, else DD_FAMILY_NATIVE (not an HF family this loader knows). */
dd_family dd_config_family(const json_t *o);
#endif
