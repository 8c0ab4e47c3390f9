/* depthdec._ext — the CPython binding of include/depthdec.h: a thin layer, like the CLI.
 *
 * The Python side (__init__.py) validates and converts every input with numpy (shape, dtype, finiteness, range,
 * C-contiguity) and hands this module plain contiguous buffers; this module re-checks the buffer sizes (so a bad
 * call from Python cannot make the library read or write out of bounds), splits the rows into batches of at most
 * max_batch, and calls the library with the GIL released. It is compiled against the same header and linked with
 * the same libdepthdec.a that `make lib` builds, so structure layouts cannot drift from the library's.
 *
 * Handles are capsules:
 *   "depthdec.model"    -> dd_model *           (freed when the capsule dies)
 *   "depthdec.decoder"  -> struct py_decoder *  (holds a reference to the model capsule: the model outlives it)
 * Errors: library statuses are raised as the exception type the package registers with set_error_type(), called
 * as Type(message, code). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "depthdec.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000 /* Py_NewRef arrived in 3.10 */
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif

/* Row counts whose buffer sizes could overflow Py_ssize_t are refused before any size is computed. */
static int rows_ok(Py_ssize_t n, const dd_config *c) {
    Py_ssize_t per_row = ((Py_ssize_t)c->levels * c->codebook_size + c->input_dim + c->levels) * 8;
    return n >= 0 && n <= PY_SSIZE_T_MAX / per_row;
}

static PyObject *error_type; /* depthdec.Error, registered at import; RuntimeError until then */

static PyObject *raise_status(dd_status code, const char *msg) {
    PyObject *type = error_type ? error_type : PyExc_RuntimeError;
    /* messages may carry file names in any byte encoding: decode them as the file system would */
    PyObject *m = PyUnicode_DecodeFSDefault(msg);
    if (!m) return NULL;
    PyObject *exc = PyObject_CallFunction(type, "Oi", m, (int)code);
    Py_DECREF(m);
    if (!exc) return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_err(const dd_error *e) { return raise_status(e->code, e->msg); }

static PyObject *set_error_type(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyType_Check(arg) || !PyType_IsSubtype((PyTypeObject *)arg, (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "set_error_type: want an Exception subclass");
        return NULL;
    }
    Py_INCREF(arg);
    Py_XSETREF(error_type, arg);
    Py_RETURN_NONE;
}

/* ---- model ------------------------------------------------------------------------------------------------ */

#define MODEL_CAPSULE "depthdec.model"
#define DECODER_CAPSULE "depthdec.decoder"

static void model_capsule_free(PyObject *cap) {
    dd_model *m = PyCapsule_GetPointer(cap, MODEL_CAPSULE);
    dd_model_free(m);
}

static dd_model *get_model(PyObject *cap) { return PyCapsule_GetPointer(cap, MODEL_CAPSULE); }

static PyObject *wrap_model(dd_model *m) {
    PyObject *cap = PyCapsule_New(m, MODEL_CAPSULE, model_capsule_free);
    if (!cap) dd_model_free(m);
    return cap;
}

/* model_load(path) -> capsule. path: str, bytes or os.PathLike. */
static PyObject *model_load(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path = NULL;
    if (!PyArg_ParseTuple(args, "O&:model_load", PyUnicode_FSConverter, &path)) return NULL;
    dd_model *m = NULL;
    dd_error e;
    dd_status st;
    const char *p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    st = dd_model_load(&m, p, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (st) return raise_err(&e);
    return wrap_model(m);
}

static int parse_dtype(const char *name, dd_dtype *out) {
    static const dd_dtype all[] = {DD_F32, DD_F16, DD_BF16, DD_Q8, DD_Q4};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(name, dd_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

/* model_synthetic(kind, weights, seed) -> capsule. */
static PyObject *model_synthetic(PyObject *self, PyObject *args) {
    (void)self;
    const char *kind, *weights;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "ssK:model_synthetic", &kind, &weights, &seed)) return NULL;
    dd_dtype w;
    if (!parse_dtype(weights, &w)) {
        char msg[160];
        snprintf(msg, sizeof msg, "weights '%.40s': want f32, f16, bf16, q8 or q4", weights);
        return raise_status(DD_EINVAL, msg);
    }
    dd_model *m = NULL;
    dd_error e;
    dd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dd_model_synthetic(&m, kind, w, (uint64_t)seed, &e);
    Py_END_ALLOW_THREADS
    if (st) return raise_err(&e);
    return wrap_model(m);
}

/* model_from_tensors(config_json, [(name, dtype, shape, buffer), ...]) -> capsule (dd_model_from_tensors).
 * dtype "f32" / "f16" / "bf16"; shape a tuple of ints; buffer any C-contiguous object of the buffer protocol
 * whose size is prod(shape) * element size (bf16 as 2-byte words). The library copies what it uses. */
static PyObject *model_from_tensors(PyObject *self, PyObject *args) {
    (void)self;
    const char *cfg;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "sO:model_from_tensors", &cfg, &list)) return NULL;
    /* a tuple of our own: its items (and so the names and buffers) stay alive while the GIL is released */
    PyObject *seq = PySequence_Tuple(list);
    if (!seq) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    dd_tensor_view *v = PyMem_Calloc((size_t)(n ? n : 1), sizeof *v);
    Py_buffer *bufs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *bufs);
    Py_ssize_t got = 0; /* buffers held */
    PyObject *ret = NULL;
    if (!v || !bufs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(seq, i), *shape, *buf;
        const char *name, *dt;
        if (!PyTuple_Check(it) || !PyArg_ParseTuple(it, "ssOO", &name, &dt, &shape, &buf)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "model_from_tensors: items are 4-tuples");
            goto done;
        }
        if (!parse_dtype(dt, &v[i].dtype) || v[i].dtype > DD_BF16) {
            char msg[320];
            snprintf(msg, sizeof msg, "tensors: tensor '%.200s': dtype '%.20s' (want f32, f16 or bf16)", name, dt);
            raise_status(DD_EINVAL, msg);
            goto done;
        }
        v[i].name = name; /* borrowed from the tuple, which seq keeps alive */
        if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > DD_TENSOR_MAX_DIMS) {
            PyErr_Format(PyExc_TypeError, "model_from_tensors: '%s': shape must be a tuple of at most %d ints", name,
                         DD_TENSOR_MAX_DIMS);
            goto done;
        }
        v[i].ndim = (int)PyTuple_GET_SIZE(shape);
        Py_ssize_t want = dt[0] == 'f' && dt[1] == '3' ? 4 : 2;
        for (int d = 0; d < v[i].ndim; d++) {
            long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            if (x == -1 && PyErr_Occurred()) goto done;
            if (x < 0 || (x > 0 && want > PY_SSIZE_T_MAX / x)) {
                PyErr_Format(PyExc_ValueError, "model_from_tensors: '%s': shape[%d] = %lld", name, d, x);
                goto done;
            }
            v[i].shape[d] = x;
            want *= (Py_ssize_t)x;
        }
        if (PyObject_GetBuffer(buf, &bufs[i], PyBUF_C_CONTIGUOUS) != 0) goto done;
        got = i + 1;
        if (bufs[i].len != want) {
            PyErr_Format(PyExc_ValueError, "model_from_tensors: '%s': buffer of %zd bytes, shape and dtype need %zd",
                         name, bufs[i].len, want);
            goto done;
        }
        v[i].data = bufs[i].buf;
    }
    dd_model *m = NULL;
    dd_error e;
    dd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dd_model_from_tensors(&m, cfg, v, (size_t)n, &e);
    Py_END_ALLOW_THREADS
    if (st) raise_err(&e);
    else ret = wrap_model(m);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free(v);
    Py_DECREF(seq);
    return ret;
}

static int dict_set(PyObject *d, const char *k, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

/* model_config(capsule) -> dict with every dd_config field (rope and quantization nested as in the native JSON). */
static PyObject *model_config(PyObject *self, PyObject *cap) {
    (void)self;
    dd_model *m = get_model(cap);
    if (!m) return NULL;
    const dd_config *c = dd_model_config(m);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int bad = 0;
    bad |= dict_set(d, "block", PyUnicode_FromString(c->block == DD_BLOCK_LLAMA ? "llama" : "gpt"));
    bad |= dict_set(d, "levels", PyLong_FromLong(c->levels));
    bad |= dict_set(d, "codebook_size", PyLong_FromLong(c->codebook_size));
    bad |= dict_set(d, "input_dim", PyLong_FromLong(c->input_dim));
    bad |= dict_set(d, "dim", PyLong_FromLong(c->dim));
    bad |= dict_set(d, "layers", PyLong_FromLong(c->layers));
    bad |= dict_set(d, "heads", PyLong_FromLong(c->heads));
    bad |= dict_set(d, "kv_heads", PyLong_FromLong(c->kv_heads));
    bad |= dict_set(d, "head_dim", PyLong_FromLong(c->head_dim));
    bad |= dict_set(d, "ffn_dim", PyLong_FromLong(c->ffn_dim));
    bad |= dict_set(d, "norm_eps", PyFloat_FromDouble((double)c->norm_eps));
    if (c->has_rope) {
        PyObject *scaling;
        if (c->rope_scaling)
            scaling = Py_BuildValue("{s:s,s:d,s:d,s:d,s:d}", "rope_type", "llama3", "factor", c->rope_factor,
                                    "low_freq_factor", c->rope_low_freq_factor, "high_freq_factor",
                                    c->rope_high_freq_factor, "original_max_position_embeddings",
                                    c->rope_original_max_pos);
        else
            scaling = Py_NewRef(Py_None);
        bad |= dict_set(d, "rope", scaling ? Py_BuildValue("{s:d,s:N}", "theta", c->rope_theta, "scaling", scaling)
                                           : NULL);
    } else {
        bad |= dict_set(d, "rope", Py_NewRef(Py_None));
    }
    if (c->quant_bits)
        bad |= dict_set(d, "quantization", Py_BuildValue("{s:i,s:i,s:s}", "bits", c->quant_bits, "group_size",
                                                         c->quant_group, "mode", "affine"));
    else
        bad |= dict_set(d, "quantization", Py_NewRef(Py_None));
    bad |= dict_set(d, "weight_type", PyUnicode_FromString(dd_dtype_name(c->weight_type)));
    bad |= dict_set(d, "has_head0", PyBool_FromLong(c->has_head0));
    bad |= dict_set(d, "has_in_proj", PyBool_FromLong(c->has_in_proj));
    bad |= dict_set(d, "has_pos", PyBool_FromLong(c->has_pos));
    bad |= dict_set(d, "embed_in_input_space", PyBool_FromLong(c->embed_in_input_space));
    bad |= dict_set(d, "has_qk_norm", PyBool_FromLong(c->has_qk_norm));
    bad |= dict_set(d, "per_position", PyBool_FromLong(c->per_position));
    bad |= dict_set(d, "text_vocab", PyLong_FromLong(c->text_vocab));
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* model_info(capsule) -> (tensor_count, source, weight_bytes_per_frame, weight_bytes) */
static PyObject *model_info(PyObject *self, PyObject *cap) {
    (void)self;
    dd_model *m = get_model(cap);
    if (!m) return NULL;
    PyObject *src = PyUnicode_DecodeFSDefault(dd_model_source(m));
    if (!src) return NULL;
    return Py_BuildValue("(iNKK)", dd_model_tensor_count(m), src,
                         (unsigned long long)dd_model_weight_bytes_per_frame(m),
                         (unsigned long long)dd_model_weight_bytes(m));
}

/* ---- decoder ---------------------------------------------------------------------------------------------- */

struct py_decoder {
    dd_decoder *d;   /* NULL once closed */
    PyObject *model; /* the model capsule, kept alive while the decoder exists */
    const dd_config *cfg;
};

static void decoder_capsule_free(PyObject *cap) {
    struct py_decoder *pd = PyCapsule_GetPointer(cap, DECODER_CAPSULE);
    if (!pd) return;
    dd_decoder_free(pd->d);
    Py_XDECREF(pd->model);
    PyMem_Free(pd);
}

static struct py_decoder *get_decoder(PyObject *cap) {
    struct py_decoder *pd = PyCapsule_GetPointer(cap, DECODER_CAPSULE);
    if (pd && !pd->d) {
        raise_status(DD_EINVAL, "decoder is closed");
        return NULL;
    }
    return pd;
}

/* DD_EINVAL "backend 'NAME': want auto, ref, cpu or cuda", the names from the library's backend table. */
static PyObject *raise_bad_backend(const char *name) {
    char msg[300];
    size_t len = (size_t)snprintf(msg, sizeof msg, "backend '%.40s': want auto", name);
    for (int i = 0, n = dd_backend_count(); i < n && len < sizeof msg; i++)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", i == n - 1 ? " or " : ", ",
                                dd_backend_name(dd_backend_at(i)));
    return raise_status(DD_EINVAL, msg);
}

/* decoder_create(model_capsule, backend, max_batch, threads) -> capsule */
static PyObject *decoder_create(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *mcap;
    const char *backend;
    int max_batch, threads;
    if (!PyArg_ParseTuple(args, "Osii:decoder_create", &mcap, &backend, &max_batch, &threads)) return NULL;
    dd_model *m = get_model(mcap);
    if (!m) return NULL;
    dd_decoder_params p = dd_decoder_default_params();
    if (dd_backend_parse(backend, &p.backend)) return raise_bad_backend(backend);
    p.max_batch = max_batch;
    p.threads = threads;
    dd_decoder *d = NULL;
    dd_error e;
    dd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dd_decoder_create(&d, m, &p, &e);
    Py_END_ALLOW_THREADS
    if (st) return raise_err(&e);
    struct py_decoder *pd = PyMem_Malloc(sizeof *pd);
    if (!pd) {
        dd_decoder_free(d);
        return PyErr_NoMemory();
    }
    pd->d = d;
    pd->model = Py_NewRef(mcap);
    pd->cfg = dd_model_config(m);
    PyObject *cap = PyCapsule_New(pd, DECODER_CAPSULE, decoder_capsule_free);
    if (!cap) {
        dd_decoder_free(d);
        Py_DECREF(pd->model);
        PyMem_Free(pd);
    }
    return cap;
}

/* decoder_info(capsule) -> (backend name, max_batch) */
static PyObject *decoder_info(PyObject *self, PyObject *cap) {
    (void)self;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    return Py_BuildValue("(si)", dd_backend_name(dd_decoder_backend(pd->d)), dd_decoder_max_batch(pd->d));
}

/* decoder_close(capsule): frees the decoder now (the capsule stays, unusable). Idempotent. */
static PyObject *decoder_close(PyObject *self, PyObject *cap) {
    (void)self;
    struct py_decoder *pd = PyCapsule_GetPointer(cap, DECODER_CAPSULE);
    if (!pd) return NULL;
    dd_decoder_free(pd->d);
    pd->d = NULL;
    Py_RETURN_NONE;
}

/* A C-contiguous buffer of exactly `count` items of `itemsize` bytes (writable when asked). */
static int get_buf(PyObject *obj, Py_buffer *b, Py_ssize_t count, Py_ssize_t itemsize, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (b->itemsize != itemsize || b->len != count * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes (item %zd), want %zd items of %zd bytes", what,
                     b->len, b->itemsize, count, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* input_check(model, what, kind, itemsize, shape tuple, rows, label) -> None: dd_input_check, the dtype/shape rule
 * the CLI applies to its .npy files. what: 0 hidden, 1 c0, 2 codes; kind: numpy's dtype.kind (one character). */
static PyObject *input_check(PyObject *self, PyObject *args) {
    PyObject *cap, *shape;
    int what, itemsize;
    const char *kind, *label;
    long long rows;
    if (!PyArg_ParseTuple(args, "OisiO!Ls", &cap, &what, &kind, &itemsize, &PyTuple_Type, &shape, &rows, &label))
        return NULL;
    dd_model *m = get_model(cap);
    if (!m) return NULL;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    int64_t dims[32];
    if (nd > 32) nd = 32; /* more dimensions than any input has: the check refuses it by ndim anyway */
    for (Py_ssize_t i = 0; i < nd; i++) {
        dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (dims[i] == -1 && PyErr_Occurred()) return NULL;
    }
    dd_error e;
    if (dd_input_check(m, (dd_input)what, kind[0], itemsize, (int)nd, dims, rows, label, &e)) return raise_err(&e);
    Py_RETURN_NONE;
}

/* Rows [r, r + k) failed: name the caller's rows, as the CLI does, when they differ from the batch's. */
static PyObject *raise_rows(const dd_error *e, Py_ssize_t r, int k, Py_ssize_t n) {
    if (r == 0 && k == n) return raise_err(e);
    char msg[640];
    snprintf(msg, sizeof msg, "rows %zd..%zd: %s", r, r + k - 1, e->msg);
    return raise_status(e->code, msg);
}

/* The arrays of one decode or score call (host or device memory), and one batch of it: rows [r, r + k). */
struct call {
    struct py_decoder *pd;
    int device; /* dd_*_device on `stream` */
    void *stream;
    const float *h;
    const int32_t *codes; /* c0 [n] (decode) or codes [n, Q] (score) */
    const int32_t *text;  /* [n] (Moshi) or NULL; host calls only */
    const uint64_t *seeds, *frames;
    dd_sampling sp;
    int32_t *out;
    float *lg, *l0;
};

static dd_status decode_rows(const struct call *a, Py_ssize_t r, int k, dd_error *e) {
    const dd_config *c = a->pd->cfg;
    const float *h = a->h + r * c->input_dim;
    const int32_t *c0 = a->codes ? a->codes + r : NULL;
    int32_t *out = a->out + r * c->levels;
    if (a->device)
        return dd_decode_device(a->pd->d, k, h, c0, a->seeds + r, a->frames + r, &a->sp, out, a->stream, e);
    return dd_decode_text(a->pd->d, k, h, a->text ? a->text + r : NULL, c0, a->seeds + r, a->frames + r, &a->sp, out,
                          e);
}

static dd_status score_rows(const struct call *a, Py_ssize_t r, int k, dd_error *e) {
    const dd_config *c = a->pd->cfg;
    const Py_ssize_t Q = c->levels, V = c->codebook_size;
    const float *h = a->h + r * c->input_dim;
    float *lg = a->lg + r * (Q - 1) * V, *l0 = a->l0 ? a->l0 + r * V : NULL;
    if (a->device) return dd_score_device(a->pd->d, k, h, a->codes + r * Q, lg, l0, a->stream, e);
    return dd_score_text(a->pd->d, k, h, a->text ? a->text + r : NULL, a->codes + r * Q, lg, l0, e);
}

/* Rows [0, n) in batches of at most max_batch with the GIL released; 0, or -1 with the error raised (naming the
 * caller's rows). */
static int run_rows(const struct call *a, Py_ssize_t n,
                    dd_status (*rows)(const struct call *, Py_ssize_t, int, dd_error *)) {
    const int batch = dd_decoder_max_batch(a->pd->d);
    dd_error e = {0};
    dd_status st = DD_OK;
    Py_ssize_t r = 0;
    int k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; r < n; r += k) {
        k = (int)(n - r < batch ? n - r : batch);
        if ((st = rows(a, r, k, &e))) break;
    }
    Py_END_ALLOW_THREADS
    if (st) {
        raise_rows(&e, r, k, n);
        return -1;
    }
    return 0;
}

/* decode(dec, n, hidden f32[n*I], c0 i32[n] | None, seeds u64[n], frames u64[n], temperature, top_k,
 *        codes_out i32[n*Q], text i32[n] | None) -> None. Rows are split into batches of max_batch; the GIL is
 *        released meanwhile. */
static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ho, *c0o, *so, *fo, *outo, *to = Py_None;
    Py_ssize_t n;
    float temperature;
    int top_k;
    if (!PyArg_ParseTuple(args, "OnOOOOfiO|O:decode", &cap, &n, &ho, &c0o, &so, &fo, &temperature, &top_k, &outo, &to))
        return NULL;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    const dd_config *c = pd->cfg;
    if (!rows_ok(n, c)) return raise_status(DD_EINVAL, "decode: row count out of range");
    Py_buffer h, c0 = {0}, s, f, out;
    if (get_buf(ho, &h, n * c->input_dim, 4, 0, "hidden") < 0) return NULL;
    int have_c0 = c0o != Py_None, ok = 0;
    if (have_c0 && get_buf(c0o, &c0, n, 4, 0, "c0") < 0) goto rel_h;
    if (get_buf(so, &s, n, 8, 0, "seeds") < 0) goto rel_c0;
    if (get_buf(fo, &f, n, 8, 0, "frames") < 0) goto rel_s;
    if (get_buf(outo, &out, n * c->levels, 4, 1, "codes") < 0) goto rel_f;
    Py_buffer tx = {0};
    int have_text = to != Py_None;
    if (have_text && get_buf(to, &tx, n, 4, 0, "text") < 0) goto rel_out;
    {
        struct call a = {.pd = pd, .h = h.buf, .codes = have_c0 ? c0.buf : NULL,
                         .text = have_text ? tx.buf : NULL, .seeds = s.buf, .frames = f.buf,
                         .sp = {.temperature = temperature, .top_k = top_k}, .out = out.buf};
        ok = run_rows(&a, n, decode_rows) == 0;
    }
    if (have_text) PyBuffer_Release(&tx);
rel_out:
    PyBuffer_Release(&out);
rel_f:
    PyBuffer_Release(&f);
rel_s:
    PyBuffer_Release(&s);
rel_c0:
    if (have_c0 && c0.obj) PyBuffer_Release(&c0);
rel_h:
    PyBuffer_Release(&h);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* score(dec, n, hidden f32[n*I], codes i32[n*Q], logits_out f32[n*(Q-1)*V], logits0_out f32[n*V] | None,
 *       text i32[n] | None) */
static PyObject *score(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ho, *co, *lo, *l0o, *to = Py_None;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OnOOOO|O:score", &cap, &n, &ho, &co, &lo, &l0o, &to)) return NULL;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    const dd_config *c = pd->cfg;
    if (!rows_ok(n, c)) return raise_status(DD_EINVAL, "score: row count out of range");
    Py_ssize_t Q = c->levels, V = c->codebook_size;
    Py_buffer h, codes, lg, l0 = {0};
    int have_l0 = l0o != Py_None, ok = 0;
    if (get_buf(ho, &h, n * c->input_dim, 4, 0, "hidden") < 0) return NULL;
    if (get_buf(co, &codes, n * Q, 4, 0, "codes") < 0) goto rel_h;
    if (get_buf(lo, &lg, n * (Q - 1) * V, 4, 1, "logits") < 0) goto rel_c;
    if (have_l0 && get_buf(l0o, &l0, n * V, 4, 1, "logits0") < 0) goto rel_lg;
    Py_buffer tx = {0};
    int have_text = to != Py_None;
    if (have_text && get_buf(to, &tx, n, 4, 0, "text") < 0) goto rel_l0;
    {
        struct call a = {.pd = pd, .h = h.buf, .codes = codes.buf, .text = have_text ? tx.buf : NULL, .lg = lg.buf, .l0 = have_l0 ? l0.buf : NULL};
        ok = run_rows(&a, n, score_rows) == 0;
    }
    if (have_text) PyBuffer_Release(&tx);
rel_l0:
    if (have_l0) PyBuffer_Release(&l0);
rel_lg:
    PyBuffer_Release(&lg);
rel_c:
    PyBuffer_Release(&codes);
rel_h:
    PyBuffer_Release(&h);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* ---- CUDA arrays through DLPack: dd_decode_device / dd_score_device on the caller's stream ------------------ */

/* The DLPack structures (dlpack.h, v0.8 ABI: the "dltensor" capsule of __dlpack__() without max_version). */
typedef struct {
    int32_t device_type; /* kDLCUDA 2, kDLCUDAManaged 13 */
    int32_t device_id;
} dl_device;
typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2 */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL = compact row-major */
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_tensor t;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;

/* The device pointer of a "dltensor" capsule (from __dlpack__(stream=...)) holding `count` compact elements of
 * (code, bits) on CUDA device `dev` (code -1: int or uint, for the 64-bit noise keys). The capsule keeps its owner: the producer frees it with the capsule. */
static void *dl_pointer(PyObject *cap, const char *what, int code, int bits, Py_ssize_t count, int dev) {
    if (!PyCapsule_IsValid(cap, "dltensor")) {
        PyErr_Format(PyExc_ValueError, "%s: not an unused DLPack capsule", what);
        return NULL;
    }
    const dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
    const dl_tensor *t = &m->t;
    if (t->device.device_type != 2 && t->device.device_type != 13) {
        PyErr_Format(PyExc_ValueError, "%s: DLPack device type %d, want CUDA (2)", what, (int)t->device.device_type);
        return NULL;
    }
    if (t->device.device_id != dev) {
        PyErr_Format(PyExc_ValueError, "%s: on cuda:%d, want cuda:%d", what, (int)t->device.device_id, dev);
        return NULL;
    }
    if ((code >= 0 ? t->dtype.code != code : t->dtype.code > 1) || t->dtype.bits != bits || t->dtype.lanes != 1) {
        PyErr_Format(PyExc_ValueError, "%s: DLPack dtype (%d, %d, %d), want (%d, %d, 1)", what, t->dtype.code,
                     t->dtype.bits, t->dtype.lanes, code, bits);
        return NULL;
    }
    Py_ssize_t n = 1, want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->strides && t->shape[i] != 1 && t->strides[i] != want) {
            PyErr_Format(PyExc_ValueError, "%s: not contiguous", what);
            return NULL;
        }
        want *= t->shape[i];
        n *= t->shape[i];
    }
    if (n != count) {
        PyErr_Format(PyExc_ValueError, "%s: %zd elements, want %zd", what, n, count);
        return NULL;
    }
    return (char *)t->data + t->byte_offset;
}

/* decode_device(dec, n, dev, hidden f32[n*I], c0 i32[n] | None, seeds u64[n], frames u64[n], temperature, top_k,
 *               codes_out i32[n*Q], stream) -> None: capsules of CUDA memory on device `dev`, stream a
 * cudaStream_t as an int. Enqueued in batches of max_batch with the GIL released; no synchronisation. */
static PyObject *decode_device(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ho, *c0o, *so, *fo, *outo, *stro;
    Py_ssize_t n;
    int dev, top_k;
    float temperature;
    if (!PyArg_ParseTuple(args, "OniOOOOfiOO:decode_device", &cap, &n, &dev, &ho, &c0o, &so, &fo, &temperature,
                          &top_k, &outo, &stro))
        return NULL;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    const dd_config *c = pd->cfg;
    if (!rows_ok(n, c)) return raise_status(DD_EINVAL, "decode: row count out of range");
    void *stream = PyLong_AsVoidPtr(stro);
    if (!stream && PyErr_Occurred()) return NULL;
    const float *h;
    const int32_t *c0 = NULL;
    const uint64_t *sd, *fr;
    int32_t *out;
    if (!(h = dl_pointer(ho, "hidden", 2, 32, n * c->input_dim, dev)) ||
        (c0o != Py_None && !(c0 = dl_pointer(c0o, "c0", 0, 32, n, dev))) ||
        !(sd = dl_pointer(so, "seeds", -1, 64, n, dev)) || !(fr = dl_pointer(fo, "frames", -1, 64, n, dev)) ||
        !(out = dl_pointer(outo, "codes", 0, 32, n * c->levels, dev)))
        return NULL;
    struct call a = {.pd = pd, .device = 1, .stream = stream, .h = h, .codes = c0, .seeds = sd, .frames = fr,
                     .sp = {.temperature = temperature, .top_k = top_k}, .out = out};
    if (run_rows(&a, n, decode_rows)) return NULL;
    Py_RETURN_NONE;
}

/* score_device(dec, n, dev, hidden f32[n*I], codes i32[n*Q], logits_out f32[n*(Q-1)*V], logits0_out f32[n*V] | None,
 *              stream) -> None: as decode_device */
static PyObject *score_device(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ho, *co, *lo, *l0o, *stro;
    Py_ssize_t n;
    int dev;
    if (!PyArg_ParseTuple(args, "OniOOOOO:score_device", &cap, &n, &dev, &ho, &co, &lo, &l0o, &stro)) return NULL;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    const dd_config *c = pd->cfg;
    if (!rows_ok(n, c)) return raise_status(DD_EINVAL, "score: row count out of range");
    const Py_ssize_t Q = c->levels, V = c->codebook_size;
    void *stream = PyLong_AsVoidPtr(stro);
    if (!stream && PyErr_Occurred()) return NULL;
    const float *h;
    const int32_t *codes;
    float *lg, *l0 = NULL;
    if (!(h = dl_pointer(ho, "hidden", 2, 32, n * c->input_dim, dev)) ||
        !(codes = dl_pointer(co, "codes", 0, 32, n * Q, dev)) ||
        !(lg = dl_pointer(lo, "logits", 2, 32, n * (Q - 1) * V, dev)) ||
        (l0o != Py_None && !(l0 = dl_pointer(l0o, "logits0", 2, 32, n * V, dev))))
        return NULL;
    struct call a = {.pd = pd, .device = 1, .stream = stream, .h = h, .codes = codes, .lg = lg, .l0 = l0};
    if (run_rows(&a, n, score_rows)) return NULL;
    Py_RETURN_NONE;
}

/* decoder_sync(dec) -> None: dd_decoder_sync with the GIL released */
static PyObject *decoder_sync(PyObject *self, PyObject *cap) {
    (void)self;
    struct py_decoder *pd = get_decoder(cap);
    if (!pd) return NULL;
    dd_error e;
    dd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dd_decoder_sync(pd->d, &e);
    Py_END_ALLOW_THREADS
    if (st) return raise_err(&e);
    Py_RETURN_NONE;
}

/* the talker's next input embedding (Qwen3): codes [n, Q] int32 -> out [n, input_dim] float32 */
static PyObject *next_embedding(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *co, *oo;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OnOO:next_embedding", &cap, &n, &co, &oo)) return NULL;
    dd_model *m = get_model(cap);
    if (!m) return NULL;
    const dd_config *c = dd_model_config(m);
    if (n < 0 || n > INT_MAX / (c->levels > c->input_dim ? c->levels : c->input_dim))
        return raise_status(DD_EINVAL, "next_embedding: row count out of range");
    Py_buffer codes, out;
    if (get_buf(co, &codes, n * c->levels, 4, 0, "codes") < 0) return NULL;
    if (get_buf(oo, &out, n * c->input_dim, 4, 1, "out") < 0) {
        PyBuffer_Release(&codes);
        return NULL;
    }
    dd_error e = {0};
    dd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dd_next_embedding(m, (int)n, (const int32_t *)codes.buf, (float *)out.buf, &e);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&codes);
    if (st) return raise_err(&e);
    Py_RETURN_NONE;
}

/* ---- misc ------------------------------------------------------------------------------------------------- */

static PyObject *backend_available(PyObject *self, PyObject *args) {
    (void)self;
    const char *name;
    if (!PyArg_ParseTuple(args, "s:backend_available", &name)) return NULL;
    dd_backend b;
    if (dd_backend_parse(name, &b)) return raise_bad_backend(name);
    return PyBool_FromLong(dd_backend_available(b));
}

/* backends() -> tuple of the concrete backends' names, built in or not, slowest first (the library's table) */
static PyObject *backends(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    int n = dd_backend_count();
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *name = PyUnicode_FromString(dd_backend_name(dd_backend_at(i)));
        if (!name) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}

static PyObject *status_name(PyObject *self, PyObject *args) {
    (void)self;
    int code;
    if (!PyArg_ParseTuple(args, "i:status_name", &code)) return NULL;
    return PyUnicode_FromString(dd_status_name((dd_status)code));
}

static PyMethodDef methods[] = {
    {"set_error_type", set_error_type, METH_O, "Register the exception type raised for library errors."},
    {"model_load", model_load, METH_VARARGS, "model_load(path) -> model capsule"},
    {"model_synthetic", model_synthetic, METH_VARARGS, "model_synthetic(kind, weights, seed) -> model capsule"},
    {"model_from_tensors", model_from_tensors, METH_VARARGS,
     "model_from_tensors(config_json, [(name, dtype, shape, buffer), ...]) -> model capsule"},
    {"model_config", model_config, METH_O, "model_config(model) -> dict"},
    {"model_info", model_info, METH_O, "model_info(model) -> (tensor_count, source, bytes_per_frame, bytes)"},
    {"decoder_create", decoder_create, METH_VARARGS, "decoder_create(model, backend, max_batch, threads)"},
    {"decoder_info", decoder_info, METH_O, "decoder_info(decoder) -> (backend, max_batch)"},
    {"decoder_close", decoder_close, METH_O, "decoder_close(decoder): free it now"},
    {"decode", decode, METH_VARARGS, "decode(dec, n, hidden, c0, seeds, frames, T, K, codes_out)"},
    {"score", score, METH_VARARGS, "score(dec, n, hidden, codes, logits_out, logits0_out)"},
    {"decode_device", decode_device, METH_VARARGS,
     "decode_device(dec, n, dev, hidden, c0, seeds, frames, T, K, codes_out, stream): DLPack capsules of CUDA memory"},
    {"score_device", score_device, METH_VARARGS,
     "score_device(dec, n, dev, hidden, codes, logits_out, logits0_out, stream): DLPack capsules of CUDA memory"},
    {"decoder_sync", decoder_sync, METH_O, "decoder_sync(dec): dd_decoder_sync"},
    {"next_embedding", next_embedding, METH_VARARGS, "next_embedding(model, n, codes, out)"},
    {"backend_available", backend_available, METH_VARARGS, "backend_available(name) -> bool"},
    {"backends", backends, METH_NOARGS, "backends() -> names of the concrete backends, slowest first"},
    {"input_check", input_check, METH_VARARGS, "input_check(model, what, kind, itemsize, shape, rows, label)"},
    {"status_name", status_name, METH_VARARGS, "status_name(code) -> str"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "depthdec._ext", "CPython binding of libdepthdec.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ext(void) {
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    static const struct {
        const char *name;
        int value;
    } ints[] = {
        {"OK", DD_OK},           {"EINVAL", DD_EINVAL},     {"EIO", DD_EIO},
        {"EFORMAT", DD_EFORMAT}, {"EMODEL", DD_EMODEL},     {"ENOMEM", DD_ENOMEM},
        {"ENUMERIC", DD_ENUMERIC}, {"EUNSUPPORTED", DD_EUNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (PyModule_AddIntConstant(mod, ints[i].name, ints[i].value) < 0) goto fail;
    if (PyModule_AddStringConstant(mod, "VERSION", DD_VERSION_STRING) < 0) goto fail;
    return mod;
fail:
    Py_DECREF(mod);
    return NULL;
}
