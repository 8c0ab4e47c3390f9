/* The backend table (registry.h) and the public dd_backend_* functions written from it. */
#include "registry.h"
#include "util.h"

#include <string.h>

#ifdef DD_WITH_CPU
#include "cpu/cpu.h"

static const char *cpu_variant_name(int v) { return dd_cpu_isa_name((dd_cpu_isa)v); }
static int cpu_variant_supported(int v) { return dd_cpu_isa_supported((dd_cpu_isa)v); }
static dd_status cpu_use_variant(dd_decoder *d, int v, dd_error *err) {
    return dd_cpu_decoder_use_isa(d, (dd_cpu_isa)v, err);
}
#endif

#ifdef DD_WITH_CUDA
/* src/cuda/ (extern "C" there): the vtable, device presence, the copy bandwidth and the test entry points that run
 * the frame graph's kernels once on host buffers. */
extern const dd_backend_vt dd_cuda_backend;
int dd_cuda_device_present(void);
dd_status dd_cuda_copy_bandwidth(double *gbps, dd_error *err); /* (read + written bytes) / s / 1e9 */
dd_status dd_cuda_read_bandwidth(uint64_t bytes, double *gbps, dd_error *err); /* a read of `bytes` on the device */
dd_status dd_cuda_linear_host(const dd_linear_args *a, dd_error *err);
dd_status dd_cuda_attend_host(const dd_attend_args *a, dd_error *err);
dd_status dd_cuda_sample_host(const float *logits, int n, int V, float T, int K, const uint64_t *seeds,
                              const uint64_t *frames, int level, int32_t *codes, dd_error *err);

static dd_status cuda_probe(dd_error *err) {
    return dd_cuda_device_present() ? DD_OK
                                    : dd_fail(err, DD_EUNSUPPORTED, "backend cuda: no CUDA device is available");
}
static dd_status cuda_bandwidth(int threads, uint64_t bytes, double *gbps, dd_error *err) {
    (void)threads;
    return bytes ? dd_cuda_read_bandwidth(bytes, gbps, err) : dd_cuda_copy_bandwidth(gbps, err);
}
static dd_status cuda_linear(const dd_linear_args *a, int variant, int threads, dd_error *err) {
    (void)variant, (void)threads;
    return dd_cuda_linear_host(a, err);
}
static dd_status cuda_attend(const dd_attend_args *a, int variant, int threads, dd_error *err) {
    (void)variant, (void)threads;
    return dd_cuda_attend_host(a, err);
}
#endif

/* Slowest first (auto takes the last usable row); the oracle is row 0. */
const dd_backend_row dd_registry[] = {
    {.info = {DD_BACKEND_REF, "ref", "streaming read", 3},
     .vt = &dd_ref_backend,
     .read_bandwidth = dd_host_read_bandwidth,
     .test = {.oracle = 1, .host_memory = 1}},
#ifdef DD_WITH_CPU
    {.info = {DD_BACKEND_CPU, "cpu", "streaming read", 20},
     .vt = &dd_cpu_backend,
     .read_bandwidth = dd_host_read_bandwidth,
     .test = {.nvariants = DD_CPU_NISA,
              .variant_name = cpu_variant_name,
              .variant_supported = cpu_variant_supported,
              .use_variant = cpu_use_variant,
              .linear_host = dd_cpu_linear_host,
              .attend_host = dd_cpu_attend_host,
              .threaded = 1,
              .linear_ext = 1,
              .exact_logits = 1,
              .host_memory = 1}},
#else
    {.info = {DD_BACKEND_CPU, "cpu", "streaming read", 20}, .absent = "not built into this library"},
#endif
#ifdef DD_WITH_CUDA
    {.info = {DD_BACKEND_CUDA, "cuda", "device-to-device copy", 200},
     .vt = &dd_cuda_backend,
     .probe = cuda_probe,
     .read_bandwidth = cuda_bandwidth,
     .test = {.linear_host = cuda_linear, .attend_host = cuda_attend, .sample_host = dd_cuda_sample_host}},
#else
    {.info = {DD_BACKEND_CUDA, "cuda", "device-to-device copy", 200},
     .absent = "this build has no CUDA backend (build with make CUDA=1)"},
#endif
};
const int dd_registry_count = (int)(sizeof dd_registry / sizeof *dd_registry);

const dd_backend_row *dd_registry_row(dd_backend b) {
    for (int i = 0; i < dd_registry_count; i++)
        if (dd_registry[i].info.id == b) return &dd_registry[i];
    return NULL;
}

int dd_registry_usable(const dd_backend_row *row) { return row->vt && (!row->probe || row->probe(NULL) == DD_OK); }

dd_status dd_registry_pick(dd_backend b, const dd_backend_row **out, dd_error *err) {
    *out = NULL;
    if (b == DD_BACKEND_AUTO) {
        for (int i = dd_registry_count - 1; i >= 0; i--)
            if (dd_registry_usable(&dd_registry[i])) {
                *out = &dd_registry[i];
                return DD_OK;
            }
        return dd_fail(err, DD_EUNSUPPORTED, "backend auto: no backend can run here"); /* ref always can */
    }
    const dd_backend_row *r = dd_registry_row(b);
    if (!r) return dd_fail(err, DD_EUNSUPPORTED, "backend %s: not built into this library", dd_backend_name(b));
    if (!r->vt) return dd_fail(err, DD_EUNSUPPORTED, "backend %s: %s", r->info.name, r->absent);
    if (r->probe) {
        dd_status s = r->probe(err);
        if (s) return s;
    }
    *out = r;
    return DD_OK;
}

/* ---- the public face -------------------------------------------------------------------------------------- */

const char *dd_backend_name(dd_backend b) {
    if (b == DD_BACKEND_AUTO) return "auto";
    const dd_backend_row *r = dd_registry_row(b);
    return r ? r->info.name : "?";
}

dd_status dd_backend_parse(const char *s, dd_backend *out) {
    if (!s || !out) return DD_EINVAL;
    if (strcmp(s, "auto") == 0) {
        *out = DD_BACKEND_AUTO;
        return DD_OK;
    }
    for (int i = 0; i < dd_registry_count; i++)
        if (strcmp(s, dd_registry[i].info.name) == 0) {
            *out = dd_registry[i].info.id;
            return DD_OK;
        }
    return DD_EINVAL;
}

int dd_backend_available(dd_backend b) {
    if (b == DD_BACKEND_AUTO) return 1;
    const dd_backend_row *r = dd_registry_row(b);
    return r && dd_registry_usable(r);
}

int dd_backend_count(void) { return dd_registry_count; }

dd_backend dd_backend_at(int i) { return i >= 0 && i < dd_registry_count ? dd_registry[i].info.id : DD_BACKEND_AUTO; }

const dd_backend_info *dd_backend_info_get(dd_backend b) {
    const dd_backend_row *r = dd_registry_row(b);
    return r ? &r->info : NULL;
}
