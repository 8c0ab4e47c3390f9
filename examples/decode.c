/* examples/decode.c — the smallest complete use of the C API: load a model, decode one frame of one stream from a
 * hidden state of zeros, print its codes.
 *   cc decode.c $(pkg-config --cflags --libs depthdec) -o decode && ./decode MODEL
 * (`make install` puts depthdec.pc under PREFIX/lib/pkgconfig; set PKG_CONFIG_PATH for a PREFIX outside the
 * default search path, and LD_LIBRARY_PATH, or link with --static, to run it.) */
#include <depthdec.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    dd_model *m = NULL;
    dd_decoder *d = NULL;
    dd_error e;
    float *h = NULL;
    int32_t *codes = NULL;
    int rc = 1;
    if (dd_model_load(&m, argv[1], &e)) goto fail;
    dd_decoder_params p = dd_decoder_default_params();
    p.max_batch = 1;
    if (dd_decoder_create(&d, m, &p, &e)) goto fail;
    const dd_config *c = dd_model_config(m);
    h = calloc((size_t)c->input_dim, sizeof *h);      /* the backbone's hidden state for this frame */
    codes = malloc((size_t)c->levels * sizeof *codes); /* c0 .. c(Q-1) */
    if (!h || !codes) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    uint64_t seed = 42, frame = 0; /* stream 42, its frame 0: the same codes on every backend and batch */
    dd_sampling s = dd_sampling_default();
    if (dd_decode(d, 1, h, NULL, &seed, &frame, &s, codes, &e)) goto fail; /* c0 sampled: needs head0 */
    printf("%s (%s backend):", dd_model_source(m), dd_backend_name(dd_decoder_backend(d)));
    for (int l = 0; l < c->levels; l++) printf(" %d", codes[l]);
    printf("\n");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "%s\n", e.msg);
done:
    free(h);
    free(codes);
    dd_decoder_free(d);
    dd_model_free(m);
    return rc;
}
