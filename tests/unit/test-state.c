/* Persistent state: the supervisor generation, per-context records, their JSON and their files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "state.h"
#include "tap.h"
#include "util.h"

static char tmpdir[] = "/tmp/test-state.XXXXXX";

static void full_state(ContextState *s) {
        *s = (ContextState){
                .conn = { .ports = { 27101, 27102, 27103, 27104, 27105 } },
                .has_conn = true,
                .incarnation = 7,
                .restarts = 6,
                .kernel_id = "0f8fad5b-d9cb-469f-a165-70867728950e",
                .pid = 4242,
                .pid_starttime = 123456789,
                .boot_id = "7d444840-9dc0-11d1-b245-5ffdce74fad2",
                .started_at = 1764410000123456ULL,
                .preloaded = true,
                .last_exit = { .valid = true, .code = 0, .signal = 9, .oom = true, .at = 1764410000000001ULL },
        };
        memcpy(s->conn.key, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", KEY_HEX_LEN + 1);
        s->last_error = strdup("kernel did not answer kernel_info within 30s");
        s->last_error_at = 1764410000654321ULL;
}

static bool exit_equal(const ExitInfo *a, const ExitInfo *b) {
        return a->valid == b->valid && a->code == b->code && a->signal == b->signal && a->oom == b->oom &&
               a->at == b->at;
}

static bool state_equal(const ContextState *a, const ContextState *b) {
        if (a->has_conn != b->has_conn)
                return false;
        if (a->has_conn &&
            (memcmp(a->conn.ports, b->conn.ports, sizeof a->conn.ports) != 0 || !streq(a->conn.key, b->conn.key)))
                return false;
        if (!!a->last_error != !!b->last_error || (a->last_error && !streq(a->last_error, b->last_error)))
                return false;
        return a->incarnation == b->incarnation && a->restarts == b->restarts && streq(a->kernel_id, b->kernel_id) &&
               a->pid == b->pid && a->pid_starttime == b->pid_starttime && streq(a->boot_id, b->boot_id) &&
               a->started_at == b->started_at && a->preloaded == b->preloaded &&
               a->last_error_at == b->last_error_at && exit_equal(&a->last_exit, &b->last_exit);
}

static void test_roundtrip(void) {
        _cleanup_(context_state_done) ContextState s = {}, back = {}, min = {}, min_back = {};
        json_auto_t *j = NULL, *jm = NULL;
        const json_t *e;

        full_state(&s);
        j = context_state_to_json(&s);
        ok(j != NULL, "to_json of a full state");
        if (!j)
                return;
        is_int(json_integer_value(json_object_get(j, "version")), 1, "version 1");
        is_int(json_integer_value(json_object_get(j, "hb_port")), 27105, "hb_port an integer");
        is_str(json_string_value(json_object_get(j, "key")), s.conn.key, "key");
        e = json_object_get(j, "last_exit");
        ok(json_is_object(e) && json_is_null(json_object_get(e, "code")) &&
                   json_integer_value(json_object_get(e, "signal")) == 9 && json_is_true(json_object_get(e, "oom")),
           "last_exit by signal: code null, signal 9, oom true");
        is_str(json_string_value(json_object_get(j, "last_error")), s.last_error, "last_error");
        is_int(context_state_from_json(j, &back), 0, "from_json of a full state");
        ok(state_equal(&s, &back), "full state round-trips");
        ok(back.has_conn, "has_conn after round trip");
        is_str(back.conn.ip, "", "ip is not persisted");
        /* A daemon before last_error_at wrote none: the error loads, its time unknown. */
        json_object_del(j, "last_error_at");
        context_state_done(&back);
        is_int(context_state_from_json(j, &back), 0, "from_json without last_error_at (an older daemon's file)");
        ok(back.last_error && back.last_error_at == 0, "without last_error_at: the error is kept, its time is 0");

        /* An exit by code instead of signal. */
        s.last_exit = (ExitInfo){ .valid = true, .code = 3, .at = 5 };
        json_decref(j);
        j = context_state_to_json(&s);
        e = j ? json_object_get(j, "last_exit") : NULL;
        ok(e && json_integer_value(json_object_get(e, "code")) == 3 && json_is_null(json_object_get(e, "signal")) &&
                   json_is_false(json_object_get(e, "oom")),
           "last_exit by code: code 3, signal null, oom false");
        context_state_done(&back);
        is_int(j ? context_state_from_json(j, &back) : -1, 0, "from_json, exit by code");
        ok(state_equal(&s, &back), "exit by code round-trips");

        /* An exit whose status we could not see (an adopted kernel): code and signal both null. */
        s.last_exit = (ExitInfo){ .valid = true, .unknown = true, .at = 6 };
        json_decref(j);
        j = context_state_to_json(&s);
        e = j ? json_object_get(j, "last_exit") : NULL;
        ok(e && json_is_null(json_object_get(e, "code")) && json_is_null(json_object_get(e, "signal")),
           "unknown exit: code and signal null");
        context_state_done(&back);
        is_int(j ? context_state_from_json(j, &back) : -1, 0, "from_json, unknown exit");
        ok(back.last_exit.valid && back.last_exit.unknown && back.last_exit.code == 0 && back.last_exit.signal == 0,
           "unknown exit round-trips");

        /* A last_error that is not UTF-8 still serialises, each stray byte replaced by U+FFFD. */
        free(s.last_error);
        s.last_error = strdup("bad \xff\xfe byte");
        json_decref(j);
        j = context_state_to_json(&s);
        ok(j != NULL, "to_json with a last_error that is not UTF-8");
        is_str(j ? json_string_value(json_object_get(j, "last_error")) : NULL, "bad \xef\xbf\xbd\xef\xbf\xbd byte",
               "bytes that are not UTF-8 replaced by U+FFFD");

        /* The minimal state: never launched, no ports yet. */
        jm = context_state_to_json(&min);
        ok(jm != NULL, "to_json of a minimal state");
        if (!jm)
                return;
        ok(!json_object_get(jm, "shell_port") && !json_object_get(jm, "hb_port") && !json_object_get(jm, "key"),
           "no ports or key without has_conn");
        ok(json_is_null(json_object_get(jm, "last_exit")) && json_is_null(json_object_get(jm, "last_error")),
           "last_exit and last_error are null");
        is_str(json_string_value(json_object_get(jm, "kernel_id")), "", "kernel_id empty");
        memset(&min_back, 0x5a, sizeof min_back);
        min_back.last_error = NULL;
        is_int(context_state_from_json(jm, &min_back), 0, "from_json of a minimal state");
        ok(state_equal(&min, &min_back) && !min_back.has_conn && !min_back.last_exit.valid,
           "minimal state round-trips");
}

/* One change to a valid full state's JSON that must make it unreadable. */
typedef struct Mutation {
        const char *what;
        const char *field; /* top-level field, or the field of last_exit when in_exit */
        const char *value; /* JSON text; NULL deletes the field */
        bool in_exit;
} Mutation;

static const Mutation mutations[] = {
        { "version missing", "version", NULL },
        { "version 2", "version", "2" },
        { "version a string", "version", "\"1\"" },
        { "shell_port a string", "shell_port", "\"27101\"" },
        { "shell_port 0", "shell_port", "0" },
        { "iopub_port 65536", "iopub_port", "65536" },
        { "stdin_port -1", "stdin_port", "-1" },
        { "control_port a real", "control_port", "27104.0" },
        { "hb_port null", "hb_port", "null" },
        { "partial port set: no hb_port", "hb_port", NULL },
        { "partial port set: no key", "key", NULL },
        { "key 63 hex", "key", "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeef\"" },
        { "key 65 hex", "key", "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff0\"" },
        { "key not hex", "key", "\"0011223344556677889zaabbccddeeff00112233445566778899aabbccddeeff\"" },
        { "key a number", "key", "1" },
        { "incarnation missing", "incarnation", NULL },
        { "incarnation -1", "incarnation", "-1" },
        { "incarnation a string", "incarnation", "\"7\"" },
        { "restarts beyond unsigned", "restarts", "4294967296" },
        { "restarts a bool", "restarts", "true" },
        { "kernel_id 35 characters", "kernel_id", "\"0f8fad5b-d9cb-469f-a165-70867728950\"" },
        { "kernel_id not a uuid", "kernel_id", "\"0f8fad5b_d9cb_469f_a165_70867728950e\"" },
        { "kernel_id a number", "kernel_id", "5" },
        { "kernel_id missing", "kernel_id", NULL },
        { "pid -1", "pid", "-1" },
        { "pid beyond pid_t", "pid", "2147483648" },
        { "pid null", "pid", "null" },
        { "pid_starttime -1", "pid_starttime", "-1" },
        { "boot_id too long", "boot_id", "\"7d444840-9dc0-11d1-b245-5ffdce74fad2x\"" },
        { "boot_id a number", "boot_id", "0" },
        { "started_at -1", "started_at", "-1" },
        { "started_at a string", "started_at", "\"now\"" },
        { "preloaded a number", "preloaded", "1" },
        { "last_exit missing", "last_exit", NULL },
        { "last_exit a string", "last_exit", "\"killed\"" },
        { "last_exit both code and signal", "last_exit", "{\"code\":1,\"signal\":9,\"oom\":false,\"at\":1}" },
        { "last_exit code 256", "code", "256", true },
        { "last_exit signal 0", "signal", "0", true },
        { "last_exit signal 65", "signal", "65", true },
        { "last_exit signal a string", "signal", "\"KILL\"", true },
        { "last_exit code missing", "code", NULL, true },
        { "last_exit oom a string", "oom", "\"yes\"", true },
        { "last_exit oom missing", "oom", NULL, true },
        { "last_exit at missing", "at", NULL, true },
        { "last_exit at -5", "at", "-5", true },
        { "last_error missing", "last_error", NULL },
        { "last_error a number", "last_error", "5" },
        { "last_error with a NUL", "last_error", "\"a\\u0000b\"" },
        { "last_error_at a string", "last_error_at", "\"now\"" },
        { "last_error_at -5", "last_error_at", "-5" },
};

static void test_corruptions(void) {
        _cleanup_(context_state_done) ContextState s = {};
        json_auto_t *base = NULL, *arr = NULL;
        ContextState sentinel, got;

        full_state(&s);
        base = context_state_to_json(&s);
        ok(base != NULL, "base JSON");
        if (!base)
                return;

        memset(&sentinel, 0xa5, sizeof sentinel);
        for (size_t i = 0; i < ELEMENTSOF(mutations); i++) {
                const Mutation *m = &mutations[i];
                json_auto_t *j = json_deep_copy(base);
                json_t *target = m->in_exit ? json_object_get(j, "last_exit") : j;
                int r;

                if (m->value) {
                        json_t *v = json_loads(m->value, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                        ok(v && json_object_set_new(target, m->field, v) == 0, "mutate: %s", m->what);
                } else
                        ok(json_object_del(target, m->field) == 0, "mutate: %s", m->what);
                got = sentinel;
                r = context_state_from_json(j, &got);
                is_int(r, -EBADMSG, "from_json refuses %s", m->what);
                ok(memcmp(&got, &sentinel, sizeof got) == 0, "ret untouched after %s", m->what);
                if (r == 0)
                        context_state_done(&got);
        }

        arr = json_array();
        got = sentinel;
        is_int(context_state_from_json(arr, &got), -EBADMSG, "from_json refuses an array");
        ok(memcmp(&got, &sentinel, sizeof got) == 0, "ret untouched after an array");
}

static int write_text(int dirfd, const char *name, const char *text) {
        return write_file_atomic_at(dirfd, name, text, strlen(text), 0600, (uid_t) -1, (gid_t) -1);
}

/* Counts the entries of dirfd/sub (other than . and ..) and those that look like temp files. */
static int count_entries(int dirfd, const char *sub, int *ret_temp) {
        int fd = openat(dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;
        int n = 0, t = 0;

        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                n++;
                if (strncmp(de->d_name, ".#", 2) == 0)
                        t++;
        }
        closedir(d);
        *ret_temp = t;
        return n;
}

static void test_files(int dirfd) {
        static const char *const bad_names[] = { "",
                                                 ".",
                                                 "..",
                                                 "a/b",
                                                 "../x",
                                                 "x y",
                                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
        _cleanup_(context_state_done) ContextState s = {}, got = {};
        ContextState sentinel;
        struct stat st;
        int temp = -1;

        full_state(&s);
        memset(&sentinel, 0xa5, sizeof sentinel);

        for (size_t i = 0; i < ELEMENTSOF(bad_names); i++) {
                is_int(context_state_save(dirfd, bad_names[i], &s), -EINVAL, "save refuses name \"%s\"", bad_names[i]);
                is_int(context_state_load(dirfd, bad_names[i], &got), -EINVAL, "load refuses name \"%s\"",
                       bad_names[i]);
                is_int(context_state_remove(dirfd, bad_names[i]), -EINVAL, "remove refuses name \"%s\"", bad_names[i]);
        }

        got = sentinel;
        is_int(context_state_load(dirfd, "alice", &got), -ENOENT, "load before any save: -ENOENT");
        ok(memcmp(&got, &sentinel, sizeof got) == 0, "ret untouched on -ENOENT");
        got = (ContextState){};
        is_int(context_state_remove(dirfd, "alice"), 0, "remove without a contexts dir is fine");

        umask(022);
        is_int(context_state_save(dirfd, "alice", &s), 0, "save alice");
        ok(fstatat(dirfd, "contexts", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode), "contexts dir created");
        is_int(st.st_mode & 07777, 0700, "contexts dir is 0700");
        ok(fstatat(dirfd, "contexts/alice.json", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode),
           "contexts/alice.json is a regular file");
        is_int(st.st_mode & 07777, 0600, "contexts/alice.json is 0600");
        is_int(context_state_load(dirfd, "alice", &got), 0, "load alice");
        ok(state_equal(&s, &got), "saved state loads back equal");
        context_state_done(&got);

        s.incarnation++;
        is_int(context_state_save(dirfd, "alice", &s), 0, "save alice again");
        is_int(context_state_save(dirfd, "bob.2-x_y", &s), 0, "save bob.2-x_y");
        is_int(count_entries(dirfd, "contexts", &temp), 2, "two files in contexts/");
        is_int(temp, 0, "no temp files left behind");
        is_int(context_state_load(dirfd, "alice", &got), 0, "load alice again");
        is_int(got.incarnation, 8, "the newer state");
        context_state_done(&got);
        is_int(context_state_load(dirfd, "carol", &got), -ENOENT, "load of a context never saved: -ENOENT");

        /* A state load would refuse is never written. */
        s.pid = -1;
        is_int(context_state_save(dirfd, "dave", &s), -EINVAL, "save refuses an invalid state");
        ok(faccessat(dirfd, "contexts/dave.json", F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT,
           "nothing written for it");
        s.pid = 4242;

        /* Corrupt files: truncated JSON, wrong types, duplicate keys, oversized. */
        {
                _cleanup_close_ int cfd = openat(dirfd, "contexts", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                static const struct {
                        const char *what, *text;
                } bad[] = {
                        { "truncated JSON", "{\"version\":1,\"incarnation\":" },
                        { "empty file", "" },
                        { "wrong types", "{\"version\":1,\"incarnation\":\"1\",\"restarts\":0,\"kernel_id\":\"\","
                                         "\"pid\":0,\"pid_starttime\":0,\"boot_id\":\"\",\"started_at\":0,"
                                         "\"last_exit\":null,\"last_error\":null}" },
                        { "duplicate keys", "{\"version\":1,\"incarnation\":1,\"incarnation\":2,\"restarts\":0,"
                                            "\"kernel_id\":\"\",\"pid\":0,\"pid_starttime\":0,\"boot_id\":\"\","
                                            "\"started_at\":0,\"last_exit\":null,\"last_error\":null}" },
                };
                _cleanup_free_ char *big = NULL;

                for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                        is_int(write_text(cfd, "eve.json", bad[i].text), 0, "plant %s", bad[i].what);
                        got = sentinel;
                        is_int(context_state_load(dirfd, "eve", &got), -EBADMSG, "load of %s: -EBADMSG", bad[i].what);
                        ok(memcmp(&got, &sentinel, sizeof got) == 0, "ret untouched after %s", bad[i].what);
                }
                /* The minimal valid text, to show the cases above fail for their one defect. */
                is_int(write_text(cfd, "eve.json",
                                  "{\"version\":1,\"incarnation\":1,\"restarts\":0,\"kernel_id\":\"\",\"pid\":0,"
                                  "\"pid_starttime\":0,\"boot_id\":\"\",\"started_at\":0,\"last_exit\":null,"
                                  "\"last_error\":null}"),
                       0, "plant a minimal valid file");
                got = (ContextState){ .preloaded = true };
                is_int(context_state_load(dirfd, "eve", &got), 0, "it loads");
                ok(!got.preloaded, "a file without preloaded (an earlier version's) says cold");
                context_state_done(&got);

                big = malloc(65 * 1024 + 1);
                ok(big != NULL, "allocate");
                if (big) {
                        memset(big, ' ', 65 * 1024);
                        big[0] = '{';
                        memcpy(big + 65 * 1024 - 1, "}", 2);
                        is_int(write_text(cfd, "eve.json", big), 0, "plant a 65 KiB file");
                        got = sentinel;
                        is_int(context_state_load(dirfd, "eve", &got), -EFBIG, "load of a 65 KiB file: -EFBIG");
                        ok(memcmp(&got, &sentinel, sizeof got) == 0, "ret untouched after -EFBIG");
                        got = (ContextState){};
                }

                ok(symlinkat("alice.json", cfd, "mallory.json") == 0, "plant a symlink as mallory.json");
                got = sentinel;
                is_int(context_state_load(dirfd, "mallory", &got), -ELOOP, "load does not follow a symlink");
                got = (ContextState){};
                is_int(context_state_remove(dirfd, "eve"), 0, "remove eve");
                is_int(context_state_remove(dirfd, "mallory"), 0, "remove mallory (the link)");
                ok(faccessat(cfd, "alice.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0, "its target stays");
        }

        is_int(context_state_remove(dirfd, "alice"), 0, "remove alice");
        is_int(context_state_load(dirfd, "alice", &got), -ENOENT, "alice is gone");
        is_int(context_state_remove(dirfd, "alice"), 0, "remove alice again: 0");
}

static void test_contexts_symlink(void) {
        char dir[] = "/tmp/test-state-link.XXXXXX", target[] = "/tmp/test-state-target.XXXXXX";
        _cleanup_(context_state_done) ContextState s = {}, got = {};
        _cleanup_close_ int dirfd = -1;
        int temp = -1, r;

        if (!mkdtemp(dir) || !mkdtemp(target)) {
                ok(0, "mkdtemp");
                return;
        }
        dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok(dirfd >= 0 && symlinkat(target, dirfd, "contexts") == 0, "contexts is a symlink to another dir");
        full_state(&s);
        r = context_state_save(dirfd, "alice", &s);
        ok(r == -ELOOP || r == -ENOTDIR, "save refuses a symlinked contexts dir (got %d)", r);
        r = context_state_load(dirfd, "alice", &got);
        ok(r == -ELOOP || r == -ENOTDIR, "load refuses it too (got %d)", r);
        is_int(count_entries(AT_FDCWD, target, &temp), 0, "nothing written in the link's target");
        unlinkat(dirfd, "contexts", 0);
        rmdir(dir);
        rmdir(target);
}

static void test_supervisor(int dirfd) {
        SupervisorState st, sentinel;
        char boot_id[37];
        _cleanup_free_ char *text = NULL;
        json_auto_t *j = NULL;
        struct stat sb;
        usec_t before;
        int r;

        is_int(read_boot_id(boot_id), 0, "read_boot_id");
        for (uint64_t gen = 1; gen <= 3; gen++) {
                before = now_usec(CLOCK_REALTIME);
                r = state_supervisor_start(dirfd, &st);
                is_int(r, 0, "supervisor start %d", (int) gen);
                is_int(st.generation, gen, "generation %d", (int) gen);
                is_str(st.boot_id, boot_id, "boot_id is the kernel's");
                is_int(st.pid, getpid(), "pid is ours");
                ok(st.started_at >= before && st.started_at <= now_usec(CLOCK_REALTIME), "started_at is now");
        }
        ok(fstatat(dirfd, "supervisor.json", &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode),
           "supervisor.json is a regular file");
        is_int(sb.st_mode & 07777, 0600, "supervisor.json is 0600");
        {
                char path[256];
                snprintf(path, sizeof path, "%s/supervisor.json", tmpdir);
                r = read_file(path, 4096, &text, NULL);
        }
        is_int(r, 0, "read supervisor.json");
        j = text ? json_loads(text, 0, NULL) : NULL;
        ok(j && json_integer_value(json_object_get(j, "generation")) == 3 &&
                   streq(json_string_value(json_object_get(j, "boot_id")) ?: "", boot_id) &&
                   json_integer_value(json_object_get(j, "pid")) == getpid() &&
                   json_is_integer(json_object_get(j, "started_at")),
           "supervisor.json holds generation 3, boot_id, pid and started_at");

        /* A file written by hand continues from its generation. */
        is_int(write_text(dirfd, "supervisor.json", "{\"generation\":41,\"boot_id\":\"\",\"pid\":1,\"started_at\":5}"),
               0, "plant generation 41");
        is_int(state_supervisor_start(dirfd, &st), 0, "start after 41");
        is_int(st.generation, 42, "generation 42");

        /* Corrupt files are moved aside and counting starts again. */
        static const struct {
                const char *what, *text;
        } bad[] = {
                { "bad JSON", "{\"generation\": 7," },
                { "generation a string", "{\"generation\":\"7\",\"boot_id\":\"\",\"pid\":1,\"started_at\":5}" },
                { "generation 0", "{\"generation\":0,\"boot_id\":\"\",\"pid\":1,\"started_at\":5}" },
                { "generation -3", "{\"generation\":-3,\"boot_id\":\"\",\"pid\":1,\"started_at\":5}" },
                { "boot_id a number", "{\"generation\":7,\"boot_id\":7,\"pid\":1,\"started_at\":5}" },
                { "pid missing", "{\"generation\":7,\"boot_id\":\"\",\"started_at\":5}" },
                { "started_at a real", "{\"generation\":7,\"boot_id\":\"\",\"pid\":1,\"started_at\":5.5}" },
                { "an array", "[7]" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *moved = NULL;
                char path[256];

                is_int(write_text(dirfd, "supervisor.json", bad[i].text), 0, "plant %s", bad[i].what);
                is_int(state_supervisor_start(dirfd, &st), 1, "start with %s returns 1", bad[i].what);
                is_int(st.generation, 1, "generation restarts at 1 after %s", bad[i].what);
                snprintf(path, sizeof path, "%s/supervisor.json.corrupt", tmpdir);
                is_int(read_file(path, 4096, &moved, NULL), 0, "supervisor.json.corrupt exists");
                is_str(moved, bad[i].text, "it holds the bad content");
                is_int(state_supervisor_start(dirfd, &st), 0, "next start is normal");
                is_int(st.generation, 2, "generation 2");
        }

        /* An oversized file is not ours either. */
        {
                _cleanup_free_ char *big = malloc(65 * 1024 + 1);
                ok(big != NULL, "allocate");
                if (big) {
                        memset(big, ' ', 65 * 1024);
                        big[65 * 1024] = '\0';
                        is_int(write_text(dirfd, "supervisor.json", big), 0, "plant a 65 KiB supervisor.json");
                        is_int(state_supervisor_start(dirfd, &st), 1, "start with it returns 1");
                        is_int(st.generation, 1, "generation 1 after an oversized file");
                        ok(fstatat(dirfd, "supervisor.json.corrupt", &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                                   sb.st_size == 65 * 1024,
                           "the oversized file was moved aside");
                }
        }

        /* Unreadable for another reason than corruption: the error, and nothing moved or written. */
        ok(unlinkat(dirfd, "supervisor.json", 0) == 0 && mkdirat(dirfd, "supervisor.json", 0700) == 0,
           "make supervisor.json a directory");
        memset(&sentinel, 0xa5, sizeof sentinel);
        st = sentinel;
        is_int(state_supervisor_start(dirfd, &st), -EISDIR, "a directory: -EISDIR");
        ok(memcmp(&st, &sentinel, sizeof st) == 0, "ret untouched on error");
        ok(unlinkat(dirfd, "supervisor.json", AT_REMOVEDIR) == 0, "the directory was left in place");
        is_int(state_supervisor_start(dirfd, &st), 0, "a missing file: 0");
        is_int(st.generation, 1, "a missing file starts at generation 1");
}

/* Fills the file system under dirfd: writes to name until ENOSPC. */
static int fill_disk(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        char buf[4096];

        if (fd < 0)
                return -errno;
        memset(buf, 'x', sizeof buf);
        for (;;) {
                ssize_t k = write(fd, buf, sizeof buf);
                if (k < 0)
                        return errno == ENOSPC ? 0 : -errno;
        }
}

static void test_full_disk(void) {
        char dir[] = "/tmp/test-state-tmpfs.XXXXXX";
        _cleanup_(context_state_done) ContextState s = {}, got = {};
        _cleanup_close_ int dirfd = -1;
        SupervisorState sup;
        int temp = -1;

        if (geteuid() != 0) {
                ok(1, "# SKIP full disk: not root");
                return;
        }
        if (!mkdtemp(dir)) {
                ok(1, "# SKIP full disk: mkdtemp failed");
                return;
        }
        if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") < 0) {
                ok(1, "# SKIP full disk: cannot mount a tmpfs (%s)", strerror(errno));
                rmdir(dir);
                return;
        }
        dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok(dirfd >= 0, "open the tmpfs");
        if (dirfd >= 0) {
                full_state(&s);
                is_int(context_state_save(dirfd, "alice", &s), 0, "save on the small tmpfs");
                is_int(state_supervisor_start(dirfd, &sup), 0, "supervisor start on the small tmpfs");
                is_int(fill_disk(dirfd, "filler"), 0, "fill the tmpfs");
                s.incarnation = 99;
                is_int(context_state_save(dirfd, "alice", &s), -ENOSPC, "save on a full disk: -ENOSPC");
                is_int(context_state_load(dirfd, "alice", &got), 0, "the previous file still loads");
                is_int(got.incarnation, 7, "with the previous content");
                is_int(count_entries(dirfd, "contexts", &temp), 1, "only alice.json in contexts/");
                is_int(temp, 0, "no temp file left by the failed save");
                is_int(state_supervisor_start(dirfd, &sup), -ENOSPC, "supervisor start on a full disk: -ENOSPC");
                is_int(count_entries(dirfd, ".", &temp), 3, "supervisor.json, contexts, filler");
                is_int(temp, 0, "no temp file left by the failed supervisor start");
                close(TAKE_FD(dirfd));
        }
        ok(umount(dir) == 0, "umount the tmpfs");
        rmdir(dir);
}

/* The transport a kernel was launched with is kept with its ports, so adoption connects the same way. */
static void test_transport(void) {
        _cleanup_(context_state_done) ContextState s = {}, back = {};
        json_auto_t *j = NULL;

        full_state(&s);
        s.conn.transport = TRANSPORT_IPC;
        j = context_state_to_json(&s);
        is_str(j ? json_string_value(json_object_get(j, "transport")) : NULL, "ipc", "transport ipc is written");
        is_int(j ? context_state_from_json(j, &back) : -1, 0, "from_json with transport ipc");
        ok(back.conn.transport == TRANSPORT_IPC && state_equal(&s, &back), "transport ipc round-trips");

        /* Written before there was a choice: the kernel listened on tcp. */
        json_object_del(j, "transport");
        context_state_done(&back);
        is_int(context_state_from_json(j, &back), 0, "from_json without transport");
        ok(back.conn.transport == TRANSPORT_TCP, "no transport: tcp");

        json_object_set_new(j, "transport", json_string("udp"));
        context_state_done(&back);
        is_int(context_state_from_json(j, &back), -EBADMSG, "transport udp: -EBADMSG");
        json_object_set_new(j, "transport", json_integer(1));
        is_int(context_state_from_json(j, &back), -EBADMSG, "transport a number: -EBADMSG");
}

int main(void) {
        _cleanup_close_ int dirfd = -1;

        if (!mkdtemp(tmpdir))
                skip_all("mkdtemp failed");
        dirfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                skip_all("cannot open the temp directory");

        test_roundtrip();
        test_corruptions();
        test_files(dirfd);
        test_contexts_symlink();
        test_supervisor(dirfd);
        test_full_disk();
        test_transport();

        {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
                if (system(cmd) != 0)
                        diag("could not remove the temp directory");
        }
        return tap_done();
}
