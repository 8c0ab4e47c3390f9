/* Shared by the libFuzzer harnesses: one private temp directory per process (created on first use, removed at
 * exit), and file writing that aborts on I/O failure (a harness that cannot write its input must not report the
 * loader's "No such file" as coverage). Harness code, not library code: it may abort. */
#ifndef DD_FUZZ_COMMON_H
#define DD_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A failed harness check: a finding. tests/test_fuzz_regress.c defines FZ_FAIL (to cmocka's fail_msg) before
 * including the harnesses, so a replayed regression input fails as a test instead of aborting. */
#ifndef FZ_FAIL
#define FZ_FAIL(what, msg)                                                                                             \
    do {                                                                                                               \
        fprintf(stderr, "fuzz: check failed: %s (%s)\n", what, msg);                                                  \
        abort();                                                                                                       \
    } while (0)
#endif
static inline const char *fz_msg(const dd_error *e) { return e ? e->msg : ""; }
#define FZ_MUST(ok, what, e)                                                                                           \
    do {                                                                                                               \
        if (!(ok)) FZ_FAIL(what, fz_msg(e));                                                                           \
    } while (0)

static char fz_dir[256];

static void fz_cleanup(void) {
    if (!fz_dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

/* The process's temp dir: $TMPDIR (or /tmp)/ddfuzz.XXXXXX. */
static const char *fz_tmpdir(void) {
    if (fz_dir[0]) return fz_dir;
    const char *t = getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/ddfuzz.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fz_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fz_cleanup);
    return fz_dir;
}

static void fz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#endif
