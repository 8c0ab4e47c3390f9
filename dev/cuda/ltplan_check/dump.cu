/* The latency executor's plan for one synthetic model, batch and device shape, as the kernel would get it (host
 * only, on fake.inc's fake executor): per op of a pass, the SMs that run it, the most units (linear), items
 * (attention) or streams (sampling) one SM takes, how many of its steps are K-split halves, and the most weight bytes
 * one SM streams for it. Both roles are built (1: attention and samplers on reserved SMs when they fit; the executor
 * takes role 1 when it fits, else role 0).
 *
 *   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib && dev/cuda/ltplan_check/build.sh
 *   build-cuda/ltplan_dump [gpt|csm|tiny-gpt|...] [n] [bf16|q8|q4|f32] [SMs]      (defaults: gpt 1 bf16 132) */
#include "fake.inc"

#include <algorithm>

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "gpt", *wn = argc > 3 ? argv[3] : "bf16";
    const int n = argc > 2 ? atoi(argv[2]) : 1, G = argc > 4 ? atoi(argv[4]) : 132;
    const dd_dtype wt = !strcmp(wn, "q8") ? DD_Q8 : !strcmp(wn, "q4") ? DD_Q4 : !strcmp(wn, "f32") ? DD_F32 : DD_BF16;
    if (n < 1 || n > LT_MAX_N || G < 8) {
        fprintf(stderr, "ltplan_dump: n 1..%d, SMs >= 8\n", LT_MAX_N);
        return 2;
    }
    dd_error err;
    memset(&err, 0, sizeof err);
    dd_model *m = NULL;
    if (dd_model_synthetic(&m, kind, wt, 7, &err)) {
        fprintf(stderr, "ltplan_dump: %s\n", err.msg);
        return 2;
    }
    cu_state st;
    fake_state(&st, m, 64);
    lt_exec *x = fake_exec(&st, m, G, G * 50.0 * 1024 * 1024 / 132);
    dd_plan fp;
    if (dd_plan_build(&fp, m, DD_PLAN_DECODE_C0, &err)) {
        fprintf(stderr, "ltplan_dump: %s\n", err.msg);
        return 2;
    }
    static const char *kn[] = {"?", "linear", "attend", "sample"};
    for (int role = 1; role >= 0; role--) {
        lt_plan *pl = &x->plan[0][n];
        memset(pl, 0, sizeof *pl);
        if (build_plan_role(x, &fp, 0, n, role, &err)) {
            fprintf(stderr, "ltplan_dump: %s\n", err.msg);
            return 2;
        }
        printf("# %s %s n %d, %d SMs, role %d: %s\n", kind, wn, n, G, role, pl->ok == 2 ? "built" : "does not fit");
        if (pl->ok != 2) continue;
        printf("| op | kind | m-tiles | k-tiles | SMs | most a SM | K halves | most bytes a SM |\n");
        printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
        for (int oi = 0; oi < pl->nops; oi++) {
            const lt_op &o = pl->ops[oi];
            int nsm = 0, most = 0, nfwd = 0;
            long long bytes = 0;
            for (int g = 0; g < G; g++)
                for (int k = pl->sms[g].t0; k < pl->sms[g].t1; k++) {
                    const lt_step &t = pl->steps[k];
                    if (t.op != oi) continue;
                    long long b = 0;
                    for (int p = t.pc0; p < t.pc1; p++) b += pl->pieces[p].bytes;
                    nsm++, most = std::max(most, t.u1 - t.u0), nfwd += t.fwd != 0, bytes = std::max(bytes, b);
                }
            if (!nsm) continue; /* a prelude op */
            const bool lin = o.kind == LT_LIN;
            printf("| %d | %s | %d | %d | %d | %d | %d | %lld |\n", oi, kn[o.kind & 3], lin ? o.w.MT : 0,
                   lin ? o.w.KT : 0, nsm, most, nfwd, bytes);
        }
        free(pl->mem);
    }
    dd_plan_free(&fp);
    return 0;
}
