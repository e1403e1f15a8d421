/* kernelctl: the command line client of kernelsupd. Parses options, finds the verb in one table
 * (which also writes --help), sends one JSON-RPC request through client.c, decodes the reply with
 * reply.h and prints it for people (kernelctl-render.c) or as JSON, with the exit codes of
 * doc/design.md (section 6). */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "kernelctl-render.h"
#include "kernelctl.h"
#include "macro.h"
#include "protocol.h"
#include "reply.h"
#include "util.h"

#define DEFAULT_SOCKET RUNSTATEDIR "/kernelsup/control.sock"
#define MAX_TIMEOUT_USEC (86400 * USEC_PER_SEC)

#define CHECK_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define WAIT_TIMEOUT_USEC (60 * USEC_PER_SEC)
#define STOP_WAIT_USEC (60 * USEC_PER_SEC)
#define START_TIMEOUT_USEC (60 * USEC_PER_SEC)
/* The daemon answers a reload once it has applied it, before restarted kernels are up. */
#define RELOAD_WAIT_USEC (60 * USEC_PER_SEC)

/* What a verb's arguments are: the dispatcher checks context names before the verb runs. */
typedef enum VerbArgs {
        ARGS_NONE,        /* no context */
        ARGS_CONTEXT,     /* the first is a context's name */
        ARGS_CONTEXTS,    /* every one is a context's name */
        ARGS_NEW_CONTEXT, /* the first names a file in contexts_dir: the error says what is valid */
} VerbArgs;

typedef struct Verb {
        const char *name;
        const char *synopsis; /* after the name, in --help */
        const char *summary;  /* --help's text; lines after the first are indented under it */
        unsigned min_args, max_args;
        VerbArgs args;
        int (*run)(const Options *o, char **args, unsigned n_args);
} Verb;

static int version(void) {
        printf("kernelctl %s\n", PACKAGE_VERSION);
        return EXIT_OK;
}

/* A JSON array of the names, or NULL on out of memory. */
static json_t *names_json(char **args, unsigned n_args) {
        json_auto_t *names = json_array();

        if (!names)
                return NULL;
        for (unsigned k = 0; k < n_args; k++)
                if (json_array_append_new(names, json_string(args[k])) < 0)
                        return NULL;
        return TAKE_PTR(names);
}

/* How long a verb waits: --timeout when given, else its own default. */
static usec_t timeout_or(const Options *o, usec_t fallback) {
        return o->timeout != USEC_INFINITY ? o->timeout : fallback;
}

static int cmd_status(const Options *o, char **args, unsigned n_args) {
        json_auto_t *params = NULL, *result = NULL;
        _cleanup_(reply_status_done) ReplyStatus status = {};
        ReplyProblem problem;
        int r;

        if (n_args > 0) {
                json_t *names = names_json(args, n_args);

                params = names ? json_pack("{s:o}", "contexts", names) : NULL;
                if (!params)
                        return client_fail(EXIT_FAILED, "out of memory.");
        }
        r = client_call(o->socket, "status", TAKE_PTR(params), timeout_or(o, STATUS_WAIT_USEC), &result);
        if (r != EXIT_OK)
                return r;
        if (reply_status_decode(result, &status, &problem) < 0)
                return client_invalid_reply(&problem);

        if (status.supervisor.degraded && !o->json) {
                _cleanup_free_ char *shown = client_sanitize(status.supervisor.degraded, false);
                printf("kernelsupd is degraded: %s\n", shown ?: "?");
        }
        r = o->json ? render_json(result) : render_status_table(status.contexts, status.n_contexts);
        if (r != EXIT_OK)
                return r;
        /* A state that is not on disk is lost at the next crash: not a state to call healthy. */
        if (status.supervisor.degraded)
                return EXIT_FAILED;
        for (size_t i = 0; i < status.n_contexts; i++)
                if (!render_state_is_up(status.contexts[i].state))
                        return EXIT_FAILED;
        return EXIT_OK;
}

/* Sends start, stop or restart for name: EXIT_OK with the context's status after the action, as the daemon sent it
 * in *ret_result (the caller's) and decoded in *ret (borrowing from it). */
static int action_call(const Options *o, const char *method, const char *name, json_t **ret_result,
                       ReplyContext *ret) {
        json_auto_t *params = NULL, *result = NULL;
        ReplyProblem problem;
        bool is_stop = streq(method, "stop");
        usec_t timeout = o->timeout, wait;
        int r;

        if (timeout == USEC_INFINITY && !is_stop)
                timeout = START_TIMEOUT_USEC;
        /* stop without --timeout leaves the daemon its configured stop timeout. */
        wait = timeout == USEC_INFINITY ? STOP_WAIT_USEC : timeout + CLIENT_REPLY_GRACE_USEC;

        params = json_pack("{s:s}", "context", name);
        if (!params || client_set_timeout(params, timeout) < 0)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call(o->socket, method, TAKE_PTR(params), wait, &result);
        if (r != EXIT_OK)
                return r;
        if (reply_context_decode(result, ret, &problem) < 0)
                return client_invalid_reply(&problem);
        *ret_result = TAKE_PTR(result);
        return EXIT_OK;
}

/* The reply came, but the context did not end where the action should have left it: exit 1, saying why. */
static int action_verdict(bool is_stop, const ReplyContext *c) {
        _cleanup_free_ char *shown_name = NULL, *shown_state = NULL, *error = NULL;

        if (is_stop ? streq(c->state, "stopped") : render_state_is_up(c->state))
                return EXIT_OK;
        shown_name = client_sanitize(c->name, false);
        shown_state = client_sanitize(c->state, false);
        error = client_sanitize(c->last_error, false);
        return client_fail(EXIT_FAILED, "%s is %s, not %s%s%s.", shown_name ?: "?", shown_state ?: "?",
                           is_stop ? "stopped" : "ready", error && *error ? ": " : "", error ?: "");
}

/* start, stop and restart: the result is the context's status after the action. */
static int cmd_action(const Options *o, const char *method, const char *name) {
        json_auto_t *result = NULL;
        _cleanup_(reply_context_done) ReplyContext c = {};
        int r;

        r = action_call(o, method, name, &result, &c);
        if (r != EXIT_OK)
                return r;
        r = o->json ? render_json(result) : render_action(&c, name);
        if (r != EXIT_OK)
                return r;
        return action_verdict(streq(method, "stop"), &c);
}

static int cmd_start(const Options *o, char **args, unsigned n_args) {
        return cmd_action(o, "start", args[0]);
}

static int cmd_stop(const Options *o, char **args, unsigned n_args) {
        return cmd_action(o, "stop", args[0]);
}

static int cmd_restart(const Options *o, char **args, unsigned n_args) {
        return cmd_action(o, "restart", args[0]);
}

static int cmd_version(const Options *o, char **args, unsigned n_args) {
        return version();
}

static void help(void);

static int cmd_help(const Options *o, char **args, unsigned n_args) {
        help();
        return EXIT_OK;
}

static int cmd_interrupt(const Options *o, char **args, unsigned n_args) {
        json_auto_t *result = NULL;
        ReplyInterrupt answer;
        ReplyProblem problem;
        int r;

        r = client_call(o->socket, "interrupt", json_pack("{s:s}", "context", args[0]),
                        timeout_or(o, STATUS_WAIT_USEC), &result);
        if (r != EXIT_OK)
                return r;
        if (reply_interrupt_decode(result, &answer, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        puts(answer.interrupted ? "interrupted" : "nothing running");
        return EXIT_OK;
}

/* The kernelspecs the caller's contexts could name with kernel = NAME. */
static int cmd_kernels(const Options *o, char **args, unsigned n_args) {
        json_auto_t *result = NULL;
        _cleanup_(reply_kernels_done) ReplyKernels k = {};
        ReplyProblem problem;
        int r;

        r = client_call(o->socket, "kernels", NULL, o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC,
                        &result);
        if (r != EXIT_OK)
                return r;
        if (reply_kernels_decode(result, &k, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        return render_kernels(&k);
}

/* The OpenMetrics text, as the daemon wrote it (it ends in "# EOF"). */
static int cmd_metrics(const Options *o, char **args, unsigned n_args) {
        json_auto_t *result = NULL;
        ReplyMetrics m;
        ReplyProblem problem;
        int r;

        r = client_call(o->socket, "metrics", NULL, timeout_or(o, STATUS_WAIT_USEC), &result);
        if (r != EXIT_OK)
                return r;
        if (reply_metrics_decode(result, &m, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        if (fputs(m.text, stdout) == EOF || fflush(stdout) != 0)
                return client_fail(EXIT_FAILED, "cannot write the metrics: %m");
        return EXIT_OK;
}

/* Asks for the page of CTX's journal at offset: EXIT_OK with the decoded page in *ret (borrowing from *ret_json). */
static int history_page(const Options *o, const char *name, long long offset, json_t **ret_json, ReplyHistory *ret) {
        json_auto_t *params = json_pack("{s:s,s:I}", "context", name, "offset", (json_int_t) offset);
        ReplyProblem problem;
        int r;

        if (!params)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call(o->socket, "history", TAKE_PTR(params),
                        o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC, ret_json);
        if (r != EXIT_OK)
                return r;
        if (reply_history_decode(*ret_json, ret, &problem) < 0)
                return client_invalid_reply(&problem);
        return EXIT_OK;
}

/* history: the journal page by page, as it is read; with --json one object with every cell. */
static int cmd_history(const Options *o, char **args, unsigned n_args) {
        json_auto_t *all = NULL;
        long long offset = 0;
        int r;

        do {
                _cleanup_(reply_history_done) ReplyHistory h = {};
                json_auto_t *page = NULL;

                r = history_page(o, args[0], offset, &page, &h);
                if (r != EXIT_OK)
                        return r;
                if (o->json && !all)
                        all = json_deep_copy(page);
                else if (o->json &&
                         json_array_extend(json_object_get(all, "cells"), json_object_get(page, "cells")) < 0)
                        return client_fail(EXIT_FAILED, "out of memory.");
                if (!o->json)
                        render_history(&h, offset == 0);
                offset = h.next;
        } while (offset >= 0);
        if (o->json) {
                if (!all || json_object_set_new(all, "next", json_null()) < 0)
                        return client_fail(EXIT_FAILED, "out of memory.");
                return render_json(all);
        }
        return EXIT_OK;
}

/* ---- check and wait ---- */

/* --json of check: the verdict, and what the daemon said of the context and of itself. */
static int print_check_json(const Options *o, const char *verdict, const json_t *data) {
        const json_t *ctx = json_object_get(data, "context"), *sup = json_object_get(data, "supervisor");
        json_auto_t *shown = NULL;

        const json_t *rebuilt = json_object_get(data, "rebuilt"), *replay = json_object_get(ctx, "replay");

        /* replayed: how many cells rebuilt the namespace; replay: the last replay as status tells it. */
        shown = json_pack("{s:s, s:o, s:O, s:O, s:O, s:O}", "verdict", verdict, "expected",
                          o->expect ? json_string(o->expect) : json_null(), "replayed",
                          json_is_object(rebuilt) ? json_object_get(rebuilt, "cells") : json_null(), "replay",
                          json_is_object(replay) ? (json_t *) replay : json_null(), "context",
                          json_is_object(ctx) ? (json_t *) ctx : json_null(), "supervisor",
                          json_is_object(sup) ? (json_t *) sup : json_null());
        if (!shown || render_json(shown) != EXIT_OK)
                return client_fail(EXIT_FAILED, "out of memory.");
        return EXIT_OK;
}

static int cmd_check(const Options *o, char **args, unsigned n_args) {
        usec_t total = timeout_or(o, CHECK_TIMEOUT_USEC);
        json_auto_t *params = NULL;
        _cleanup_(client_reply_done) ClientReply reply = {};
        _cleanup_(reply_check_done) ReplyCheck check = {};
        _cleanup_(reply_timed_out_done) ReplyTimedOut late = {};
        ReplyProblem problem;
        const char *verdict;
        int r;

        params = json_pack("{s:s}", "context", args[0]);
        /* The daemon says whether that kernel's namespace was rebuilt in the one that answers (restore = replay). */
        if (params && o->expect && json_object_set_new(params, "expect", json_string(o->expect)) < 0)
                params = NULL;
        if (!params)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call_until(o->socket, "check", params, total, &reply);
        if (r != EXIT_OK)
                return r;

        if (reply.result) {
                if (reply_check_decode(reply.result, &check, &problem) < 0)
                        return client_invalid_reply(&problem);
                if (!check.context.kernel_id)
                        return client_invalid_reply(&(ReplyProblem){ "context.kernel_id: null for a ready context" });
                verdict = reply_check_verdict(&check, o->expect);
                r = streq(verdict, "replaced") ? EXIT_REPLACED : streq(verdict, "rebuilt") ? EXIT_REBUILT : EXIT_OK;
        } else if (reply.code == KS_ERR_TIMEOUT) {
                verdict = "not-ready";
                r = EXIT_TIMEOUT;
        } else
                return client_report_error(reply.code, reply.message);

        if (o->json) {
                int k = print_check_json(o, verdict, reply.result ?: reply.data);
                return k != EXIT_OK ? k : r;
        }
        if (reply.result)
                render_check(args[0], &check, verdict, o->expect);
        else {
                /* What the context was doing, when the daemon said so. */
                bool known = reply_timed_out_decode(reply.data, &late, NULL) >= 0;
                _cleanup_free_ char *name = client_sanitize(args[0], false);
                _cleanup_free_ char *why = render_not_ready(known ? &late.context : NULL);

                /* A kernel that is up but did not answer the probe is not "not ready": say what did not happen. */
                bool up =
                        known && (render_state_is_up(late.context.state) || streq(late.context.state, "unresponsive"));

                printf("%s: %s within %g s (%s)\n", name ?: "?", up ? "no heartbeat answer" : "not ready",
                       client_seconds(total), why ?: "?");
        }
        return r;
}

static int cmd_wait(const Options *o, char **args, unsigned n_args) {
        usec_t total = timeout_or(o, WAIT_TIMEOUT_USEC);
        json_auto_t *params = NULL;
        _cleanup_(client_reply_done) ClientReply reply = {};
        _cleanup_(reply_status_done) ReplyStatus status = {};
        ReplyProblem problem;
        const json_t *body;
        int r;

        params = json_object();
        if (!params || (n_args > 0 && json_object_set_new(params, "contexts", names_json(args, n_args)) < 0))
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call_until(o->socket, "wait", params, total, &reply);
        if (r != EXIT_OK)
                return r;

        if (reply.result)
                body = reply.result;
        else if (reply.code == KS_ERR_TIMEOUT && json_is_object(reply.data))
                body = reply.data;
        else
                return client_report_error(reply.code, reply.message);
        if (reply_status_decode(body, &status, &problem) < 0)
                return client_invalid_reply(&problem);

        r = reply.result ? EXIT_OK : EXIT_TIMEOUT;
        for (size_t i = 0; i < status.n_contexts; i++)
                if (!render_state_is_up(status.contexts[i].state))
                        r = EXIT_TIMEOUT;
        if (o->json)
                (void) render_json(body);
        else if (r != EXIT_OK)
                for (size_t i = 0; i < status.n_contexts; i++) {
                        _cleanup_free_ char *name = NULL, *why = NULL;

                        if (render_state_is_up(status.contexts[i].state))
                                continue;
                        name = client_sanitize(status.contexts[i].name, false);
                        why = render_not_ready(&status.contexts[i]);
                        fprintf(stderr, "kernelctl: %s: not ready within %g s (%s)\n", name ?: "?",
                                client_seconds(total), why ?: "?");
                }
        return r;
}

/* ---- reload, add, remove ---- */

/* Sends a request that answers with a report of what changed: EXIT_OK with it as the daemon sent it in *ret_json
 * (the caller's) and decoded in *ret (borrowing from it). */
static int call_report(const Options *o, const char *method, json_t *params, usec_t wait, json_t **ret_json,
                       ReplyReport *ret) {
        json_auto_t *result = NULL;
        ReplyProblem problem;
        int r;

        r = client_call(o->socket, method, params, wait, &result);
        if (r != EXIT_OK)
                return r;
        if (reply_report_decode(result, ret, &problem) < 0)
                return client_invalid_reply(&problem);
        *ret_json = TAKE_PTR(result);
        return EXIT_OK;
}

static int print_report(const Options *o, const json_t *j, const ReplyReport *report) {
        if (o->json)
                return render_json(j);
        render_report(report);
        return EXIT_OK;
}

static int cmd_reload(const Options *o, char **args, unsigned n_args) {
        json_t *params = json_pack("{s:b}", "dry_run", o->dry_run);
        json_auto_t *j = NULL;
        _cleanup_(reply_report_done) ReplyReport report = {};
        int r;

        if (!params)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = call_report(o, "reload", params, RELOAD_WAIT_USEC, &j, &report);
        return r != EXIT_OK ? r : print_report(o, j, &report);
}

/* add --wait: the context is started (when its kernel is not running yet) and answered for once its kernel is
 * ready, or has failed to start, within --timeout (default 60 s). With --json, one object: the report, and the
 * context's status as "context". */
static int add_wait(const Options *o, const char *name, json_t *j, const ReplyReport *report) {
        json_auto_t *result = NULL;
        _cleanup_(reply_context_done) ReplyContext c = {};
        int r;

        if (!o->json)
                render_report(report);
        r = action_call(o, "start", name, &result, &c);
        if (r != EXIT_OK)
                return r;
        if (o->json) {
                if (json_object_set(j, "context", result) < 0)
                        return client_fail(EXIT_FAILED, "out of memory.");
                r = render_json(j);
        } else
                r = render_action(&c, name);
        if (r != EXIT_OK)
                return r;
        return action_verdict(false, &c);
}

static int cmd_add(const Options *o, char **args, unsigned n_args) {
        const struct {
                const char *key, *value;
        } settings[] = {
                { "user", o->user },       { "group", o->group },
                { "cwd", o->cwd },         { "connection_file", o->connection_file },
                { "kernel", o->kernel },   { "transport", o->transport },
                { "restore", o->restore },
        };
        json_auto_t *params = NULL, *j = NULL;
        _cleanup_(reply_report_done) ReplyReport report = {};
        json_t *env;
        int r;

        if (args[0][0] == '.')
                return client_usage_error(
                        "invalid context name: '%s' (a name starting with '.' would be a hidden file, "
                        "which contexts_dir ignores)",
                        args[0]);
        params = json_pack("{s:s}", "context", args[0]);
        env = json_array();
        if (!params || !env || json_object_set_new(params, "env", env) < 0)
                return client_fail(EXIT_FAILED, "out of memory.");
        for (size_t i = 0; i < ELEMENTSOF(settings); i++)
                if (settings[i].value &&
                    json_object_set_new(params, settings[i].key, json_string(settings[i].value)) < 0)
                        return client_fail(EXIT_FAILED, "invalid --%s: not UTF-8.", settings[i].key);
        for (unsigned i = 0; i < o->n_env; i++)
                if (json_array_append_new(env, json_string(o->env[i])) < 0)
                        return client_fail(EXIT_FAILED, "invalid --env: not UTF-8.");
        r = call_report(o, "add", TAKE_PTR(params), RELOAD_WAIT_USEC, &j, &report);
        if (r != EXIT_OK)
                return r;
        return o->wait ? add_wait(o, args[0], j, &report) : print_report(o, j, &report);
}

static int cmd_remove(const Options *o, char **args, unsigned n_args) {
        json_auto_t *params = json_pack("{s:s}", "context", args[0]), *j = NULL;
        _cleanup_(reply_report_done) ReplyReport report = {};
        int r;

        if (!params)
                return client_fail(EXIT_FAILED, "out of memory.");
        /* The daemon answers once the context's kernel is gone, by default within its stop_timeout. */
        if (o->timeout != USEC_INFINITY &&
            json_object_set_new(params, "timeout", json_real(client_seconds(o->timeout))) < 0)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = call_report(o, "remove", TAKE_PTR(params),
                        o->timeout != USEC_INFINITY ? o->timeout + CLIENT_REPLY_GRACE_USEC : RELOAD_WAIT_USEC, &j,
                        &report);
        return r != EXIT_OK ? r : print_report(o, j, &report);
}

/* ---- The verbs ---- */

static const Verb verbs[] = {
        { "status", "[CTX...]",
          "state of the daemon and its contexts (exit 1 unless\nall are up and the daemon is not degraded)", 0,
          UINT_MAX, ARGS_CONTEXTS, cmd_status },
        { "exec", "CTX [CODE|-]",
          "run a cell in the context's kernel (code from stdin\nwithout CODE or with -) and print its outputs", 1, 2,
          ARGS_CONTEXT, cmd_exec },
        { "attach", "ID",
          "print the outputs of an execution (exec --detach)\nfrom number --from N on (default 0), follow it\nuntil "
          "its end (at most --timeout) and exit as exec",
          1, 1, ARGS_NONE, cmd_attach },
        { "executions", "[CTX]", "list the recent executions (of a context)", 0, 1, ARGS_CONTEXTS, cmd_executions },
        { "cancel", "ID", "withdraw a queued execution or interrupt a running one", 1, 1, ARGS_NONE, cmd_cancel },
        { "interrupt", "CTX", "interrupt the cell running in a context (any client's)", 1, 1, ARGS_CONTEXT,
          cmd_interrupt },
        { "check", "CTX",
          "wait until the context is ready and answers; with\n--expect, say whether it is still that kernel", 1, 1,
          ARGS_CONTEXT, cmd_check },
        { "wait", "[CTX...]", "wait until the contexts (default: the autostart\nones) are ready", 0, UINT_MAX,
          ARGS_CONTEXTS, cmd_wait },
        { "start", "CTX", "start a context and wait until its kernel answers", 1, 1, ARGS_CONTEXT, cmd_start },
        { "stop", "CTX", "stop a context's kernel", 1, 1, ARGS_CONTEXT, cmd_stop },
        { "restart", "CTX", "replace a context's kernel with a new one", 1, 1, ARGS_CONTEXT, cmd_restart },
        { "reload", "",
          "re-read the configuration and apply what changed:\nnew contexts start, removed ones stop, changed "
          "ones\nrestart only when their process settings changed",
          0, 0, ARGS_NONE, cmd_reload },
        { "add", "CTX",
          "write contexts_dir/CTX.ini (--user, --group, --cwd,\n--env K=V..., --connection-file, --kernel, "
          "--transport,\n"
          "--restore) and apply it;\nwith --wait, until its kernel is ready",
          1, 1, ARGS_NEW_CONTEXT, cmd_add },
        { "remove", "CTX", "delete contexts_dir/CTX.ini, stop the context and wait\nuntil its kernel is gone", 1, 1,
          ARGS_NEW_CONTEXT, cmd_remove },
        { "history", "CTX", "print the cells journaled for the context's kernel\n(restore = replay), oldest first", 1,
          1, ARGS_CONTEXT, cmd_history },
        { "metrics", "",
          "print the metrics of the daemon and the contexts in\nthe OpenMetrics text format (--timeout as status)", 0,
          0, ARGS_NONE, cmd_metrics },
        { "kernels", "",
          "list the kernelspecs a context can name with kernel =\n(JUPYTER_PATH, ~/.local/share/jupyter, "
          "/usr/local/share\n"
          "and /usr/share/jupyter)",
          0, 0, ARGS_NONE, cmd_kernels },
        { "version", "", "print the version of kernelctl", 0, 0, ARGS_NONE, cmd_version },
        { "help", "", "show this help", 0, 0, ARGS_NONE, cmd_help },
};

/* "  status [CTX...]      state of the daemon ...", further lines of the summary under its first. */
static void help_verb(const Verb *v) {
        char head[64];
        const char *line = v->summary;

        snprintf(head, sizeof head, "%s%s%s", v->name, *v->synopsis ? " " : "", v->synopsis);
        printf("  %-20s ", head);
        for (;;) {
                const char *nl = strchr(line, '\n');

                if (!nl) {
                        printf("%s\n", line);
                        return;
                }
                printf("%.*s\n%23s", (int) (nl - line), line, "");
                line = nl + 1;
        }
}

static void help(void) {
        printf("kernelctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]\n"
               "\n"
               "Query and control kernelsupd, the supervisor of Jupyter kernels.\n"
               "\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                help_verb(&verbs[i]);
        printf("\n"
               "Options:\n"
               "  --socket PATH        control socket (default: $KERNELSUP_SOCKET, else\n"
               "                       " DEFAULT_SOCKET ")\n"
               "  --json               print the daemon's reply as JSON\n"
               "  --timeout SECONDS    how long start, restart and stop may take (start and\n"
               "                       restart: default 60); for status, how long to wait\n"
               "                       for the reply (default 15); exec: the cell's timeout\n"
               "                       (default none); check: default 10; wait: default 60;\n"
               "                       remove: how long to wait for the kernel to be gone\n"
               "                       (default: its stop_timeout + 1); add --wait:\n"
               "                       default 60\n"
               "                       more than 0 and at most 86400 (one day)\n"
               "  --stream             exec, attach: print each output as a JSON line as it arrives,\n"
               "                       then the result\n"
               "  --traceback          exec, attach: print the whole traceback of an error\n"
               "  --max-output SIZE    exec: keep at most SIZE bytes of the cell's text (4K,\n"
               "                       1M; 1K to 1G), its head and its tail with a line\n"
               "                       saying what was dropped between them\n"
               "  --save-images DIR    exec: write each image of the cell to DIR as\n"
               "                       output-N.png (N the first number free) and name the\n"
               "                       file in the image's line\n"
               "  --kill-after SECONDS exec: when an interrupt of the cell (its timeout,\n"
               "                       kernelctl interrupt) has not ended it this long\n"
               "                       after, kill the kernel and start a new one (the\n"
               "                       namespace is lost; the cell ends died, exit 1)\n"
               "  --detach             exec: print the execution's id once the cell is\n"
               "                       accepted and leave it running (exit 0)\n"
               "  --from N             attach: the first output to print (default 0)\n"
               "  --expect KERNEL_ID   check: the kernel_id saved earlier\n"
               "  --dry-run            reload: print what would change, change nothing\n"
               "  --user U, --group G, --cwd DIR, --env K=V, --connection-file PATH\n"
               "  --kernel NAME, --transport auto|ipc|tcp, --restore none|replay\n"
               "                       add: the new context's settings (--env repeats)\n"
               "  --wait               add: start the new context and wait until its kernel\n"
               "                       is ready\n"
               "  --version            print the version of kernelctl\n"
               "  -h, --help           show this help\n"
               "\n"
               "Exit status: 0 ok, 1 failed, 2 usage, 3 kernelsupd not reachable,\n"
               "4 permission denied, 5 no such context (or execution), 6 timed out,\n"
               "7 the cell raised, 8 kernel replaced (namespace lost), 9 kernel replaced,\n"
               "namespace rebuilt by replaying its journal (restore = replay), 10 the\n"
               "kernel aborted the cell, 11 the cell never started (its timeout passed\n"
               "while it waited; it will not run).\n"
               "See kernelctl(1).\n");
}

/* Context names are checked before the verb runs, and before it reads its cell from stdin. */
static int check_context_args(const Verb *v, char **args, unsigned n_args) {
        unsigned n = v->args == ARGS_CONTEXTS ? n_args : v->args == ARGS_NONE ? 0 : 1;

        for (unsigned i = 0; i < n; i++)
                if (!context_name_valid(args[i]))
                        return client_usage_error("invalid context name: '%s'%s", args[i],
                                                  v->args == ARGS_NEW_CONTEXT ? " (expected [A-Za-z0-9_.-]{1,64})"
                                                                              : "");
        return EXIT_OK;
}

static int parse_timeout(const char *s, usec_t *ret) {
        usec_t u;

        if (parse_duration(s, &u) < 0 || u == 0 || u == USEC_INFINITY || u > MAX_TIMEOUT_USEC)
                return -EINVAL;
        *ret = u;
        return 0;
}

int main(int argc, char *argv[]) {
        enum {
                ARG_SOCKET = 0x100,
                ARG_JSON,
                ARG_TIMEOUT,
                ARG_VERSION,
                ARG_STREAM,
                ARG_TRACEBACK,
                ARG_EXPECT,
                ARG_DRY_RUN,
                ARG_USER,
                ARG_GROUP,
                ARG_CWD,
                ARG_ENV,
                ARG_CONNECTION_FILE,
                ARG_WAIT,
                ARG_KERNEL,
                ARG_TRANSPORT,
                ARG_RESTORE,
                ARG_MAX_OUTPUT,
                ARG_SAVE_IMAGES,
                ARG_DETACH,
                ARG_KILL_AFTER,
                ARG_FROM,
        };
        static const struct option options[] = {
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "json", no_argument, NULL, ARG_JSON },
                { "timeout", required_argument, NULL, ARG_TIMEOUT },
                { "version", no_argument, NULL, ARG_VERSION },
                { "stream", no_argument, NULL, ARG_STREAM },
                { "traceback", no_argument, NULL, ARG_TRACEBACK },
                { "expect", required_argument, NULL, ARG_EXPECT },
                { "dry-run", no_argument, NULL, ARG_DRY_RUN },
                { "user", required_argument, NULL, ARG_USER },
                { "group", required_argument, NULL, ARG_GROUP },
                { "cwd", required_argument, NULL, ARG_CWD },
                { "env", required_argument, NULL, ARG_ENV },
                { "connection-file", required_argument, NULL, ARG_CONNECTION_FILE },
                { "wait", no_argument, NULL, ARG_WAIT },
                { "kernel", required_argument, NULL, ARG_KERNEL },
                { "transport", required_argument, NULL, ARG_TRANSPORT },
                { "restore", required_argument, NULL, ARG_RESTORE },
                { "max-output", required_argument, NULL, ARG_MAX_OUTPUT },
                { "save-images", required_argument, NULL, ARG_SAVE_IMAGES },
                { "detach", no_argument, NULL, ARG_DETACH },
                { "kill-after", required_argument, NULL, ARG_KILL_AFTER },
                { "from", required_argument, NULL, ARG_FROM },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        Options o = { .timeout = USEC_INFINITY, .from = -1 };
        _cleanup_free_ char **env_list = NULL;
        bool add_options = false;
        const Verb *cmd = NULL;
        const char *env;
        unsigned n_args;
        int c, r;

        /* Our own messages, in our own format. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case ARG_SOCKET:
                        if (!*optarg)
                                return client_usage_error("--socket needs a path");
                        o.socket = optarg;
                        break;
                case ARG_JSON:
                        o.json = true;
                        break;
                case ARG_TIMEOUT:
                        if (parse_timeout(optarg, &o.timeout) < 0)
                                return client_usage_error(
                                        "invalid timeout '%s': seconds, more than 0 and at most 86400", optarg);
                        break;
                case ARG_KILL_AFTER:
                        if (parse_timeout(optarg, &o.kill_after) < 0)
                                return client_usage_error(
                                        "invalid --kill-after '%s': seconds, more than 0 and at most 86400", optarg);
                        break;
                case ARG_STREAM:
                        o.stream = true;
                        break;
                case ARG_TRACEBACK:
                        o.traceback = true;
                        break;
                case ARG_MAX_OUTPUT: {
                        const char *why = NULL;

                        if (parse_size(optarg, &o.max_output, &why) < 0)
                                return client_usage_error("invalid --max-output '%s': %s", optarg, why);
                        break;
                }
                case ARG_SAVE_IMAGES: {
                        struct stat st;

                        if (stat(optarg, &st) < 0)
                                return client_usage_error("invalid --save-images '%s': %s", optarg, strerror(errno));
                        if (!S_ISDIR(st.st_mode))
                                return client_usage_error("invalid --save-images '%s': not a directory", optarg);
                        o.save_images = optarg;
                        break;
                }
                case ARG_EXPECT:
                        if (!*optarg)
                                return client_usage_error("--expect needs a kernel_id");
                        o.expect = optarg;
                        break;
                case ARG_DRY_RUN:
                        o.dry_run = true;
                        break;
                case ARG_WAIT:
                        o.wait = true;
                        break;
                case ARG_DETACH:
                        o.detach = true;
                        break;
                case ARG_FROM: {
                        unsigned long long v;
                        if (parse_uint(optarg, 0, INT64_MAX, &v) < 0)
                                return client_usage_error("invalid --from '%s': an output's number, 0 or more",
                                                          optarg);
                        o.from = (long long) v;
                        break;
                }
                case ARG_USER:
                        o.user = optarg;
                        add_options = true;
                        break;
                case ARG_GROUP:
                        o.group = optarg;
                        add_options = true;
                        break;
                case ARG_CWD:
                        o.cwd = optarg;
                        add_options = true;
                        break;
                case ARG_CONNECTION_FILE:
                        o.connection_file = optarg;
                        add_options = true;
                        break;
                case ARG_KERNEL:
                        o.kernel = optarg;
                        add_options = true;
                        break;
                case ARG_TRANSPORT:
                        o.transport = optarg;
                        add_options = true;
                        break;
                case ARG_RESTORE:
                        o.restore = optarg;
                        add_options = true;
                        break;
                case ARG_ENV: {
                        char **grown = realloc(env_list, sizeof(char *) * (o.n_env + 2));
                        if (!grown)
                                return client_fail(EXIT_FAILED, "out of memory.");
                        env_list = grown;
                        env_list[o.n_env++] = optarg;
                        env_list[o.n_env] = NULL;
                        o.env = env_list;
                        add_options = true;
                        break;
                }
                case ARG_VERSION:
                        return version();
                case 'h':
                        help();
                        return EXIT_OK;
                case ':':
                        return client_usage_error("option '%s' needs an argument", argv[optind - 1]);
                default:
                        if (optopt)
                                return client_usage_error("invalid option -- '%c'", optopt);
                        return client_usage_error("unrecognized option '%s'", argv[optind - 1]);
                }

        if (optind >= argc)
                return client_usage_error("missing command");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(verbs[i].name, argv[optind]))
                        cmd = &verbs[i];
        if (!cmd)
                return client_usage_error("unknown command '%s'", argv[optind]);
        n_args = (unsigned) (argc - optind - 1);
        if (n_args < cmd->min_args)
                return client_usage_error("%s: missing %s", cmd->name,
                                          cmd->args == ARGS_NONE ? "execution id" : "context name");
        if (n_args > cmd->max_args)
                return client_usage_error("%s: too many arguments", cmd->name);
        if ((o.stream || o.traceback) && !streq(cmd->name, "exec") && !streq(cmd->name, "attach"))
                return client_usage_error("%s is an option of exec and attach", o.stream ? "--stream" : "--traceback");
        if (o.max_output && !streq(cmd->name, "exec"))
                return client_usage_error("--max-output is an option of exec");
        if (o.save_images && !streq(cmd->name, "exec"))
                return client_usage_error("--save-images is an option of exec");
        if (o.save_images && (o.json || o.stream))
                return client_usage_error("--save-images is for exec's text: --json and --stream carry the images");
        if (o.kill_after && !streq(cmd->name, "exec"))
                return client_usage_error("--kill-after is an option of exec");
        if (o.detach && !streq(cmd->name, "exec"))
                return client_usage_error("--detach is an option of exec");
        if (o.from >= 0 && !streq(cmd->name, "attach"))
                return client_usage_error("--from is an option of attach");
        if (o.expect && !streq(cmd->name, "check"))
                return client_usage_error("--expect is an option of check");
        if (o.dry_run && !streq(cmd->name, "reload"))
                return client_usage_error("--dry-run is an option of reload");
        if ((add_options || o.wait) && !streq(cmd->name, "add"))
                return client_usage_error(
                        "--user, --group, --cwd, --env, --connection-file, --kernel, --transport, --restore and "
                        "--wait are options of add");

        if (!o.socket) {
                env = getenv("KERNELSUP_SOCKET");
                o.socket = env && *env ? env : DEFAULT_SOCKET;
        }

        r = check_context_args(cmd, argv + optind + 1, n_args);
        if (r != EXIT_OK)
                return r;
        r = cmd->run(&o, argv + optind + 1, n_args);
        if (fflush(stdout) != 0 || ferror(stdout))
                return client_fail(EXIT_FAILED, "cannot write output: %s.", strerror(errno));
        return r;
}
