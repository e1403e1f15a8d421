/* Shared by the libFuzzer harnesses: a private scratch directory for the
 * readers that take a path (the config loader, the state files), and the
 * small file writes they need. A harness aborts on a broken property so that
 * libFuzzer saves the input; a setup failure is not the input's fault and
 * aborts too, with a message. */
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[4096];

static void fuzz_die(const char *what) {
        fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
        abort();
}

static int fuzz_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

static void fuzz_dir_remove(void) {
        if (fuzz_dir[0])
                (void) nftw(fuzz_dir, fuzz_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* $KS_FUZZ_TMP (the runner's, removed by it) or $TMPDIR or /tmp, then a fresh mkdtemp below it. */
static const char *fuzz_scratch(void) {
        const char *base;

        if (fuzz_dir[0])
                return fuzz_dir;
        base = getenv("KS_FUZZ_TMP") ?: getenv("TMPDIR") ?: "/tmp";
        if (snprintf(fuzz_dir, sizeof fuzz_dir, "%s/ks-fuzz-XXXXXX", base) >= (int) sizeof fuzz_dir)
                abort();
        if (!mkdtemp(fuzz_dir))
                fuzz_die("mkdtemp");
        atexit(fuzz_dir_remove);
        return fuzz_dir;
}

/* "<scratch>/<name>", in a static buffer per slot (0..3). */
static const char *fuzz_path(unsigned slot, const char *name) {
        static char buf[4][4200];

        snprintf(buf[slot], sizeof buf[slot], "%s/%s", fuzz_scratch(), name);
        return buf[slot];
}

/* A state directory of the scratch one, with its subdirectory sub, made once; its descriptor, kept open. */
static int fuzz_state_dir(const char *sub) {
        static int fd = -1;
        const char *dir = fuzz_path(0, "state");

        if (fd >= 0)
                return fd;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                fuzz_die(dir);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                fuzz_die(dir);
        if (mkdirat(fd, sub, 0700) < 0 && errno != EEXIST)
                fuzz_die(sub);
        return fd;
}

static void fuzz_write(const char *path, const void *data, size_t size) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);

        if (fd < 0)
                fuzz_die(path);
        if (size > 0 && write(fd, data, size) != (ssize_t) size)
                fuzz_die(path);
        close(fd);
}

/* A NUL-terminated copy of the input, for readers that take a C string. */
static char *fuzz_strndup(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);

        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = '\0';
        return s;
}

#define FUZZ_CHECK(cond)                                                                                              \
        do {                                                                                                          \
                if (!(cond)) {                                                                                        \
                        fprintf(stderr, "fuzz harness: property broken at %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
                        abort();                                                                                      \
                }                                                                                                     \
        } while (0)
