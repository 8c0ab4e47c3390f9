/* dd_input_check: what an input array may be (dtype and shape), decided once for the CLI (tools/depthdec.c, from
 * a .npy header) and the Python package (python/src/depthdec, from a numpy array), so both accept and refuse the
 * same inputs. */
#include "depthdec.h"
#include "model/model.h"
#include "util.h"

#include <stdio.h>

/* NumPy's name of the dtype: float32, int8, complex64, bool, <U3, object ... */
static const char *dtype_name(char kind, int itemsize, char *buf, size_t cap) {
    const char *k = kind == 'f' ? "float" : kind == 'i' ? "int" : kind == 'u' ? "uint" : kind == 'c' ? "complex" : NULL;
    if (k) snprintf(buf, cap, "%s%d", k, itemsize * 8);
    else if (kind == 'b') snprintf(buf, cap, "bool");
    else if (kind == 'U') snprintf(buf, cap, "<U%d", itemsize / 4);
    else if (kind == 'S') snprintf(buf, cap, "|S%d", itemsize);
    else if (kind == 'O') snprintf(buf, cap, "object");
    else snprintf(buf, cap, "kind '%c' of %d bytes", kind ? kind : '?', itemsize);
    return buf;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
}

dd_status dd_input_check(const dd_model *m, dd_input what, char kind, int itemsize, int ndim, const int64_t *shape,
                         int64_t rows, const char *label, dd_error *err) {
    dd_error_clear(err);
    if (!label)
        label = what == DD_INPUT_HIDDEN ? "hidden" : what == DD_INPUT_C0 ? "c0" : what == DD_INPUT_TEXT ? "text" : "codes";
    if (!m || (ndim > 0 && !shape) || ndim < 0) return dd_fail(err, DD_EINVAL, "%s: NULL model or shape", label);
    const dd_config *c = dd_model_config(m);
    char dt[64], sh[200];
    dtype_name(kind, itemsize, dt, sizeof dt);
    shape_str(ndim, shape, sh, sizeof sh);
    if (what == DD_INPUT_HIDDEN) {
        if (kind != 'f' || (itemsize != 2 && itemsize != 4 && itemsize != 8))
            return dd_fail(err, DD_EINVAL, "%s: dtype %s, want float32 (float16 and float64 are converted)", label, dt);
        if (ndim != 2 || shape[1] != c->input_dim)
            return dd_fail(err, DD_EINVAL, "%s: shape %s, want [N, input_dim=%d]", label, sh, c->input_dim);
        if (shape[0] < 1) return dd_fail(err, DD_EINVAL, "%s: no rows (shape %s)", label, sh);
        return DD_OK;
    }
    if (what != DD_INPUT_C0 && what != DD_INPUT_CODES && what != DD_INPUT_TEXT)
        return dd_fail(err, DD_EINVAL, "%s: unknown input kind %d", label, (int)what);
    if (what == DD_INPUT_TEXT && !c->text_vocab)
        return dd_fail(err, DD_EINVAL, "%s: the model takes no text tokens (only Moshi's depformer does)", label);
    if (kind != 'i' || (itemsize != 4 && itemsize != 8))
        return dd_fail(err, DD_EINVAL, "%s: dtype %s, want int32 or int64", label, dt);
    if (what == DD_INPUT_TEXT && (ndim != 1 || shape[0] != rows))
        return dd_fail(err, DD_EINVAL, "%s: shape %s, want [N=%lld] (one text token per row of hidden)", label, sh,
                       (long long)rows);
    if (what == DD_INPUT_C0 && (ndim != 1 || shape[0] != rows))
        return dd_fail(err, DD_EINVAL, "%s: shape %s, want [N=%lld] (one per row of hidden)", label, sh,
                       (long long)rows);
    if (what == DD_INPUT_CODES && (ndim != 2 || shape[0] != rows || shape[1] != c->levels))
        return dd_fail(err, DD_EINVAL, "%s: shape %s, want [N=%lld, levels=%d] (N = rows of hidden)", label, sh,
                       (long long)rows, c->levels);
    return DD_OK;
}
