/* Tests of the safetensors container (src/model/safetensors.c, SPEC §4) as the loader meets it: every container rule
 * on hand-written headers (written byte by byte), what the container must accept (every dtype, scalars, zero-size
 * tensors, unpadded headers, MLX's misaligned data), and files that are not there or not regular files. Each
 * malformed file must fail with the right status, leave *out NULL, and name the file and the tensor or key at
 * fault (loader_util.h). Files live in a mkdtemp() directory that the group teardown removes; data are fresh
 * random each run (seed printed; DD_TEST_SEED=<n> replays). DD_TEST_VERBOSE=1 prints every loader message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "loader_util.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the container: hand-written headers ------------------------------------------------------------------ */

/* u64 header length (strlen(hdr) unless len >= 0), the header bytes, ndata random data bytes. */
static void raw_st(const char *path, const char *hdr, size_t ndata, int64_t len) {
    size_t hl = strlen(hdr), n = 8 + hl + ndata;
    uint8_t *b = malloc(n);
    assert_non_null(b);
    uint64_t l = len >= 0 ? (uint64_t)len : (uint64_t)hl;
    memcpy(b, &l, 8);
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (uint8_t)rnd64();
    th_write_bytes(path, b, n);
    free(b);
}

#define E(name, dt, shape, offs) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"
#define ALPHA E("alpha", "F32", "[1]", "[0,4]")

/* Every container rule of SPEC §4 (the reference crate's, plus duplicate keys): DD_EFORMAT, file and tensor
 * (or metadata key) named. */
static void test_container_errors(void **state) {
    static const struct { const char *hdr; size_t ndata; const char *also, *also2; } cases[] = {
        /* not JSON / not an object / bad JSON */
        {"hello world", 0, NULL, NULL},
        {"[1, 2]", 0, NULL, NULL},
        {"[{\"alpha\":{}}]", 0, NULL, NULL},
        {"\"{}\"", 0, NULL, NULL},
        {" {}", 0, NULL, NULL},
        {"{\"alpha\": ", 0, NULL, NULL},
        {"{} x", 0, NULL, NULL},
        {"{}{}", 0, NULL, NULL},
        {"{" ALPHA ",}", 4, NULL, NULL},
        {"{'alpha': 1}", 0, NULL, NULL},
        /* invalid UTF-8: a stray byte, an overlong NUL, a UTF-16 surrogate, a cut sequence, Latin-1 */
        {"{" E("al\xffpha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("al\xc0\x80pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("al\xed\xa0\x80pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{" E("alpha\xe2\x82", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        {"{\"__metadata__\":{\"k\":\"caf\xe9\"}}", 0, NULL, NULL},
        {"{" E("al\\u0000pha", "F32", "[1]", "[0,4]") "}", 4, NULL, NULL},
        /* duplicate keys: tensors, metadata, inside an entry */
        {"{" ALPHA "," E("alpha", "F32", "[1]", "[4,8]") "}", 8, "alpha", NULL},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, NULL, NULL},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, NULL},
        /* entries */
        {"{\"alpha\":5}", 0, "alpha", NULL},
        {"{\"alpha\":null}", 0, "alpha", NULL},
        {"{\"alpha\":[\"F32\",[1],[0,4]]}", 4, "alpha", NULL},
        {"{\"alpha\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "alpha", NULL},
        /* dtypes */
        {"{" E("alpha", "F33", "[1]", "[0,4]") "}", 4, "alpha", "F33"},
        {"{" E("alpha", "f32", "[1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "", "[1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        {"{\"alpha\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "alpha", NULL},
        /* shapes: negative, real, string, bool, null, nested, not an array */
        {"{" E("alpha", "F32", "[-1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1.0]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1.5]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1e0]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[\"1\"]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[true]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[null]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[[1]]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "1", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "null", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[2, -2]", "[0,16]") "}", 16, "alpha", NULL},
        {"{" E("alpha", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[18446744073709551616]", "[0,4]") "}", 4, NULL, NULL},
        /* data_offsets: arity, negative, real, string, end < begin, not an array */
        {"{" E("alpha", "F32", "[1]", "[0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,4,8]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[-4,0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,-4]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0.0,4.0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[\"0\",\"4\"]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,true]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[0]", "[4,0]") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[8,4]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "4") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "{\"begin\":0,\"end\":4}") "}", 4, "alpha", NULL},
        {"{" E("alpha", "F32", "[1]", "[0,18446744073709551616]") "}", 4, NULL, NULL},
        /* shape x dtype size != span */
        {"{" E("alpha", "F32", "[3]", "[0,8]") "}", 8, "alpha", NULL},
        {"{" E("alpha", "F16", "[2,2]", "[0,16]") "}", 16, "alpha", NULL},
        {"{" E("alpha", "U8", "[]", "[0,0]") "}", 0, "alpha", NULL},
        {"{" E("alpha", "F32", "[0]", "[0,4]") "}", 4, "alpha", NULL},
        /* layout: gap, overlap, same region, not starting at 0, trailing bytes, truncated */
        {"{" ALPHA "," E("beta", "F32", "[1]", "[8,12]") "}", 12, "beta", "gap"},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "," E("beta", "F32", "[2]", "[4,12]") "}", 12, "beta", "overlap"},
        {"{" ALPHA "," E("beta", "F32", "[1]", "[0,4]") "}", 4, "overlap", NULL},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "," E("beta", "F32", "[0]", "[4,4]") "}", 8, "beta", NULL},
        {"{" E("alpha", "F32", "[1]", "[4,8]") "}", 8, "alpha", "gap"},
        {"{" ALPHA "}", 5, "trailing", NULL},
        {"{}", 1, "trailing", NULL},
        {"{" E("alpha", "F32", "[2]", "[0,8]") "}", 7, "alpha", NULL},
        {"{" ALPHA "," E("beta", "F32", "[1]", "[4,8]") "}", 4, "beta", NULL},
        /* __metadata__: not an object, non-string values */
        {"{\"__metadata__\":\"x\"}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":[]}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":[\"a\",\"b\"]}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":5}", 0, "__metadata__", NULL},
        {"{\"__metadata__\":{\"kk\":1}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":null}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":true}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":{\"a\":\"b\"}}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"kk\":[\"a\"]}}", 0, "kk", NULL},
        {"{\"__metadata__\":{\"ok\":\"a\",\"kk\":2.5}," ALPHA "}", 4, "kk", NULL},
        /* shape x dtype overflowing size_t */
        {"{" E("alpha", "F32", "[4611686018427387904, 8]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "F32", "[4611686018427387904]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "U8", "[4294967296, 4294967296]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "F64", "[2305843009213693952]", "[0,0]") "}", 0, "alpha", "overflow"},
        {"{" E("alpha", "BOOL", "[2,2,2,2,2,2,2,2]", "[0,256]") "," E("beta", "I64",
                                                                         "[9223372036854775807, 2]", "[256,256]") "}",
         256, "beta", "overflow"},
    };
    char path[128];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TH_PATH(path, "bad_%02zu.safetensors", i);
        raw_st(path, cases[i].hdr, cases[i].ndata, -1);
        expect_fail(path, DD_EFORMAT, cases[i].also);
        if (cases[i].also2) expect_fail(path, DD_EFORMAT, cases[i].also2);
        unlink(path);
    }

    /* files too short for the length prefix, including the empty file */
    for (size_t n = 0; n < 8; n++) {
        TH_PATH(path, "short_%zu.safetensors", n);
        th_write_bytes(path, "\x02\0\0\0\0\0\0", n);
        expect_fail(path, DD_EFORMAT, "too short");
        unlink(path);
    }
    /* header length: 0, 1, over the 100 MB limit (file small), 2^64-1, past the end of the file by one byte */
    static const struct { const char *hdr; int64_t len; size_t ndata; const char *also; } lens[] = {
        {"", 0, 0, NULL},
        {"{}", 0, 2, NULL},
        {"{}", 1, 1, NULL},
        {"{} ", 100000001, 16, "100 MB"},
        {"{} ", (int64_t)DD_ST_MAX_HEADER + 1, 0, "100 MB"},
        {"{} ", -2 /* all ones */, 0, "100 MB"},
        {"{}", 3, 0, "past the end"},
        {"{" ALPHA "}", (int64_t)strlen("{" ALPHA "}") + 5, 4, "past the end"},
        {"{" ALPHA "}", 5, 4, NULL}, /* length cuts the JSON short */
    };
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        TH_PATH(path, "len_%zu.safetensors", i);
        if (lens[i].len == -2) {
            raw_st(path, lens[i].hdr, lens[i].ndata, 0);
            FILE *f = fopen(path, "r+b");
            assert_non_null(f);
            assert_int_equal(fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f), 8);
            fclose(f);
        } else {
            raw_st(path, lens[i].hdr, lens[i].ndata, lens[i].len);
        }
        expect_fail(path, DD_EFORMAT, lens[i].also);
        unlink(path);
    }
    /* a real model file cut short by one byte, or with one byte appended */
    size_t n;
    uint8_t *img = th_slurp(lt_base[GPT][Q8], &n);
    TH_PATH(path, "cut.safetensors");
    th_write_bytes(path, img, n - 1);
    expect_fail(path, DD_EFORMAT, NULL);
    img = realloc(img, n + 1);
    assert_non_null(img);
    img[n] = 0;
    th_write_bytes(path, img, n + 1);
    expect_fail(path, DD_EFORMAT, "trailing");
    free(img);
    unlink(path);
}

/* What the container must accept: every dtype, scalars, zero-size tensors, unpadded headers (so data sit at odd
 * addresses), tensors listed out of offset order, metadata; the loader then says what is missing (DD_EMODEL). */
static void test_container_valid(void **state) {
    static const char *const dts[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                      "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
    char hdr[4096], path[128];
    int k = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"\"}");
    size_t off = 0;
    /* listed in reverse offset order */
    size_t begins[15], sizes[15];
    for (int i = 0; i < 15; i++) {
        sizes[i] = dd_st_dtype_size((dd_st_dtype)i) * 3;
        begins[i] = off;
        off += sizes[i];
    }
    for (int i = 14; i >= 0; i--)
        k += snprintf(hdr + k, sizeof hdr - (size_t)k, ",\"t_%s\":{\"data_offsets\":[%zu,%zu],\"shape\":[3],\"dtype\":\"%s\"}",
                      dts[i], begins[i], begins[i] + sizes[i], dts[i]);
    k += snprintf(hdr + k, sizeof hdr - (size_t)k,
                  ",\"scalar\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[%zu,%zu]}"
                  ",\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[%zu,%zu]}"
                  ",\"zero_huge\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4611686018427387904],"
                  "\"data_offsets\":[%zu,%zu]}}",
                  off, off + 8, off + 8, off + 8, off + 8, off + 8);
    assert_true((size_t)k < sizeof hdr);
    if (k % 2 == 0) { /* make the header length odd: data start misaligned */
        memmove(hdr + k, hdr + k - 1, 2);
        hdr[k - 1] = ' ';
        k++;
    }
    TH_PATH(path, "valid_all.safetensors");
    raw_st(path, hdr, off + 8, -1);
    dd_st_file f;
    dd_error e = {0};
    dd_status st = dd_st_open(&f, path, &e);
    if (st) print_error("%s\n", e.msg);
    assert_int_equal(st, DD_OK);
    assert_int_equal(f.n, 18);
    const uint8_t *data = f.map + 8 + k;
    for (int i = 0; i < 15; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t_%s", dts[i]);
        const dd_st_tensor *t = dd_st_find(&f, nm);
        assert_non_null(t);
        assert_int_equal(t->dtype, i);
        assert_string_equal(dd_st_dtype_name(t->dtype), dts[i]);
        assert_int_equal(t->ndim, 1);
        assert_int_equal(t->shape[0], 3);
        assert_int_equal(t->begin, begins[i]);
        assert_int_equal(t->end, begins[i] + sizes[i]);
        assert_ptr_equal(t->data, data + begins[i]);
    }
    const dd_st_tensor *t = dd_st_find(&f, "scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->end - t->begin, 8);
    assert_int_equal((uintptr_t)data & 1, 1); /* the data section starts at an odd address */
    assert_non_null(dd_st_find(&f, "empty"));
    assert_non_null(dd_st_find(&f, "zero_huge"));
    assert_null(dd_st_find(&f, "t_F31"));
    assert_string_equal(dd_st_meta(&f, "format"), "pt");
    assert_string_equal(dd_st_meta(&f, "x"), "");
    assert_null(dd_st_meta(&f, "depthdec.config"));
    dd_st_close(&f);
    expect_fail(path, DD_EMODEL, "config");

    /* the smallest valid container */
    TH_PATH(path, "valid_empty.safetensors");
    raw_st(path, "{}", 0, -1);
    assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
    assert_int_equal(f.n, 0);
    dd_st_close(&f);
    raw_st(path, "{}      ", 0, -1); /* space padding, as the reference writer pads */
    assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
    dd_st_close(&f);
    expect_fail(path, DD_EMODEL, "config");
    /* "__metadata__": null is no metadata (the reference crate's Option; MLX's Module.save_weights writes it) */
    raw_st(path, "{\"__metadata__\":null}", 0, -1);
    assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
    assert_int_equal(f.n, 0);
    assert_null(dd_st_meta(&f, "depthdec.config"));
    dd_st_close(&f);
}

/* ---- files that are not there ----------------------------------------------------------------------------- */

static void test_missing_files(void **state) {
    char path[256];
    TH_PATH(path, "nope.safetensors");
    expect_fail(path, DD_EIO, "No such file");
    TH_PATH(path, "no/such/dir/model.safetensors");
    expect_fail(path, DD_EIO, NULL);
    /* a directory without config.json */
    TH_PATH(path, "emptydir");
    mkdir_ok(path);
    expect_fail(path, DD_EIO, "config.json");
    /* a directory with a config but no weights */
    TH_PATH(path, "emptydir/config.json");
    th_write_bytes(path, "{\"model_type\":\"csm\",\"depth_decoder_config\":{\"num_codebooks\":4,\"vocab_size\":8,"
                      "\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":2,\"head_dim\":4,\"backbone_hidden_size\":8}}",
                strlen("{\"model_type\":\"csm\",\"depth_decoder_config\":{\"num_codebooks\":4,\"vocab_size\":8,"
                       "\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                       "\"num_attention_heads\":2,\"head_dim\":4,\"backbone_hidden_size\":8}}"));
    TH_PATH(path, "emptydir");
    expect_fail(path, DD_EIO, "model.safetensors");
    /* not regular files: /dev/null, a FIFO (must not block waiting for a writer) */
    expect_fail("/dev/null", DD_EIO, NULL);
    TH_PATH(path, "fifo.safetensors");
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(30); /* a hang kills the test binary rather than the CI job */
    expect_fail(path, DD_EIO, NULL);
    TH_PATH(path, "fifodir");
    mkdir_ok(path);
    TH_PATH(path, "fifodir/config.json");
    assert_int_equal(mkfifo(path, 0600), 0);
    TH_PATH(path, "fifodir");
    expect_fail(path, DD_EIO, "config.json");
    alarm(0);
    /* bad arguments */
    dd_model *m = (dd_model *)1;
    dd_error e = {0};
    assert_int_equal(dd_model_load(&m, "", &e), DD_EINVAL);
    assert_null(m);
    m = (dd_model *)1;
    assert_int_equal(dd_model_load(&m, NULL, &e), DD_EINVAL);
    assert_null(m);
    assert_int_equal(dd_model_load(NULL, lt_base[GPT][F32], &e), DD_EINVAL);
    assert_int_equal(e.code, DD_EINVAL);
}

/* ---- MLX misaligned data ---------------------------------------------------------------------------------- */

/* A 1-byte U8 tensor first puts every later tensor at an odd offset (MLX writes unpadded headers): the model
 * loads, ignores the pad, and scores bitwise like the aligned file, for every weight type. */
static void test_misaligned(void **state) {
    char path[128];
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 5; w++) {
            tset *ts = ts_load(lt_base[k][w]);
            ts_putf(ts, "aaa.pad", DD_ST_U8, 1, (int64_t[]){1}, 0, 0, 1);
            TH_PATH(path, "misaligned_%d_%d.safetensors", k, w);
            ts_write(ts, path);
            dd_st_file f;
            dd_error e = {0};
            assert_int_equal(dd_st_open(&f, path, &e), DD_OK);
            for (int i = 0; i < f.n; i++) {
                if (strcmp(f.t[i].name, "aaa.pad") == 0) continue;
                assert_int_equal(f.t[i].begin & 1, 1);
                assert_int_equal((uintptr_t)f.t[i].data & 1, 1);
            }
            dd_st_close(&f);
            dd_model *a = load_ok(lt_base[k][w]), *b = load_ok(path);
            cfg_equal(dd_model_config(a), dd_model_config(b));
            assert_int_equal(dd_model_tensor_count(a), dd_model_tensor_count(b));
            expect_same_scores(a, b);
            dd_model_free(a);
            dd_model_free(b);
            ts_free(ts);
            unlink(path);
        }
}

/* ---- main ------------------------------------------------------------------------------------------------- */

int main(void) {
    th_seed_init("test_safetensors");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_container_errors),
        cmocka_unit_test(test_container_valid),
        cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_misaligned),
    };
    return cmocka_run_group_tests(tests, lt_setup_bases, lt_teardown);
}
