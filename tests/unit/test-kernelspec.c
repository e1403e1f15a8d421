/* Kernelspecs: the search order of jupyter_client, kernel.json parsed into argv, env, language and
 * interrupt_mode, the files the daemon refuses to trust (a link, another user's, group-writable, huge,
 * malformed), and `kernel = NAME` in the configuration. Run as root it also plants files of another uid. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "kernelspec.h"
#include "quirks.h"
#include "tap.h"
#include "util.h"

#define OTHER_ID 4321
/* Whose specs, read with the test's own rights (the trust rules alone). */
#define USER(id) (&(KernelspecUser){ .uid = (id) })

static char tmpdir[] = "/tmp/test-kernelspec.XXXXXX";

static char *path_in(const char *rel) {
        char *p;

        if (asprintf(&p, "%s/%s", tmpdir, rel) < 0)
                abort();
        return p;
}

static void mkdirs(const char *rel) {
        _cleanup_free_ char *p = path_in(rel);

        if (mkdir_p(p, 0755) < 0) {
                printf("Bail out! mkdir %s: %m\n", p);
                exit(1);
        }
}

static void put(const char *rel, const char *text) {
        _cleanup_free_ char *p = path_in(rel), *dir = NULL;
        const char *name;
        FILE *f;

        if (path_split(p, &dir, &name) < 0 || mkdir_p(dir, 0755) < 0)
                abort();
        f = fopen(p, "we");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0 || chmod(p, 0644) < 0) {
                printf("Bail out! cannot write %s: %m\n", p);
                exit(1);
        }
}

static void spec(const char *dir, const char *name, const char *json) {
        _cleanup_free_ char *rel = NULL;

        if (asprintf(&rel, "%s/kernels/%s/kernel.json", dir, name) < 0)
                abort();
        put(rel, json);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static char **dirs_of(const char *jupyter_path_rel) {
        _cleanup_free_ char *jp = NULL;
        char **dirs = NULL;

        if (jupyter_path_rel && asprintf(&jp, "%s/%s", tmpdir, jupyter_path_rel) < 0)
                abort();
        if (kernelspec_dirs(jp, NULL, &dirs) < 0)
                abort();
        return dirs;
}

static void test_dirs(void) {
        _cleanup_strv_free_ char **d = NULL;

        is_int(kernelspec_dirs("/a:/b/::/c/", "/home/u", &d), 0, "dirs: built");
        is_str(d[0], "/a/kernels", "dirs: JUPYTER_PATH first");
        is_str(d[1], "/b/kernels", "dirs: a trailing / is dropped");
        is_str(d[2], "/c/kernels", "dirs: empty entries are skipped");
        is_str(d[3], "/home/u/.local/share/jupyter/kernels", "dirs: then the user's data directory");
        is_str(d[4], "/usr/local/share/jupyter/kernels", "dirs: then /usr/local");
        is_str(d[5], "/usr/share/jupyter/kernels", "dirs: then /usr");
        ok(!d[6], "dirs: nothing else");
        strv_free(d);
        d = NULL;
        is_int(kernelspec_dirs(NULL, NULL, &d), 0, "dirs without JUPYTER_PATH and home");
        is_int(strv_length(d), 2, "dirs: only the system ones");
}

static int parse(const char *json, Kernelspec **ret, char **ret_reason) {
        return kernelspec_parse(json, strlen(json), "Demo", "/x/demo/kernel.json", "/x/demo", "/usr/bin:/bin", ret,
                                ret_reason);
}

static void test_parse(void) {
        _cleanup_(kernelspec_freep) Kernelspec *k = NULL;
        static const struct {
                const char *json, *reason;
        } bad[] = {
                { "[1]", "expected a JSON object" },
                { "{", "not JSON: " },
                { "{}", "argv: expected a non-empty array of strings" },
                { "{\"argv\": []}", "argv: expected a non-empty array of strings" },
                { "{\"argv\": [\"/bin/sh\", 3]}", "argv[1]: expected a string" },
                { "{\"argv\": [\"/bin/sh\"], \"env\": []}", "env: expected an object of strings" },
                { "{\"argv\": [\"/bin/sh\"], \"env\": {\"A=B\": \"x\"}}", "env: A=B: expected a name" },
                { "{\"argv\": [\"/bin/sh\"], \"env\": {\"A\": 1}}", "env: A: expected a name" },
                { "{\"argv\": [\"/bin/sh\"], \"language\": 1}", "language: expected a string" },
                { "{\"argv\": [\"/bin/sh\"], \"interrupt_mode\": \"poke\"}",
                  "interrupt_mode poke: expected signal or message" },
                { "{\"argv\": [\"no-such-program-here\"]}", "argv[0] no-such-program-here: not found in PATH" },
                { "{\"argv\": [\"bin/sh\"]}", "argv[0] bin/sh: expected an absolute path" },
                { "{\"argv\": [\"/bin/sh\"], \"argv\": [\"/bin/sh\"]}", "not JSON: duplicate object key" },
                { "{\"argv\": [\"/bin/sh\\u0000x\"]}", "not JSON: " },
        };
        char *reason = NULL;

        is_int(parse("{\"argv\": [\"sh\", \"-f\", \"{connection_file}\", \"{resource_dir}/k.js\", "
                     "\"a{connection_file}b{connection_file}\"], \"env\": {\"A\": \"1\", \"B\": \"two words\"}, "
                     "\"language\": \"R\", \"display_name\": \"Demo\", \"interrupt_mode\": \"message\", "
                     "\"metadata\": {\"debugger\": true}}",
                     &k, &reason),
               0, "parse: a full spec");
        is_str(k->name, "demo", "parse: the name is lowercased");
        ok(streq(k->argv[0], "/usr/bin/sh") || streq(k->argv[0], "/bin/sh"), "parse: argv[0] found in PATH (%s)",
           k->argv[0]);
        is_str(k->argv[2], "{kernel_file}", "parse: {connection_file} becomes {kernel_file}");
        is_str(k->argv[3], "/x/demo/k.js", "parse: {resource_dir} is the spec's directory");
        is_str(k->argv[4], "a{kernel_file}b{kernel_file}", "parse: every {connection_file} in a word");
        ok(!k->argv[5], "parse: argv ends");
        is_str(k->env[0], "A=1", "parse: env");
        is_str(k->env[1], "B=two words", "parse: env keeps blanks");
        is_str(k->language, "R", "parse: language");
        is_str(k->display_name, "Demo", "parse: display_name");
        is_int(k->interrupt_mode, INTERRUPT_MESSAGE, "parse: interrupt_mode message");
        kernelspec_free(k);
        k = NULL;

        is_int(kernelspec_parse("{\"argv\": [\"sh\"], \"env\": {\"PATH\": \"/nonexistent\"}}", 46, "d", "/p", "/r",
                                NULL, &k, &reason),
               -EINVAL, "parse: argv[0] is looked up in the spec's own PATH");
        free(reason);
        reason = NULL;
        is_int(parse("{\"argv\": [\"/opt/k\"]}", &k, &reason), 0, "parse: a minimal spec");
        is_str(k->argv[0], "/opt/k", "parse: an absolute argv[0] is kept as it is");
        ok(!k->language && !k->display_name && k->env && !k->env[0], "parse: no language, no name, empty env");
        is_int(k->interrupt_mode, INTERRUPT_SIGNAL, "parse: interrupt_mode defaults to signal");

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Kernelspec *b = NULL;

                is_int(parse(bad[i].json, &b, &reason), -EINVAL, "parse refuses %s", bad[i].json);
                ok(reason && strncmp(reason, bad[i].reason, strlen(bad[i].reason)) == 0, "parse: reason \"%s\"",
                   reason ?: "(null)");
                ok(!b, "parse: nothing returned for %s", bad[i].json);
                free(reason);
                reason = NULL;
        }
}

static void test_find(void) {
        _cleanup_strv_free_ char **dirs = NULL;
        Kernelspec *k = NULL;
        char *reason = NULL;
        _cleanup_free_ char *jp = NULL;

        spec("first", "alpha", "{\"argv\": [\"/bin/first\"], \"language\": \"one\"}");
        spec("second", "alpha", "{\"argv\": [\"/bin/second\"]}");
        spec("second", "Beta", "{\"argv\": [\"/bin/beta\", \"{connection_file}\"]}");
        mkdirs("first/kernels/gamma"); /* no kernel.json: not a spec, the search goes on */
        spec("second", "gamma", "{\"argv\": [\"/bin/gamma\"]}");
        if (asprintf(&jp, "%s/first:%s/second", tmpdir, tmpdir) < 0 || kernelspec_dirs(jp, NULL, &dirs) < 0)
                abort();

        is_int(kernelspec_find(dirs, "alpha", USER(geteuid()), NULL, &k, &reason, NULL), 0, "find alpha");
        is_str(k->argv[0], "/bin/first", "find: the first directory of JUPYTER_PATH wins");
        is_str(k->language, "one", "find: its language");
        ok(strstr(k->path, "/first/kernels/alpha/kernel.json") != NULL, "find: its path (%s)", k->path);
        k = kernelspec_free(k);
        is_int(kernelspec_find(dirs, "BETA", USER(geteuid()), NULL, &k, &reason, NULL), 0,
               "find: names compare lowercased");
        is_str(k->name, "beta", "find: the name is lowercased");
        is_str(k->argv[1], "{kernel_file}", "find: argv rewritten");
        k = kernelspec_free(k);
        is_int(kernelspec_find(dirs, "gamma", USER(geteuid()), NULL, &k, &reason, NULL), 0,
               "find: a directory without kernel.json");
        is_str(k ? k->argv[0] : NULL, "/bin/gamma", "find: ... is skipped for the next one");
        k = kernelspec_free(k);
        is_int(kernelspec_find(dirs, "delta", USER(geteuid()), NULL, &k, &reason, NULL), -ENOENT,
               "find: a missing name is ENOENT");
        ok(reason && strstr(reason, "no kernelspec of that name in ") && strstr(reason, "/second/kernels, "),
           "find: the reason lists the directories searched (%s)", reason ?: "(null)");
        free(reason);
        reason = NULL;
        is_int(kernelspec_find(dirs, "../first", USER(geteuid()), NULL, &k, &reason, NULL), -EINVAL,
               "find: a name with '/' refused");
}

/* name's kernel.json in dir "hostile" is made bad by how(); find must refuse it with want_r and a reason
 * naming what, and the listing must leave it out. */
static void check_refused(const char *name, int want_r, const char *want_reason, uid_t uid) {
        _cleanup_strv_free_ char **dirs = dirs_of("hostile");
        _cleanup_free_ char *reason = NULL;
        Kernelspec *k = NULL, **list = NULL;
        size_t n = 0;
        bool listed = false;

        is_int(kernelspec_find(dirs, name, USER(uid), NULL, &k, &reason, NULL), want_r, "refused %s: code", name);
        ok(reason && strstr(reason, want_reason), "refused %s: reason \"%s\"", name, reason ?: "(null)");
        ok(!k, "refused %s: nothing returned", name);
        is_int(kernelspec_list(dirs, USER(uid), NULL, &list, &n, NULL), 0, "refused %s: the listing still works",
               name);
        for (size_t i = 0; i < n; i++) {
                listed |= streq(list[i]->name, name);
                kernelspec_free(list[i]);
        }
        free(list);
        ok(!listed, "refused %s: left out of the listing", name);
}

static void test_hostile(void) {
        _cleanup_free_ char *p = NULL, *q = NULL, *big = NULL;
        _cleanup_strv_free_ char **dirs = NULL;
        Kernelspec **list = NULL;
        size_t n = 0;

        spec("hostile", "good", "{\"argv\": [\"/bin/good\"]}");
        spec("elsewhere", "target", "{\"argv\": [\"/bin/target\"]}");

        mkdirs("hostile/kernels/filelink");
        p = path_in("elsewhere/kernels/target/kernel.json");
        q = path_in("hostile/kernels/filelink/kernel.json");
        if (symlink(p, q) < 0)
                abort();
        check_refused("filelink", -ELOOP, "kernel.json: is a symbolic link", geteuid());

        free(p), free(q);
        p = path_in("elsewhere/kernels/target");
        q = path_in("hostile/kernels/dirlink");
        if (symlink(p, q) < 0)
                abort();
        check_refused("dirlink", -ELOOP, "kernels/dirlink: is a symbolic link", geteuid());

        big = malloc(KERNELSPEC_FILE_MAX + 64);
        memset(big, ' ', KERNELSPEC_FILE_MAX + 63);
        memcpy(big, "{\"argv\": [\"/bin/big\"]}", 22);
        big[KERNELSPEC_FILE_MAX + 63] = '\0';
        spec("hostile", "huge", big);
        check_refused("huge", -EFBIG, "is larger than 64 KiB", geteuid());

        spec("hostile", "broken", "{\"argv\": ");
        check_refused("broken", -EINVAL, "broken/kernel.json: not JSON", geteuid());

        spec("hostile", "groupw", "{\"argv\": [\"/bin/groupw\"]}");
        free(p);
        p = path_in("hostile/kernels/groupw/kernel.json");
        chmod(p, 0664);
        check_refused("groupw", -EPERM, "groupw/kernel.json: is writable by group or others", geteuid());

        spec("hostile", "worlddir", "{\"argv\": [\"/bin/w\"]}");
        free(p);
        p = path_in("hostile/kernels/worlddir");
        chmod(p, 0777);
        check_refused("worlddir", -EPERM, "kernels/worlddir: is writable by group or others", geteuid());

        if (geteuid() == 0) {
                spec("hostile", "others", "{\"argv\": [\"/bin/others\"]}");
                free(p);
                p = path_in("hostile/kernels/others/kernel.json");
                if (chown(p, OTHER_ID, OTHER_ID) < 0)
                        abort();
                check_refused("others", -EPERM, "others/kernel.json: is owned by another user", 1000);
                /* The same file is the kernel's own user's: trusted for that user. */
                dirs = dirs_of("hostile");
                Kernelspec *k = NULL;
                is_int(kernelspec_find(dirs, "others", USER(OTHER_ID), NULL, &k, NULL, NULL), 0,
                       "a spec owned by the kernel's own user is trusted");
                kernelspec_free(k);

                /* A kernels directory that another user controls: nothing in it counts. */
                spec("otherdir", "inside", "{\"argv\": [\"/bin/inside\"]}");
                free(p);
                p = path_in("otherdir/kernels");
                if (chown(p, OTHER_ID, OTHER_ID) < 0)
                        abort();
                strv_free(dirs);
                dirs = dirs_of("otherdir");
                k = NULL;
                is_int(kernelspec_find(dirs, "inside", USER(geteuid()), NULL, &k, NULL, NULL), -ENOENT,
                       "a kernels directory owned by another user is not searched");
                ok(!k, "... and gives no spec");
                strv_free(dirs);
                dirs = NULL;
        } else
                ok(1, "# SKIP not root: cannot plant another uid's files");

        /* A kernels directory that is itself a link holds nothing for us. */
        free(p), free(q);
        p = path_in("hostile/kernels");
        q = path_in("linked/kernels");
        mkdirs("linked");
        if (symlink(p, q) < 0)
                abort();
        dirs = dirs_of("linked");
        Kernelspec *k = NULL;
        is_int(kernelspec_find(dirs, "good", USER(geteuid()), NULL, &k, NULL, NULL), -ENOENT,
               "a kernels directory that is a link");
        kernelspec_free(k);
        strv_free(dirs);

        dirs = dirs_of("hostile");
        is_int(kernelspec_list(dirs, USER(geteuid()), NULL, &list, &n, NULL), 0, "list the hostile directory");
        ok(n >= 1 && streq(list[0]->name, "good"), "list: only the good spec is among the first");
        for (size_t i = 0; i < n; i++)
                kernelspec_free(list[i]);
        free(list);
}

static void test_list(void) {
        _cleanup_free_ char *jp = NULL;
        _cleanup_strv_free_ char **dirs = NULL;
        Kernelspec **list = NULL;
        size_t n = 0;

        spec("l1", "zeta", "{\"argv\": [\"/bin/z1\"]}");
        spec("l1", "eta", "{\"argv\": [\"/bin/e\"], \"language\": \"lang\"}");
        spec("l2", "zeta", "{\"argv\": [\"/bin/z2\"]}");
        spec("l2", "theta", "{\"argv\": [\"/bin/t\"]}");
        if (asprintf(&jp, "%s/l1:%s/l2", tmpdir, tmpdir) < 0 || kernelspec_dirs(jp, NULL, &dirs) < 0)
                abort();
        /* Only the first two directories: the system ones hold what this machine installed. */
        for (size_t i = 2; dirs[i]; i++) {
                free(dirs[i]);
                dirs[i] = NULL;
        }
        is_int(kernelspec_list(dirs, USER(geteuid()), NULL, &list, &n, NULL), 0, "list");
        is_int(n, 3, "list: one per name");
        if (n == 3) {
                is_str(list[0]->name, "eta", "list: sorted (1)");
                is_str(list[1]->name, "theta", "list: sorted (2)");
                is_str(list[2]->name, "zeta", "list: sorted (3)");
                is_str(list[2]->argv[0], "/bin/z1", "list: the first directory's spec of a name");
                is_str(list[0]->language, "lang", "list: with its language");
        }
        for (size_t i = 0; i < n; i++)
                kernelspec_free(list[i]);
        free(list);
}

/* kernelspec_list over dir "lim" (specs a0..a4, of about 170 bytes each in a reply) with limits: how many came
 * back and what *ret_cut said. */
static size_t list_limited(const KernelspecLimits *limits, char **ret_cut) {
        _cleanup_strv_free_ char **dirs = dirs_of("lim");
        Kernelspec **list = NULL;
        size_t n = 0;

        for (size_t i = 1; dirs[i]; i++) { /* only "lim": the system directories hold what this machine has */
                free(dirs[i]);
                dirs[i] = NULL;
        }
        if (kernelspec_list(dirs, USER(geteuid()), limits, &list, &n, ret_cut) < 0)
                abort();
        for (size_t i = 0; i < n; i++)
                kernelspec_free(list[i]);
        free(list);
        return n;
}

static void test_limits(void) {
        char *cut = NULL;
        size_t one;

        for (int i = 0; i < 5; i++) {
                char name[8];
                snprintf(name, sizeof name, "a%d", i);
                spec("lim", name, "{\"argv\": [\"/bin/a\", \"{connection_file}\"], \"display_name\": \"A\"}");
        }
        is_int(list_limited(&(KernelspecLimits){ 5, 100, 1 << 20 }, &cut), 5, "limits not reached: all 5 listed");
        ok(!cut, "... and no cut");
        is_int(list_limited(&(KernelspecLimits){ 3, 100, 1 << 20 }, &cut), 3, "max_specs 3: 3 listed");
        is_str(cut, "more than 3 kernelspecs", "... the cut says so");
        free(cut);
        /* ".", ".." and a0..a4: 7 entries; 4 looked at give at most 4 specs, and the cut. */
        ok(list_limited(&(KernelspecLimits){ 5, 4, 1 << 20 }, &cut) <= 4, "max_entries 4: at most 4 listed");
        is_str(cut, "more than 4 directory entries", "... the cut says so");
        free(cut);
        {
                Kernelspec k = { .name = "a0", .path = "p", .argv = (char *[]){ "a\"\n\x01", NULL } };
                one = kernelspec_reply_size(&k);
                is_int(one, 128 + 4 + 3 + 2 + 2 + (2 + 1 + 2 + 2 + 6) + 1, "reply size: escapes counted");
        }
        {
                _cleanup_strv_free_ char **dirs = dirs_of("lim");
                _cleanup_free_ char *want = NULL;
                Kernelspec *k = NULL;
                size_t size;

                if (kernelspec_find(dirs, "a0", USER(geteuid()), NULL, &k, NULL, NULL) < 0)
                        abort();
                size = kernelspec_reply_size(k); /* the same for each of a0..a4 */
                kernelspec_free(k);
                is_int(list_limited(&(KernelspecLimits){ 5, 100, 2 * size + size / 2 }, &cut), 2,
                       "max_bytes of 2.5 specs: 2 listed");
                if (asprintf(&want, "more than %zu bytes of kernelspecs", 2 * size + size / 2) < 0)
                        abort();
                is_str(cut, want, "... the cut says so");
                free(cut);
        }
}

/* ---- kernel = NAME in the configuration ---- */

static int load(const char *ini, Config **ret, char **ret_error) {
        _cleanup_free_ char *main_path = path_in("cfg/main.ini"), *run = path_in("cfg/run"),
                            *state = path_in("cfg/state"), *ctx = path_in("cfg/contexts.d");
        ConfigDefaults d = { .runtime_dir = run, .state_dir = state, .contexts_dir = ctx };

        put("cfg/main.ini", ini);
        return config_load(main_path, &d, ret, ret_error);
}

/* ini with every '@' replaced by tmpdir. */
static char *with_tmp(const char *ini) {
        char *s = malloc(strlen(ini) * (strlen(tmpdir) + 1) + 1), *o = s;

        if (!s)
                abort();
        for (const char *c = ini; *c; c++)
                if (*c == '@')
                        o = stpcpy(o, tmpdir);
                else
                        *o++ = *c;
        *o = '\0';
        return s;
}

static void test_config(void) {
        _cleanup_free_ char *ini = NULL, *error = NULL;
        Config *c = NULL;
        const ContextConfig *cc;

        spec("cfgspecs", "lang",
             "{\"argv\": [\"/bin/lang\", \"-f\", \"{connection_file}\"], \"env\": {\"A\": \"spec\", "
             "\"B\": \"spec\"}, \"language\": \"L\", \"interrupt_mode\": \"message\"}");
        ini = with_tmp("[defaults]\nenv = JUPYTER_PATH=@/cfgspecs\n\n"
                       "[context:plain]\n\n"
                       "[context:named]\nkernel = LANG\nenv = B=context\n\n"
                       "[context:override]\nkernel = lang\nargv = /bin/own {kernel_file}\n\n"
                       "[context:argvonly]\nargv = /bin/own {kernel_file}\n\n"
                       "[context:py]\nkernel = python3\nenv = JUPYTER_PATH=@/none\n");
        is_int(load(ini, &c, &error), 0, "config with kernels loads");
        if (error)
                diag(error);
        cc = c ? config_find_context(c, "plain") : NULL;
        ok(cc && streq(cc->kernel, "python3") && streq(cc->language, "python") && !cc->kernel_path,
           "no kernel and no argv: the built-in python3");
        ok(cc && streq(cc->argv[0], "/usr/bin/python3") && streq(cc->argv[2], "ipykernel_launcher"),
           "... which runs ipykernel");
        cc = c ? config_find_context(c, "named") : NULL;
        ok(cc && streq(cc->kernel, "lang") && streq(cc->language, "L"), "kernel = LANG: the spec, lowercased");
        ok(cc && streq(cc->argv[0], "/bin/lang") && streq(cc->argv[2], "{kernel_file}"), "kernel: the spec's argv");
        ok(cc && cc->kernel_path && strstr(cc->kernel_path, "cfgspecs/kernels/lang/kernel.json"),
           "kernel: the spec's path");
        is_int(cc ? (int) cc->interrupt_mode : -1, INTERRUPT_MESSAGE, "kernel: the spec's interrupt_mode");
        if (cc) {
                bool a = false, b = false;

                for (size_t i = 0; cc->env[i]; i++) {
                        a |= streq(cc->env[i], "A=spec");
                        b |= streq(cc->env[i], "B=context");
                        ok(!streq(cc->env[i], "B=spec"), "kernel: the context's env replaces the spec's (%s)",
                           cc->env[i]);
                }
                ok(a && b, "kernel: env holds the spec's A and the context's B");
        }
        cc = c ? config_find_context(c, "override") : NULL;
        ok(cc && streq(cc->argv[0], "/bin/own") && streq(cc->language, "L"),
           "argv beside kernel overrides the spec's argv, the rest stays");
        cc = c ? config_find_context(c, "argvonly") : NULL;
        ok(cc && !cc->kernel && !cc->language && cc->interrupt_mode == INTERRUPT_SIGNAL, "argv alone: no kernel");
        cc = c ? config_find_context(c, "py") : NULL;
        ok(cc && streq(cc->kernel, "python3") && cc->argv && streq(cc->argv[0], "/usr/bin/python3"),
           "kernel = python3: the installed spec, or the built-in one");
        config_free(c);
        c = NULL;
        free(ini);
        free(error);
        error = NULL;

        ini = with_tmp("[defaults]\nkernel = lang\nenv = JUPYTER_PATH=@/cfgspecs\n[context:a]\n");
        is_int(load(ini, &c, &error), 0, "kernel in [defaults]");
        cc = c ? config_find_context(c, "a") : NULL;
        ok(cc && streq(cc->kernel, "lang") && streq(cc->argv[0], "/bin/lang"), "[defaults] kernel applies");
        config_free(c);
        c = NULL;
        free(ini);

        ini = with_tmp("[context:a]\nenv = JUPYTER_PATH=@/cfgspecs\nkernel = nosuch\n");
        is_int(load(ini, &c, &error), -EINVAL, "an unknown kernel is refused");
        ok(error && strstr(error, "main.ini:3: [context:a] kernel = nosuch: no kernelspec of that name in ") &&
                   strstr(error, "cfgspecs/kernels, ") && strstr(error, "/usr/share/jupyter/kernels"),
           "... naming file:line, key, value and the directories: %s", error ?: "(null)");
        free(error);
        error = NULL;
        free(ini);

        spec("cfgspecs", "bad", "{\"argv\": 7}");
        ini = with_tmp("[context:a]\nenv = JUPYTER_PATH=@/cfgspecs\nkernel = bad\n");
        is_int(load(ini, &c, &error), -EINVAL, "a malformed kernelspec is refused");
        ok(error && strstr(error, "main.ini:3: [context:a] kernel = bad: ") &&
                   strstr(error, "cfgspecs/kernels/bad/kernel.json: argv: expected a non-empty array"),
           "... naming the file and what is wrong: %s", error ?: "(null)");
        free(error);
        error = NULL;
        free(ini);

        ini = with_tmp("[context:a]\nkernel = ../x\n");
        is_int(load(ini, &c, &error), -EINVAL, "a kernel name with '/' is refused");
        ok(error && strstr(error, "main.ini:2: [context:a] kernel = ../x: expected a kernelspec name"),
           "... saying why: %s", error ?: "(null)");
        free(ini);
        ini = NULL;
}

/* xeus-python alone gets SIGINT back, through a silent request that leaves no history. */
static void test_quirks(void) {
        json_auto_t *xeus = json_pack("{s:s}", "implementation", "xeus-python");
        json_auto_t *ipython = json_pack("{s:s}", "implementation", "ipython");
        json_auto_t *none = json_object();
        json_auto_t *req = NULL;
        const char *code = quirks_sigint_code(xeus);

        ok(code && strstr(code, "signal.SIGINT") && strstr(code, "default_int_handler"),
           "quirks: xeus-python gets Python's SIGINT handler back");
        ok(code && strstr(code, "del _kernelsup_signal"), "quirks: and keeps no name in the namespace");
        ok(!quirks_sigint_code(ipython) && !quirks_sigint_code(none) && !quirks_sigint_code(NULL),
           "quirks: ipykernel, a kernel without implementation and no reply get nothing");
        req = quirks_silent_request("x = 1");
        ok(req && json_is_true(json_object_get(req, "silent")) &&
                   json_is_false(json_object_get(req, "store_history")) &&
                   json_is_false(json_object_get(req, "allow_stdin")) &&
                   streq(json_string_value(json_object_get(req, "code")), "x = 1"),
           "quirks: the request is silent, without history or input");
        code = quirks_keepkernel_code(ipython);
        ok(code && strstr(code, "'keepkernel_on_exit', True") && strstr(code, "'ask_exit'"),
           "quirks: an IPython kernel's ask_exit keeps the kernel");
        ok(!quirks_keepkernel_code(xeus) && !quirks_keepkernel_code(none) && !quirks_keepkernel_code(NULL),
           "quirks: another kernel gets no keepkernel code");
        {
                json_auto_t *kept = json_pack("{s:s, s:[{s:s, s:b}]}", "status", "ok", "payload", "source", "ask_exit",
                                              "keepkernel", 1);
                json_auto_t *ending = json_pack("{s:[{s:s}, {s:s, s:n}]}", "payload", "source", "page", "source",
                                                "ask_exit", "keepkernel");
                json_auto_t *plain = json_pack("{s:[{s:s}]}", "payload", "source", "page");

                ok(quirks_exit_asked(kept) == 1 && quirks_exit_asked(ending) == -1 && quirks_exit_asked(plain) == 0 &&
                           quirks_exit_asked(none) == 0 && quirks_exit_asked(NULL) == 0,
                   "quirks: the ask_exit payload read: kept, ending (keepkernel null), none");
        }
}

int main(void) {
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %m\n");
                return 1;
        }
        chmod(tmpdir, 0755);
        test_dirs();
        test_parse();
        test_find();
        test_hostile();
        test_list();
        test_limits();
        test_config();
        test_quirks();
        nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        return tap_done();
}
