/* A context's kernel exits: what it was, what it leaves (sockets, files, leftovers in its group), and what
 * follows by the restart policy. See context-private.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "chunking.h"
#include "quirks.h"
#include "context-private.h"
#include "log.h"
#include "preload.h"
#include "userfile.h"
#include "util.h"

/* ---- Process exit ---- */

void context_pid_poll_close_cb(uv_handle_t *h) {
        free(h);
}

KernelDeath exit_info_death(const ExitInfo *e) {
        return e->oom       ? KERNEL_DEATH_OOM_KILL
               : e->unknown ? KERNEL_DEATH_UNKNOWN
               : e->signal  ? KERNEL_DEATH_SIGNAL
                            : KERNEL_DEATH_EXIT_CODE;
}

const char *kernel_death_to_string(KernelDeath d) {
        static const char *const names[_KERNEL_DEATH_MAX] = {
                [KERNEL_DEATH_EXIT_CODE] = "exit-code",
                [KERNEL_DEATH_SIGNAL] = "signal",
                [KERNEL_DEATH_OOM_KILL] = "oom-kill",
                [KERNEL_DEATH_UNKNOWN] = "unknown",
        };
        return (unsigned) d < _KERNEL_DEATH_MAX ? names[d] : NULL;
}

const ContextCounters *context_counters(const Context *c) {
        return &c->counters;
}

unsigned context_restarts(const Context *c) {
        return c->st.restarts;
}

/* The journal field of an exit: KERNELSUP_EXIT_CODE=N or KERNELSUP_SIGNAL=SIGNAME ("" when unknown). */
static void exit_field(const ExitInfo *e, char *buf, size_t size) {
        const char *abbrev = e->signal ? sigabbrev_np(e->signal) : NULL;

        if (e->unknown)
                snprintf(buf, size, "%s", "");
        else if (e->signal && abbrev)
                snprintf(buf, size, "KERNELSUP_SIGNAL=SIG%s", abbrev);
        else if (e->signal)
                snprintf(buf, size, "KERNELSUP_SIGNAL=%d", e->signal);
        else
                snprintf(buf, size, "KERNELSUP_EXIT_CODE=%d", e->code);
}

static void describe_exit(const ExitInfo *e, char *buf, size_t size) {
        if (e->unknown)
                snprintf(buf, size, "ended (the exit status of an adopted kernel is not ours to see)");
        else if (e->oom)
                snprintf(buf, size, "killed by the OOM killer (SIGKILL)");
        else if (e->signal) {
                const char *abbrev = sigabbrev_np(e->signal);
                if (abbrev)
                        snprintf(buf, size, "killed by SIG%s", abbrev);
                else
                        snprintf(buf, size, "killed by signal %d", e->signal);
        } else
                snprintf(buf, size, "exited with code %d", e->code);
}

static void context_schedule_restart(Context *c, bool failed_start);

/* A dead kernel's socket files stay behind (ipykernel does not remove them when it is given its file):
 * nothing listens on them any more, so they go, also when no kernel follows. */
static void context_remove_sockets(Context *c) {
        _cleanup_free_ char *failed = NULL;
        int r;

        if (c->st.conn.transport != TRANSPORT_IPC)
                return;
        r = ipc_sockets_remove(c->host->runtime_dir, c->name, &failed);
        if (r < 0)
                log_warning_errno(r, "%s: failed to remove %s: %m", c->name, failed ?: "the kernel's sockets");
}

/* The kernel's private copy of its connection file holds the key and has done its work: it goes, also when no
 * kernel follows. */
static void context_remove_kernel_file(Context *c) {
        _cleanup_free_ char *failed = NULL;
        int r;

        r = context_remove_private_files(c, false, &failed);
        if (r < 0)
                log_warning_errno(r, "%s: failed to remove %s: %m", c->name, failed ?: "the kernel's connection file");
}

static void log_leftovers(const Context *c, int r, GroupKill kill, const char *group) {
        static const char *const how[] = {
                [GROUP_KILL_NONE] = "as subreaper",
                [GROUP_KILL_V2] = "cgroup.kill",
                [GROUP_KILL_FREEZE] = "cgroup freezer",
                [GROUP_KILL_PROCS] = "cgroup.procs",
        };

        if (r > 0)
                log_notice("%s: ended %d process%s kernel %s left behind (%s)", c->name, r, r == 1 ? "" : "es",
                           c->st.kernel_id, how[kill]);
        else if (r < 0)
                log_warning_errno(r, "%s: processes kernel %s left behind in %s are not gone: %m", c->name,
                                  c->st.kernel_id, group ?: "no cgroup");
}

static void context_finish_stop(Context *c) {
        if (c->restart_pending) {
                c->restart_pending = false;
                context_launch(c);
        } else
                context_set_state(c, CONTEXT_STOPPED);
}

/* The leftovers are gone (or the wait for them ended): their cgroup goes, then a stop that waited for them
 * ends, or a launch that waited for them goes ahead. */
static void leftovers_done(int r, GroupKill kill, const char *group, void *userdata) {
        Context *c = userdata;

        c->leftovers = NULL;
        log_leftovers(c, r, kill, group);
        resources_release(&c->limits);
        if (c->stop_deferred) {
                c->stop_deferred = false;
                context_finish_stop(c);
        } else if (c->launch_deferred) {
                c->launch_deferred = false;
                if (c->want_running)
                        context_launch(c);
        }
}

/* The last step of every stop and exit: what the kernel left behind outside its process group (a cell's
 * process that forked, setsid()s and ignores SIGTERM) would hold its ports, and the next launch would move
 * them. Everything in its cgroup is ended, or without one, what we inherited from it as subreaper. The first
 * round kills at once; should anything be left, the next launch waits for it (see context_launch()), the loop
 * does not. */
static void context_end_group(Context *c) {
        char tag[96];
        int r;

        snprintf(tag, sizeof tag, "KERNELSUP_KERNEL_ID=%s", c->st.kernel_id);
        resources_end_group_cancel(c->leftovers);
        c->leftovers = NULL;
        r = resources_end_group_start(c->host->loop, &c->limits, tag, LEFTOVER_WAIT_USEC, leftovers_done, c,
                                      &c->leftovers);
        if (r != -EINPROGRESS)
                log_leftovers(c, r, c->limits.kill, c->limits.group);
}

/* What follows a kernel's exit (its process is gone, what names how): stopped, launched again at once (a
 * restart), or restarted after a backoff. Only a kernel that never became ready counts as a failed start
 * (start_limit_burst of them make the context failed); one that was ready, and went away for any reason (a
 * client's shutdown_request, a kill, the OOM killer, a crash), is restarted with the backoff and never failed. */
static void context_after_exit(Context *c, ContextStateKind was, pid_t pid, const char *what) {
        bool by_client = c->client_shutdown, failed_start = was == CONTEXT_STARTING;
        const char *asked = c->exit_cell ? "a cell's exit()" : "a client's shutdown_request";
        char msg[256], field[64];

        c->client_shutdown = c->exit_cell = false;
        /* A client that shut its kernel down asked for an empty one (Jupyter's restart). */
        if (by_client)
                context_journal_forget(c, asked);
        if (was == CONTEXT_STOPPING && (!by_client || c->restart_pending || !c->want_running)) {
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_STOPPED, "stopped", pid, NULL),
                          "%s: kernel %s stopped (%s)", c->name, c->st.kernel_id, what);
                context_save(c);
                /* Stopped means nothing of it is left: until then the context stays stopping. */
                if (c->leftovers)
                        c->stop_deferred = true;
                else
                        context_finish_stop(c);
                return;
        }

        if (!by_client)
                c->counters.deaths[exit_info_death(&c->st.last_exit)]++;
        /* Most kernels other than ipykernel cannot bind Unix sockets, and fail there in many ways (an abort, an
         * exit, no answer): a failed start there names the fix. */
        const char *hint = failed_start && c->cfg->transport == TRANSPORT_IPC && !quirks_ipykernel(c->cfg->argv)
                                   ? " (on transport = ipc, which many kernels other than ipykernel cannot bind: set "
                                     "transport = tcp)"
                                   : "";
        /* A kernel that ended on its own before it was ready: its exit comes first, what the daemon saw meanwhile
         * (a connect that failed, moved ports) after it. */
        if (c->pending_error && failed_start && !c->st.last_exit.signal && !c->st.last_exit.unknown)
                snprintf(msg, sizeof msg, "%s before it was ready (%s)%s", what, c->pending_error, hint);
        else if (c->pending_error)
                snprintf(msg, sizeof msg, "%s%s", c->pending_error, hint);
        else if (failed_start)
                snprintf(msg, sizeof msg, "%s before it was ready%s", what, hint);
        else
                snprintf(msg, sizeof msg, "kernel %s%s%s", what, by_client ? " after " : "", by_client ? asked : "");
        free(c->pending_error);
        c->pending_error = NULL;
        context_set_error(c, msg);
        exit_field(&c->st.last_exit, field, sizeof field);
        log_event(LOG_WARNING,
                  CONTEXT_EVENT(c, LOG_ID_KERNEL_DIED,
                                by_client ? "shutdown-request"
                                          : kernel_death_to_string(exit_info_death(&c->st.last_exit)),
                                pid, field),
                  "%s: kernel %s (pid %d) %s", c->name, c->st.kernel_id, (int) pid, msg);
        context_save(c);

        /* A kernel a client shut down ended as asked, even when it had to be helped with a signal. */
        if (c->cfg->restart == RESTART_NO || (c->cfg->restart == RESTART_ON_FAILURE &&
                                              (by_client || (!c->st.last_exit.signal && c->st.last_exit.code == 0)))) {
                c->want_running = false;
                context_set_state(c, CONTEXT_STOPPED);
                return;
        }
        context_schedule_restart(c, failed_start);
}

/* The kernel (our child, or an adopted process) has exited: pidfd readable.
 * Ends what is left of its process group before reaping the leader, so its
 * pid (the group id) cannot be reused in between. */
static void context_handle_exit(Context *c) {
        ContextStateKind was = c->state;
        siginfo_t si = { 0 };
        char what[64];

        if (c->pid <= 0)
                return;
        (void) kill(-c->pid, SIGKILL);
        if (waitid(P_PIDFD, (id_t) c->pidfd, &si, WEXITED | WNOHANG) < 0) {
                if (errno != ECHILD)
                        return;
                /* Not our child (adopted): the pidfd says it is gone, its status is not ours to read. */
                c->st.last_exit = (ExitInfo){ .valid = true, .unknown = true, .at = now_usec(CLOCK_REALTIME) };
                si.si_pid = c->pid;
        } else if (si.si_pid == 0)
                return; /* not exited yet */
        else
                c->st.last_exit = (ExitInfo){
                        .valid = true,
                        .code = si.si_code == CLD_EXITED ? si.si_status : 0,
                        .signal = si.si_code == CLD_EXITED ? 0 : si.si_status,
                        .at = now_usec(CLOCK_REALTIME),
                };
        /* Its memory cgroup (watched since launch) says whether the OOM killer did it. */
        if ((c->st.last_exit.signal == SIGKILL || c->st.last_exit.unknown) && resources_oom_killed(&c->limits))
                c->st.last_exit.oom = true;
        /* A preloaded kernel's failed setup step, if it reported one, is what its exit tells. */
        context_launch_settle(c);
        context_end_group(c);
        if (!c->leftovers)
                resources_release(&c->limits);
        spawn_pending_drop(&c->release);
        describe_exit(&c->st.last_exit, what, sizeof what);
        context_remove_sockets(c);
        context_remove_kernel_file(c);

        uv_close((uv_handle_t *) c->pid_poll, context_pid_poll_close_cb);
        c->pid_poll = NULL;
        close(c->pidfd);
        c->pidfd = -1;
        c->pid = 0;
        c->st.pid = 0;
        exec_queue_detach(c->exec, what);
        if (c->conn) {
                kernel_conn_close(c->conn);
                c->conn = NULL;
        }
        if (c->dropped_unsaid)
                log_debug("%s: its connections were dropped by its exit", c->name);
        c->dropped_unsaid = 0;
        uv_timer_stop(&c->timer);
        uv_timer_stop(&c->info_timer);
        uv_timer_stop(&c->hb_timer);
        c->adopting = false;
        if (was == CONTEXT_RESTORING)
                context_replay_lost(c, what);
        context_replay_exited(c, was);

        context_after_exit(c, was, si.si_pid, what);
}

void context_pid_poll_cb(uv_poll_t *p, int status, int events) {
        context_handle_exit(p->data);
}

bool context_child_exited(Context *c, pid_t pid) {
        if (c->pid <= 0 || c->pid != pid)
                return false;
        context_handle_exit(c);
        return true;
}

/* ---- Restart policy ---- */

static void timer_launch_cb(uv_timer_t *t) {
        Context *c = t->data;

        if (c->state == CONTEXT_FAILED)
                start_limit_reset(&c->limit);
        context_launch(c);
}

/* Only failed starts count toward the start limit; every end counts toward the backoff, which
 * backoff_reset of readiness starts over (context_info_timer_cb). */
static void context_schedule_restart(Context *c, bool failed_start) {
        usec_t now = now_usec(CLOCK_MONOTONIC), delay;
        char d[32], d2[32];
        uint32_t rnd = 0;

        if (failed_start && start_limit_hit(&c->limit, now, c->cfg->start_limit_burst, c->cfg->start_limit_interval)) {
                log_event(LOG_ERR, CONTEXT_EVENT(c, LOG_ID_KERNEL_FAILED, "start-limit", 0, NULL),
                          "%s: %u failed starts in a row or within %s; failed, retrying in %s", c->name,
                          c->cfg->start_limit_burst, format_duration(d, sizeof d, c->cfg->start_limit_interval),
                          format_duration(d2, sizeof d2, c->cfg->failed_cooldown));
                c->failures = 0;
                uv_timer_start(&c->timer, timer_launch_cb, c->cfg->failed_cooldown / USEC_PER_MSEC, 0);
                context_set_state(c, CONTEXT_FAILED);
                return;
        }
        (void) random_bytes(&rnd, sizeof rnd);
        delay = backoff_delay(c->cfg->backoff_min, c->cfg->backoff_max, c->failures++, rnd);
        if (failed_start)
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_RESTARTING, "failed-start", 0, NULL),
                          "%s: restarting in %s", c->name, format_duration(d, sizeof d, delay));
        else
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_RESTARTING, "backoff", 0, NULL),
                          "%s: restarting in %s (ended %u time%s in a row; the delay starts over once a kernel stays "
                          "ready for backoff_reset, %s)",
                          c->name, format_duration(d, sizeof d, delay), c->failures, c->failures == 1 ? "" : "s",
                          format_duration(d2, sizeof d2, c->cfg->backoff_reset));
        uv_timer_start(&c->timer, timer_launch_cb, delay / USEC_PER_MSEC, 0);
        context_set_state(c, CONTEXT_BACKOFF);
}

/* A launch that failed before a process existed (bad user, exec error, ...). */
void context_launch_failed(Context *c, const char *msg) {
        log_error("%s: %s", c->name, msg);
        context_set_error(c, msg);
        c->st.last_exit = (ExitInfo){ 0 };
        context_save(c);
        /* Keep to the table's path: a failure follows a start. */
        context_set_state(c, CONTEXT_STARTING);
        context_schedule_restart(c, true);
}

void context_launch_refused(Context *c, const char *msg) {
        log_error("%s: %s", c->name, msg);
        context_set_error(c, msg);
        c->st.last_exit = (ExitInfo){ 0 };
        context_save(c);
        /* Nothing changes until the configuration is read again: no retry, failed at once. */
        uv_timer_stop(&c->timer);
        context_set_state(c, CONTEXT_STARTING);
        context_set_state(c, CONTEXT_FAILED);
}
