/* Host-only check that the latency executor's plans, now built from the op list translated from the frame plan
 * (src/cuda/lat.cu, lt_translate), are the plans its old builder made (old_build.inc: lat.cu's host code at 0bf2d7c,
 * verbatim), byte for byte: every lt_op, lt_step, lt_piece and lt_sm the kernel reads (so the units' placement, the
 * K splits, the pieces and their L2 residency too), and whether the plan fits at all, for a set of models, every
 * plan kind, n = 1 .. LT_MAX_N streams and both roles (attention and samplers on SMs of their own or not), on the
 * device shapes of fake.inc (132 SMs and a 50 MiB L2 as on the H200; 66 SMs and 25 MiB; 120 SMs). No GPU: the
 * decoder state and the executor are fake and the plan's device allocation and upload go to host memory (fake.inc,
 * shared with flow.cu), so only the plans are compared, nothing is run.
 *
 *   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib && dev/cuda/ltplan_check/build.sh
 *   build-cuda/ltplan_check [--mutate op|step|piece] [-v]
 *       from the repository root (it loads tests/fixtures/...); prints one line per (model, device shape) and a
 *       total; exit 0 when every plan is identical. --mutate changes one field of every translated plan after it
 *       is built (an op's out_off, a step's u1, a piece's c1) to show that the comparison sees it (exit 1 then).
 *
 * Padding: both builders zero each lt_op and lt_piece before filling it and the blob before copying into it; the
 * one struct either copies in from a stack temporary with unspecified padding (the cu_raw of the hidden-state
 * gather) is re-copied field by field into zeroed memory before the comparison. */
#include "fake.inc"

/* the old host code in a namespace of its own; its two functions outside the anonymous namespace renamed (the
 * new ones of the same signature would be found too, by argument-dependent lookup) */
#define lt_slices old_lt_slices
#define mat_bytes old_mat_bytes
namespace old_lt {
#include "old_build.inc"
}
#undef lt_slices
#undef mat_bytes

/* One built plan: its blob (host copy) and where the parts start. */
struct shot {
    int ok, nops;
    uint8_t *mem;
    size_t bytes, o_steps, o_pieces, o_sms;
};

static shot take(lt_exec *x, int v, int n) {
    lt_plan *pl = &x->plan[v][n];
    shot s;
    memset(&s, 0, sizeof s);
    s.ok = pl->ok;
    if (pl->ok == 2) {
        s.mem = (uint8_t *)pl->mem;
        s.bytes = g_bytes;
        s.nops = pl->nops;
        s.o_steps = (const uint8_t *)pl->steps - s.mem;
        s.o_pieces = (const uint8_t *)pl->pieces - s.mem;
        s.o_sms = (const uint8_t *)pl->sms - s.mem;
        lt_op *ops = (lt_op *)s.mem;
        for (int i = 0; i < s.nops; i++) { /* the file comment: padding of the copied-in cu_raw */
            if (ops[i].kind != LT_SMP) continue;
            const cu_raw t = ops[i].table;
            cu_raw z;
            memset(&z, 0, sizeof z);
            z.type = t.type, z.rows = t.rows, z.cols = t.cols, z.data = t.data, z.pitch = t.pitch, z.scales = t.scales;
            z.biases = t.biases, z.sbtype = t.sbtype, z.group = t.group, z.sb_pitch = t.sb_pitch;
            memcpy(&ops[i].table, &z, sizeof z);
        }
    }
    memset(pl, 0, sizeof *pl);
    return s;
}

static const char *g_mutate; /* --mutate: op | step | piece */
static int g_verbose;

static void mutate(shot &s, int G) {
    if (!g_mutate || s.ok != 2) return;
    if (!strcmp(g_mutate, "op")) ((lt_op *)s.mem)[s.nops - 1].out_off += 1;
    else if (!strcmp(g_mutate, "step")) ((lt_step *)(s.mem + s.o_steps))[0].u1 += 1;
    else if (!strcmp(g_mutate, "piece") && s.o_sms > s.o_pieces && ((lt_sm *)(s.mem + s.o_sms))[G - 1].q1 > 0)
        ((lt_piece *)(s.mem + s.o_pieces))[0].c1 += 1;
}

struct tally {
    long plans, built, unfit, refused, ops, steps, pieces, bad;
};

/* where the first difference of two blobs lies */
static void where(const shot &a, const shot &b, int G) {
    size_t k = 0;
    while (k < a.bytes && a.mem[k] == b.mem[k]) k++;
    if (k < a.o_steps) {
        const size_t i = k / sizeof(lt_op), f = k % sizeof(lt_op);
        printf("      first difference: op %zu (kind %d / %d), byte %zu of lt_op\n", i, ((lt_op *)a.mem)[i].kind,
               ((lt_op *)b.mem)[i].kind, f);
    } else if (k < a.o_pieces) {
        printf("      first difference: step %zu, byte %zu\n", (k - a.o_steps) / sizeof(lt_step),
               (k - a.o_steps) % sizeof(lt_step));
    } else if (k < a.o_sms) {
        printf("      first difference: piece %zu, byte %zu\n", (k - a.o_pieces) / sizeof(lt_piece),
               (k - a.o_pieces) % sizeof(lt_piece));
    } else {
        printf("      first difference: sm %zu of %d, byte %zu\n", (k - a.o_sms) / sizeof(lt_sm), G,
               (k - a.o_sms) % sizeof(lt_sm));
    }
}

/* Both builders' plans of every kind, n and role for m on a device of G SMs; returns the differences. refused: the
 * new builder refuses (ok 1: the frame kernel runs them) the plans the old one built, for that reason (lat.cu,
 * lt_same_vectors): counted apart, not as differences. */
static long check_model(const char *name, const dd_model *m, int G, double l2, const char *refused, tally *T) {
    const dd_config *c = &m->cfg;
    cu_state st;
    fake_state(&st, m, 64);
    lt_exec *x = fake_exec(&st, m, G, l2);
    long bad = 0, built = 0, unfit = 0, ops = 0, nref = 0;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        dd_error err;
        memset(&err, 0, sizeof err);
        dd_plan fp;
        if (dd_plan_build(&fp, m, (dd_plan_kind)v, &err)) {
            printf("  %s: plan %d: %s\n", name, v, err.msg);
            bad++;
            continue;
        }
        for (int n = 1; n <= LT_MAX_N; n++)
            for (int role = 0; role < 2; role++) {
                dd_status s1 = old_lt::build_plan_role(x, v, n, role, &err);
                shot a = take(x, v, n);
                dd_status s2 = build_plan_role(x, &fp, v, n, role, &err);
                shot b = take(x, v, n);
                mutate(b, G);
                T->plans++;
                int same = !s1 && !s2 && a.ok == b.ok;
                if (same && a.ok == 2)
                    same = a.bytes == b.bytes && a.nops == b.nops && a.o_steps == b.o_steps &&
                           a.o_pieces == b.o_pieces && a.o_sms == b.o_sms && !memcmp(a.mem, b.mem, a.bytes);
                if (a.ok == 2 && same) {
                    built++;
                    ops += a.nops;
                    const lt_sm *sm = (const lt_sm *)(a.mem + a.o_sms);
                    T->steps += sm[G - 1].t1;
                    T->pieces += sm[G - 1].q1;
                } else if (same) {
                    unfit++;
                } else if (refused && !s1 && !s2 && a.ok == 2 && b.ok == 1) {
                    same = 1, nref++;
                }
                if (!same) {
                    bad++;
                    if (bad <= 4) {
                        printf("  %s G %d %-9s n %d role %d: DIFFERENT: old ok %d, %d ops, %zu bytes; new ok %d, %d "
                               "ops, %zu bytes\n",
                               name, G, dd_plan_kind_name((dd_plan_kind)v), n, role, a.ok, a.nops, a.bytes, b.ok,
                               b.nops, b.bytes);
                        if (a.ok == 2 && b.ok == 2 && a.bytes == b.bytes && a.o_steps == b.o_steps &&
                            a.o_pieces == b.o_pieces && a.o_sms == b.o_sms)
                            where(a, b, G);
                    }
                } else if (g_verbose) {
                    printf("  %s G %d %-9s n %d role %d: ok %d, %d ops identical\n", name, G,
                           dd_plan_kind_name((dd_plan_kind)v), n, role, a.ok, a.nops);
                }
                free(a.mem);
                free(b.mem);
            }
        dd_plan_free(&fp);
    }
    printf("%-36s G %3d: %3ld plans identical (%3ld built, %2ld do not fit either way), %6ld ops%s", name, G,
           built + unfit, built, unfit, ops, bad ? ", DIFFERENCES" : "");
    if (nref) printf("; %ld refused by the new builder (%s)", nref, refused);
    printf("\n");
    T->refused += nref;
    T->built += built;
    T->unfit += unfit;
    T->ops += ops;
    T->bad += bad;
    free(x->qkv);
    free(x);
    free_state(&st);
    return bad;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutate") && i + 1 < argc) g_mutate = argv[++i];
        else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--mutate op|step|piece] [-v]\n", argv[0]);
            return 2;
        }
    }
    tally T;
    memset(&T, 0, sizeof T);
    int nmodels = 0, failed = 0;
    for (size_t i = 0; i < sizeof lt_cases / sizeof *lt_cases; i++) {
        dd_model *m = lt_load(&lt_cases[i]);
        if (!m) {
            failed = 1;
            continue;
        }
        for (size_t d = 0; d < sizeof lt_devs / sizeof *lt_devs; d++)
            check_model(lt_cases[i].name, m, lt_devs[d].G, lt_devs[d].l2, lt_cases[i].refused, &T);
        nmodels++;
        dd_model_free(m);
    }
    lt_free_pos();
    printf("ltplan_check: %d models x %d device shapes, %ld plans (kind x n 1..%d x role): %ld built (%ld ops, %ld "
           "steps, %ld pieces compared), %ld fit neither way, %ld refused by the new builder as expected; %s\n",
           nmodels, (int)(sizeof lt_devs / sizeof *lt_devs), T.plans, LT_MAX_N, T.built, T.ops, T.steps, T.pieces, T.unfit, T.refused,
           failed || T.bad ? "DIFFERENCES (above)" : "every plan identical to the old builder's");
    if (g_mutate) printf("(--mutate %s: %ld plans reported different)\n", g_mutate, T.bad);
    return failed || T.bad ? 1 : 0;
}
