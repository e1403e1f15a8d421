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

/* ---- Accessors ---- */

const char *context_name(const Context *c) {
        return c->name;
}
ContextStateKind context_state(const Context *c) {
        return c->state;
}
pid_t context_pid(const Context *c) {
        return c->pid;
}
bool context_autostart(const Context *c) {
        return c->cfg->autostart;
}
const char *context_last_error(const Context *c) {
        /* A state that is not on disk matters more than why the last kernel ended (which the log keeps). */
        return c->save_error ?: c->st.last_error;
}
usec_t context_last_error_at(const Context *c) {
        return c->save_error ? c->save_error_at : c->st.last_error_at;
}

bool context_comes_back(const Context *c) {
        return c->state == CONTEXT_STOPPING && c->client_shutdown && c->want_running &&
               c->cfg->restart == RESTART_ALWAYS;
}

uid_t context_uid(const Context *c) {
        SpawnUser u;
        _cleanup_free_ char *err = NULL;
        uid_t uid;

        if (c->user_resolved)
                return c->user.uid;
        if (!c->cfg->user)
                return getuid();
        if (spawn_user_resolve(c->cfg->user, c->cfg->group, &u, &err) < 0)
                return (uid_t) -1;
        uid = u.uid;
        spawn_user_done(&u);
        return uid;
}

/* ---- State changes ---- */

void context_set_state(Context *c, ContextStateKind to) {
        if (c->state == to)
                return;
        if (!context_transition_allowed(c->state, to))
                log_error("%s: transition %s -> %s is not in the table", c->name, context_state_to_string(c->state),
                          context_state_to_string(to));
        log_debug("%s: %s -> %s", c->name, context_state_to_string(c->state), context_state_to_string(to));
        c->state = to;
        if (to == CONTEXT_STOPPED || to == CONTEXT_FAILED) {
                /* No kernel is coming soon: cells waiting for one are answered now. */
                char why[300];
                snprintf(why, sizeof why, "context %s %s%s%s", c->name, to == CONTEXT_STOPPED ? "stopped" : "failed",
                         to == CONTEXT_FAILED && c->st.last_error ? ": " : "",
                         to == CONTEXT_FAILED && c->st.last_error ? c->st.last_error : "");
                exec_queue_give_up(c->exec, why);
        }
        c->host->state_changed(c->host->userdata, c);
}

void context_set_error(Context *c, const char *msg) {
        free(c->st.last_error);
        c->st.last_error = msg ? strdup(msg) : NULL;
        c->st.last_error_at = c->st.last_error ? now_usec(CLOCK_REALTIME) : 0;
}

/* Writes st to disk. A failure is kept in save_error (status shows it as last_error, the supervisor as
 * degraded and retries on a timer); logged once per change, not at every retry. */
int context_save(Context *c) {
        int r = context_state_save(c->host->state_dirfd, c->name, &c->st);
        _cleanup_free_ char *msg = NULL;

        if (r >= 0) {
                c->conn_saved = true;
                if (!c->save_error)
                        return r;
                log_notice("%s: state saved to %s/contexts/%s.json again", c->name, c->host->state_dir, c->name);
                free(c->save_error);
                c->save_error = NULL;
                c->host->save_changed(c->host->userdata, c);
                return r;
        }
        if (asprintf(&msg, "cannot write state file %s/contexts/%s.json: %s", c->host->state_dir, c->name,
                     strerror(-r)) < 0)
                return r;
        if (!streq_ptr(msg, c->save_error)) {
                log_error("%s: %s", c->name, msg);
                free(c->save_error);
                c->save_error = TAKE_PTR(msg);
                c->save_error_at = now_usec(CLOCK_REALTIME);
                c->host->save_changed(c->host->userdata, c);
        }
        return r;
}

const char *context_save_error(const Context *c) {
        return c->save_error;
}

int context_save_retry(Context *c) {
        return c->save_error ? context_save(c) : 0;
}

static void stop_timer_cb(uv_timer_t *t);
static uint64_t stop_phase_msec(const Context *c);

void context_readiness_reset(Context *c) {
        c->got_info = c->got_iopub = false;
        c->chunking = CHUNKING_UNASKED;
        c->chunking_id[0] = '\0';
        c->quirks_sent = false;
        c->silent_ids[0][0] = c->silent_ids[1][0] = c->silent_ids[2][0] = '\0';
}

static void context_shutdown_acked(Context *c);

/* ---- Output chunking (chunking.h) ---- */

static void chunking_off(Context *c, const char *why) {
        c->chunking = CHUNKING_OFF;
        log_warning("%s: output chunking is off for kernel %s: %s (a cell that prints fast may then lose what it "
                    "printed to a dropped message)",
                    c->name, c->st.kernel_id, why);
}

/* Sends the patch; the context turns ready once it is answered (or CHUNKING_WAIT_USEC passed). */
static void chunking_start(Context *c) {
        json_t *content = chunking_request(CHUNKING_CHARS);
        char why[128];
        int r;

        r = content ? kernel_conn_send(c->conn, CHANNEL_SHELL, "execute_request", content, c->chunking_id) : -ENOMEM;
        if (r < 0) {
                c->chunking_id[0] = '\0';
                snprintf(why, sizeof why, "cannot send the request: %s", strerror(-r));
                return chunking_off(c, why);
        }
        c->chunking = CHUNKING_PENDING;
        c->chunking_sent = now_usec(CLOCK_MONOTONIC);
        memcpy(c->silent_ids[2], c->chunking_id, sizeof c->silent_ids[2]);
}

/* The reply to the request, however late: a kernel that turned ready without it may still be patched. */
static void chunking_on_reply(Context *c, const JupyterMsg *msg) {
        _cleanup_free_ char *why = NULL;
        int r = chunking_result(msg->content, &why);

        c->chunking_id[0] = '\0';
        if (r <= 0)
                return chunking_off(c, why ?: "out of memory");
        c->chunking = CHUNKING_ON;
        exec_queue_count_written(c->exec, true);
        if (c->state == CONTEXT_STARTING)
                log_debug("%s: output chunking is on for kernel %s (stream messages of at most %zu characters)",
                          c->name, c->st.kernel_id, CHUNKING_CHARS);
        else
                log_notice("%s: output chunking is on for kernel %s after all (a late answer)", c->name,
                           c->st.kernel_id);
}

static void context_check_started(Context *c);

void context_chunking_expired(Context *c) {
        char why[128], d[32];

        if (c->chunking != CHUNKING_PENDING)
                return;
        snprintf(why, sizeof why, "the kernel did not answer the request within %s",
                 format_duration(d, sizeof d, now_usec(CLOCK_MONOTONIC) - c->chunking_sent));
        chunking_off(c, why);
        context_check_started(c);
}

static const char *chunking_to_string(ChunkingState s) {
        return s == CHUNKING_ON ? "on" : s == CHUNKING_OFF ? "off" : NULL;
}

/* ---- The kernel connection ---- */

static void context_check_started(Context *c) {
        if (c->state != CONTEXT_STARTING || !c->got_info || !c->got_iopub)
                return;
        /* An IPython kernel gets its output chunked before any cell of ours runs. */
        if (c->chunking == CHUNKING_WANTED)
                chunking_start(c);
        if (c->chunking == CHUNKING_PENDING)
                return;
        /* A kernel that replaces one lost without being asked replays the journal first (restore = replay). */
        if (context_replay_begin(c))
                return;
        context_became_ready(c);
}

/* A kernel_info_reply while starting decides about output chunking. */
static void chunking_decide(Context *c, const JupyterMsg *msg) {
        if (c->chunking != CHUNKING_UNASKED)
                return;
        if (!chunking_applies(msg->content))
                c->chunking = CHUNKING_NONE;
        else if (c->cfg->output_chunking)
                c->chunking = CHUNKING_WANTED;
        else
                chunking_off(c, "output_chunking = no");
}

/* Sends one silent request of quirks.h before any cell; its id is kept in c->silent_ids[slot], so that the journal
 * knows it for the daemon's own. */
static void quirk_send(Context *c, const char *code, size_t slot, const char *what, const char *done) {
        json_t *content = quirks_silent_request(code);
        int r = content ? kernel_conn_send(c->conn, CHANNEL_SHELL, "execute_request", content, c->silent_ids[slot])
                        : -ENOMEM;

        if (r < 0) {
                c->silent_ids[slot][0] = '\0';
                log_warning("%s: kernel %s: cannot ask it to %s (%s)", c->name, c->st.kernel_id, what, strerror(-r));
        } else
                log_debug("%s: kernel %s: %s", c->name, c->st.kernel_id, done);
}

/* Once, before any cell: a kernel whose own SIGINT handler would end it gets Python's back; an IPython kernel is
 * told to stay when a cell calls exit() (quirks.h). */
static void quirks_fix(Context *c, const JupyterMsg *msg) {
        const char *sigint = quirks_sigint_code(msg->content), *keep = quirks_keepkernel_code(msg->content);

        if (c->quirks_sent || !c->conn)
                return;
        if (sigint)
                quirk_send(c, sigint, 0, "keep its namespace on SIGINT; an interrupt may end it",
                           "SIGINT given back to Python (its own handler exits)");
        if (keep)
                quirk_send(c, keep, 1, "stay when a cell calls exit(); such a cell may end it",
                           "exit() and quit() keep the kernel (keepkernel_on_exit)");
        c->quirks_sent = true;
}

static void conn_on_reply(KernelConn *conn, Channel channel, const JupyterMsg *msg, void *userdata) {
        Context *c = userdata;
        const char *type = jupyter_msg_type(msg);

        exec_queue_on_reply(c->exec, channel, msg);
        if (channel == CHANNEL_SHELL && context_replay_on_reply(c, msg))
                return;
        if (channel == CHANNEL_SHELL && streq(type, "kernel_info_reply")) {
                quirks_fix(c, msg);
                chunking_decide(c, msg);
                c->got_info = true;
                context_check_started(c);
        } else if (channel == CHANNEL_SHELL && c->chunking_id[0] &&
                   streq(jupyter_msg_parent_id(msg), c->chunking_id) && streq(type, "execute_reply")) {
                chunking_on_reply(c, msg);
                context_check_started(c);
        } else if (streq(type, "shutdown_reply"))
                context_shutdown_acked(c);
}

static void conn_on_iopub(KernelConn *conn, const JupyterMsg *msg, void *userdata) {
        Context *c = userdata;

        context_journal_on_iopub(c, msg);
        exec_queue_on_iopub(c->exec, msg);
        c->got_iopub = true;
        context_check_started(c);
        /* ipykernel broadcasts its shutdown_reply to every client: someone else asked it to go. */
        if (streq(jupyter_msg_type(msg), "shutdown_reply"))
                context_shutdown_acked(c);
}

/* The kernel answered after messages on some of its connections were lost: it is alive, so they were lost for a
 * message over the bound (or a connection broke), which is worth a warning. One that is dying (its exit is not handled
 * yet but its pidfd says so) closed them by exiting. */
static void dropped_say(Context *c) {
        struct pollfd pfd = { .fd = c->pidfd, .events = POLLIN };

        if (!c->dropped_unsaid || (c->pidfd >= 0 && poll(&pfd, 1, 0) > 0))
                return;
        for (Channel ch = 0; ch < _CHANNEL_MAX; ch++)
                if (c->dropped_unsaid & (1u << ch))
                        log_warning("%s: a message on the kernel's %s connection was lost (one of more than %zu "
                                    "bytes, read past, or the connection broke and was made again)",
                                    c->name, channel_to_string(ch), c->max_message);
        c->dropped_unsaid = 0;
}

static void conn_on_hb(KernelConn *conn, void *userdata) {
        Context *c = userdata;

        dropped_say(c);
        c->hb_answered_at = now_usec(CLOCK_MONOTONIC);
        c->hb_outstanding = false;
        c->hb_missed = 0;
        c->hb_answers++;
        if (c->state == CONTEXT_UNRESPONSIVE) {
                log_notice("%s: kernel %s answers its heartbeat again", c->name, c->st.kernel_id);
                context_set_state(c, exec_queue_busy(c->exec) ? CONTEXT_BUSY : CONTEXT_READY);
        }
        c->host->heartbeat(c->host->userdata, c);
}

/* A message of the kernel was lost, over the bound or with a broken connection:
 * the running cell is told, and the queue makes sure of the kernel's state. */
static void conn_on_dropped(KernelConn *conn, Channel channel, void *userdata) {
        Context *c = userdata;

        /* A kernel that exits closes them all, also one killed while it should be running: the warning waits
         * until the kernel answers its heartbeat again (dropped_say), and its exit forgets it. */
        log_debug("%s: a message on the kernel's %s connection was lost", c->name, channel_to_string(channel));
        if (c->state != CONTEXT_STOPPING)
                c->dropped_unsaid |= 1u << channel;
        if (channel == CHANNEL_IOPUB && c->state != CONTEXT_STOPPING)
                context_journal_on_dropped(c);
        exec_queue_on_dropped(c->exec, channel, c->max_message);
}

static void conn_on_input_request(KernelConn *conn, const JupyterMsg *msg, void *userdata) {
        Context *c = userdata;

        exec_queue_on_input_request(c->exec, msg);
}

/* An iopub message that could not be read: a cell's may be among them. */
static void conn_on_unreadable(KernelConn *conn, Channel channel, void *userdata) {
        if (channel == CHANNEL_IOPUB)
                context_journal_on_unreadable(userdata);
}

const KernelConnCallbacks context_conn_callbacks = {
        .on_reply = conn_on_reply,
        .on_unreadable = conn_on_unreadable,
        .on_iopub = conn_on_iopub,
        .on_hb = conn_on_hb,
        .on_dropped = conn_on_dropped,
        .on_input_request = conn_on_input_request,
};

/* ---- Cells ---- */

/* ipykernel interrupts this way itself: SIGINT to its process group, so a
 * cell's children are interrupted with it; the namespace stays. A kernelspec with
 * interrupt_mode "message" asks for an interrupt_request on control instead. */
static void exec_hook_interrupt(void *userdata) {
        Context *c = userdata;

        if (c->cfg->interrupt_mode == INTERRUPT_MESSAGE) {
                if (c->conn)
                        (void) kernel_conn_send(c->conn, CHANNEL_CONTROL, "interrupt_request", json_object(), NULL);
        } else if (c->pid > 0 && quirks_interrupt_resets(c->cfg->argv)) {
                /* ijavascript answers any SIGINT by starting an empty session inside the same process: the
                 * namespace is gone whatever is signalled. A new kernel says so (check --expect: 8) where the
                 * same pid would vouch for a namespace that is not there. */
                log_notice("%s: kernel %s: an interrupt empties ijavascript's namespace; restarting it instead, so "
                           "that the kernel_id changes with the namespace",
                           c->name, c->st.kernel_id);
                context_restart(c);
        } else if (c->pid > 0)
                (void) kill(-c->pid, SIGINT);
}

static void context_enter_stopping(Context *c, bool ask);

/* A cell's kill_after: its kernel did not leave it after an interrupt. Killed now, and a new one starts, empty
 * (restore = replay would rebuild the namespace the cell is told is gone). Not while a stop is under way: a stop,
 * a removal or the daemon's exit asked for no new kernel, and ends this one itself. */
static bool exec_hook_kill(void *userdata, const char *why) {
        Context *c = userdata;

        if (c->pid <= 0 || c->state == CONTEXT_STOPPING)
                return false;
        log_warning("%s: kernel %s: %s", c->name, c->st.kernel_id, why);
        context_journal_forget(c, "killed (kill_after)");
        c->want_running = true;
        c->restart_pending = true;
        context_enter_stopping(c, false);
        uv_timer_stop(&c->timer);
        (void) kill(-c->pid, SIGKILL);
        c->stop_phase = 2;
        return true;
}

static void exec_hook_busy(void *userdata, bool busy) {
        Context *c = userdata;

        if (busy && c->state == CONTEXT_READY)
                context_set_state(c, CONTEXT_BUSY);
        else if (!busy && c->state == CONTEXT_BUSY)
                context_set_state(c, CONTEXT_READY);
}

/* A cell of ours called exit(): never journaled; a kernel that does not stay (quirks.h) is about to end as if a
 * client had shut it down, and the next kernel starts empty. */
static void exec_hook_exit_asked(void *userdata, const char *msg_id, bool kept) {
        Context *c = userdata;

        context_journal_drop(c, msg_id);
        if (kept) {
                log_info("%s: a cell called exit(); kernel %s and its namespace are kept (a supervised kernel is not "
                         "a cell's to end)",
                         c->name, c->st.kernel_id);
                return;
        }
        c->exit_cell = true;
        context_shutdown_acked(c);
}

static usec_t exec_hook_unresponsive_for(void *userdata) {
        Context *c = userdata;
        usec_t now = now_usec(CLOCK_MONOTONIC);

        if (c->state != CONTEXT_UNRESPONSIVE)
                return 0;
        return now > c->hb_answered_at ? now - c->hb_answered_at : 1;
}

const ExecHooks context_exec_hooks = {
        .interrupt = exec_hook_interrupt,
        .kill = exec_hook_kill,
        .unresponsive_for = exec_hook_unresponsive_for,
        .busy = exec_hook_busy,
        .exit_asked = exec_hook_exit_asked,
};

ExecQueue *context_exec(Context *c) {
        return c->exec;
}

const ContextConfig *context_config(const Context *c) {
        return c->cfg;
}

int context_set_config(Context *c, const ContextConfig *cc) {
        ContextConfig *d = context_config_dup(cc);

        if (!d)
                return -ENOMEM;
        /* The user is resolved again at the next launch: it may have changed. */
        if (!streq_ptr(c->cfg->user, d->user) || !streq_ptr(c->cfg->group, d->group)) {
                spawn_user_done(&c->user);
                c->user_resolved = false;
        }
        ContextConfig *was = c->cfg;

        c->cfg = d;
        context_journal_config_changed(c, was);
        context_config_free(was);
        /* A new heartbeat period applies from now. */
        if (uv_is_active((uv_handle_t *) &c->hb_timer))
                context_hb_start(c);
        return 0;
}

bool context_ports(const Context *c, uint16_t ret[_CHANNEL_MAX]) {
        /* An ipc kernel's "ports" only number its socket paths. */
        if (!c->st.has_conn || c->st.conn.transport != TRANSPORT_TCP)
                return false;
        memcpy(ret, c->st.conn.ports, sizeof c->st.conn.ports);
        return true;
}

/* The published connection file goes with the user's rights, as it was written (connfile.h); one in the
 * daemon's own directory with the daemon's. */
static int context_unpublish(Context *c, char **ret_reason) {
        SpawnUser u = {};
        _cleanup_free_ char *err = NULL;
        bool own = c->cfg->connection_file_published;
        int r;

        if (own || c->user_resolved)
                return user_file_remove(c->cfg->connection_file, own ? NULL : &c->user, ret_reason);
        r = spawn_user_resolve(c->cfg->user, c->cfg->group, &u, &err);
        if (r < 0) {
                if (asprintf(ret_reason, "%s", err ?: "cannot resolve its user") < 0)
                        *ret_reason = NULL;
                return r;
        }
        r = user_file_remove(c->cfg->connection_file, &u, ret_reason);
        spawn_user_done(&u);
        return r;
}

int context_forget(Context *c, bool keep_connection_file) {
        _cleanup_free_ char *failed = NULL, *reason = NULL;
        int r;

        r = context_remove_private_files(c, true, &failed);
        if (r < 0)
                log_warning_errno(r, "%s: failed to remove %s: %m", c->name, failed ?: "its runtime files");
        if (!keep_connection_file) {
                r = context_unpublish(c, &reason);
                if (r < 0)
                        log_warning("%s: failed to remove its connection file %s: %s", c->name,
                                    c->cfg->connection_file, reason ?: strerror(-r));
        }
        context_journal_close(c);
        r = journal_remove(c->host->state_dirfd, c->name);
        if (r < 0)
                log_warning("%s: failed to remove its cell journal: %s", c->name, strerror(-r));
        return context_state_remove(c->host->state_dirfd, c->name);
}

void context_resumed(Context *c) {
        /* The deadlines restart from now: the frozen time was nobody's fault. */
        c->hb_missed = 0;
        c->hb_outstanding = false;
        c->hb_answered_at = now_usec(CLOCK_MONOTONIC);
        if (c->state == CONTEXT_STARTING)
                uv_timer_start(&c->timer, context_deadline_cb, c->cfg->start_timeout / USEC_PER_MSEC, 0);
        else if (c->state == CONTEXT_STOPPING && c->stop_phase < 2)
                uv_timer_start(&c->timer, stop_timer_cb, stop_phase_msec(c), 0);
        else if (c->state == CONTEXT_UNRESPONSIVE)
                c->unresponsive_since = now_usec(CLOCK_MONOTONIC);
}

void context_send_kernel_info(Context *c) {
        int r = kernel_conn_send(c->conn, CHANNEL_SHELL, "kernel_info_request", json_object(), NULL);

        if (r < 0)
                log_warning_errno(r, "%s: failed to send kernel_info_request: %m", c->name);
}

void context_info_timer_cb(uv_timer_t *t) {
        Context *c = t->data;

        if (c->state == CONTEXT_STARTING && c->conn && c->chunking == CHUNKING_PENDING) {
                if (now_usec(CLOCK_MONOTONIC) - c->chunking_sent >= CHUNKING_WAIT_USEC)
                        context_chunking_expired(c);
        } else if (c->state == CONTEXT_STARTING && c->conn) {
                /* Once the kernel has answered, only the iopub subscription is missing:
                 * each request makes it publish again. */
                context_send_kernel_info(c);
        } else if (c->state == CONTEXT_READY || c->state == CONTEXT_BUSY) {
                /* Ready long enough: the next failure starts the backoff from the beginning. */
                c->failures = 0;
                uv_timer_stop(t);
        }
}

void context_became_ready(Context *c) {
        char d[32];

        uv_timer_stop(&c->timer);
        uv_timer_stop(&c->info_timer);
        uv_timer_start(&c->info_timer, context_info_timer_cb, c->cfg->backoff_reset / USEC_PER_MSEC, 0);
        /* last_error keeps the last failure (status shows it beside last_exit) unless this launch has a note. */
        if (c->pending_error) {
                context_set_error(c, c->pending_error);
                free(c->pending_error);
                c->pending_error = NULL;
        }
        context_save(c);
        if (c->adopting)
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_ADOPTED, "adopted", c->pid, NULL),
                          "%s: adopted kernel %s (pid %d, incarnation %llu): it answers, its namespace is kept",
                          c->name, c->st.kernel_id, (int) c->pid, (unsigned long long) c->st.incarnation);
        else
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_READY, "ready", c->pid, NULL),
                          "%s: kernel %s ready (pid %d, incarnation %llu, %s after launch)", c->name, c->st.kernel_id,
                          (int) c->pid, (unsigned long long) c->st.incarnation,
                          format_duration(d, sizeof d, now_usec(CLOCK_REALTIME) - c->st.started_at));
        c->adopting = false;
        start_limit_ready(&c->limit);
        context_hb_start(c);
        context_set_state(c, CONTEXT_READY);
        /* Last: a cell that died with the previous kernel is answered now, naming this one. */
        exec_queue_count_written(c->exec, c->chunking == CHUNKING_ON);
        exec_queue_attach(c->exec, c->conn, c->st.kernel_id);
}

/* ---- Stop ---- */

/* How long the current stop phase lasts. After shutdown_request, SIGTERM follows within shutdown_grace: the
 * kernel's own exit comes ~0.1 s after its reply, ipykernel now and then ignores the request, and the namespace
 * is being discarded anyway. SIGKILL follows at stop_timeout, counted from the request. */
static uint64_t stop_phase_msec(const Context *c) {
        usec_t grace = c->cfg->shutdown_grace < c->cfg->stop_timeout ? c->cfg->shutdown_grace : c->cfg->stop_timeout;

        return (c->stop_phase == 0 ? grace : c->cfg->stop_timeout - grace) / USEC_PER_MSEC;
}

static void stop_timer_cb(uv_timer_t *t) {
        Context *c = t->data;

        if (c->state != CONTEXT_STOPPING || c->pid <= 0)
                return;
        if (c->host->clock_check(c->host->userdata))
                return;
        if (c->stop_phase == 0) {
                char d[32];
                log_info("%s: kernel did not stop within shutdown_grace (%s) of %s; sending SIGTERM", c->name,
                         format_duration(d, sizeof d, c->cfg->shutdown_grace),
                         c->client_shutdown ? "its shutdown_reply to a client" : "shutdown_request");
                (void) kill(-c->pid, SIGTERM);
                /* A stopped process acts on SIGTERM only once it runs again. */
                (void) kill(-c->pid, SIGCONT);
                c->stop_phase = 1;
                uv_timer_start(&c->timer, stop_timer_cb, stop_phase_msec(c), 0);
        } else {
                log_warning("%s: kernel did not stop within stop_timeout; sending SIGKILL", c->name);
                (void) kill(-c->pid, SIGKILL);
                c->stop_phase = 2;
        }
}

/* Moves a running kernel to stopping: with ask, a shutdown_request goes to a kernel that can answer it (a kernel
 * still starting gets SIGTERM at once instead); without, the kernel has acknowledged one already. Either way
 * SIGTERM follows after shutdown_grace, SIGKILL at stop_timeout. */
static void context_enter_stopping(Context *c, bool ask) {
        bool starting = c->state == CONTEXT_STARTING;

        uv_timer_stop(&c->timer);
        uv_timer_stop(&c->info_timer);
        uv_timer_stop(&c->hb_timer);
        c->stop_phase = 0;
        context_set_state(c, CONTEXT_STOPPING);
        if (ask && c->conn && !starting)
                (void) kernel_conn_send(c->conn, CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0),
                                        NULL);
        if (ask && (!c->conn || starting)) {
                (void) kill(-c->pid, SIGTERM);
                (void) kill(-c->pid, SIGCONT);
                c->stop_phase = 1;
        }
        uv_timer_start(&c->timer, stop_timer_cb, stop_phase_msec(c), 0);
}

/* The kernel said it is shutting down (its shutdown_reply to a client, seen on iopub, or on control): it is
 * about to exit. It is stopping now, so no cell is handed to it; one that does not exit is ended as a stop
 * ends it. What follows its exit is context_after_exit()'s: a restart, after the backoff. */
static void context_shutdown_acked(Context *c) {
        if (c->state != CONTEXT_READY && c->state != CONTEXT_BUSY && c->state != CONTEXT_UNRESPONSIVE) {
                c->exit_cell = false;
                return;
        }
        log_info("%s: kernel %s %s; it should exit now", c->name, c->st.kernel_id,
                 c->exit_cell ? "is ending: a cell called exit() (it does not keep its kernel)"
                              : "acknowledged a client's shutdown_request");
        c->client_shutdown = true;
        context_enter_stopping(c, false);
}

static void context_begin_stop(Context *c) {
        switch (c->state) {
        case CONTEXT_RESTORING:
                context_replay_abandon(c);
                context_enter_stopping(c, true);
                break;
        case CONTEXT_STARTING:
                /* No process yet: its launcher's answer is awaited. Dropped, no kernel follows. */
                if (c->pid <= 0) {
                        context_launch_cancel(c);
                        context_set_state(c, CONTEXT_STOPPED);
                        break;
                }
                context_enter_stopping(c, true);
                break;
        case CONTEXT_READY:
        case CONTEXT_BUSY:
        case CONTEXT_UNRESPONSIVE:
                context_enter_stopping(c, true);
                break;
        case CONTEXT_BACKOFF:
        case CONTEXT_FAILED:
                uv_timer_stop(&c->timer);
                context_set_state(c, CONTEXT_STOPPED);
                break;
        default:
                break;
        }
}

void context_start(Context *c) {
        c->want_running = true;
        if (c->state == CONTEXT_STOPPED || c->state == CONTEXT_BACKOFF || c->state == CONTEXT_FAILED) {
                if (c->state == CONTEXT_FAILED)
                        start_limit_reset(&c->limit);
                c->failures = 0;
                context_launch(c);
        } else if (c->state == CONTEXT_STOPPING)
                c->restart_pending = true;
}

void context_stop(Context *c) {
        c->want_running = false;
        c->launch_deferred = false;
        c->restart_pending = false;
        context_begin_stop(c);
        /* What its user's launcher runs is ended with the last of that user's contexts a stop asked for. */
        preload_owner_gone(c->host->preload, c);
}

void context_restart(Context *c) {
        c->want_running = true;
        /* A launch waiting for its launcher's answer (made with the settings before a reload, maybe) starts over. */
        if (c->state == CONTEXT_STARTING && c->pid <= 0 && c->pl_answer) {
                context_launch_cancel(c);
                context_launch(c);
                return;
        }
        if (c->pid > 0) {
                c->restart_pending = true;
                if (c->state != CONTEXT_STOPPING)
                        context_begin_stop(c);
        } else
                context_start(c);
}

/* ---- Status ---- */

/* How the last kernel ended, as the status tells it. */
static ReplyExit exit_reply(const ExitInfo *e) {
        if (!e->valid)
                return (ReplyExit){};
        return (ReplyExit){
                .valid = true,
                .code = e->signal || e->unknown ? -1 : e->code,
                .signal = e->signal,
                .oom = e->oom,
                /* One word for scripts; oom-kill only when the memory cgroup said so. */
                .reason = kernel_death_to_string(exit_info_death(e)),
                .at = e->at,
        };
}

void context_reply(const Context *c, ReplyContext *ret) {
        bool running = c->pid > 0;
        usec_t now = now_usec(CLOCK_REALTIME);
        /* A running kernel's own, which differs from the setting only while a reload restarts it. */
        Transport transport = running && c->st.has_conn ? c->st.conn.transport : c->cfg->transport;

        *ret = (ReplyContext){
                .name = c->name,
                .state = context_state_to_string(c->state),
                .pid = running ? c->pid : 0,
                .kernel_id = c->st.kernel_id[0] ? c->st.kernel_id : NULL,
                .incarnation = (long long) c->st.incarnation,
                .restarts = (long long) c->st.restarts,
                .started_at = running ? c->st.started_at : 0,
                .uptime = running && now >= c->st.started_at ? (double) (now - c->st.started_at) / 1e6 : -1,
                .connection_file = c->cfg->connection_file,
                .last_exit = exit_reply(&c->st.last_exit),
                .last_error = context_last_error(c),
                .last_error_at = context_last_error_at(c),
                .execution_count = exec_queue_execution_count(c->exec),
                .last_activity = exec_queue_last_activity(c->exec),
                .queued = (long long) exec_queue_pending(c->exec),
                .transport = transport_to_string(transport),
                .transport_note = transport == TRANSPORT_TCP ? TCP_NOTE : NULL,
                .transport_why = c->cfg->transport_why,
                /* Whose cell the kernel runs: "ours" (exec through the daemon) or "other" (another client's). */
                .running = c->state == CONTEXT_BUSY ? exec_queue_running(c->exec) : NULL,
                .output_chunking = running ? chunking_to_string(c->chunking) : NULL,
                /* Which way the running kernel was started, and why not preloaded (unknown for an adopted cold one).
                 */
                .started = running ? (c->st.preloaded ? "preloaded" : "cold") : NULL,
                .start_note = running ? c->cold_why : NULL,
                .kernel = c->cfg->kernel,
                .cwd = c->cfg->cwd,
                .language = c->cfg->language,
                .interrupt_mode = interrupt_mode_to_string(c->cfg->interrupt_mode),
        };
        /* A cell of ours that an interrupt has not ended yet, and when its kill_after kills the kernel. */
        ret->interrupted_at = exec_queue_interrupted_at(c->exec, &ret->kill_at);
        resources_reply(c->cfg, &c->limits, &ret->limits);
        context_replay_reply(c, ret);
}

json_t *context_to_json(const Context *c) {
        ReplyContext r;
        json_t *j = NULL;

        context_reply(c, &r);
        return reply_context_encode(&r, &j) < 0 ? NULL : j;
}
