/* Host-only: which plans of the latency executor write a ring byte twice in one launch (lat.cu lt_producer's
 * allocation replayed; it is deterministic: the producer advances `done` only when it must wait). Only such plans
 * exercise the release path (compute warps' empty arrivals -> the producer's next bulk copy into the same bytes)
 * under compute-sanitizer racecheck. tiny-gpt f32 (any n): fc2's 16 KB pieces, 7 passes = 112 KB > the 93 KB ring,
 * 16 piece pairs on 8 SMs per launch; tiny-gpt bf16 and tiny-llama q4: none.
 *   make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda lib && nvcc -O1 -arch=sm_90 -Iinclude -Isrc -fmad=false
 *     --std=c++17 -o build-cuda/ltplan_ring dev/cuda/ltplan_check/ring.cu build-cuda/libdepthdec.a -ljansson -lm
 *     -lpthread && build-cuda/ltplan_ring tiny-gpt 0 3      (kind, dd_dtype number, n) */
#include "fake.inc"
#include <vector>
int main(int argc, char **argv) {
    const char *kind = argv[1];
    dd_dtype wt = (dd_dtype)atoi(argv[2]);
    int n = atoi(argv[3]);
    dd_model *m; dd_error err; memset(&err, 0, sizeof err);
    if (dd_model_synthetic(&m, kind, wt, 7, &err)) { printf("%s\n", err.msg); return 1; }
    const dd_config *c = &m->cfg;
    cu_state st; fake_state(&st, m, 64);
    lt_exec *x = fake_exec(&st, m, 132, 50.0 * 1024 * 1024);
    const int l0 = c->per_position ? 0 : 1, Q = c->levels;
    for (int v = 0; v < NPROG; v++) {
        if ((v == PROG_DECODE || v == PROG_SCORE_L0) && !c->has_head0) continue;
        if (build_plan(x, v, n, &err)) { printf("err %s\n", err.msg); continue; }
        lt_plan *pl = &x->plan[v][n];
        if (pl->ok != 2) { printf("plan %s not built\n", dd_plan_kind_name((dd_plan_kind)v)); continue; }
        long reuse_pieces = 0, reuse_bytes = 0, lane_reads = 0, sms_reuse = 0, slotwrap = 0;
        for (int i = 0; i < 132; i++) {
            const lt_sm &me = pl->sms[i];
            const int npre = me.p1 - me.p0, npass = me.q1 - me.q0;
            const int total = npre + (npass > 0 ? npass * (Q - l0) : 0);
            std::vector<int> offs(total), byt(total), pidx(total);
            int done = 0, head = 0; int foff[LT_NSLOT];
            int smr = 0;
            for (int vv = 0; vv < total; vv++) {
                int p = vv < npre ? me.p0 + vv : me.q0 + (vv - npre) % npass;
                int bytes = pl->pieces[p].bytes;
                if (vv >= LT_NSLOT) { while (done <= vv - LT_NSLOT) done++; slotwrap++; }
                int off;
                for (;;) {
                    if (done == vv) { off = 0; break; }
                    const int tail = foff[done % LT_NSLOT];
                    if (head > tail) {
                        if (head + bytes <= LT_RING_BYTES) { off = head; break; }
                        if (bytes <= tail) { off = 0; break; }
                    } else if (head < tail && head + bytes <= tail) { off = head; break; }
                    done++;
                }
                head = off + bytes;
                foff[vv % LT_NSLOT] = off;
                offs[vv] = off, byt[vv] = bytes, pidx[vv] = p;
                /* earlier pieces whose bytes this one overwrites */
                for (int u = 0; u < vv; u++) {
                    int lo = std::max(offs[u], off), hi = std::min(offs[u] + byt[u], off + bytes);
                    if (lo < hi) {
                        reuse_pieces++, reuse_bytes += hi - lo, smr = 1;
                        /* lane reads of piece u's fragments inside [lo, hi): each lane reads 2x16 B per 1024 B tile (f32) */
                        const lt_piece &q = pl->pieces[pidx[u]];
                        const lt_op &op = pl->ops[pl->steps[q.step].op];
                        lane_reads += (long)(hi - lo) / op.w.tile_bytes * 32;
                    }
                }
            }
            sms_reuse += smr;
        }
        printf("plan %-9s: SMs with ring reuse %ld, reused piece pairs %ld, bytes %ld, lane-reads/instr %ld, slot wraps %ld\n",
               dd_plan_kind_name((dd_plan_kind)v), sms_reuse, reuse_pieces, reuse_bytes, lane_reads, slotwrap);
    }
    return 0;
}
