// Host emulation of the slab contract (cu_common.cuh) as each CUDA executor sums chunk partials, against the
// contract's definition, bit for bit: the frame kernel's small schedule (rounds of CR chunks) and big schedule
// (per chunk, closed sums in shared memory), the latency executor's fold (pieces collected in part, folded when
// part is full and at the end, lt_fold_slabs past one slab; the K split at lt_ksplit_h with the closed sum handed over) and the throughput
// executor's planes (tp_planes: S ranges, which range stores what, tp_epi's order); also dev/cuda/lat_keep.patch's
// second half (not landed: its slabs kept apart, joined after the poll). The index arithmetic is
// written again here from the kernels' code (dev check, 2026-12-07), so a change there needs a change here.
//   c++ -O2 -std=c++17 dev/cuda/slab/slab_check.cc -o /tmp/slab_check && /tmp/slab_check
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static const int SLC = 8;
static std::mt19937_64 rng(20261207);

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// the contract: s_i = ((0 + p_8i) + ...) in chunk order, acc = (s_0 + s_1) + ...
static float contract(const std::vector<float> &p) {
    const int NC = (int)p.size();
    float acc = 0.0f;
    for (int i = 0; i * SLC < NC; i++) {
        float s = 0.0f;
        for (int c = i * SLC; c < std::min(NC, i * SLC + SLC); c++) s = s + p[c];
        acc = i == 0 ? s : acc + s;
    }
    return acc;
}

// cu_linear_small: rounds of CR chunks; acc = the open slab's sum, tot (acc's upper half) the closed slabs'
static float frame_small(const std::vector<float> &p, int CR) {
    const int NC = (int)p.size();
    const bool slabs = NC > SLC;
    float acc = -1e30f, tot = -2e30f; /* poisoned: read before written shows */
    for (int c0 = 0; c0 < NC; c0 += CR) {
        const int nc = std::min(CR, NC - c0);
        const int gb = slabs ? std::max((c0 + SLC - 1) / SLC * SLC, SLC) - c0 : nc;
        float a = c0 == 0 ? 0.0f : acc;
        for (int ci = 0, e = std::min(gb, nc);; e = std::min(e + SLC, nc)) {
            for (; ci < e; ci++) a = a + p[c0 + ci];
            if (ci == nc) break;
            tot = c0 + ci > SLC ? tot + a : a;
            a = 0.0f;
        }
        if (slabs && c0 + nc == NC) a = tot + a;
        acc = a;
    }
    return acc;
}

// cu_gemm_big: per chunk; at a slab's last chunk the slab joins tot, the total back to acc at the end
static float frame_big(const std::vector<float> &p) {
    const int NC = (int)p.size();
    float acc = 0.0f, tot = -2e30f;
    for (int c = 0; c < NC; c++) {
        acc = acc + p[c];
        if (NC > SLC && (c % SLC == SLC - 1 || c == NC - 1)) {
            const float v = c < SLC ? acc : tot + acc;
            if (c == NC - 1) acc = v;
            else tot = v, acc = 0.0f;
        }
    }
    return acc;
}

static int lt_ksplit_h(int nck) {
    return nck <= SLC ? nck / 2 : std::max(SLC, (nck + SLC) / (2 * SLC) * SLC);
}

// lat.cu: a step over chunks [cb, ce) in pieces (random sizes), part holding at most `cap` chunks; fold(pc) after
// a piece when the next piece would not fit or at the end; past one slab the fold is lt_fold_slabs. fwd 2: tot0,
// the handed-over value in (the closed sum past one slab, else the running sum).
struct lt_state {
    float acc, tot;
};
static void lat_step(const std::vector<float> &p, int cb, int ce, int cap, int fwd, float handed, lt_state &out,
                     std::mt19937_64 &r) {
    const int NC = (int)p.size();
    const bool slabs = NC > SLC, tot0 = fwd == 2; // KT > CU_SLC * CU_CKT <=> NC > SLC
    std::vector<std::pair<int, int>> pcs;
    for (int c = cb; c < ce;) {
        int n = 1 + (int)(r() % (uint64_t)std::min(cap, ce - c));
        pcs.push_back({c, c + n});
        c += n;
    }
    float acc = -1e30f, tot = -2e30f;
    int segc = 0, first_seg = 1;
    const int cbeg = pcs[0].first;
    auto fold = [&](int pc, const std::vector<float> &part) {
        const int cseg = pcs[pc].second - segc;
        const bool last = pc + 1 == (int)pcs.size();
        if (first_seg && fwd == 2) {
            if (slabs) tot = handed;
            else acc = handed;
            first_seg = slabs;
        }
        if (!slabs) {
            float a = first_seg ? 0.0f : acc;
            for (int cc = 0; cc < segc; cc++) a = a + part[cc];
            acc = a;
        } else { // lt_fold_slabs
            const int gb = std::max((cseg + SLC - 1) / SLC * SLC, cbeg + SLC) - cseg;
            const bool tv0 = tot0 || (cseg > cbeg && (cseg - 1) / SLC * SLC > cbeg);
            float a = first_seg ? 0.0f : acc;
            bool tv = tv0;
            float t = tv ? tot : a;
            for (int cc = 0, e = std::min(gb, segc);; e = std::min(e + SLC, segc)) {
                for (; cc < e; cc++) a = a + part[cc];
                if (cc == segc) break;
                t = tv ? t + a : a;
                tv = true;
                a = 0.0f;
            }
            if (last && tv) a = t + a;
            if (!last && tv) tot = t;
            acc = a;
        }
        first_seg = 0;
        segc = 0;
    };
    std::vector<float> part(cap, -3e30f);
    for (int pc = 0; pc < (int)pcs.size(); pc++) {
        for (int c = pcs[pc].first; c < pcs[pc].second; c++) part[segc + c - pcs[pc].first] = p[c];
        segc += pcs[pc].second - pcs[pc].first;
        if (pc + 1 == (int)pcs.size() || segc + pcs[pc + 1].second - pcs[pc + 1].first > cap) fold(pc, part);
    }
    out = {acc, tot};
}
static float lat_unit(const std::vector<float> &p, int split, std::mt19937_64 &r) {
    const int NC = (int)p.size();
    const int cap = SLC / 2 + (int)(r() % (uint64_t)(4 * SLC)); // part's chunk rows
    lt_state s;
    if (!split || NC < 2) {
        lat_step(p, 0, NC, cap, 0, 0.0f, s, r);
        return s.acc;
    }
    const int h = lt_ksplit_h(NC);
    lat_step(p, 0, h, cap, 1, 0.0f, s, r); // publishes acc
    lt_state s2;
    lat_step(p, h, NC, cap, 2, s.acc, s2, r);
    return s2.acc;
}

// lat_keep.patch (dev, not landed): the second half (fwd 2) keeps each of its slabs' sums apart and polls the
// first half's closed sum only after its last fold, then joins them in slab order (lt_join_slabs)
static float lat_keep_half2(const std::vector<float> &p, int cb, int ce, int cap, float handed, std::mt19937_64 &r) {
    const int NC = (int)p.size();
    std::vector<std::pair<int, int>> pcs;
    for (int c = cb; c < ce;) {
        int n = 1 + (int)(r() % (uint64_t)std::min(cap, ce - c));
        pcs.push_back({c, c + n});
        c += n;
    }
    (void)NC;
    float acc = -1e30f;
    std::vector<float> kept(64, -5e30f);
    int segc = 0, first_seg = 1;
    const int cbeg = pcs[0].first;
    std::vector<float> part(cap, -3e30f);
    for (int pc = 0; pc < (int)pcs.size(); pc++) {
        for (int c = pcs[pc].first; c < pcs[pc].second; c++) part[segc + c - pcs[pc].first] = p[c];
        segc += pcs[pc].second - pcs[pc].first;
        const bool last = pc + 1 == (int)pcs.size();
        if (!(last || segc + pcs[pc + 1].second - pcs[pc + 1].first > cap)) continue;
        const int cseg = pcs[pc].second - segc;
        const int gb = std::max((cseg + SLC - 1) / SLC * SLC, cbeg + SLC) - cseg;
        float a = first_seg ? 0.0f : acc;
        int j = (cseg + gb - 1 - cbeg) / SLC; // the slab the segment's first close ends (or its only slab)
        for (int cc = 0, e = std::min(gb, segc);; e = std::min(e + SLC, segc)) {
            for (; cc < e; cc++) a = a + part[cc];
            if (cc == segc) break;
            kept[j++] = a;
            a = 0.0f;
        }
        if (last) kept[j] = a;
        else acc = a;
        if (last) { // poll, then lt_join_slabs
            float t = handed;
            const int nsl = (pcs[pc].second - cbeg + SLC - 1) / SLC;
            for (int q = 0; q < nsl; q++) t = t + kept[q];
            acc = t;
        }
        first_seg = 0;
        segc = 0;
    }
    return acc;
}
static float lat_keep_unit(const std::vector<float> &p, std::mt19937_64 &r) {
    const int NC = (int)p.size(), cap = SLC / 2 + (int)(r() % (uint64_t)(4 * SLC));
    if (NC <= SLC || NC < 2) return lat_unit(p, 1, r);
    const int h = lt_ksplit_h(NC);
    lt_state s;
    lat_step(p, 0, h, cap, 1, 0.0f, s, r);
    return lat_keep_half2(p, h, NC, cap, s.acc, r);
}

// tp_planes + tp_linear's chunk_done + tp_epi_val
static int tp_planes(int NC, int S, int *pps) {
    const int sc = NC / S, nsl = (NC + SLC - 1) / SLC;
    if (NC % S) return 0;
    if (NC <= SLC) return *pps = S == 1 ? 1 : 1 + NC - sc;
    if (S == 1 || sc % SLC == 0) return *pps = 1, nsl;
    if (SLC % sc) return 0;
    *pps = 1 + SLC - sc;
    return (nsl - 1) * *pps + 1 + (NC - (nsl - 1) * SLC) - sc;
}
static int tput(const std::vector<float> &p, int S, float &y) {
    const int NC = (int)p.size(), sc = NC / S;
    int pps;
    const int np = tp_planes(NC, S, &pps);
    if (!np) return 0;
    std::vector<float> plane(np, -4e30f);
    std::vector<int> written(np, 0);
    for (int z = 0; z < S; z++) {
        const int c0 = z * sc;
        const bool holds = c0 % SLC == 0;
        float acc = 0.0f;
        for (int c = c0; c < c0 + sc; c++) {
            const int pl = (c / SLC) * pps;
            if (holds) {
                acc = acc + p[c];
                if (c % SLC == SLC - 1 || c == c0 + sc - 1) {
                    if (pl >= np) return -1;
                    plane[pl] = acc, written[pl]++;
                    acc = 0.0f;
                }
            } else {
                const int q = pl + 1 + c % SLC - sc;
                if (q < 0 || q >= np) return -1;
                plane[q] = p[c], written[q]++;
            }
        }
    }
    for (int q = 0; q < np; q++)
        if (written[q] != 1) return -2;
    float a = plane[0];
    if (pps <= 1 || pps >= np) {
        for (int q = 1; q < np; q++) a = a + plane[q];
    } else {
        int q = 1;
        for (; q < pps; q++) a = a + plane[q];
        while (q < np) {
            const int e = std::min(q + pps, np);
            float s = plane[q];
            for (q++; q < e; q++) s = s + plane[q];
            a = a + s;
        }
    }
    y = a;
    return np;
}

int main() {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    long checks = 0, bad = 0, tp_offered = 0;
    for (int NC = 1; NC <= 96; NC++) {
        for (int rep = 0; rep < 200; rep++) {
            std::vector<float> p(NC);
            const float scale = std::ldexp(1.0f, (int)(rng() % 40) - 20);
            for (auto &v : p) v = nd(rng) * scale * (rng() % 7 == 0 ? 1e4f : 1.0f);
            if (rep % 17 == 0) p[rng() % NC] = -0.0f;
            const uint32_t ref = bits(contract(p));
            auto chk = [&](float v, const char *what, int arg) {
                checks++;
                if (bits(v) != ref) {
                    if (bad++ < 10) printf("MISMATCH %s NC %d arg %d: %08x vs %08x\n", what, NC, arg, bits(v), ref);
                }
            };
            for (int CR = 1; CR <= 64; CR++) chk(frame_small(p, CR), "frame_small", CR);
            chk(frame_big(p), "frame_big", 0);
            for (int t = 0; t < 8; t++) chk(lat_unit(p, t & 1, rng), "lat", t & 1);
            for (int t = 0; t < 4; t++) chk(lat_keep_unit(p, rng), "lat_keep", t);
            for (int S = 1; S <= 16 && S <= NC; S *= 2) {
                float y;
                const int np = tput(p, S, y);
                if (np < 0) {
                    if (bad++ < 10) printf("PLANES %s NC %d S %d: %d\n", "tput", NC, S, np);
                    continue;
                }
                if (np == 0 && S == 1 && bad++ < 10) printf("UNSPLIT NOT OFFERED NC %d\n", NC);
                if (np == 0) continue;
                tp_offered += rep == 0;
                chk(y, "tput", S);
            }
        }
    }
    // the plane counts the change is for (GPT / CSM fc2 at K 4096 / 8192)
    for (int NC : {8, 32, 64}) {
        printf("NC %2d planes by S:", NC);
        for (int S = 1; S <= 16; S *= 2) {
            int pps;
            printf(" S%d=%d", S, tp_planes(NC, S, &pps));
        }
        printf("\n");
    }
    printf("%ld checks, %ld mismatches (%ld (NC, S) splits offered)\n", checks, bad, tp_offered);
    return bad != 0;
}
