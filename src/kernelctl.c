/* kernelctl: the command line client of kernelsupd. Parses options, sends
 * one JSON-RPC request over the control socket, waits for its reply and
 * prints it for people (or as JSON), with the exit codes of doc/design.md (section 6). */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macro.h"
#include "protocol.h"
#include "util.h"

#define DEFAULT_SOCKET RUNSTATEDIR "/kernelsup/control.sock"
#define REQUEST_ID 1
/* Replies are not bounded like requests (a status of many contexts), but a
 * line this long is no reply of ours. */
#define MAX_REPLY_LINE (64 * 1024 * 1024)
#define MAX_TIMEOUT_USEC (86400 * USEC_PER_SEC)

#define STATUS_WAIT_USEC (15 * USEC_PER_SEC)
#define CHECK_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define WAIT_TIMEOUT_USEC (60 * USEC_PER_SEC)
/* exec waits this much beyond the cell's timeout: the kernel has 5 s to
 * answer the interrupt, and the outputs take time to arrive. */
#define EXEC_GRACE_USEC (10 * USEC_PER_SEC)
/* How often check and wait try to connect while the daemon is not listening yet. */
#define CONNECT_RETRY_USEC (50 * USEC_PER_MSEC)
#define STOP_WAIT_USEC (60 * USEC_PER_SEC)
#define START_TIMEOUT_USEC (60 * USEC_PER_SEC)
/* start and restart wait this much beyond the timeout the daemon itself applies. */
#define REPLY_GRACE_USEC (5 * USEC_PER_SEC)

typedef struct Options {
        const char *socket;
        bool json;
        bool stream;        /* exec: JSON lines as outputs arrive */
        bool traceback;     /* exec: whole tracebacks */
        const char *expect; /* check: the kernel_id saved earlier */
        usec_t timeout;     /* USEC_INFINITY when not given */
        bool dry_run;       /* reload: say what would change */
        bool wait;          /* add: until the new context's kernel is ready */
        /* add: the new context's settings; env is NULL-terminated. */
        const char *user, *group, *cwd, *connection_file;
        char **env;
        unsigned n_env;
} Options;

typedef struct Command {
        const char *name;
        unsigned min_args, max_args;
        int (*run)(const Options *o, char **args, unsigned n_args);
} Command;

static void help(void) {
        printf("kernelctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]\n"
               "\n"
               "Query and control kernelsupd, the supervisor of Jupyter kernels.\n"
               "\n"
               "Commands:\n"
               "  status [CTX...]      state of the daemon and its contexts (exit 1 unless\n"
               "                       all are up and the daemon is not degraded)\n"
               "  exec CTX [CODE|-]    run a cell in the context's kernel (code from stdin\n"
               "                       without CODE or with -) and print its outputs\n"
               "  interrupt CTX        interrupt the cell running in a context\n"
               "  check CTX            wait until the context is ready and answers; with\n"
               "                       --expect, say whether it is still that kernel\n"
               "  wait [CTX...]        wait until the contexts (default: the autostart\n"
               "                       ones) are ready\n"
               "  start CTX            start a context and wait until its kernel answers\n"
               "  stop CTX             stop a context's kernel\n"
               "  restart CTX          replace a context's kernel with a new one\n"
               "  reload               re-read the configuration and apply what changed:\n"
               "                       new contexts start, removed ones stop, changed ones\n"
               "                       restart only when their process settings changed\n"
               "  add CTX              write contexts_dir/CTX.ini (--user, --group, --cwd,\n"
               "                       --env K=V..., --connection-file) and apply it;\n"
               "                       with --wait, until its kernel is ready\n"
               "  remove CTX           delete contexts_dir/CTX.ini, stop the context and wait\n"
               "                       until its kernel is gone\n"
               "  version              print the version of kernelctl\n"
               "  help                 show this help\n"
               "\n"
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
               "  --stream             exec: print each output as a JSON line as it arrives,\n"
               "                       then the result\n"
               "  --traceback          exec: print the whole traceback of an error\n"
               "  --expect KERNEL_ID   check: the kernel_id saved earlier\n"
               "  --dry-run            reload: print what would change, change nothing\n"
               "  --user U, --group G, --cwd DIR, --env K=V, --connection-file PATH\n"
               "                       add: the new context's settings (--env repeats)\n"
               "  --wait               add: start the new context and wait until its kernel\n"
               "                       is ready\n"
               "  --version            print the version of kernelctl\n"
               "  -h, --help           show this help\n"
               "\n"
               "Exit status: 0 ok, 1 failed, 2 usage, 3 kernelsupd not reachable,\n"
               "4 permission denied, 5 no such context, 6 timed out, 7 the cell raised,\n"
               "8 kernel replaced (namespace lost).\n"
               "See kernelctl(1).\n");
}

static int version(void) {
        printf("kernelctl %s\n", PACKAGE_VERSION);
        return EXIT_OK;
}

_printf_(1, 2) static int usage_error(const char *fmt, ...) {
        va_list ap;

        fputs("kernelctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'kernelctl --help'.\n", stderr);
        return EXIT_USAGE;
}

_printf_(2, 3) static int fail(int exit_code, const char *fmt, ...) {
        va_list ap;

        fputs("kernelctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return exit_code;
}

/* Text from the daemon goes to a terminal: control characters (an escape
 * sequence in an error message) are shown as '?', and line breaks, unless
 * keep_newlines, as spaces. */
static char *sanitize(const char *s, bool keep_newlines) {
        char *copy = strdup(s ?: "");

        if (!copy)
                return NULL;
        for (char *p = copy; *p; p++) {
                unsigned char ch = (unsigned char) *p;

                if (ch == '\n' || ch == '\t' || ch == '\r')
                        *p = (keep_newlines && ch != '\r') ? (char) ch : ' ';
                else if (ch < 0x20 || ch == 0x7f)
                        *p = '?';
        }
        return copy;
}

static double usec_to_seconds(usec_t u) {
        return (double) u / (double) USEC_PER_SEC;
}

/* Connects to the control socket: 0, or -errno of socket() or connect(). */
static int connect_raw(const char *path, usec_t wait, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = {
                .tv_sec = (time_t) (wait / USEC_PER_SEC),
                .tv_usec = (suseconds_t) (wait % USEC_PER_SEC),
        };

        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* connect() on a Unix socket whose backlog is full blocks for up to SO_SNDTIMEO,
         * so a wedged daemon cannot hold us past the timeout. */
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        while (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                if (errno != EINTR)
                        return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Nobody listens (yet): the daemon is not running, or still starting. */
static bool connect_error_unreachable(int e) {
        return e == ENOENT || e == ECONNREFUSED || e == ENOTSOCK || e == ENOTDIR;
}

static int connect_failed(const char *path, usec_t wait, int e) {
        switch (e) {
        case ENOENT:
        case ECONNREFUSED:
        case ENOTSOCK:
        case ENOTDIR:
                return fail(EXIT_UNREACHABLE, "kernelsupd is not running: cannot connect to %s (%s).", path,
                            strerror(e));
        case EACCES:
        case EPERM:
                return fail(EXIT_PERMISSION, "permission denied on %s.", path);
        case EAGAIN:
        case EINPROGRESS:
                return fail(EXIT_TIMEOUT, "no reply from kernelsupd within %g s.", usec_to_seconds(wait));
        default:
                return fail(EXIT_UNREACHABLE, "cannot connect to %s (%s).", path, strerror(e));
        }
}

static bool socket_path_ok(const char *path) {
        return strlen(path) < sizeof(((struct sockaddr_un *) NULL)->sun_path);
}

static int connect_daemon(const char *path, usec_t wait, int *ret_fd) {
        int r;

        if (!socket_path_ok(path))
                return usage_error("socket path too long: %s", path);
        r = connect_raw(path, wait, ret_fd);
        if (r == -EMFILE || r == -ENFILE || r == -ENOMEM || r == -ENOBUFS || r == -EAFNOSUPPORT)
                return fail(EXIT_FAILED, "cannot create a socket: %s.", strerror(-r));
        return r < 0 ? connect_failed(path, wait, -r) : EXIT_OK;
}

/* check and wait: the daemon may be starting (or restarting): try again
 * while nobody listens, until deadline (CLOCK_MONOTONIC). */
static int connect_retry(const char *path, usec_t deadline, usec_t total, int *ret_fd) {
        if (!socket_path_ok(path))
                return usage_error("socket path too long: %s", path);
        for (;;) {
                usec_t now = now_usec(CLOCK_MONOTONIC), nap;
                int r = connect_raw(path, deadline > now ? deadline - now : 1, ret_fd);

                if (r >= 0)
                        return EXIT_OK;
                if (!connect_error_unreachable(-r))
                        return connect_failed(path, total, -r);
                now = now_usec(CLOCK_MONOTONIC);
                if (now >= deadline)
                        return fail(EXIT_UNREACHABLE, "kernelsupd did not become reachable on %s within %g s (%s).",
                                    path, usec_to_seconds(total), strerror(-r));
                nap = deadline - now < CONNECT_RETRY_USEC ? deadline - now : CONNECT_RETRY_USEC;
                (void) nanosleep(&(struct timespec){ .tv_sec = (time_t) (nap / USEC_PER_SEC),
                                                     .tv_nsec = (long) (nap % USEC_PER_SEC) * 1000 },
                                 NULL);
        }
}

static int send_all(int fd, const char *data, size_t len) {
        while (len > 0) {
                ssize_t k = send(fd, data, len, MSG_NOSIGNAL);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                data += k;
                len -= (size_t) k;
        }
        return 0;
}

/* Prints a daemon error and returns its exit code. */
static int report_error(int code, const char *message) {
        _cleanup_free_ char *text = sanitize(message, true);

        fprintf(stderr, "kernelctl: %s\n", text ?: "error");
        return protocol_exit_code(code);
}

/* The reply to our request: an answer with our id, or an error the daemon
 * could not address (a null id, e.g. "too many connections"). */
static bool message_is_ours(const RpcMessage *m) {
        if (json_is_integer(m->id) && json_integer_value(m->id) == REQUEST_ID)
                return true;
        return m->kind == RPC_ERROR && json_is_null(m->id);
}

/* The daemon's answer: its result, or its error. */
typedef struct Reply {
        json_t *result; /* NULL for an error */
        int code;
        char *message;
        json_t *data; /* of an error; may be NULL */
} Reply;

static void reply_done(Reply *r) {
        json_decref(r->result);
        json_decref(r->data);
        free(r->message);
        *r = (Reply){};
}

typedef void (*notify_fn)(const RpcMessage *m, void *userdata);

/* Sends one request on fd and waits up to wait (USEC_INFINITY: for ever)
 * for its reply, handing notifications to on_notify (may be NULL). Returns
 * EXIT_OK with *ret set when the daemon answered (with a result or an
 * error); otherwise prints the problem and returns the exit code. */
/* check and wait outlive a daemon that dies under them (a crash, the watchdog): they connect
 * again to its successor. transact() then returns EXIT_LOST quietly when the connection drops. */
#define EXIT_LOST 100
static bool lost_is_retried;

static int transact(int fd, const char *method, json_t *params, usec_t wait, notify_fn on_notify, void *userdata,
                    Reply *ret) {
        _cleanup_free_ char *request = NULL, *buf = NULL;
        size_t len = 0, alloc = 0;
        usec_t deadline;
        int send_error, r;

        request = protocol_request(REQUEST_ID, method, params);
        if (!request)
                return fail(EXIT_FAILED, "out of memory.");
        if (strlen(request) - 1 > PROTOCOL_MAX_LINE)
                return fail(EXIT_FAILED, "the request is too large (%zu bytes; kernelsupd takes at most %d).",
                            strlen(request) - 1, PROTOCOL_MAX_LINE);
        /* A daemon that refuses us says why on a line and closes: read it even if the send failed. */
        send_error = send_all(fd, request, strlen(request));
        deadline = wait == USEC_INFINITY ? USEC_INFINITY : now_usec(CLOCK_MONOTONIC) + wait;

        for (;;) {
                char *nl = len ? memchr(buf, '\n', len) : NULL;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int poll_ms = -1;
                ssize_t k;

                if (nl) {
                        RpcMessage m;
                        size_t n = (size_t) (nl - buf);

                        r = protocol_parse_message(buf, n, &m);
                        memmove(buf, nl + 1, len - n - 1);
                        len -= n + 1;
                        if (r < 0)
                                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
                        if (m.kind == RPC_NOTIFICATION) {
                                if (on_notify)
                                        on_notify(&m, userdata);
                                rpc_message_done(&m);
                                continue;
                        }
                        if (!message_is_ours(&m)) {
                                rpc_message_done(&m);
                                continue;
                        }
                        *ret = (Reply){
                                .result = m.kind == RPC_RESULT ? json_incref(m.result) : NULL,
                                .code = m.code,
                                .message = m.kind == RPC_ERROR ? strdup(m.message ?: "error") : NULL,
                                .data = m.kind == RPC_ERROR ? json_incref(m.data) : NULL,
                        };
                        rpc_message_done(&m);
                        return EXIT_OK;
                }

                if (deadline != USEC_INFINITY) {
                        usec_t now = now_usec(CLOCK_MONOTONIC);

                        if (now >= deadline)
                                return fail(EXIT_TIMEOUT, "no reply from kernelsupd within %g s.",
                                            usec_to_seconds(wait));
                        poll_ms = (int) ((deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC);
                }
                r = poll(&p, 1, poll_ms);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return fail(EXIT_FAILED, "poll failed: %s.", strerror(errno));
                }
                if (r == 0)
                        continue;

                if (alloc - len < 65536) {
                        char *b;

                        if (alloc >= MAX_REPLY_LINE)
                                return fail(EXIT_FAILED, "invalid reply from kernelsupd (line too long).");
                        b = realloc(buf, alloc * 2 + 65536);
                        if (!b)
                                return fail(EXIT_FAILED, "out of memory.");
                        buf = b;
                        alloc = alloc * 2 + 65536;
                }
                k = recv(fd, buf + len, alloc - len, 0);
                if (k < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        if (lost_is_retried)
                                return EXIT_LOST;
                        return fail(EXIT_FAILED, "lost the connection to kernelsupd: %s.", strerror(errno));
                }
                if (k == 0) {
                        if (lost_is_retried)
                                return EXIT_LOST;
                        if (send_error < 0)
                                return fail(EXIT_FAILED, "cannot send to kernelsupd: %s.", strerror(-send_error));
                        return fail(EXIT_FAILED, "kernelsupd closed the connection without replying.");
                }
                len += (size_t) k;
        }
}

/* Sends one request and waits up to wait for its reply. On success the
 * result is returned in *ret_result; otherwise the problem is printed and
 * the exit code returned. */
static int call(const Options *o, const char *method, json_t *params, usec_t wait, json_t **ret_result) {
        json_auto_t *owned = params;
        _cleanup_close_ int fd = -1;
        Reply reply = {};
        int r;

        r = connect_daemon(o->socket, wait, &fd);
        if (r != EXIT_OK)
                return r;
        r = transact(fd, method, TAKE_PTR(owned), wait, NULL, NULL, &reply);
        if (r != EXIT_OK)
                return r;
        if (!reply.result) {
                r = report_error(reply.code, reply.message);
                reply_done(&reply);
                return r;
        }
        *ret_result = TAKE_PTR(reply.result);
        reply_done(&reply);
        return EXIT_OK;
}

static int print_json(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) < 0)
                return fail(EXIT_FAILED, "cannot write the reply.");
        putchar('\n');
        return EXIT_OK;
}

static bool state_is_up(const char *state) {
        return state && (streq(state, "ready") || streq(state, "busy"));
}

static const char *object_string(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static char *format_integer(const json_t *j) {
        char *s;

        if (!json_is_integer(j))
                return strdup("-");
        return asprintf(&s, "%lld", (long long) json_integer_value(j)) < 0 ? NULL : s;
}

/* H:MM:SS, or "Nd H:MM:SS" from a day on. */
static char *format_uptime(const json_t *j) {
        unsigned long long s;
        double v;
        char *out;
        int r;

        if (!json_is_number(j))
                return strdup("-");
        v = json_number_value(j);
        s = (isfinite(v) && v > 0) ? (v < 1e15 ? (unsigned long long) v : 999999999999999ULL) : 0;
        if (s >= 86400)
                r = asprintf(&out, "%llud %llu:%02llu:%02llu", s / 86400, (s / 3600) % 24, (s / 60) % 60, s % 60);
        else
                r = asprintf(&out, "%llu:%02llu:%02llu", s / 3600, (s / 60) % 60, s % 60);
        return r < 0 ? NULL : out;
}

enum { COL_NAME, COL_STATE, COL_PID, COL_UPTIME, COL_RESTARTS, COL_INCARNATION, COL_TRANSPORT, COL_INFO, N_COLUMNS };

static void row_free(char **row) {
        for (size_t i = 0; i < N_COLUMNS; i++)
                free(row[i]);
}

static int status_row(const json_t *ctx, char **row) {
        const char *state = object_string(ctx, "state");
        const char *error = object_string(ctx, "last_error");

        row[COL_NAME] = sanitize(object_string(ctx, "name") ?: "?", false);
        row[COL_STATE] = sanitize(state ?: "?", false);
        row[COL_PID] = format_integer(json_object_get(ctx, "pid"));
        row[COL_UPTIME] = format_uptime(json_object_get(ctx, "uptime"));
        row[COL_RESTARTS] = format_integer(json_object_get(ctx, "restarts"));
        row[COL_INCARNATION] = format_integer(json_object_get(ctx, "incarnation"));
        row[COL_TRANSPORT] = sanitize(object_string(ctx, "transport") ?: "-", false);
        row[COL_INFO] = sanitize(!state_is_up(state) && error ? error : "", false);
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

/* A table like supervisorctl's; exit 0 only when every listed context is up. */
static int print_status_table(const json_t *contexts) {
        static const char *const header[N_COLUMNS] = { "NAME",     "STATE",       "PID",       "UPTIME",
                                                       "RESTARTS", "INCARNATION", "TRANSPORT", "INFO" };
        size_t n = json_array_size(contexts), widths[N_COLUMNS], n_tcp = 0;
        _cleanup_free_ char **rows = NULL;
        int r = EXIT_OK;

        rows = calloc(n ? n * N_COLUMNS : 1, sizeof(char *));
        if (!rows)
                return fail(EXIT_FAILED, "out of memory.");
        for (size_t i = 0; i < N_COLUMNS; i++)
                widths[i] = strlen(header[i]);
        for (size_t i = 0; i < n; i++) {
                char **row = rows + i * N_COLUMNS;

                if (status_row(json_array_get(contexts, i), row) < 0) {
                        r = fail(EXIT_FAILED, "out of memory.");
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
finish:
        for (size_t i = 0; i < n; i++)
                row_free(rows + i * N_COLUMNS);
        return r;
}

static int validate_contexts(char **args, unsigned n_args) {
        for (unsigned i = 0; i < n_args; i++)
                if (!context_name_valid(args[i]))
                        return usage_error("invalid context name: '%s'", args[i]);
        return EXIT_OK;
}

static int cmd_status(const Options *o, char **args, unsigned n_args) {
        json_auto_t *params = NULL, *result = NULL;
        const char *degraded;
        const json_t *contexts;
        size_t i;
        const json_t *ctx;
        int r;

        r = validate_contexts(args, n_args);
        if (r != EXIT_OK)
                return r;
        if (n_args > 0) {
                json_t *names = json_array();

                params = json_pack("{s:o}", "contexts", names);
                if (!params)
                        return fail(EXIT_FAILED, "out of memory.");
                for (unsigned k = 0; k < n_args; k++)
                        if (json_array_append_new(names, json_string(args[k])) < 0)
                                return fail(EXIT_FAILED, "out of memory.");
        }

        r = call(o, "status", TAKE_PTR(params), o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC, &result);
        if (r != EXIT_OK)
                return r;

        contexts = json_object_get(result, "contexts");
        if (!json_is_object(result) || !json_is_array(contexts))
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");

        degraded = object_string(json_object_get(result, "supervisor"), "degraded");
        if (degraded && !o->json) {
                _cleanup_free_ char *shown = sanitize(degraded, false);
                printf("kernelsupd is degraded: %s\n", shown ?: "?");
        }
        r = o->json ? print_json(result) : print_status_table(contexts);
        if (r != EXIT_OK)
                return r;
        /* A state that is not on disk is lost at the next crash: not a state to call healthy. */
        if (degraded)
                return EXIT_FAILED;
        json_array_foreach(contexts, i, ctx) {
                if (!state_is_up(object_string(ctx, "state")))
                        return EXIT_FAILED;
        }
        return EXIT_OK;
}

/* Sends start, stop or restart for name and waits for the context's status after the action (*ret_result). */
static int action_call(const Options *o, const char *method, const char *name, json_t **ret_result) {
        json_auto_t *params = NULL;
        bool is_stop = streq(method, "stop");
        usec_t timeout = o->timeout, wait;
        int r;

        if (timeout == USEC_INFINITY && !is_stop)
                timeout = START_TIMEOUT_USEC;
        /* stop without --timeout leaves the daemon its configured stop timeout. */
        wait = timeout == USEC_INFINITY ? STOP_WAIT_USEC : timeout + REPLY_GRACE_USEC;

        params = json_pack("{s:s}", "context", name);
        if (!params)
                return fail(EXIT_FAILED, "out of memory.");
        if (timeout != USEC_INFINITY &&
            json_object_set_new(params, "timeout",
                                timeout % USEC_PER_SEC == 0 ? json_integer((json_int_t) (timeout / USEC_PER_SEC))
                                                            : json_real(usec_to_seconds(timeout))) < 0)
                return fail(EXIT_FAILED, "out of memory.");
        r = call(o, method, TAKE_PTR(params), wait, ret_result);
        if (r != EXIT_OK)
                return r;
        if (!json_is_object(*ret_result) || !object_string(*ret_result, "state")) {
                json_decref(TAKE_PTR(*ret_result));
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
        }
        return EXIT_OK;
}

/* Prints the context's status after the action as one line ("a: ready (pid 12, incarnation 3)"); exit 1 when it
 * did not end where the action should have left it. */
static int action_print(const char *name, const json_t *result) {
        _cleanup_free_ char *shown_name = NULL, *shown_state = NULL;
        const char *state = object_string(result, "state");
        const json_t *pid = json_object_get(result, "pid");

        shown_name = sanitize(object_string(result, "name") ?: name, false);
        shown_state = sanitize(state, false);
        if (!shown_name || !shown_state)
                return fail(EXIT_FAILED, "out of memory.");
        if (json_is_integer(pid))
                printf("%s: %s (pid %lld, incarnation %lld)\n", shown_name, shown_state,
                       (long long) json_integer_value(pid),
                       (long long) json_integer_value(json_object_get(result, "incarnation")));
        else
                printf("%s: %s\n", shown_name, shown_state);
        return EXIT_OK;
}

/* The reply came, but the context did not end where the action should have left it: exit 1, saying why. */
static int action_verdict(bool is_stop, const char *name, const json_t *result) {
        const char *state = object_string(result, "state");
        _cleanup_free_ char *shown_name = NULL, *shown_state = NULL, *error = NULL;

        if (is_stop ? streq(state, "stopped") : state_is_up(state))
                return EXIT_OK;
        shown_name = sanitize(object_string(result, "name") ?: name, false);
        shown_state = sanitize(state, false);
        error = sanitize(object_string(result, "last_error") ?: "", false);
        return fail(EXIT_FAILED, "%s is %s, not %s%s%s.", shown_name ?: "?", shown_state ?: "?",
                    is_stop ? "stopped" : "ready", error && *error ? ": " : "", error ?: "");
}

/* start, stop and restart: the result is the context's status after the action. */
static int cmd_action(const Options *o, const char *method, const char *name) {
        json_auto_t *result = NULL;
        bool is_stop = streq(method, "stop");
        int r;

        if (!context_name_valid(name))
                return usage_error("invalid context name: '%s'", name);
        r = action_call(o, method, name, &result);
        if (r != EXIT_OK)
                return r;
        r = o->json ? print_json(result) : action_print(name, result);
        if (r != EXIT_OK)
                return r;
        return action_verdict(is_stop, name, result);
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

static int cmd_help(const Options *o, char **args, unsigned n_args) {
        help();
        return EXIT_OK;
}

/* ---- exec ---- */

/* Removes ANSI escape sequences (CSI: ESC [ parameters final-byte; and
 * two-byte ESC X) in place: IPython colours its tracebacks. */
static void strip_ansi(char *s) {
        char *w = s;

        for (const char *p = s; *p;) {
                if (*p != '\033') {
                        *w++ = *p++;
                        continue;
                }
                p++;
                if (*p == '[') {
                        p++;
                        while (*p && !(*p >= 0x40 && *p <= 0x7e))
                                p++;
                        if (*p)
                                p++;
                } else if (*p)
                        p++;
        }
        *w = '\0';
}

/* Whether the last text written to stdout did not end its line: the summary goes on a line of its own. */
static bool stdout_mid_line;

/* Text mode: an output as a notebook shows it. */
static void print_output(const Options *o, const json_t *out) {
        const char *type = object_string(out, "output_type");

        if (!type)
                return;
        if (streq(type, "stream")) {
                const json_t *text = json_object_get(out, "text");
                const char *name = object_string(out, "name");
                FILE *f = name && streq(name, "stderr") ? stderr : stdout;

                if (!json_is_string(text))
                        return;
                /* Another stream may follow: keep the two in the order they came. */
                fflush(f == stdout ? stderr : stdout);
                fwrite(json_string_value(text), 1, json_string_length(text), f);
                fflush(f);
                if (f == stdout && json_string_length(text) > 0)
                        stdout_mid_line = json_string_value(text)[json_string_length(text) - 1] != '\n';
        } else if (streq(type, "execute_result") || streq(type, "display_data") ||
                   streq(type, "update_display_data")) {
                const json_t *data = json_object_get(out, "data");
                const char *plain = object_string(data, "text/plain");

                fflush(stderr);
                if (stdout_mid_line)
                        putchar('\n');
                stdout_mid_line = false;
                if (plain) {
                        size_t n = strlen(plain);

                        fputs(plain, stdout);
                        if (n == 0 || plain[n - 1] != '\n')
                                putchar('\n');
                } else if (json_is_object(data)) {
                        /* No text to show: say what there is, e.g. "[image/png]". */
                        const char *mime;
                        json_t *v;
                        bool first = true;

                        putchar('[');
                        json_object_foreach((json_t *) data, mime, v) {
                                _cleanup_free_ char *m = sanitize(mime, false);

                                printf("%s%s", first ? "" : ", ", m ?: "?");
                                first = false;
                        }
                        puts("]");
                }
                fflush(stdout);
        } else if (streq(type, "error")) {
                const json_t *tb = json_object_get(out, "traceback"), *line;
                size_t i;

                fflush(stdout);
                if (o->traceback && json_array_size(tb) > 0) {
                        bool keep_colour = isatty(STDERR_FILENO);

                        json_array_foreach(tb, i, line) {
                                _cleanup_free_ char *t = strdup(json_string_value(line) ?: "");

                                if (!t)
                                        continue;
                                if (!keep_colour)
                                        strip_ansi(t);
                                fprintf(stderr, "%s\n", t);
                        }
                } else {
                        _cleanup_free_ char *ename = strdup(object_string(out, "ename") ?: "Error");
                        _cleanup_free_ char *evalue = strdup(object_string(out, "evalue") ?: "");

                        if (ename && evalue) {
                                strip_ansi(ename);
                                strip_ansi(evalue);
                                fprintf(stderr, "%s%s%s\n", ename, *evalue ? ": " : "", evalue);
                        }
                }
                fflush(stderr);
        }
        /* clear_output: a terminal cannot take back what it printed. */
}

static void print_json_line(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) == 0)
                putchar('\n');
        fflush(stdout);
}

typedef struct ExecState {
        const Options *o;
        unsigned n_outputs; /* notifications received */
} ExecState;

static void exec_on_notify(const RpcMessage *m, void *userdata) {
        ExecState *st = userdata;
        const json_t *out = json_object_get(m->params, "output");

        if (!m->method || !streq(m->method, "output") || !json_is_object(out))
                return;
        st->n_outputs++;
        if (st->o->stream)
                print_json_line(out);
        else if (!st->o->json)
                print_output(st->o, out);
}

/* Reads the whole of stdin, up to the largest request the daemon takes. */
static int read_code(char **ret) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, alloc = 0;

        for (;;) {
                ssize_t k;

                if (alloc - len < 4096) {
                        char *b;

                        if (alloc > PROTOCOL_MAX_LINE)
                                return fail(EXIT_FAILED, "the cell is too large (kernelsupd takes at most %d bytes).",
                                            PROTOCOL_MAX_LINE);
                        b = realloc(buf, alloc * 2 + 65536);
                        if (!b)
                                return fail(EXIT_FAILED, "out of memory.");
                        buf = b;
                        alloc = alloc * 2 + 65536;
                }
                k = read(STDIN_FILENO, buf + len, alloc - len - 1);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return fail(EXIT_FAILED, "cannot read the cell from standard input: %s.", strerror(errno));
                }
                if (k == 0)
                        break;
                len += (size_t) k;
        }
        buf[len] = '\0';
        if (memchr(buf, '\0', len))
                return fail(EXIT_FAILED, "the cell contains a NUL byte.");
        *ret = TAKE_PTR(buf);
        return EXIT_OK;
}

static int exec_exit_code(const char *status) {
        if (!status)
                return EXIT_FAILED;
        if (streq(status, "ok"))
                return EXIT_OK;
        if (streq(status, "error"))
                return EXIT_CELL_ERROR;
        if (streq(status, "timeout"))
                return EXIT_TIMEOUT;
        return EXIT_FAILED;
}

/* Text mode's last line on stdout: "[ok #3]", "[died: kernel now K]", "[aborted]". */
static void print_exec_summary(const char *status, const json_t *count, const json_t *kernel_id, bool died) {
        _cleanup_free_ char *st = sanitize(status ?: "?", false);

        if (stdout_mid_line)
                putchar('\n');
        if (died && streq(status ?: "", "died")) {
                _cleanup_free_ char *k =
                        json_is_string(kernel_id) ? sanitize(json_string_value(kernel_id), false) : NULL;
                if (k)
                        printf("[%s: kernel now %s]\n", st ?: "?", k);
                else
                        printf("[%s: no kernel]\n", st ?: "?");
        } else if (!died && json_is_integer(count))
                printf("[%s #%lld]\n", st ?: "?", (long long) json_integer_value(count));
        else
                printf("[%s]\n", st ?: "?");
}

static int cmd_exec(const Options *o, char **args, unsigned n_args) {
        _cleanup_free_ char *stdin_code = NULL;
        json_auto_t *params = NULL;
        _cleanup_close_ int fd = -1;
        ExecState st = { .o = o };
        Reply reply = {};
        const char *code;
        const json_t *body, *outputs;
        const char *status;
        bool failed;
        usec_t wait;
        int r;

        if (!context_name_valid(args[0]))
                return usage_error("invalid context name: '%s'", args[0]);
        if (n_args < 2 || streq(args[1], "-")) {
                r = read_code(&stdin_code);
                if (r != EXIT_OK)
                        return r;
                code = stdin_code;
        } else
                code = args[1];

        params = json_pack("{s:s, s:s}", "context", args[0], "code", code);
        if (!params)
                /* jansson takes only UTF-8. */
                return fail(EXIT_FAILED, "the cell is not valid UTF-8 (or out of memory).");
        if (o->timeout != USEC_INFINITY &&
            json_object_set_new(params, "timeout",
                                o->timeout % USEC_PER_SEC == 0 ? json_integer((json_int_t) (o->timeout / USEC_PER_SEC))
                                                               : json_real(usec_to_seconds(o->timeout))) < 0)
                return fail(EXIT_FAILED, "out of memory.");
        /* Without a cell timeout the cell may run for ever, and so may we. */
        wait = o->timeout == USEC_INFINITY ? USEC_INFINITY : o->timeout + EXEC_GRACE_USEC;

        r = connect_daemon(o->socket, STATUS_WAIT_USEC, &fd);
        if (r != EXIT_OK)
                return r;
        r = transact(fd, "execute", TAKE_PTR(params), wait, exec_on_notify, &st, &reply);
        if (r != EXIT_OK)
                return r;

        /* A cell that did not run to its end (the kernel died, the context
         * stopped) comes as an error whose data is the result. */
        failed = !reply.result;
        body = failed ? reply.data : reply.result;
        status = object_string(body, "status");
        if (failed && (!json_is_object(body) || !status)) {
                r = report_error(reply.code, reply.message);
                reply_done(&reply);
                return r;
        }
        if (!json_is_object(body) || !status) {
                reply_done(&reply);
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
        }
        outputs = json_object_get(body, "outputs");

        if (o->json || o->stream) {
                json_auto_t *shown = json_deep_copy(body);

                if (!shown || (failed && json_object_set_new(shown, "message", json_string(reply.message)) < 0)) {
                        reply_done(&reply);
                        return fail(EXIT_FAILED, "out of memory.");
                }
                if (o->stream)
                        print_json_line(shown);
                else
                        (void) print_json(shown);
        } else {
                const json_t *out;
                size_t i;

                /* A daemon that streamed nothing: the outputs are in the result. */
                if (st.n_outputs == 0)
                        json_array_foreach(outputs, i, out) {
                                print_output(o, out);
                        }
                if (failed)
                        (void) report_error(reply.code, reply.message);
                print_exec_summary(status, json_object_get(body, "execution_count"),
                                   json_object_get(body, "kernel_id"), failed);
        }
        r = failed ? EXIT_FAILED : exec_exit_code(status);
        reply_done(&reply);
        return r;
}

static int cmd_interrupt(const Options *o, char **args, unsigned n_args) {
        json_auto_t *result = NULL;
        const json_t *any;
        int r;

        if (!context_name_valid(args[0]))
                return usage_error("invalid context name: '%s'", args[0]);
        r = call(o, "interrupt", json_pack("{s:s}", "context", args[0]),
                 o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC, &result);
        if (r != EXIT_OK)
                return r;
        any = json_object_get(result, "interrupted");
        if (!json_is_boolean(any))
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
        if (o->json)
                return print_json(result);
        puts(json_is_true(any) ? "interrupted" : "nothing running");
        return EXIT_OK;
}

/* ---- check and wait ---- */

static json_t *seconds_json(usec_t u) {
        return u % USEC_PER_SEC == 0 ? json_integer((json_int_t) (u / USEC_PER_SEC)) : json_real(usec_to_seconds(u));
}

/* "state X: last_error" or "state X". */
static char *describe_not_ready(const json_t *ctx) {
        _cleanup_free_ char *state = sanitize(object_string(ctx, "state") ?: "unknown", false);
        _cleanup_free_ char *error =
                object_string(ctx, "last_error") ? sanitize(object_string(ctx, "last_error"), false) : NULL;
        char *s;

        if (!state)
                return NULL;
        if (asprintf(&s, "state %s%s%s", state, error ? ": " : "", error ?: "") < 0)
                return NULL;
        return s;
}

/* For check and wait, which must outlive the daemon they ask: connects (retrying while the daemon is away),
 * sends method with params (borrowed) and "timeout" set to what is left of total, and asks again a successor
 * daemon when the connection drops before the answer. */
static int call_until(const Options *o, const char *method, const json_t *params, usec_t total, Reply *ret) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + total, left, now;
        _cleanup_close_ int fd = -1;
        int r;

        lost_is_retried = true;
        do {
                json_t *p;

                fd = safe_close(fd);
                r = connect_retry(o->socket, deadline, total, &fd);
                if (r != EXIT_OK)
                        return r;
                now = now_usec(CLOCK_MONOTONIC);
                /* What connecting took comes out of the daemon's share; at least a moment is left to it. */
                left = deadline > now + USEC_PER_MSEC ? deadline - now : USEC_PER_MSEC;
                p = json_deep_copy(params);
                if (!p || json_object_set_new(p, "timeout", seconds_json(left)) < 0) {
                        json_decref(p);
                        return fail(EXIT_FAILED, "out of memory.");
                }
                r = transact(fd, method, p, left + REPLY_GRACE_USEC, NULL, NULL, ret);
        } while (r == EXIT_LOST && now_usec(CLOCK_MONOTONIC) < deadline);
        if (r == EXIT_LOST)
                return fail(EXIT_UNREACHABLE, "kernelsupd went away and did not come back within %g s.",
                            usec_to_seconds(total));
        return r;
}

static int cmd_check(const Options *o, char **args, unsigned n_args) {
        usec_t total = o->timeout != USEC_INFINITY ? o->timeout : CHECK_TIMEOUT_USEC;
        json_auto_t *params = NULL, *shown = NULL;
        _cleanup_free_ char *name = NULL;
        Reply reply = {};
        const json_t *ctx, *sup;
        const char *verdict, *kernel_id = NULL;
        int r;

        if (!context_name_valid(args[0]))
                return usage_error("invalid context name: '%s'", args[0]);
        params = json_pack("{s:s}", "context", args[0]);
        if (!params)
                return fail(EXIT_FAILED, "out of memory.");
        r = call_until(o, "check", params, total, &reply);
        if (r != EXIT_OK)
                return r;

        name = sanitize(args[0], false);
        if (reply.result) {
                ctx = json_object_get(reply.result, "context");
                sup = json_object_get(reply.result, "supervisor");
                kernel_id = object_string(ctx, "kernel_id");
                if (!json_is_object(ctx) || !kernel_id) {
                        reply_done(&reply);
                        return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
                }
                verdict = !o->expect ? "ready" : streq(kernel_id, o->expect) ? "same" : "replaced";
                r = streq(verdict, "replaced") ? EXIT_REPLACED : EXIT_OK;
        } else if (reply.code == KS_ERR_TIMEOUT) {
                ctx = json_object_get(reply.data, "context");
                sup = json_object_get(reply.data, "supervisor");
                verdict = "not-ready";
                r = EXIT_TIMEOUT;
        } else {
                r = report_error(reply.code, reply.message);
                reply_done(&reply);
                return r;
        }

        if (o->json) {
                shown = json_pack("{s:s, s:o, s:O, s:O}", "verdict", verdict, "expected",
                                  o->expect ? json_string(o->expect) : json_null(), "context",
                                  json_is_object(ctx) ? (json_t *) ctx : json_null(), "supervisor",
                                  json_is_object(sup) ? (json_t *) sup : json_null());
                if (!shown || print_json(shown) != EXIT_OK) {
                        reply_done(&reply);
                        return fail(EXIT_FAILED, "out of memory.");
                }
        } else if (streq(verdict, "not-ready")) {
                _cleanup_free_ char *why = describe_not_ready(ctx);
                const char *state = object_string(ctx, "state");

                /* A kernel that is up but did not answer the probe is not "not ready": say what did not happen. */
                printf("%s: %s within %g s (%s)\n", name ?: "?",
                       state && (state_is_up(state) || streq(state, "unresponsive")) ? "no heartbeat answer"
                                                                                     : "not ready",
                       usec_to_seconds(total), why ?: "?");
        } else {
                _cleanup_free_ char *state = sanitize(object_string(ctx, "state") ?: "?", false);
                _cleanup_free_ char *kid = sanitize(kernel_id, false);
                _cleanup_free_ char *expected = o->expect ? sanitize(o->expect, false) : NULL;

                printf("%s: %s pid %lld kernel_id %s incarnation %lld generation %lld", name ?: "?", state ?: "?",
                       (long long) json_integer_value(json_object_get(ctx, "pid")), kid ?: "?",
                       (long long) json_integer_value(json_object_get(ctx, "incarnation")),
                       (long long) json_integer_value(json_object_get(sup, "generation")));
                if (streq(verdict, "same"))
                        puts(": same kernel, namespace intact");
                else if (streq(verdict, "replaced"))
                        printf(": kernel replaced (expected %s), namespace empty\n", expected ?: "?");
                else
                        putchar('\n');
        }
        reply_done(&reply);
        return r;
}

static int cmd_wait(const Options *o, char **args, unsigned n_args) {
        usec_t total = o->timeout != USEC_INFINITY ? o->timeout : WAIT_TIMEOUT_USEC;
        json_auto_t *params = NULL;
        Reply reply = {};
        const json_t *status, *contexts, *ctx;
        size_t i;
        int r;

        r = validate_contexts(args, n_args);
        if (r != EXIT_OK)
                return r;
        params = json_object();
        if (!params)
                return fail(EXIT_FAILED, "out of memory.");
        if (n_args > 0) {
                json_t *names = json_array();

                if (json_object_set_new(params, "contexts", names) < 0)
                        return fail(EXIT_FAILED, "out of memory.");
                for (unsigned k = 0; k < n_args; k++)
                        if (json_array_append_new(names, json_string(args[k])) < 0)
                                return fail(EXIT_FAILED, "out of memory.");
        }
        r = call_until(o, "wait", params, total, &reply);
        if (r != EXIT_OK)
                return r;

        if (reply.result)
                status = reply.result;
        else if (reply.code == KS_ERR_TIMEOUT && json_is_object(reply.data))
                status = reply.data;
        else {
                r = report_error(reply.code, reply.message);
                reply_done(&reply);
                return r;
        }
        contexts = json_object_get(status, "contexts");
        if (!json_is_array(contexts)) {
                reply_done(&reply);
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
        }

        r = reply.result ? EXIT_OK : EXIT_TIMEOUT;
        json_array_foreach(contexts, i, ctx) {
                if (!state_is_up(object_string(ctx, "state")))
                        r = EXIT_TIMEOUT;
        }
        if (o->json)
                (void) print_json(status);
        else if (r != EXIT_OK)
                json_array_foreach(contexts, i, ctx) {
                        _cleanup_free_ char *name = NULL, *why = NULL;

                        if (state_is_up(object_string(ctx, "state")))
                                continue;
                        name = sanitize(object_string(ctx, "name") ?: "?", false);
                        why = describe_not_ready(ctx);
                        fprintf(stderr, "kernelctl: %s: not ready within %g s (%s)\n", name ?: "?",
                                usec_to_seconds(total), why ?: "?");
                }
        reply_done(&reply);
        return r;
}

/* ---- reload, add, remove ---- */

/* Prints a reload report as lines: "added c", "restarted b (env changed)", "updated x (restart changed, ...)",
 * "removed d", "stopping d (...)", "unchanged 12"; settings that need a daemon restart go to stderr. */
static void print_name_line(const char *verb, const char *name, const char *why, const char *suffix) {
        _cleanup_free_ char *n = sanitize(name ?: "?", false), *w = why ? sanitize(why, false) : NULL;

        if (w)
                printf("%s %s (%s%s)\n", verb, n ?: "?", w, suffix);
        else
                printf("%s %s\n", verb, n ?: "?");
}

static int print_report(const Options *o, const json_t *report) {
        const json_t *v;
        size_t i;

        if (!json_is_object(report) || !json_is_integer(json_object_get(report, "unchanged")))
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
        if (o->json)
                return print_json(report);
        json_array_foreach(json_object_get(report, "added"), i, v)
                print_name_line("added", json_string_value(v), NULL, "");
        json_array_foreach(json_object_get(report, "restarted"), i, v)
                print_name_line("restarted", object_string(v, "name"), object_string(v, "reason") ?: "?", "");
        json_array_foreach(json_object_get(report, "updated"), i, v)
                print_name_line("updated", object_string(v, "name"), object_string(v, "setting") ?: "?",
                                " changed, applied without a restart");
        json_array_foreach(json_object_get(report, "removed"), i, v)
                print_name_line("removed", json_string_value(v), NULL, "");
        json_array_foreach(json_object_get(report, "stopping"), i, v)
                print_name_line("stopping", json_string_value(v), "its kernel has not exited yet", "");
        printf("unchanged %lld\n", (long long) json_integer_value(json_object_get(report, "unchanged")));
        json_array_foreach(json_object_get(report, "not_applied"), i, v) {
                _cleanup_free_ char *n = sanitize(json_string_value(v) ?: "?", false);
                fprintf(stderr, "kernelctl: not applied: %s\n", n ?: "?");
        }
        return EXIT_OK;
}

/* The daemon answers a reload once it has applied it, before restarted kernels are up. */
#define RELOAD_WAIT_USEC (60 * USEC_PER_SEC)

static int cmd_reload(const Options *o, char **args, unsigned n_args) {
        json_auto_t *report = NULL;
        json_t *params = json_pack("{s:b}", "dry_run", o->dry_run);
        int r;

        if (!params)
                return fail(EXIT_FAILED, "out of memory.");
        r = call(o, "reload", params, RELOAD_WAIT_USEC, &report);
        if (r != EXIT_OK)
                return r;
        return print_report(o, report);
}

/* add --wait: the context is started (when its kernel is not running yet) and answered for once its kernel is
 * ready, or has failed to start, within --timeout (default 60 s). With --json, one object: the report, and the
 * context's status as "context". */
static int add_wait(const Options *o, const char *name, json_t *report) {
        json_auto_t *result = NULL;
        int r;

        if (!o->json) {
                r = print_report(o, report);
                if (r != EXIT_OK)
                        return r;
        }
        r = action_call(o, "start", name, &result);
        if (r != EXIT_OK)
                return r;
        if (o->json) {
                if (json_object_set(report, "context", result) < 0)
                        return fail(EXIT_FAILED, "out of memory.");
                r = print_report(o, report);
        } else
                r = action_print(name, result);
        if (r != EXIT_OK)
                return r;
        return action_verdict(false, name, result);
}

static int cmd_add(const Options *o, char **args, unsigned n_args) {
        const struct {
                const char *key, *value;
        } settings[] = {
                { "user", o->user },
                { "group", o->group },
                { "cwd", o->cwd },
                { "connection_file", o->connection_file },
        };
        json_auto_t *report = NULL;
        json_t *params, *env;
        int r;

        if (!context_name_valid(args[0]))
                return usage_error("invalid context name: '%s' (expected [A-Za-z0-9_.-]{1,64})", args[0]);
        if (args[0][0] == '.')
                return usage_error("invalid context name: '%s' (a name starting with '.' would be a hidden file, "
                                   "which contexts_dir ignores)",
                                   args[0]);
        params = json_pack("{s:s}", "context", args[0]);
        env = json_array();
        if (!params || !env || json_object_set_new(params, "env", env) < 0)
                return fail(EXIT_FAILED, "out of memory.");
        for (size_t i = 0; i < ELEMENTSOF(settings); i++)
                if (settings[i].value &&
                    json_object_set_new(params, settings[i].key, json_string(settings[i].value)) < 0) {
                        json_decref(params);
                        return fail(EXIT_FAILED, "invalid --%s: not UTF-8.", settings[i].key);
                }
        for (unsigned i = 0; i < o->n_env; i++)
                if (json_array_append_new(env, json_string(o->env[i])) < 0) {
                        json_decref(params);
                        return fail(EXIT_FAILED, "invalid --env: not UTF-8.");
                }
        r = call(o, "add", params, RELOAD_WAIT_USEC, &report);
        if (r != EXIT_OK || !o->wait)
                return r != EXIT_OK ? r : print_report(o, report);
        return add_wait(o, args[0], report);
}

static int cmd_remove(const Options *o, char **args, unsigned n_args) {
        json_auto_t *report = NULL;
        json_t *params;
        int r;

        if (!context_name_valid(args[0]))
                return usage_error("invalid context name: '%s' (expected [A-Za-z0-9_.-]{1,64})", args[0]);
        params = json_pack("{s:s}", "context", args[0]);
        if (!params)
                return fail(EXIT_FAILED, "out of memory.");
        /* The daemon answers once the context's kernel is gone, by default within its stop_timeout. */
        if (o->timeout != USEC_INFINITY &&
            json_object_set_new(params, "timeout", json_real(usec_to_seconds(o->timeout))) < 0) {
                json_decref(params);
                return fail(EXIT_FAILED, "out of memory.");
        }
        r = call(o, "remove", params, o->timeout != USEC_INFINITY ? o->timeout + REPLY_GRACE_USEC : RELOAD_WAIT_USEC,
                 &report);
        if (r != EXIT_OK)
                return r;
        return print_report(o, report);
}

static const Command commands[] = {
        { "reload", 0, 0, cmd_reload },       { "add", 1, 1, cmd_add },
        { "remove", 1, 1, cmd_remove },       { "status", 0, UINT_MAX, cmd_status },
        { "start", 1, 1, cmd_start },         { "stop", 1, 1, cmd_stop },
        { "restart", 1, 1, cmd_restart },     { "exec", 1, 2, cmd_exec },
        { "interrupt", 1, 1, cmd_interrupt }, { "check", 1, 1, cmd_check },
        { "wait", 0, UINT_MAX, cmd_wait },    { "version", 0, 0, cmd_version },
        { "help", 0, 0, cmd_help },
};

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
                { "help", no_argument, NULL, 'h' },
                {},
        };
        Options o = { .timeout = USEC_INFINITY };
        _cleanup_free_ char **env_list = NULL;
        bool add_options = false;
        const Command *cmd = NULL;
        const char *env;
        unsigned n_args;
        int c, r;

        /* Our own messages, in our own format. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case ARG_SOCKET:
                        if (!*optarg)
                                return usage_error("--socket needs a path");
                        o.socket = optarg;
                        break;
                case ARG_JSON:
                        o.json = true;
                        break;
                case ARG_TIMEOUT:
                        if (parse_timeout(optarg, &o.timeout) < 0)
                                return usage_error("invalid timeout '%s': seconds, more than 0 and at most 86400",
                                                   optarg);
                        break;
                case ARG_STREAM:
                        o.stream = true;
                        break;
                case ARG_TRACEBACK:
                        o.traceback = true;
                        break;
                case ARG_EXPECT:
                        if (!*optarg)
                                return usage_error("--expect needs a kernel_id");
                        o.expect = optarg;
                        break;
                case ARG_DRY_RUN:
                        o.dry_run = true;
                        break;
                case ARG_WAIT:
                        o.wait = true;
                        break;
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
                case ARG_ENV: {
                        char **grown = realloc(env_list, sizeof(char *) * (o.n_env + 2));
                        if (!grown)
                                return fail(EXIT_FAILED, "out of memory.");
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
                        return usage_error("option '%s' needs an argument", argv[optind - 1]);
                default:
                        if (optopt)
                                return usage_error("invalid option -- '%c'", optopt);
                        return usage_error("unrecognized option '%s'", argv[optind - 1]);
                }

        if (optind >= argc)
                return usage_error("missing command");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(commands[i].name, argv[optind]))
                        cmd = &commands[i];
        if (!cmd)
                return usage_error("unknown command '%s'", argv[optind]);
        n_args = (unsigned) (argc - optind - 1);
        if (n_args < cmd->min_args)
                return usage_error("%s: missing context name", cmd->name);
        if (n_args > cmd->max_args)
                return usage_error("%s: too many arguments", cmd->name);
        if ((o.stream || o.traceback) && !streq(cmd->name, "exec"))
                return usage_error("%s is an option of exec", o.stream ? "--stream" : "--traceback");
        if (o.expect && !streq(cmd->name, "check"))
                return usage_error("--expect is an option of check");
        if (o.dry_run && !streq(cmd->name, "reload"))
                return usage_error("--dry-run is an option of reload");
        if ((add_options || o.wait) && !streq(cmd->name, "add"))
                return usage_error("--user, --group, --cwd, --env, --connection-file and --wait are options of add");

        if (!o.socket) {
                env = getenv("KERNELSUP_SOCKET");
                o.socket = env && *env ? env : DEFAULT_SOCKET;
        }

        r = cmd->run(&o, argv + optind + 1, n_args);
        if (fflush(stdout) != 0 || ferror(stdout))
                return fail(EXIT_FAILED, "cannot write output: %s.", strerror(errno));
        return r;
}
