#ifndef DD_QUANT_H
#define DD_QUANT_H
#include <stdint.h>
/* MLX affine quantization of one row w[0..K) (K % group == 0, bits 8 or 4), MLX's rule since 0.12.2, per group:
 *   s = max((max-min)/(2^bits-1), 1e-7); edge = the extreme of larger magnitude, s = -s when that is the max;
 *   q0 = round(edge/s); if q0 != 0 { s = edge/q0; bias = edge } else bias = 0;
 *   q = clamp(round((w-bias)/s), 0, 2^bits-1)
 * so the edge maps exactly to q = 0 and 0.0 is representable. Output: q packed from the least significant bits
 * into K*bits/32 u32 words, scales and biases [K/group] in float32 (the caller rounds them to the stored type). */
void dd_quantize_row(const float *w, int64_t K, int bits, int group, uint32_t *q, float *scales, float *biases);
#endif
