#ifndef DD_CONFIG_H
#define DD_CONFIG_H
#include "depthdec.h"
#include <jansson.h>
/* Parse the native depthdec config object (SPEC §4); `src` names the file in messages. Bounds-checked. */
dd_status dd_config_parse_native(const char *src, const json_t *o, dd_config *c, dd_error *err);
/* Parse an HF CSM config.json object (model_type "csm", depth_decoder_config, rope_parameters or rope_scaling). */
dd_status dd_config_parse_csm(const char *src, const json_t *o, dd_config *c, dd_error *err);
#endif
