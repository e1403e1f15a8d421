/* kernelctl's rendering of the daemon's replies (kernelctl-render.h). */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "kernelctl-render.h"
#include "render.h"
#include "util.h"

bool render_state_is_up(const char *state) {
        return state && (streq(state, "ready") || streq(state, "busy"));
}

int render_json(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | json_real_flags(j)) < 0)
                return client_fail(EXIT_FAILED, "cannot write the reply.");
        putchar('\n');
        return EXIT_OK;
}

/* A count, or "-" for none (negative). */
static char *format_integer(long long v) {
        char *s;

        if (v < 0)
                return strdup("-");
        return asprintf(&s, "%lld", v) < 0 ? NULL : s;
}

static char *format_uptime(double v) {
        unsigned long long s;
        char *out;
        int r;

        if (v < 0)
                return strdup("-");
        s = (isfinite(v) && v > 0) ? (v < 1e15 ? (unsigned long long) v : 999999999999999ULL) : 0;
        if (s >= 86400)
                r = asprintf(&out, "%llud %llu:%02llu:%02llu", s / 86400, (s / 3600) % 24, (s / 60) % 60, s % 60);
        else
                r = asprintf(&out, "%llu:%02llu:%02llu", s / 3600, (s / 60) % 60, s % 60);
        return r < 0 ? NULL : out;
}

enum {
        COL_NAME,
        COL_STATE,
        COL_PID,
        COL_UPTIME,
        COL_RESTARTS,
        COL_INCARNATION,
        COL_TRANSPORT,
        COL_KERNEL,
        COL_LANGUAGE,
        COL_INFO,
        N_COLUMNS
};

static void row_free(char **row) {
        for (size_t i = 0; i < N_COLUMNS; i++)
                free(row[i]);
}

/* What status's INFO says of restore = replay: the replay while it runs or when it did not rebuild everything, and a
 * journal that can no longer promise a rebuild. NULL when nothing. */
static const char *replay_info(const ReplyContext *c) {
        if (c->replay.valid && (streq_ptr(c->state, "restoring") || !streq_ptr(c->replay.phase, "done")))
                return c->replay.text;
        if (c->journal.valid && !c->journal.complete)
                return "journal incomplete: a lost kernel is not rebuilt";
        return NULL;
}

/* What status's INFO says of a cell of ours that an interrupt has not ended: since when, and when its kill_after kills
 * the kernel. NULL when there is none. */
static const char *interrupt_info(const ReplyContext *c, char *buf, size_t size) {
        usec_t now = now_usec(CLOCK_REALTIME);
        char d[32], k[32];

        if (!c->interrupted_at)
                return NULL;
        format_duration(d, sizeof d,
                        now > c->interrupted_at ? (now - c->interrupted_at) / USEC_PER_SEC * USEC_PER_SEC : 0);
        if (c->kill_at)
                format_duration(k, sizeof k, c->kill_at > now ? (c->kill_at - now) / USEC_PER_SEC * USEC_PER_SEC : 0);
        snprintf(buf, size, "a cell from exec, still running %s after its interrupt%s%s", d,
                 c->kill_at ? "; the kernel is killed in " : "", c->kill_at ? k : "");
        return buf;
}

static int status_row(const ReplyContext *c, char **row) {
        char interrupted[160];
        const char *stuck = interrupt_info(c, interrupted, sizeof interrupted);

        row[COL_NAME] = client_sanitize(c->name, false);
        row[COL_STATE] = client_sanitize(c->state, false);
        row[COL_PID] = format_integer(c->pid ?: -1);
        row[COL_UPTIME] = format_uptime(c->uptime);
        row[COL_RESTARTS] = format_integer(c->restarts);
        row[COL_INCARNATION] = format_integer(c->incarnation);
        row[COL_TRANSPORT] = client_sanitize(c->transport, false);
        /* "-" for a context of argv alone, whose kernel nobody named. */
        row[COL_KERNEL] = client_sanitize(c->kernel ?: "-", false);
        row[COL_LANGUAGE] = client_sanitize(c->language ?: "-", false);
        row[COL_INFO] = client_sanitize(streq_ptr(c->state, "restoring") && replay_info(c) ? replay_info(c)
                                        : !render_state_is_up(c->state) && c->last_error   ? c->last_error
                                        : stuck                                            ? stuck
                                        : streq_ptr(c->running, "other")                   ? "another client's cell"
                                        : streq_ptr(c->running, "ours")                    ? "a cell from exec"
                                        : render_state_is_up(c->state) && streq_ptr(c->output_chunking, "off")
                                                ? "output chunking off"
                                        : replay_info(c) ? replay_info(c)
                                                         : "",
                                        false);
        for (size_t i = 0; i < N_COLUMNS; i++)
                if (!row[i])
                        return -ENOMEM;
        return 0;
}

static void print_row(char *const *row, const size_t *widths) {
        char line[4096];
        size_t n = 0;

        for (size_t i = 0; i < N_COLUMNS; i++) {
                int k = snprintf(line + n, sizeof line - n, "%-*s%s", (int) widths[i], row[i],
                                 i + 1 < N_COLUMNS ? "  " : "");
                if (k < 0)
                        break;
                n += (size_t) k;
                if (n >= sizeof line) {
                        n = sizeof line - 1;
                        break;
                }
        }
        while (n > 0 && line[n - 1] == ' ')
                n--;
        line[n] = '\0';
        puts(line);
}

int render_status_table(const ReplyContext *contexts, size_t n) {
        static const char *const header[N_COLUMNS] = { "NAME",        "STATE",     "PID",    "UPTIME",   "RESTARTS",
                                                       "INCARNATION", "TRANSPORT", "KERNEL", "LANGUAGE", "INFO" };
        size_t widths[N_COLUMNS], n_tcp = 0;
        _cleanup_free_ char **rows = NULL;
        int r = EXIT_OK;

        rows = calloc(n ? n * N_COLUMNS : 1, sizeof(char *));
        if (!rows)
                return client_fail(EXIT_FAILED, "out of memory.");
        for (size_t i = 0; i < N_COLUMNS; i++)
                widths[i] = strlen(header[i]);
        for (size_t i = 0; i < n; i++) {
                char **row = rows + i * N_COLUMNS;

                if (status_row(&contexts[i], row) < 0) {
                        r = client_fail(EXIT_FAILED, "out of memory.");
                        goto finish;
                }
                for (size_t c = 0; c < N_COLUMNS; c++)
                        if (strlen(row[c]) > widths[c])
                                widths[c] = strlen(row[c]);
                n_tcp += streq(row[COL_TRANSPORT], "tcp");
        }
        print_row((char *const *) header, widths);
        for (size_t i = 0; i < n; i++)
                print_row(rows + i * N_COLUMNS, widths);
        if (n_tcp > 0)
                printf("\ntcp: any local user can connect to the kernel%s of %s on tcp and subscribe to %s output.\n",
                       n_tcp > 1 ? "s" : "", n_tcp > 1 ? "the contexts" : "the context", n_tcp > 1 ? "their" : "its");
        /* Why each of them is on tcp: auto's choice for its kernel, or the setting. */
        for (size_t i = 0; i < n; i++)
                if (streq(rows[i * N_COLUMNS + COL_TRANSPORT], "tcp") && contexts[i].transport_why) {
                        _cleanup_free_ char *why = client_sanitize(contexts[i].transport_why, false);

                        printf("  %s: tcp, %s\n", rows[i * N_COLUMNS + COL_NAME], why ?: "");
                }
finish:
        for (size_t i = 0; i < n; i++)
                row_free(rows + i * N_COLUMNS);
        return r;
}

int render_kernels(const ReplyKernels *k) {
        enum { K_NAME, K_LANGUAGE, K_INTERRUPT, K_PATH, K_DISPLAY, K_COLUMNS };
        static const char *const header[K_COLUMNS] = { "NAME", "LANGUAGE", "INTERRUPT", "PATH", "DISPLAY NAME" };
        size_t widths[K_COLUMNS];
        _cleanup_free_ char **cells = calloc((k->n_kernels + 1) * K_COLUMNS, sizeof(char *));
        int r = EXIT_OK;

        if (!cells)
                return client_fail(EXIT_FAILED, "out of memory.");
        for (size_t c = 0; c < K_COLUMNS; c++) {
                cells[c] = strdup(header[c]);
                widths[c] = 0;
        }
        for (size_t i = 0; i < k->n_kernels; i++) {
                const ReplyKernelspec *s = &k->kernels[i];
                char **row = cells + (i + 1) * K_COLUMNS;

                row[K_NAME] = client_sanitize(s->name, false);
                row[K_LANGUAGE] = client_sanitize(s->language ?: "-", false);
                row[K_INTERRUPT] = client_sanitize(s->interrupt_mode, false);
                row[K_PATH] = client_sanitize(s->path, false);
                row[K_DISPLAY] = client_sanitize(s->display_name ?: "-", false);
        }
        for (size_t i = 0; i < (k->n_kernels + 1) * K_COLUMNS; i++)
                if (!cells[i])
                        r = client_fail(EXIT_FAILED, "out of memory.");
                else if (strlen(cells[i]) > widths[i % K_COLUMNS])
                        widths[i % K_COLUMNS] = strlen(cells[i]);
        for (size_t i = 0; r == EXIT_OK && i <= k->n_kernels; i++) {
                char *const *row = cells + i * K_COLUMNS;

                printf("%-*s  %-*s  %-*s  %-*s  %s\n", (int) widths[0], row[0], (int) widths[1], row[1],
                       (int) widths[2], row[2], (int) widths[3], row[3], row[4]);
        }
        if (r == EXIT_OK && k->n_kernels == 0)
                printf("(no kernelspec found)\n");
        if (r == EXIT_OK && k->cut)
                printf("(the list is partial: the daemon stopped at %s)\n", k->cut);
        for (size_t i = 0; i < (k->n_kernels + 1) * K_COLUMNS; i++)
                free(cells[i]);
        return r;
}

/* The cell whose outputs are being shown (one at a time), its budget and whether it said it ran out of memory. */
static CellRender *cell;
static size_t cell_max_output;
static bool cell_failed;

/* The renderer's text to the terminal: stdout's and stderr's pieces in the order they come. */
static void emit_terminal(CellRenderTarget target, const char *s, size_t n, void *userdata) {
        FILE *f = target == CELL_RENDER_ERR ? stderr : stdout;

        fflush(f == stdout ? stderr : stdout);
        fwrite(s, 1, n, f);
        fflush(f);
}

void render_output_budget(size_t max_output) {
        cell_max_output = max_output;
}

/* Where --save-images writes, and the number the next file tries. */
static const char *cell_save_dir;
static unsigned cell_save_next = 1;

void render_output_save_images(const char *dir) {
        cell_save_dir = dir;
}

/* A file's extension for a MIME type: the letters and digits its subtype starts with ("image/png": png,
 * "image/svg+xml": svg), "bin" when none. */
static void mime_extension(const char *mime, char *buf, size_t size) {
        const char *sub = strchr(mime, '/');
        size_t n = 0;

        for (sub = sub ? sub + 1 : ""; n + 1 < size && isalnum((unsigned char) *sub); sub++)
                buf[n++] = *sub;
        buf[n] = '\0';
        if (n == 0)
                snprintf(buf, size, "bin");
}

/* Writes a form to DIR/output-N.EXT, N the first number free from the last one: never over another file, and
 * never through a symlink. The renderer's CellRenderSave. */
static int save_image(const char *mime, const void *data, size_t n, char **ret_path, void *userdata) {
        char ext[16];

        mime_extension(mime, ext, sizeof ext);
        for (; cell_save_next < 1000000; cell_save_next++) {
                _cleanup_free_ char *path = NULL;
                _cleanup_close_ int fd = -1;
                int r;

                if (asprintf(&path, "%s/output-%u.%s", cell_save_dir, cell_save_next, ext) < 0)
                        return -ENOMEM;
                fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (fd < 0 && errno == EEXIST)
                        continue;
                if (fd < 0)
                        return -errno;
                r = write_all(fd, data, n);
                if (r < 0) {
                        (void) unlink(path);
                        return r;
                }
                cell_save_next++;
                *ret_path = TAKE_PTR(path);
                return 0;
        }
        return -EEXIST;
}

void render_output(const json_t *out, bool traceback) {
        if (!cell && !cell_failed) {
                cell = cell_render_new(cell_max_output, traceback, emit_terminal, NULL);
                if (cell && cell_save_dir)
                        cell_render_set_save(cell, save_image, NULL);
        }
        if (!cell_failed && (!cell || cell_render_output(cell, out) < 0)) {
                cell_failed = true;
                (void) client_fail(EXIT_FAILED, "out of memory: the cell's outputs from here on are not shown.");
        }
}

int render_output_finish(size_t *ret_kept, size_t *ret_dropped) {
        size_t kept = 0, dropped = 0;
        int r = 0;

        if (cell)
                r = cell_render_finish(cell, &kept, &dropped);
        cell_render_free(cell);
        cell = NULL;
        if (r < 0 && !cell_failed)
                (void) client_fail(EXIT_FAILED, "out of memory: the end of the cell's outputs is not shown.");
        cell_failed = false;
        if (ret_kept)
                *ret_kept = kept;
        if (ret_dropped)
                *ret_dropped = dropped;
        return r;
}

void render_json_line(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | json_real_flags(j)) == 0)
                putchar('\n');
        fflush(stdout);
}
int render_action(const ReplyContext *c, const char *name) {
        _cleanup_free_ char *shown_name = client_sanitize(c->name ?: name, false);
        _cleanup_free_ char *shown_state = client_sanitize(c->state, false);

        if (!shown_name || !shown_state)
                return client_fail(EXIT_FAILED, "out of memory.");
        if (c->pid > 0)
                printf("%s: %s (pid %lld, incarnation %lld)\n", shown_name, shown_state, c->pid, c->incarnation);
        else
                printf("%s: %s\n", shown_name, shown_state);
        return EXIT_OK;
}

char *render_not_ready(const ReplyContext *c) {
        _cleanup_free_ char *state = client_sanitize(c ? c->state : "unknown", false);
        _cleanup_free_ char *error = c && c->last_error ? client_sanitize(c->last_error, false) : NULL;
        char *s;

        if (!state)
                return NULL;
        if (asprintf(&s, "state %s%s%s", state, error ? ": " : "", error ?: "") < 0)
                return NULL;
        return s;
}

void render_exit_note(const char *exit, const char *context) {
        _cleanup_free_ char *name = client_sanitize(context, false);

        if (streq_ptr(exit, "kept"))
                fprintf(stderr,
                        "kernelctl: note: the cell called exit(); a supervised kernel is not a cell's to end: the "
                        "kernel and its namespace were kept (kernelctl restart %s ends it).\n",
                        name ?: "?");
        else if (exit)
                fprintf(stderr,
                        "kernelctl: note: the cell called exit() and the kernel is ending: the next cell runs in a "
                        "new kernel, which starts empty.\n");
}

void render_exec_summary(const ReplyExecResult *res, bool died) {
        _cleanup_free_ char *st = client_sanitize(res->status, false);

        (void) render_output_finish(NULL, NULL);
        if (died && streq(res->status, "died")) {
                _cleanup_free_ char *k = res->kernel_id ? client_sanitize(res->kernel_id, false) : NULL;
                if (k)
                        printf("[%s: kernel now %s]\n", st ?: "?", k);
                else
                        printf("[%s: no kernel]\n", st ?: "?");
        } else if (streq(res->status, "kernel_aborted"))
                /* The kernel's own word for a cell it did not run; the daemon's message goes to stderr. */
                puts("[aborted]");
        else if (streq(res->status, "not_started"))
                /* Only a timeout keeps a cell from starting and still answers its caller. */
                puts("[not started: timeout]");
        else if (!died && res->execution_count >= 0)
                printf("[%s #%lld]\n", st ?: "?", res->execution_count);
        else
                printf("[%s]\n", st ?: "?");
}

void render_history(const ReplyHistory *h, bool first) {
        if (first) {
                _cleanup_free_ char *name = client_sanitize(h->context, false);
                _cleanup_free_ char *note = h->note ? client_sanitize(h->note, false) : NULL;

                printf("%s: %lld cell%s journaled%s%s\n", name ?: "?", h->total, h->total == 1 ? "" : "s",
                       h->complete ? "" : ", incomplete: ", h->complete ? "" : note ?: "a cell is missing");
        }
        for (size_t i = 0; i < h->n_cells; i++) {
                const ReplyCell *c = &h->cells[i];
                _cleanup_free_ char *client = client_sanitize(c->client, false);
                /* The code as it was written: its lines kept, control characters shown. */
                _cleanup_free_ char *code = client_sanitize(c->code, true);
                char when[64];

                printf("[%lld] %s %s client %s%s\n%s\n", c->index, c->outcome,
                       format_timestamp(when, sizeof when, c->at), client ?: "?",
                       c->truncated ? " (code cut to fit a page)" : "", code ?: "?");
        }
}

void render_check(const char *name, const ReplyCheck *check, const char *verdict, const char *expect) {
        _cleanup_free_ char *shown = client_sanitize(name, false);
        _cleanup_free_ char *state = client_sanitize(check->context.state, false);
        _cleanup_free_ char *kid = client_sanitize(check->context.kernel_id, false);
        _cleanup_free_ char *expected = expect ? client_sanitize(expect, false) : NULL;

        printf("%s: %s pid %lld kernel_id %s incarnation %lld generation %lld", shown ?: "?", state ?: "?",
               check->context.pid, kid ?: "?", check->context.incarnation, check->supervisor.generation);
        if (streq(verdict, "same"))
                puts(": same kernel, namespace intact");
        else if (streq(verdict, "rebuilt") && check->rebuilt.cells >= 0)
                printf(": kernel replaced (expected %s), namespace rebuilt by replaying %lld cell%s\n",
                       expected ?: "?", check->rebuilt.cells, check->rebuilt.cells == 1 ? "" : "s");
        else if (streq(verdict, "rebuilt"))
                printf(": kernel replaced (expected %s), namespace rebuilt by replaying its journal\n",
                       expected ?: "?");
        else if (streq(verdict, "replaced") && check->context.replay.valid &&
                 !streq_ptr(check->context.replay.phase, "done")) {
                /* A replay that stopped or was skipped: not the namespace the caller knew. */
                _cleanup_free_ char *text = client_sanitize(check->context.replay.text, false);
                printf(": kernel replaced (expected %s), namespace not rebuilt: %s\n", expected ?: "?", text ?: "?");
        } else if (streq(verdict, "replaced"))
                printf(": kernel replaced (expected %s), namespace empty\n", expected ?: "?");
        else
                putchar('\n');
}

/* "VERB NAME" or "VERB NAME (WHY SUFFIX)". */
static void print_name_line(const char *verb, const char *name, const char *why, const char *suffix) {
        _cleanup_free_ char *n = client_sanitize(name, false), *w = why ? client_sanitize(why, false) : NULL;

        if (w)
                printf("%s %s (%s%s)\n", verb, n ?: "?", w, suffix);
        else
                printf("%s %s\n", verb, n ?: "?");
}

void render_report(const ReplyReport *r) {
        for (size_t i = 0; i < r->n_added; i++)
                print_name_line("added", r->added[i], NULL, "");
        for (size_t i = 0; i < r->n_restarted; i++)
                print_name_line("restarted", r->restarted[i].name, r->restarted[i].why, "");
        for (size_t i = 0; i < r->n_updated; i++)
                print_name_line("updated", r->updated[i].name, r->updated[i].why,
                                " changed, applied without a restart");
        for (size_t i = 0; i < r->n_removed; i++)
                print_name_line("removed", r->removed[i], NULL, "");
        for (size_t i = 0; i < r->n_stopping; i++)
                print_name_line("stopping", r->stopping[i], "its kernel has not exited yet", "");
        printf("unchanged %lld\n", r->unchanged);
        for (size_t i = 0; i < r->n_not_applied; i++) {
                _cleanup_free_ char *n = client_sanitize(r->not_applied[i], false);
                fprintf(stderr, "kernelctl: not applied: %s\n", n ?: "?");
        }
}
