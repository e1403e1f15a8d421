/* Kernelspecs: finding, checking and reading kernel.json (see kernelspec.h). */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernelspec.h"
#include "util.h"

#define KERNELSPEC_NAME_MAX 64
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* The 32-bit id calls where the plain ones take 16-bit ids. */
#ifdef SYS_setfsuid32
#define KS_SYS_SETFSUID SYS_setfsuid32
#define KS_SYS_SETFSGID SYS_setfsgid32
#define KS_SYS_SETGROUPS SYS_setgroups32
#define KS_SYS_GETGROUPS SYS_getgroups32
#else
#define KS_SYS_SETFSUID SYS_setfsuid
#define KS_SYS_SETFSGID SYS_setfsgid
#define KS_SYS_SETGROUPS SYS_setgroups
#define KS_SYS_GETGROUPS SYS_getgroups
#endif

static const char *const interrupt_mode_table[_INTERRUPT_MODE_MAX] = {
        [INTERRUPT_SIGNAL] = "signal",
        [INTERRUPT_MESSAGE] = "message",
};

const char *interrupt_mode_to_string(InterruptMode m) {
        return (unsigned) m < _INTERRUPT_MODE_MAX ? interrupt_mode_table[m] : NULL;
}

int kernelspec_user_lookup(const char *name, uid_t uid, KernelspecUser *ret, char **ret_home) {
        _cleanup_free_ char *buf = NULL;
        struct passwd pwbuf, *pw = NULL;
        KernelspecUser u = { 0 };
        long size = sysconf(_SC_GETPW_R_SIZE_MAX);
        int n = 16, r;

        *ret = u;
        if (ret_home)
                *ret_home = NULL;
        buf = malloc(size > 0 ? (size_t) size : 16384);
        if (!buf)
                return -ENOMEM;
        r = name ? getpwnam_r(name, &pwbuf, buf, size > 0 ? (size_t) size : 16384, &pw)
                 : getpwuid_r(uid, &pwbuf, buf, size > 0 ? (size_t) size : 16384, &pw);
        if (r != 0 || !pw)
                return r == ENOMEM || r == ERANGE ? -ENOMEM : -ESRCH;
        u.uid = pw->pw_uid;
        u.gid = pw->pw_gid;
        for (;;) {
                gid_t *g = reallocarray(u.groups, (size_t) n, sizeof(gid_t));

                if (!g) {
                        free(u.groups);
                        return -ENOMEM;
                }
                u.groups = g;
                if (getgrouplist(pw->pw_name, pw->pw_gid, u.groups, &n) >= 0)
                        break;
        }
        u.n_groups = (size_t) n;
        u.switch_fs = geteuid() == 0 && u.uid != 0;
        if (ret_home && !(*ret_home = strdup(pw->pw_dir))) {
                free(u.groups);
                return -ENOMEM;
        }
        *ret = u;
        return 0;
}

void kernelspec_user_done(KernelspecUser *u) {
        free(u->groups);
        u->groups = NULL;
        u->n_groups = 0;
}

/* The calling thread's file-system identity before fs_identity_enter(). */
typedef struct FsIdentity {
        bool changed;
        uid_t uid;
        gid_t gid;
        gid_t *groups;
        long n_groups;
} FsIdentity;

/* Takes back what fs_identity_enter() changed. A thread of ours left with a user's rights would do the daemon's
 * later work with them: that is not survivable, so a failure aborts. */
static void fs_identity_leave(FsIdentity *saved) {
        if (!saved->changed)
                return;
        (void) syscall(KS_SYS_SETFSUID, saved->uid);
        (void) syscall(KS_SYS_SETFSGID, saved->gid);
        if (syscall(KS_SYS_SETGROUPS, (size_t) saved->n_groups, saved->groups) < 0 ||
            (uid_t) syscall(KS_SYS_SETFSUID, (uid_t) -1) != saved->uid ||
            (gid_t) syscall(KS_SYS_SETFSGID, (gid_t) -1) != saved->gid)
                abort();
        free(saved->groups);
        *saved = (FsIdentity){ 0 };
}

/* Gives this thread (alone: raw syscalls, not glibc's wrappers, which change every thread) u's file-system
 * identity when u->switch_fs. */
static int fs_identity_enter(const KernelspecUser *u, FsIdentity *ret_saved) {
        FsIdentity s = { 0 };
        long n;

        *ret_saved = s;
        if (!u->switch_fs)
                return 0;
        n = syscall(KS_SYS_GETGROUPS, 0, NULL);
        if (n < 0)
                return -errno;
        s.groups = calloc((size_t) n + 1, sizeof(gid_t));
        if (!s.groups)
                return -ENOMEM;
        s.n_groups = syscall(KS_SYS_GETGROUPS, n, s.groups);
        if (s.n_groups < 0) {
                free(s.groups);
                return -errno;
        }
        s.uid = (uid_t) syscall(KS_SYS_SETFSUID, (uid_t) -1);
        s.gid = (gid_t) syscall(KS_SYS_SETFSGID, (gid_t) -1);
        s.changed = true;
        *ret_saved = s;
        if (syscall(KS_SYS_SETGROUPS, u->n_groups, u->groups) < 0) {
                fs_identity_leave(ret_saved);
                return -EPERM;
        }
        (void) syscall(KS_SYS_SETFSGID, u->gid);
        (void) syscall(KS_SYS_SETFSUID, u->uid);
        if ((gid_t) syscall(KS_SYS_SETFSGID, (gid_t) -1) != u->gid ||
            (uid_t) syscall(KS_SYS_SETFSUID, (uid_t) -1) != u->uid) {
                fs_identity_leave(ret_saved);
                return -EPERM;
        }
        return 0;
}

/* Why root alone cannot change the component c (of a path; last: the one named), or NULL. A link is root's
 * when root owns it: the directory it lies in is checked as the component before it. */
static const char *component_why(const char *c, bool last) {
        struct stat st;

        if (lstat(c, &st) < 0)
                return "cannot be examined";
        if (st.st_uid != 0)
                return "lies where a user other than root can change it";
        if (!S_ISLNK(st.st_mode) && (st.st_mode & 022) && (last || !(st.st_mode & S_ISVTX)))
                return "lies where group or others can change it";
        return NULL;
}

/* Why root alone cannot change any component of the absolute path p (written into, and restored), or NULL. */
static const char *path_why(char *p) {
        size_t n = strlen(p);
        const char *why = component_why("/", n == 1);

        for (size_t end = 1; !why && end <= n && n > 1; end++) {
                char c = p[end];

                if (end < n && c != '/')
                        continue;
                p[end] = '\0';
                why = component_why(p, end == n);
                p[end] = c;
        }
        return why;
}

/* Whether no one but root can change what path (which exists) names: 0 when each component of path as written
 * and of its realpath() is owned by root, and a directory that group or others may write has the sticky bit (so
 * that its root-owned entry cannot be replaced) and is not the one named; -EPERM with *ret_why (static)
 * otherwise; -ENOENT when it does not exist. */
static int place_root_only(const char *path, const char **ret_why) {
        _cleanup_free_ char *written = strdup(path), *real = NULL;
        const char *why = NULL;
        struct stat st;

        if (!written)
                return -ENOMEM;
        if (lstat(path, &st) < 0)
                return -errno;
        real = realpath(path, NULL);
        if (!real)
                return -errno;
        if (written[0] == '/')
                why = path_why(written);
        if (!why)
                why = path_why(real);
        if (why) {
                *ret_why = why;
                return -EPERM;
        }
        return 0;
}

/* Whether a user could have changed path or, when it does not exist, the deepest directory above it that does. */
static bool place_users(const char *path) {
        _cleanup_free_ char *p = strdup(path);
        const char *why;
        char *slash;

        if (!p)
                return true;
        for (;;) {
                int r = place_root_only(p, &why);

                if (r != -ENOENT && r != -ENOTDIR)
                        return r < 0;
                slash = strrchr(p, '/');
                if (!slash || slash == p)
                        return false;
                *slash = '\0';
        }
}

Kernelspec *kernelspec_free(Kernelspec *k) {
        if (!k)
                return NULL;
        free(k->name);
        free(k->path);
        strv_free(k->argv);
        strv_free(k->env);
        free(k->language);
        free(k->display_name);
        free(k);
        return NULL;
}

bool kernelspec_name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > KERNELSPEC_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) name[i]) && !strchr("._-", name[i]))
                        return false;
        return true;
}

int kernelspec_dirs(const char *jupyter_path, const char *home, char ***ret) {
        static const char *const system_dirs[] = { KERNELSPEC_SYSTEM_DIRS };
        _cleanup_strv_free_ char **v = NULL;
        size_t n = 0;
        int r;

        for (const char *p = jupyter_path; p && *p;) {
                size_t len = strcspn(p, ":"), keep = len;

                if (len > 0) {
                        char *d = NULL;

                        /* jupyter_core strips a trailing separator; "kernels" goes below each directory. */
                        while (keep > 1 && p[keep - 1] == '/')
                                keep--;
                        if (asprintf(&d, "%.*s/kernels", (int) keep, p) < 0)
                                d = NULL;
                        r = strv_push(&v, &n, d);
                        if (r < 0)
                                return r;
                }
                p += len;
                if (*p == ':')
                        p++;
        }
        if (home && *home) {
                char *d = NULL;

                if (asprintf(&d, "%s%s.local/share/jupyter/kernels", home, home[strlen(home) - 1] == '/' ? "" : "/") <
                    0)
                        d = NULL;
                r = strv_push(&v, &n, d);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(system_dirs); i++) {
                r = strv_push(&v, &n, strjoin(system_dirs[i], "/kernels"));
                if (r < 0)
                        return r;
        }
        if (!v) {
                v = calloc(1, sizeof(char *));
                if (!v)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

/* s with every "{from}" replaced by to; the replacement is not scanned again. */
static char *replace_all(const char *s, const char *from, const char *to) {
        size_t nfrom = strlen(from), nto = strlen(to), count = 0;
        char *out, *o;

        for (const char *q = strstr(s, from); q; q = strstr(q + nfrom, from))
                count++;
        out = malloc(strlen(s) - count * nfrom + count * nto + 1);
        if (!out)
                return NULL;
        o = out;
        for (const char *q; (q = strstr(s, from)); s = q + nfrom) {
                memcpy(o, s, (size_t) (q - s));
                o += q - s;
                memcpy(o, to, nto);
                o += nto;
        }
        strcpy(o, s);
        return out;
}

/* The first executable regular file named prog in the ':'-separated path, newly allocated; NULL when none. */
static char *path_lookup(const char *prog, const char *path) {
        for (const char *p = path; *p;) {
                size_t len = strcspn(p, ":");
                char *candidate = NULL;
                struct stat st;

                if (len > 0 && p[0] == '/' && asprintf(&candidate, "%.*s/%s", (int) len, p, prog) >= 0) {
                        if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
                                return candidate;
                        free(candidate);
                }
                p += len;
                if (*p == ':')
                        p++;
        }
        return NULL;
}

_printf_(3, 4) static int fail_reason(char **ret_reason, int r, const char *fmt, ...) {
        va_list ap;
        int n;

        if (!ret_reason)
                return r;
        va_start(ap, fmt);
        n = vasprintf(ret_reason, fmt, ap);
        va_end(ap);
        if (n < 0) {
                *ret_reason = NULL;
                return -ENOMEM;
        }
        return r;
}

static int parse_env(const json_t *env, Kernelspec *k, char **ret_reason) {
        const char *key;
        json_t *value;
        size_t n = 0;

        if (!env)
                return 0;
        if (!json_is_object(env))
                return fail_reason(ret_reason, -EINVAL, "env: expected an object of strings");
        json_object_foreach((json_t *) env, key, value) {
                char *kv = NULL;
                int r;

                if (!json_is_string(value) || !*key || strchr(key, '='))
                        return fail_reason(ret_reason, -EINVAL,
                                           "env: %s: expected a name without '=' and a string value", key);
                if (asprintf(&kv, "%s=%s", key, json_string_value(value)) < 0)
                        kv = NULL;
                n = strv_length(k->env);
                r = strv_env_set(&k->env, &n, kv);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_argv(const json_t *argv, const char *resource_dir, const char *path_env, Kernelspec *k,
                      char **ret_reason) {
        size_t i, n = 0;
        json_t *word;
        int r;

        if (!json_is_array(argv) || json_array_size(argv) == 0)
                return fail_reason(ret_reason, -EINVAL, "argv: expected a non-empty array of strings");
        json_array_foreach(argv, i, word) {
                _cleanup_free_ char *w = NULL;

                if (!json_is_string(word))
                        return fail_reason(ret_reason, -EINVAL, "argv[%zu]: expected a string", i);
                w = replace_all(json_string_value(word), "{connection_file}", "{kernel_file}");
                if (!w)
                        return -ENOMEM;
                r = strv_push(&k->argv, &n, replace_all(w, "{resource_dir}", resource_dir));
                if (r < 0)
                        return r;
        }
        if (k->argv[0][0] == '/')
                return 0;
        if (!k->argv[0][0] || strchr(k->argv[0], '/'))
                return fail_reason(ret_reason, -EINVAL,
                                   "argv[0] %s: expected an absolute path or a program name found in PATH",
                                   k->argv[0]);
        _cleanup_free_ char *found = path_lookup(k->argv[0], path_env);
        if (!found)
                return fail_reason(ret_reason, -EINVAL, "argv[0] %s: not found in PATH", k->argv[0]);
        free(k->argv[0]);
        k->argv[0] = TAKE_PTR(found);
        return 0;
}

/* A member that must be a string when present: 0 with *ret (NULL when absent). */
static int optional_string(const json_t *o, const char *member, char **ret, char **ret_reason) {
        const json_t *v = json_object_get(o, member);

        if (!v)
                return 0;
        if (!json_is_string(v))
                return fail_reason(ret_reason, -EINVAL, "%s: expected a string", member);
        *ret = strdup(json_string_value(v));
        return *ret ? 0 : -ENOMEM;
}

int kernelspec_parse(const char *text, size_t len, const char *name, const char *path, const char *resource_dir,
                     const char *path_env, Kernelspec **ret, char **ret_reason) {
        _cleanup_(kernelspec_freep) Kernelspec *k = NULL;
        _cleanup_free_ char *mode = NULL;
        json_auto_t *root = NULL;
        json_error_t err;
        int r;

        if (ret_reason)
                *ret_reason = NULL;
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
        if (!root)
                return fail_reason(ret_reason, -EINVAL, "not JSON: %s", err.text);
        if (!json_is_object(root))
                return fail_reason(ret_reason, -EINVAL, "expected a JSON object");
        k = calloc(1, sizeof *k);
        if (!k)
                return -ENOMEM;
        k->name = strdup(name);
        k->path = strdup(path);
        k->env = calloc(1, sizeof(char *));
        if (!k->name || !k->path || !k->env)
                return -ENOMEM;
        for (char *c = k->name; *c; c++)
                *c = (char) tolower((unsigned char) *c);

        r = parse_env(json_object_get(root, "env"), k, ret_reason);
        if (r < 0)
                return r;
        if (!path_env) {
                path_env = DEFAULT_PATH;
                for (size_t i = 0; k->env[i]; i++)
                        if (strncmp(k->env[i], "PATH=", 5) == 0)
                                path_env = k->env[i] + 5;
        }
        r = parse_argv(json_object_get(root, "argv"), resource_dir, path_env, k, ret_reason);
        if (r >= 0)
                r = optional_string(root, "language", &k->language, ret_reason);
        if (r >= 0)
                r = optional_string(root, "display_name", &k->display_name, ret_reason);
        if (r >= 0)
                r = optional_string(root, "interrupt_mode", &mode, ret_reason);
        if (r < 0)
                return r;
        if (mode && streq(mode, "message"))
                k->interrupt_mode = INTERRUPT_MESSAGE;
        else if (mode && !streq(mode, "signal"))
                return fail_reason(ret_reason, -EINVAL, "interrupt_mode %s: expected signal or message", mode);
        *ret = TAKE_PTR(k);
        return 0;
}

/* Whether st, of a kernel.json or a directory holding one, is what uid could have written anyway. */
static const char *untrusted_why(const struct stat *st, uid_t uid) {
        if (st->st_uid != 0 && st->st_uid != uid)
                return "is owned by another user than root and the kernel's";
        if (st->st_mode & 022)
                return "is writable by group or others";
        return NULL;
}

static int refuse(char **ret_reason, int r, const char *what, const char *why) {
        if (ret_reason && asprintf(ret_reason, "%s: %s", what, why) < 0) {
                *ret_reason = NULL;
                return -ENOMEM;
        }
        return r;
}

/* Opens the directory name in dirfd (AT_FDCWD with an absolute name) if it is one we trust; display names it. */
static int open_trusted_dir(int dirfd, const char *name, const char *display, uid_t uid, int *ret_fd,
                            char **ret_reason) {
        _cleanup_close_ int fd = -1;
        const char *why;
        struct stat st;

        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ELOOP || errno == ENOTDIR) {
                        struct stat lst;

                        if (fstatat(dirfd, name, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
                                return refuse(ret_reason, -ELOOP, display, "is a symbolic link");
                }
                return -errno;
        }
        if (fstat(fd, &st) < 0)
                return -errno;
        why = untrusted_why(&st, uid);
        if (why)
                return refuse(ret_reason, -EPERM, display, why);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Reads kernels/<entry>/kernel.json below kfd (the directory dir). -ENOENT when there is none (not a spec). */
static int read_spec(int kfd, const char *dir, const char *entry, uid_t uid, const char *path_env, Kernelspec **ret,
                     char **ret_reason) {
        _cleanup_free_ char *resource_dir = NULL, *path = NULL, *text = NULL, *why = NULL;
        _cleanup_close_ int sfd = -1;
        const char *untrusted;
        struct stat st;
        size_t size;
        int r;

        if (asprintf(&resource_dir, "%s/%s", dir, entry) < 0 || asprintf(&path, "%s/kernel.json", resource_dir) < 0)
                return -ENOMEM;
        r = open_trusted_dir(kfd, entry, resource_dir, uid, &sfd, ret_reason);
        if (r < 0)
                return r;
        if (fstatat(sfd, "kernel.json", &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(st.st_mode))
                return refuse(ret_reason, -ELOOP, path, "is a symbolic link");
        untrusted = untrusted_why(&st, uid);
        if (untrusted)
                return refuse(ret_reason, -EPERM, path, untrusted);
        r = read_file_at(sfd, "kernel.json", true, KERNELSPEC_FILE_MAX, &text, &size);
        if (r == -EFBIG)
                return refuse(ret_reason, r, path, "is larger than 64 KiB");
        if (r == -EINVAL || r == -EISDIR)
                return refuse(ret_reason, -EINVAL, path, "is not a regular file");
        if (r < 0)
                return r;
        r = kernelspec_parse(text, size, entry, path, resource_dir, path_env, ret, &why);
        if (r == -EINVAL)
                return refuse(ret_reason, r, path, why ?: "malformed");
        return r;
}

/* One walk over the kernels directories of a find or a listing. */
typedef struct Scan {
        const KernelspecUser *u;
        size_t entries, max_entries; /* directory entries looked at; max 0: no bound */
        char *skipped;               /* "DIR: why; ..." of the kernels directories not searched */
        char *cut;                   /* which bound stopped the walk, or NULL */
        int (*found)(struct Scan *sc, int kfd, const char *dir, const char *entry);
        void *userdata;
} Scan;

static int scan_skip(Scan *sc, const char *what, const char *why) {
        char *s = NULL;

        if (asprintf(&s, "%s%s%s%s%s", sc->skipped ?: "", sc->skipped ? "; " : "", what, why ? ": " : "", why ?: "") <
            0)
                return -ENOMEM;
        free(sc->skipped);
        sc->skipped = s;
        return 0;
}

/* The kernels directory dir opened for sc's user, or -ENOENT (also when it is skipped, which sc then notes). */
static int scan_open(Scan *sc, const char *dir, int *ret_fd) {
        _cleanup_free_ char *reason = NULL;
        const char *why;
        int r;

        if (sc->u->uid == 0) {
                /* A kernel run as root takes nothing from where a user could plant it. Every component of dir,
                 * as written and as resolved, is root's: opening it by name reaches what was checked. */
                r = place_root_only(dir, &why);
                if (r == -EPERM)
                        return scan_skip(sc, dir, why) < 0 ? -ENOMEM : -ENOENT;
                if (r < 0)
                        return r == -ENOMEM ? r : -ENOENT;
        }
        r = open_trusted_dir(AT_FDCWD, dir, dir, sc->u->uid, ret_fd, &reason);
        if (r < 0 && reason && scan_skip(sc, reason, NULL) < 0)
                return -ENOMEM;
        return r == -ENOMEM ? r : r < 0 ? -ENOENT : 0;
}

/* Calls sc->found() for each entry of dir/ (a kernels directory) whose name is a kernelspec name, until it
 * returns non-zero; 1 also when sc's bound on entries is reached (sc->cut says so). */
static int scan_dir(Scan *sc, const char *dir) {
        _cleanup_close_ int kfd = -1;
        DIR *d;
        struct dirent *de;
        int fd, r;

        r = scan_open(sc, dir, &kfd);
        if (r < 0)
                return r == -ENOENT ? 0 : r; /* a missing or untrusted kernels directory holds no spec for us */
        fd = fcntl(kfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        while (r == 0 && (de = readdir(d))) {
                if (sc->max_entries > 0 && ++sc->entries > sc->max_entries) {
                        if (asprintf(&sc->cut, "more than %zu directory entries", sc->max_entries) < 0)
                                sc->cut = NULL;
                        r = sc->cut ? 1 : -ENOMEM;
                } else if (kernelspec_name_valid(de->d_name) && !streq(de->d_name, ".") && !streq(de->d_name, ".."))
                        r = sc->found(sc, kfd, dir, de->d_name);
        }
        closedir(d);
        return r;
}

/* Walks dirs with sc's user's rights. */
static int scan_dirs(Scan *sc, char *const *dirs) {
        FsIdentity saved;
        int r;

        r = fs_identity_enter(sc->u, &saved);
        for (size_t i = 0; r == 0 && dirs && dirs[i]; i++)
                r = scan_dir(sc, dirs[i]);
        fs_identity_leave(&saved);
        return r;
}

typedef struct FindState {
        const char *name;
        const char *path_env;
        Kernelspec *spec;
        char *reason;
        char *refused; /* the kernel.json refused */
        int r;
} FindState;

static int find_one(Scan *sc, int kfd, const char *dir, const char *entry) {
        FindState *s = sc->userdata;
        int r;

        if (strcasecmp(entry, s->name) != 0)
                return 0;
        r = read_spec(kfd, dir, entry, sc->u->uid, s->path_env, &s->spec, &s->reason);
        if (r == -ENOENT && !s->reason)
                return 0; /* a directory without kernel.json is no kernelspec: jupyter_client looks on */
        if (r < 0 && asprintf(&s->refused, "%s/%s/kernel.json", dir, entry) < 0)
                s->refused = NULL;
        s->r = r;
        return 1;
}

/* "no kernelspec of that name in A, B; not searched: C: why" */
static int find_missing_reason(char *const *dirs, const char *skipped, char **ret) {
        _cleanup_free_ char *list = NULL;

        for (size_t i = 0; dirs && dirs[i]; i++) {
                char *l = NULL;

                if (asprintf(&l, "%s%s%s", list ?: "", list ? ", " : "", dirs[i]) < 0)
                        return -ENOMEM;
                free(list);
                list = l;
        }
        if (asprintf(ret, "no kernelspec of that name in %s%s%s", list ?: "(no directory)",
                     skipped ? "; not searched: " : "", skipped ?: "") < 0) {
                *ret = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Whether the failure s ended in lies where u's user can write. */
static bool find_users(const FindState *s, char *const *dirs, const KernelspecUser *u) {
        if (u->uid == 0)
                return false;
        if (s->r != -ENOENT)
                return !s->refused || place_users(s->refused);
        for (size_t i = 0; dirs && dirs[i]; i++)
                if (place_users(dirs[i]))
                        return true;
        return false;
}

int kernelspec_find(char *const *dirs, const char *name, const KernelspecUser *u, const char *path_env,
                    Kernelspec **ret, char **ret_reason, bool *ret_users) {
        FindState s = { .name = name, .path_env = path_env, .r = -ENOENT };
        Scan sc = { .u = u, .found = find_one, .userdata = &s };
        int r;

        if (ret_reason)
                *ret_reason = NULL;
        if (!kernelspec_name_valid(name))
                return -EINVAL;
        r = scan_dirs(&sc, dirs);
        if (r >= 0 && s.r == -ENOENT && !s.reason)
                r = find_missing_reason(dirs, sc.skipped, &s.reason);
        if (r >= 0 && ret_users)
                *ret_users = s.r < 0 && find_users(&s, dirs, u);
        free(sc.skipped);
        free(s.refused);
        if (r < 0 || s.r < 0) {
                if (ret_reason && r >= 0)
                        *ret_reason = s.reason;
                else
                        free(s.reason);
                kernelspec_free(s.spec);
                return r < 0 ? r : s.r;
        }
        *ret = s.spec;
        return 0;
}

/* The length of s as JSON writes it, quotes included. */
static size_t json_string_size(const char *s) {
        size_t n = 2;

        for (const unsigned char *c = (const unsigned char *) s; s && *c; c++)
                n += *c == '"' || *c == '\\' || *c == '\b' || *c == '\f' || *c == '\n' || *c == '\r' || *c == '\t' ? 2
                     : *c < 0x20                                                                                   ? 6
                                                                                                                   : 1;
        return n;
}

size_t kernelspec_reply_size(const Kernelspec *k) {
        /* {"name":,"display_name":,"language":,"interrupt_mode":"message","path":,"argv":[]}: about 100 bytes. */
        size_t n = 128 + json_string_size(k->name) + json_string_size(k->path) + json_string_size(k->language) +
                   json_string_size(k->display_name);

        for (size_t i = 0; k->argv && k->argv[i]; i++)
                n += json_string_size(k->argv[i]) + 1;
        return n;
}

typedef struct ListState {
        const KernelspecLimits *limits;
        Kernelspec **v;
        size_t n;
        size_t bytes;
} ListState;

static int list_cut(Scan *sc, Kernelspec *k, const char *what, size_t limit) {
        kernelspec_free(k);
        if (asprintf(&sc->cut, "more than %zu %s", limit, what) < 0) {
                sc->cut = NULL;
                return -ENOMEM;
        }
        return 1;
}

static int list_one(Scan *sc, int kfd, const char *dir, const char *entry) {
        ListState *s = sc->userdata;
        Kernelspec *k = NULL, **v;
        size_t size;
        int r;

        for (size_t i = 0; i < s->n; i++)
                if (strcasecmp(s->v[i]->name, entry) == 0)
                        return 0; /* an earlier directory's spec of that name hides this one */
        r = read_spec(kfd, dir, entry, sc->u->uid, NULL, &k, NULL);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return 0;
        size = kernelspec_reply_size(k);
        if (s->limits && s->n >= s->limits->max_specs)
                return list_cut(sc, k, "kernelspecs", s->limits->max_specs);
        if (s->limits && s->bytes + size > s->limits->max_bytes)
                return list_cut(sc, k, "bytes of kernelspecs", s->limits->max_bytes);
        v = reallocarray(s->v, s->n + 1, sizeof *v);
        if (!v) {
                kernelspec_free(k);
                return -ENOMEM;
        }
        s->v = v;
        s->v[s->n++] = k;
        s->bytes += size;
        return 0;
}

static int spec_compare(const void *a, const void *b) {
        return strcmp((*(Kernelspec *const *) a)->name, (*(Kernelspec *const *) b)->name);
}

int kernelspec_list(char *const *dirs, const KernelspecUser *u, const KernelspecLimits *limits, Kernelspec ***ret,
                    size_t *ret_n, char **ret_cut) {
        ListState s = { .limits = limits };
        Scan sc = { .u = u, .max_entries = limits ? limits->max_entries : 0, .found = list_one, .userdata = &s };
        int r;

        r = scan_dirs(&sc, dirs);
        free(sc.skipped);
        if (r < 0) {
                for (size_t i = 0; i < s.n; i++)
                        kernelspec_free(s.v[i]);
                free(s.v);
                free(sc.cut);
                return r;
        }
        if (s.n > 1)
                qsort(s.v, s.n, sizeof *s.v, spec_compare);
        *ret = s.v;
        *ret_n = s.n;
        if (ret_cut)
                *ret_cut = sc.cut;
        else
                free(sc.cut);
        return 0;
}
