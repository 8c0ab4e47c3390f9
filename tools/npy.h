/* .npy I/O: the CLI's input and output arrays (SPEC §5: hidden, codes, c0, logits).
 *
 * Only the subset the engine needs: little-endian float32 / float16 / int32 / int64 / float64, C order, at most
 * 8 dimensions. Everything else is rejected with DD_EFORMAT and a message that names the file. Every function is
 * thread-safe (no shared state); writing the same path from two threads at once is not supported.
 */
#ifndef DD_NPY_H
#define DD_NPY_H

#include "depthdec.h"

typedef enum dd_npy_dtype {
    DD_NPY_F32 = 0,
    DD_NPY_F16 = 1,
    DD_NPY_I32 = 2,
    DD_NPY_I64 = 3,
    DD_NPY_F64 = 4
} dd_npy_dtype;

/* One array in memory. data is malloc'd (never NULL after a successful read, even when count == 0) and holds
 * count little-endian native values of `dtype`; count = product of shape[0..ndim) (1 for ndim 0). */
typedef struct dd_npy {
    dd_npy_dtype dtype;
    int ndim;
    int64_t shape[8];
    size_t count;
    void *data;
} dd_npy;

/* Read a .npy file (format versions 1.0, 2.0 and 3.0) into *out. Accepts descr '<f4', '<f2', '<i4', '<i8', '<f8'
 * (also with '=' or '|' for the byte order, which mean little-endian on the hosts we build for, and '>': big-endian
 * data, byte-swapped to native as numpy would); C order only.
 *   DD_EINVAL   path or out is NULL
 *   DD_EIO      the file cannot be opened or read: "h.npy: No such file or directory"
 *   DD_EFORMAT  bad magic, unsupported version, header not a Python dict literal of exactly the keys 'descr',
 *               'fortran_order', 'shape'; fortran_order True; any other dtype ('<u4', '|O', '<U8', structured);
 *               ndim > 8; a negative or overflowing shape; header length beyond the file; truncated data or
 *               trailing bytes: "h.npy: truncated data: header says 4096 bytes, file has 4000"
 *   DD_ENOMEM   the data buffer could not be allocated
 * On any error *out is zeroed and nothing is leaked. Free with dd_npy_free. */
dd_status dd_npy_read(const char *path, dd_npy *out, dd_error *err);

/* Free a->data and zero *a. NULL (and an already-freed array) is a no-op. */
void dd_npy_free(dd_npy *a);

/* Write data (count little-endian native values of `dtype`, count = product of shape) as a .npy file: version 1.0
 * (2.0 if the header would not fit), fortran_order False, the header space-padded and ending in '\n' so that the
 * data starts at a multiple of 64 bytes. data may be NULL only when count == 0.
 * Atomic: the bytes go to "<path>.tmp.<pid>", which is renamed over `path` once complete; on any failure the temp
 * file is removed and `path` is untouched.
 *   DD_EINVAL  NULL path, bad dtype, ndim outside 0..8, a negative dim, a size that overflows, NULL data
 *   DD_EIO     the file cannot be created, written or renamed: "out/x.npy: No such file or directory" */
dd_status dd_npy_write(const char *path, dd_npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
                       dd_error *err);

/* Conversions for the CLI. Check that `a` has ndim == `ndim` and shape == want[0..ndim) (a want of -1 matches any
 * size, and prints as N), then return a malloc'd copy in *out (free with free(); never NULL on success, even for
 * 0 elements). `path` and `what` (a label such as "--hidden"; may be NULL) only make the messages:
 *   "h.npy (--hidden): expected shape [N, 2048], got [4, 1024]"
 *   "c.npy (--codes): dtype float32 not allowed, want int32 or int64"
 * dd_npy_to_f32 takes float32, float16 and float64 (a finite float64 beyond float32's range is an error; NaN and
 * inf pass through for the engine to judge). dd_npy_to_i32 takes int32 and int64 (an int64 outside int32's range
 * is an error naming the flat index and the value).
 *   DD_EINVAL  a NULL argument, a wrong dtype, a wrong shape, a value out of range
 *   DD_ENOMEM  the copy could not be allocated
 * On error *out is NULL. */
dd_status dd_npy_to_f32(const dd_npy *a, const char *path, const char *what, int ndim, const int64_t *want,
                        float **out, dd_error *err);
dd_status dd_npy_to_i32(const dd_npy *a, const char *path, const char *what, int ndim, const int64_t *want,
                        int32_t **out, dd_error *err);

#endif
