#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"
#include "util.h"

#define SUPERVISOR_FILE "supervisor.json"
#define SUPERVISOR_CORRUPT_FILE "supervisor.json.corrupt"
#define CONTEXTS_DIR "contexts"
#define STATE_VERSION 1
/* Our files are a few hundred bytes; anything this big is not ours, and bounding it bounds our memory. */
#define STATE_FILE_MAX (64 * 1024)

/* The per-context file's keys for the ports, in Channel order. */
static const char *const port_key_table[_CHANNEL_MAX] = {
        [CHANNEL_SHELL] = "shell_port",     [CHANNEL_IOPUB] = "iopub_port", [CHANNEL_STDIN] = "stdin_port",
        [CHANNEL_CONTROL] = "control_port", [CHANNEL_HB] = "hb_port",
};

/* State files hold the kernels' keys: wipe their text before the memory goes back to the allocator. */
static void erase_freep(char **p) {
        if (*p) {
                explicit_bzero(*p, strlen(*p));
                free(*p);
        }
}
#define _cleanup_erase_free_ _cleanup_(erase_freep)

static int open_contexts_dir(int state_dirfd) {
        int fd = openat(state_dirfd, CONTEXTS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        return fd < 0 ? -errno : fd;
}

static int context_file_name(const char *name, char *buf, size_t size) {
        if (!context_name_valid(name))
                return -EINVAL;
        snprintf(buf, size, "%s.json", name);
        return 0;
}

/* "" or a UUID in its 36-character text form (what uuid_random and the kernel's boot_id give). */
static bool id_valid(const char *s) {
        size_t n = strlen(s);

        if (n == 0)
                return true;
        if (n != 36)
                return false;
        for (size_t i = 0; i < n; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : !isxdigit((unsigned char) s[i]))
                        return false;
        }
        return true;
}

static bool key_valid(const char *s) {
        if (strlen(s) != KEY_HEX_LEN)
                return false;
        for (const char *p = s; *p; p++)
                if (!isxdigit((unsigned char) *p))
                        return false;
        return true;
}

/* Readers for one field each: -EBADMSG when it is missing or has the wrong type or range. */
static int json_get_uint(const json_t *j, const char *field, uint64_t max, uint64_t *ret) {
        const json_t *v = json_object_get(j, field);
        json_int_t i;

        if (!json_is_integer(v))
                return -EBADMSG;
        i = json_integer_value(v);
        if (i < 0 || (uint64_t) i > max)
                return -EBADMSG;
        *ret = (uint64_t) i;
        return 0;
}

static int json_string_copy(const json_t *v, char *out, size_t size) {
        size_t n;

        if (!json_is_string(v))
                return -EBADMSG;
        n = json_string_length(v);
        /* An embedded NUL would make the C string differ from what the file says. */
        if (n >= size || strlen(json_string_value(v)) != n)
                return -EBADMSG;
        memcpy(out, json_string_value(v), n + 1);
        return 0;
}

static int json_get_id(const json_t *j, const char *field, char ret[37]) {
        char buf[37];
        int r;

        r = json_string_copy(json_object_get(j, field), buf, sizeof buf);
        if (r < 0)
                return r;
        if (!id_valid(buf))
                return -EBADMSG;
        memcpy(ret, buf, sizeof buf);
        return 0;
}

/* The way all our state files look. */
#define STATE_JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS)

static int supervisor_state_from_json(const json_t *j, SupervisorState *ret) {
        SupervisorState s = {};
        uint64_t u;
        int r;

        if (!json_is_object(j))
                return -EBADMSG;
        r = json_get_uint(j, "generation", INT64_MAX, &s.generation);
        if (r < 0)
                return r;
        if (s.generation == 0)
                return -EBADMSG;
        r = json_get_id(j, "boot_id", s.boot_id);
        if (r < 0)
                return r;
        r = json_get_uint(j, "pid", INT_MAX, &u);
        if (r < 0)
                return r;
        s.pid = (pid_t) u;
        r = json_get_uint(j, "started_at", INT64_MAX, &u);
        if (r < 0)
                return r;
        s.started_at = u;

        *ret = s;
        return 0;
}

static json_t *supervisor_state_to_json(const SupervisorState *s) {
        return json_pack("{s:I, s:s, s:I, s:I}", "generation", (json_int_t) s->generation, "boot_id", s->boot_id,
                         "pid", (json_int_t) s->pid, "started_at", (json_int_t) s->started_at);
}

/* The pid a lock file holds, 0 if it holds none. */
static pid_t lock_holder(int fd) {
        char buf[32] = "";
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        long pid;

        if (n <= 0)
                return 0;
        buf[n] = '\0';
        pid = strtol(buf, NULL, 10);
        return pid > 0 && pid <= INT_MAX ? (pid_t) pid : 0;
}

int state_dir_lock(int state_dirfd, pid_t *ret_holder) {
        _cleanup_close_ int fd = -1;
        char buf[32];
        int n;

        fd = openat(state_dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int r = -errno;
                if (r == -EWOULDBLOCK && ret_holder)
                        *ret_holder = lock_holder(fd);
                return r;
        }
        /* The pid is for the message of a daemon refused; the lock holds without it (a full disk). */
        n = snprintf(buf, sizeof buf, "%d\n", (int) getpid());
        if (ftruncate(fd, 0) == 0)
                (void) !pwrite(fd, buf, (size_t) n, 0);
        return TAKE_FD(fd);
}

int state_supervisor_start(int state_dirfd, SupervisorState *ret) {
        _cleanup_free_ char *text = NULL, *out = NULL;
        json_auto_t *j = NULL;
        SupervisorState old = {}, s = {};
        bool corrupt = false;
        size_t size;
        int r;

        r = read_file_at(state_dirfd, SUPERVISOR_FILE, true, STATE_FILE_MAX, &text, &size);
        if (r == -EFBIG)
                corrupt = true;
        else if (r >= 0) {
                json_auto_t *in = json_loadb(text, size, JSON_REJECT_DUPLICATES, NULL);
                if (!in || supervisor_state_from_json(in, &old) < 0)
                        corrupt = true;
        } else if (r != -ENOENT)
                return r;

        if (corrupt) {
                /* Keep the bad file for a post-mortem instead of failing every start from now on. */
                if (renameat(state_dirfd, SUPERVISOR_FILE, state_dirfd, SUPERVISOR_CORRUPT_FILE) < 0)
                        return -errno;
                old.generation = 0;
        }
        if (old.generation >= INT64_MAX)
                return -EOVERFLOW;

        s.generation = old.generation + 1;
        r = read_boot_id(s.boot_id);
        if (r < 0)
                return r;
        s.pid = getpid();
        s.started_at = now_usec(CLOCK_REALTIME);

        j = supervisor_state_to_json(&s);
        if (!j)
                return -ENOMEM;
        out = json_dump_line(j, STATE_JSON_FLAGS);
        if (!out)
                return -ENOMEM;
        r = write_file_atomic_at(state_dirfd, SUPERVISOR_FILE, out, strlen(out), 0600, (uid_t) -1, (gid_t) -1);
        if (r < 0)
                return r;

        *ret = s;
        return corrupt ? 1 : 0;
}

void context_state_done(ContextState *s) {
        free(s->last_error);
        explicit_bzero(s, sizeof *s);
}

/* Integers in our files are JSON integers (long long); a value beyond that range is written negative
 * and then refused by context_state_from_json(), which context_state_save() checks before writing. */
static json_t *json_uint(uint64_t v) {
        return json_integer((json_int_t) v);
}

static json_t *exit_info_to_json(const ExitInfo *e) {
        if (!e->valid)
                return json_null();
        /* Both null: it ended in a way we could not see. */
        return json_pack("{s:o, s:o, s:b, s:o}", "code",
                         e->signal != 0 || e->unknown ? json_null() : json_integer(e->code), "signal",
                         e->signal != 0 ? json_integer(e->signal) : json_null(), "oom", (int) e->oom, "at",
                         json_uint(e->at));
}

json_t *context_state_to_json(const ContextState *s) {
        json_auto_t *j = NULL;

        j = json_object();
        if (!j)
                return NULL;
        if (s->has_conn) {
                for (Channel c = 0; c < _CHANNEL_MAX; c++)
                        if (json_object_set_new(j, port_key_table[c], json_integer(s->conn.ports[c])) < 0)
                                return NULL;
                if (json_object_set_new(j, "key", json_string(s->conn.key)) < 0 ||
                    json_object_set_new(j, "transport", json_string(transport_to_string(s->conn.transport))) < 0)
                        return NULL;
        }
        if (json_object_set_new(j, "version", json_integer(STATE_VERSION)) < 0 ||
            json_object_set_new(j, "incarnation", json_uint(s->incarnation)) < 0 ||
            json_object_set_new(j, "restarts", json_uint(s->restarts)) < 0 ||
            json_object_set_new(j, "kernel_id", json_string(s->kernel_id)) < 0 ||
            json_object_set_new(j, "pid", json_integer(s->pid)) < 0 ||
            json_object_set_new(j, "pid_starttime", json_uint(s->pid_starttime)) < 0 ||
            json_object_set_new(j, "boot_id", json_string(s->boot_id)) < 0 ||
            json_object_set_new(j, "started_at", json_uint(s->started_at)) < 0 ||
            json_object_set_new(j, "preloaded", json_boolean(s->preloaded)) < 0 ||
            json_object_set_new(j, "last_exit", exit_info_to_json(&s->last_exit)) < 0 ||
            json_object_set_new(j, "last_error", s->last_error ? json_string_lossy(s->last_error) : json_null()) < 0 ||
            json_object_set_new(j, "last_error_at", json_uint(s->last_error_at)) < 0)
                return NULL;
        return TAKE_PTR(j);
}

static int exit_info_from_json(const json_t *j, ExitInfo *ret) {
        ExitInfo e = { .valid = true };
        const json_t *code, *sig, *oom;
        uint64_t u;
        int r;

        if (json_is_null(j)) {
                *ret = (ExitInfo){};
                return 0;
        }
        if (!json_is_object(j))
                return -EBADMSG;

        /* At most one of code and signal says how the process ended; neither: unknown. */
        code = json_object_get(j, "code");
        sig = json_object_get(j, "signal");
        if (!code || !sig)
                return -EBADMSG;
        if (json_is_null(sig) && json_is_null(code))
                e.unknown = true;
        else if (json_is_null(sig)) {
                r = json_get_uint(j, "code", 255, &u);
                if (r < 0)
                        return r;
                e.code = (int) u;
        } else {
                if (!json_is_null(code))
                        return -EBADMSG;
                r = json_get_uint(j, "signal", NSIG - 1, &u);
                if (r < 0)
                        return r;
                if (u == 0)
                        return -EBADMSG;
                e.signal = (int) u;
        }

        oom = json_object_get(j, "oom");
        if (!json_is_boolean(oom))
                return -EBADMSG;
        e.oom = json_is_true(oom);
        r = json_get_uint(j, "at", INT64_MAX, &u);
        if (r < 0)
                return r;
        e.at = u;

        *ret = e;
        return 0;
}

static int conn_from_json(const json_t *j, ConnectionInfo *ret, bool *ret_has) {
        ConnectionInfo ci = {};
        const json_t *key, *v;
        size_t present = 0;
        int r;

        key = json_object_get(j, "key");
        present += key != NULL;
        for (Channel c = 0; c < _CHANNEL_MAX; c++)
                present += json_object_get(j, port_key_table[c]) != NULL;
        if (present == 0) {
                *ret = ci;
                *ret_has = false;
                return 0;
        }
        /* From here every one of them is required: a partial set cannot come from us (some of it was lost
         * or edited), and a kernel started with half-remembered ports would break a cached connection file. */
        for (Channel c = 0; c < _CHANNEL_MAX; c++) {
                uint64_t p;

                r = json_get_uint(j, port_key_table[c], 65535, &p);
                if (r < 0)
                        return r;
                if (p == 0)
                        return -EBADMSG;
                ci.ports[c] = (uint16_t) p;
        }
        r = json_string_copy(key, ci.key, sizeof ci.key);
        if (r < 0)
                return r;
        if (!key_valid(ci.key))
                return -EBADMSG;
        /* The transport the kernel was launched with; a state written before there was a choice is tcp. */
        v = json_object_get(j, "transport");
        if (v) {
                int t = json_is_string(v) ? transport_from_string(json_string_value(v)) : -EINVAL;
                if (t < 0)
                        return -EBADMSG;
                ci.transport = t;
        }

        *ret = ci;
        *ret_has = true;
        explicit_bzero(&ci, sizeof ci);
        return 0;
}

int context_state_from_json(const json_t *j, ContextState *ret) {
        _cleanup_(context_state_done) ContextState s = {};
        const json_t *v;
        uint64_t u;
        int r;

        if (!json_is_object(j))
                return -EBADMSG;
        r = json_get_uint(j, "version", INT64_MAX, &u);
        if (r < 0)
                return r;
        if (u != STATE_VERSION)
                return -EBADMSG;

        r = conn_from_json(j, &s.conn, &s.has_conn);
        if (r < 0)
                return r;
        r = json_get_uint(j, "incarnation", INT64_MAX, &s.incarnation);
        if (r < 0)
                return r;
        r = json_get_uint(j, "restarts", UINT_MAX, &u);
        if (r < 0)
                return r;
        s.restarts = (unsigned) u;
        r = json_get_id(j, "kernel_id", s.kernel_id);
        if (r < 0)
                return r;
        r = json_get_uint(j, "pid", INT_MAX, &u);
        if (r < 0)
                return r;
        s.pid = (pid_t) u;
        r = json_get_uint(j, "pid_starttime", INT64_MAX, &s.pid_starttime);
        if (r < 0)
                return r;
        r = json_get_id(j, "boot_id", s.boot_id);
        if (r < 0)
                return r;
        r = json_get_uint(j, "started_at", INT64_MAX, &u);
        if (r < 0)
                return r;
        s.started_at = u;
        /* Absent in the files of earlier versions: a cold start. */
        v = json_object_get(j, "preloaded");
        if (v && !json_is_boolean(v))
                return -EBADMSG;
        s.preloaded = json_is_true(v);

        v = json_object_get(j, "last_exit");
        if (!v)
                return -EBADMSG;
        r = exit_info_from_json(v, &s.last_exit);
        if (r < 0)
                return r;

        v = json_object_get(j, "last_error");
        if (!v)
                return -EBADMSG;
        if (!json_is_null(v)) {
                if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
                        return -EBADMSG;
                s.last_error = strdup(json_string_value(v));
                if (!s.last_error)
                        return -ENOMEM;
        }
        /* Missing in the files an older kernelsupd wrote: then unknown. */
        v = json_object_get(j, "last_error_at");
        if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
                return -EBADMSG;
        s.last_error_at = s.last_error && v ? (usec_t) json_integer_value(v) : 0;

        /* Move: the cleanup of s must neither free what *ret now owns nor leave a key copy behind. */
        *ret = s;
        s.last_error = NULL;
        return 0;
}

int context_state_load(int state_dirfd, const char *name, ContextState *ret) {
        char fname[NAME_MAX + 1];
        _cleanup_close_ int dfd = -1;
        _cleanup_erase_free_ char *text = NULL;
        json_auto_t *j = NULL;
        size_t size;
        int r;

        r = context_file_name(name, fname, sizeof fname);
        if (r < 0)
                return r;
        dfd = open_contexts_dir(state_dirfd);
        if (dfd < 0)
                return dfd;
        r = read_file_at(dfd, fname, true, STATE_FILE_MAX, &text, &size);
        if (r < 0)
                return r;
        j = json_loadb(text, size, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
                return -EBADMSG;
        return context_state_from_json(j, ret);
}

int context_state_save(int state_dirfd, const char *name, const ContextState *s) {
        char fname[NAME_MAX + 1];
        _cleanup_close_ int dfd = -1;
        _cleanup_erase_free_ char *text = NULL;
        _cleanup_(context_state_done) ContextState check = {};
        json_auto_t *j = NULL;
        size_t len;
        int r;

        r = context_file_name(name, fname, sizeof fname);
        if (r < 0)
                return r;

        j = context_state_to_json(s);
        if (!j)
                return -ENOMEM;
        /* Never write what load would refuse: that would turn a caller's bug into "corrupt state" at the
         * next start, and lose the ports and key with it. */
        r = context_state_from_json(j, &check);
        if (r == -EBADMSG)
                return -EINVAL;
        if (r < 0)
                return r;
        text = json_dump_line(j, STATE_JSON_FLAGS);
        if (!text)
                return -ENOMEM;
        len = strlen(text);
        if (len > STATE_FILE_MAX)
                return -EFBIG;

        if (mkdirat(state_dirfd, CONTEXTS_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        dfd = open_contexts_dir(state_dirfd);
        if (dfd < 0)
                return dfd;
        return write_file_atomic_at(dfd, fname, text, len, 0600, (uid_t) -1, (gid_t) -1);
}

int context_state_remove(int state_dirfd, const char *name) {
        char fname[NAME_MAX + 1];
        _cleanup_close_ int dfd = -1;
        int r;

        r = context_file_name(name, fname, sizeof fname);
        if (r < 0)
                return r;
        dfd = open_contexts_dir(state_dirfd);
        if (dfd == -ENOENT)
                return 0;
        if (dfd < 0)
                return dfd;
        if (unlinkat(dfd, fname, 0) < 0)
                return errno == ENOENT ? 0 : -errno;
        /* Make the removal durable, as the atomic writes make their renames durable. */
        if (fsync(dfd) < 0)
                return -errno;
        return 0;
}
