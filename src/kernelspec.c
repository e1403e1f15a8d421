/* Kernelspecs: finding, checking and reading kernel.json (see kernelspec.h). */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernelspec.h"
#include "util.h"

#define KERNELSPEC_NAME_MAX 64
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

static const char *const interrupt_mode_table[_INTERRUPT_MODE_MAX] = {
        [INTERRUPT_SIGNAL] = "signal",
        [INTERRUPT_MESSAGE] = "message",
};

const char *interrupt_mode_to_string(InterruptMode m) {
        return (unsigned) m < _INTERRUPT_MODE_MAX ? interrupt_mode_table[m] : NULL;
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

/* Calls found() for each entry of dir/ (a trusted kernels directory) whose name is a kernelspec name. */
static int scan_dir(const char *dir, uid_t uid, int (*found)(int kfd, const char *dir, const char *entry, void *u),
                    void *userdata) {
        _cleanup_close_ int kfd = -1;
        DIR *d;
        struct dirent *de;
        int fd, r = 0;

        if (open_trusted_dir(AT_FDCWD, dir, dir, uid, &kfd, NULL) < 0)
                return 0; /* a missing or untrusted kernels directory holds no spec for us */
        fd = fcntl(kfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        while (r == 0 && (de = readdir(d)))
                if (kernelspec_name_valid(de->d_name) && !streq(de->d_name, ".") && !streq(de->d_name, ".."))
                        r = found(kfd, dir, de->d_name, userdata);
        closedir(d);
        return r;
}

typedef struct FindState {
        const char *name;
        uid_t uid;
        const char *path_env;
        Kernelspec *spec;
        char *reason;
        int r;
} FindState;

static int find_one(int kfd, const char *dir, const char *entry, void *userdata) {
        FindState *s = userdata;
        int r;

        if (strcasecmp(entry, s->name) != 0)
                return 0;
        r = read_spec(kfd, dir, entry, s->uid, s->path_env, &s->spec, &s->reason);
        if (r == -ENOENT && !s->reason)
                return 0; /* a directory without kernel.json is no kernelspec: jupyter_client looks on */
        s->r = r;
        return 1;
}

int kernelspec_find(char *const *dirs, const char *name, uid_t uid, const char *path_env, Kernelspec **ret,
                    char **ret_reason) {
        FindState s = { .name = name, .uid = uid, .path_env = path_env, .r = -ENOENT };
        int r;

        if (ret_reason)
                *ret_reason = NULL;
        if (!kernelspec_name_valid(name))
                return -EINVAL;
        for (size_t i = 0; dirs && dirs[i]; i++) {
                r = scan_dir(dirs[i], uid, find_one, &s);
                if (r < 0)
                        return r;
                if (r > 0)
                        break;
        }
        if (s.r < 0) {
                if (ret_reason)
                        *ret_reason = s.reason;
                else
                        free(s.reason);
                return s.r;
        }
        *ret = s.spec;
        return 0;
}

typedef struct ListState {
        uid_t uid;
        Kernelspec **v;
        size_t n;
} ListState;

static int list_one(int kfd, const char *dir, const char *entry, void *userdata) {
        ListState *s = userdata;
        Kernelspec *k = NULL, **v;
        int r;

        for (size_t i = 0; i < s->n; i++)
                if (strcasecmp(s->v[i]->name, entry) == 0)
                        return 0; /* an earlier directory's spec of that name hides this one */
        r = read_spec(kfd, dir, entry, s->uid, NULL, &k, NULL);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return 0;
        v = reallocarray(s->v, s->n + 1, sizeof *v);
        if (!v) {
                kernelspec_free(k);
                return -ENOMEM;
        }
        s->v = v;
        s->v[s->n++] = k;
        return 0;
}

static int spec_compare(const void *a, const void *b) {
        return strcmp((*(Kernelspec *const *) a)->name, (*(Kernelspec *const *) b)->name);
}

int kernelspec_list(char *const *dirs, uid_t uid, Kernelspec ***ret, size_t *ret_n) {
        ListState s = { .uid = uid };
        int r = 0;

        for (size_t i = 0; r >= 0 && dirs && dirs[i]; i++)
                r = scan_dir(dirs[i], uid, list_one, &s);
        if (r < 0) {
                for (size_t i = 0; i < s.n; i++)
                        kernelspec_free(s.v[i]);
                free(s.v);
                return r;
        }
        if (s.n > 1)
                qsort(s.v, s.n, sizeof *s.v, spec_compare);
        *ret = s.v;
        *ret_n = s.n;
        return 0;
}
