#include "quant.h"

#include <math.h>
#include <string.h>

void dd_quantize_row(const float *w, int64_t K, int bits, int group, uint32_t *q, float *scales, float *biases) {
    int per = 32 / bits;
    float qmax = (float)((1 << bits) - 1);
    memset(q, 0, (size_t)(K / per) * sizeof *q);
    for (int64_t g = 0; g < K / group; g++) {
        const float *x = w + g * group;
        float mn = x[0], mx = x[0];
        for (int i = 1; i < group; i++) {
            mn = fminf(mn, x[i]);
            mx = fmaxf(mx, x[i]);
        }
        float s = fmaxf((mx - mn) / qmax, 1e-7f);
        int edge_is_max = !(fabsf(mn) > fabsf(mx)); /* ties: the max is the edge, as MLX */
        float edge = edge_is_max ? mx : mn;
        if (edge_is_max) s = -s;
        float q0 = nearbyintf(edge / s), bias = 0.0f;
        if (q0 != 0.0f) {
            s = edge / q0;
            bias = edge;
        }
        scales[g] = s;
        biases[g] = bias;
        for (int i = 0; i < group; i++) {
            float v = nearbyintf((x[i] - bias) / s);
            v = v < 0 ? 0 : (v > qmax ? qmax : v);
            int64_t k = g * group + i;
            q[k / per] |= (uint32_t)v << (bits * (k % per));
        }
    }
}
