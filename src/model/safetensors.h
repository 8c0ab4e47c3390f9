/* safetensors container: map a file, validate its header by the reference crate's rules, list its tensors.
 * Nothing here knows about models; model.c maps names to weights. */
#ifndef DD_SAFETENSORS_H
#define DD_SAFETENSORS_H

#include "depthdec.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef enum dd_st_dtype {
    DD_ST_BOOL, DD_ST_U8, DD_ST_I8, DD_ST_F8_E5M2, DD_ST_F8_E4M3, DD_ST_I16, DD_ST_U16, DD_ST_F16, DD_ST_BF16,
    DD_ST_I32, DD_ST_U32, DD_ST_F32, DD_ST_F64, DD_ST_I64, DD_ST_U64, DD_ST_NDTYPES
} dd_st_dtype;

#define DD_ST_MAX_DIMS 8
#define DD_ST_MAX_HEADER (100u * 1000u * 1000u) /* the reference crate's limit */

typedef struct dd_st_tensor {
    const char *name;   /* points into the parsed header (valid while the file is open) */
    dd_st_dtype dtype;
    int ndim;
    int64_t shape[DD_ST_MAX_DIMS];
    size_t begin, end;  /* byte offsets within the data section */
    const uint8_t *data;/* mapped bytes of the tensor; may be misaligned */
} dd_st_tensor;

typedef struct dd_st_file {
    char path[1024];
    uint8_t *map;
    size_t size;
    int heap;           /* map is a malloc'd buffer (in-memory model), not an mmap */
    json_t *header;     /* the parsed header object (owns the tensor names) */
    json_t *metadata;   /* __metadata__ object or NULL (borrowed from header) */
    dd_st_tensor *t;    /* tensors sorted by name */
    int n;
} dd_st_file;

/* Map and validate `path`. On failure nothing stays mapped or allocated and *f is zeroed. */
dd_status dd_st_open(dd_st_file *f, const char *path, dd_error *err);
/* The same over an in-memory image; takes ownership of buf (freed by dd_st_close, also on failure). */
dd_status dd_st_open_mem(dd_st_file *f, const char *label, uint8_t *buf, size_t size, dd_error *err);
void dd_st_close(dd_st_file *f); /* zeroes *f; safe on a zeroed struct */

/* One tensor to write. */
typedef struct dd_st_out {
    char name[160];
    dd_st_dtype dtype;
    int ndim;
    int64_t shape[DD_ST_MAX_DIMS];
    const void *data;   /* prod(shape) * dtype size bytes */
} dd_st_out;

/* Serialize tensors (+ one optional __metadata__ key/value) into a malloc'd safetensors image. Tensors are laid
 * out in the given order; the header is padded with spaces to a multiple of 8 bytes. */
dd_status dd_st_serialize(const dd_st_out *t, int n, const char *meta_key, const char *meta_val, uint8_t **buf,
                          size_t *size, dd_error *err);
/* A tensor list being built for dd_st_serialize (the synthetic models, export): the tensors in order and the
 * buffers behind them, owned by the list. The first failure is kept in `st` (and in *err, its message starting
 * with `what`); after it every call does nothing and returns NULL. Start from {.what = ..., .err = ...}. */
typedef struct dd_st_list {
    const char *what; /* names the caller in messages: "export", "synthetic model" */
    dd_error *err;
    dd_status st;
    dd_st_out *t;
    int n, cap;
    void **bufs;
    int nbufs;
} dd_st_list;

/* Hand the malloc'd buffer p to the list; returns p, or NULL when p is NULL or after a failure (p is freed). */
void *dd_st_list_own(dd_st_list *l, void *p);
/* n bytes owned by the list, or NULL (out of memory, or after a failure). */
void *dd_st_list_alloc(dd_st_list *l, size_t n);
/* Append a tensor; data is not copied (own it with the list, or keep it alive until serialization). */
void dd_st_list_add(dd_st_list *l, const char *name, dd_st_dtype dt, int nd, const int64_t *shape, const void *data);
/* Serialize the list unless a call failed (then its status), and free it either way. */
dd_status dd_st_list_finish(dd_st_list *l, const char *meta_key, const char *meta_val, uint8_t **buf,
                            size_t *size);

/* Write bytes to path atomically (temp file + rename); on failure no file is left. */
dd_status dd_write_file_atomic(const char *path, const void *data, size_t size, dd_error *err);
/* Binary search by name; NULL when absent. */
const dd_st_tensor *dd_st_find(const dd_st_file *f, const char *name);
const char *dd_st_dtype_name(dd_st_dtype t);
size_t dd_st_dtype_size(dd_st_dtype t);
/* __metadata__[key] as a string, or NULL. */
const char *dd_st_meta(const dd_st_file *f, const char *key);

#endif
