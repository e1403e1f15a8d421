/* What the configuration parser's unit tests share (test-config.c, test-config-load.c,
 * test-config-checks.c): a mkdtemp() directory the files are written to, a fresh contexts_dir per
 * case, loading the main file and checking an error's exact text. config_files_init() makes the
 * directory (bails out when it cannot), config_files_done() removes it. */
#pragma once

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Not "config.h": from tests/unit/ that finds autoconf's config.h in the build directory first. */
#include "config.h"
#include "macro.h"
#include "tap.h"
#include "util.h"

_unused_ static char tmpdir[] = "/tmp/test-config.XXXXXX";
_unused_ static char main_path[PATH_MAX];
_unused_ static char run_dir[PATH_MAX], state_dir[PATH_MAX];
/* Each load gets a fresh contexts_dir name, so files of one case never leak into the next. */
_unused_ static char ctx_dir[PATH_MAX];
_unused_ static unsigned ctx_counter;

/* Writes content (n bytes, or up to its NUL when n is -1) to tmpdir/rel. */
static inline void put_n(const char *rel, const char *content, ssize_t n) {
        char path[PATH_MAX];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
        f = fopen(path, "we");
        if (!f ||
            fwrite(content, 1, n < 0 ? strlen(content) : (size_t) n, f) != (n < 0 ? strlen(content) : (size_t) n) ||
            fclose(f) != 0) {
                printf("Bail out! cannot write %s\n", path);
                exit(1);
        }
}

static inline void put(const char *rel, const char *content) {
        put_n(rel, content, -1);
}

/* A new, not yet existing contexts_dir; returns its name relative to tmpdir. */
static inline const char *new_ctx_dir(bool create) {
        static char rel[64];

        snprintf(rel, sizeof rel, "contexts-%u", ++ctx_counter);
        snprintf(ctx_dir, sizeof ctx_dir, "%s/%s", tmpdir, rel);
        if (create && mkdir(ctx_dir, 0755) < 0) {
                printf("Bail out! mkdir %s: %m\n", ctx_dir);
                exit(1);
        }
        return rel;
}

static inline ConfigDefaults defaults(void) {
        return (ConfigDefaults){
                .runtime_dir = run_dir,
                .state_dir = state_dir,
                .contexts_dir = ctx_dir,
        };
}

/* Replaces every '@' in s with tmpdir and every '&' with the current contexts_dir. */
static char *at(const char *s) {
        size_t n = 0;
        char *out, *o;

        for (const char *c = s; *c; c++)
                n += *c == '@' ? strlen(tmpdir) : *c == '&' ? strlen(ctx_dir) : 1;
        o = out = malloc(n + 1);
        if (!out)
                abort();
        for (const char *c = s; *c; c++)
                if (*c == '@' || *c == '&') {
                        strcpy(o, *c == '@' ? tmpdir : ctx_dir);
                        o += strlen(o);
                } else
                        *o++ = *c;
        *o = '\0';
        return out;
}

/* Loads the main file with content (when not NULL) and the current contexts_dir. */
static inline int load(const char *content, Config **ret, char **ret_error) {
        ConfigDefaults d = defaults();

        if (content)
                put("main.ini", content);
        return config_load(main_path, &d, ret, ret_error);
}

/* The main file with content must be refused with -EINVAL and exactly want ('@' standing for tmpdir). */
static inline void check_error_r(const char *content, int want_r, const char *want, const char *name) {
        _cleanup_free_ char *error = NULL, *expected = at(want);
        Config *c = NULL;
        int r;

        r = load(content, &c, &error);
        is_int(r, want_r, "%s: refused", name);
        ok(!c, "%s: no config returned", name);
        is_str(error, expected, "%s: message", name);
        config_free(c);
}

static inline void check_error(const char *content, const char *want, const char *name) {
        new_ctx_dir(false);
        check_error_r(content, -EINVAL, want, name);
}

static inline Config *load_ok(const char *content, const char *name) {
        _cleanup_free_ char *error = NULL;
        Config *c = NULL;
        int r;

        r = load(content, &c, &error);
        is_int(r, 0, "%s: loads", name);
        if (r < 0)
                printf("#   error: %s\n", error ? error : "(null)");
        ok(!error, "%s: no error message on success", name);
        return c;
}

static inline bool strv_is(char *const *v, const char *const *want) {
        size_t i = 0;

        for (; v && v[i] && want[i]; i++)
                if (!streq(v[i], want[i])) {
                        printf("#   [%zu] got \"%s\", want \"%s\"\n", i, v[i], want[i]);
                        return false;
                }
        if ((v ? v[i] : NULL) || want[i]) {
                printf("#   length differs at %zu\n", i);
                return false;
        }
        return true;
}

static inline int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static inline void config_files_init(void) {
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %m\n");
                exit(1);
        }
        snprintf(main_path, sizeof main_path, "%s/main.ini", tmpdir);
        snprintf(run_dir, sizeof run_dir, "%s/run", tmpdir);
        snprintf(state_dir, sizeof state_dir, "%s/state", tmpdir);
}

static inline void config_files_done(void) {
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
