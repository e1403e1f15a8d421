/* add, and who may add and remove which contexts (handlers-private.h). Root and the daemon's own uid add any
 * context with any of add's settings. Another uid adds only contexts that run as itself, with the settings that
 * cannot reach beyond it (its kernel, a cwd it can enter, env, limits no higher than the defaults), at most
 * [supervisor] user_contexts_max of them; the file add writes says who added it (added_by), so that the count and
 * remove's check survive a restart. */

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config-value.h"
#include "handlers-private.h"
#include "log.h"
#include "protocol.h"
#include "spawn.h"
#include "userfile.h"
#include "util.h"

/* Who may set a key of add. */
typedef enum AddRight {
        ADD_ROOT,    /* root and the daemon's uid alone */
        ADD_ANYONE,  /* reaches nothing beyond the context's own user */
        ADD_BOUNDED, /* a limit: another uid sets it no higher than the default */
        ADD_SELF,    /* user: another uid names only itself */
} AddRight;

typedef struct AddKey {
        const char *key;
        ValueParser parse; /* NULL: the loader's checks at reload are all */
        AddRight right;
        /* ADD_BOUNDED: where the default lies in a ContextConfig, its size, and whether 0 means none (no limit). */
        size_t offset, size;
        bool zero_is_none;
} AddKey;

#define BOUNDED(k, p, field, none)                                                                                    \
        { k, p, ADD_BOUNDED, offsetof(ContextConfig, field), sizeof(((ContextConfig *) NULL)->field), none }

static const AddKey add_keys[] = {
        { "user", NULL, ADD_SELF },
        { "group", NULL, ADD_ROOT },
        { "cwd", NULL, ADD_ANYONE },
        { "connection_file", NULL, ADD_ROOT },
        { "kernel", parse_kernel_name, ADD_ANYONE },
        { "transport", parse_transport, ADD_ROOT },
        { "restore", parse_restore, ADD_ROOT },
        BOUNDED("memory_max", parse_memory, memory_max, true),
        BOUNDED("cpu_quota", parse_cpu_quota, cpu_quota, true),
        BOUNDED("tasks_max", parse_tasks, tasks_max, true),
        BOUNDED("output_limit", parse_size, output_limit, false),
        BOUNDED("start_timeout", parse_duration_positive, start_timeout, false),
        BOUNDED("stop_timeout", parse_duration_positive, stop_timeout, false),
};

#define OWN_KEYS                                                                                                      \
        "kernel, cwd, env, user (itself) and, no higher than the defaults, memory_max, cpu_quota, tasks_max, "        \
        "output_limit, start_timeout and stop_timeout"

/* contexts_dir, opened without following a symlink (created when missing). */
int handlers_open_contexts_dir(Handlers *h) {
        int r = mkdir_p(h->host.contexts_dir(h->host.userdata), 0755);

        return r < 0 ? r : open_dir_nofollow(h->host.contexts_dir(h->host.userdata));
}

/* Whatever add writes must read back exactly: a value the INI format would cut or change is refused, with nothing
 * written. Answers the request and returns false when refused. */
static bool add_value_writable(ControlRequest *req, const char *key, json_t *v) {
        _cleanup_free_ char *shown = NULL;
        const char *reason = NULL;
        int r;

        r = config_value_writable(key, json_string_value(v), json_string_length(v), &reason);
        if (r >= 0)
                return true;
        if (r == -ENOMEM) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return false;
        }
        /* The value as JSON, so a line break or a NUL shows; cut, so a huge one does not flood the reply. */
        shown = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        if (shown && strlen(shown) > 80)
                strcpy(shown + 72, "\"…");
        control_request_error(
                req, RPC_INVALID_PARAMS, NULL,
                "%s = %s cannot be written to an INI file so that it reads back the same: it %s; nothing "
                "was written",
                key, shown ?: "?", reason);
        return false;
}

/* A limit's value as a number, from a field of size bytes. */
static uint64_t value_at(const void *p, size_t size) {
        return size == sizeof(uint32_t) ? *(const uint32_t *) p : *(const uint64_t *) p;
}

/* Whether the limit v (parsed) is no higher than the default def; none (0 where zero_is_none) is the highest. */
static bool limit_within(const AddKey *k, uint64_t v, uint64_t def) {
        if (k->zero_is_none && def == 0)
                return true;
        if (k->zero_is_none && v == 0)
                return false;
        return v <= def;
}

/* The default of k for messages. */
static const char *limit_shown(const AddKey *k, uint64_t def, char *buf, size_t size) {
        if (k->zero_is_none && def == 0)
                return "none";
        if (k->parse == parse_duration_positive)
                return format_duration(buf, size, def);
        snprintf(buf, size, k->parse == parse_cpu_quota ? "%llu%%" : "%llu", (unsigned long long) def);
        return buf;
}

/* Whether value passes k's own parser, as the configuration loader parses it, and for another uid's add (bound:
 * the defaults; NULL: root's add) is a limit no higher than the default; else answers req naming key and value. */
static bool add_value_parses(ControlRequest *req, const AddKey *k, const char *value, const ContextConfig *bound) {
        union {
                char *s;
                uint64_t n;
        } scratch = {};
        const char *reason = "invalid";
        uint64_t def;
        char shown[64];
        int r;

        if (!k->parse)
                return true;
        r = k->parse(value, &scratch, &reason);
        if (r < 0) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL, "%s = %s: %s; nothing was written", k->key, value,
                                      r == -ENOMEM ? "out of memory" : reason);
                return false;
        }
        if (k->parse == parse_kernel_name)
                free(scratch.s);
        if (!bound || k->right != ADD_BOUNDED)
                return true;
        def = value_at((const uint8_t *) bound + k->offset, k->size);
        if (limit_within(k, value_at(&scratch, k->size), def))
                return true;
        control_request_error(req, KS_ERR_PERMISSION, NULL,
                              "permission denied: %s = %s is above the default (%s): a context added by uid %u may "
                              "only lower the limits; nothing was written",
                              k->key, value, limit_shown(k, def, shown, sizeof shown),
                              (unsigned) control_request_peer(req)->uid);
        return false;
}

static const AddKey *add_key_find(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(add_keys); i++)
                if (streq(add_keys[i].key, key))
                        return &add_keys[i];
        return NULL;
}

/* How many of the loaded contexts uid added. */
static unsigned contexts_added_by(Handlers *h, uid_t uid) {
        size_t n_all;
        Context *const *all = h->host.contexts(h->host.userdata, &n_all);
        unsigned n = 0;

        for (size_t i = 0; i < n_all; i++)
                if (context_config(all[i])->added_by == uid)
                        n++;
        return n;
}

/* Another uid's add: room under its cap, and nothing in params but the keys it may set. Answers req and returns
 * false when refused. */
static bool add_peer_allowed(Handlers *h, ControlRequest *req, json_t *params) {
        const Config *cfg = h->host.config(h->host.userdata);
        uid_t uid = control_request_peer(req)->uid;
        const char *key;
        json_t *v;

        if (cfg->user_contexts_max == 0) {
                control_request_error(req, KS_ERR_PERMISSION, NULL,
                                      "permission denied: only root may add contexts ([supervisor] "
                                      "user_contexts_max = 0)");
                return false;
        }
        if (contexts_added_by(h, uid) >= cfg->user_contexts_max) {
                control_request_error(req, KS_ERR_PERMISSION, NULL,
                                      "permission denied: uid %u has added %u contexts, as many as [supervisor] "
                                      "user_contexts_max allows; remove one first",
                                      (unsigned) uid, cfg->user_contexts_max);
                return false;
        }
        json_object_foreach(params, key, v) {
                const AddKey *k = add_key_find(key);
                if (streq(key, "context") || streq(key, "env") || (k && k->right != ADD_ROOT))
                        continue;
                control_request_error(req, KS_ERR_PERMISSION, NULL,
                                      "permission denied: %s is root's to set; a context added by uid %u may set "
                                      "only " OWN_KEYS,
                                      key, (unsigned) uid);
                return false;
        }
        return true;
}

/* The name of uid's user into *ret (newly allocated); answers req and returns false when it has none. */
static bool peer_user_name(ControlRequest *req, uid_t uid, char **ret) {
        _cleanup_free_ char *buf = malloc(16384);
        struct passwd pw, *pwp = NULL;

        if (!buf || getpwuid_r(uid, &pw, buf, 16384, &pwp) != 0 || !pwp) {
                control_request_error(req, KS_ERR_FAILED, NULL,
                                      "uid %u has no entry in the user database, which a context's user needs",
                                      (unsigned) uid);
                return false;
        }
        *ret = strdup(pw.pw_name);
        if (!*ret) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return false;
        }
        return true;
}

/* Another uid's user = value: itself alone (by name or number). The same answer whether or not value exists. */
static bool add_user_is_peer(ControlRequest *req, const char *value) {
        uid_t uid = control_request_peer(req)->uid;
        _cleanup_free_ char *err = NULL;
        SpawnUser u = {};
        bool self;

        self = spawn_user_resolve(value, NULL, &u, &err) >= 0 && u.uid == uid;
        spawn_user_done(&u);
        if (!self)
                control_request_error(req, KS_ERR_PERMISSION, NULL,
                                      "permission denied: user = %s is not uid %u: a context added by uid %u runs as "
                                      "that uid",
                                      value, (unsigned) uid, (unsigned) uid);
        return self;
}

/* Another uid's cwd: a directory that uid may enter, as its kernel will at each start (checked with its rights,
 * not root's). */
static bool add_cwd_enterable(ControlRequest *req, const char *user, const char *cwd) {
        _cleanup_free_ char *err = NULL, *reason = NULL;
        SpawnUser u = {};
        int r;

        /* A relative one is refused by the loader at the reload, as for root. */
        if (cwd[0] != '/')
                return true;
        r = spawn_user_resolve(user, NULL, &u, &err);
        if (r >= 0)
                r = user_dir_enter(cwd, &u, &reason);
        spawn_user_done(&u);
        if (r >= 0)
                return true;
        control_request_error(req, KS_ERR_PERMISSION, NULL, "permission denied: cwd = %s: %s; nothing was written",
                              cwd, reason ?: err ?: strerror(-r));
        return false;
}

/* The text of contexts_dir/NAME.ini: the keys of params (bound: another uid's add, its limits bounded by these
 * defaults, and user the name of its user when params has none), env, and who added it. Answers req and returns
 * false when a value is refused. */
static bool add_file_text(ControlRequest *req, json_t *params, const ContextConfig *bound, const char *own_user,
                          char **ret, size_t *ret_len) {
        json_t *env = json_object_get(params, "env"), *v;
        FILE *f = open_memstream(ret, ret_len);
        size_t i;

        if (!f) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return false;
        }
        fprintf(f, "; written by kernelctl add\n[context:%s]\n",
                json_string_value(json_object_get(params, "context")));
        for (i = 0; i < ELEMENTSOF(add_keys); i++) {
                json_t *kv = json_object_get(params, add_keys[i].key);
                if (!kv)
                        continue;
                if (!json_is_string(kv)) {
                        control_request_error(req, RPC_INVALID_PARAMS, NULL, "%s must be a string", add_keys[i].key);
                        goto fail;
                }
                if (!add_value_writable(req, add_keys[i].key, kv) ||
                    !add_value_parses(req, &add_keys[i], json_string_value(kv), bound) ||
                    (bound && add_keys[i].right == ADD_SELF && !add_user_is_peer(req, json_string_value(kv))))
                        goto fail;
                fprintf(f, "%s = %s\n", add_keys[i].key, json_string_value(kv));
        }
        json_array_foreach(env, i, v) {
                if (!json_is_string(v) || !strchr(json_string_value(v), '=')) {
                        control_request_error(req, RPC_INVALID_PARAMS, NULL, "env entries must be K=V strings");
                        goto fail;
                }
                if (!add_value_writable(req, "env", v))
                        goto fail;
                fprintf(f, "env = %s\n", json_string_value(v));
        }
        /* Last, so that the lines of what the peer gave read as they did before added_by existed. */
        if (own_user && !json_object_get(params, "user"))
                fprintf(f, "user = %s\n", own_user);
        fprintf(f, "added_by = %u\n", (unsigned) control_request_peer(req)->uid);
        if (fclose(f) == 0)
                return true;
        control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        return false;
fail:
        fclose(f);
        return false;
}

/* The name add was given, checked; answers req and returns NULL when refused. */
static const char *add_name(Handlers *h, ControlRequest *req, json_t *params) {
        const char *name = json_string_value(json_object_get(params, "context"));

        if (!name || !context_name_valid(name)) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                      "invalid context name: expected [A-Za-z0-9_.-]{1,64}");
                return NULL;
        }
        /* contexts_dir ignores hidden files (editors' and our own temporary files start with '.'). */
        if (name[0] == '.') {
                control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                      "invalid context name %s: a name starting with '.' would be a hidden file, "
                                      "which contexts_dir ignores",
                                      name);
                return NULL;
        }
        /* One namespace for every uid: the answer says that the name is taken, not whose it is. */
        if (handlers_find(h, name)) {
                control_request_error(req, KS_ERR_FAILED, NULL, "context %s exists already", name);
                return NULL;
        }
        return name;
}

json_t *handlers_report_for(ControlRequest *req, json_t *report, const char *name, bool added) {
        const char *names[] = { name };
        ReplyReport r = {};
        json_t *j = NULL;

        if (handlers_peer_privileged(control_request_peer(req)))
                return report;
        json_decref(report);
        if (added)
                r = (ReplyReport){ .added = names, .n_added = 1 };
        else
                r = (ReplyReport){ .removed = names, .n_removed = 1 };
        (void) reply_report_encode(&r, &j);
        return j;
}

const char *handlers_reload_error_for(ControlRequest *req, const char *path, const char *error) {
        size_t n = strlen(path);

        if (handlers_peer_privileged(control_request_peer(req)) ||
            (error && strncmp(error, path, n) == 0 && error[n] == ':'))
                return error;
        return "the daemon's configuration does not load as it stands (root's to fix: the daemon's log says why)";
}

/* Writes file (text, len bytes) into contexts_dir and reloads; a reload that fails removes the file again. */
static void add_write_reload(Handlers *h, ControlRequest *req, const char *name, const char *file, const char *text,
                             size_t len) {
        const char *dir = h->host.contexts_dir(h->host.userdata);
        _cleanup_free_ char *error = NULL, *path = NULL;
        _cleanup_close_ int dirfd = -1;
        json_t *report = NULL;
        int r;

        dirfd = handlers_open_contexts_dir(h);
        if (dirfd < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot open %s: %s", dir, strerror(-dirfd));
        /* A file the loader has not read (written since the last reload) is never replaced. */
        if (faccessat(dirfd, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s/%s exists already", dir, file);
        r = write_file_atomic_at(dirfd, file, text, len, 0644, (uid_t) -1, (gid_t) -1);
        if (r < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot write %s/%s: %s", dir, file,
                                             strerror(-r));
        r = h->host.reload(h->host.userdata, false, &report, &error);
        if (r < 0) {
                (void) unlinkat(dirfd, file, 0);
                if (asprintf(&path, "%s/%s", dir, file) < 0)
                        path = NULL;
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s; %s/%s was not kept",
                                             handlers_reload_error_for(req, path ?: "", error ?: strerror(-r)), dir,
                                             file);
        }
        control_request_reply(req, handlers_report_for(req, report, name, true));
}

/* add: writes contexts_dir/NAME.ini and reloads. */
void method_add(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        const ControlPeer *peer = control_request_peer(req);
        bool own = !handlers_peer_privileged(peer);
        json_t *env = json_object_get(params, "env"), *cwd = json_object_get(params, "cwd");
        _cleanup_free_ char *text = NULL, *file = NULL, *user = NULL;
        const ContextConfig *bound = own ? &h->host.config(h->host.userdata)->defaults : NULL;
        const char *name;
        size_t len = 0;

        if (own && !add_peer_allowed(h, req, params))
                return;
        name = add_name(h, req, params);
        if (!name)
                return;
        if (env && !json_is_array(env))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "env must be an array of K=V strings");
        if (own && !peer_user_name(req, peer->uid, &user))
                return;
        if (!add_file_text(req, params, bound, user, &text, &len))
                return;
        if (own && json_is_string(cwd) && !add_cwd_enterable(req, user, json_string_value(cwd)))
                return;
        if (asprintf(&file, "%s.ini", name) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        if (own)
                log_info("%s: add requested by uid %u", name, (unsigned) peer->uid);
        add_write_reload(h, req, name, file, text, len);
}

bool handlers_peer_may_remove(ControlRequest *req, const Context *c) {
        const ControlPeer *peer = control_request_peer(req);

        if (handlers_peer_privileged(peer) || context_config(c)->added_by == peer->uid)
                return true;
        control_request_error(req, KS_ERR_PERMISSION, NULL,
                              "permission denied: context %s was not added by uid %u; only root may remove it",
                              context_name(c), (unsigned) peer->uid);
        return false;
}
