/* safetensors reader. Layout: u64 little-endian N, N bytes of UTF-8 JSON header, then the data section.
 * The header maps each tensor name to {dtype, shape, data_offsets: [begin, end]} relative to the data section,
 * plus an optional "__metadata__" string->string map (null: none; the reference crate reads it as an Option, and
 * MLX's Module.save_weights writes it so). Validation follows the reference Rust crate:
 * N <= 100 MB and inside the file, a JSON object, known dtypes, integer shapes and offsets, offsets contiguous
 * from 0 with no gaps or overlaps, prod(shape)*size(dtype) == end-begin (overflow-checked), last end == data size;
 * we also reject duplicate keys (jansson's JSON_REJECT_DUPLICATES). Every size is computed in size_t with
 * overflow checks before any pointer into the mapping is formed. */
#include "safetensors.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const st_names[DD_ST_NDTYPES] = {"BOOL", "U8",   "I8",  "F8_E5M2", "F8_E4M3",
                                                    "I16",  "U16",  "F16", "BF16",    "I32",
                                                    "U32",  "F32",  "F64", "I64",     "U64"};
static const size_t st_sizes[DD_ST_NDTYPES] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

const char *dd_st_dtype_name(dd_st_dtype t) { return (unsigned)t < DD_ST_NDTYPES ? st_names[t] : "?"; }
size_t dd_st_dtype_size(dd_st_dtype t) { return (unsigned)t < DD_ST_NDTYPES ? st_sizes[t] : 0; }

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const dd_st_tensor *)a)->name, ((const dd_st_tensor *)b)->name);
}
static int cmp_begin(const void *a, const void *b) {
    const dd_st_tensor *x = *(const dd_st_tensor *const *)a, *y = *(const dd_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : (x->end > y->end);
}

/* A JSON value that must be a non-negative integer (no reals, no bools). */
static int get_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return 0;
    json_int_t i = json_integer_value(v);
    if (i < 0) return 0;
    *out = (uint64_t)i;
    return 1;
}

static dd_status parse_tensor(dd_st_file *f, const char *name, json_t *v, size_t data_size, dd_st_tensor *t,
                              dd_error *err) {
    const char *p = f->path;
    if (!json_is_object(v)) return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': header entry is not an object", p, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd)) return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': missing or non-string dtype", p, name);
    if (!json_is_array(js)) return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': missing or non-array shape", p, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': data_offsets must be an array of two integers", p, name);
    if (json_object_size(v) != 3)
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': unexpected keys (want dtype, shape, data_offsets)", p,
                       name);
    t->name = name;
    const char *ds = json_string_value(jd);
    int dt = -1;
    for (int i = 0; i < DD_ST_NDTYPES; i++)
        if (strcmp(ds, st_names[i]) == 0) dt = i;
    if (dt < 0) return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': unknown dtype '%s'", p, name, ds);
    t->dtype = (dd_st_dtype)dt;
    size_t nd = json_array_size(js);
    if (nd > DD_ST_MAX_DIMS)
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': %zu dims (at most %d)", p, name, nd, DD_ST_MAX_DIMS);
    t->ndim = (int)nd;
    size_t bytes = st_sizes[dt];
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!get_uint(json_array_get(js, i), &d) || d > (uint64_t)INT64_MAX)
            return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", p, name, i);
        t->shape[i] = (int64_t)d;
        if (d > SIZE_MAX || !dd_mul_ok(bytes, (size_t)d, &bytes))
            return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': shape overflows the size type", p, name);
    }
    uint64_t b, e;
    if (!get_uint(json_array_get(jo, 0), &b) || !get_uint(json_array_get(jo, 1), &e))
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", p, name);
    if (e < b) return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': data_offsets end %llu < begin %llu", p, name,
                              (unsigned long long)e, (unsigned long long)b);
    if (e > data_size)
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': data_offsets end %llu beyond the data section (%zu bytes)",
                       p, name, (unsigned long long)e, data_size);
    if ((uint64_t)bytes != e - b)
        return dd_fail(err, DD_EFORMAT, "%s: tensor '%s': shape x dtype is %zu bytes but data_offsets span %llu", p,
                       name, bytes, (unsigned long long)(e - b));
    t->begin = (size_t)b;
    t->end = (size_t)e;
    return DD_OK;
}

static dd_status st_parse(dd_st_file *f, dd_error *err) {
    const char *p = f->path;
    if (f->size < 8) return dd_fail(err, DD_EFORMAT, "%s: file is %zu bytes, too short for a safetensors header", p,
                                    f->size);
    uint64_t n;
    memcpy(&n, f->map, 8); /* little-endian hosts only (x86-64, arm64) */
    if (n > DD_ST_MAX_HEADER)
        return dd_fail(err, DD_EFORMAT, "%s: header length %llu exceeds the 100 MB limit", p, (unsigned long long)n);
    if (n > f->size - 8)
        return dd_fail(err, DD_EFORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", p,
                       (unsigned long long)n, f->size);
    if (n < 2 || f->map[8] != '{')
        return dd_fail(err, DD_EFORMAT, "%s: header does not start with a JSON object", p);
    json_error_t je;
    f->header = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES,
                           &je);
    /* jansson gives every syntax error a text; an allocation failure comes back with none (or, in some paths,
     * as json_error_out_of_memory): that is DD_ENOMEM, not a format error */
    if (!f->header && (json_error_code(&je) == json_error_out_of_memory || je.text[0] == 0))
        return dd_fail(err, DD_ENOMEM, "%s: out of memory parsing the %llu-byte header", p, (unsigned long long)n);
    if (!f->header) return dd_fail(err, DD_EFORMAT, "%s: header JSON: %s (at byte %d)", p, je.text, je.position);
    if (!json_is_object(f->header)) return dd_fail(err, DD_EFORMAT, "%s: header is not a JSON object", p);
    size_t data_size = f->size - 8 - (size_t)n;
    const uint8_t *data = f->map + 8 + n;

    size_t cap = json_object_size(f->header);
    f->t = calloc(cap ? cap : 1, sizeof *f->t);
    if (!f->t) return dd_fail(err, DD_ENOMEM, "%s: out of memory for %zu tensor entries", p, cap);
    const char *key;
    json_t *v;
    json_object_foreach(f->header, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (json_is_null(v)) continue; /* no metadata (MLX's Module.save_weights writes null) */
            if (!json_is_object(v)) return dd_fail(err, DD_EFORMAT, "%s: __metadata__ is not an object", p);
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv))
                    return dd_fail(err, DD_EFORMAT, "%s: __metadata__['%s'] is not a string", p, mk);
            }
            f->metadata = v;
            continue;
        }
        dd_status s = parse_tensor(f, key, v, data_size, &f->t[f->n], err);
        if (s) return s;
        f->n++;
    }
    /* offsets: sorted by begin they must tile [0, data_size) exactly */
    dd_st_tensor **by = malloc((f->n ? f->n : 1) * sizeof *by);
    if (!by) return dd_fail(err, DD_ENOMEM, "%s: out of memory", p);
    for (int i = 0; i < f->n; i++) by[i] = &f->t[i];
    qsort(by, f->n, sizeof *by, cmp_begin);
    size_t at = 0;
    dd_status s = DD_OK;
    for (int i = 0; i < f->n && !s; i++) {
        if (by[i]->begin != at)
            s = dd_fail(err, DD_EFORMAT, "%s: tensor '%s': data_offsets begin %zu, expected %zu (%s)", p, by[i]->name,
                        by[i]->begin, at, by[i]->begin > at ? "gap" : "overlap");
        at = by[i]->end;
    }
    free(by);
    if (s) return s;
    if (at != data_size)
        return dd_fail(err, DD_EFORMAT, "%s: data section is %zu bytes but tensors cover %zu (%s)", p, data_size, at,
                       at < data_size ? "trailing bytes" : "truncated");
    for (int i = 0; i < f->n; i++) f->t[i].data = data + f->t[i].begin;
    qsort(f->t, f->n, sizeof *f->t, cmp_name);
    return DD_OK;
}

dd_status dd_st_open(dd_st_file *f, const char *path, dd_error *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); no effect on regular files */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dd_fail(err, DD_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dd_fail(err, DD_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dd_fail(err, DD_EIO, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            memset(f, 0, sizeof *f);
            return dd_fail(err, DD_EIO, "%s: mmap: %s", path, strerror(e));
        }
        f->map = m;
    }
    close(fd);
    dd_status s = f->map ? st_parse(f, err)
                         : dd_fail(err, DD_EFORMAT, "%s: file is 0 bytes, too short for a safetensors header", path);
    if (s) dd_st_close(f);
    return s;
}

dd_status dd_st_open_mem(dd_st_file *f, const char *label, uint8_t *buf, size_t size, dd_error *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", label);
    f->map = buf;
    f->size = size;
    f->heap = 1;
    dd_status s = st_parse(f, err);
    if (s) dd_st_close(f);
    return s;
}

void dd_st_close(dd_st_file *f) {
    if (f->map && f->heap) free(f->map);
    else if (f->map) munmap(f->map, f->size);
    if (f->header) json_decref(f->header);
    free(f->t);
    memset(f, 0, sizeof *f);
}

const dd_st_tensor *dd_st_find(const dd_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, f->t[mid].name);
        if (c == 0) return &f->t[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *dd_st_meta(const dd_st_file *f, const char *key) {
    if (!f->metadata) return NULL;
    return json_string_value(json_object_get(f->metadata, key));
}

dd_status dd_st_serialize(const dd_st_out *t, int n, const char *meta_key, const char *meta_val, uint8_t **buf,
                          size_t *size, dd_error *err) {
    *buf = NULL;
    *size = 0;
    json_t *h = json_object();
    if (!h) return dd_fail(err, DD_ENOMEM, "out of memory building a safetensors header");
    size_t off = 0;
    dd_status s = DD_OK;
    if (meta_key) {
        json_t *md = json_object();
        json_object_set_new(md, meta_key, json_string(meta_val));
        json_object_set_new(h, "__metadata__", md);
    }
    for (int i = 0; i < n && !s; i++) {
        size_t bytes = st_sizes[t[i].dtype];
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            json_array_append_new(shape, json_integer(t[i].shape[d]));
            if (!dd_mul_ok(bytes, (size_t)t[i].shape[d], &bytes)) s = dd_fail(err, DD_EINVAL, "%s: size overflow", t[i].name);
        }
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(st_names[t[i].dtype]));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes)));
        json_object_set_new(h, t[i].name, e);
        off += bytes;
    }
    char *js = s ? NULL : json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (s) return s;
    if (!js) return dd_fail(err, DD_ENOMEM, "out of memory serializing a safetensors header");
    size_t hl = strlen(js), padded = (hl + 7) / 8 * 8, total = 8 + padded + off;
    uint8_t *b = malloc(total);
    if (!b) {
        free(js);
        return dd_fail(err, DD_ENOMEM, "out of memory for a %zu-byte safetensors image", total);
    }
    uint64_t n64 = padded;
    memcpy(b, &n64, 8);
    memcpy(b + 8, js, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    free(js);
    uint8_t *p = b + 8 + padded;
    for (int i = 0; i < n; i++) {
        size_t bytes = st_sizes[t[i].dtype];
        for (int d = 0; d < t[i].ndim; d++) bytes *= (size_t)t[i].shape[d];
        if (bytes) memcpy(p, t[i].data, bytes);
        p += bytes;
    }
    *buf = b;
    *size = total;
    return DD_OK;
}

void *dd_st_list_own(dd_st_list *l, void *p) {
    void **nb = p && !l->st ? realloc(l->bufs, (size_t)(l->nbufs + 1) * sizeof *nb) : NULL;
    if (!nb) {
        free(p);
        if (!l->st) l->st = dd_fail(l->err, DD_ENOMEM, "%s: out of memory", l->what);
        return NULL;
    }
    l->bufs = nb;
    l->bufs[l->nbufs++] = p;
    return p;
}

void *dd_st_list_alloc(dd_st_list *l, size_t n) {
    if (l->st) return NULL;
    void *p = malloc(n ? n : 1);
    if (!p) {
        l->st = dd_fail(l->err, DD_ENOMEM, "%s: out of memory (%zu bytes)", l->what, n);
        return NULL;
    }
    return dd_st_list_own(l, p);
}

void dd_st_list_add(dd_st_list *l, const char *name, dd_st_dtype dt, int nd, const int64_t *shape, const void *data) {
    if (l->st) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        dd_st_out *nt = realloc(l->t, (size_t)cap * sizeof *nt);
        if (!nt) {
            l->st = dd_fail(l->err, DD_ENOMEM, "%s: out of memory", l->what);
            return;
        }
        l->t = nt;
        l->cap = cap;
    }
    dd_st_out *o = &l->t[l->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dt;
    o->ndim = nd;
    memcpy(o->shape, shape, (size_t)nd * sizeof *shape);
    o->data = data;
}

dd_status dd_st_list_finish(dd_st_list *l, const char *meta_key, const char *meta_val, uint8_t **buf,
                            size_t *size) {
    dd_status s = l->st;
    if (!s) s = dd_st_serialize(l->t, l->n, meta_key, meta_val, buf, size, l->err);
    for (int i = 0; i < l->nbufs; i++) free(l->bufs[i]);
    free(l->bufs);
    free(l->t);
    l->bufs = NULL;
    l->t = NULL;
    l->n = l->cap = l->nbufs = 0;
    return s;
}

dd_status dd_write_file_atomic(const char *path, const void *data, size_t size, dd_error *err) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return dd_fail(err, DD_EIO, "%s: %s", path, strerror(errno));
    size_t w = size ? fwrite(data, 1, size, fp) : 0;
    int e = (w != size) ? errno : 0;
    if (fclose(fp) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e || w != size) {
        remove(tmp);
        return dd_fail(err, DD_EIO, "%s: write failed: %s", path, strerror(e ? e : EIO));
    }
    return DD_OK;
}
