/* De-risk: does mma.sync m16n8k16 (bf16, f32 accumulate) give the same bits when the two operands swap roles?
 *
 * Why: the latency executor's units are 16-row m-tiles (weights as the A operand, activations as B), so GPT fc2
 * and out (1024 rows = 64 m-tiles) keep half of the 132 SMs idle and qkv gives some SMs two tiles and others one.
 * With the weights as the B operand (n = 8 rows) and the activations as A (m = 16 tokens, the unused ones zero), a
 * unit is 8 rows: every linear spreads over 128+ SMs. That keeps the numerics contract only if each output element
 * comes out bit-identical: D[row][token] of mma(W, X^T) == D'[token][row] of mma(X, W^T), for single ops with any C
 * and for the executor's chains (per k-tile: the hi term then the lo term of the activations, over K). The fitted
 * model of one op in CUDA_V2.md (products and c truncated to 2^(emax-26), exact sum, round toward zero) is
 * symmetric in a and b; this program checks the hardware.
 *
 * Cases (one warp each): random bf16 weights and activation terms with normal, wide, subnormal, zero, signed-zero
 * and cancelling values; K = 16 with a random C, and K = 1024 chains from C = 0 (hi then lo per k-tile, as
 * cu_ktile). Prints the number of differing output bits and a few examples; FAIL if any.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/cuda/derisk/mma_swap.cu -o mma_swap && ./mma_swap
 */
#include "derisk.cuh"

#include <string.h>

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pk(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

/* one case: W [16][K], Xh/Xl [8][K] (bf16 bits), C [16][8] (f32, the initial accumulator of D[row][token]);
 * out_o [16][8] = original orientation, out_s [16][8] = swapped orientation, both indexed [row][token] */
__global__ void k_cases(const uint16_t *W, const uint16_t *Xh, const uint16_t *Xl, const float *C, int K, int ncase,
                        float *out_o, float *out_s) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    if (warp >= ncase) return;
    const uint16_t *w = W + (size_t)warp * 16 * K, *xh = Xh + (size_t)warp * 8 * K, *xl = Xl + (size_t)warp * 8 * K;
    const float *cc = C + (size_t)warp * 128;
    /* original: A = W tile (rows g, g + 8), B = X^T (token g), D (row, token) */
    float d[4] = {cc[g * 8 + 2 * c], cc[g * 8 + 2 * c + 1], cc[(g + 8) * 8 + 2 * c], cc[(g + 8) * 8 + 2 * c + 1]};
    /* swapped: A = X (tokens g; tokens g + 8 are zero), B = W^T of row half h (row 8 h + g), D' (token, row) */
    float e[2][4];
    for (int h = 0; h < 2; h++) {
        e[h][0] = cc[(8 * h + 2 * c) * 8 + g];
        e[h][1] = cc[(8 * h + 2 * c + 1) * 8 + g];
        e[h][2] = 0.0f; /* token g + 8: unused */
        e[h][3] = 0.0f;
    }
    for (int k0 = 0; k0 < K; k0 += 16) {
        const int ka = k0 + 2 * c, kb = ka + 8;
        uint32_t a[4] = {pk(w[g * K + ka], w[g * K + ka + 1]), pk(w[(g + 8) * K + ka], w[(g + 8) * K + ka + 1]),
                         pk(w[g * K + kb], w[g * K + kb + 1]), pk(w[(g + 8) * K + kb], w[(g + 8) * K + kb + 1])};
        const uint32_t bh0 = pk(xh[g * K + ka], xh[g * K + ka + 1]), bh1 = pk(xh[g * K + kb], xh[g * K + kb + 1]);
        const uint32_t bl0 = pk(xl[g * K + ka], xl[g * K + ka + 1]), bl1 = pk(xl[g * K + kb], xl[g * K + kb + 1]);
        mma16816(d, a, bh0, bh1);
        mma16816(d, a, bl0, bl1);
        const uint32_t ah[4] = {bh0, 0u, bh1, 0u}, al[4] = {bl0, 0u, bl1, 0u};
        for (int h = 0; h < 2; h++) {
            const int r = 8 * h + g;
            const uint32_t b0 = pk(w[r * K + ka], w[r * K + ka + 1]), b1 = pk(w[r * K + kb], w[r * K + kb + 1]);
            mma16816(e[h], ah, b0, b1);
            mma16816(e[h], al, b0, b1);
        }
    }
    float *o = out_o + (size_t)warp * 128, *s = out_s + (size_t)warp * 128;
    o[g * 8 + 2 * c] = d[0];
    o[g * 8 + 2 * c + 1] = d[1];
    o[(g + 8) * 8 + 2 * c] = d[2];
    o[(g + 8) * 8 + 2 * c + 1] = d[3];
    for (int h = 0; h < 2; h++) {
        s[(8 * h + 2 * c) * 8 + g] = e[h][0];
        s[(8 * h + 2 * c + 1) * 8 + g] = e[h][1];
    }
}


static int run(int K, int ncase, int with_c, const char *name) {
    std::vector<uint16_t> W((size_t)ncase * 16 * K), Xh((size_t)ncase * 8 * K), Xl((size_t)ncase * 8 * K);
    std::vector<float> C((size_t)ncase * 128, 0.0f);
    for (int cs = 0; cs < ncase; cs++) {
        const int fw = cs % 4, fx = (cs / 4) % 4, split = (cs / 16) % 2, cancel = (cs / 32) % 2;
        uint16_t *w = &W[(size_t)cs * 16 * K], *xh = &Xh[(size_t)cs * 8 * K], *xl = &Xl[(size_t)cs * 8 * K];
        for (int i = 0; i < 16 * K; i++) w[i] = bf(fw);
        for (int i = 0; i < 8 * K; i++) {
            if (split) { /* the engine's split: x = hi + lo, lo = bf16(x - hi) */
                const float x = bf2f(bf(fx)) * (1.0f + (rnd() & 0xFFFF) * 0x1p-17f);
                xh[i] = f2bf_rn(x);
                xl[i] = f2bf_rn(x - bf2f(xh[i]));
            } else {
                xh[i] = bf(fx);
                xl[i] = bf(fx == 2 ? 2 : 3);
            }
        }
        if (cancel) /* row 1 = -row 0 in the weights: partial sums cancel */
            for (int k = 0; k < K; k++) w[K + k] = w[k] ^ 0x8000u;
        if (with_c)
            for (int i = 0; i < 128; i++) {
                uint16_t b = bf(i % 3 == 2 ? 1 : 0);
                C[(size_t)cs * 128 + i] = bf2f(b) * (1.0f + (rnd() & 0xFFFF) * 0x1p-16f);
            }
    }
    uint16_t *dW, *dXh, *dXl;
    float *dC, *dO, *dS;
    CK(cudaMalloc(&dW, W.size() * 2));
    CK(cudaMalloc(&dXh, Xh.size() * 2));
    CK(cudaMalloc(&dXl, Xl.size() * 2));
    CK(cudaMalloc(&dC, C.size() * 4));
    CK(cudaMalloc(&dO, C.size() * 4));
    CK(cudaMalloc(&dS, C.size() * 4));
    CK(cudaMemcpy(dW, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dXh, Xh.data(), Xh.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dXl, Xl.data(), Xl.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dO, 0xFF, C.size() * 4)); /* poisoned: an unwritten output cannot pass */
    CK(cudaMemset(dS, 0x7F, C.size() * 4));
    k_cases<<<(ncase * 32 + 255) / 256, 256>>>(dW, dXh, dXl, dC, K, ncase, dO, dS);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    std::vector<float> O(C.size()), S(C.size());
    CK(cudaMemcpy(O.data(), dO, O.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(S.data(), dS, S.size() * 4, cudaMemcpyDeviceToHost));
    long diff = 0, shown = 0, nonzero = 0;
    for (size_t i = 0; i < O.size(); i++) {
        uint32_t a, b;
        memcpy(&a, &O[i], 4);
        memcpy(&b, &S[i], 4);
        nonzero += a != 0 && a != 0x80000000u;
        if (a != b) {
            diff++;
            if (shown++ < 5)
                printf("  %s case %zu row %zu token %zu: original %08x (%a) swapped %08x (%a)\n", name, i / 128,
                       (i % 128) / 8, i % 8, a, O[i], b, S[i]);
        }
    }
    printf("RESULT mma_swap | %-24s | K %4d | %6d cases | %8zu outputs (%ld nonzero) | %ld differ | %s\n", name, K,
           ncase, O.size(), nonzero, diff, diff ? "FAIL" : "ok");
    cudaFree(dW), cudaFree(dXh), cudaFree(dXl), cudaFree(dC), cudaFree(dO), cudaFree(dS);
    return diff != 0;
}

int main(void) {
    double mhz = 0;
    dr_banner("mma_swap", &mhz);
    int fails = 0;
    fails += run(16, 65536, 1, "single op, random C");
    fails += run(16, 65536, 0, "single op, C = 0");
    fails += run(1024, 4096, 0, "chain hi/lo, K 1024");
    fails += run(4096, 1024, 0, "chain hi/lo, K 4096");
    printf("SUMMARY mma_swap: %s\n", fails ? "FAIL (operand roles change bits)" : "bit-identical with A and B swapped");
    return fails != 0;
}
