/* The configuration parser: every error a user can hit in the main file (its syntax, its values,
 * the backoff), with its exact file:line and key, and the restart policies. Files are written to a
 * mkdtemp() directory, removed at the end (config-files.h). Loading files: test-config-load.c;
 * checks across contexts and the reload comparison: test-config-checks.c. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config-files.h"

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
                { "context:a", "stop_timeout = 0x10", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "stop_timeout = 0X1p4s", "expected a duration such as 500ms, 30s or 5min" },
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
                { "context:a", "transport = udp", "expected auto, ipc or tcp" },
                { "defaults", "transport = IPC", "expected auto, ipc or tcp" },
                { "context:a", "transport =", "expected auto, ipc or tcp" },
                { "context:a", "preload = sometimes", "expected auto, yes or no" },
                { "defaults", "preload = YES", "expected auto, yes or no" },
                { "context:a", "restore = always", "expected none or replay" },
                { "defaults", "restore = Replay", "expected none or replay" },
                { "context:a", "journal_max = 100", "must be from 1K to 1G" },
                { "defaults", "journal_max = 2G", "must be from 1K to 1G" },
                { "context:a", "journal_max = big", "expected a size such as 512K or 10M" },
                { "context:a", "restore_timeout = 0", "must be greater than 0" },
                { "defaults", "restore_timeout = soon", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "executions_keep = 0", "expected a number from 1 to 1000" },
                { "defaults", "executions_keep = 1001", "expected a number from 1 to 1000" },
                { "context:a", "executions_keep = many", "expected a number from 1 to 1000" },
                { "context:a", "executions_ttl = 0", "must be greater than 0" },
                { "defaults", "executions_ttl = forever", "expected a duration such as 500ms, 30s or 5min" },
                { "context:a", "executions_ttl = infinity", "must be finite" },
                { "supervisor", "executions_memory = 100", "must be from 1K to 1G" },
                { "supervisor", "executions_memory = 2G", "must be from 1K to 1G" },
                { "supervisor", "executions_memory = lots", "expected a size such as 512K or 10M" },
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

int main(void) {
        config_files_init();

        test_restart_policy();
        test_syntax_errors();
        test_value_errors();
        test_backoff_errors();

        config_files_done();
        return tap_done();
}
