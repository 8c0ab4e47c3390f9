/* .npy reader and writer, format versions 1.0 / 2.0 / 3.0
 * (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
 *
 * File layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0, uint32 LE for 2.0 and 3.0), then the
 * header — a Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
 * spaces and ended by '\n' — then the raw C-order data. The header is parsed here by a small recursive-descent
 * reader that accepts exactly that grammar (either quote style, any key order, optional trailing commas,
 * whitespace anywhere a token may end), so no Python-literal library is needed.
 */
#include "npy.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c stores file bytes as native values: it assumes a little-endian host"
#endif

#define NPY_MAX_DIMS 8

/* Per dtype: the descr written to files (the reader matches the last two characters), item size, and the name
 * used in messages. Indexed by dd_npy_dtype. */
static const struct {
    const char *descr;
    size_t size;
    const char *name;
} k_types[] = {
    [DD_NPY_F32] = {"<f4", 4, "float32"}, [DD_NPY_F16] = {"<f2", 2, "float16"}, [DD_NPY_I32] = {"<i4", 4, "int32"},
    [DD_NPY_I64] = {"<i8", 8, "int64"},   [DD_NPY_F64] = {"<f8", 8, "float64"},
};
#define NPY_NTYPES ((int)(sizeof k_types / sizeof k_types[0]))

static int dtype_ok(dd_npy_dtype t) { return (int)t >= 0 && (int)t < NPY_NTYPES; }

/* ---- header parsing --------------------------------------------------------------------------------------- */

/* The parser walks a NUL-terminated copy of the header; each function advances *s past what it consumed and
 * returns 1, or returns 0 and points *why at a static reason. */
static void skip_ws(const char **s) {
    while (**s == ' ' || **s == '\t' || **s == '\n' || **s == '\r') (*s)++;
}

/* A quoted string without escapes: 'abc' or "abc", copied into buf[cap]. */
static int parse_str(const char **s, char *buf, size_t cap, const char **why) {
    char q = **s;
    if (q != '\'' && q != '"') return *why = "expected a quoted string", 0;
    const char *p = *s + 1;
    size_t n = 0;
    for (; *p != q; p++, n++) {
        if (*p == 0 || *p == '\n') return *why = "unterminated string", 0;
        if (*p == '\\') return *why = "escape sequences in header strings are not supported", 0;
        if (n + 1 >= cap) return *why = "header string too long", 0;
        buf[n] = *p;
    }
    buf[n] = 0;
    *s = p + 1;
    return 1;
}

/* A non-negative decimal integer that fits int64, with Python 2's optional 'L' suffix (old numpy wrote "3L"). */
static int parse_dim(const char **s, int64_t *v, const char **why) {
    const char *p = *s;
    if (*p == '-') return *why = "negative dimension in shape", 0;
    if (*p < '0' || *p > '9') return *why = "shape must be a tuple of integers", 0;
    int64_t x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        int d = *p - '0';
        if (x > (INT64_MAX - d) / 10) return *why = "dimension overflows int64", 0;
        x = x * 10 + d;
    }
    if (*p == 'L') p++;
    *v = x;
    *s = p;
    return 1;
}

/* A tuple of dims: "()", "(5,)", "(3, 4)", "(3, 4,)". "(5)" is an int in Python, not a tuple, so it is rejected. */
static int parse_shape(const char **s, int *ndim, int64_t *shape, const char **why) {
    const char *p = *s;
    if (*p != '(') return *why = "shape must be a tuple", 0;
    p++;
    int n = 0, comma = 0; /* comma: a ',' followed the last dim */
    for (;;) {
        skip_ws(&p);
        if (*p == ')') break;
        if (n > 0 && !comma) return *why = "expected ',' or ')' in shape", 0;
        if (n == NPY_MAX_DIMS) return *why = "more than 8 dimensions", 0;
        if (!parse_dim(&p, &shape[n], why)) return 0;
        n++;
        skip_ws(&p);
        comma = *p == ',';
        if (comma) p++;
    }
    if (n == 1 && !comma) return *why = "shape must be a tuple: (5) is an int, write (5,)", 0;
    *ndim = n;
    *s = p + 1;
    return 1;
}

/* Map a descr string to a dtype: byte order '<', '=' or '|' (little-endian here) or '>' (big-endian: *swap = 1, the
 * data is byte-swapped after reading, as numpy converts it), then f4 f2 i4 i8 f8. */
static int parse_descr(const char *d, dd_npy_dtype *t, int *swap, const char **why) {
    if ((d[0] == '<' || d[0] == '=' || d[0] == '|' || d[0] == '>') && strlen(d) == 3) {
        for (int i = 0; i < NPY_NTYPES; i++) {
            if (strcmp(d + 1, k_types[i].descr + 1) == 0) {
                *t = (dd_npy_dtype)i;
                *swap = d[0] == '>';
                return 1;
            }
        }
    }
    return *why = "unsupported dtype (want f4, f2, i4, i8 or f8, either byte order)", 0;
}

/* reverse the bytes of each of n items of `size` bytes */
static void swap_items(unsigned char *p, size_t n, size_t size) {
    for (size_t i = 0; i < n; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char c = p[a];
            p[a] = p[b];
            p[b] = c;
        }
}

/* The whole header: a dict of exactly 'descr', 'fortran_order' and 'shape', then only whitespace. Fills the dtype
 * and shape of *a; returns DD_EFORMAT naming path on anything else. */
static dd_status parse_header(const char *path, const char *hdr, dd_npy *a, int *swap, dd_error *err) {
    const char *s = hdr, *why = NULL;
    char key[32], descr[64] = "";
    int seen[3] = {0, 0, 0}, fortran = 0; /* seen: descr, fortran_order, shape */
    skip_ws(&s);
    if (*s != '{') return dd_fail(err, DD_EFORMAT, "%s: header is not a dict literal", path);
    s++;
    for (;;) {
        skip_ws(&s);
        if (*s == '}') break;
        if (!parse_str(&s, key, sizeof key, &why)) goto bad;
        skip_ws(&s);
        if (*s != ':') {
            why = "expected ':' after a key";
            goto bad;
        }
        s++;
        skip_ws(&s);
        int k = strcmp(key, "descr") == 0           ? 0
                : strcmp(key, "fortran_order") == 0 ? 1
                : strcmp(key, "shape") == 0         ? 2
                                                    : -1;
        if (k < 0) return dd_fail(err, DD_EFORMAT, "%s: unexpected header key '%s'", path, key);
        if (seen[k]) return dd_fail(err, DD_EFORMAT, "%s: duplicate header key '%s'", path, key);
        seen[k] = 1;
        if (k == 0) {
            if (*s == '[' || *s == '{')
                return dd_fail(err, DD_EFORMAT, "%s: structured dtypes are not supported", path);
            if (!parse_str(&s, descr, sizeof descr, &why)) goto bad;
            if (!parse_descr(descr, &a->dtype, swap, &why))
                return dd_fail(err, DD_EFORMAT, "%s: dtype '%s': %s", path, descr, why);
        } else if (k == 1) {
            if (strncmp(s, "False", 5) == 0) fortran = 0, s += 5;
            else if (strncmp(s, "True", 4) == 0) fortran = 1, s += 4;
            else {
                why = "fortran_order must be True or False";
                goto bad;
            }
        } else if (!parse_shape(&s, &a->ndim, a->shape, &why)) {
            goto bad;
        }
        skip_ws(&s);
        if (*s == ',') s++;
        else if (*s != '}') {
            why = "expected ',' or '}' after a value";
            goto bad;
        }
    }
    s++;
    skip_ws(&s);
    if (*s) {
        why = "unexpected text after the dict";
        goto bad;
    }
    for (int k = 0; k < 3; k++) {
        static const char *names[3] = {"descr", "fortran_order", "shape"};
        if (!seen[k]) return dd_fail(err, DD_EFORMAT, "%s: header lacks key '%s'", path, names[k]);
    }
    if (fortran) return dd_fail(err, DD_EFORMAT, "%s: fortran_order True is not supported (C order only)", path);
    return DD_OK;
bad:
    return dd_fail(err, DD_EFORMAT, "%s: bad header at offset %td: %s", path, s - hdr, why);
}

/* ---- reading ---------------------------------------------------------------------------------------------- */

/* Contract in npy.h. Reads the preamble and header, validates everything against the file size, and only then
 * allocates and reads the data. */
dd_status dd_npy_read(const char *path, dd_npy *out, dd_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out) return dd_fail(err, DD_EINVAL, "dd_npy_read: NULL %s", path ? "out" : "path");
    dd_npy a;
    memset(&a, 0, sizeof a);
    char *hdr = NULL;
    dd_status st = DD_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return dd_fail(err, DD_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = dd_fail(err, DD_EIO, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = dd_fail(err, DD_EIO, "%s: not a regular file", path);
        goto done;
    }
    uint64_t fsize = (uint64_t)sb.st_size;

    /* preamble: magic (6), version (2), header length (2 or 4) */
    unsigned char pre[12];
    if (fsize < 10 || fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = dd_fail(err, DD_EFORMAT, "%s: bad magic (not a .npy file)", path);
        goto done;
    }
    int major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0) {
        st = dd_fail(err, DD_EFORMAT, "%s: unsupported .npy version %d.%d (want 1.0, 2.0 or 3.0)", path, major, minor);
        goto done;
    }
    size_t lensz = major == 1 ? 2 : 4;
    if (fsize < 8 + lensz || fread(pre + 8, 1, lensz, f) != lensz) {
        st = dd_fail(err, DD_EFORMAT, "%s: file ends inside the preamble", path);
        goto done;
    }
    uint64_t hlen = major == 1 ? (uint64_t)pre[8] | (uint64_t)pre[9] << 8 : dd_ld32(pre + 8);
    uint64_t data_off = 8 + lensz + hlen;
    if (hlen > fsize - 8 - lensz) {
        st = dd_fail(err, DD_EFORMAT, "%s: header length %" PRIu64 " beyond file size %" PRIu64, path, hlen, fsize);
        goto done;
    }

    /* header: read, NUL-terminate, parse */
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = dd_fail(err, DD_ENOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, hlen);
        goto done;
    }
    if (fread(hdr, 1, (size_t)hlen, f) != (size_t)hlen) {
        st = dd_fail(err, DD_EIO, "%s: read error in header", path);
        goto done;
    }
    hdr[hlen] = 0;
    if (memchr(hdr, 0, (size_t)hlen)) {
        st = dd_fail(err, DD_EFORMAT, "%s: NUL byte in header", path);
        goto done;
    }
    int swap = 0;
    if ((st = parse_header(path, hdr, &a, &swap, err)) != DD_OK) goto done;

    /* sizes: count = prod(shape) and bytes = count * itemsize, both checked in size_t */
    size_t count = 1, nbytes;
    for (int i = 0; i < a.ndim; i++) {
        if ((uint64_t)a.shape[i] > SIZE_MAX || !dd_mul_ok(count, (size_t)a.shape[i], &count)) {
            st = dd_fail(err, DD_EFORMAT, "%s: shape overflows size_t (dimension %d = %" PRId64 ")", path, i,
                         a.shape[i]);
            goto done;
        }
    }
    if (!dd_mul_ok(count, k_types[a.dtype].size, &nbytes)) {
        st = dd_fail(err, DD_EFORMAT, "%s: data size overflows size_t", path);
        goto done;
    }
    uint64_t have = fsize - data_off;
    if (have != (uint64_t)nbytes) {
        st = dd_fail(err, DD_EFORMAT, "%s: %s: header says %zu data bytes, file has %" PRIu64, path,
                     have < (uint64_t)nbytes ? "truncated data" : "trailing bytes after the data", nbytes, have);
        goto done;
    }

    /* data: malloc at least 1 byte so data is never NULL */
    a.count = count;
    a.data = malloc(nbytes ? nbytes : 1);
    if (!a.data) {
        st = dd_fail(err, DD_ENOMEM, "%s: out of memory for %zu data bytes", path, nbytes);
        goto done;
    }
    if (fread(a.data, 1, nbytes, f) != nbytes) {
        st = dd_fail(err, DD_EIO, "%s: read error in data", path);
        goto done;
    }
    if (swap) swap_items(a.data, count, k_types[a.dtype].size);
done:
    fclose(f);
    free(hdr);
    if (st != DD_OK) {
        free(a.data);
        return st;
    }
    *out = a;
    return DD_OK;
}

void dd_npy_free(dd_npy *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- writing ---------------------------------------------------------------------------------------------- */

/* Contract in npy.h. The header text is numpy's own (same key order and tuple repr), minus the spare spaces numpy
 * adds after the dict for in-place growth. */
dd_status dd_npy_write(const char *path, dd_npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
                       dd_error *err) {
    if (!path) return dd_fail(err, DD_EINVAL, "dd_npy_write: NULL path");
    if (!dtype_ok(dtype)) return dd_fail(err, DD_EINVAL, "%s: bad dtype %d", path, (int)dtype);
    if (ndim < 0 || ndim > NPY_MAX_DIMS) return dd_fail(err, DD_EINVAL, "%s: ndim %d outside 0..8", path, ndim);
    if (ndim > 0 && !shape) return dd_fail(err, DD_EINVAL, "%s: NULL shape", path);
    size_t count = 1, nbytes;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX || !dd_mul_ok(count, (size_t)shape[i], &count))
            return dd_fail(err, DD_EINVAL, "%s: bad dimension %d = %" PRId64, path, i, shape[i]);
    }
    if (!dd_mul_ok(count, k_types[dtype].size, &nbytes)) return dd_fail(err, DD_EINVAL, "%s: size overflows", path);
    if (nbytes > 0 && !data) return dd_fail(err, DD_EINVAL, "%s: NULL data", path);

    /* header text: dict, then spaces, then '\n', so that preamble + header is a multiple of 64 */
    char hdr[512 + 64];
    int n = snprintf(hdr, 512, "{'descr': '%s', 'fortran_order': False, 'shape': (", k_types[dtype].descr);
    for (int i = 0; i < ndim; i++)
        n += snprintf(hdr + n, 512 - (size_t)n, "%" PRId64 "%s", shape[i], i + 1 < ndim ? ", " : ndim == 1 ? "," : "");
    n += snprintf(hdr + n, 512 - (size_t)n, "), }"); /* at most ~60 + 8 * 21 characters: no truncation */
    int major = 1;
    size_t pre = 10, total = (pre + (size_t)n + 1 + 63) / 64 * 64;
    if (total - pre > 65535) { /* cannot happen with <= 8 dims, kept so the rule is stated once */
        major = 2, pre = 12;
        total = (pre + (size_t)n + 1 + 63) / 64 * 64;
    }
    size_t hlen = total - pre;
    memset(hdr + n, ' ', hlen - (size_t)n - 1);
    hdr[hlen - 1] = '\n';
    unsigned char preamble[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    for (size_t i = 0; i < pre - 8; i++) preamble[8 + i] = (unsigned char)(hlen >> (8 * i));

    /* write the temp file, then rename it over path; any failure removes the temp file */
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) return dd_fail(err, DD_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        dd_status st = dd_fail(err, DD_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return st;
    }
    int ok = fwrite(preamble, 1, pre, f) == pre && fwrite(hdr, 1, hlen, f) == hlen &&
             (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    dd_status st = DD_OK;
    if (!ok) {
        remove(tmp);
        st = dd_fail(err, DD_EIO, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    return st;
}

/* ---- conversions ------------------------------------------------------------------------------------------ */

/* Message prefix "path (what)" or "path". */
static void label(char *buf, size_t cap, const char *path, const char *what) {
    if (what) snprintf(buf, cap, "%s (%s)", path ? path : "array", what);
    else snprintf(buf, cap, "%s", path ? path : "array");
}

/* "[4, 1024]"; a dim of -1 prints as N. */
static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *dims) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) {
        const char *sep = i + 1 < ndim ? ", " : "";
        if (dims[i] == -1) n += (size_t)snprintf(buf + n, cap - n, "N%s", sep);
        else n += (size_t)snprintf(buf + n, cap - n, "%" PRId64 "%s", dims[i], sep);
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Shared checks of both conversions: arguments, dtype in `allowed` (a bit mask of dd_npy_dtype), shape. */
static dd_status check(const dd_npy *a, const char *lab, unsigned allowed, const char *want_types, int ndim,
                       const int64_t *want, void *out, dd_error *err) {
    if (!a || !out || (ndim > 0 && !want)) return dd_fail(err, DD_EINVAL, "%s: NULL argument", lab);
    if (ndim < 0 || ndim > NPY_MAX_DIMS) return dd_fail(err, DD_EINVAL, "%s: wanted ndim %d outside 0..8", lab, ndim);
    if (!a->data || !dtype_ok(a->dtype)) return dd_fail(err, DD_EINVAL, "%s: not a loaded array", lab);
    if (!(allowed >> a->dtype & 1u))
        return dd_fail(err, DD_EINVAL, "%s: dtype %s not allowed, want %s", lab, k_types[a->dtype].name, want_types);
    int match = a->ndim == ndim;
    for (int i = 0; match && i < ndim; i++) match = want[i] == -1 || want[i] == a->shape[i];
    if (!match) {
        char ws[200], gs[200];
        fmt_shape(ws, sizeof ws, ndim, want);
        fmt_shape(gs, sizeof gs, a->ndim, a->shape);
        return dd_fail(err, DD_EINVAL, "%s: expected shape %s, got %s", lab, ws, gs);
    }
    return DD_OK;
}

/* Contract in npy.h. */
dd_status dd_npy_to_f32(const dd_npy *a, const char *path, const char *what, int ndim, const int64_t *want,
                        float **out, dd_error *err) {
    char lab[300];
    label(lab, sizeof lab, path, what);
    if (out) *out = NULL;
    unsigned allowed = 1u << DD_NPY_F32 | 1u << DD_NPY_F16 | 1u << DD_NPY_F64;
    dd_status st = check(a, lab, allowed, "float32, float16 or float64", ndim, want, out, err);
    if (st != DD_OK) return st;
    float *y = malloc(a->count ? a->count * sizeof *y : 1); /* count * 4 <= the array's own byte size */
    if (!y) return dd_fail(err, DD_ENOMEM, "%s: out of memory", lab);
    for (size_t i = 0; i < a->count; i++) {
        if (a->dtype == DD_NPY_F32) {
            y[i] = ((const float *)a->data)[i];
        } else if (a->dtype == DD_NPY_F16) {
            y[i] = dd_f16_to_f32(((const uint16_t *)a->data)[i]);
        } else {
            double v = ((const double *)a->data)[i];
            if (isfinite(v) && fabs(v) > FLT_MAX) {
                free(y);
                return dd_fail(err, DD_EINVAL, "%s: value %g at flat index %zu is outside float32 range", lab, v, i);
            }
            y[i] = (float)v;
        }
    }
    *out = y;
    return DD_OK;
}

/* Contract in npy.h. */
dd_status dd_npy_to_i32(const dd_npy *a, const char *path, const char *what, int ndim, const int64_t *want,
                        int32_t **out, dd_error *err) {
    char lab[300];
    label(lab, sizeof lab, path, what);
    if (out) *out = NULL;
    dd_status st = check(a, lab, 1u << DD_NPY_I32 | 1u << DD_NPY_I64, "int32 or int64", ndim, want, out, err);
    if (st != DD_OK) return st;
    int32_t *y = malloc(a->count ? a->count * sizeof *y : 1);
    if (!y) return dd_fail(err, DD_ENOMEM, "%s: out of memory", lab);
    if (a->dtype == DD_NPY_I32) {
        memcpy(y, a->data, a->count * sizeof *y);
    } else {
        const int64_t *x = a->data;
        for (size_t i = 0; i < a->count; i++) {
            if (x[i] < INT32_MIN || x[i] > INT32_MAX) {
                free(y);
                return dd_fail(err, DD_EINVAL, "%s: value %" PRId64 " at flat index %zu is outside int32 range", lab,
                               x[i], i);
            }
            y[i] = (int32_t)x[i];
        }
    }
    *out = y;
    return DD_OK;
}
