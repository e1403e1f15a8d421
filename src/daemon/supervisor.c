#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "context.h"
#include "control.h"
#include "freeze.h"
#include "handlers.h"
#include "log.h"
#include "notify.h"
#include "reload.h"
#include "state.h"
#include "preload.h"
#include "supervisor.h"
#include "supervisor-private.h"
#include "util.h"

/* After the last kernel's stop_timeout, a shutdown that still waits is stuck:
 * this much later everything left is killed. */
#define SHUTDOWN_GRACE_MSEC 5000
/* While a state file cannot be written (a full disk), how often every unsaved one is tried again. */
#define STATE_RETRY_MSEC 2000

/* ---- Lookup and visibility ---- */

Context *supervisor_find(Supervisor *s, const char *name) {
        for (size_t i = 0; i < s->n_contexts; i++)
                if (streq(context_name(s->contexts[i]), name))
                        return s->contexts[i];
        return NULL;
}

/* ContextHost.taken_ports. */
static int supervisor_taken_ports(void *userdata, const Context *except, uint16_t **ret, size_t *ret_n) {
        Supervisor *s = userdata;
        uint16_t *v = calloc(s->n_contexts * _CHANNEL_MAX + 1, sizeof(uint16_t));
        size_t n = 0;

        if (!v)
                return -ENOMEM;
        /* Every context's state is loaded at its creation, also of contexts never launched in this run. */
        for (size_t i = 0; i < s->n_contexts; i++)
                if (s->contexts[i] != except && context_ports(s->contexts[i], v + n))
                        n += _CHANNEL_MAX;
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- READY, STATUS and shutdown progress ---- */

/* Why the daemon is degraded, NULL when it is not: "cannot write state file PATH: ERR" of the first
 * context whose state is not on disk, and how many more there are. For a peer (NULL: the service manager)
 * only its own contexts are named: the path holds the name. *ret is newly allocated. */
static int supervisor_degraded(Supervisor *s, const ControlPeer *peer, char **ret) {
        const char *first = NULL;
        size_t n = 0;
        bool hidden = false;

        for (size_t i = 0; i < s->n_contexts; i++) {
                if (!context_save_error(s->contexts[i]))
                        continue;
                if (peer && !handlers_peer_sees(peer, s->contexts[i]))
                        hidden = true;
                else if (n++ == 0)
                        first = context_save_error(s->contexts[i]);
        }
        *ret = NULL;
        if (n == 0 && !hidden)
                return 0;
        if (n == 0) {
                if (asprintf(ret, "cannot write state files in %s", s->config->state_dir) < 0)
                        *ret = NULL;
        } else if (n == 1)
                *ret = strdup(first);
        else if (asprintf(ret, "%s (and %zu more contexts unsaved)", first, n - 1) < 0)
                *ret = NULL;
        return *ret ? 1 : -ENOMEM;
}

void supervisor_update_status(Supervisor *s) {
        unsigned count[_CONTEXT_STATE_MAX] = { 0 };
        char buf[512];
        size_t l;

        for (size_t i = 0; i < s->n_contexts; i++)
                count[context_state(s->contexts[i])]++;
        l = (size_t) snprintf(buf, sizeof buf, "%u/%zu kernels ready", count[CONTEXT_READY] + count[CONTEXT_BUSY],
                              s->n_contexts);
        for (int st = 0; st < _CONTEXT_STATE_MAX; st++) {
                if (st == CONTEXT_READY || st == CONTEXT_BUSY || !count[st] || l >= sizeof buf)
                        continue;
                l += (size_t) snprintf(buf + l, sizeof buf - l, ", %u %s", count[st], context_state_to_string(st));
        }
        if (s->stopping && l < sizeof buf)
                l += (size_t) snprintf(buf + l, sizeof buf - l, " (shutting down)");
        {
                _cleanup_free_ char *degraded = NULL;
                if (supervisor_degraded(s, NULL, &degraded) > 0 && l < sizeof buf)
                        snprintf(buf + l, sizeof buf - l, "; degraded: %s", degraded);
        }

        if (!s->ready_sent) {
                /* Ready once every autostart context is ready or has failed. */
                for (size_t i = 0; i < s->n_contexts; i++) {
                        Context *c = s->contexts[i];
                        ContextStateKind st = context_state(c);
                        if (context_autostart(c) && st != CONTEXT_READY && st != CONTEXT_BUSY &&
                            st != CONTEXT_UNRESPONSIVE && st != CONTEXT_FAILED)
                                goto not_yet;
                }
                s->ready_sent = true;
                log_info("ready: %s", buf);
                notify_ready(s->notify, buf);
                return;
        }
not_yet:
        notify_status(s->notify, buf);
}

static void supervisor_finish(Supervisor *s);

void supervisor_check_shutdown(Supervisor *s) {
        if (!s->stopping)
                return;
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_state(s->contexts[i]) != CONTEXT_STOPPED)
                        return;
        for (size_t i = 0; i < s->n_retiring; i++)
                if (context_state(s->retiring[i]) != CONTEXT_STOPPED)
                        return;
        if (s->shutdown_timer.data)
                log_info("all kernels stopped; exiting");
        supervisor_finish(s);
}

/* ---- What the control handlers see (HandlersHost) ---- */

static void supervisor_reply(Supervisor *s, const ControlPeer *peer, ReplySupervisor *ret, char **ret_degraded);

static Context *supervisor_find_cb(void *userdata, const char *name) {
        return supervisor_find(userdata, name);
}

static Context *const *supervisor_contexts(void *userdata, size_t *ret_n) {
        Supervisor *s = userdata;

        *ret_n = s->n_contexts;
        return s->contexts;
}

static bool supervisor_stopping(void *userdata) {
        Supervisor *s = userdata;

        return s->stopping;
}

static void supervisor_status(void *userdata, const ControlPeer *peer, ReplySupervisor *ret, char **ret_degraded) {
        supervisor_reply(userdata, peer, ret, ret_degraded);
}

static int supervisor_reload_cb(void *userdata, bool dry_run, json_t **ret_report, char **ret_error) {
        return supervisor_reload_announced(userdata, dry_run, ret_report, ret_error);
}

static const Config *supervisor_config(void *userdata) {
        Supervisor *s = userdata;

        return s->config;
}

static const char *supervisor_contexts_dir(void *userdata) {
        Supervisor *s = userdata;

        return s->config->contexts_dir;
}

/* Seconds since the daemon started. */
static double supervisor_uptime(const Supervisor *s) {
        usec_t now = now_usec(CLOCK_REALTIME);

        return now > s->sstate.started_at ? (double) (now - s->sstate.started_at) / 1e6 : 0.0;
}

static void supervisor_metrics(void *userdata, MetricsDaemon *ret) {
        Supervisor *s = userdata;

        *ret = (MetricsDaemon){
                .version = PACKAGE_VERSION,
                .generation = s->sstate.generation,
                .resumes = s->resumes,
                .uptime = supervisor_uptime(s),
                .control_connections = s->control ? control_server_connections(s->control) : 0,
        };
        (void) metrics_rss(&ret->rss);
}

/* ContextHost.heartbeat: a probe waiting for c is answered. */
static void supervisor_context_heartbeat(void *userdata, Context *c) {
        Supervisor *s = userdata;

        handlers_heartbeat(s->handlers, c);
}

static void state_retry_cb(uv_timer_t *t) {
        Supervisor *s = t->data;

        for (size_t i = 0; i < s->n_contexts; i++)
                (void) context_save_retry(s->contexts[i]);
}

/* ContextHost.save_changed: the daemon is degraded while any context is unsaved (status, STATUS=), and
 * retries on a timer. */
static void supervisor_state_changed(void *userdata, Context *c) {
        Supervisor *s = userdata;
        _cleanup_free_ char *degraded = NULL;

        if (s->state_retry.data) {
                if (supervisor_degraded(s, NULL, &degraded) != 0) {
                        if (!uv_is_active((uv_handle_t *) &s->state_retry))
                                uv_timer_start(&s->state_retry, state_retry_cb, STATE_RETRY_MSEC, STATE_RETRY_MSEC);
                } else
                        uv_timer_stop(&s->state_retry);
        }
        supervisor_update_status(s);
}

/* ContextHost.state_changed. */
static void supervisor_context_changed(void *userdata, Context *c) {
        Supervisor *s = userdata;

        if (context_state(c) == CONTEXT_STOPPED)
                for (size_t i = 0; i < s->n_retiring; i++)
                        if (s->retiring[i] == c) {
                                retire_forget(s, c);
                                uv_timer_start(&s->retire_timer, retire_cb, 0, 0);
                        }
        handlers_context_changed(s->handlers, c);
        supervisor_update_status(s);
        supervisor_check_shutdown(s);
}

/* The status of the daemon itself, as peer may see it. */
static void supervisor_reply(Supervisor *s, const ControlPeer *peer, ReplySupervisor *ret, char **ret_degraded) {
        *ret_degraded = NULL;
        (void) supervisor_degraded(s, peer, ret_degraded);
        *ret = (ReplySupervisor){
                .pid = getpid(),
                .version = PACKAGE_VERSION,
                .generation = (long long) s->sstate.generation,
                .boot_id = s->sstate.boot_id,
                .started_at = s->sstate.started_at,
                .uptime = supervisor_uptime(s),
                .resumes = (long long) s->resumes,
                .last_resume_at = s->last_resume_at,
                .degraded = *ret_degraded,
        };
}

/* ---- Freezes ---- */

/* The tick's period, and how late it may come under load before that counts as a freeze. */
#define TICK_MSEC 1000
#define TICK_SLACK_USEC (1500 * USEC_PER_MSEC)
#define FREEZE_THRESHOLD_USEC (2 * USEC_PER_SEC)

/* Samples the clocks; when a freeze happened since the last sample, records the resume, tells every context
 * to re-arm its deadlines, and returns true (ContextHost.clock_check). */
static bool supervisor_clock_check(void *userdata) {
        Supervisor *s = userdata;
        ClockSample now;
        usec_t jump;
        char d[32], field[64];

        clock_sample(&now);
        jump = freeze_detect(&s->clock, &now, TICK_MSEC * USEC_PER_MSEC + TICK_SLACK_USEC, FREEZE_THRESHOLD_USEC);
        s->clock = now;
        if (!jump)
                return false;
        s->resumes++;
        s->last_resume_at = now.realtime;
        snprintf(field, sizeof field, "KERNELSUP_FREEZE_USEC=%llu", (unsigned long long) jump);
        log_event(LOG_NOTICE, &(LogEvent){ .message_id = LOG_ID_FREEZE_DETECTED, .reason = "freeze", .extra = field },
                  "resumed after a freeze of about %s; deadlines restart from now",
                  format_duration(d, sizeof d, jump));
        for (size_t i = 0; i < s->n_contexts; i++)
                context_resumed(s->contexts[i]);
        return true;
}

static void tick_cb(uv_timer_t *t) {
        (void) supervisor_clock_check(t->data);
}

/* ---- Signals ---- */

/* Reaps every exited child: a kernel through its context (which ends its
 * group first), anything else (orphans we inherit as subreaper or PID 1)
 * directly. WNOWAIT looks before reaping, so a kernel's status is never
 * stolen from its context. */
static void sigchld_cb(uv_signal_t *h, int signum) {
        Supervisor *s = h->data;

        for (;;) {
                siginfo_t si = { 0 };
                bool ours = false;

                if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
                        break;
                ours = preload_child_exited(s->host.preload, si.si_pid);
                for (size_t i = 0; i < s->n_contexts && !ours; i++)
                        ours = context_child_exited(s->contexts[i], si.si_pid);
                if (!ours) {
                        log_debug("reaped orphan %d", (int) si.si_pid);
                        (void) waitpid(si.si_pid, NULL, WNOHANG);
                }
        }
}

static void shutdown_timer_cb(uv_timer_t *t) {
        Supervisor *s = t->data;

        log_error("shutdown is taking too long; killing what is left");
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_pid(s->contexts[i]) > 0)
                        (void) kill(-context_pid(s->contexts[i]), SIGKILL);
        s->exit_code = 1;
}

static void supervisor_shutdown(Supervisor *s, const char *why) {
        usec_t longest = 0;

        if (s->stopping)
                return;
        log_info("%s: stopping every kernel", why);
        s->stopping = true;
        notify_stopping(s->notify);
        for (size_t i = 0; i < s->n_contexts; i++) {
                const ContextConfig *cc = config_find_context(s->config, context_name(s->contexts[i]));
                if (cc && cc->stop_timeout > longest)
                        longest = cc->stop_timeout;
        }
        uv_timer_start(&s->shutdown_timer, shutdown_timer_cb, longest / USEC_PER_MSEC + SHUTDOWN_GRACE_MSEC, 0);
        for (size_t i = 0; i < s->n_contexts; i++)
                context_stop(s->contexts[i]);
        supervisor_check_shutdown(s);
}

/* How long a SIGTERM waits for systemd to say whether it restarts us; past it, the kernels are stopped. */
#define RESTART_QUERY_USEC (2 * USEC_PER_SEC)

/* Whether a SIGTERM from sender is the stop half of a restart of our unit by systemd (PID 1): then the
 * kernels are left for the next daemon to adopt (KillMode=process keeps them), as README promises for a
 * restart and an upgrade. A plain stop, a SIGTERM from anyone else, or no answer in time: stop them. */
static bool supervisor_restarting(Supervisor *s, pid_t sender, const char *from) {
        _cleanup_free_ char *unit = NULL;
        int r;

        if (s->stopping || s->pid1 || sender != 1)
                return false;
        r = notify_restart_queued(RESTART_QUERY_USEC, &unit);
        if (r > 0)
                log_info("SIGTERM from %s: a restart of %s is running, so the kernels stay for the next kernelsupd "
                         "to adopt",
                         from, unit);
        else if (r < 0 && unit)
                log_warning_errno(r,
                                  "SIGTERM from %s: cannot ask systemd whether it restarts %s (%m); stopping the "
                                  "kernels",
                                  from, unit);
        return r > 0;
}

/* Exits leaving every kernel running: their state is on disk (written ahead), so the next daemon adopts
 * them as it would after a crash. */
static void supervisor_leave(Supervisor *s) {
        size_t n = 0;

        s->stopping = true;
        notify_stopping(s->notify);
        for (size_t i = 0; i < s->n_contexts; i++)
                n += context_pid(s->contexts[i]) > 0;
        log_info("exiting; %zu kernel%s left running", n, n == 1 ? "" : "s");
        supervisor_finish(s);
}

/* "pid 1234 (systemd)": who sent a signal, for the log. */
static void describe_sender(pid_t pid, char *buf, size_t size) {
        char path[64];
        _cleanup_free_ char *comm = NULL;

        snprintf(path, sizeof path, "/proc/%d/comm", (int) pid);
        if (pid > 0 && read_file(path, 64, &comm, NULL) >= 0) {
                comm[strcspn(comm, "\n")] = '\0';
                snprintf(buf, size, "pid %d (%s)", (int) pid, comm);
        } else if (pid == 0)
                /* As PID 1 of a container, a sender in the parent namespace has no pid here. */
                snprintf(buf, size, "outside our PID namespace");
        else
                snprintf(buf, size, "pid %d", (int) pid);
}

/* SIGTERM, SIGINT and SIGHUP arrive through a signalfd, which says who sent them. */
static void signalfd_cb(uv_poll_t *h, int status, int events) {
        Supervisor *s = h->data;
        struct signalfd_siginfo si;
        char from[128], why[160];

        while (read(s->signal_fd, &si, sizeof si) == (ssize_t) sizeof si) {
                if (si.ssi_code == SI_KERNEL)
                        /* Not a process: the terminal's Ctrl-C (or Ctrl-\\, a hangup) in the foreground. */
                        snprintf(from, sizeof from, si.ssi_signo == SIGINT ? "the terminal (Ctrl-C)" : "the terminal");
                else
                        describe_sender((pid_t) si.ssi_pid, from, sizeof from);
                if (si.ssi_signo == SIGHUP) {
                        _cleanup_free_ char *error = NULL;
                        json_t *report = NULL;
                        if (s->stopping)
                                continue;
                        log_info("SIGHUP from %s: reloading %s", from, s->config->path);
                        if (supervisor_reload_announced(s, false, &report, &error) >= 0)
                                json_decref(report);
                } else if (si.ssi_signo == SIGTERM && supervisor_restarting(s, (pid_t) si.ssi_pid, from))
                        supervisor_leave(s);
                else {
                        snprintf(why, sizeof why, "%s from %s", si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", from);
                        supervisor_shutdown(s, why);
                }
        }
}

int supervisor_block_signals(void) {
        sigset_t set;

        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        /* Before any thread exists (libuv's pool), so every thread inherits the mask. */
        return sigprocmask(SIG_BLOCK, &set, NULL) < 0 ? -errno : 0;
}

/* Every kernel has stopped: close what keeps the loop alive. */
static void supervisor_finish(Supervisor *s) {
        if (s->shutdown_timer.data == NULL)
                return; /* already finishing */
        handlers_shutdown(s->handlers);
        uv_timer_stop(&s->shutdown_timer);
        uv_close((uv_handle_t *) &s->shutdown_timer, NULL);
        uv_timer_stop(&s->tick);
        uv_close((uv_handle_t *) &s->tick, NULL);
        uv_timer_stop(&s->retire_timer);
        uv_close((uv_handle_t *) &s->retire_timer, NULL);
        uv_timer_stop(&s->state_retry);
        uv_close((uv_handle_t *) &s->state_retry, NULL);
        s->state_retry.data = NULL;
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_save_error(s->contexts[i]))
                        log_warning("%s: exiting with its state unsaved: %s", context_name(s->contexts[i]),
                                    context_save_error(s->contexts[i]));
        for (size_t i = 0; i < s->n_retiring; i++)
                context_free(s->retiring[i]);
        s->n_retiring = 0;
        s->shutdown_timer.data = NULL;
        if (s->control) {
                control_server_close(s->control);
                s->control = NULL;
        }
        for (size_t i = 0; i < s->n_contexts; i++)
                context_free(s->contexts[i]);
        s->n_contexts = 0;
        preload_pool_free(s->host.preload);
        s->host.preload = NULL;
        uv_close((uv_handle_t *) &s->signal_poll, NULL);
        uv_close((uv_handle_t *) &s->sig_chld, NULL);
        notify_free(s->notify);
        s->notify = NULL;
}

/* ---- Setup ---- */

/* Sets *ret_error to "<fmt with path>: <strerror(r)>" and returns r. */
static int fail(char **ret_error, int r, const char *what, const char *path, const char *hint) {
        char *msg;

        if (asprintf(&msg, "%s %s: %s%s", what, path, strerror(-r), hint ?: "") >= 0)
                *ret_error = msg;
        return r;
}

/* One daemon per state_dir: a second one on another socket would adopt the first's kernels, journal
 * them too and stop them on its exit. */
static int supervisor_lock_state_dir(Supervisor *s, char **ret_error) {
        const char *dir = s->config->state_dir;
        pid_t holder = 0;
        char *msg;
        int r;

        r = state_dir_lock(s->state_dirfd, &holder);
        if (r >= 0) {
                s->lock_fd = r;
                return 0;
        }
        if (r != -EWOULDBLOCK)
                return fail(ret_error, r, "Failed to lock state_dir", dir, NULL);
        if (holder > 0
                    ? asprintf(&msg, "state_dir %s is in use by another kernelsupd (pid %d, holding %s/lock)", dir,
                               (int) holder, dir) < 0
                    : asprintf(&msg, "state_dir %s is in use by another kernelsupd (holding %s/lock)", dir, dir) < 0)
                return -ENOMEM;
        *ret_error = msg;
        return -EBUSY;
}

/* The launcher's file: KERNELSUP_PRELOAD_SCRIPT, else, for a kernelsupd run from the tree it was built in
 * (./quickstart, make check), the source tree's, else the installed one. */
static const char *supervisor_preload_script(void) {
        static char exe[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        char *slash;

        if (getenv("KERNELSUP_PRELOAD_SCRIPT"))
                return getenv("KERNELSUP_PRELOAD_SCRIPT");
        exe[k > 0 ? k : 0] = 0;
        slash = strrchr(exe, '/');
        if (slash && (size_t) (slash - exe) == strlen(BUILD_TREE) &&
            strncmp(exe, BUILD_TREE, strlen(BUILD_TREE)) == 0 &&
            access(SOURCE_TREE "/src/daemon/kernelsup-preload.py", R_OK) == 0)
                return SOURCE_TREE "/src/daemon/kernelsup-preload.py";
        return PKGDATADIR "/kernelsup-preload.py";
}

int supervisor_new(uv_loop_t *loop, Config *config, const ConfigDefaults *defaults, Supervisor **ret,
                   char **ret_error) {
        _cleanup_free_ char *sockdir = NULL, *kdir = NULL, *cdir = NULL;
        const ControlMethod *methods;
        size_t n_methods;
        int listen_fd;
        Supervisor *s;
        const char *name;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->loop = loop;
        s->config = config;
        s->state_dirfd = -1;
        s->lock_fd = -1;
        s->signal_fd = -1;
        s->default_runtime_dir = strdup(defaults->runtime_dir);
        s->default_state_dir = strdup(defaults->state_dir);
        s->default_contexts_dir = strdup(defaults->contexts_dir);
        if (!s->default_runtime_dir || !s->default_state_dir || !s->default_contexts_dir) {
                r = -ENOMEM;
                goto err;
        }
        s->pid1 = getpid() == 1;

        r = mkdir_p(config->state_dir, 0700);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create state_dir", config->state_dir, NULL);
                goto err;
        }
        s->state_dirfd = open_dir_nofollow(config->state_dir);
        if (s->state_dirfd < 0) {
                r = fail(ret_error, s->state_dirfd, "Failed to open state_dir", config->state_dir, NULL);
                goto err;
        }
        /* Nothing is written before the lock of state_dir and the control socket are ours: a second
         * daemon is refused having changed nothing. The handlers run only from the loop, later. */
        r = supervisor_lock_state_dir(s, ret_error);
        if (r < 0)
                goto err;
        r = handlers_new(
                &(HandlersHost){
                        .loop = loop,
                        .userdata = s,
                        .find = supervisor_find_cb,
                        .contexts = supervisor_contexts,
                        .stopping = supervisor_stopping,
                        .status = supervisor_status,
                        .reload = supervisor_reload_cb,
                        .config = supervisor_config,
                        .contexts_dir = supervisor_contexts_dir,
                        .metrics = supervisor_metrics,
                        .executions_memory = config->executions_memory,
                },
                &s->handlers);
        if (r < 0)
                goto err;
        r = path_split(config->socket_path, &sockdir, &name);
        if (r >= 0)
                r = mkdir_p(sockdir, 0755);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create the directory of socket", config->socket_path, NULL);
                goto err;
        }
        methods = handlers_methods(s->handlers, &n_methods);
        listen_fd = notify_listen_fd();
        if (listen_fd >= 0)
                log_info("Serving on the control socket systemd passed: its unit's SocketMode=, SocketUser= and "
                         "SocketGroup= decide who may connect, not socket_mode, socket_user and socket_group.");
        r = control_server_new(loop, config->socket_path, listen_fd,
                               &(ControlSocketAccess){ .mode = config->socket_mode,
                                                       .uid = config->socket_uid,
                                                       .gid = config->socket_gid },
                               methods, n_methods, s->handlers, &s->control);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to listen on", config->socket_path,
                         r == -EADDRINUSE ? " (is another kernelsupd running?)" : NULL);
                goto err;
        }
        r = state_supervisor_start(s->state_dirfd, &s->sstate);
        if (r < 0) {
                char path[4200];
                snprintf(path, sizeof path, "%s/supervisor.json", config->state_dir);
                r = fail(ret_error, r, "Failed to write", path, NULL);
                goto err;
        }
        if (r > 0)
                log_warning("%s/supervisor.json was corrupt; moved aside, generation starts again at 1",
                            config->state_dir);
        log_info("kernelsupd %s starting: generation %llu, boot %s, pid %d%s", PACKAGE_VERSION,
                 (unsigned long long) s->sstate.generation, s->sstate.boot_id, (int) getpid(),
                 s->pid1 ? " (PID 1)" : "");

        /* Kernels' private files live below runtime_dir; published files default below it too. */
        if (asprintf(&kdir, "%s/kernels", config->runtime_dir) < 0 ||
            asprintf(&cdir, "%s/connections", config->runtime_dir) < 0) {
                r = -ENOMEM;
                goto err;
        }
        r = mkdir_p(kdir, 0755);
        if (r >= 0)
                r = mkdir_p(cdir, 0755);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create runtime_dir", config->runtime_dir, NULL);
                goto err;
        }

        s->host = (ContextHost){
                .loop = loop,
                .state_dirfd = s->state_dirfd,
                .state_dir = config->state_dir,
                .runtime_dir = config->runtime_dir,
                .port_min = config->port_min,
                .port_max = config->port_max,
                .boot_id = s->sstate.boot_id,
                .userdata = s,
                .clock_check = supervisor_clock_check,
                .state_changed = supervisor_context_changed,
                .heartbeat = supervisor_context_heartbeat,
                .save_changed = supervisor_state_changed,
                .taken_ports = supervisor_taken_ports,
        };
        r = preload_pool_new(loop, supervisor_preload_script(), &s->host.preload);
        if (r < 0)
                goto err;
        s->contexts = calloc(config->n_contexts + 1, sizeof(Context *));
        if (!s->contexts) {
                r = -ENOMEM;
                goto err;
        }
        for (size_t i = 0; i < config->n_contexts; i++) {
                _cleanup_free_ char *warning = NULL;
                r = context_new(&s->host, &config->contexts[i], &s->contexts[i], &warning);
                if (r < 0) {
                        char path[4200];
                        snprintf(path, sizeof path, "%s/contexts/%s.json", config->state_dir,
                                 config->contexts[i].name);
                        r = fail(ret_error, r, "Failed to read", path, NULL);
                        goto err;
                }
                s->n_contexts++;
                if (warning)
                        log_warning("%s: %s", config->contexts[i].name, warning);
        }

        r = notify_new(loop, &s->notify);
        if (r < 0)
                goto err;

        {
                sigset_t set;
                sigemptyset(&set);
                sigaddset(&set, SIGTERM);
                sigaddset(&set, SIGINT);
                sigaddset(&set, SIGHUP);
                s->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
                if (s->signal_fd < 0) {
                        r = -errno;
                        goto err;
                }
        }
        uv_poll_init(loop, &s->signal_poll, s->signal_fd);
        uv_signal_init(loop, &s->sig_chld);
        uv_timer_init(loop, &s->shutdown_timer);
        uv_timer_init(loop, &s->tick);
        uv_timer_init(loop, &s->retire_timer);
        s->retire_timer.data = s;
        uv_timer_init(loop, &s->state_retry);
        s->state_retry.data = s;
        s->signal_poll.data = s->sig_chld.data = s->shutdown_timer.data = s->tick.data = s;
        uv_poll_start(&s->signal_poll, UV_READABLE, signalfd_cb);
        uv_signal_start(&s->sig_chld, sigchld_cb, SIGCHLD);

        *ret = s;
        return 0;
err:
        supervisor_free(s);
        return r;
}

int supervisor_run(Supervisor *s) {
        /* Orphans of our kernels (a cell's detached child) come to us, not to init, so they
         * can be reaped and never outlive the daemon unnoticed. PID 1 gets them anyway. */
        if (!s->pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                log_warning_errno(errno, "Failed to become a child subreaper: %m");

        clock_sample(&s->clock);
        uv_timer_start(&s->tick, tick_cb, TICK_MSEC, TICK_MSEC);

        /* Kernels an earlier daemon left running keep their variables: adopt them. */
        for (size_t i = 0; i < s->n_contexts; i++) {
                Context *c = s->contexts[i];
                int r = context_adopt(c);
                if (r <= 0 && context_autostart(c))
                        context_start(c);
        }
        supervisor_update_status(s);

        uv_run(s->loop, UV_RUN_DEFAULT);
        return s->exit_code;
}

void supervisor_free(Supervisor *s) {
        if (!s)
                return;
        if (s->control || s->n_contexts > 0) {
                /* Only on a failed setup: the handles were never started. */
                if (s->control)
                        control_server_close(s->control);
                for (size_t i = 0; i < s->n_contexts; i++)
                        context_free(s->contexts[i]);
                uv_run(s->loop, UV_RUN_NOWAIT);
        }
        preload_pool_free(s->host.preload);
        free(s->contexts);
        free(s->retiring);
        free(s->default_runtime_dir);
        free(s->default_state_dir);
        free(s->default_contexts_dir);
        if (s->state_dirfd >= 0)
                close(s->state_dirfd);
        if (s->lock_fd >= 0)
                close(s->lock_fd);
        if (s->signal_fd >= 0)
                close(s->signal_fd);
        config_free(s->config);
        handlers_free(s->handlers);
        free(s);
}
