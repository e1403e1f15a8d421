/* The configuration parser's checks across contexts and the reload comparison: what makes a
 * process differ, paths of its own, port capacity, many contexts, a contexts_dir that is a link
 * and writable values. Files are written to a mkdtemp() directory, removed at the end
 * (config-files.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config-files.h"

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

/* The control socket's access: 0666 and no owner by default; a mode beyond the permission bits, a digit that is not
 * octal, a user or group nobody has are refused with file, line and value. */
static void test_socket_access(void) {
        Config *c;

        new_ctx_dir(false);
        c = load_ok("[context:a]\n", "no socket setting");
        if (c) {
                is_int(c->socket_mode, 0666, "socket_mode defaults to 0666");
                ok(c->socket_uid == (uid_t) -1 && c->socket_gid == (gid_t) -1 && !c->socket_user && !c->socket_group,
                   "no socket owner or group by default");
        }
        config_free(c);
        new_ctx_dir(false);
        c = load_ok("[supervisor]\nsocket_mode = 0660\nsocket_user = root\nsocket_group = 0\n[context:a]\n",
                    "socket_mode, socket_user and socket_group");
        if (c) {
                is_int(c->socket_mode, 0660, "socket_mode = 0660 is read in octal");
                ok(c->socket_uid == 0 && c->socket_gid == 0,
                   "socket_user = root and socket_group = 0 are uid and gid 0");
        }
        config_free(c);
        new_ctx_dir(false);
        c = load_ok("[supervisor]\nsocket_mode = 600\n", "socket_mode without the leading 0");
        if (c)
                is_int(c->socket_mode, 0600, "socket_mode = 600 is 0600");
        config_free(c);
        new_ctx_dir(false);
        check_error("[supervisor]\nsocket_mode = 0888\n",
                    "@/main.ini:2: [supervisor] socket_mode = 0888: expected an octal mode such as 0666 (digits 0-7)",
                    "socket_mode = 0888 is refused");
        new_ctx_dir(false);
        check_error("[supervisor]\n\nsocket_mode = 1777\n",
                    "@/main.ini:3: [supervisor] socket_mode = 1777: only the permission bits (at most 0777): setuid, "
                    "setgid and sticky mean nothing on a socket",
                    "socket_mode = 1777 is refused");
        new_ctx_dir(false);
        check_error("[supervisor]\nsocket_mode = rw\n",
                    "@/main.ini:2: [supervisor] socket_mode = rw: expected an octal mode such as 0666 (digits 0-7)",
                    "socket_mode = rw is refused");
        new_ctx_dir(false);
        check_error("[supervisor]\nsocket_user = ks-nosuch-user\n",
                    "@/main.ini:2: [supervisor] socket_user = ks-nosuch-user: no such user",
                    "an unknown socket_user is refused");
        new_ctx_dir(false);
        check_error("[supervisor]\nsocket_mode = 0660\nsocket_group = ks-nosuch-group\n",
                    "@/main.ini:3: [supervisor] socket_group = ks-nosuch-group: no such group",
                    "an unknown socket_group is refused");
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

int main(void) {
        config_files_init();

        test_process_differs();
        test_own_paths();
        test_port_capacity();
        test_socket_access();
        test_many_contexts();
        test_contexts_dir_symlink();
        test_value_writable();

        config_files_done();
        return tap_done();
}
