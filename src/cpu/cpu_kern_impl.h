/* The leaf kernels of the CPU backend, written once against a handful of vector primitives and instantiated by
 * each instruction-set file (cpu_kern_generic.c, cpu_kern_avx2.c, cpu_kern_avx512.c). The contracts are those
 * of dd_cpu_kern in cpu.h; this file holds the implementations.
 *
 * The including file defines, before including this header:
 *   VL                 lanes of one float vector (a power of two, 4..16)
 *   vf                 the vector type
 *   KERN_NR, KERN_TR   the dot tile: weight rows x activation rows (KERN_NR <= DD_CPU_ACC_LD, KERN_TR <= 8),
 *                      sized so that KERN_NR * KERN_TR accumulators plus KERN_NR weight vectors fit the registers
 *   KERN_TABLE, KERN_NAME  the exported dd_cpu_kern symbol and its name
 * and these always-inline functions (every load is unaligned-safe; weights come from memory-mapped files that
 * MLX writes without padding):
 *   vf vz(void); vf vset(float); vf vld(const float *); void vst(float *, vf);
 *   vf vadd(vf, vf); vf vsub(vf, vf); vf vmul(vf, vf);
 *   vf vfma(vf a, vf b, vf c)          a * b + c (fused where the instruction set has it)
 *   float vhsum(vf)                    sum of the lanes in one fixed order
 *   vf wf32(p), wf16(p), wbf16(p)      VL dense weights at byte address p, widened to float (exact)
 *   vf wq8(p)                          VL unsigned 8-bit codes at p, as floats
 *   vf wq4(p)                          VL unsigned 4-bit codes from VL/2 bytes at p (low nibble first), as floats
 *   void wq4x2(p, vf *lo, vf *hi)      2 VL codes from VL bytes: codes 0..VL-1 in lo, VL..2VL-1 in hi
 *   float sbf16(uint16_t)              one IEEE half as float (MLX scales and biases)
 *   vf vdiv, vmin, vmax(vf, vf); vf vabs(vf); vf vround(vf) (to nearest integer, |a| < 2^22);
 *   vf vpow2i(vf n)                    2^n for integral n in [-126, 127]
 *   vf vselneg(vf a, vf x, vf y)       a < 0 ? x : y, lane by lane
 * and optionally (faster quantized paths; without them the plain convert-multiply-add path runs):
 *   KERN_Q4_LUT (VL == 16), vf wq4iota(void) = {0, 1, .., 15}, and
 *   void wq4x2lut(p, vf tab, vf *lo, vf *hi)   2 VL 4-bit codes from VL bytes at p (as wq4x2), each replaced by
 *                                      lane `code` of tab: lo = tab[codes 0..VL-1], hi = tab[codes VL..2VL-1]
 */
#include "cpu.h"
#include "util.h"

#include <math.h>
#include <string.h>

#define DD_AI static inline __attribute__((always_inline))
#define DD_STR2(x) #x
#define DD_STR(x) DD_STR2(x)
#define DD_UNROLL _Pragma(DD_STR(GCC unroll 16))
/* locality hint of the weight prefetches: 2 (prefetcht1, into L2) measured best on this machine at batch 1:
 * the tile is consumed ~1 tile later, and L1 is left to the activations */
#ifndef PF_HINT
#define PF_HINT 2
#endif

/* ---- loads with tails -------------------------------------------------------------------------------------- */

/* n < VL floats from p, the other lanes 0. */
/* Partial vectors (n < VL lanes). An ISA with masked loads/stores defines KERN_HAS_MASKED and its own vldn/vstn
 * (AVX-512): no stack bounce buffer, which gcc may align to 64 bytes and then address with aligned moves — a
 * layout ASan's fake stack (detect_stack_use_after_return) does not honour. */
#ifndef KERN_HAS_MASKED
DD_AI vf vldn(const float *p, int n) {
    float b[VL] = {0};
    memcpy(b, p, (size_t)n * sizeof(float));
    return vld(b);
}

DD_AI void vstn(float *p, vf v, int n) {
    float b[VL];
    vst(b, v);
    memcpy(p, b, (size_t)n * sizeof(float));
}
#endif

DD_AI vf wload(const int dt, const uint8_t *p) {
    if (dt == DD_F32) return wf32(p);
    if (dt == DD_F16) return wf16(p);
    return wbf16(p);
}

/* n < VL dense weights, the other lanes 0 (so 0 * x adds nothing). */
DD_AI vf wloadn(const int dt, const uint8_t *p, int n) {
    uint8_t b[VL * 4] = {0};
    memcpy(b, p, (size_t)n * (dt == DD_F32 ? 4 : 2));
    return wload(dt, b);
}

/* Scale or bias g of one quantized row, as float. */
DD_AI float ldsb(dd_dtype t, const uint8_t *p, int64_t g) {
    if (t == DD_F16) return sbf16(dd_ld16(p + 2 * g));
    if (t == DD_BF16) return dd_bf16_to_f32(dd_ld16(p + 2 * g));
    return dd_ldf32(p + 4 * g);
}

/* dst[0..n) = scales (or biases) g0 .. g0+n-1 of one quantized row as float; a full chunk of SB_CHUNK values
 * with vector widening, a partial one value by value. */
#define SB_CHUNK 16
DD_AI void sb_widen(float *dst, const uint8_t *p, int64_t g0, int n, dd_dtype t) {
    const size_t es = t == DD_F32 ? 4 : 2;
    if (n == SB_CHUNK) {
        for (int i = 0; i < SB_CHUNK; i += VL) vst(dst + i, wload(t, p + es * (size_t)(g0 + i)));
        return;
    }
    for (int i = 0; i < n; i++) dst[i] = ldsb(t, p, g0 + i);
}

/* ---- dot tiles -------------------------------------------------------------------------------------------- */

/* acc[t * ACC_LD + r] = x[t] . W[n0 + r] for t < TR, r < NR over a dense weight (f32/f16/bf16).
 * One accumulator per (t, r), K walked in VL-wide steps then one zero-padded tail step: the sum of a pair does
 * not depend on TR or NR. The NR weight vectors of a step are loaded once and reused by the TR rows. */
DD_AI void dot_dense(float *acc, const float *x, size_t ldx, const dd_weight *w, int64_t n0, const int NR,
                     const int TR, const int dt, const uint8_t *pf) {
    const int64_t K = w->cols;
    const size_t es = dt == DD_F32 ? 4 : 2, pstep = (size_t)NR * VL * es;
    const uint8_t *wr[KERN_NR];
    vf a[KERN_TR][KERN_NR];
    DD_UNROLL for (int r = 0; r < NR; r++) wr[r] = w->data + (size_t)(n0 + r) * w->row_bytes;
    DD_UNROLL for (int t = 0; t < TR; t++) DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vz();
    int64_t k = 0;
    for (; k + VL <= K; k += VL) {
        vf wv[KERN_NR];
        if (pf) {
            for (size_t o = 0; o < pstep; o += 64) __builtin_prefetch(pf + o, 0, PF_HINT);
            pf += pstep;
        }
        DD_UNROLL for (int r = 0; r < NR; r++) wv[r] = wload(dt, wr[r] + (size_t)k * es);
        DD_UNROLL for (int t = 0; t < TR; t++) {
            vf xv = vld(x + t * ldx + k);
            DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vfma(xv, wv[r], a[t][r]);
        }
    }
    if (k < K) {
        int n = (int)(K - k);
        vf wv[KERN_NR];
        DD_UNROLL for (int r = 0; r < NR; r++) wv[r] = wloadn(dt, wr[r] + (size_t)k * es, n);
        DD_UNROLL for (int t = 0; t < TR; t++) {
            vf xv = vldn(x + t * ldx + k, n);
            DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vfma(xv, wv[r], a[t][r]);
        }
    }
    DD_UNROLL for (int t = 0; t < TR; t++) DD_UNROLL for (int r = 0; r < NR; r++)
        acc[t * DD_CPU_ACC_LD + r] = vhsum(a[t][r]);
}

/* The same over an MLX affine weight (bits 8 or 4, group % VL == 0): per group and row, scale s and bias b are
 * broadcast once; each weight vector is dequantized in registers to fl(fl(s * q) + b) — MLX's and
 * dd_weight_row_f32's rounding — then used by the TR rows.
 *
 * q4 where the instruction set has a 16-lane permute (KERN_Q4_LUT): the 16 possible weights of a group and row
 * are computed once (the same two roundings) and each weight vector is one permute by its codes, instead of
 * convert + multiply + add per vector — measured 12.5 -> 15.9 GB/s on L3-resident weights, 2 Zen 4 cores, batch 1
 * (the plain path is compute-bound far below the read bandwidth there). Bit-identical to the plain path. */
DD_AI void dot_quant(float *acc, const float *x, size_t ldx, const dd_weight *w, int64_t n0, const int NR,
                     const int TR, const int bits, const uint8_t *pf) {
    const int64_t K = w->cols, G = w->group, ng = K / G;
    const dd_dtype sbt = w->sb_type;
    /* prefetch: as many bytes of a later tile's codes per step as this step consumes */
    const size_t pstep = (size_t)NR * VL * bits / 8;
    if (pf) {
        /* the next tile's scales and biases: NR contiguous rows of them */
        size_t sbn = (size_t)NR * w->sb_row_bytes;
        const uint8_t *ps = w->scales + (size_t)(n0 + NR) * w->sb_row_bytes;
        const uint8_t *pb = w->biases + (size_t)(n0 + NR) * w->sb_row_bytes;
        for (size_t o = 0; o < sbn; o += 64) {
            __builtin_prefetch(ps + o, 0, 3);
            __builtin_prefetch(pb + o, 0, 3);
        }
    }
    const uint8_t *wr[KERN_NR], *sr[KERN_NR], *br[KERN_NR];
    vf a[KERN_TR][KERN_NR];
    DD_UNROLL for (int r = 0; r < NR; r++) {
        wr[r] = w->data + (size_t)(n0 + r) * w->row_bytes;
        sr[r] = w->scales + (size_t)(n0 + r) * w->sb_row_bytes;
        br[r] = w->biases + (size_t)(n0 + r) * w->sb_row_bytes;
    }
    DD_UNROLL for (int t = 0; t < TR; t++) DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vz();
    /* Scales and biases are widened 16 groups at a time into float arrays on the stack, so the per-group
     * broadcast is a plain memory broadcast (a load, no arithmetic) instead of a scalar convert + broadcast. */
    float sf[KERN_NR][SB_CHUNK], bf[KERN_NR][SB_CHUNK];
    for (int64_t g0 = 0; g0 < ng; g0 += SB_CHUNK) {
        const int gn = ng - g0 < SB_CHUNK ? (int)(ng - g0) : SB_CHUNK;
        DD_UNROLL for (int r = 0; r < NR; r++) {
            sb_widen(sf[r], sr[r], g0, gn, sbt);
            sb_widen(bf[r], br[r], g0, gn, sbt);
        }
        for (int gi = 0; gi < gn; gi++) {
            const int64_t g = g0 + gi;
            vf s[KERN_NR], b[KERN_NR];
            DD_UNROLL for (int r = 0; r < NR; r++) {
                s[r] = vset(sf[r][gi]);
                b[r] = vset(bf[r][gi]);
            }
            int64_t k = g * G;
#ifdef KERN_Q4_LUT
            if (bits == 4 && G % (2 * VL) == 0) {
                /* q4 by table: the 16 values fl(fl(s * q) + b), q = 0..15, of this group and row in one vector
                 * (computed with the same two roundings), then each weight is a lane permute by its code */
                vf tab[KERN_NR];
                const vf iota = wq4iota();
                DD_UNROLL for (int r = 0; r < NR; r++) tab[r] = vadd(vmul(s[r], iota), b[r]);
                for (; k < (g + 1) * G; k += 2 * VL) {
                    vf w0[KERN_NR], w1[KERN_NR];
                    if (pf) {
                        for (size_t o = 0; o < 2 * pstep; o += 64) __builtin_prefetch(pf + o, 0, PF_HINT);
                        pf += 2 * pstep;
                    }
                    DD_UNROLL for (int r = 0; r < NR; r++) wq4x2lut(wr[r] + k / 2, tab[r], &w0[r], &w1[r]);
                    DD_UNROLL for (int t = 0; t < TR; t++) {
                        vf x0 = vld(x + t * ldx + k), x1 = vld(x + t * ldx + k + VL);
                        DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vfma(x1, w1[r], vfma(x0, w0[r], a[t][r]));
                    }
                }
            }
#endif
            if (bits == 4 && G % (2 * VL) == 0) {
                /* q4, two vectors per load and unpack: the same accumulator sequence as one vector at a time */
                for (; k < (g + 1) * G; k += 2 * VL) {
                    vf w0[KERN_NR], w1[KERN_NR];
                    if (pf) {
                        for (size_t o = 0; o < 2 * pstep; o += 64) __builtin_prefetch(pf + o, 0, PF_HINT);
                        pf += 2 * pstep;
                    }
                    DD_UNROLL for (int r = 0; r < NR; r++) {
                        vf q0, q1;
                        wq4x2(wr[r] + k / 2, &q0, &q1);
                        w0[r] = vadd(vmul(s[r], q0), b[r]);
                        w1[r] = vadd(vmul(s[r], q1), b[r]);
                    }
                    DD_UNROLL for (int t = 0; t < TR; t++) {
                        vf x0 = vld(x + t * ldx + k), x1 = vld(x + t * ldx + k + VL);
                        DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vfma(x1, w1[r], vfma(x0, w0[r], a[t][r]));
                    }
                }
            }
            for (; k < (g + 1) * G; k += VL) {
                vf wv[KERN_NR];
                if (pf) {
                    for (size_t o = 0; o < pstep; o += 64) __builtin_prefetch(pf + o, 0, PF_HINT);
                    pf += pstep;
                }
                DD_UNROLL for (int r = 0; r < NR; r++) {
                    vf q = bits == 8 ? wq8(wr[r] + k) : wq4(wr[r] + k / 2);
                    wv[r] = vadd(vmul(s[r], q), b[r]);
                }
                DD_UNROLL for (int t = 0; t < TR; t++) {
                    vf xv = vld(x + t * ldx + k);
                    DD_UNROLL for (int r = 0; r < NR; r++) a[t][r] = vfma(xv, wv[r], a[t][r]);
                }
            }
        }
    }
    DD_UNROLL for (int t = 0; t < TR; t++) DD_UNROLL for (int r = 0; r < NR; r++)
        acc[t * DD_CPU_ACC_LD + r] = vhsum(a[t][r]);
}

/* Fallback for quantized groups that are not a multiple of VL (no model the loader accepts has one; the
 * contract still allows it): one scalar float accumulator per pair, dequantizing element by element. */
static void dot_scalar(float *acc, const float *x, size_t ldx, int tr, const dd_weight *w, int64_t n0, int nr) {
    const int64_t K = w->cols;
    float row[512];
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < tr; t++) acc[t * DD_CPU_ACC_LD + r] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 512) {
        int64_t kn = K - k0 < 512 ? K - k0 : 512;
        for (int r = 0; r < nr; r++) {
            /* dequantize a 512-wide slice of row n0 + r (a few KB of stack, not a copy of the matrix) */
            const uint8_t *p = w->data + (size_t)(n0 + r) * w->row_bytes;
            const uint8_t *sc = w->scales + (size_t)(n0 + r) * w->sb_row_bytes;
            const uint8_t *bi = w->biases + (size_t)(n0 + r) * w->sb_row_bytes;
            int bits = w->type == DD_Q8 ? 8 : 4, per = 32 / bits;
            for (int64_t i = 0; i < kn; i++) {
                int64_t k = k0 + i;
                uint32_t q = (dd_ld32(p + 4 * (k / per)) >> (bits * (k % per))) & ((1u << bits) - 1);
                float sq = ldsb(w->sb_type, sc, k / w->group) * (float)q;
                row[i] = sq + ldsb(w->sb_type, bi, k / w->group);
            }
            for (int t = 0; t < tr; t++) {
                float s = acc[t * DD_CPU_ACC_LD + r];
                for (int64_t i = 0; i < kn; i++) {
                    float pr = x[t * ldx + k0 + i] * row[i];
                    s += pr;
                }
                acc[t * DD_CPU_ACC_LD + r] = s;
            }
        }
    }
}

#define DOT_TYPES(NRc, TRc, ACC, N0)                                                                              \
    switch (w->type) {                                                                                            \
    case DD_F32: dot_dense(ACC, x, ldx, w, N0, NRc, TRc, DD_F32, pf); break;                                      \
    case DD_F16: dot_dense(ACC, x, ldx, w, N0, NRc, TRc, DD_F16, pf); break;                                      \
    case DD_BF16: dot_dense(ACC, x, ldx, w, N0, NRc, TRc, DD_BF16, pf); break;                                    \
    case DD_Q8: dot_quant(ACC, x, ldx, w, N0, NRc, TRc, 8, pf); break;                                            \
    case DD_Q4: dot_quant(ACC, x, ldx, w, N0, NRc, TRc, 4, pf); break;                                            \
    }

#if KERN_TR >= 8
#define DOT_TR8(NRc, ACC, N0) case 8: DOT_TYPES(NRc, 8, ACC, N0) break;
#else
#define DOT_TR8(NRc, ACC, N0)
#endif
#if KERN_TR >= 7
#define DOT_TR7(NRc, ACC, N0) case 7: DOT_TYPES(NRc, 7, ACC, N0) break;
#else
#define DOT_TR7(NRc, ACC, N0)
#endif
#if KERN_TR >= 6
#define DOT_TR6(NRc, ACC, N0) case 6: DOT_TYPES(NRc, 6, ACC, N0) break;
#else
#define DOT_TR6(NRc, ACC, N0)
#endif
#if KERN_TR >= 5
#define DOT_TR5(NRc, ACC, N0) case 5: DOT_TYPES(NRc, 5, ACC, N0) break;
#else
#define DOT_TR5(NRc, ACC, N0)
#endif
#if KERN_TR >= 4
#define DOT_TR4(NRc, ACC, N0) case 4: DOT_TYPES(NRc, 4, ACC, N0) break;
#else
#define DOT_TR4(NRc, ACC, N0)
#endif
#if KERN_TR >= 3
#define DOT_TR3(NRc, ACC, N0) case 3: DOT_TYPES(NRc, 3, ACC, N0) break;
#else
#define DOT_TR3(NRc, ACC, N0)
#endif
#if KERN_TR >= 2
#define DOT_TR2(NRc, ACC, N0) case 2: DOT_TYPES(NRc, 2, ACC, N0) break;
#else
#define DOT_TR2(NRc, ACC, N0)
#endif

#define DOT_TRS(NRc, ACC, N0)                                                                                     \
    switch (tr) {                                                                                                 \
    case 1: DOT_TYPES(NRc, 1, ACC, N0) break;                                                                     \
        DOT_TR2(NRc, ACC, N0)                                                                                     \
        DOT_TR3(NRc, ACC, N0)                                                                                     \
        DOT_TR4(NRc, ACC, N0)                                                                                     \
        DOT_TR5(NRc, ACC, N0)                                                                                     \
        DOT_TR6(NRc, ACC, N0)                                                                                     \
        DOT_TR7(NRc, ACC, N0)                                                                                     \
        DOT_TR8(NRc, ACC, N0)                                                                                     \
    }

/* dd_cpu_kern.dot: a full tile of KERN_NR rows, or a narrower one row at a time (the same per-pair sums). With
 * prefetch, a full tile streams the next KERN_NR * pf_tiles rows' bytes (the rows after this tile, pf_tiles
 * tiles ahead) into the cache at the rate it consumes its own: at batch 1 the rows of a tile are short streams
 * (2 KB for a bf16 row of 1024) that the hardware prefetcher picks up too late on its own. */
static void k_dot(float *acc, const float *x, size_t ldx, int tr, const dd_weight *w, int64_t n0, int nr,
                  int pf_tiles) {
    if ((w->type == DD_Q8 || w->type == DD_Q4) && w->group % VL != 0) {
        dot_scalar(acc, x, ldx, tr, w, n0, nr);
        return;
    }
    if (nr == KERN_NR) {
        const uint8_t *pf = pf_tiles ? w->data + (size_t)(n0 + (int64_t)KERN_NR * pf_tiles) * w->row_bytes : NULL;
        DOT_TRS(KERN_NR, acc, n0)
        return;
    }
    const uint8_t *pf = NULL;
    for (int r = 0; r < nr; r++) {
        DOT_TRS(1, acc + r, n0 + r)
    }
}

/* ---- norm ------------------------------------------------------------------------------------------------- */

/* Two-pass statistics: mean (LayerNorm only), then the mean square deviation — each as VL partial sums, a
 * fixed-order lane sum and a scalar tail. rstd is formed in double from the float variance. */
static void k_norm_row(float *out, const float *x, int K, int norm, const float *w, const float *b, float eps) {
    float mean = 0.0f;
    int k;
    if (norm == DD_NORM_LAYER) {
        vf s = vz();
        for (k = 0; k + VL <= K; k += VL) s = vadd(s, vld(x + k));
        float m = vhsum(s);
        for (; k < K; k++) m += x[k];
        mean = m / (float)K;
    }
    vf mv = vset(mean), v = vz();
    for (k = 0; k + VL <= K; k += VL) {
        vf d = vsub(vld(x + k), mv);
        v = vfma(d, d, v);
    }
    float var = vhsum(v);
    for (; k < K; k++) {
        float d = x[k] - mean, d2 = d * d;
        var += d2;
    }
    var /= (float)K;
    const float rstd = (float)(1.0 / sqrt((double)var + (double)eps));
    const vf rv = vset(rstd);
    for (k = 0; k < K; k += VL) {
        int n = K - k < VL ? K - k : VL;
        vf xv = n == VL ? vld(x + k) : vldn(x + k, n);
        vf wv = n == VL ? vld(w + k) : vldn(w + k, n);
        vf o = vmul(vmul(vsub(xv, mv), rv), wv);
        if (b) o = vadd(o, n == VL ? vld(b + k) : vldn(b + k, n));
        if (n == VL) vst(out + k, o);
        else vstn(out + k, o, n);
    }
}

/* ---- attention -------------------------------------------------------------------------------------------- */

/* One query row over n <= DD_MAX_LEVELS keys: scores q . k_j * scale (VL partial sums, scalar tail), a
 * max-shifted softmax with expf, p_j = e_j / sum, then out = sum_j p_j v_j as VL-wide FMAs over HD. */
static void k_attend_row(float *out, const float *q, const float *kc, const float *vc, size_t ld, int n, int HD,
                         float scale) {
    float sc[DD_MAX_LEVELS];
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        const float *kj = kc + (size_t)j * ld;
        vf a = vz();
        int i = 0;
        for (; i + VL <= HD; i += VL) a = vfma(vld(q + i), vld(kj + i), a);
        float d = vhsum(a);
        for (; i < HD; i++) {
            float p = q[i] * kj[i];
            d += p;
        }
        sc[j] = d * scale;
        if (sc[j] > mx) mx = sc[j];
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += (sc[j] = expf(sc[j] - mx));
    for (int j = 0; j < n; j++) sc[j] = sc[j] / sum;
    int i = 0;
    for (; i + VL <= HD; i += VL) {
        vf o = vz();
        for (int j = 0; j < n; j++) o = vfma(vset(sc[j]), vld(vc + (size_t)j * ld + i), o);
        vst(out + i, o);
    }
    for (; i < HD; i++) {
        float o = 0.0f;
        for (int j = 0; j < n; j++) {
            float p = sc[j] * vc[(size_t)j * ld + i];
            o += p;
        }
        out[i] = o;
    }
}

/* ---- activations ------------------------------------------------------------------------------------------ */

/* exp(x) for x in [-87, 88] (clamped outside): x = n ln2 + r with n = round(x log2 e), ln2 split in two (Cody-Waite),
 * exp(r) = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P on |r| <= ln2/2 (about 1 ulp), times 2^n. */
DD_AI vf vexp(vf x) {
    x = vmin(vmax(x, vset(-87.0f)), vset(88.0f));
    vf n = vround(vmul(x, vset(1.44269504088896341f)));
    vf r = vsub(vsub(x, vmul(n, vset(0.693359375f))), vmul(n, vset(-2.12194440e-4f)));
    vf p = vset(1.9875691500e-4f);
    p = vfma(p, r, vset(1.3981999507e-3f));
    p = vfma(p, r, vset(8.3334519073e-3f));
    p = vfma(p, r, vset(4.1665795894e-2f));
    p = vfma(p, r, vset(1.6666665459e-1f));
    p = vfma(p, r, vset(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset(1.0f)));
    return vmul(p, vpow2i(n));
}

/* erfc(z) for z >= 0: the Chebyshev-fitted form erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2) (Numerical
 * Recipes' erfcc: fractional error < 1.2e-7 for every z >= 0, so erfc of a large argument keeps its relative
 * accuracy, which 1 - erf would not). */
DD_AI vf verfc(vf z) {
    vf t = vdiv(vset(1.0f), vfma(vset(0.5f), z, vset(1.0f)));
    vf p = vset(0.17087277f);
    p = vfma(p, t, vset(-0.82215223f));
    p = vfma(p, t, vset(1.48851587f));
    p = vfma(p, t, vset(-1.13520398f));
    p = vfma(p, t, vset(0.27886807f));
    p = vfma(p, t, vset(-0.18628806f));
    p = vfma(p, t, vset(0.09678418f));
    p = vfma(p, t, vset(0.37409196f));
    p = vfma(p, t, vset(1.00002368f));
    p = vfma(p, t, vset(-1.26551223f));
    return vmul(t, vexp(vsub(p, vmul(z, z))));
}

/* Exact (erf-form) GELU: 0.5 a (1 + erf(a / sqrt 2)) written through erfc so that the negative tail keeps its
 * accuracy: 1 + erf(x) = erfc(|x|) for a < 0 and 2 - erfc(|x|) for a >= 0. Measured error <= 2.2e-7 |a| for
 * every a, and <= 4e-7 relative for a > -4 (the relative error grows to ~1e-5 only deep in the negative tail,
 * where |gelu| < 1e-5 |a|, from rounding z^2 inside exp) — inside the float32 accumulation error of the product
 * that feeds it, and checked by test_kernels against erfc in double. (This is the reason for the vector form:
 * glibc's erff per element cost ~3% of a batch-1 frame.) */
DD_AI vf vgelu(vf a) {
    vf e = verfc(vmul(vabs(a), vset(0.70710678118654752440f)));
    return vmul(vmul(vset(0.5f), a), vselneg(a, e, vsub(vset(2.0f), e)));
}

static void k_gelu(float *v, int n) {
    int i = 0;
    for (; i + VL <= n; i += VL) vst(v + i, vgelu(vld(v + i)));
    if (i < n) vstn(v + i, vgelu(vldn(v + i, n - i)), n - i);
}

/* SwiGLU g = silu(g) * u, silu(g) = g / (1 + exp(-g)) with the vector exp: <= 2e-7 relative for g > -87; below,
 * exp(-g) saturates at e^88 and silu comes out as g / 1.7e38 instead of ~0 (an absolute error < 1e-35 |g|). */
static void k_swiglu(float *g, const float *u, int n) {
    for (int i = 0; i < n; i += VL) {
        int m = n - i < VL ? n - i : VL;
        vf a = m == VL ? vld(g + i) : vldn(g + i, m), b = m == VL ? vld(u + i) : vldn(u + i, m);
        vf s = vdiv(a, vadd(vset(1.0f), vexp(vsub(vz(), a))));
        vf o = vmul(s, b);
        if (m == VL) vst(g + i, o);
        else vstn(g + i, o, m);
    }
}

const dd_cpu_kern KERN_TABLE = {
    .name = KERN_NAME,
    .nr = KERN_NR,
    .tr = KERN_TR,
    .dot = k_dot,
    .norm_row = k_norm_row,
    .attend_row = k_attend_row,
    .gelu = k_gelu,
    .swiglu = k_swiglu,
};
