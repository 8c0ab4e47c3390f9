/* Tests of tools/npy.c: round trips, hand-made headers, every rejected input, the CLI conversions, atomic writes,
 * and (when python3 + numpy are installed) files made by numpy itself and our files read by numpy.
 *
 * Data are fresh random bits each run; the seed is printed, and DD_TEST_SEED=<n> replays a run. All files live in
 * a mkdtemp() directory that the group teardown removes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "npy.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers (random inputs, the scratch directory, file I/O: harness.h) ---------------------------------- */

static void rnd_bytes(void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd64();
}
/* Uniform in [-8, 8) times 2^-(0..23): spans float16 normals and subnormals without overflowing it. */
static float rnd_float(void) {
    return ldexpf((float)((double)(rnd64() >> 11) * 0x1p-53 * 16.0 - 8.0), -(int)(rnd64() % 24));
}

static void mkpath(char *buf, size_t cap, const char *name) { th_path(buf, cap, "%s", name); }

/* A .npy by hand: magic, version major.minor, header length (2 bytes LE for major 1, else 4), hdr, data. */
static void hand_npy(const char *path, int major, int minor, const char *hdr, const void *data, size_t ndata) {
    size_t hl = strlen(hdr), lens = major == 1 ? 2 : 4, n = 8 + lens + hl + ndata;
    unsigned char *b = malloc(n);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major, b[7] = (unsigned char)minor;
    for (size_t i = 0; i < lens; i++) b[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8 + lens, hdr, hl);
    if (ndata) memcpy(b + 8 + lens + hl, data, ndata);
    th_write_bytes(path, b, n);
    free(b);
}

static int is_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/* Number of entries in th_dir, and how many of them look like our temp files. */
static int dir_entries(int *tmps) {
    DIR *d = opendir(th_dir);
    assert_non_null(d);
    int n = 0;
    *tmps = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (strstr(e->d_name, ".tmp.")) (*tmps)++;
    }
    closedir(d);
    return n;
}

/* Expect dd_npy_read(path) to fail with `code`, a message naming path, and a zeroed *out. */
static void expect_read_fail(const char *path, dd_status code, const char *also) {
    dd_npy a;
    dd_error e;
    memset(&a, 0xab, sizeof a);
    memset(&e, 0, sizeof e);
    dd_status st = dd_npy_read(path, &a, &e);
    if (st != code || !strstr(e.msg, path) || (also && !strstr(e.msg, also)))
        print_error("%s: got status %d (want %d), msg \"%s\" (want \"%s\")\n", path, st, code, e.msg, also ? also : "");
    assert_int_equal(st, code);
    assert_int_equal(e.code, code);
    assert_non_null(strstr(e.msg, path));
    if (also) assert_non_null(strstr(e.msg, also));
    assert_true(is_zero(&a, sizeof a));
}

static const size_t k_size[] = {4, 2, 4, 8, 8};
static const char *k_descr[] = {"<f4", "<f2", "<i4", "<i8", "<f8"};

/* ---- round trips ------------------------------------------------------------------------------------------ */

/* Every dtype x shapes 0-d, 1-d (incl. empty), 2-d, 3-d, 8-d: random bits survive exactly, the file layout is
 * numpy's (v1.0, data at a multiple of 64, header ends in '\n'), and no temp file is left. */
static void test_roundtrip(void **state) {
    static const struct { int ndim; int64_t shape[8]; } shapes[] = {
        {0, {0}},         {1, {1}},         {1, {7}},
        {1, {0}},         {2, {3, 5}},      {3, {2, 3, 4}},
        {3, {4, 0, 3}},   {8, {1, 2, 1, 3, 1, 1, 2, 1}},
        {2, {33, 129}},
    };
    char path[128];
    mkpath(path, sizeof path, "rt.npy");
    for (int t = 0; t < 5; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            size_t count = 1;
            for (int i = 0; i < shapes[s].ndim; i++) count *= (size_t)shapes[s].shape[i];
            size_t nb = count * k_size[t];
            unsigned char *src = malloc(nb + 1);
            assert_non_null(src);
            rnd_bytes(src, nb);
            dd_error e = {0};
            assert_int_equal(dd_npy_write(path, (dd_npy_dtype)t, shapes[s].ndim, shapes[s].shape, src, &e), DD_OK);

            /* file layout */
            size_t fn;
            unsigned char *raw = th_slurp(path, &fn);
            assert_memory_equal(raw, "\x93NUMPY\x01\x00", 8);
            size_t off = 10 + (size_t)(raw[8] | raw[9] << 8);
            assert_int_equal(off % 64, 0);
            assert_int_equal(raw[off - 1], '\n');
            assert_int_equal(fn, off + nb);
            char want[256];
            int n = snprintf(want, sizeof want, "{'descr': '%s', 'fortran_order': False, 'shape': (", k_descr[t]);
            for (int i = 0; i < shapes[s].ndim; i++)
                n += snprintf(want + n, sizeof want - (size_t)n, "%" PRId64 "%s", shapes[s].shape[i],
                              i + 1 < shapes[s].ndim ? ", " : shapes[s].ndim == 1 ? "," : "");
            snprintf(want + n, sizeof want - (size_t)n, "), }");
            assert_memory_equal(raw + 10, want, strlen(want));
            free(raw);

            dd_npy a;
            assert_int_equal(dd_npy_read(path, &a, &e), DD_OK);
            assert_int_equal(a.dtype, t);
            assert_int_equal(a.ndim, shapes[s].ndim);
            for (int i = 0; i < a.ndim; i++) assert_int_equal(a.shape[i], shapes[s].shape[i]);
            assert_int_equal(a.count, count);
            assert_non_null(a.data);
            if (nb) assert_memory_equal(a.data, src, nb);
            dd_npy_free(&a);
            assert_true(is_zero(&a, sizeof a));
            free(src);
        }
    }
    int tmps, n = dir_entries(&tmps);
    assert_int_equal(tmps, 0);
    assert_true(n >= 1);
    dd_npy_free(NULL); /* NULL-safe */
    unlink(path);
}

/* ---- hand-made files -------------------------------------------------------------------------------------- */

/* case c's file reads without error as dtype t */
static void read_ok(const char *path, size_t c, dd_npy_dtype t, dd_npy *a) {
    dd_error e = {0};
    dd_status st = dd_npy_read(path, a, &e);
    if (st != DD_OK) print_error("case %zu: %s\n", c, e.msg);
    assert_int_equal(st, DD_OK);
    assert_int_equal(a->dtype, t);
}

/* Headers numpy could have written (or a human): v1/v2/v3, either quotes, any key order, spacing, trailing commas,
 * Python 2 'L' suffixes, '=' and '|' byte order, 0-d, 1-d and empty shapes. */
static void test_handmade(void **state) {
    static const struct { int major; const char *hdr; dd_npy_dtype t; int ndim; int64_t shape[3]; } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n", DD_NPY_F32, 2, {2, 3}},
        {1, "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}", DD_NPY_F32, 2, {2, 3}},
        {2, "{'fortran_order':False,'descr':'<i4','shape':(2,3,),}\n", DD_NPY_I32, 2, {2, 3}},
        {3, "  { 'descr' : \"=f8\" ,\n 'shape' : ( 2 , 3 ) , 'fortran_order' : False , }   \n", DD_NPY_F64, 2, {2, 3}},
        {1, "{'descr': '|f2', 'fortran_order': False, 'shape': (2L, 3L), }\n", DD_NPY_F16, 2, {2, 3}},
        {1, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n", DD_NPY_I64, 0, {0}},
        {2, "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (5,)}\n", DD_NPY_I32, 1, {5}},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }\n", DD_NPY_F32, 1, {0}},
        {1, "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 0, 3), }\n", DD_NPY_F16, 3, {4, 0, 3}},
        {1, "{'descr':'<i8','fortran_order':False,'shape':(1,2,3)}", DD_NPY_I64, 3, {1, 2, 3}},
    };
    char path[128];
    mkpath(path, sizeof path, "hand.npy");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t count = 1;
        for (int i = 0; i < cases[c].ndim; i++) count *= (size_t)cases[c].shape[i];
        size_t nb = count * k_size[cases[c].t];
        unsigned char data[64];
        rnd_bytes(data, sizeof data);
        hand_npy(path, cases[c].major, 0, cases[c].hdr, data, nb);
        dd_npy a;
        read_ok(path, c, cases[c].t, &a);
        assert_int_equal(a.ndim, cases[c].ndim);
        for (int i = 0; i < a.ndim; i++) assert_int_equal(a.shape[i], cases[c].shape[i]);
        assert_int_equal(a.count, count);
        assert_non_null(a.data);
        if (nb) assert_memory_equal(a.data, data, nb);
        dd_npy_free(&a);
    }
    unlink(path);
}

/* Big-endian files (numpy's '>f4' and friends, e.g. from a big-endian machine or astype('>f4')) read as the same
 * values: the bytes are swapped per item. */
static void test_big_endian(void **state) {
    (void)state;
    char path[128];
    mkpath(path, sizeof path, "big.npy");
    static const struct { const char *hdr; dd_npy_dtype t; size_t size; } cases[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", DD_NPY_F32, 4},
        {"{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }\n", DD_NPY_F64, 8},
        {"{'descr': '>f2', 'fortran_order': False, 'shape': (2, 3), }\n", DD_NPY_F16, 2},
        {"{'descr': '>i4', 'fortran_order': False, 'shape': (2, 3), }\n", DD_NPY_I32, 4},
        {"{'descr': '>i8', 'fortran_order': False, 'shape': (2, 3), }\n", DD_NPY_I64, 8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char want[48], big[48];
        const size_t sz = cases[c].size, nb = 6 * sz;
        rnd_bytes(want, nb);
        for (size_t i = 0; i < 6; i++) /* the file's bytes: each little-endian item reversed */
            for (size_t b = 0; b < sz; b++) big[i * sz + b] = want[i * sz + sz - 1 - b];
        hand_npy(path, 1, 0, cases[c].hdr, big, nb);
        dd_npy a;
        read_ok(path, c, cases[c].t, &a);
        assert_int_equal(a.count, 6);
        assert_memory_equal(a.data, want, nb);
        dd_npy_free(&a);
    }
    unlink(path);
}

/* ---- rejected files --------------------------------------------------------------------------------------- */

/* Each malformed file fails with its code, a message naming the file (and the reason), and *out zeroed. */
static void test_bad_files(void **state) {
    static const struct {
        int major, minor;
        const char *hdr;
        size_t ndata; /* data bytes after the header */
        dd_status code;
        const char *why; /* a word the message must contain, or NULL */
    } cases[] = {
        {4, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "version 4.0"},
        {1, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "version 1.1"},
        {0, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "version 0.0"},
        {1, 0, "", 24, DD_EFORMAT, "dict"},
        {1, 0, "['descr', '<f4']\n", 24, DD_EFORMAT, "dict"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False}\n", 24, DD_EFORMAT, "'shape'"},
        {1, 0, "{'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, "'descr'"},
        {1, 0, "{'descr': '<f4', 'shape': (2, 3)}\n", 24, DD_EFORMAT, "'fortran_order'"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", 24, DD_EFORMAT, "'x'"},
        {1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT,
         "duplicate"},
        {1, 0, "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, "quoted"},
        {1, 0, "{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, NULL},
        {1, 0, "{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, "unterminated"},
        {1, 0, "{'descr': '<\\f4', 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, "escape"},
        {1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}\n", 24, DD_EFORMAT, "expected ','"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", 24, DD_EFORMAT, NULL},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x\n", 24, DD_EFORMAT, "after the dict"},
        {1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "fortran_order True"},
        {1, 0, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "True or False"},
        {1, 0, "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }\n", 48, DD_EFORMAT, "'|O'"},
        {1, 0, "{'descr': '<U10', 'fortran_order': False, 'shape': (2, 3), }\n", 240, DD_EFORMAT, "'<U10'"},
        {1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "structured"},
        {1, 0, "{'descr': '<f3', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "unsupported dtype"},
        {1, 0, "{'descr': '<u4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "unsupported dtype"},
        {1, 0, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }\n", 6, DD_EFORMAT, "unsupported dtype"},
        {1, 0, "{'descr': 'float32', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DD_EFORMAT, "unsupported"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }\n", 4, DD_EFORMAT,
         "more than 8"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n", 4, DD_EFORMAT, "negative"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }\n", 24, DD_EFORMAT, "negative"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", 4, DD_EFORMAT,
         "overflows int64"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }\n", 4, DD_EFORMAT,
         "overflows size_t"},
        {1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }\n", 8, DD_EFORMAT,
         "overflows"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (5), }\n", 20, DD_EFORMAT, "(5,)"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }\n", 24, DD_EFORMAT, "shape"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (,), }\n", 4, DD_EFORMAT, "shape"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }\n", 24, DD_EFORMAT, "tuple"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }\n", 24, DD_EFORMAT, NULL},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 20, DD_EFORMAT, "truncated"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 0, DD_EFORMAT, "truncated"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 28, DD_EFORMAT, "trailing"},
        {2, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", 5, DD_EFORMAT, "trailing"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }\n", 1, DD_EFORMAT, "trailing"},
    };
    char path[128];
    unsigned char data[256];
    rnd_bytes(data, sizeof data);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[32];
        snprintf(name, sizeof name, "bad%02zu.npy", c);
        mkpath(path, sizeof path, name);
        hand_npy(path, cases[c].major, cases[c].minor, cases[c].hdr, data, cases[c].ndata);
        expect_read_fail(path, cases[c].code, cases[c].why);
        unlink(path);
    }

    /* raw byte patterns the table cannot express (literal length without its NUL) */
#define WRITE_LIT(p, lit) th_write_bytes(p, lit, sizeof lit - 1)
    mkpath(path, sizeof path, "raw.npy");
    WRITE_LIT(path, "\x93NUMPX\x01\x00\x10\x00{}");
    expect_read_fail(path, DD_EFORMAT, "magic");
    WRITE_LIT(path, "PK\x03\x04 this is a zip file, not an array");
    expect_read_fail(path, DD_EFORMAT, "magic");
    WRITE_LIT(path, "\x93NUM");
    expect_read_fail(path, DD_EFORMAT, "magic");
    WRITE_LIT(path, "");
    expect_read_fail(path, DD_EFORMAT, "magic");
    WRITE_LIT(path, "\x93NUMPY\x02\x00\x10\x00"); /* v2 needs a 4-byte length */
    expect_read_fail(path, DD_EFORMAT, "preamble");
    WRITE_LIT(path, "\x93NUMPY\x01\x00\xe8\x03{'descr': '<f4'}"); /* header length 1000 */
    expect_read_fail(path, DD_EFORMAT, "beyond file size");
    WRITE_LIT(path, "\x93NUMPY\x02\x00\xff\xff\xff\xff{}"); /* header length 4 GiB */
    expect_read_fail(path, DD_EFORMAT, "beyond file size");
    static const char nul_hdr[] = "\x93NUMPY\x01\x00\x3c\x00"
                                  "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\0   \n" /* 60 bytes */
                                  "abcd";
    WRITE_LIT(path, nul_hdr);
#undef WRITE_LIT
    expect_read_fail(path, DD_EFORMAT, "NUL");
    unlink(path);

    /* i/o errors: missing file (strerror in the message), a directory */
    mkpath(path, sizeof path, "does-not-exist.npy");
    expect_read_fail(path, DD_EIO, strerror(ENOENT));
    expect_read_fail(th_dir, DD_EIO, NULL);

    /* NULL arguments */
    dd_npy a;
    dd_error e;
    assert_int_equal(dd_npy_read(NULL, &a, &e), DD_EINVAL);
    assert_true(is_zero(&a, sizeof a));
    assert_int_equal(dd_npy_read(path, NULL, &e), DD_EINVAL);
    assert_int_equal(dd_npy_read(path, NULL, NULL), DD_EINVAL); /* err may be NULL */
}

/* ---- writing ---------------------------------------------------------------------------------------------- */

/* Failed writes: bad arguments are DD_EINVAL; a missing directory and a rename onto a directory are DD_EIO naming
 * the path, and leave no file (temp or final) behind. */
static void test_write_errors(void **state) {
    char path[128];
    float x[6];
    for (int i = 0; i < 6; i++) x[i] = rnd_float();
    int64_t sh[9] = {2, 3, 1, 1, 1, 1, 1, 1, 1};
    dd_error e;
    int tmps, before = dir_entries(&tmps);

    mkpath(path, sizeof path, "no-such-dir/out.npy");
    memset(&e, 0, sizeof e);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, sh, x, &e), DD_EIO);
    assert_int_equal(e.code, DD_EIO);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, strerror(ENOENT)));
    assert_int_equal(dir_entries(&tmps), before);

    /* path is an existing directory: the temp file is written beside it, rename fails, the temp file goes */
    mkpath(path, sizeof path, "a-dir");
    assert_int_equal(mkdir(path, 0700), 0);
    before = dir_entries(&tmps);
    memset(&e, 0, sizeof e);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, sh, x, &e), DD_EIO);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(dir_entries(&tmps), before);
    assert_int_equal(tmps, 0);
    assert_int_equal(rmdir(path), 0);

    /* bad arguments */
    mkpath(path, sizeof path, "bad-args.npy");
    int64_t neg[2] = {2, -3}, huge[3] = {INT64_MAX, INT64_MAX, 2};
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 9, sh, x, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, -1, sh, x, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, neg, x, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 3, huge, x, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(path, (dd_npy_dtype)7, 2, sh, x, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, sh, NULL, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, NULL, x, &e), DD_EINVAL);
    assert_int_equal(dd_npy_write(NULL, DD_NPY_F32, 2, sh, x, &e), DD_EINVAL);
    assert_int_equal(access(path, F_OK), -1);
    int64_t empty[2] = {0, 3}; /* NULL data is fine for 0 elements */
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 2, empty, NULL, &e), DD_OK);
    dd_npy a;
    assert_int_equal(dd_npy_read(path, &a, &e), DD_OK);
    assert_int_equal(a.count, 0);
    dd_npy_free(&a);
    unlink(path);
}

/* Writing over an existing (larger, different) file replaces it completely. */
static void test_overwrite(void **state) {
    char path[128];
    mkpath(path, sizeof path, "over.npy");
    double big[1000];
    rnd_bytes(big, sizeof big);
    int64_t s1[2] = {10, 100}, s2[1] = {3};
    int32_t small[3] = {(int32_t)rnd64(), (int32_t)rnd64(), (int32_t)rnd64()};
    dd_error e;
    assert_int_equal(dd_npy_write(path, DD_NPY_F64, 2, s1, big, &e), DD_OK);
    assert_int_equal(dd_npy_write(path, DD_NPY_I32, 1, s2, small, &e), DD_OK);
    dd_npy a;
    assert_int_equal(dd_npy_read(path, &a, &e), DD_OK);
    assert_int_equal(a.dtype, DD_NPY_I32);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 3);
    assert_memory_equal(a.data, small, sizeof small);
    dd_npy_free(&a);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 128 + sizeof small); /* 10 + 57-byte dict + padding + newline = 128 */
    int tmps;
    dir_entries(&tmps);
    assert_int_equal(tmps, 0);
    unlink(path);
}

/* ---- conversions ------------------------------------------------------------------------------------------ */

static dd_npy mem_array(dd_npy_dtype t, int ndim, const int64_t *shape, void *data) {
    dd_npy a;
    memset(&a, 0, sizeof a);
    a.dtype = t, a.ndim = ndim, a.count = 1, a.data = data;
    for (int i = 0; i < ndim; i++) a.shape[i] = shape[i], a.count *= (size_t)shape[i];
    return a;
}

/* to_f32: f32 copied, f16 widened exactly, f64 narrowed; wildcard dims; exact messages for a wrong shape, ndim and
 * dtype; a finite f64 beyond float32 range is an error naming index and value; *out is NULL on every error. */
static void test_to_f32(void **state) {
    enum { N = 4, K = 37 };
    int64_t shape[2] = {N, K}, want_any[2] = {-1, K}, want_bad[2] = {-1, 2048};
    float f32[N * K], *y;
    uint16_t f16[N * K];
    double f64[N * K];
    for (int i = 0; i < N * K; i++) f32[i] = rnd_float(), f16[i] = (uint16_t)rnd64(), f64[i] = (double)rnd_float() / 3;
    dd_error e;
    dd_npy a = mem_array(DD_NPY_F32, 2, shape, f32);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_OK);
    assert_memory_equal(y, f32, sizeof f32);
    free(y);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, shape, &y, &e), DD_OK);
    free(y);

    a = mem_array(DD_NPY_F16, 2, shape, f16);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_OK);
    for (int i = 0; i < N * K; i++) {
        float w = dd_f16_to_f32(f16[i]);
        assert_memory_equal(&y[i], &w, 4); /* bitwise: NaN payloads and -0 included */
    }
    free(y);

    a = mem_array(DD_NPY_F64, 2, shape, f64);
    f64[5] = NAN, f64[6] = -INFINITY, f64[7] = 1e-300; /* passed through / flushed by the cast, not errors */
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_OK);
    for (int i = 0; i < N * K; i++)
        if (i != 5) assert_true(y[i] == (float)f64[i]);
    assert_true(isnan(y[5]));
    free(y);
    f64[9] = -1e300;
    y = (float *)&e;
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_EINVAL);
    assert_null(y);
    assert_non_null(strstr(e.msg, "h.npy (--hidden)"));
    assert_non_null(strstr(e.msg, "flat index 9"));
    assert_non_null(strstr(e.msg, "-1e+300"));

    /* shapes: the message from the brief, exactly */
    int64_t got[2] = {4, 1024};
    a = mem_array(DD_NPY_F32, 2, got, f32); /* data only needs to be non-NULL: the check fails first */
    y = (float *)&e;
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_bad, &y, &e), DD_EINVAL);
    assert_null(y);
    assert_string_equal(e.msg, "h.npy (--hidden): expected shape [N, 2048], got [4, 1024]");
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 1, want_bad, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "h.npy (--hidden): expected shape [N], got [4, 1024]");
    int64_t scalar_shape[1] = {0};
    dd_npy s = mem_array(DD_NPY_F32, 0, scalar_shape, f32);
    assert_int_equal(dd_npy_to_f32(&s, "x.npy", NULL, 1, want_bad, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "x.npy: expected shape [N], got []");
    assert_int_equal(dd_npy_to_f32(&s, "x.npy", NULL, 0, NULL, &y, &e), DD_OK); /* 0-d wanted and given */
    assert_true(y[0] == f32[0]);
    free(y);

    /* dtypes */
    a = mem_array(DD_NPY_I32, 2, shape, f32);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "h.npy (--hidden): dtype int32 not allowed, want float32, float16 or float64");
    a = mem_array(DD_NPY_I64, 2, shape, f64);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "dtype int64 not allowed"));
    assert_int_equal(dd_npy_to_f32(NULL, "h.npy", "--hidden", 2, want_any, &y, &e), DD_EINVAL);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, NULL, &e), DD_EINVAL);

    /* 0 elements: a non-NULL empty buffer */
    int64_t zero[2] = {0, K};
    a = mem_array(DD_NPY_F32, 2, zero, f32);
    assert_int_equal(dd_npy_to_f32(&a, "h.npy", "--hidden", 2, want_any, &y, &e), DD_OK);
    assert_non_null(y);
    free(y);
}

/* to_i32: i32 copied, i64 narrowed incl. both int32 limits; out-of-range values name the flat index and value. */
static void test_to_i32(void **state) {
    enum { N = 3, Q = 32 };
    int64_t shape[2] = {N, Q}, want[2] = {-1, Q}, want1[1] = {-1};
    int32_t i32[N * Q], *y;
    int64_t i64[N * Q];
    for (int i = 0; i < N * Q; i++) i32[i] = (int32_t)rnd64(), i64[i] = (int32_t)rnd64();
    i64[0] = INT32_MIN, i64[1] = INT32_MAX;
    dd_error e;
    dd_npy a = mem_array(DD_NPY_I32, 2, shape, i32);
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want, &y, &e), DD_OK);
    assert_memory_equal(y, i32, sizeof i32);
    free(y);
    a = mem_array(DD_NPY_I64, 2, shape, i64);
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want, &y, &e), DD_OK);
    for (int i = 0; i < N * Q; i++) assert_int_equal(y[i], i64[i]);
    free(y);

    int k = 1 + (int)(rnd64() % (N * Q - 1));
    i64[k] = (int64_t)INT32_MAX + 1;
    y = (int32_t *)&e;
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want, &y, &e), DD_EINVAL);
    assert_null(y);
    char msg[128];
    snprintf(msg, sizeof msg, "c.npy (--codes): value 2147483648 at flat index %d is outside int32 range", k);
    assert_string_equal(e.msg, msg);
    i64[k] = (int64_t)INT32_MIN - 1;
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want, &y, &e), DD_EINVAL);
    assert_non_null(strstr(e.msg, "-2147483649"));

    a = mem_array(DD_NPY_F32, 2, shape, i32);
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "c.npy (--codes): dtype float32 not allowed, want int32 or int64");
    a = mem_array(DD_NPY_I32, 2, shape, i32);
    assert_int_equal(dd_npy_to_i32(&a, "c0.npy", "--c0", 1, want1, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "c0.npy (--c0): expected shape [N], got [3, 32]");
    int64_t want_q[2] = {-1, 31};
    assert_int_equal(dd_npy_to_i32(&a, "c.npy", "--codes", 2, want_q, &y, &e), DD_EINVAL);
    assert_string_equal(e.msg, "c.npy (--codes): expected shape [N, 31], got [3, 32]");
}

/* ---- numpy interop ---------------------------------------------------------------------------------------- */

/* Files from numpy's own np.save / format.write_array (f4, f2, f8, i4, i8, 0-d, empty, v2, v3) read back to the
 * bits numpy holds; a Fortran-order file is rejected; and numpy loads files we wrote to the same values. */
static void test_numpy(void **state) {
    if (system("python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        print_message("test_numpy: skipped: python3 with numpy is not available\n");
        skip();
    }
    enum { A = 3, B = 5, C = 7, NI = 11 };
    float f[A * B * C];
    int32_t iv[NI];
    int64_t q[6];
    for (int i = 0; i < A * B * C; i++) f[i] = rnd_float();
    for (int i = 0; i < NI; i++) iv[i] = (int32_t)rnd64();
    for (int i = 0; i < 6; i++) q[i] = i < 3 ? (int32_t)rnd64() : (int64_t)rnd64(); /* in int32 range before index 3 */
    q[3] = (int64_t)1 << 40; /* surely outside int32 */
    char path[128];
    mkpath(path, sizeof path, "f.bin");
    th_write_bytes(path, f, sizeof f);
    mkpath(path, sizeof path, "i.bin");
    th_write_bytes(path, iv, sizeof iv);
    mkpath(path, sizeof path, "q.bin");
    th_write_bytes(path, q, sizeof q);
    dd_error e;
    int64_t s3[3] = {A, B, C};
    mkpath(path, sizeof path, "ours.npy");
    assert_int_equal(dd_npy_write(path, DD_NPY_F32, 3, s3, f, &e), DD_OK);
    mkpath(path, sizeof path, "ours0.npy");
    assert_int_equal(dd_npy_write(path, DD_NPY_I64, 0, NULL, &q[3], &e), DD_OK);

    static const char script[] =
        "import sys, numpy as np\n"
        "from numpy.lib import format as F\n"
        "d = sys.argv[1] + '/'\n"
        "f = np.fromfile(d + 'f.bin', dtype='<f4').reshape(3, 5, 7)\n"
        "i = np.fromfile(d + 'i.bin', dtype='<i4')\n"
        "q = np.fromfile(d + 'q.bin', dtype='<i8').reshape(2, 3)\n"
        "np.save(d + 'np_f4.npy', f)\n"
        "np.save(d + 'np_f2.npy', f.astype('<f2'))\n"
        "np.save(d + 'np_f8.npy', f.astype('<f8'))\n"
        "np.save(d + 'np_i4.npy', i)\n"
        "np.save(d + 'np_i8.npy', i.astype('<i8'))\n"
        "np.save(d + 'np_i8big.npy', q)\n"
        "np.save(d + 'np_scalar.npy', f[0, 0, 0])\n"
        "np.save(d + 'np_empty.npy', np.zeros((0, 3), '<f4'))\n"
        "np.save(d + 'np_fortran.npy', np.asfortranarray(f))\n"
        "for v in (2, 3):\n"
        "    with open(d + 'np_v%d.npy' % v, 'wb') as fh: F.write_array(fh, f, version=(v, 0))\n"
        "o = np.load(d + 'ours.npy')\n"
        "assert o.dtype == np.dtype('<f4') and o.shape == (3, 5, 7) and np.array_equal(o, f), 'ours.npy'\n"
        "o = np.load(d + 'ours0.npy')\n"
        "assert o.dtype == np.dtype('<i8') and o.shape == () and o == q[1, 0], 'ours0.npy'\n";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "python3 -c \"%s\" %s", script, th_dir);
    assert_int_equal(system(cmd), 0);

    static const struct { const char *name; dd_npy_dtype t; int ndim; int64_t shape[3]; } files[] = {
        {"np_f4.npy", DD_NPY_F32, 3, {A, B, C}}, {"np_f2.npy", DD_NPY_F16, 3, {A, B, C}},
        {"np_f8.npy", DD_NPY_F64, 3, {A, B, C}}, {"np_i4.npy", DD_NPY_I32, 1, {NI}},
        {"np_i8.npy", DD_NPY_I64, 1, {NI}},      {"np_i8big.npy", DD_NPY_I64, 2, {2, 3}},
        {"np_scalar.npy", DD_NPY_F32, 0, {0}},   {"np_empty.npy", DD_NPY_F32, 2, {0, 3}},
        {"np_v2.npy", DD_NPY_F32, 3, {A, B, C}}, {"np_v3.npy", DD_NPY_F32, 3, {A, B, C}},
    };
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        mkpath(path, sizeof path, files[k].name);
        dd_npy a;
        dd_status st = dd_npy_read(path, &a, &e);
        if (st != DD_OK) print_error("%s\n", e.msg);
        assert_int_equal(st, DD_OK);
        assert_int_equal(a.dtype, files[k].t);
        assert_int_equal(a.ndim, files[k].ndim);
        for (int i = 0; i < a.ndim; i++) assert_int_equal(a.shape[i], files[k].shape[i]);
        const char *n = files[k].name;
        float *y = NULL;
        int32_t *z = NULL;
        int64_t any3[3] = {-1, -1, -1};
        if (!strcmp(n, "np_f4.npy") || !strcmp(n, "np_v2.npy") || !strcmp(n, "np_v3.npy")) {
            assert_memory_equal(a.data, f, sizeof f);
        } else if (!strcmp(n, "np_f2.npy")) {
            const uint16_t *h = a.data;
            for (int i = 0; i < A * B * C; i++) assert_int_equal(h[i], dd_f32_to_f16(f[i])); /* both round to even */
            assert_int_equal(dd_npy_to_f32(&a, path, "--hidden", 3, any3, &y, &e), DD_OK);
            for (int i = 0; i < A * B * C; i++) assert_true(y[i] == dd_f16_to_f32(h[i]));
        } else if (!strcmp(n, "np_f8.npy")) {
            assert_int_equal(dd_npy_to_f32(&a, path, "--hidden", 3, any3, &y, &e), DD_OK);
            assert_memory_equal(y, f, sizeof f); /* f32 -> f64 -> f32 is exact */
        } else if (!strcmp(n, "np_i4.npy") || !strcmp(n, "np_i8.npy")) {
            assert_int_equal(dd_npy_to_i32(&a, path, "--c0", 1, any3, &z, &e), DD_OK);
            assert_memory_equal(z, iv, sizeof iv);
        } else if (!strcmp(n, "np_i8big.npy")) {
            assert_memory_equal(a.data, q, sizeof q);
            assert_int_equal(dd_npy_to_i32(&a, path, "--codes", 2, any3, &z, &e), DD_EINVAL);
            assert_non_null(strstr(e.msg, "1099511627776 at flat index 3"));
            assert_non_null(strstr(e.msg, path));
        } else if (!strcmp(n, "np_scalar.npy")) {
            assert_int_equal(a.count, 1);
            assert_memory_equal(a.data, f, 4);
        } else {
            assert_int_equal(a.count, 0);
        }
        free(y);
        free(z);
        dd_npy_free(&a);
    }
    mkpath(path, sizeof path, "np_fortran.npy");
    expect_read_fail(path, DD_EFORMAT, "fortran_order True");
}

/* ---- main ------------------------------------------------------------------------------------------------- */

static int setup(void **state) { return th_tmpdir("npy"); }

static int teardown(void **state) { return th_rm_rf(th_dir); }

int main(void) {
    th_seed_init("test_npy");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_handmade),  cmocka_unit_test(test_big_endian),  cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_write_errors), cmocka_unit_test(test_overwrite), cmocka_unit_test(test_to_f32),
        cmocka_unit_test(test_to_i32),    cmocka_unit_test(test_numpy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
