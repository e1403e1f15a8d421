/* Resolving contexts once every file is read, and the checks across them: see config-private.h. */

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/un.h>
#include <unistd.h>

#include "config-private.h"
#include "kernelspec.h"
#include "quirks.h"

/* The value a context ends with for key i comes from the most specific section that set it. */
static const Section *parser_setter(const Parser *p, const Section *ctx, size_t i) {
        if (ctx && ctx->keys[i].line > 0)
                return ctx;
        if (p->defaults_section.keys[i].line > 0)
                return &p->defaults_section;
        return NULL;
}

/* backoff_max >= backoff_min can only be checked once both are known, after every file was read. The error is
 * reported where the more specific of the two was set. */
static int parser_check_backoff(Parser *p, const Section *s, const ContextConfig *cc) {
        const Section *from_max, *from_min, *other_from;
        char label[96], shown[VALUE_SHOWN_MAX + 4], builtin[64];
        const char *other_raw;
        size_t bad, other;

        if (cc->backoff_max >= cc->backoff_min)
                return 0;
        from_max = parser_setter(p, s, KEY_BACKOFF_MAX);
        from_min = parser_setter(p, s, KEY_BACKOFF_MIN);
        /* [defaults] was checked first, so a context that fails here set one of the two itself. */
        bad = from_max == s ? KEY_BACKOFF_MAX : KEY_BACKOFF_MIN;
        other = bad == KEY_BACKOFF_MAX ? KEY_BACKOFF_MIN : KEY_BACKOFF_MAX;
        other_from = other == KEY_BACKOFF_MAX ? from_max : from_min;
        if (other_from)
                other_raw = other_from->keys[other].raw;
        else {
                ContextConfig builtins;

                context_config_init(&builtins);
                other_raw = format_duration(builtin, sizeof builtin,
                                            other == KEY_BACKOFF_MAX ? builtins.backoff_max : builtins.backoff_min);
        }
        return parser_fail(p, -EINVAL, "%s:%u: [%s] %s = %s: must not be %s than %s (%s)", s->cc.source.file,
                           s->keys[bad].line, section_label(s, label, sizeof label), config_keys[bad].key,
                           value_shorten(s->keys[bad].raw, shown), bad == KEY_BACKOFF_MAX ? "less" : "greater",
                           config_keys[other].key, other_raw);
}

/* With ipc the kernel's sockets are paths below runtime_dir, and a Unix socket path has at most 107 bytes: said
 * now, where transport was set (or at the context's header for the default), rather than at every launch. */
static int parser_check_ipc_path(Parser *p, const Section *s, const ContextConfig *cc) {
        _cleanup_free_ char *path = NULL, *reason = NULL;
        const Section *from;
        char label[96];
        size_t n;

        if (cc->transport != TRANSPORT_IPC)
                return 0;
        path = ipc_socket_path(p->config->runtime_dir, cc->name, CHANNEL_HB);
        if (!path)
                return parser_oom(p);
        n = strlen(path);
        if (n <= UNIX_PATH_MAX_LEN)
                return 0;
        if (asprintf(&reason,
                     "its sockets' paths (%s) would be %zu bytes, over the %d of a Unix socket address; shorten "
                     "runtime_dir or the context's name, or set transport = tcp",
                     path, n, UNIX_PATH_MAX_LEN) < 0)
                return parser_oom(p);
        from = parser_setter(p, s, KEY_TRANSPORT);
        if (from)
                return parser_fail_key(p, from->cc.source.file, from->keys[KEY_TRANSPORT].line, from, "transport",
                                       from->keys[KEY_TRANSPORT].raw, reason);
        return parser_fail(p, -EINVAL, "%s:%u: [%s]: transport is ipc (%s): %s", s->cc.source.file, s->cc.source.line,
                           section_label(s, label, sizeof label), cc->transport_why, reason);
}

/* transport = auto (the default) takes the kernel's known transport, once its argv is known. */
static void context_resolve_transport(ContextConfig *cc) {
        if (cc->transport == TRANSPORT_AUTO)
                cc->transport = quirks_transport(cc->argv, &cc->transport_why);
        else
                cc->transport_why = "set in the configuration";
}

const char *argv_python_module(char *const *argv) {
        if (!argv || !argv[0] || argv[0][0] != '/' || !argv[1] || !streq(argv[1], "-m") || !argv[2] || !argv[2][0] ||
            argv[2][0] == '-')
                return NULL;
        return argv[2];
}

const char *context_config_preload_module(const ContextConfig *cc, const char **ret_why) {
        const char *module = argv_python_module(cc->argv);

        if (cc->preload == PRELOAD_NO)
                *ret_why = "preload = no";
        else if (!module)
                *ret_why = "argv is not PYTHON -m MODULE";
        else if (cc->preload == PRELOAD_AUTO && !streq(module, "ipykernel_launcher") && !streq(module, "ipykernel"))
                *ret_why = "preload = auto, and argv runs another module than ipykernel_launcher";
        else
                return module;
        return NULL;
}

/* preload = yes is a promise about argv: said where it was set, rather than as a cold start at every launch. */
static int parser_check_preload(Parser *p, const Section *s, const ContextConfig *cc) {
        const Section *from;

        if (cc->preload != PRELOAD_YES || argv_python_module(cc->argv))
                return 0;
        from = parser_setter(p, s, KEY_PRELOAD);
        return parser_fail_key(p, from->cc.source.file, from->keys[KEY_PRELOAD].line, from, "preload",
                               from->keys[KEY_PRELOAD].raw,
                               "argv must then be an absolute interpreter, -m and a module (PYTHON -m MODULE ...)");
}

static size_t placeholders_expand_into(char *out, const char *s, const char *kernel_file, const char *name) {
        size_t n = 0;

        while (*s) {
                const char *sub = NULL;
                size_t skip = 0;

                if (kernel_file && strncmp(s, "{kernel_file}", strlen("{kernel_file}")) == 0) {
                        sub = kernel_file;
                        skip = strlen("{kernel_file}");
                } else if (kernel_file && strncmp(s, "{connection_file}", strlen("{connection_file}")) == 0) {
                        /* A kernelspec's spelling, which an argv copied from a kernel.json keeps. */
                        sub = kernel_file;
                        skip = strlen("{connection_file}");
                } else if (name && strncmp(s, "{name}", strlen("{name}")) == 0) {
                        sub = name;
                        skip = strlen("{name}");
                }
                if (sub) {
                        if (out)
                                memcpy(out + n, sub, strlen(sub));
                        n += strlen(sub);
                        s += skip;
                } else {
                        if (out)
                                out[n] = *s;
                        n++;
                        s++;
                }
        }
        if (out)
                out[n] = '\0';
        return n;
}

/* Replaces {kernel_file} and {connection_file} (when kernel_file is not NULL) and {name}; substituted text is not
 * scanned again. */
char *placeholders_expand(const char *s, const char *kernel_file, const char *name) {
        char *out = malloc(placeholders_expand_into(NULL, s, kernel_file, name) + 1);

        if (out)
                placeholders_expand_into(out, s, kernel_file, name);
        return out;
}

/* The value of NAME=... in env, or NULL. */
static const char *env_get(char *const *env, const char *name) {
        size_t n = strlen(name);

        for (size_t i = 0; env && env[i]; i++)
                if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
                        return env[i] + n + 1;
        return NULL;
}

/* The built-in python3 kernel: ipykernel as Debian installs it, when neither kernel nor argv is set (and for
 * kernel = python3 where no kernelspec of that name is installed, as jupyter_client falls back to ipykernel's
 * own). */
static int context_use_native_kernel(ContextConfig *cc) {
        const char *reason;
        int r;

        if (!cc->argv) {
                r = argv_split(DEFAULT_ARGV, &cc->argv, &reason);
                if (r < 0)
                        return r;
        }
        free(cc->kernel);
        cc->kernel = strdup(NATIVE_KERNEL);
        cc->language = strdup("python");
        return cc->kernel && cc->language ? 0 : -ENOMEM;
}

/* Takes the spec's argv (unless argv was set), env (under the context's own variables), language and
 * interrupt_mode into cc. */
static int context_use_kernelspec(ContextConfig *cc, Kernelspec *k) {
        _cleanup_strv_free_ char **env = NULL;
        int r;

        if (!cc->argv)
                cc->argv = TAKE_PTR(k->argv);
        r = strv_copy(k->env, &env);
        for (size_t i = 0; r >= 0 && cc->env[i]; i++)
                r = strv_env_set_copy(&env, cc->env[i]);
        if (r < 0)
                return r;
        strv_free(cc->env);
        cc->env = TAKE_PTR(env);
        cc->kernel_path = TAKE_PTR(k->path);
        cc->language = TAKE_PTR(k->language);
        cc->interrupt_mode = k->interrupt_mode;
        return 0;
}

/* Where the kernel of cc looks for kernelspecs, and as whom: its user's home, rights and uid (the daemon's own
 * without user =; a user that does not exist yet has no home to look in, and only root's places count for it). */
static int context_kernelspec_dirs(const ContextConfig *cc, KernelspecUser *ret_user, char ***ret) {
        const char *jupyter_path = env_get(cc->env, "JUPYTER_PATH") ?: getenv("JUPYTER_PATH");
        _cleanup_free_ char *home = NULL;
        int r;

        r = kernelspec_user_lookup(cc->user, geteuid(), ret_user, &home);
        if (r < 0 && r != -ESRCH)
                return r;
        return kernelspec_dirs(jupyter_path, home, ret);
}

/* Keeps a spec failure the context's user could have caused as the context's own (config.h: kernel_error), so
 * that no user's file can get the configuration refused. */
static int parser_keep_kernel_error(Parser *p, const Section *from, ContextConfig *cc, const char *reason) {
        char label[96], shown[VALUE_SHOWN_MAX + 4];

        (void) p;
        if (asprintf(&cc->kernel_error, "%s:%u: [%s] kernel = %s: %s", from->cc.source.file,
                     from->keys[KEY_KERNEL].line, section_label(from, label, sizeof label),
                     value_shorten(from->keys[KEY_KERNEL].raw, shown), reason) < 0) {
                cc->kernel_error = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Resolves cc's kernel (set in section from, or NULL): the spec's argv, env, language and interrupt_mode. */
static int parser_resolve_kernel(Parser *p, const Section *s, ContextConfig *cc) {
        const Section *from = parser_setter(p, s, KEY_KERNEL);
        _cleanup_(kernelspec_freep) Kernelspec *k = NULL;
        _cleanup_strv_free_ char **dirs = NULL;
        _cleanup_free_ char *reason = NULL;
        KernelspecUser u = { 0 };
        bool users = false;
        int r;

        if (!from)
                return cc->argv ? 0 : context_use_native_kernel(cc) < 0 ? parser_oom(p) : 0;
        r = context_kernelspec_dirs(cc, &u, &dirs);
        if (r >= 0)
                r = kernelspec_find(dirs, cc->kernel, &u, env_get(cc->env, "PATH"), &k, &reason, &users);
        kernelspec_user_done(&u);
        if (r == -ENOENT && streq(cc->kernel, NATIVE_KERNEL))
                r = context_use_native_kernel(cc);
        else if (r >= 0)
                r = context_use_kernelspec(cc, k);
        else if (users && reason)
                r = parser_keep_kernel_error(p, from, cc, reason);
        if (r == -ENOMEM)
                return parser_oom(p);
        if (r >= 0)
                return 0;
        return parser_fail_key(p, from->cc.source.file, from->keys[KEY_KERNEL].line, from, "kernel",
                               from->keys[KEY_KERNEL].raw, reason ?: strerror(-r));
}

/* Builds the effective settings of the context section s into *ret (which the caller frees, also on failure). */
static int parser_resolve_context(Parser *p, const Section *s, ContextConfig *ret) {
        const Section *from;
        int r;

        context_config_init(ret);
        ret->name = strdup(s->cc.name);
        ret->source.file = strdup(s->cc.source.file);
        if (!ret->name || !ret->source.file)
                return -ENOMEM;
        ret->source.line = s->cc.source.line;

        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                const ConfigKey *k = &config_keys[i];
                uint8_t *dst = (uint8_t *) ret + k->offset;
                const uint8_t *src;

                if (k->section != SECTION_CONTEXT || k->type == VALUE_ENV)
                        continue;
                from = parser_setter(p, s, i);
                if (!from)
                        continue;
                src = (const uint8_t *) &from->cc + k->offset;
                if (k->type == VALUE_STRING) {
                        *(char **) dst = strdup(*(char *const *) src);
                        if (!*(char **) dst)
                                return -ENOMEM;
                } else if (k->type == VALUE_STRV) {
                        r = strv_copy(*(char **const *) src, (char ***) dst);
                        if (r < 0)
                                return r;
                } else
                        memcpy(dst, src, value_size(k->type));
        }

        /* The environment merges: [defaults]' variables, then the context's, which replace same-named ones. */
        r = strv_copy(p->defaults_section.cc.env, &ret->env);
        if (r < 0)
                return r;
        for (size_t i = 0; s->cc.env && s->cc.env[i]; i++) {
                r = strv_env_set_copy(&ret->env, s->cc.env[i]);
                if (r < 0)
                        return r;
        }

        if (ret->connection_file) {
                /* {name} lets one connection_file in [defaults] serve every context. */
                _cleanup_free_ char *f = placeholders_expand(ret->connection_file, NULL, ret->name);

                if (!f)
                        return -ENOMEM;
                free(ret->connection_file);
                ret->connection_file = NULL;
                /* One spelling per file, so that ".." cannot hide a path from the checks below. */
                r = path_normalize(f, &ret->connection_file);
                if (r < 0)
                        return r;
        } else if (asprintf(&ret->connection_file, "%s/connections/%s.json", p->config->runtime_dir, ret->name) < 0) {
                ret->connection_file = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* The daemon's own places, each as written and as realpath() finds it now (they are root's: a link among them is
 * the administrator's). A published file may lie in <runtime_dir>/connections; nowhere else below them. */
typedef struct OwnPath {
        const char *key;  /* the [supervisor] key that names it */
        char *path;       /* normalized */
        bool just_itself; /* a file (the config, the socket), not a directory */
} OwnPath;

#define OWN_PATHS_MAX 12

static int own_path_add(OwnPath *v, size_t *n, const char *key, const char *path, bool just_itself) {
        char *real;
        int r;

        r = path_normalize(path, &v[*n].path);
        if (r < 0)
                return r == -EINVAL ? 0 : r; /* a relative path (a test's config) names no place of ours here */
        v[*n].key = key;
        v[*n].just_itself = just_itself;
        (*n)++;
        real = realpath(path, NULL);
        if (!real)
                return 0;
        v[*n] = (OwnPath){ .key = key, .path = real, .just_itself = just_itself };
        (*n)++;
        return 0;
}

static void own_paths_free(OwnPath *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].path);
}

static int own_paths_collect(const Config *c, OwnPath v[static OWN_PATHS_MAX], size_t *ret_n,
                             OwnPath published[static 2], size_t *ret_n_published) {
        _cleanup_free_ char *conn = NULL;
        size_t n = 0, np = 0;
        int r;

        if (asprintf(&conn, "%s/connections", c->runtime_dir) < 0)
                return -ENOMEM;
        r = own_path_add(published, &np, "runtime_dir", conn, false);
        if (r >= 0)
                r = own_path_add(v, &n, "the configuration file", c->path, true);
        if (r >= 0)
                r = own_path_add(v, &n, "the control socket", c->socket_path, true);
        if (r >= 0)
                r = own_path_add(v, &n, "contexts_dir", c->contexts_dir, false);
        if (r >= 0)
                r = own_path_add(v, &n, "state_dir", c->state_dir, false);
        if (r >= 0)
                r = own_path_add(v, &n, "runtime_dir", c->runtime_dir, false);
        *ret_n = n;
        *ret_n_published = np;
        return r;
}

static const OwnPath *own_path_holding(const OwnPath *v, size_t n, const char *path) {
        for (size_t i = 0; i < n; i++)
                if (v[i].just_itself ? streq(path, v[i].path) : path_is_below(path, v[i].path))
                        return &v[i];
        return NULL;
}

/* A connection file is written over whatever is at its path: never onto the daemon's own files (its config, its
 * state, the kernels' private files), which would break every later start. The daemon's published files live in
 * <runtime_dir>/connections, which is allowed. Links need no resolving here: no component of a published path may
 * be one when it is written, and following a user's link now would let that user get the whole configuration
 * refused. */
static int parser_check_own_paths(Parser *p, ContextConfig *ccs) {
        OwnPath own[OWN_PATHS_MAX] = {}, published[2] = {};
        size_t n_own = 0, n_published = 0;
        char label[96], shown[VALUE_SHOWN_MAX + 4];
        int r;

        r = own_paths_collect(p->config, own, &n_own, published, &n_published);
        for (size_t i = 0; r >= 0 && i < p->n_contexts; i++) {
                const OwnPath *o;
                const Section *from;

                ccs[i].connection_file_published = own_path_holding(published, n_published, ccs[i].connection_file);
                if (ccs[i].connection_file_published)
                        continue;
                o = own_path_holding(own, n_own, ccs[i].connection_file);
                if (!o)
                        continue;
                from = parser_setter(p, p->contexts[i], KEY_CONNECTION_FILE);
                if (!from) /* the default path: only a runtime_dir set inside contexts_dir or state_dir gets here */
                        from = p->contexts[i];
                r = parser_fail(p, -EINVAL,
                                "%s:%u: [%s] connection_file = %s: %s is %s%s %s, the daemon's own; "
                                "connection files go elsewhere (or in %s/connections)",
                                from->cc.source.file, from->keys[KEY_CONNECTION_FILE].line ?: from->cc.source.line,
                                section_label(from, label, sizeof label),
                                value_shorten(from->keys[KEY_CONNECTION_FILE].raw ?: ccs[i].connection_file, shown),
                                ccs[i].connection_file, o->just_itself ? "" : "inside ", o->key, o->path,
                                p->config->runtime_dir);
        }
        own_paths_free(own, n_own);
        own_paths_free(published, n_published);
        if (r == -ENOMEM)
                return parser_oom(p);
        return r;
}

/* Each kernel keeps PORTS_PER_KERNEL ports of port_range for good: a range too small fails kernels one by one at
 * run time, so say so now. */
static int parser_check_port_capacity(Parser *p) {
        const KeySetting *ks = &p->supervisor.keys[KEY_PORT_RANGE];
        size_t need = p->n_contexts * PORTS_PER_KERNEL, have = (size_t) p->config->port_max - p->config->port_min + 1;

        if (need <= have)
                return 0;
        if (ks->line > 0)
                return parser_fail(
                        p, -EINVAL,
                        "%s:%u: [supervisor] port_range = %s: holds %zu ports, but the %zu contexts need %zu "
                        "(%d each)",
                        p->supervisor.cc.source.file, ks->line, ks->raw, have, p->n_contexts, need, PORTS_PER_KERNEL);
        return parser_fail(
                p, -EINVAL,
                "%s: [supervisor] port_range (default %d-%d) holds %zu ports, but the %zu contexts need %zu "
                "(%d each): set a wider port_range",
                p->config->path, DEFAULT_PORT_MIN, DEFAULT_PORT_MAX, have, p->n_contexts, need, PORTS_PER_KERNEL);
}

/* Two kernels writing one connection file would hand clients each other's ports and keys. */
static int parser_check_connection_files(Parser *p, const ContextConfig *ccs) {
        char label[96], shown[VALUE_SHOWN_MAX + 4];
        _cleanup_(str_index_done) StrIndex seen = {};

        for (size_t i = 0; i < p->n_contexts; i++) {
                const Section *s, *from;
                size_t j, named;
                int r;

                r = str_index_put(&seen, ccs[i].connection_file, i, &j);
                if (r < 0)
                        return parser_oom(p);
                if (r == 0)
                        continue;
                /* At least one of the two was set explicitly: default paths differ by name. */
                named = parser_setter(p, p->contexts[i], KEY_CONNECTION_FILE) ? i : j;
                s = p->contexts[named];
                from = parser_setter(p, s, KEY_CONNECTION_FILE);
                return parser_fail(p, -EINVAL, "%s:%u: [%s] connection_file = %s: contexts %s and %s would share %s",
                                   from->cc.source.file, from->keys[KEY_CONNECTION_FILE].line,
                                   section_label(from, label, sizeof label),
                                   value_shorten(from->keys[KEY_CONNECTION_FILE].raw, shown), ccs[j].name, ccs[i].name,
                                   ccs[i].connection_file);
        }
        return 0;
}

static int context_config_compare(const void *a, const void *b) {
        return strcmp(((const ContextConfig *) a)->name, ((const ContextConfig *) b)->name);
}

/* A name, or a number as systemd's SocketUser= takes one. 0 when found, -ESRCH when not. */
static int socket_owner_resolve(const char *name, bool group, unsigned *ret_id) {
        unsigned long long n;

        if (parse_uint(name, 0, UINT32_MAX - 1, &n) == 0) {
                *ret_id = (unsigned) n;
                return 0;
        }
        if (group) {
                const struct group *gr = getgrnam(name);
                if (!gr)
                        return -ESRCH;
                *ret_id = gr->gr_gid;
        } else {
                const struct passwd *pw = getpwnam(name);
                if (!pw)
                        return -ESRCH;
                *ret_id = pw->pw_uid;
        }
        return 0;
}

/* socket_mode's default, and socket_user and socket_group as ids: a name nobody has is said now, with its line,
 * not when the daemon binds the socket. */
static int parser_resolve_socket_access(Parser *p) {
        Config *c = p->config;
        const KeySetting *user = &p->supervisor.keys[KEY_SOCKET_USER], *group = &p->supervisor.keys[KEY_SOCKET_GROUP];
        unsigned id;

        if (p->supervisor.keys[KEY_SOCKET_MODE].line == 0)
                c->socket_mode = DEFAULT_SOCKET_MODE;
        c->socket_uid = (uid_t) -1;
        c->socket_gid = (gid_t) -1;
        if (c->socket_user) {
                if (socket_owner_resolve(c->socket_user, false, &id) < 0)
                        return parser_fail_key(p, p->supervisor.cc.source.file, user->line, &p->supervisor,
                                               "socket_user", user->raw, "no such user");
                c->socket_uid = (uid_t) id;
        }
        if (c->socket_group) {
                if (socket_owner_resolve(c->socket_group, true, &id) < 0)
                        return parser_fail_key(p, p->supervisor.cc.source.file, group->line, &p->supervisor,
                                               "socket_group", group->raw, "no such group");
                c->socket_gid = (gid_t) id;
        }
        return 0;
}

/* What a context that sets nothing gets: the built-in values, then [defaults]' scalars (its strings are left out). */
static void parser_resolve_defaults(const Parser *p, ContextConfig *ret) {
        context_config_init(ret);
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                const ConfigKey *k = &config_keys[i];
                size_t size = value_size(k->type);

                if (k->section == SECTION_CONTEXT && size > 0 && p->defaults_section.keys[i].line > 0)
                        memcpy((uint8_t *) ret + k->offset, (const uint8_t *) &p->defaults_section.cc + k->offset,
                               size);
        }
}

int parser_resolve(Parser *p) {
        const ConfigDefaults *d = p->defaults;
        Config *c = p->config;
        ContextConfig builtins_and_defaults;
        int r;

        if (!c->runtime_dir && !(c->runtime_dir = strdup(d->runtime_dir)))
                return parser_oom(p);
        if (!c->state_dir && !(c->state_dir = strdup(d->state_dir)))
                return parser_oom(p);
        if (!c->contexts_dir && !(c->contexts_dir = strdup(d->contexts_dir)))
                return parser_oom(p);
        if (!c->socket_path) {
                const KeySetting *rt = &p->supervisor.keys[KEY_RUNTIME_DIR];

                /* A runtime_dir set in the file moves the socket along with it. */
                if (rt->line > 0 || !d->socket_path)
                        r = asprintf(&c->socket_path, "%s/control.sock", c->runtime_dir);
                else
                        r = (c->socket_path = strdup(d->socket_path)) ? 0 : -1;
                if (r < 0) {
                        c->socket_path = NULL;
                        return parser_oom(p);
                }
                if (rt->line > 0 && strlen(c->socket_path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                        return parser_fail_key(p, p->supervisor.cc.source.file, rt->line, &p->supervisor,
                                               "runtime_dir", rt->raw,
                                               "too long to hold control.sock (a Unix socket path has at most 107 "
                                               "bytes); set socket too");
        }
        if (p->supervisor.keys[KEY_EXECUTIONS_MEMORY].line == 0)
                c->executions_memory = 64 * 1024 * 1024;
        if (p->supervisor.keys[KEY_USER_CONTEXTS_MAX].line == 0)
                c->user_contexts_max = DEFAULT_USER_CONTEXTS_MAX;
        parser_resolve_defaults(p, &c->defaults);
        if (p->supervisor.keys[KEY_PORT_RANGE].line == 0) {
                c->port_min = DEFAULT_PORT_MIN;
                c->port_max = DEFAULT_PORT_MAX;
        }
        r = parser_resolve_socket_access(p);
        if (r < 0)
                return r;

        context_config_init(&builtins_and_defaults);
        if (p->defaults_section.keys[KEY_BACKOFF_MIN].line > 0)
                builtins_and_defaults.backoff_min = p->defaults_section.cc.backoff_min;
        if (p->defaults_section.keys[KEY_BACKOFF_MAX].line > 0)
                builtins_and_defaults.backoff_max = p->defaults_section.cc.backoff_max;
        r = parser_check_backoff(p, &p->defaults_section, &builtins_and_defaults);
        if (r < 0)
                return r;

        if (p->n_contexts == 0)
                return 0;
        c->contexts = calloc(p->n_contexts, sizeof(ContextConfig));
        if (!c->contexts)
                return parser_oom(p);
        c->n_contexts = p->n_contexts;
        /* In definition order first, so that the first error found is the first in the files. */
        for (size_t i = 0; i < p->n_contexts; i++) {
                r = parser_resolve_context(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return parser_oom(p);
                r = parser_resolve_kernel(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
                context_resolve_transport(&c->contexts[i]);
                r = parser_check_backoff(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
                r = parser_check_ipc_path(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
                r = parser_check_preload(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
        }
        r = parser_check_connection_files(p, c->contexts);
        if (r < 0)
                return r;
        r = parser_check_own_paths(p, c->contexts);
        if (r < 0)
                return r;
        r = parser_check_port_capacity(p);
        if (r < 0)
                return r;
        qsort(c->contexts, c->n_contexts, sizeof(ContextConfig), context_config_compare);
        return 0;
}
