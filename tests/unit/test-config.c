/* The configuration parser: every error a user can hit (with its exact file:line and key), the happy paths,
 * argv expansion and the reload comparison. Files are written to a mkdtemp() directory, removed at the end. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Not "config.h": from tests/unit/ that finds autoconf's config.h in the build directory first. */
#include "config.h"
#include "tap.h"
#include "util.h"

static char tmpdir[] = "/tmp/test-config.XXXXXX";
static char main_path[PATH_MAX];
static char run_dir[PATH_MAX], state_dir[PATH_MAX];
/* Each load gets a fresh contexts_dir name, so files of one case never leak into the next. */
static char ctx_dir[PATH_MAX];
static unsigned ctx_counter;

/* Writes content (n bytes, or up to its NUL when n is -1) to tmpdir/rel. */
static void put_n(const char *rel, const char *content, ssize_t n) {
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

static void put(const char *rel, const char *content) {
        put_n(rel, content, -1);
}

/* A new, not yet existing contexts_dir; returns its name relative to tmpdir. */
static const char *new_ctx_dir(bool create) {
        static char rel[64];

        snprintf(rel, sizeof rel, "contexts-%u", ++ctx_counter);
        snprintf(ctx_dir, sizeof ctx_dir, "%s/%s", tmpdir, rel);
        if (create && mkdir(ctx_dir, 0755) < 0) {
                printf("Bail out! mkdir %s: %m\n", ctx_dir);
                exit(1);
        }
        return rel;
}

static ConfigDefaults defaults(void) {
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
static int load(const char *content, Config **ret, char **ret_error) {
        ConfigDefaults d = defaults();

        if (content)
                put("main.ini", content);
        return config_load(main_path, &d, ret, ret_error);
}

/* The main file with content must be refused with -EINVAL and exactly want ('@' standing for tmpdir). */
static void check_error_r(const char *content, int want_r, const char *want, const char *name) {
        _cleanup_free_ char *error = NULL, *expected = at(want);
        Config *c = NULL;
        int r;

        r = load(content, &c, &error);
        is_int(r, want_r, "%s: refused", name);
        ok(!c, "%s: no config returned", name);
        is_str(error, expected, "%s: message", name);
        config_free(c);
}

static void check_error(const char *content, const char *want, const char *name) {
        new_ctx_dir(false);
        check_error_r(content, -EINVAL, want, name);
}

static Config *load_ok(const char *content, const char *name) {
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

static bool strv_is(char *const *v, const char *const *want) {
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

static void test_restart_policy(void) {
        is_str(restart_policy_to_string(RESTART_ALWAYS), "always", "to_string always");
        is_str(restart_policy_to_string(RESTART_ON_FAILURE), "on-failure", "to_string on-failure");
        is_str(restart_policy_to_string(RESTART_NO), "no", "to_string no");
        ok(restart_policy_to_string(_RESTART_POLICY_MAX) == NULL, "to_string out of range is NULL");
        is_int(restart_policy_from_string("always"), RESTART_ALWAYS, "from_string always");
        is_int(restart_policy_from_string("on-failure"), RESTART_ON_FAILURE, "from_string on-failure");
        is_int(restart_policy_from_string("no"), RESTART_NO, "from_string no");
        is_int(restart_policy_from_string("sometimes"), -EINVAL, "from_string unknown");
        is_int(restart_policy_from_string("Always"), -EINVAL, "from_string is case-sensitive");
        is_int(restart_policy_from_string(NULL), -EINVAL, "from_string NULL");
        ok(config_free(NULL) == NULL, "config_free(NULL) is NULL");
}

static void test_syntax_errors(void) {
        char line[256];

        check_error("[context:a]\nrestart = sometimes\n",
                    "@/main.ini:2: [context:a] restart = sometimes: expected always, on-failure or no", "bad restart");
        check_error("[supervisor]\nsocket = /run/x.sock\nfoo = bar\n",
                    "@/main.ini:3: [supervisor] foo = bar: unknown key", "unknown key in [supervisor]");
        check_error("[defaults]\nrestrat = no\n", "@/main.ini:2: [defaults] restrat = no: unknown key",
                    "unknown key in [defaults]");
        check_error("\n[context:a]\n\nargv0 = /bin/true\n", "@/main.ini:4: [context:a] argv0 = /bin/true: unknown key",
                    "unknown key in [context:a]");
        check_error("[supervisor]\nargv = /bin/true\n", "@/main.ini:2: [supervisor] argv = /bin/true: unknown key",
                    "a context key in [supervisor]");
        check_error("[defaults]\nport_range = 20000-30000\n",
                    "@/main.ini:2: [defaults] port_range = 20000-30000: unknown key",
                    "a supervisor key in [defaults]");
        check_error("[context:a]\n[kernels]\nrestart = no\n",
                    "@/main.ini:2: unknown section [kernels] (expected [supervisor], [defaults] or [context:NAME])",
                    "unknown section");
        check_error("[context]\n",
                    "@/main.ini:1: unknown section [context] (expected [supervisor], [defaults] or "
                    "[context:NAME])",
                    "[context] without a name");
        check_error("; comment\nrestart = no\n[context:a]\n",
                    "@/main.ini:2: restart = no: key outside any section (put it under [supervisor], [defaults] or "
                    "[context:NAME])",
                    "key outside any section");
        check_error(
                "[context:bad name]\n",
                "@/main.ini:1: [context:bad name]: invalid context name (1 to 64 letters, digits, '_', '.' or '-')",
                "context name with a blank");
        check_error("[context:a/b]\n",
                    "@/main.ini:1: [context:a/b]: invalid context name (1 to 64 letters, digits, '_', '.' or '-')",
                    "context name with a slash");
        check_error("[context:]\n",
                    "@/main.ini:1: [context:]: invalid context name (1 to 64 letters, digits, '_', '.' or '-')",
                    "empty context name");
        check_error("[context:..]\n",
                    "@/main.ini:1: [context:..]: invalid context name (1 to 64 letters, digits, '_', '.' or '-')",
                    "context name ..");
        check_error("[context:"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n",
                    "@/main.ini:1: [context:"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]: invalid context name (1 to "
                    "64 letters, digits, '_', '.' or '-')",
                    "context name of 65 characters");
        check_error("[context:a]\n[context:b]\nrestart = no\n\n[context:a]\n",
                    "@/main.ini:5: [context:a] defined again (first at @/main.ini:1)", "context defined twice");
        check_error("[supervisor]\n[defaults]\n[supervisor]\n",
                    "@/main.ini:3: [supervisor] defined again (first at @/main.ini:1)", "[supervisor] twice");
        check_error("[defaults]\nrestart = no\n[context:a]\n[defaults]\n",
                    "@/main.ini:4: [defaults] defined again (first at @/main.ini:1)", "[defaults] twice");
        check_error("[context:a]\nrestart = no\nautostart = no\nrestart = always\n",
                    "@/main.ini:4: [context:a] restart = always: already set on line 2", "duplicate key");
        check_error("[supervisor]\nstate_dir = /a\nstate_dir = /a\n",
                    "@/main.ini:3: [supervisor] state_dir = /a: already set on line 2",
                    "duplicate key in [supervisor]");
        check_error("[context:a]\nrestart = no\n[context:b\n", "@/main.ini:3: unterminated section header (no ']')",
                    "unterminated section");
        check_error("[context:a ;]\n", "@/main.ini:1: unterminated section header (no ']')",
                    "']' after an inline comment");
        check_error("[context:a]\njust some words\n",
                    "@/main.ini:2: expected \"key = value\", a [section] or a comment", "line without '='");
        check_error("[context:a]\nrestart = no\n  always\n",
                    "@/main.ini:3: [context:a] restart = always: an indented line continues the value above, and "
                    "only argv and env take more than one line",
                    "continuation of a single-value key");
        check_error("[context:a]\nargv = /bin/k\n  restart = no\n",
                    "@/main.ini:3: [context:a] argv = restart = no: an indented line continues the value above; "
                    "remove the indentation to set restart",
                    "indented key after argv");

        /* The longest line: 199 characters (inih's buffer is 200 bytes). */
        memset(line, 'x', sizeof line);
        memcpy(line, "; ", 2);
        line[199] = '\0';
        {
                _cleanup_free_ char *content = NULL;
                Config *c;

                if (asprintf(&content, "[context:a]\n%s\nrestart = no\n", line) < 0)
                        abort();
                new_ctx_dir(false);
                c = load_ok(content, "a comment line of 199 characters");
                ok(c && c->n_contexts == 1 && c->contexts[0].restart == RESTART_NO,
                   "the line after a 199-character line is read");
                config_free(c);

                line[199] = 'x';
                line[200] = '\0';
                free(content);
                if (asprintf(&content, "[context:a]\n\n%s\nrestart = no\n", line) < 0)
                        abort();
                check_error(content, "@/main.ini:3: line too long (at most 199 characters)", "a line of 200");

                /* A long value that fits is quoted cut at 80 bytes, on a character boundary. */
                free(content);
                if (asprintf(&content, "[context:a]\nuser = %s\n",
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9:"
                             "b") < 0)
                        abort();
                check_error(
                        content,
                        "@/main.ini:2: [context:a] user = "
                        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…: must not "
                        "contain ':' or '/'",
                        "long value cut in the message");
        }

        new_ctx_dir(false);
        put_n("main.ini", "[context:a]\nrestart = no\x00\n", 26);
        check_error_r(NULL, -EINVAL, "@/main.ini:2: contains a NUL byte", "NUL byte");
}

static void test_value_errors(void) {
        static const struct {
                const char *section, *line, *reason;
        } cases[] = {
                { "supervisor", "socket = run/control.sock", "must be an absolute path" },
                { "supervisor",
                  "socket = "
                  "/run/"
                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                  "aaaaaaaaaaa",
                  "too long for a Unix socket (at most 107 bytes)" },
                { "supervisor", "runtime_dir = run", "must be an absolute path" },
                { "supervisor", "state_dir = ./state", "must be an absolute path" },
                { "supervisor", "contexts_dir = contexts.d", "must be an absolute path" },
                { "supervisor", "port_range = 20000", "expected MIN-MAX, such as 20000-32000" },
                { "supervisor", "port_range = a-b", "expected MIN-MAX, such as 20000-32000" },
                { "supervisor", "port_range = 20000-", "expected MIN-MAX, such as 20000-32000" },
                { "supervisor", "port_range = -20000-30000", "expected MIN-MAX, such as 20000-32000" },
                { "supervisor", "port_range = 20000-30000-40000", "expected MIN-MAX, such as 20000-32000" },
                { "supervisor", "port_range = 1000-2000", "MIN must be at least 1024" },
                { "supervisor", "port_range = 20000-65536", "MAX must be at most 65535" },
                { "supervisor", "port_range = 20000-99999999999999999999999", "MAX must be at most 65535" },
                { "supervisor", "port_range = 20000-20003", "MAX must be at least MIN+4 (a kernel needs 5 ports)" },
                { "supervisor", "port_range = 30000-20000", "MAX must be at least MIN+4 (a kernel needs 5 ports)" },
                { "supervisor", "port_range = 70000-65535", "MAX must be at least MIN+4 (a kernel needs 5 ports)" },
                { "context:a", "argv =", "must not be empty" },
                { "context:a", "argv = ''",
                  "argv[0] must be an absolute path (the kernel is executed without $PATH)" },
                { "context:a", "argv = python3 -m ipykernel_launcher",
                  "argv[0] must be an absolute path (the kernel is executed without $PATH)" },
                { "context:a", "argv = /bin/k 'abc", "unterminated ' quote" },
                { "context:a", "argv = /bin/k \"abc\\\"", "unterminated \" quote" },
                { "defaults", "restart = On-Failure", "expected always, on-failure or no" },
                { "context:a", "connection_file = a.json", "must be an absolute path" },
                { "context:a", "user =", "must not be empty" },
                { "context:a", "user = a:b", "must not contain ':' or '/'" },
                { "context:a", "group = /etc", "must not contain ':' or '/'" },
                { "defaults", "group =", "must not be empty" },
                { "context:a", "cwd = ~/work", "must be an absolute path" },
                { "context:a", "env = FOO", "expected NAME=VALUE" },
                { "context:a", "env = 1A=x", "invalid variable name (expected [A-Za-z_][A-Za-z0-9_]*)" },
                { "context:a", "env = A-B=x", "invalid variable name (expected [A-Za-z_][A-Za-z0-9_]*)" },
                { "defaults", "env = =x", "invalid variable name (expected [A-Za-z_][A-Za-z0-9_]*)" },
                { "context:a", "autostart = maybe", "expected yes or no (or true/false, on/off, 1/0)" },
                { "context:a", "autostart =", "expected yes or no (or true/false, on/off, 1/0)" },
                { "context:a", "start_timeout = soon", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "start_timeout = 0", "must be greater than 0" },
                { "context:a", "start_timeout = infinity", "must be finite" },
                { "context:a", "stop_timeout = 0s", "must be greater than 0" },
                { "context:a", "stop_timeout = -1s", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "start_limit_burst = 0", "expected a number from 1 to 1000" },
                { "context:a", "start_limit_burst = 1001", "expected a number from 1 to 1000" },
                { "context:a", "start_limit_burst = five", "expected a number from 1 to 1000" },
                { "context:a", "start_limit_interval = 10 parsecs", "expected a duration such as 500ms, 30s or 5min" },
                { "defaults", "failed_cooldown = 0min", "must be greater than 0" },
                { "context:a", "failed_cooldown = 99999999999999999999999h", "too large" },
                { "context:a", "backoff_min = 0", "must be greater than 0" },
                { "context:a", "backoff_max = fast", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "backoff_reset = infinity", "must be finite" },
                { "context:a", "heartbeat_interval = 0", "must be greater than 0" },
                { "context:a", "heartbeat_misses = 0", "expected a number from 1 to 1000" },
                { "defaults", "unresponsive_restart = sometimes", "expected no, or a duration such as 30s or 5min" },
                { "context:a", "unresponsive_restart = 0", "expected no, or a duration such as 30s or 5min" },
                { "context:a", "output_limit = lots", "expected a size such as 512K or 10M" },
                { "context:a", "output_limit = 10T", "expected a size such as 512K or 10M" },
                { "context:a", "output_limit = 2G", "must be from 1K to 1G" },
                { "context:a", "output_limit = 100", "must be from 1K to 1G" },
                { "context:a", "memory_max = lots", "expected a size such as 512M or 4G, or none" },
                { "context:a", "memory_max = 100K", "must be from 1M to 1024T" },
                { "defaults", "cpu_quota = 50",
                  "expected a percentage of one CPU from 1% to 100000%, such as 50% or 200%, or none" },
                { "context:a", "cpu_quota = 0%",
                  "expected a percentage of one CPU from 1% to 100000%, such as 50% or 200%, or none" },
                { "context:a", "tasks_max = 0", "expected a number from 1 to 4194304, or none" },
                { "context:a", "transport = udp", "expected ipc or tcp" },
                { "defaults", "transport = IPC", "expected ipc or tcp" },
                { "context:a", "transport =", "expected ipc or tcp" },
                { "context:a", "preload = sometimes", "expected auto, yes or no" },
                { "defaults", "preload = YES", "expected auto, yes or no" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *content = NULL, *want = NULL;
                const char *eq = strchr(cases[i].line, '=');
                const char *v = eq[1] == ' ' ? eq + 2 : eq + 1;

                if (asprintf(&content, "; line 1\n[%s]\n%s\n", cases[i].section, cases[i].line) < 0 ||
                    asprintf(&want, "@/main.ini:3: [%s] %.*s = %.80s%s: %s", cases[i].section,
                             (int) (eq - cases[i].line - 1), cases[i].line, v, strlen(v) > 80 ? "…" : "",
                             cases[i].reason) < 0)
                        abort();
                check_error(content, want, cases[i].line);
        }
}

static void test_backoff_errors(void) {
        check_error("[context:a]\nbackoff_min = 5s\nbackoff_max = 1s\n",
                    "@/main.ini:3: [context:a] backoff_max = 1s: must not be less than backoff_min (5s)",
                    "backoff_max < backoff_min in a context");
        check_error("[context:z]\n[context:a]\nbackoff_max = 50ms\n",
                    "@/main.ini:3: [context:a] backoff_max = 50ms: must not be less than backoff_min (100ms)",
                    "backoff_max below the built-in backoff_min");
        check_error("[context:a]\nbackoff_min = 2min\n[defaults]\nbackoff_max = 1min\n",
                    "@/main.ini:2: [context:a] backoff_min = 2min: must not be greater than backoff_max (1min)",
                    "backoff_min above [defaults]' backoff_max, [defaults] written later");
        check_error("[defaults]\nbackoff_min = 1min\n",
                    "@/main.ini:2: [defaults] backoff_min = 1min: must not be greater than backoff_max (30s)",
                    "backoff in [defaults], without any context");
}

static void test_file_errors(void) {
        _cleanup_free_ char *dir_as_file = NULL;
        const char *rel;

        /* The main file is missing. */
        new_ctx_dir(false);
        unlink(main_path);
        check_error_r(NULL, -ENOENT, "@/main.ini: No such file or directory", "missing main file");

        /* A context defined in the main file and again in a contexts_dir file: both places named. */
        rel = new_ctx_dir(true);
        {
                char p1[128], p2[128];

                snprintf(p1, sizeof p1, "%s/10-a.ini", rel);
                snprintf(p2, sizeof p2, "%s/20-b.ini", rel);
                put(p1, "[context:x]\nrestart = no\n");
                put(p2, "; b\n\n[context:y]\n[context:main]\n");
        }
        check_error_r("[supervisor]\n\n[context:main]\n", -EINVAL,
                      "&/20-b.ini:4: [context:main] defined again (first at @/main.ini:3)",
                      "context defined in the main file and in contexts_dir");

        /* Twice across two contexts_dir files. */
        rel = new_ctx_dir(true);
        {
                char p1[128], p2[128];

                snprintf(p1, sizeof p1, "%s/a.ini", rel);
                snprintf(p2, sizeof p2, "%s/b.ini", rel);
                put(p1, "\n\n[context:x]\n");
                put(p2, "[context:x]\n");
        }
        check_error_r("[defaults]\n", -EINVAL,
                      "&/b.ini:1: [context:x] defined again (first at "
                      "&/a.ini:3)",
                      "context defined in two contexts_dir files");

        /* [supervisor] and [defaults] belong to the main file only. */
        rel = new_ctx_dir(true);
        {
                char p1[128];

                snprintf(p1, sizeof p1, "%s/a.ini", rel);
                put(p1, "[context:x]\nrestart = no\n[supervisor]\nsocket = /x\n");
        }
        check_error_r("", -EINVAL,
                      "&/a.ini:3: [supervisor] is not allowed here: files in contexts_dir may only hold "
                      "[context:NAME] sections",
                      "[supervisor] in a contexts_dir file");
        rel = new_ctx_dir(true);
        {
                char p1[128];

                snprintf(p1, sizeof p1, "%s/a.ini", rel);
                put(p1, "[defaults]\n");
        }
        check_error_r("", -EINVAL,
                      "&/a.ini:1: [defaults] is not allowed here: files in contexts_dir may only hold "
                      "[context:NAME] sections",
                      "[defaults] in a contexts_dir file");
        rel = new_ctx_dir(true);
        {
                char p1[128];

                snprintf(p1, sizeof p1, "%s/a.ini", rel);
                put(p1, "[context:x]\n[contxt:y]\n");
        }
        check_error_r("", -EINVAL, "&/a.ini:2: unknown section [contxt:y] (expected [context:NAME])",
                      "unknown section in a contexts_dir file");
        rel = new_ctx_dir(true);
        {
                char p1[128];

                snprintf(p1, sizeof p1, "%s/a.ini", rel);
                put(p1, "restart = no\n");
        }
        check_error_r("", -EINVAL, "&/a.ini:1: restart = no: key outside any section (put it under a [context:NAME])",
                      "key outside a section in a contexts_dir file");

        /* An unreadable *.ini (a directory) in contexts_dir. */
        rel = new_ctx_dir(true);
        {
                char p1[PATH_MAX];

                snprintf(p1, sizeof p1, "%s/%s/sub.ini", tmpdir, rel);
                if (mkdir(p1, 0755) < 0)
                        abort();
        }
        check_error_r("", -EISDIR, "&/sub.ini: Is a directory", "unreadable contexts_dir file");

        /* contexts_dir (named in the main file) is not a directory. */
        new_ctx_dir(false);
        put("plain-file", "x");
        if (asprintf(&dir_as_file, "[supervisor]\ncontexts_dir = %s/plain-file\n", tmpdir) < 0)
                abort();
        check_error_r(dir_as_file, -ENOTDIR, "@/plain-file: Not a directory", "contexts_dir is a file");

        /* Two contexts on one connection file. */
        check_error("[context:a]\nconnection_file = /tmp/same.json\n[context:b]\nconnection_file = /tmp/same.json\n",
                    "@/main.ini:4: [context:b] connection_file = /tmp/same.json: contexts a and b would share "
                    "/tmp/same.json",
                    "two contexts share a connection file");
        check_error("[defaults]\nconnection_file = /srv/kernel.json\n[context:a]\n[context:b]\n",
                    "@/main.ini:2: [defaults] connection_file = /srv/kernel.json: contexts a and b would share "
                    "/srv/kernel.json",
                    "connection_file without {name} in [defaults]");
        check_error(
                "[supervisor]\nruntime_dir = "
                "/run/"
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                "@/main.ini:2: [supervisor] runtime_dir = "
                "/run/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…: too long to "
                "hold control.sock (a Unix socket path has at most 107 bytes); set socket too",
                "runtime_dir too long for the default socket");

        /* No error message asked for: still refused. */
        {
                ConfigDefaults d = defaults();
                Config *c = NULL;

                put("main.ini", "[context:a]\nrestart = x\n");
                is_int(config_load(main_path, &d, &c, NULL), -EINVAL, "refused without ret_error");
                ok(!c, "no config without ret_error");
                d.state_dir = NULL;
                is_int(config_load(main_path, &d, &c, NULL), -EINVAL, "incomplete ConfigDefaults refused");
        }
}

static void test_happy(void) {
        const ContextConfig *a, *b, *cc;
        const char *rel;
        char p[256];
        Config *c;

        /* Built-in defaults with an empty context, no contexts_dir at all. */
        new_ctx_dir(false);
        c = load_ok("[context:empty]\n", "an empty context");
        if (c) {
                _cleanup_free_ char *sock = NULL, *conn = NULL;

                if (asprintf(&sock, "%s/control.sock", run_dir) < 0 ||
                    asprintf(&conn, "%s/connections/empty.json", run_dir) < 0)
                        abort();
                is_str(c->path, main_path, "path");
                is_str(c->socket_path, sock, "socket defaults to <runtime_dir>/control.sock");
                is_str(c->runtime_dir, run_dir, "runtime_dir from ConfigDefaults");
                is_str(c->state_dir, state_dir, "state_dir from ConfigDefaults");
                is_str(c->contexts_dir, ctx_dir, "contexts_dir from ConfigDefaults");
                is_int(c->port_min, 20000, "port_min default");
                is_int(c->port_max, 32000, "port_max default");
                is_int(c->n_contexts, 1, "one context");
                cc = &c->contexts[0];
                is_str(cc->name, "empty", "name");
                is_str(cc->source.file, main_path, "source file");
                is_int(cc->source.line, 1, "source line");
                ok(strv_is(cc->argv,
                           (const char *const[]){ "/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
                                                  "{kernel_file}", "--HistoryManager.hist_file=:memory:", NULL }),
                   "argv default");
                is_int(cc->restart, RESTART_ALWAYS, "restart default");
                is_str(cc->connection_file, conn, "connection_file default");
                ok(!cc->user && !cc->group && !cc->cwd, "user, group, cwd default to NULL");
                ok(cc->env && !cc->env[0], "env is empty, not NULL");
                ok(cc->autostart, "autostart default");
                is_int(cc->start_timeout, 30 * USEC_PER_SEC, "start_timeout default");
                is_int(cc->stop_timeout, 10 * USEC_PER_SEC, "stop_timeout default");
                is_int(cc->start_limit_burst, 5, "start_limit_burst default");
                is_int(cc->start_limit_interval, 60 * USEC_PER_SEC, "start_limit_interval default");
                is_int(cc->failed_cooldown, 300 * USEC_PER_SEC, "failed_cooldown default");
                is_int(cc->backoff_min, 100 * USEC_PER_MSEC, "backoff_min default");
                is_int(cc->backoff_max, 30 * USEC_PER_SEC, "backoff_max default");
                is_int(cc->backoff_reset, 10 * USEC_PER_SEC, "backoff_reset default");
                is_int(cc->heartbeat_interval, 5 * USEC_PER_SEC, "heartbeat_interval default");
                is_int(cc->heartbeat_misses, 3, "heartbeat_misses default");
                is_int(cc->unresponsive_restart, 0, "unresponsive_restart default: never");
                is_int(cc->output_limit, 10 * 1024 * 1024, "output_limit default: 10 MiB");
        }
        config_free(c);

        /* The liveness and output keys, set. */
        new_ctx_dir(false);
        c = load_ok("[context:a]\nheartbeat_interval = 500ms\nheartbeat_misses = 2\n"
                    "unresponsive_restart = 2min\noutput_limit = 64K\n"
                    "[context:b]\nunresponsive_restart = no\noutput_limit = 1G\n",
                    "liveness and output keys");
        if (c && c->n_contexts == 2) {
                is_int(c->contexts[0].heartbeat_interval, 500 * USEC_PER_MSEC, "heartbeat_interval 500ms");
                is_int(c->contexts[0].heartbeat_misses, 2, "heartbeat_misses 2");
                is_int(c->contexts[0].unresponsive_restart, 120 * USEC_PER_SEC, "unresponsive_restart 2min");
                is_int(c->contexts[0].output_limit, 64 * 1024, "output_limit 64K");
                is_int(c->contexts[1].unresponsive_restart, 0, "unresponsive_restart = no");
                is_int(c->contexts[1].output_limit, 1024 * 1024 * 1024, "output_limit 1G");
        }
        config_free(c);

        /* Resource limits, and that changing one needs a restart of the kernel. */
        new_ctx_dir(false);
        c = load_ok("[defaults]\nmemory_max = 2G\n[context:a]\ncpu_quota = 150%\ntasks_max = 64\n"
                    "[context:b]\nmemory_max = none\n",
                    "limits");
        if (c && c->n_contexts == 2) {
                is_int(c->contexts[0].memory_max, 2ULL << 30, "memory_max 2G from [defaults]");
                is_int(c->contexts[0].cpu_quota, 150, "cpu_quota 150%%");
                is_int(c->contexts[0].tasks_max, 64, "tasks_max 64");
                is_int(c->contexts[1].memory_max, 0, "memory_max = none");
                is_int(c->contexts[1].cpu_quota, 0, "cpu_quota unset: none");
                ContextConfig x = c->contexts[0];
                x.memory_max = 1ULL << 30;
                is_str(context_config_process_change(&c->contexts[0], &x), "memory_max",
                       "a changed memory_max restarts the kernel");
                x = c->contexts[0];
                x.restart = RESTART_NO;
                ok(context_config_process_change(&c->contexts[0], &x) == NULL, "restart= is no process change");
                is_str(context_config_setting_change(&c->contexts[0], &x), "restart", "restart= applies in place");
        }
        config_free(c);

        /* An empty file: no contexts. */
        new_ctx_dir(false);
        c = load_ok("", "an empty file");
        ok(c && c->n_contexts == 0 && !c->contexts, "no contexts");
        ok(c && !config_find_context(c, "a"), "find in an empty config");
        config_free(c);

        /* The socket: ConfigDefaults' own, or following runtime_dir set in the file, or set itself. */
        new_ctx_dir(false);
        {
                ConfigDefaults d = defaults();
                _cleanup_free_ char *error = NULL;

                d.socket_path = "/run/listen.sock";
                put("main.ini", "");
                c = NULL;
                is_int(config_load(main_path, &d, &c, &error), 0, "load with a default socket_path");
                ok(c && streq(c->socket_path, "/run/listen.sock"), "socket from ConfigDefaults.socket_path");
                config_free(c);

                put("main.ini", "[supervisor]\nruntime_dir = /run/ks2\n");
                c = NULL;
                is_int(config_load(main_path, &d, &c, &error), 0, "load with runtime_dir");
                ok(c && streq(c->socket_path, "/run/ks2/control.sock"), "socket follows runtime_dir from the file");
                ok(c && streq(c->runtime_dir, "/run/ks2"), "runtime_dir from the file");
                config_free(c);

                put("main.ini", "[supervisor]\nruntime_dir = /run/ks2\nsocket = /run/other.sock\n");
                c = NULL;
                is_int(config_load(main_path, &d, &c, &error), 0, "load with socket");
                ok(c && streq(c->socket_path, "/run/other.sock"), "socket from the file");
                config_free(c);
        }

        /* A full configuration: [defaults] after the contexts still applies to them all. */
        rel = new_ctx_dir(true);
        snprintf(p, sizeof p, "%s/20-late.ini", rel);
        put(p, "[context:from-dir-2]\nrestart = no\n");
        snprintf(p, sizeof p, "%s/10-early.ini", rel);
        put(p, "; a contexts file\n[context:from-dir-1]\nenv = D=dir\n[context:from-dir-3]\n");
        snprintf(p, sizeof p, "%s/README", rel);
        put(p, "[supervisor]\nnot read\n");
        snprintf(p, sizeof p, "%s/.hidden.ini", rel);
        put(p, "[supervisor]\n");
        snprintf(p, sizeof p, "%s/old.ini~", rel);
        put(p, "[defaults]\n");
        snprintf(p, sizeof p, "%s/.ini", rel);
        put(p, "[defaults]\n");
        {
                _cleanup_free_ char *content = NULL;

                if (asprintf(
                            &content,
                            "\xef\xbb\xbf; kernelsup test configuration\n"
                            "[supervisor]\n"
                            "socket = /run/ks/control.sock ; inline comment\n"
                            "runtime_dir = /run/ks\n"
                            "state_dir: /var/lib/ks\n"
                            "contexts_dir = %s\n"
                            "port_range = 21000 - 21999\r\n"
                            "\n"
                            "[context:zeta]\n"
                            "user = alice\n"
                            "group = 1001\n"
                            "cwd = /home/alice\n"
                            "env = B=zeta\n"
                            "env = C=3\n"
                            "argv = /opt/k \"{kernel_file}\" 'a b' \"c \\\"d\\\" \\\\e \\x\" f'g h'i \"\" --n={name}\n"
                            "  --more 'x y'   ; a comment\n"
                            "\n"
                            "  --last\n"
                            "autostart = off\n"
                            "restart = on-failure\n"
                            "[context:alpha]\n"
                            "connection_file = /srv/alpha.json\n"
                            "env = AB=ab\n"
                            "env = A=alpha\n"
                            "env = A=again\n"
                            "env = E=e;x\n"
                            "start_timeout = 2min\n"
                            "backoff_min = 1s\n"
                            "[defaults]\n"
                            "env = A=1\n"
                            "  B=2\n"
                            "restart = no\n"
                            "autostart = no\n"
                            "stop_timeout = 500ms\n"
                            "start_limit_burst = 1000\n"
                            "start_limit_interval = 1h\n"
                            "failed_cooldown = 1.5s\n"
                            "backoff_max = 2min\n"
                            "backoff_reset = 250us\n"
                            "argv = /usr/bin/env python3\n"
                            "[context:mid]\n"
                            "autostart = TRUE\n",
                            ctx_dir) < 0)
                        abort();
                c = load_ok(content, "a full configuration");
        }
        if (c) {
                static const char *const names[] = {
                        "alpha", "from-dir-1", "from-dir-2", "from-dir-3", "mid", "zeta"
                };

                is_str(c->socket_path, "/run/ks/control.sock", "socket (inline comment dropped)");
                is_str(c->runtime_dir, "/run/ks", "runtime_dir");
                is_str(c->state_dir, "/var/lib/ks", "state_dir with ':'");
                is_str(c->contexts_dir, ctx_dir, "contexts_dir from the file");
                is_int(c->port_min, 21000, "port_min");
                is_int(c->port_max, 21999, "port_max (CRLF line)");
                is_int(c->n_contexts, ELEMENTSOF(names), "all contexts, non-.ini and hidden files ignored");
                for (size_t i = 0; i < c->n_contexts && i < ELEMENTSOF(names); i++) {
                        is_str(c->contexts[i].name, names[i], "contexts sorted: %zu", i);
                        ok(config_find_context(c, names[i]) == &c->contexts[i], "config_find_context(%s)", names[i]);
                }
                ok(!config_find_context(c, "nope"), "config_find_context of an unknown name");
                ok(!config_find_context(c, "aaa"), "config_find_context before the first");
                ok(!config_find_context(c, "zzz"), "config_find_context after the last");

                a = config_find_context(c, "zeta");
                if (a) {
                        ok(strv_is(a->argv,
                                   (const char *const[]){ "/opt/k", "{kernel_file}", "a b", "c \"d\" \\e \\x", "fg hi",
                                                          "", "--n={name}", "--more", "x y", "--last", NULL }),
                           "argv quoting and continuation lines");
                        is_str(a->user, "alice", "user");
                        is_str(a->group, "1001", "numeric group kept as written");
                        is_str(a->cwd, "/home/alice", "cwd");
                        ok(!a->autostart, "autostart off");
                        is_int(a->restart, RESTART_ON_FAILURE, "restart overrides [defaults]");
                        ok(strv_is(a->env, (const char *const[]){ "A=1", "B=zeta", "C=3", NULL }),
                           "env: [defaults]' inherited, same name replaced in place, new appended");
                        is_int(a->stop_timeout, 500 * USEC_PER_MSEC, "stop_timeout from [defaults]");
                        is_int(a->start_limit_burst, 1000, "start_limit_burst from [defaults]");
                        is_int(a->start_limit_interval, 3600 * USEC_PER_SEC, "start_limit_interval from [defaults]");
                        is_int(a->failed_cooldown, 1500 * USEC_PER_MSEC, "failed_cooldown from [defaults]");
                        is_int(a->backoff_min, 100 * USEC_PER_MSEC, "backoff_min built in");
                        is_int(a->backoff_max, 120 * USEC_PER_SEC, "backoff_max from [defaults]");
                        is_int(a->backoff_reset, 250, "backoff_reset from [defaults]");
                        is_str(a->source.file, main_path, "zeta's source file");
                        is_int(a->source.line, 9, "zeta's source line");
                }
                b = config_find_context(c, "alpha");
                if (b) {
                        ok(strv_is(b->argv, (const char *const[]){ "/usr/bin/env", "python3", NULL }),
                           "argv from [defaults]");
                        is_str(b->connection_file, "/srv/alpha.json", "connection_file");
                        ok(strv_is(b->env, (const char *const[]){ "A=again", "B=2", "AB=ab", "E=e;x", NULL }),
                           "env: repeated in one section, replaced in place (not by prefix); ';' without a blank "
                           "kept");
                        is_int(b->start_timeout, 120 * USEC_PER_SEC, "start_timeout");
                        is_int(b->backoff_min, USEC_PER_SEC, "backoff_min");
                        is_int(b->restart, RESTART_NO, "restart from [defaults], written after the context");
                        ok(!b->autostart, "autostart from [defaults]");
                        ok(!b->user, "no user");
                }
                cc = config_find_context(c, "mid");
                ok(cc && cc->autostart, "autostart = TRUE overrides [defaults]");
                cc = config_find_context(c, "from-dir-1");
                if (cc) {
                        _cleanup_free_ char *file = NULL, *conn = NULL;

                        if (asprintf(&file, "%s/10-early.ini", ctx_dir) < 0 ||
                            asprintf(&conn, "/run/ks/connections/from-dir-1.json") < 0)
                                abort();
                        is_str(cc->source.file, file, "a contexts_dir file as source");
                        is_int(cc->source.line, 2, "its line");
                        ok(strv_is(cc->env, (const char *const[]){ "A=1", "B=2", "D=dir", NULL }),
                           "[defaults] applies to contexts_dir files");
                        is_str(cc->connection_file, conn, "connection_file follows runtime_dir from the file");
                }
                cc = config_find_context(c, "from-dir-2");
                ok(cc && cc->restart == RESTART_NO, "from the second contexts_dir file");
        }
        config_free(c);

        /* {name} in a connection_file of [defaults]. */
        new_ctx_dir(false);
        c = load_ok("[defaults]\nconnection_file = /srv/{name}/conn-{name}.json\n[context:a]\n[context:b]\n",
                    "connection_file with {name}");
        ok(c && c->n_contexts == 2 && streq(c->contexts[0].connection_file, "/srv/a/conn-a.json") &&
                   streq(c->contexts[1].connection_file, "/srv/b/conn-b.json"),
           "{name} expanded in connection_file");
        config_free(c);

        /* Edge values accepted. */
        new_ctx_dir(false);
        c = load_ok("[supervisor]\nport_range=1024-1028\n[context:a]\nstart_limit_burst = 1\nbackoff_min = 30s\n",
                    "edge values");
        ok(c && c->port_min == 1024 && c->port_max == 1028, "smallest port range");
        ok(c && c->n_contexts == 1 && c->contexts[0].backoff_min == c->contexts[0].backoff_max,
           "backoff_min equal to backoff_max");
        config_free(c);
        new_ctx_dir(false);
        c = load_ok("[supervisor]\nport_range = 65531-65535\n", "the highest port range");
        ok(c && c->port_min == 65531 && c->port_max == 65535, "port range up to 65535");
        config_free(c);
}

/* A runtime_dir of n bytes: "/" and n - 1 'r's. */
static const char *long_dir(size_t n) {
        static char d[256];

        memset(d, 'r', n);
        d[0] = '/';
        d[n] = '\0';
        return d;
}

/* A runtime_dir that makes the socket paths of context a 108 bytes, with sections after [supervisor]: refused as
 * where. */
static void check_ipc_too_long(const char *sections, const char *where, const char *name) {
        _cleanup_free_ char *content = NULL, *want = NULL;

        if (asprintf(&content, "[supervisor]\nruntime_dir = %s\nsocket = /run/k.sock\n%s", long_dir(98), sections) <
                    0 ||
            asprintf(&want,
                     "%s: its sockets' paths (%s/ipc/a/k-5) would be 108 bytes, over the 107 of a Unix socket "
                     "address; shorten runtime_dir or the context's name, or set transport = tcp",
                     where, long_dir(98)) < 0)
                abort();
        check_error(content, want, name);
}

static void test_preload(void) {
        const ContextConfig *cc;
        const char *why = NULL;
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[defaults]\npreload = no\n[context:a]\npreload = auto\n[context:b]\n"
                    "[context:c]\nargv = /opt/py/bin/python3 -m mykernel -f {kernel_file}\npreload = yes\n"
                    "[context:d]\nargv = /opt/py/bin/python3 -m mykernel -f {kernel_file}\npreload = auto\n",
                    "preload");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->preload == PRELOAD_AUTO, "preload = auto overrides [defaults]");
        is_str(cc ? context_config_preload_module(cc, &why) : NULL, "ipykernel_launcher",
               "auto preloads PYTHON -m ipykernel_launcher");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && !context_config_preload_module(cc, &why), "[defaults] preload = no applies");
        is_str(why, "preload = no", "and says so");
        cc = c ? config_find_context(c, "c") : NULL;
        is_str(cc ? context_config_preload_module(cc, &why) : NULL, "mykernel", "yes preloads any PYTHON -m MODULE");
        cc = c ? config_find_context(c, "d") : NULL;
        ok(cc && !context_config_preload_module(cc, &why), "auto does not preload another module");
        is_str(why, "preload = auto, and argv runs another module than ipykernel_launcher", "and says so");
        config_free(c);
        ok(!argv_python_module((char *[]){ "python3", "-m", "x", NULL }), "a relative interpreter is not preloaded");
        ok(!argv_python_module((char *[]){ "/usr/bin/python3", "-m", "-x", NULL }), "-m followed by an option is not");
        ok(!argv_python_module((char *[]){ "/usr/bin/python3", "-I", "-m", "x", NULL }),
           "interpreter options before -m are not (sys.flags would differ)");
        check_error("[context:a]\nargv = /bin/true {kernel_file}\npreload = yes\n",
                    "@/main.ini:3: [context:a] preload = yes: argv must then be an absolute interpreter, -m and a "
                    "module (PYTHON -m MODULE ...)",
                    "preload = yes with an argv that is not PYTHON -m MODULE");
        check_error("[defaults]\npreload = yes\n[context:a]\nargv = /bin/true\n",
                    "@/main.ini:2: [defaults] preload = yes: argv must then be an absolute interpreter, -m and a "
                    "module (PYTHON -m MODULE ...)",
                    "preload = yes in [defaults] is named where it was set");
}

static void test_transport(void) {
        _cleanup_free_ char *content = NULL;
        const ContextConfig *cc;
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[context:a]\n[context:b]\ntransport = tcp\n", "transport");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->transport == TRANSPORT_IPC, "transport defaults to ipc");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && cc->transport == TRANSPORT_TCP, "transport = tcp");
        config_free(c);
        new_ctx_dir(false);
        c = load_ok("[defaults]\ntransport = tcp\n[context:a]\n[context:b]\ntransport = ipc\n",
                    "transport in [defaults]");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->transport == TRANSPORT_TCP, "[defaults] transport = tcp applies");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && cc->transport == TRANSPORT_IPC, "a context's transport = ipc overrides it");
        config_free(c);

        /* "<runtime_dir>/ipc/a/k-5" is strlen(runtime_dir) + 10 bytes; a Unix socket path has at most 107. */
        new_ctx_dir(false);
        if (asprintf(&content, "[supervisor]\nruntime_dir = %s\nsocket = /run/k.sock\n[context:a]\n", long_dir(97)) <
            0)
                abort();
        c = load_ok(content, "socket paths of exactly 107 bytes");
        config_free(c);
        free(content);
        check_ipc_too_long("[context:a]\n", "@/main.ini:4: [context:a]: transport is ipc (the default)",
                           "ipc socket paths of 108 bytes, transport by default");
        check_ipc_too_long("[defaults]\ntransport = ipc\n[context:a]\n", "@/main.ini:5: [defaults] transport = ipc",
                           "ipc socket paths of 108 bytes, transport in [defaults]");
        if (asprintf(&content, "[supervisor]\nruntime_dir = %s\nsocket = /run/k.sock\n[context:a]\ntransport = tcp\n",
                     long_dir(180)) < 0)
                abort();
        new_ctx_dir(false);
        c = load_ok(content, "the same runtime_dir with transport = tcp");
        config_free(c);
}

static void test_bundled(void) {
        const char *srcdir = getenv("KS_SRCDIR");
        _cleanup_free_ char *path = NULL, *dir = NULL, *error = NULL;
        ConfigDefaults d = defaults();
        Config *c = NULL;
        int r;

        if (!srcdir) {
                ok(1, "# SKIP KS_SRCDIR is not set: the bundled conf/kernelsup.ini is not checked");
                return;
        }
        if (asprintf(&path, "%s/conf/kernelsup.ini", srcdir) < 0 || asprintf(&dir, "%s/conf/contexts.d", srcdir) < 0)
                abort();
        /* Its own contexts.d holds only a README, which must not be read as configuration. */
        d.contexts_dir = dir;
        r = config_load(path, &d, &c, &error);
        is_int(r, 0, "the bundled kernelsup.ini loads");
        if (r < 0)
                printf("#   error: %s\n", error ? error : "(null)");
        if (c) {
                const ContextConfig *cc = config_find_context(c, "default");
                _cleanup_free_ char *sock = NULL, *conn = NULL;

                if (asprintf(&sock, "%s/control.sock", run_dir) < 0 ||
                    asprintf(&conn, "%s/connections/default.json", run_dir) < 0)
                        abort();
                is_int(c->n_contexts, 1, "bundled: one context");
                ok(cc && !cc->user && !cc->group, "bundled: [context:default] runs as the daemon's user");
                ok(cc && streq(cc->connection_file, conn), "bundled: default connection_file");
                is_str(c->socket_path, sock, "bundled: [supervisor] left to ConfigDefaults");
                is_str(c->state_dir, state_dir, "bundled: state_dir from ConfigDefaults");
                ok(cc && cc->argv && streq(cc->argv[0], "/usr/bin/python3"), "bundled: argv[0]");
                ok(cc && cc->transport == TRANSPORT_IPC, "bundled: transport ipc");
        }
        config_free(c);
}

static void test_expand_argv(void) {
        char *argv[] = { "/bin/k",        "-f",      "{kernel_file}", "--conn={kernel_file}",
                         "{name}:{name}", "{other}", "{kernel_file",  NULL };
        ContextConfig cc = { .name = "ctx", .argv = argv };
        _cleanup_strv_free_ char **v = NULL;

        is_int(context_config_expand_argv(&cc, "/run/k/{name}.json", &v), 0, "expand_argv");
        ok(strv_is(v, (const char *const[]){ "/bin/k", "-f", "/run/k/{name}.json", "--conn=/run/k/{name}.json",
                                             "ctx:ctx", "{other}", "{kernel_file", NULL }),
           "placeholders expanded inside words, substituted text not rescanned, others kept");
        ok(v && v != argv && v[0] != argv[0], "a new vector of new strings");
        is_int(context_config_expand_argv(&cc, NULL, &v), -EINVAL, "expand_argv without kernel_file");
}

static void test_process_differs(void) {
        char *argv1[] = { "/bin/k", "a", NULL }, *argv2[] = { "/bin/k", "b", NULL }, *argv3[] = { "/bin/k", NULL };
        char *env1[] = { "A=1", "B=2", NULL }, *env2[] = { "B=2", "A=1", NULL }, *env3[] = { "A=1", "B=3", NULL };
        char *env4[] = { "A=1", NULL }, *env0[] = { NULL };
        ContextConfig a = { .name = "x",
                            .argv = argv1,
                            .env = env1,
                            .user = "u",
                            .group = "g",
                            .cwd = "/w",
                            .connection_file = "/c.json",
                            .restart = RESTART_ALWAYS,
                            .start_timeout = 1 };
        ContextConfig b;

        b = a;
        ok(!context_config_process_differs(&a, &b), "identical: no restart");
        b.restart = RESTART_NO;
        b.start_timeout = 99;
        b.autostart = !a.autostart;
        b.backoff_max = 7;
        ok(!context_config_process_differs(&a, &b), "policy settings do not need a restart");
        b = a;
        b.env = env2;
        ok(!context_config_process_differs(&a, &b), "env in another order: the same environment");
        b.env = env3;
        ok(context_config_process_differs(&a, &b), "env value differs");
        b.env = env4;
        ok(context_config_process_differs(&a, &b), "env variable removed");
        b.env = env0;
        ok(context_config_process_differs(&a, &b), "env emptied");
        b = a;
        b.argv = argv2;
        ok(context_config_process_differs(&a, &b), "argv word differs");
        b.argv = argv3;
        ok(context_config_process_differs(&a, &b), "argv shorter");
        b = a;
        b.user = "v";
        ok(context_config_process_differs(&a, &b), "user differs");
        b.user = NULL;
        ok(context_config_process_differs(&a, &b), "user unset");
        b = a;
        b.group = NULL;
        ok(context_config_process_differs(&a, &b), "group differs");
        b = a;
        b.cwd = "/other";
        ok(context_config_process_differs(&a, &b), "cwd differs");
        b = a;
        b.connection_file = "/d.json";
        ok(context_config_process_differs(&a, &b), "connection_file differs");
        b = a;
        b.transport = TRANSPORT_TCP;
        a.transport = TRANSPORT_IPC;
        is_str(context_config_process_change(&a, &b), "transport", "transport differs: a process change");
        b = a;
        a.user = b.user = NULL;
        b.connection_file = a.connection_file;
        ok(!context_config_process_differs(&a, &b), "both users unset: the same");
}

/* connection_file may not name the daemon's own files: the config, contexts_dir, state_dir, runtime_dir's private
 * part; ".." does not hide one. <runtime_dir>/connections is where published files go. */
static void test_own_paths(void) {
        static const struct {
                const char *value, *want, *name;
        } refused[] = {
                { "&/f1.ini", "&/f1.ini is inside contexts_dir &", "a file in contexts_dir" },
                { "@/state/x.json", "@/state/x.json is inside state_dir @/state", "a file in state_dir" },
                { "@/state", "@/state is inside state_dir @/state", "state_dir itself" },
                { "@/run/kernels/a/kernel.json", "@/run/kernels/a/kernel.json is inside runtime_dir @/run",
                  "a kernel's private file" },
                { "@/run/control.sock", "@/run/control.sock is the control socket @/run/control.sock",
                  "the control socket" },
                { "@/main.ini", "@/main.ini is the configuration file @/main.ini", "the configuration file" },
                { "@/elsewhere/../state/./x.json", "@/state/x.json is inside state_dir @/state", "'..' and '.'" },
                { "@//state//{name}.json", "@/state/a.json is inside state_dir @/state", "'//' and {name}" },
        };
        char text[512];

        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                _cleanup_free_ char *value = NULL, *want = NULL, *error = NULL;
                Config *c = NULL;

                new_ctx_dir(true);
                value = at(refused[i].value);
                snprintf(text, sizeof text, "[supervisor]\nstate_dir = @/state\n\n[context:a]\nconnection_file = %s\n",
                         refused[i].value);
                _cleanup_free_ char *content = at(text);
                if (asprintf(&want,
                             "@/main.ini:5: [context:a] connection_file = %s: %s, the daemon's own; connection files "
                             "go elsewhere (or in @/run/connections)",
                             refused[i].value, refused[i].want) < 0)
                        abort();
                _cleanup_free_ char *expected = at(want);
                is_int(load(content, &c, &error), -EINVAL, "connection_file = %s refused", refused[i].name);
                is_str(error, expected, "%s: the message names file, line, key, value and the place", refused[i].name);
                config_free(c);
        }

        /* The published directory is fine, and is marked as the daemon's; any other path is not. */
        new_ctx_dir(false);
        _cleanup_free_ char *ok_text = at("[context:a]\nconnection_file = @/run/connections/sub/a.json\n"
                                          "[context:b]\n[context:c]\nconnection_file = @/home/../srv/c.json\n");
        Config *c = load_ok(ok_text, "connection files in runtime_dir/connections and elsewhere");
        if (c && c->n_contexts == 3) {
                _cleanup_free_ char *srv = at("@/srv/c.json");
                ok(c->contexts[0].connection_file_published, "runtime_dir/connections/sub/a.json is published");
                ok(c->contexts[1].connection_file_published, "the default path is published");
                ok(!c->contexts[2].connection_file_published, "a path elsewhere is the user's");
                is_str(c->contexts[2].connection_file, srv, "the path is kept normalized");
        }
        config_free(c);
}

/* Five ports per context: a port_range that cannot hold them all is refused, naming the range and the count. */
static void test_port_capacity(void) {
        Config *c;

        new_ctx_dir(false);
        check_error("[supervisor]\nport_range = 20000-20014\n[context:a]\n[context:b]\n[context:c]\n[context:d]\n",
                    "@/main.ini:2: [supervisor] port_range = 20000-20014: holds 15 ports, but the 4 contexts need 20 "
                    "(5 each)",
                    "port_range too small for 4 contexts");
        new_ctx_dir(false);
        c = load_ok("[supervisor]\nport_range = 20000-20019\n[context:a]\n[context:b]\n[context:c]\n[context:d]\n",
                    "port_range that holds 4 contexts exactly");
        config_free(c);

        /* The default range (12001 ports) holds 2400 contexts, not 2401. */
        for (unsigned n = 2400; n <= 2401; n++) {
                _cleanup_free_ char *text = NULL, *error = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&text, &len);

                if (!f)
                        abort();
                for (unsigned i = 0; i < n; i++)
                        fprintf(f, "[context:c%u]\n", i);
                fclose(f);
                new_ctx_dir(false);
                c = NULL;
                int r = load(text, &c, &error);
                if (n == 2400)
                        is_int(r, 0, "2400 contexts fit the default port_range");
                else {
                        _cleanup_free_ char *want = at("@/main.ini: [supervisor] port_range (default 20000-32000) "
                                                       "holds 12001 ports, but the 2401 contexts need 12005 (5 each): "
                                                       "set a wider port_range");
                        is_int(r, -EINVAL, "2401 contexts do not fit the default port_range");
                        is_str(error, want, "the message names the default range and the count");
                }
                config_free(c);
        }
}

/* Duplicate names and connection files among many contexts (found through an index, not by comparing all pairs):
 * the message still names the second definition and the first. */
static void test_many_contexts(void) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        if (!f)
                abort();
        fprintf(f, "[supervisor]\nport_range = 1024-65535\n");
        for (unsigned i = 0; i < 5000; i++)
                fprintf(f, "[context:c%u]\n", i);
        fprintf(f, "[context:c1234]\n");
        fclose(f);
        new_ctx_dir(false);
        check_error_r(text, -EINVAL, "@/main.ini:5003: [context:c1234] defined again (first at @/main.ini:1237)",
                      "the 5001st context repeats the 1235th");

        free(text);
        text = NULL;
        f = open_memstream(&text, &len);
        if (!f)
                abort();
        fprintf(f, "[supervisor]\nport_range = 1024-65535\n");
        for (unsigned i = 0; i < 5000; i++)
                fprintf(f, "[context:c%u]\n", i);
        fprintf(f, "[context:x]\nconnection_file = @/run/connections/c77.json\n");
        fclose(f);
        _cleanup_free_ char *content = at(text);
        new_ctx_dir(false);
        check_error_r(content, -EINVAL,
                      "@/main.ini:5004: [context:x] connection_file = @/run/connections/c77.json: contexts c77 and x "
                      "would share @/run/connections/c77.json",
                      "a connection file shared with the 78th of 5000 contexts");
}

/* A symlink in contexts_dir is not followed: the file there is a context's whole definition, user= included. */
static void test_contexts_dir_symlink(void) {
        char link[PATH_MAX + 16], target[PATH_MAX];
        _cleanup_free_ char *want = NULL;

        new_ctx_dir(true);
        snprintf(target, sizeof target, "%s/elsewhere.ini", tmpdir);
        put("elsewhere.ini", "[context:linked]\nuser = root\n");
        snprintf(link, sizeof link, "%s/linked.ini", ctx_dir);
        ok(symlink(target, link) == 0, "a symlink in contexts_dir");
        if (asprintf(&want, "%s: is a symbolic link, which contexts_dir does not follow (put the file itself there)",
                     link) < 0)
                abort();
        check_error_r("[context:main]\n", -ELOOP, want, "a symlinked *.ini in contexts_dir is refused");
        /* The main file itself may be a link (the administrator's); only contexts_dir holds per-context files. */
}

/* What kernelctl add writes must read back exactly, or be refused: every value config_value_writable() accepts is
 * written as "key = value" into a contexts_dir file and read back by the real parser. */
static void test_value_writable(void) {
        static const struct {
                const char *value;
                size_t len; /* 0: strlen */
                bool writable;
        } cases[] = {
                { "A=x ;user = root", 0, false },
                { "A=x\t;c", 0, false },
                { "A=x;y", 0, true },
                { "A=;x", 0, true },
                { "A= x", 0, true },
                { "A=x ", 0, false },
                { " A=x", 0, false },
                { "A=x\ny", 0, false },
                { "A=x\ry", 0, false },
                { "A=x\0y", 5, false },
                { "A=[context:evil]", 0, true },
                { "A=#x ; y", 0, false },
                { "A=x #y", 0, true },
                { "A=\"q\" 'r' \\n", 0, true },
                { "A=é€", 0, true },
                { "A=x\vy", 0, true },
                { "A=x\v", 0, false },
                { "A=a:b=c", 0, true },
                { "A={name}", 0, true },
                { "A=", 0, true },
                { "", 0, false },
        };
        char big[256];

        for (size_t i = 0; i < ELEMENTSOF(cases) + 2; i++) {
                _cleanup_free_ char *file = NULL, *text = NULL, *error = NULL, *shown = NULL;
                const char *value, *reason = NULL;
                size_t len;
                Config *c = NULL;
                int r;

                if (i < ELEMENTSOF(cases)) {
                        value = cases[i].value;
                        len = cases[i].len ?: strlen(value);
                } else {
                        /* "env = " and 193 bytes make the longest line the reader takes; one more is too long. */
                        len = i == ELEMENTSOF(cases) ? 193 : 194;
                        memset(big, 'v', len);
                        memcpy(big, "A=", 2);
                        big[len] = '\0';
                        value = big;
                }
                shown = strndup(value, 24);
                for (char *p = shown; p && *p; p++)
                        if ((unsigned char) *p < ' ')
                                *p = '?';
                r = config_value_writable("env", value, len, &reason);
                if (i < ELEMENTSOF(cases))
                        is_int(r == 0, cases[i].writable, "env value #%zu \"%s\": %s", i, shown,
                               cases[i].writable ? "writable" : "refused");
                else
                        is_int(r == 0, len == 193, "env value of %zu bytes: %s", len,
                               len == 193 ? "writable" : "refused");
                if (r < 0) {
                        ok(reason && *reason, "#%zu: refused with a reason (%s)", i, reason ?: "none");
                        continue;
                }
                /* Written as kernelctl add writes it, read back by the parser. */
                new_ctx_dir(true);
                if (asprintf(&file, "%s/a.ini", ctx_dir + strlen(tmpdir) + 1) < 0 ||
                    asprintf(&text, "; written by kernelctl add\n[context:a]\nenv = %s\n", value) < 0)
                        abort();
                put(file, text);
                r = load("[supervisor]\n", &c, &error);
                is_int(r, 0, "#%zu: the written file loads", i);
                if (r < 0)
                        printf("#   %s\n", error);
                ok(c && c->n_contexts == 1 && c->contexts[0].env[0] && streq(c->contexts[0].env[0], value) &&
                           !c->contexts[0].env[1],
                   "#%zu \"%s\": reads back exactly", i, shown);
                config_free(c);
        }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

int main(void) {
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %m\n");
                return 1;
        }
        snprintf(main_path, sizeof main_path, "%s/main.ini", tmpdir);
        snprintf(run_dir, sizeof run_dir, "%s/run", tmpdir);
        snprintf(state_dir, sizeof state_dir, "%s/state", tmpdir);

        test_restart_policy();
        test_syntax_errors();
        test_value_errors();
        test_backoff_errors();
        test_file_errors();
        test_happy();
        test_transport();
        test_preload();
        test_bundled();
        test_expand_argv();
        test_process_differs();
        test_own_paths();
        test_port_capacity();
        test_many_contexts();
        test_contexts_dir_symlink();
        test_value_writable();

        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return tap_done();
}
