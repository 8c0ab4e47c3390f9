/* Per-op timeline of the latency executor (lab tool, not part of the library).
 *
 * Builds src/cuda/lat.cu with LT_TIMELINE (every SM records each step's end time) into this program, links the
 * rest of the library, decodes a few warm frames of a synthetic model and then one recorded frame, and prints, per
 * op kind, how many op instances there are and how much of the frame's critical path they take: an op instance
 * (pass, op) ends when its last SM finishes it; its share is that end minus the previous instance's end (the
 * frame's ops form one dependent chain). Also the spread between the first and the last SM to finish each op.
 *
 *   nvcc -O3 -arch=sm_90 -fmad=false --std=c++17 -Iinclude -Isrc -DDD_WITH_CUDA=1 -DDD_WITH_CPU=1 \
 *        dev/cuda/lat_timeline.cu build-cuda/libdepthdec.a -ljansson -lm -o build-cuda/lat_timeline
 *   build-cuda/lat_timeline gpt bf16 1 [decode|score]
 */
#define LT_TIMELINE 1
#include "../../src/cuda/lat.cu"

#include <stdio.h>
#include <algorithm>
#include <map>
#include <time.h>
#include <string>
#include <vector>

extern "C" int dd_cuda_test_crossover(dd_decoder *d, int nmax);

static double th_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "gpt", *wt = argc > 2 ? argv[2] : "bf16";
    const int n = argc > 3 ? atoi(argv[3]) : 1, score = argc > 4 && !strcmp(argv[4], "score");
    dd_dtype t = DD_BF16;
    if (!strcmp(wt, "f32")) t = DD_F32;
    else if (!strcmp(wt, "f16")) t = DD_F16;
    else if (!strcmp(wt, "q8")) t = DD_Q8;
    else if (!strcmp(wt, "q4")) t = DD_Q4;
    dd_model *m;
    dd_error e;
    if (dd_model_synthetic(&m, kind, t, 1, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    const dd_config *c = dd_model_config(m);
    dd_decoder_params p = dd_decoder_default_params();
    p.backend = DD_BACKEND_CUDA;
    p.max_batch = n;
    dd_decoder *d;
    if (dd_decoder_create(&d, m, &p, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    dd_cuda_test_crossover(d, n); /* this executor, whatever the default */
    const int Q = c->levels, V = c->codebook_size, I = c->input_dim;
    std::vector<float> h((size_t)n * I), lg((size_t)n * (Q - 1) * V);
    std::vector<int32_t> codes((size_t)n * Q), c0(n);
    std::vector<uint64_t> seeds(n), frames(n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)((i * 2654435761u % 1000) / 1000.0 - 0.5);
    for (int i = 0; i < n; i++) seeds[i] = 7 + i, frames[i] = i, c0[i] = (i * 37) % V;
    for (int i = 0; i < n * Q; i++) codes[i] = (i * 101) % V;
    dd_sampling s = dd_sampling_default();
    auto frame = [&]() {
        dd_status r = score ? dd_score(d, n, h.data(), codes.data(), lg.data(), NULL, &e)
                            : dd_decode(d, n, h.data(), c0.data(), seeds.data(), frames.data(), &s, codes.data(), &e);
        if (r) fprintf(stderr, "frame: %s\n", e.msg), exit(1);
    };
    for (int i = 0; i < 5; i++) frame();
    cu_state *st = (cu_state *)d->impl;
    const int G = st->lt ? st->lt->G : 0;
    if (!G) return fprintf(stderr, "no latency executor\n"), 1;
    u64 *buf;
    size_t words = (size_t)G * LT_TL_MAX * LT_TL_W;
    cudaMalloc(&buf, words * 8);
    cudaMemset(buf, 0, words * 8);
    cudaMemcpyToSymbol(lt_tl, &buf, sizeof buf);
    frame();
    std::vector<u64> tl(words);
    cudaMemcpy(tl.data(), buf, words * 8, cudaMemcpyDeviceToHost);
    u64 *z = NULL;
    cudaMemcpyToSymbol(lt_tl, &z, sizeof z);
    const lt_plan &pl = st->lt->plan[score ? PROG_SCORE : PROG_DECODE_C0][n];
    std::vector<lt_op> ops(pl.nops);
    cudaMemcpy(ops.data(), pl.ops, pl.nops * sizeof(lt_op), cudaMemcpyDeviceToHost);
    const int L = c->layers, first_pass = pl.nops - (5 * L + 2);
    auto label = [&](int op) -> const char * {
        static const char *names[] = {"qkv (norm1)", "attention", "out (+res)", "fc1 (norm2, act)", "fc2 (+res)"};
        if (op < first_pass) return "prelude";
        int j = op - first_pass;
        if (j < 5 * L) return names[j % 5];
        return j == 5 * L ? "head (final norm)" : "sample + gather";
    };
    /* instances (pass, op) in chain order: max and min end over SMs */
    std::map<u64, std::pair<u64, u64>> inst;
    std::map<u64, u64> inst_in; /* the critical (last-ending) SM's inputs-staged time */
    std::map<std::string, double> ph_in, ph_w, ph_rest;
    std::map<std::string, int> ph_n, phase_n;
    std::map<std::string, std::vector<double>> phase;
    u64 t0 = ~0ull, t1 = 0;
    for (int g = 0; g < G; g++) {
        const u64 *b = tl.data() + (size_t)g * LT_TL_MAX * LT_TL_W;
        if (b[0] && b[0] < t0) t0 = b[0];
        u64 prev_end = b[0];
        for (int k = 1; k < LT_TL_MAX - 1 && b[LT_TL_W * k]; k++) {
            const u64 *r = b + LT_TL_W * k;
            auto &x = inst[r[1]];
            if (!x.first || r[0] > x.first) x.first = r[0], inst_in[r[1]] = r[2];
            if (!x.second || r[0] < x.second) x.second = r[0];
            if (r[0] > t1) t1 = r[0];
            std::string lb = label((int)(r[1] & 0xFFFFFFFFu));
            if (r[2] >= prev_end && r[3] >= r[2] && r[0] >= r[3]) { /* this SM: inputs, weights, the rest */
                ph_in[lb] += (r[2] - prev_end) * 1e-3;
                ph_w[lb] += (r[3] - r[2]) * 1e-3;
                ph_rest[lb] += (r[0] - r[3]) * 1e-3;
                ph_n[lb]++;
            }
            { /* SM-clock phases of the step: each set mark minus the previous set one */
                const long long *ph = (const long long *)(r + 4);
                auto &acc = phase[lb];
                acc.resize(12);
                /* marks in time order (a mark's index names the phase that ends at it, not its position) */
                std::vector<std::pair<long long, int>> mk;
                for (int i = 1; i < 12; i++)
                    if (ph[i]) mk.push_back({ph[i], i});
                std::sort(mk.begin(), mk.end());
                long long last = ph[0];
                for (auto &m : mk) acc[m.second] += (double)(m.first - last), last = m.first;
                phase_n[lb]++;
            }
            prev_end = r[0];
        }
    }
    std::map<std::string, double> crit, spread, c_in, c_rest;
    std::map<std::string, int> count;
    std::vector<std::string> order;
    u64 prev = t0;
    for (auto &kv : inst) {
        std::string lb = label((int)(kv.first & 0xFFFFFFFFu));
        if (!count.count(lb)) order.push_back(lb);
        count[lb]++;
        crit[lb] += kv.second.first > prev ? (kv.second.first - prev) * 1e-3 : 0.0;
        spread[lb] += (kv.second.first - kv.second.second) * 1e-3;
        const u64 tin = std::max(inst_in[kv.first], prev); /* the critical SM: inputs staged after the previous op ended */
        if (kv.second.first > prev && tin <= kv.second.first) {
            c_in[lb] += (tin - prev) * 1e-3;
            c_rest[lb] += (kv.second.first - tin) * 1e-3;
        }
        if (kv.second.first > prev) prev = kv.second.first;
    }
    {
        const u64 *b0 = tl.data(), *bz = tl.data() + (size_t)(LT_TL_MAX - 1) * LT_TL_W;
        double mhz = bz[2] > b0[0] ? (double)(bz[3] - b0[2]) / (double)(bz[2] - b0[0]) * 1e3 : 0;
        printf("SM 0 clock over the frame: %.0f MHz\n", mhz);
    }
    printf("%s %s batch %d %s: one frame %.1f us (first SM start to last step end), %d SMs\n", kind, wt, n,
           score ? "score" : "decode", (t1 - t0) * 1e-3, G);
    printf("| op | count | critical path us | per op us | last-first SM end us | SM step: inputs us | weights us | "
           "compute+out us | critical SM: to inputs staged us | inputs staged to end us |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (auto &lb : order) {
        int pn = ph_n[lb] ? ph_n[lb] : 1;
        printf("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", lb.c_str(), count[lb], crit[lb],
               crit[lb] / count[lb], spread[lb] / count[lb], ph_in[lb] / pn, ph_w[lb] / pn, ph_rest[lb] / pn,
               c_in[lb] / count[lb], c_rest[lb] / count[lb]);
    }
    { /* where a step's time goes on its SM (SM clock; averages over the SMs that run the op) */
        const u64 *b0 = tl.data(), *bz = tl.data() + (size_t)(LT_TL_MAX - 1) * LT_TL_W;
        const double cyc_us = bz[2] > b0[0] ? (double)(bz[3] - b0[2]) / (double)(bz[2] - b0[0]) * 1e3 : 1.9e3;
        printf("\nSM-clock phases of a step, us (linear: 1 residual poll, 2 input poll (thread 0), 7 the other threads' polls (barrier), 3 norm statistics, 4 normalise + "
               "pack, 5 wait for the first piece, 6 its mma items, 8 the other pieces, 9 epilogue, 10/11 (LT_WARM builds) the statistics / normalise run once before the timed run; "
               "attention: 1 cache rows to shared memory (thread 0), 2 q/k/v poll, 3 rope, 4 append, 5 scores + softmax, 6 values + publish (last query of warp 0), 9 the other warps and the end; sample: 1 "
               "Gumbel noise, 2 logit poll, 6 sampler, 9 gather + publish)\n");
        printf("| op | steps | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | sum |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (auto &lb : order) {
            const int pn = phase_n[lb] ? phase_n[lb] : 1;
            double sum = 0;
            printf("| %s | %d |", lb.c_str(), phase_n[lb]);
            for (int i = 1; i < 12; i++) {
                const double us = phase[lb].size() > (size_t)i ? phase[lb][i] / pn / cyc_us : 0.0;
                sum += us;
                printf(" %.2f |", us);
            }
            printf(" %.2f |\n", sum);
        }
    }
    /* the same frames on both executors, same process: medians of 30 */
    for (int x = 0; x < 2; x++) {
        dd_cuda_test_crossover(d, x ? 0 : n);
        std::vector<double> ms;
        for (int i = 0; i < 33; i++) {
            double t0 = th_now_s();
            frame();
            if (i >= 3) ms.push_back((th_now_s() - t0) * 1e3);
        }
        std::sort(ms.begin(), ms.end());
        printf("%s: %.3f ms/frame (median of %zu, host-timed around dd_%s)\n", x ? "frame kernel (old)" : "latency executor",
               ms[ms.size() / 2], ms.size(), score ? "score" : "decode");
    }
    dd_decoder_free(d);
    dd_model_free(m);
    return 0;
}
