/* The configuration parser loading files: the errors of files and contexts_dir (with their exact
 * file:line and key), the happy paths, transports, preload, the bundled configuration and argv
 * expansion. Files are written to a mkdtemp() directory, removed at the end (config-files.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config-files.h"

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
                    "[context:b]\nunresponsive_restart = no\noutput_limit = 1G\nshutdown_grace = 1e-9\n",
                    "liveness and output keys");
        if (c && c->n_contexts == 2) {
                is_int(c->contexts[0].heartbeat_interval, 500 * USEC_PER_MSEC, "heartbeat_interval 500ms");
                is_int(c->contexts[0].heartbeat_misses, 2, "heartbeat_misses 2");
                is_int(c->contexts[0].unresponsive_restart, 120 * USEC_PER_SEC, "unresponsive_restart 2min");
                is_int(c->contexts[0].output_limit, 64 * 1024, "output_limit 64K");
                is_int(c->contexts[1].unresponsive_restart, 0, "unresponsive_restart = no");
                is_int(c->contexts[1].output_limit, 1024 * 1024 * 1024, "output_limit 1G");
                is_int(c->contexts[1].shutdown_grace, 1, "shutdown_grace 1e-9: 1 us, a positive duration stays one");
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
                x = c->contexts[0];
                x.restore = RESTORE_REPLAY;
                ok(context_config_process_change(&c->contexts[0], &x) == NULL, "restore= is no process change");
                is_str(context_config_setting_change(&c->contexts[0], &x), "restore",
                       "restore= applies in place (the journal opens or goes)");
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

static void test_executions(void) {
        const ContextConfig *cc;
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[defaults]\nexecutions_ttl = 10min\n[context:a]\n[context:b]\nexecutions_keep = 5\n"
                    "executions_ttl = 30s\n",
                    "executions keys");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->executions_keep == 32 && cc->executions_ttl == 10 * 60 * USEC_PER_SEC,
           "executions_keep is 32 by default, [defaults] executions_ttl applies");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && cc->executions_keep == 5 && cc->executions_ttl == 30 * USEC_PER_SEC,
           "a context's own executions_keep and executions_ttl");
        ok(c && c->executions_memory == 64 * 1024 * 1024, "executions_memory is 64 MiB by default");
        config_free(c);
        c = load_ok("[supervisor]\nexecutions_memory = 8M\n[context:a]\n", "executions_memory");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(c && c->executions_memory == 8 * 1024 * 1024 && cc->executions_ttl == 60 * 60 * USEC_PER_SEC,
           "[supervisor] executions_memory = 8M; executions_ttl is 1 h by default");
        config_free(c);
}

/* [supervisor] user_contexts_max and added_by, the keys of the contexts a uid other than root adds. */
static void test_user_contexts(void) {
        const ContextConfig *cc;
        const char *rel;
        char p1[128];
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[defaults]\nmemory_max = 1G\n[context:a]\n", "user_contexts_max unset");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(c && c->user_contexts_max == 8, "user_contexts_max is 8 by default");
        ok(cc && cc->added_by == (uid_t) -1, "a context written by hand has no added_by");
        ok(c && c->defaults.memory_max == 1024ULL * 1024 * 1024 && c->defaults.tasks_max == 0 &&
                   c->defaults.start_timeout == 30 * USEC_PER_SEC,
           "the defaults: [defaults]' memory_max, the built-in tasks_max and start_timeout");
        config_free(c);
        c = load_ok("[supervisor]\nuser_contexts_max = 0\n", "user_contexts_max = 0");
        ok(c && c->user_contexts_max == 0, "user_contexts_max = 0 turns such adds off");
        config_free(c);
        check_error("[supervisor]\nuser_contexts_max = 1001\n",
                    "@/main.ini:2: [supervisor] user_contexts_max = 1001: expected a number from 0 to 1000",
                    "user_contexts_max = 1001");
        check_error("[context:a]\nadded_by = 1000\n",
                    "@/main.ini:2: [context:a] added_by = 1000: only in a file of contexts_dir, where kernelctl add "
                    "records who added the context",
                    "added_by in the main file");
        check_error("[defaults]\nadded_by = 1000\n",
                    "@/main.ini:2: [defaults] added_by = 1000: only in a file of contexts_dir, where kernelctl add "
                    "records who added the context",
                    "added_by in [defaults]");
        rel = new_ctx_dir(true);
        snprintf(p1, sizeof p1, "%s/a.ini", rel);
        put(p1, "[context:a]\nadded_by = x\n");
        check_error_r("[defaults]\n", -EINVAL, "&/a.ini:2: [context:a] added_by = x: expected a uid (a number)",
                      "added_by = x");
        put(p1, "[context:a]\nadded_by = 1000\n");
        c = load_ok("[defaults]\n", "added_by in a contexts_dir file");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->added_by == 1000, "added_by = 1000 read from contexts_dir");
        config_free(c);
}

static void test_restore(void) {
        const ContextConfig *cc;
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[defaults]\nrestore = replay\nrestore_timeout = 90s\n[context:a]\n[context:b]\nrestore = none\n"
                    "journal_max = 64K\n[context:z]\n",
                    "restore");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->restore == RESTORE_REPLAY, "[defaults] restore = replay applies");
        ok(cc && cc->journal_max == 16 * 1024 * 1024, "journal_max is 16 MiB by default");
        ok(cc && cc->restore_timeout == 90 * USEC_PER_SEC, "[defaults] restore_timeout applies");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && cc->restore == RESTORE_NONE && cc->journal_max == 64 * 1024,
           "a context's own restore and journal_max");
        config_free(c);
        c = load_ok("[context:a]\n", "no restore");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->restore == RESTORE_NONE && cc->restore_timeout == 10 * 60 * USEC_PER_SEC,
           "restore = none and restore_timeout 10 min by default");
        config_free(c);
        is_str(restore_to_string(RESTORE_REPLAY), "replay", "restore names");
        ok(!restore_to_string(_RESTORE_MAX), "out of range: NULL");
}

/* transport = auto by the kernel's argv: ipc for ipykernel and IRkernel, tcp for every other kernel. */
static void test_transport_auto(void) {
        static const struct {
                const char *argv;
                Transport want;
                const char *why;
        } cases[] = {
                { "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file}", TRANSPORT_IPC,
                  "auto: ipykernel binds Unix sockets" },
                { "/usr/bin/R --slave -e IRkernel::main() --args {kernel_file}", TRANSPORT_IPC,
                  "auto: IRkernel binds Unix sockets" },
                { "/usr/bin/xpython -f {kernel_file}", TRANSPORT_TCP, "auto: xeus-python aborts on an ipc endpoint" },
                { "/opt/npm/node_modules/.bin/tslab kernel --config-path {kernel_file} --js", TRANSPORT_TCP,
                  "auto: tslab writes ipc endpoints that no client finds" },
                { "/usr/bin/node /opt/ijs/node_modules/ijavascript/lib/kernel.js {kernel_file}", TRANSPORT_TCP,
                  "auto: ijavascript cannot bind an ipc endpoint" },
                { "/opt/k/mykernel {kernel_file}", TRANSPORT_TCP,
                  "auto: a kernel not known to bind Unix sockets; tcp is what every Jupyter kernel supports" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *content = NULL;
                const ContextConfig *cc;
                Config *c;

                if (asprintf(&content, "[context:a]\nargv = %s\n[context:b]\nargv = %s\ntransport = ipc\n",
                             cases[i].argv, cases[i].argv) < 0)
                        abort();
                new_ctx_dir(false);
                c = load_ok(content, cases[i].argv);
                cc = c ? config_find_context(c, "a") : NULL;
                ok(cc && cc->transport == cases[i].want && streq_ptr(cc->transport_why, cases[i].why),
                   "auto for %s: %s (%s)", cases[i].argv, transport_to_string(cases[i].want), cases[i].why);
                cc = c ? config_find_context(c, "b") : NULL;
                ok(cc && cc->transport == TRANSPORT_IPC, "an explicit transport = ipc wins for %s", cases[i].argv);
                config_free(c);
        }
}

static void test_transport(void) {
        _cleanup_free_ char *content = NULL;
        const ContextConfig *cc;
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[context:a]\n[context:b]\ntransport = tcp\n", "transport");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && cc->transport == TRANSPORT_IPC, "transport defaults to auto: ipc for the built-in ipykernel");
        cc = c ? config_find_context(c, "b") : NULL;
        ok(cc && cc->transport == TRANSPORT_TCP && streq_ptr(cc->transport_why, "set in the configuration"),
           "transport = tcp, as set");
        config_free(c);
        test_transport_auto();
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
        check_ipc_too_long("[context:a]\n",
                           "@/main.ini:4: [context:a]: transport is ipc (auto: ipykernel binds Unix sockets)",
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
        char *argv[] = { "/bin/k",
                         "-f",
                         "{kernel_file}",
                         "--conn={kernel_file}",
                         "{name}:{name}",
                         "{other}",
                         "{kernel_file",
                         "{connection_file}",
                         NULL };
        ContextConfig cc = { .name = "ctx", .argv = argv };
        _cleanup_strv_free_ char **v = NULL;

        is_int(context_config_expand_argv(&cc, "/run/k/{name}.json", &v), 0, "expand_argv");
        ok(strv_is(v, (const char *const[]){ "/bin/k", "-f", "/run/k/{name}.json", "--conn=/run/k/{name}.json",
                                             "ctx:ctx", "{other}", "{kernel_file", "/run/k/{name}.json", NULL }),
           "placeholders expanded inside words ({connection_file} as {kernel_file}), substituted text not rescanned, "
           "others kept");
        ok(v && v != argv && v[0] != argv[0], "a new vector of new strings");
        is_int(context_config_expand_argv(&cc, NULL, &v), -EINVAL, "expand_argv without kernel_file");
}

int main(void) {
        config_files_init();

        test_file_errors();
        test_happy();
        test_transport();
        test_preload();
        test_restore();
        test_executions();
        test_user_contexts();
        test_bundled();
        test_expand_argv();

        config_files_done();
        return tap_done();
}
