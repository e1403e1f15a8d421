/* restore = replay: a context journals its current kernel's cells (journal.h) from iopub, whoever ran them, and
 * replays them (replay.h) into a kernel that replaces one lost without being asked, before it turns ready.
 *
 * Whether a launched kernel owes a replay is the journal's to say, so that it holds across a daemon crash and a
 * reboot: the journal names the kernels whose namespace its cells rebuild (journal_add_kernel). Every way of asking
 * a kernel to go (restart, stop, removal, a client's shutdown_request, a change of process settings) empties the
 * journal and those names (context_journal_forget); a kernel launched then starts a fresh journal under its own
 * name. A kernel launched while the journal still names a kernel replaces one that was lost: it replays. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"

static void journal_warn(Context *c, int r, const char *what) {
        log_warning("%s: the cell journal %s: %s; a lost kernel's namespace cannot be rebuilt until an explicit "
                    "restart",
                    c->name, what, strerror(-r));
}

static void outside_clear(Context *c) {
        for (size_t i = 0; i < c->n_outside; i++)
                journal_entry_done(&c->outside[i].entry);
        free(c->outside);
        c->outside = NULL;
        c->n_outside = 0;
}

static void pending_clear(Context *c) {
        for (size_t i = 0; i < JOURNAL_PENDING_MAX; i++) {
                journal_entry_done(&c->pending[i].entry);
                free(c->pending[i].msg_id);
                c->pending[i].msg_id = NULL;
        }
        outside_clear(c);
        free(c->last_journaled);
        c->last_journaled = NULL;
}

/* The journal can no longer promise a rebuild: what was lost, said once. */
static void journal_lost(Context *c, const char *what) {
        if (!c->journal || c->journal->incomplete)
                return;
        log_warning("%s: %s: the cell journal is incomplete until the next explicit restart", c->name, what);
        journal_set_incomplete(c->journal);
}

static void replay_note_update(Context *c) {
        free(c->replay_note);
        c->replay_note = replay_describe(&c->replay);
}

void context_journal_close(Context *c) {
        c->journal = journal_free(c->journal);
        free(c->journal_error);
        c->journal_error = NULL;
        pending_clear(c);
}

void context_journal_open(Context *c) {
        int r;

        context_journal_close(c);
        if (c->cfg->restore != RESTORE_REPLAY) {
                /* A journal left by restore = replay must not rebuild anything once replay is asked for again. */
                r = journal_remove(c->host->state_dirfd, c->name);
                if (r < 0)
                        log_warning("%s: cannot remove the cell journal of restore = replay: %s", c->name,
                                    strerror(-r));
                return;
        }
        r = journal_open(c->host->state_dirfd, c->name, c->cfg->journal_max, &c->journal);
        if (r < 0) {
                if (asprintf(&c->journal_error, "cannot open %s/%s/%s.journal: %s", c->host->state_dir, JOURNAL_DIR,
                             c->name, strerror(-r)) < 0)
                        c->journal_error = NULL;
                log_warning("%s: %s; restore = replay cannot rebuild a lost kernel", c->name,
                            c->journal_error ?: "cannot open the cell journal");
                return;
        }
        if (c->journal->cut > 0) {
                /* A torn tail is a cell that ran but whose append did not finish: the cells kept miss it. */
                log_warning("%s: the cell journal had a torn or corrupt tail: %llu bytes cut off, %zu cells kept; "
                            "the journal is incomplete",
                            c->name, (unsigned long long) c->journal->cut, c->journal->n);
                journal_set_incomplete(c->journal);
        }
}

void context_journal_config_changed(Context *c, const ContextConfig *was) {
        if (was->restore == c->cfg->restore) {
                if (c->journal)
                        c->journal->max = c->cfg->journal_max;
                return;
        }
        context_journal_open(c);
        /* The running kernel ran cells that were not journaled: it is no kernel the journal rebuilds. */
        if (c->journal && c->pid > 0)
                context_journal_forget(c, "restore = replay set while the kernel ran");
}

void context_journal_forget(Context *c, const char *why) {
        int r;

        pending_clear(c);
        c->replay_owed = false;
        c->replay_deaths = 0;
        c->replay_ended = 0;
        replay_done(&c->replay);
        replay_note_update(c);
        if (!c->journal)
                return;
        r = journal_rewrite(c->journal, 0, NULL);
        if (r < 0)
                journal_warn(c, r, "cannot be emptied");
        else if (why)
                log_debug("%s: cell journal emptied (%s)", c->name, why);
}

/* ---- Journaling from iopub ---- */

/* Whether a cell that ends now waits for the replay to go in at its place: the kernel is restoring, or owes a
 * replay it has not begun (such a cell ran before every replayed one). */
static bool journal_holding(const Context *c) {
        return c->state == CONTEXT_RESTORING || (c->replay_owed && c->state == CONTEXT_STARTING);
}

static PendingCell *pending_find(Context *c, const char *msg_id) {
        for (size_t i = 0; i < JOURNAL_PENDING_MAX; i++)
                if (streq_ptr(c->pending[i].msg_id, msg_id))
                        return &c->pending[i];
        return NULL;
}

/* execute_input: a cell started. The oldest pending cell gives way when all slots are taken (its idle is lost). */
static void pending_add(Context *c, const JupyterMsg *msg) {
        const json_t *code = json_object_get(msg->content, "code");
        const char *session = json_string_value(json_object_get(msg->parent_header, "session")) ?: "";
        PendingCell *p = &c->pending[0];

        if (!json_is_string(code))
                return;
        for (size_t i = 0; i < JOURNAL_PENDING_MAX; i++)
                if (!c->pending[i].msg_id || c->pending[i].entry.at < p->entry.at) {
                        p = &c->pending[i];
                        if (!p->msg_id)
                                break;
                }
        journal_entry_done(&p->entry);
        free(p->msg_id);
        p->entry = (JournalEntry){
                .at = now_usec(CLOCK_REALTIME),
                .outcome = CELL_OK,
                .client = strdup(session),
                .code = malloc(json_string_length(code) + 1),
                .code_len = json_string_length(code),
        };
        p->msg_id = strdup(jupyter_msg_parent_id(msg));
        p->drop = false;
        p->held = journal_holding(c);
        p->at = c->replay_owed ? 0 : c->replay_inputs;
        if (!p->entry.client || !p->entry.code || !p->msg_id) {
                journal_entry_done(&p->entry);
                free(p->msg_id);
                p->msg_id = NULL;
                journal_warn(c, -ENOMEM, "lost a cell");
                journal_set_incomplete(c->journal);
                return;
        }
        memcpy(p->entry.code, json_string_value(code), p->entry.code_len + 1);
}

/* Another client's cell that ended during the replay waits for the replay's end to go in at its place. */
static void outside_hold(Context *c, PendingCell *p) {
        OutsideCell *o = c->n_outside < OUTSIDE_MAX ? reallocarray(c->outside, c->n_outside + 1, sizeof *o) : NULL;

        if (!o) {
                journal_entry_done(&p->entry);
                return journal_lost(c, "too many cells of other clients ran during the replay");
        }
        c->outside = o;
        o[c->n_outside++] = (OutsideCell){ .entry = p->entry, .at = p->at };
        p->entry = (JournalEntry){};
}

/* The cell ended (its idle): journaled with its outcome. */
static void pending_end(Context *c, PendingCell *p) {
        bool hold = p->held && journal_holding(c);
        int r = 0;

        /* A cell that ran to its end after the replay: the kernel survived it. */
        if (!journal_holding(c)) {
                c->replay_ended = 0;
                c->replay_deaths = 0;
        }
        if (hold && !p->drop)
                outside_hold(c, p);
        else if (!p->drop)
                r = journal_append(c->journal, &p->entry);
        if (r == -EFBIG)
                log_warning(
                        "%s: the cell journal reached journal_max (%zu bytes): replay is incomplete until the next "
                        "explicit restart",
                        c->name, c->cfg->journal_max);
        else if (r < 0 && r != -ESTALE)
                journal_warn(c, r, "cannot be written");
        journal_entry_done(&p->entry);
        free(c->last_journaled);
        c->last_journaled = !p->drop && !hold && r >= 0 ? TAKE_PTR(p->msg_id) : NULL;
        free(p->msg_id);
        p->msg_id = NULL;
}

void context_journal_drop(Context *c, const char *msg_id) {
        PendingCell *p = pending_find(c, msg_id);
        int r;

        if (p) {
                p->drop = true;
                return;
        }
        if (!c->journal || !c->last_journaled || !streq(c->last_journaled, msg_id) || c->journal->n == 0)
                return;
        r = journal_rewrite_insert(c->journal, c->journal->n - 1, NULL, NULL, 0);
        if (r < 0)
                journal_warn(c, r, "cannot take out a cell that called exit()");
        free(c->last_journaled);
        c->last_journaled = NULL;
}

static void journal_check_dropped(Context *c) {
        if (!c->iopub_dropped)
                return;
        c->iopub_dropped = false;
        journal_lost(c, "iopub messages were lost");
}

/* Whether msg_id is an execute_request the last replay sent. */
static bool replay_sent_has(const Context *c, const char *msg_id) {
        for (size_t i = 0; i < c->n_replay_sent; i++)
                if (streq(c->replay_sent[i], msg_id))
                        return true;
        return false;
}

/* Whether msg_id is a request of the daemon's: a replayed cell, a silent request of its own, a cell of exec's. */
static bool request_is_own(const Context *c, const char *msg_id) {
        for (size_t i = 0; i < ELEMENTSOF(c->silent_ids); i++)
                if (streq(c->silent_ids[i], msg_id))
                        return true;
        return replay_sent_has(c, msg_id) || exec_queue_owns(c->exec, msg_id);
}

/* The idle of an execute_request no execute_input announced: a silent cell of another client (or one the kernel
 * aborted unrun, or one whose execute_input was lost). It ran, or may have, and the journal does not have it. */
static void journal_on_unseen(Context *c, const JupyterMsg *msg) {
        const char *parent = jupyter_msg_parent_id(msg);

        if (!streq_ptr(json_string_value(json_object_get(msg->parent_header, "msg_type")), "execute_request") ||
            request_is_own(c, parent))
                return;
        journal_lost(c, "a cell ran that announced no execute_input (a silent execute_request of another client)");
}

void context_journal_on_iopub(Context *c, const JupyterMsg *msg) {
        const char *type = jupyter_msg_type(msg), *parent = jupyter_msg_parent_id(msg);
        PendingCell *p;
        bool idle;

        journal_check_dropped(c);
        if (!c->journal || !parent[0])
                return;
        /* The replayed cells are in the journal already, also one whose execute_input comes after its reply; iopub
         * keeps the kernel's order, so their count places another client's cells among them. */
        if (streq(type, "execute_input") && replay_sent_has(c, parent)) {
                c->replay_inputs++;
                return;
        }
        if (streq(type, "execute_input")) {
                pending_add(c, msg);
                return;
        }
        idle = streq(type, "status") &&
               streq_ptr(json_string_value(json_object_get(msg->content, "execution_state")), "idle");
        p = pending_find(c, parent);
        if (!p && idle)
                journal_on_unseen(c, msg);
        if (!p)
                return;
        if (streq(type, "error"))
                p->entry.outcome = CELL_ERROR;
        else if (idle)
                pending_end(c, p);
}

/* A kernel that dies drops every connection too: only one heard from again lost messages. */
void context_journal_on_dropped(Context *c) {
        c->iopub_dropped = true;
}

void context_journal_on_unreadable(Context *c) {
        journal_lost(c, "an iopub message could not be read (its header, or its signature)");
}

/* ---- Replay ---- */

void context_replay_launched(Context *c) {
        int r;

        c->replay_owed = false;
        c->iopub_dropped = false;
        pending_clear(c);
        if (!c->journal)
                return;
        if (c->journal->n_kernels > 0) {
                /* The journal still names a kernel: the one before was lost without being asked to go. */
                c->replay_owed = true;
                return;
        }
        r = journal_rewrite(c->journal, 0, c->st.kernel_id);
        if (r < 0)
                journal_warn(c, r, "cannot be started");
}

/* A journal written by an older kernelsup (or edited) may hold code that is not UTF-8, which JSON cannot carry:
 * it is sent with U+FFFD in place of each bad unit, as the kernel would have read it from any other client. */
static int entry_code_repair(JournalEntry *e) {
        char *fixed = NULL;
        size_t len;
        int r = utf8_repair(e->code, e->code_len, &fixed, &len);

        if (r <= 0)
                return r;
        free(e->code);
        e->code = fixed;
        e->code_len = len;
        return 0;
}

/* Sends the cell the replay is at; false when it cannot (the replay then stopped). */
static bool replay_send(Context *c) {
        _cleanup_(journal_entry_done) JournalEntry e = {};
        json_t *content;
        size_t at;
        char why[160];
        int r;

        if (!replay_current(&c->replay, &at))
                return false;
        r = journal_read(c->journal, at, &e);
        if (r >= 0)
                r = entry_code_repair(&e);
        content = r < 0 ? NULL
                        : json_pack("{s:s%,s:b,s:b,s:{},s:b,s:b}", "code", e.code, e.code_len, "silent", 0,
                                    "store_history", 1, "user_expressions", "allow_stdin", 0, "stop_on_error", 1);
        r = r < 0     ? r
            : content ? kernel_conn_send(c->conn, CHANNEL_SHELL, "execute_request", content, c->replay_msg_id)
                      : -ENOMEM;
        if (r >= 0) {
                /* One a journaled cell: bounded by the journal. Where it cannot be kept, the cell may be journaled
                 * twice, so the journal no longer promises a rebuild. */
                char(*sent)[37] = reallocarray(c->replay_sent, c->n_replay_sent + 1, sizeof *sent);

                if (sent) {
                        c->replay_sent = sent;
                        memcpy(sent[c->n_replay_sent++], c->replay_msg_id, sizeof *sent);
                } else
                        journal_set_incomplete(c->journal);
        }
        if (r < 0) {
                c->replay_msg_id[0] = '\0';
                snprintf(why, sizeof why, "cannot send journal cell %zu: %s", at + 1, strerror(-r));
                replay_stop(&c->replay, REPLAY_LOST, why);
                return false;
        }
        replay_note_update(c);
        return true;
}

/* Rewrites the journal once the replay ended: its first kept cells under the new kernel's name (all of them, and
 * the kernels it named, when done), with the cells other clients ran during it put in where they ran. */
static int replay_rewrite(Context *c, size_t kept) {
        _cleanup_free_ JournalEntry *extra = calloc(c->n_outside ? c->n_outside : 1, sizeof *extra);
        _cleanup_free_ size_t *at = calloc(c->n_outside ? c->n_outside : 1, sizeof *at);
        const Replay *rp = &c->replay;
        int r;

        if (!extra || !at)
                return -ENOMEM;
        /* The replayed cells (the journal's that succeeded) whose execute_input came first: at[i] of them. */
        for (size_t i = 0; i < c->n_outside; i++) {
                extra[i] = c->outside[i].entry;
                at[i] = c->outside[i].at < rp->n_cells ? rp->cells[c->outside[i].at] : rp->n_journaled;
        }
        if (rp->phase == REPLAY_DONE)
                r = c->n_outside ? journal_rewrite_insert(c->journal, c->journal->n, extra, at, c->n_outside) : 0;
        else
                r = journal_rewrite(c->journal, kept, c->st.kernel_id);
        if (r >= 0 && rp->phase != REPLAY_DONE && c->n_outside)
                r = journal_rewrite_insert(c->journal, kept, extra, at, c->n_outside);
        if (r >= 0 && rp->phase == REPLAY_DONE)
                r = journal_add_kernel(c->journal, c->st.kernel_id);
        outside_clear(c);
        c->replay_ended = now_usec(CLOCK_MONOTONIC);
        return r;
}

/* The replay ended (done, failed, timed out): the journal keeps what the new namespace holds, under the new
 * kernel's name when all of it was rebuilt, and the context turns ready. */
static void replay_finish(Context *c) {
        int r;

        c->replay_msg_id[0] = '\0';
        replay_note_update(c);
        r = replay_rewrite(c, replay_kept(&c->replay));
        if (r < 0 && r != -ESTALE)
                journal_warn(c, r, "cannot be updated after the replay");
        if (c->replay.phase == REPLAY_DONE)
                log_event(LOG_INFO, CONTEXT_EVENT(c, LOG_ID_KERNEL_READY, "restored", c->pid, NULL),
                          "%s: kernel %s replaces kernel %s: %s", c->name, c->st.kernel_id, c->replay.from_kernel,
                          c->replay_note ?: "namespace rebuilt");
        else
                log_event(LOG_WARNING, CONTEXT_EVENT(c, LOG_ID_KERNEL_READY, "restore-failed", c->pid, NULL),
                          "%s: kernel %s replaces kernel %s: %s", c->name, c->st.kernel_id, c->replay.from_kernel,
                          c->replay_note ?: "replay stopped");
        context_became_ready(c);
}

static void replay_timeout_cb(uv_timer_t *t) {
        Context *c = t->data;
        char why[96], d[32];

        if (c->state != CONTEXT_RESTORING)
                return;
        snprintf(why, sizeof why, "restore_timeout (%s) passed",
                 format_duration(d, sizeof d, c->cfg->restore_timeout));
        replay_stop(&c->replay, REPLAY_TIMED_OUT, why);
        /* The cell that ran too long is interrupted: the kernel is ready for the next, from whoever. */
        if (c->pid > 0)
                (void) kill(-c->pid, SIGINT);
        replay_finish(c);
}

bool context_replay_begin(Context *c) {
        _cleanup_free_ CellOutcome *outcomes = NULL;
        size_t n = c->journal ? c->journal->n : 0;
        int r;

        if (!c->replay_owed || !c->journal)
                return false;
        c->replay_owed = false;
        c->n_replay_sent = 0;
        c->replay_inputs = 0;
        outcomes = calloc(n ? n : 1, sizeof *outcomes);
        for (size_t i = 0; outcomes && i < n; i++) {
                _cleanup_(journal_entry_done) JournalEntry e = {};

                outcomes[i] = journal_read(c->journal, i, &e) < 0 ? CELL_ABORTED : e.outcome;
        }
        r = outcomes ? replay_plan(&c->replay, outcomes, n, c->journal->incomplete, c->prev.kernel_id) : -ENOMEM;
        if (r < 0) {
                journal_warn(c, r, "cannot be replayed");
                return false;
        }
        if (c->replay.phase == REPLAY_RUNNING && c->replay_deaths >= REPLAY_DEATHS_MAX) {
                /* A replay loop (a cell that ends its kernel a moment after it ran): it ends here. */
                char why[200];

                snprintf(why, sizeof why,
                         "the kernels of the last %u replays died during or right after them, so this one starts "
                         "empty",
                         c->replay_deaths);
                replay_stop(&c->replay, REPLAY_SKIPPED, why);
                c->replay_deaths = 0;
        }
        replay_note_update(c);
        if (c->replay.phase != REPLAY_RUNNING) {
                /* Nothing to run (an empty journal), or nothing to trust (incomplete): said, and ready. */
                replay_finish(c);
                return true;
        }
        log_info("%s: kernel %s replaces kernel %s, lost without being asked: replaying %zu cells", c->name,
                 c->st.kernel_id, c->replay.from_kernel, c->replay.n_cells);
        context_set_state(c, CONTEXT_RESTORING);
        uv_timer_stop(&c->info_timer);
        uv_timer_stop(&c->timer);
        uv_timer_start(&c->timer, replay_timeout_cb, c->cfg->restore_timeout / USEC_PER_MSEC, 0);
        if (!replay_send(c))
                replay_finish(c);
        return true;
}

bool context_replay_on_reply(Context *c, const JupyterMsg *msg) {
        const char *status;

        if (!c->replay_msg_id[0] || !streq(jupyter_msg_parent_id(msg), c->replay_msg_id) ||
            !streq(jupyter_msg_type(msg), "execute_reply"))
                return false;
        c->replay_msg_id[0] = '\0';
        status = json_string_value(json_object_get(msg->content, "status")) ?: "";
        if (streq(status, "ok"))
                (void) replay_cell_ended(&c->replay, true, NULL, NULL);
        else
                (void) replay_cell_ended(&c->replay, false,
                                         json_string_value(json_object_get(msg->content, "ename")) ?: status,
                                         json_string_value(json_object_get(msg->content, "evalue")));
        if (c->replay.phase == REPLAY_RUNNING && replay_send(c))
                return true;
        replay_finish(c);
        return true;
}

void context_replay_lost(Context *c, const char *why) {
        char msg[160];
        size_t kept;
        int r;

        if (c->replay.phase != REPLAY_RUNNING)
                return;
        snprintf(msg, sizeof msg, "the kernel %s", why);
        replay_stop(&c->replay, REPLAY_LOST, msg);
        c->replay_msg_id[0] = '\0';
        replay_note_update(c);
        /* The cell it died in goes, so that a cell that kills its kernel cannot make every next one die too; the
         * next kernel replays those before it (the journal still names a kernel, this one). */
        kept = replay_kept(&c->replay);
        r = replay_rewrite(c, kept);
        if (r < 0)
                journal_warn(c, r, "cannot be updated after the replay");
        log_warning("%s: %s", c->name, c->replay_note ?: "the replay lost its kernel");
}

void context_replay_exited(Context *c, ContextStateKind was) {
        usec_t now = now_usec(CLOCK_MONOTONIC);

        if (was == CONTEXT_RESTORING || (c->replay_ended && now - c->replay_ended < REPLAY_SURVIVE_USEC))
                c->replay_deaths++;
        else
                c->replay_deaths = 0;
        c->replay_ended = 0;
}

void context_replay_abandon(Context *c) {
        replay_stop(&c->replay, REPLAY_LOST, "the kernel was stopped before the replay ended");
        c->replay_msg_id[0] = '\0';
        replay_note_update(c);
}

bool context_rebuilt(const Context *c, const char *kernel_id, long long *ret_cells) {
        if (!c->journal || !kernel_id || streq(kernel_id, c->st.kernel_id) ||
            !journal_has_kernel(c->journal, kernel_id) || !journal_has_kernel(c->journal, c->st.kernel_id))
                return false;
        *ret_cells = c->replay.phase == REPLAY_DONE ? (long long) replay_count(&c->replay) : -1;
        return true;
}

void context_replay_reply(const Context *c, ReplyContext *ret) {
        const Replay *r = &c->replay;

        if (c->cfg->restore == RESTORE_REPLAY)
                ret->journal = (ReplyJournal){
                        .valid = true,
                        .cells = c->journal ? (long long) c->journal->n : 0,
                        .bytes = c->journal ? (long long) c->journal->size : 0,
                        .complete = c->journal && !c->journal->incomplete,
                        .note = !c->journal              ? c->journal_error
                                : c->journal->incomplete ? "a cell was not journaled (journal_max reached, a write "
                                                           "failed, a silent cell or lost messages): a lost kernel is "
                                                           "not rebuilt until the next explicit restart"
                                                         : NULL,
                };
        if (r->phase == REPLAY_NONE || !c->replay_note)
                return;
        ret->replay = (ReplyReplay){
                .valid = true,
                .phase = replay_phase_to_string(r->phase),
                .from_kernel = r->from_kernel[0] ? r->from_kernel : NULL,
                .cells = (long long) r->n_cells,
                .replayed = (long long) replay_count(r),
                .failed_cell = r->phase == REPLAY_FAILED || r->phase == REPLAY_TIMED_OUT || r->phase == REPLAY_LOST
                                       ? (long long) replay_kept(r) + 1
                                       : 0,
                .error = r->error,
                .text = c->replay_note,
        };
}

/* ---- history ---- */

/* A time the encoder can write (a corrupt frame's is kept as it came, but it must not make the page fail). */
static usec_t history_time(usec_t at) {
        return at < 253402300799ULL * USEC_PER_SEC ? at : 0;
}

int context_history(Context *c, size_t offset, size_t limit, json_t **ret) {
        _cleanup_free_ ReplyCell *cells = NULL;
        JournalPageCell *page = NULL;
        ReplyContext rc = {};
        ReplyHistory h = { .context = c->name, .next = -1 };
        size_t n = 0;
        int r;

        if (c->cfg->restore != RESTORE_REPLAY)
                return -ENODATA;
        context_replay_reply(c, &rc);
        h.total = rc.journal.cells;
        h.complete = rc.journal.complete;
        h.note = rc.journal.note;
        if (c->journal) {
                r = journal_page(c->journal, offset, limit, HISTORY_PAGE_BYTES, &page, &n, &h.next);
                if (r < 0)
                        return r;
        }
        cells = calloc(n ? n : 1, sizeof *cells);
        if (!cells) {
                journal_page_free(page, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                cells[i] = (ReplyCell){
                        .index = (long long) page[i].index + 1,
                        .at = history_time(page[i].e.at),
                        .outcome = cell_outcome_to_string(page[i].e.outcome),
                        .truncated = page[i].truncated,
                        .client = page[i].e.client,
                        .code = page[i].e.code,
                };
        h.cells = cells;
        h.n_cells = n;
        r = reply_history_encode(&h, ret);
        journal_page_free(page, n);
        return r;
}
