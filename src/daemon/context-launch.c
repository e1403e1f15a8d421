/* The launch of a kernel: see context-private.h. */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <systemd/sd-journal.h>
#include <uv.h>

#include "cgroup.h"
#include "connfile.h"
#include "context-private.h"
#include "log.h"
#include "logrelay.h"
#include "preload.h"

/* ---- Kernel output goes to our log (logrelay.h): prefixed with the context, escaped, bounded. ---- */

/* Returns the write end for the child, or -errno. Under journald the kernel writes to its own journal
 * stream, tagged kernelsup/NAME: that survives the daemon, so a kernel adopted after a crash still has
 * somewhere to write, but its lines reach the journal as the kernel wrote them (its banner names kernel_file,
 * so we say which file clients use). Elsewhere a pipe to us, and our log prefixes each line with the context
 * and names the published file where the kernel named kernel_file. */
static int out_pipe_open(Context *c, const char *kernel_file) {
        int r;

        if (getenv("JOURNAL_STREAM")) {
                char id[96];
                snprintf(id, sizeof id, "kernelsup/%s", c->name);
                r = sd_journal_stream_fd(id, LOG_INFO, 0);
                if (r >= 0) {
                        log_info("%s: clients connect with %s (the kernel's banner names its private copy %s)",
                                 c->name, c->cfg->connection_file, kernel_file);
                        return r;
                }
        }

        return log_relay_open(c->host->loop, c->name, "the kernel's", kernel_file, c->cfg->connection_file);
}

/* ---- Launch ---- */

void context_deadline_cb(uv_timer_t *t) {
        Context *c = t->data;
        char d[32], msg[160];

        if (c->state != CONTEXT_STARTING || c->pid <= 0)
                return;
        if (c->host->clock_check(c->host->userdata))
                return; /* a freeze, not a hang: context_resumed() re-armed the deadline */
        /* It answered kernel_info and is only late with the chunking request: no hung start. */
        if (c->chunking == CHUNKING_PENDING)
                return context_chunking_expired(c);
        snprintf(msg, sizeof msg, "%s within start_timeout (%s); killed",
                 c->adopting ? "the adopted kernel did not answer kernel_info" : "did not answer kernel_info",
                 format_duration(d, sizeof d, c->cfg->start_timeout));
        free(c->pending_error);
        c->pending_error = strdup(msg);
        c->deadline_hit = true;
        (void) kill(-c->pid, SIGKILL);
}

/* Makes sure the TCP ports are free to bind; a port another process holds is
 * replaced by a free one (and said so), since a clash on iopub would hang the
 * kernel until the start deadline. Without ports to keep (none yet, or the
 * last kernel was on ipc), allocates five. */
static int context_prepare_ports(Context *c, bool keep, char **ret_note) {
        const ContextHost *h = c->host;
        _cleanup_free_ uint16_t *taken = NULL;
        size_t n_taken = 0;
        uint16_t fresh[_CHANNEL_MAX];
        unsigned used = 0;
        char note[512] = "";
        int r;

        r = h->taken_ports(h->userdata, c, &taken, &n_taken);
        if (r < 0)
                return r;
        if (!keep)
                return ports_allocate(c->name, c->st.conn.ip, h->port_min, h->port_max, taken, n_taken,
                                      c->st.conn.ports);
        for (int ch = 0; ch < _CHANNEL_MAX; ch++) {
                uint16_t port = c->st.conn.ports[ch];
                bool in_range = port >= h->port_min && port <= h->port_max;
                if (in_range && port_is_free(c->st.conn.ip, port) != 0)
                        continue;
                if (used == 0) {
                        /* Our own ports count as taken too, so a replacement never collides with them. */
                        uint16_t *t = realloc(taken, sizeof(uint16_t) * (n_taken + _CHANNEL_MAX));
                        if (!t)
                                return -ENOMEM;
                        taken = t;
                        memcpy(taken + n_taken, c->st.conn.ports, sizeof c->st.conn.ports);
                        n_taken += _CHANNEL_MAX;
                        r = ports_allocate(c->name, c->st.conn.ip, h->port_min, h->port_max, taken, n_taken, fresh);
                        if (r < 0)
                                return r;
                }
                size_t l = strlen(note);
                snprintf(note + l, sizeof note - l, "%s%s port %u %s; moved to %u", l ? ", " : "",
                         channel_to_string(ch), port, in_range ? "was in use" : "is outside port_range", fresh[used]);
                c->st.conn.ports[ch] = fresh[used++];
                c->conn_saved = false;
        }
        if (used > 0)
                *ret_note = strdup(note);
        return 0;
}

/* The next kernel's connection: the persisted key (a new one the first time), and the transport the
 * configuration asks for now, on its stable ports or socket paths. */
static int context_prepare_conn(Context *c, char **ret_note) {
        bool had_tcp = c->st.has_conn && c->st.conn.transport == TRANSPORT_TCP;
        ConnectionInfo before = c->st.conn;
        int r;

        if (!c->st.has_conn) {
                r = connection_key_new(c->st.conn.key);
                if (r < 0)
                        return r;
        }
        c->st.conn.transport = c->cfg->transport;
        r = connection_info_set_address(&c->st.conn, c->host->runtime_dir, c->name);
        if (r >= 0 && c->cfg->transport == TRANSPORT_TCP)
                r = context_prepare_ports(c, had_tcp, ret_note);
        if (r < 0)
                return r;
        /* Whatever changed (a new key, another transport, moved ports) goes to disk before a kernel uses it. */
        if (!c->st.has_conn || memcmp(&before, &c->st.conn, sizeof before) != 0)
                c->conn_saved = false;
        c->st.has_conn = true;
        return 0;
}

static int fail_path(char **ret_error, const char *what, const char *path, const char *why, int r) {
        if (asprintf(ret_error, "Failed to %s %s: %s", what, path, why) < 0)
                *ret_error = NULL;
        return r;
}

static int context_write_files(Context *c, char **ret_kernel_file, char **ret_error) {
        _cleanup_free_ char *dir = NULL, *kfile = NULL, *text = NULL, *reason = NULL;
        uid_t uid = c->user.change ? c->user.uid : (uid_t) -1;
        gid_t gid = c->user.change ? c->user.gid : (gid_t) -1;
        int r;

        /* The kernel's private copy: ipykernel rewrites the file it is given. */
        if (asprintf(&dir, "%s/kernels/%s", c->host->runtime_dir, c->name) < 0 ||
            asprintf(&kfile, "%s/kernel.json", dir) < 0)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return fail_path(ret_error, "create", dir, strerror(errno), -errno);
        if (c->user.change && chown(dir, uid, gid) < 0)
                return fail_path(ret_error, "chown", dir, strerror(errno), -errno);
        text = connection_info_format(&c->st.conn);
        if (!text)
                return -ENOMEM;
        r = write_file_atomic(kfile, text, strlen(text), 0600, uid, gid);
        if (r < 0)
                return fail_path(ret_error, "write", kfile, strerror(-r), r);
        r = connection_file_publish(c->cfg->connection_file, &c->st.conn, &c->user, c->cfg->connection_file_published,
                                    &reason);
        if (r < 0)
                return fail_path(ret_error, "write the connection file", c->cfg->connection_file,
                                 reason ?: strerror(-r), r);
        *ret_kernel_file = TAKE_PTR(kfile);
        return 0;
}

/* Removes the directory runtime_dir/sub/name (opened without following a link) unless keep_dir, after the file
 * inner in it when inner is not NULL; what is missing is success. */
static int runtime_remove(const Context *c, const char *sub, const char *name, const char *inner, bool keep_dir,
                          char **ret_failed) {
        _cleanup_close_ int dirfd = -1, own = -1;
        _cleanup_free_ char *path = NULL;
        int r = 0;

        if (asprintf(&path, "%s/%s", c->host->runtime_dir, sub) < 0)
                return -ENOMEM;
        dirfd = open_dir_nofollow(path);
        if (dirfd < 0)
                return dirfd == -ENOENT ? 0 : dirfd;
        if (inner) {
                /* The directory is the context user's: nothing in it is followed, a link there is removed itself. */
                own = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (own < 0 && errno != ENOENT)
                        r = -errno;
                else if (own >= 0 && unlinkat(own, inner, 0) < 0 && errno != ENOENT)
                        r = -errno;
        }
        if (r >= 0 && !keep_dir && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = -errno;
        if (r < 0 && ret_failed && asprintf(ret_failed, "%s/%s%s%s", path, name, inner ? "/" : "", inner ?: "") < 0)
                *ret_failed = NULL;
        return r;
}

int context_remove_private_files(Context *c, bool dirs, char **ret_failed) {
        int r;

        r = runtime_remove(c, "kernels", c->name, "kernel.json", !dirs, ret_failed);
        if (r >= 0 && dirs)
                /* The ipc sockets' directory (its sockets went when the kernel exited). */
                r = runtime_remove(c, "ipc", c->name, NULL, false, ret_failed);
        return r;
}

/* A launch that did not happen takes its identity back: nothing ran under it. */
static void context_identity_undo(Context *c) {
        memcpy(c->st.kernel_id, c->prev.kernel_id, sizeof c->st.kernel_id);
        c->st.incarnation = c->prev.incarnation;
        c->st.restarts = c->prev.restarts;
        c->st.pid = 0;
}

/* Write ahead: a new kernel's identity (incarnation, kernel_id), ports and key are on disk before anything
 * is published or launched, so an incarnation is never handed out twice and a connection file never names
 * ports or a key the next daemon would not know. New or moved ports and key are written here, before the
 * connection file; otherwise the write of the pid before exec (context_place) carries the new identity,
 * one write per launch. When a write fails the identity is taken back; ports and key stay in memory for
 * the next attempt, never made anew. */
static int context_persist_identity(Context *c) {
        int r;

        memcpy(c->prev.kernel_id, c->st.kernel_id, sizeof c->prev.kernel_id);
        c->prev.incarnation = c->st.incarnation;
        c->prev.restarts = c->st.restarts;
        uuid_random(c->st.kernel_id);
        if (c->st.incarnation > 0)
                c->st.restarts++;
        c->st.incarnation++;
        c->st.pid = 0;
        if (c->conn_saved)
                return 0;
        r = context_save(c);
        if (r < 0)
                context_identity_undo(c);
        return r;
}

/* The limits are in place (systemd answered for the scope, or did not in time): the kernel may exec.
 * Its exec failing is an exit like any other, with the step as its error. */
static void context_limits_done(Limits *l, void *userdata) {
        Context *c = userdata;
        char *err = NULL;

        if (resources_wanted(c->cfg) && l->note)
                log_warning("%s: %s", c->name, l->note);
        if (spawn_release(&c->release, &err) < 0 && err) {
                free(c->pending_error);
                c->pending_error = err;
        } else
                free(err);
}

/* The forked kernel waits before exec. Its pid goes to disk first, so that a kernel that runs can always
 * be adopted by the next daemon (none is ever orphaned); when that write fails it never execs. Then it
 * is put under its limits, in a cgroup of its own where the system allows; while systemd has not
 * answered for a scope, it goes on waiting (SPAWN_DEFER), and context_limits_done() releases it. */
static int context_place(pid_t pid, void *userdata, char **ret_error) {
        Context *c = userdata;
        int r;

        c->st.pid = pid;
        (void) proc_pid_starttime(pid, &c->st.pid_starttime);
        snprintf(c->st.boot_id, sizeof c->st.boot_id, "%s", c->host->boot_id);
        c->st.started_at = now_usec(CLOCK_REALTIME);
        r = context_save(c);
        if (r < 0) {
                context_identity_undo(c);
                if (asprintf(ret_error, "not launched: %s", c->save_error ?: strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        return resources_apply_async(c->host->loop, c->cfg, c->name, pid, &c->limits, context_limits_done, c) > 0
                       ? SPAWN_DEFER
                       : 0;
}

static void context_launched(Context *c);

/* The launch is over: failed (r < 0, err says why), or the kernel runs (c->pid). */
static void context_spawned(Context *c, int r, const char *err) {
        if (r < 0) {
                c->st.started_at = now_usec(CLOCK_REALTIME);
                c->st.last_exit = (ExitInfo){ 0 };
                return context_launch_failed(c, err ?: strerror(-r));
        }
        context_launched(c);
}

static int context_spawn_cold(Context *c, const SpawnParams *p, const char *why, char **ret_error) {
        c->st.preloaded = false;
        free(c->cold_why);
        c->cold_why = strdup(why);
        return spawn_kernel(p, &c->pid, &c->pidfd, ret_error);
}

/* The launcher answered (or cannot): the kernel it forked, placed; a failed placement; or cold now. */
static void preload_launched(PreloadLaunch *pl, void *userdata, int r, pid_t pid, int pidfd, const char *msg,
                             const SpawnParams *p) {
        Context *c = userdata;
        _cleanup_free_ char *err = NULL;

        c->pl_answer = NULL;
        if (r == 0) {
                c->pl_setup = pl;
                c->pid = pid;
                c->pidfd = pidfd;
                return context_launched(c);
        }
        if (r != -EAGAIN)
                return context_spawned(c, r, msg);
        log_info("%s: launching cold: %s", c->name, msg);
        r = context_spawn_cold(c, p, msg, &err);
        context_spawned(c, r, err);
}

/* The preloaded kernel's setup failed (msg; it exits, or was killed for being late), or is done (NULL). */
static void preload_setup_done(PreloadLaunch *pl, void *userdata, const char *msg) {
        Context *c = userdata;

        if (c->pl_setup != pl)
                return;
        c->pl_setup = NULL;
        if (msg && c->pid > 0) {
                log_warning("%s: the preloaded kernel's setup failed: %s", c->name, msg);
                free(c->pending_error);
                c->pending_error = strdup(msg);
        }
}

static const PreloadCallbacks preload_callbacks = {
        .launched = preload_launched,
        .setup_done = preload_setup_done,
};

void context_launch_cancel(Context *c) {
        preload_launch_cancel(c->pl_answer);
        c->pl_answer = NULL;
        preload_launch_cancel(c->pl_setup);
        c->pl_setup = NULL;
}

void context_launch_settle(Context *c) {
        preload_launch_settle(c->pl_setup);
}

/* Launches through the context's preloaded launcher where its settings allow, else cold. st.preloaded (on disk
 * with the pid, for status after an adoption) and cold_why say which way and why. 1: the launcher has the
 * request, and its answer comes on the loop (preload_launched()). */
static int context_spawn(Context *c, const SpawnParams *p, char **ret_error) {
        _cleanup_free_ char *cold = NULL;
        const char *why = "this daemon has no preloaded launchers";
        int r;

        free(c->cold_why);
        c->cold_why = NULL;
        if (c->host->preload && context_config_preload_module(c->cfg, &why)) {
                c->st.preloaded = true;
                r = preload_spawn(c->host->preload, p, c->cfg, &preload_callbacks, c, &c->pl_answer, &cold);
                if (r == 0)
                        return 1;
                if (r != -EAGAIN)
                        return r;
                why = cold ?: "out of memory";
                log_info("%s: launching cold: %s", c->name, why);
        }
        return context_spawn_cold(c, p, why, ret_error);
}

void context_launch(Context *c) {
        _cleanup_free_ char *err = NULL, *note = NULL, *kfile = NULL;
        _cleanup_strv_free_ char **argv = NULL, **env = NULL;
        char *extra[64 + 3] = { 0 };
        char idvar[64], ctxvar[128];
        size_t n_extra = 0;
        int outfd, r;

        /* One launch at a time: the launcher's answer to this one is awaited. */
        if (c->pl_answer)
                return;
        /* The last kernel's leftovers may still hold its ports or sockets: they go first (milliseconds). */
        if (c->leftovers) {
                c->launch_deferred = true;
                return;
        }
        uv_timer_stop(&c->timer);
        /* The last kernel's setup report, if it never came: that kernel is gone. */
        context_launch_cancel(c);
        c->deadline_hit = false;
        context_readiness_reset(c);
        free(c->pending_error);
        c->pending_error = NULL;

        /* Its kernelspec was refused where its user can write (config.h): it fails alone, with the reason. */
        if (c->cfg->kernel_error)
                return context_launch_refused(c, c->cfg->kernel_error);
        if (!c->user_resolved) {
                r = spawn_user_resolve(c->cfg->user, c->cfg->group, &c->user, &err);
                if (r < 0)
                        return context_launch_failed(c, err ?: "cannot resolve the user");
                c->user_resolved = true;
        }
        r = context_prepare_conn(c, &note);
        if (r < 0) {
                char msg[256];
                if (c->cfg->transport == TRANSPORT_IPC)
                        snprintf(msg, sizeof msg, "cannot set up the kernel's socket paths below %s: %s",
                                 c->host->runtime_dir, strerror(-r));
                else
                        snprintf(msg, sizeof msg, "no free ports in port_range %u-%u: %s", c->host->port_min,
                                 c->host->port_max, strerror(-r));
                return context_launch_failed(c, msg);
        }
        if (c->st.conn.transport == TRANSPORT_IPC) {
                _cleanup_free_ char *failed = NULL;
                r = ipc_dir_prepare(c->host->runtime_dir, c->name, c->user.change ? c->user.uid : (uid_t) -1,
                                    c->user.change ? c->user.gid : (gid_t) -1, &failed);
                if (r < 0) {
                        char msg[PATH_MAX + 128];
                        snprintf(msg, sizeof msg, "cannot prepare %s for the kernel's sockets: %s",
                                 failed ?: c->host->runtime_dir, strerror(-r));
                        return context_launch_failed(c, msg);
                }
        }
        if (note)
                log_warning("%s: %s", c->name, note);
        r = context_persist_identity(c);
        if (r < 0) {
                char msg[600];
                snprintf(msg, sizeof msg, "not launched: %s", c->save_error ?: strerror(-r));
                return context_launch_failed(c, msg);
        }
        r = context_write_files(c, &kfile, &err);
        if (r < 0)
                return context_launch_failed(c, err ?: strerror(-r));

        r = context_config_expand_argv(c->cfg, kfile, &argv);
        if (r < 0)
                return context_launch_failed(c, "out of memory");
        snprintf(idvar, sizeof idvar, "KERNELSUP_KERNEL_ID=%s", c->st.kernel_id);
        snprintf(ctxvar, sizeof ctxvar, "KERNELSUP_CONTEXT=%s", c->name);
        for (char **e = c->cfg->env; *e && n_extra < 64; e++)
                extra[n_extra++] = *e;
        extra[n_extra++] = ctxvar;
        extra[n_extra++] = idvar;
        r = spawn_env_build(&c->user, extra, &env);
        if (r < 0)
                return context_launch_failed(c, "out of memory");

        outfd = out_pipe_open(c, kfile);
        if (outfd < 0)
                return context_launch_failed(c, "cannot create the output pipe");
        SpawnParams p = {
                .argv = argv,
                .env = env,
                .cwd = c->cfg->cwd ?: (c->user.home && c->user.change ? c->user.home : "/"),
                .user = &c->user,
                .stdout_fd = outfd,
                .prepare = context_place,
                .userdata = c,
                .pending = &c->release,
        };
        resources_release(&c->limits);
        free(err);
        err = NULL;
        /* The note about moved ports stays as last_error once the kernel is ready. */
        c->pending_error = TAKE_PTR(note);
        r = context_spawn(c, &p, &err);
        close(outfd);
        if (r > 0)
                /* Starting, without a pid until the launcher answers (or the launch goes cold). */
                return context_set_state(c, CONTEXT_STARTING);
        context_spawned(c, r, err);
}

/* The kernel process exists (c->pid, c->pidfd): watched, connected to and asked for kernel_info. */
static void context_launched(Context *c) {
        int r;

        if (resources_wanted(c->cfg) && c->limits.note && !c->limits.scope)
                log_warning("%s: %s", c->name, c->limits.note);

        c->pid_poll = malloc(sizeof(uv_poll_t));
        if (!c->pid_poll || uv_poll_init(c->host->loop, c->pid_poll, c->pidfd) < 0) {
                free(c->pid_poll);
                c->pid_poll = NULL;
                (void) kill(-c->pid, SIGKILL);
                (void) waitid(P_PIDFD, (id_t) c->pidfd, &(siginfo_t){ 0 }, WEXITED);
                close(c->pidfd);
                c->pid = 0;
                resources_release(&c->limits);
                spawn_pending_drop(&c->release);
                return context_launch_failed(c, "cannot watch the kernel process");
        }
        c->pid_poll->data = c;
        uv_poll_start(c->pid_poll, UV_READABLE, context_pid_poll_cb);

        log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_STARTED, "launched", c->pid, NULL),
                  "%s: launched kernel %s (pid %d, incarnation %llu)", c->name, c->st.kernel_id, (int) c->pid,
                  (unsigned long long) c->st.incarnation);
        context_replay_launched(c);
        context_set_state(c, CONTEXT_STARTING);

        c->max_message = exec_message_bound(c->cfg->output_limit);
        r = kernel_conn_new(c->host->loop, &c->st.conn, c->max_message, &context_conn_callbacks, c, &c->conn);
        if (r < 0) {
                log_error_errno(r, "%s: cannot connect to the kernel: %m", c->name);
                free(c->pending_error);
                if (asprintf(&c->pending_error, "cannot connect to the kernel's ports: %s", strerror(-r)) < 0)
                        c->pending_error = NULL;
                (void) kill(-c->pid, SIGKILL);
                return;
        }
        context_send_kernel_info(c);
        uv_timer_start(&c->info_timer, context_info_timer_cb, KERNEL_INFO_RESEND_MSEC, KERNEL_INFO_RESEND_MSEC);
        uv_timer_start(&c->timer, context_deadline_cb, c->cfg->start_timeout / USEC_PER_MSEC, 0);
}
