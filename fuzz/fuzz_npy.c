/* libFuzzer harness for the .npy reader (tools/npy.c): the input is the file, verbatim. An array that reads is
 * converted the way the CLI converts --hidden / --codes (any shape of its rank), written back with dd_npy_write
 * and read again, which must give the same dtype, shape and bytes. A failed read must be a clean error: *out
 * zeroed, a known code, a message. */
#include "depthdec.h"
#include "fuzz_common.h"
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t item_size(dd_npy_dtype t) {
    return t == DD_NPY_F16 ? 2 : (t == DD_NPY_F32 || t == DD_NPY_I32) ? 4 : 8;
}

/* One input; returns the read status. */
static int fz_npy_one(const uint8_t *data, size_t size) {
    char path[300], back[300];
    snprintf(path, sizeof path, "%s/in.npy", fz_tmpdir());
    snprintf(back, sizeof back, "%s/back.npy", fz_tmpdir());
    fz_write(path, data, size);

    dd_npy a;
    memset(&a, 0x5a, sizeof a);
    dd_error e;
    dd_status s = dd_npy_read(path, &a, &e);
    if (s != DD_OK) {
        static const dd_npy zero;
        FZ_MUST(memcmp(&a, &zero, sizeof a) == 0, "*out zeroed on failure", &e);
        FZ_MUST(e.code == s && (s == DD_EFORMAT || s == DD_EIO || s == DD_ENOMEM), "error code", &e);
        FZ_MUST(memchr(e.msg, 0, sizeof e.msg) != NULL && e.msg[0] != 0, "error message", NULL);
        return s;
    }
    FZ_MUST(a.data != NULL && a.ndim >= 0 && a.ndim <= 8, "array sane", NULL);
    size_t count = 1;
    for (int i = 0; i < a.ndim; i++) count *= (size_t)a.shape[i];
    FZ_MUST(count == a.count, "count == prod(shape)", NULL);

    int64_t any[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    float *f = NULL;
    int32_t *q = NULL;
    s = dd_npy_to_f32(&a, path, "--hidden", a.ndim, any, &f, &e);
    FZ_MUST(s == DD_OK || s == DD_EINVAL, "to_f32 status", &e);
    FZ_MUST((s == DD_OK) == (f != NULL), "to_f32 output", &e);
    free(f);
    s = dd_npy_to_i32(&a, path, "--codes", a.ndim, any, &q, &e);
    FZ_MUST(s == DD_OK || s == DD_EINVAL, "to_i32 status", &e);
    FZ_MUST((s == DD_OK) == (q != NULL), "to_i32 output", &e);
    free(q);
    /* a wrong rank is refused */
    s = dd_npy_to_f32(&a, path, NULL, a.ndim == 8 ? 7 : a.ndim + 1, any, &f, &e);
    FZ_MUST(s == DD_EINVAL && f == NULL, "wrong rank refused", &e);

    /* round trip (skip huge arrays: the harness writes them to disk) */
    if (a.count * item_size(a.dtype) <= (1u << 22)) {
        s = dd_npy_write(back, a.dtype, a.ndim, a.shape, a.data, &e);
        FZ_MUST(s == DD_OK, "write back", &e);
        dd_npy b;
        s = dd_npy_read(back, &b, &e);
        FZ_MUST(s == DD_OK, "read back", &e);
        FZ_MUST(b.dtype == a.dtype && b.ndim == a.ndim && b.count == a.count, "round trip header", NULL);
        FZ_MUST(memcmp(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim) == 0, "round trip shape", NULL);
        FZ_MUST(memcmp(a.data, b.data, a.count * item_size(a.dtype)) == 0, "round trip data", NULL);
        dd_npy_free(&b);
    }
    dd_npy_free(&a);
    dd_npy_free(&a); /* documented: a second free is a no-op */
    return DD_OK;
}

#ifndef FZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_npy_one(data, size);
    return 0;
}
#endif
