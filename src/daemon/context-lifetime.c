/* A context's lifetime: made from its config and its state on disk, an earlier daemon's kernel
 * adopted, freed once its handles are closed. See context-private.h. */

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <unistd.h>
#include <uv.h>

#include "context-private.h"
#include "log.h"
#include "preload.h"
#include "util.h"

/* ---- Lifetime ---- */

int context_new(const ContextHost *host, const ContextConfig *cfg, Context **ret, char **ret_warning) {
        Context *c = calloc(1, sizeof *c);
        int r;

        if (!c || !(c->name = strdup(cfg->name))) {
                free(c);
                return -ENOMEM;
        }
        c->host = host;
        c->cfg = context_config_dup(cfg);
        if (!c->cfg) {
                free(c->name);
                free(c);
                return -ENOMEM;
        }
        c->pidfd = -1;
        c->limits = (Limits){ .oom_fd = -1, .oom_efd = -1 };
        c->release = (SpawnPending){ .gofd = -1, .errfd = -1 };
        c->state = CONTEXT_STOPPED;

        r = context_state_load(host->state_dirfd, c->name, &c->st);
        c->conn_saved = r >= 0;
        if (r == -EBADMSG || r == -EFBIG || r == -EISDIR || r == -ELOOP || r == -EINVAL) {
                /* Not a regular file (a directory, a symlink, a FIFO) is no state either: only this
                 * context starts afresh, never the whole daemon refusing to start. */
                char from[300], to[320];
                snprintf(from, sizeof from, "contexts/%s.json", c->name);
                snprintf(to, sizeof to, "contexts/%s.json.corrupt", c->name);
                (void) renameat(host->state_dirfd, from, host->state_dirfd, to);
                if (asprintf(ret_warning, "%s/%s was %s; moved to %s and started afresh (new ports and key)",
                             host->state_dir, from,
                             r == -EBADMSG || r == -EFBIG ? "corrupt"
                             : r == -EISDIR               ? "a directory, not a file"
                             : r == -ELOOP                ? "a symbolic link, not a file"
                                                          : "not a regular file",
                             to) < 0)
                        *ret_warning = NULL;
                c->st = (ContextState){ 0 };
        } else if (r < 0 && r != -ENOENT) {
                context_config_free(c->cfg);
                free(c->name);
                free(c);
                return r;
        }
        /* Where the recorded kernel listens, for adoption; a launch sets it again for the configured transport. */
        (void) connection_info_set_address(&c->st.conn, host->runtime_dir, c->name);

        r = exec_queue_new(host->loop, &context_exec_hooks, c, &c->exec);
        if (r < 0) {
                context_state_done(&c->st);
                context_config_free(c->cfg);
                free(c->name);
                free(c);
                return r;
        }
        uv_timer_init(host->loop, &c->timer);
        uv_timer_init(host->loop, &c->info_timer);
        uv_timer_init(host->loop, &c->hb_timer);
        c->timer.data = c->info_timer.data = c->hb_timer.data = c;
        context_journal_open(c);
        *ret = c;
        return 0;
}

/* Ends a process we will not adopt but must not leave running on the context's ports. */
static void end_process(pid_t pid, int pidfd) {
        if (getpgid(pid) == pid)
                (void) kill(-pid, SIGKILL);
        else
                (void) pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
        /* A pidfd turns readable when the process has exited. */
        (void) poll(&(struct pollfd){ .fd = pidfd, .events = POLLIN }, 1, 5000);
}

/* The not-adopted event: why is one word for matching (KERNELSUP_REASON=, kernelsupd(8) lists them), the
 * message says it for a person. A warning when the process had to be ended, a notice otherwise. */
_printf_(5, 6) static void log_not_adopted(Context *c, pid_t pid, bool ended, const char *why, const char *fmt, ...) {
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        log_event(ended ? LOG_WARNING : LOG_NOTICE, CONTEXT_EVENT(c, LOG_ID_KERNEL_NOT_ADOPTED, why, pid, NULL),
                  "%s: %s", c->name, msg);
}

int context_adopt(Context *c) {
        _cleanup_free_ char *err = NULL, *reason = NULL;
        _cleanup_close_ int fd = -1;
        pid_t pid = c->st.pid;
        uint64_t start;
        int r;

        if (pid <= 0)
                return 0;
        c->st.pid = 0;
        /* Another boot: that process died with it (a cold boot). */
        if (!streq(c->st.boot_id, c->host->boot_id)) {
                log_not_adopted(c, pid, false, "reboot", "kernel %s (pid %d) ran in an earlier boot; not adopted",
                                c->st.kernel_id, (int) pid);
                return 0;
        }
        fd = pidfd_open(pid, 0);
        if (fd < 0 || proc_pid_starttime(pid, &start) < 0) {
                log_not_adopted(c, pid, false, "gone", "kernel %s (pid %d) ended while no daemon ran; not adopted",
                                c->st.kernel_id, (int) pid);
                return 0;
        }
        /* A pid of this boot whose start time differs is another process now: never touch it. */
        if (start != c->st.pid_starttime) {
                log_not_adopted(c, pid, false, "pid-reused",
                                "pid %d is another process now (start time differs); not adopted", (int) pid);
                return 0;
        }
        /* Our kernels lead their own process group, and we must know their ports and key. */
        if (!c->st.has_conn || getpgid(pid) != pid) {
                end_process(pid, fd);
                log_not_adopted(c, pid, true, !c->st.has_conn ? "no-ports" : "not-group-leader",
                                "ended kernel %s (pid %d): %s", c->st.kernel_id, (int) pid,
                                !c->st.has_conn ? "its ports and key are not in the state"
                                                : "it no longer leads its process group");
                return -EPERM;
        }
        /* Like a reload, a transport changed while no daemon ran restarts the kernel: kept, a kernel on tcp
         * would stay open to every local user although the configuration now says ipc. */
        if (c->st.conn.transport != c->cfg->transport) {
                end_process(pid, fd);
                log_not_adopted(c, pid, true, "transport-changed",
                                "ended kernel %s (pid %d): it listens on %s, the configuration says transport = %s",
                                c->st.kernel_id, (int) pid, transport_to_string(c->st.conn.transport),
                                transport_to_string(c->cfg->transport));
                return -EPERM;
        }
        r = spawn_user_resolve(c->cfg->user, c->cfg->group, &c->user, &err);
        if (r < 0) {
                end_process(pid, fd);
                log_not_adopted(c, pid, true, "user", "ended kernel %s (pid %d): %s", c->st.kernel_id, (int) pid,
                                err ?: "cannot resolve its user");
                return r;
        }
        c->user_resolved = true;

        c->pid_poll = malloc(sizeof(uv_poll_t));
        if (!c->pid_poll || uv_poll_init(c->host->loop, c->pid_poll, fd) < 0) {
                free(c->pid_poll);
                c->pid_poll = NULL;
                end_process(pid, fd);
                return -ENOMEM;
        }
        c->pid = pid;
        c->st.pid = pid;
        c->pidfd = TAKE_FD(fd);
        c->pid_poll->data = c;
        uv_poll_start(c->pid_poll, UV_READABLE, context_pid_poll_cb);
        c->want_running = true;
        c->adopting = true;
        context_readiness_reset(c);
        resources_release(&c->limits);
        resources_inspect(c->cfg, pid, &c->limits);
        /* The client's file may be gone (a RuntimeDirectory without Preserve): it says the same again. */
        r = connection_file_publish(c->cfg->connection_file, &c->st.conn, &c->user, c->cfg->connection_file_published,
                                    &reason);
        if (r < 0)
                log_warning("%s: failed to rewrite %s: %s", c->name, c->cfg->connection_file, reason ?: strerror(-r));
        context_save(c);
        log_info("%s: adopting kernel %s (pid %d, incarnation %llu) left by an earlier kernelsupd", c->name,
                 c->st.kernel_id, (int) pid, (unsigned long long) c->st.incarnation);
        context_set_state(c, CONTEXT_STARTING);
        c->max_message = exec_message_bound(c->cfg->output_limit);
        r = kernel_conn_new(c->host->loop, &c->st.conn, c->max_message, &context_conn_callbacks, c, &c->conn);
        if (r < 0) {
                c->pending_error = strdup("cannot connect to the adopted kernel's ports");
                (void) kill(-pid, SIGKILL);
                return 1;
        }
        context_send_kernel_info(c);
        uv_timer_start(&c->info_timer, context_info_timer_cb, KERNEL_INFO_RESEND_MSEC, KERNEL_INFO_RESEND_MSEC);
        uv_timer_start(&c->timer, context_deadline_cb, c->cfg->start_timeout / USEC_PER_MSEC, 0);
        return 1;
}

static void context_timer_close_cb(uv_handle_t *h) {
        Context *c = h->data;

        if (--c->n_open_handles > 0)
                return;
        context_state_done(&c->st);
        spawn_user_done(&c->user);
        resources_release(&c->limits);
        free(c->cold_why);
        spawn_pending_drop(&c->release);
        context_config_free(c->cfg);
        free(c->pending_error);
        free(c->save_error);
        context_journal_close(c);
        replay_done(&c->replay);
        free(c->replay_sent);
        free(c->replay_note);
        free(c->name);
        free(c);
}

void context_free(Context *c) {
        if (!c)
                return;
        resources_end_group_cancel(c->leftovers);
        c->leftovers = NULL;
        context_launch_cancel(c);
        preload_owner_gone(c->host->preload, c);
        exec_queue_free(c->exec);
        if (c->conn)
                kernel_conn_close(c->conn);
        if (c->pid_poll)
                uv_close((uv_handle_t *) c->pid_poll, context_pid_poll_close_cb);
        if (c->pidfd >= 0)
                close(c->pidfd);
        c->n_open_handles = 3;
        uv_close((uv_handle_t *) &c->timer, context_timer_close_cb);
        uv_close((uv_handle_t *) &c->info_timer, context_timer_close_cb);
        uv_close((uv_handle_t *) &c->hb_timer, context_timer_close_cb);
}
