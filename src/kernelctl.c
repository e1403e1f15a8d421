/* kernelctl: the command line client of kernelsupd. Parses options, sends
 * one JSON-RPC request over the control socket, waits for its reply and
 * prints it for people (or as JSON), with the exit codes of DESIGN.md. */

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
#define STOP_WAIT_USEC (60 * USEC_PER_SEC)
#define START_TIMEOUT_USEC (60 * USEC_PER_SEC)
/* start and restart wait this much beyond the timeout the daemon itself applies. */
#define REPLY_GRACE_USEC (5 * USEC_PER_SEC)

typedef struct Options {
        const char *socket;
        bool json;
        usec_t timeout; /* USEC_INFINITY when not given */
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
               "  status [CTX...]      state of the daemon and its contexts\n"
               "  start CTX            start a context and wait until its kernel answers\n"
               "  stop CTX             stop a context's kernel\n"
               "  restart CTX          replace a context's kernel with a new one\n"
               "  version              print the version of kernelctl\n"
               "\n"
               "Options:\n"
               "  --socket PATH        control socket (default: $KERNELSUP_SOCKET, else\n"
               "                       " DEFAULT_SOCKET ")\n"
               "  --json               print the daemon's reply as JSON\n"
               "  --timeout SECONDS    how long start, restart and stop may take (start and\n"
               "                       restart: default 60); for status, how long to wait\n"
               "                       for the reply (default 15)\n"
               "  --version            print the version of kernelctl\n"
               "  -h, --help           show this help\n"
               "\n"
               "Exit status: 0 ok, 1 failed, 2 usage, 3 kernelsupd not reachable,\n"
               "4 permission denied, 5 no such context, 6 timed out.\n"
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

static int connect_daemon(const char *path, usec_t wait, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = {
                .tv_sec = (time_t) (wait / USEC_PER_SEC),
                .tv_usec = (suseconds_t) (wait % USEC_PER_SEC),
        };

        if (strlen(path) >= sizeof sa.sun_path)
                return usage_error("socket path too long: %s", path);
        memcpy(sa.sun_path, path, strlen(path) + 1);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return fail(EXIT_FAILED, "cannot create a socket: %s.", strerror(errno));
        /* connect() on a Unix socket whose backlog is full blocks for up to SO_SNDTIMEO,
         * so a wedged daemon cannot hold us past the timeout. */
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        while (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                int e = errno;

                switch (e) {
                case EINTR:
                        continue;
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
        *ret_fd = TAKE_FD(fd);
        return EXIT_OK;
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
static int report_error(const RpcMessage *m) {
        _cleanup_free_ char *text = sanitize(m->message, true);

        fprintf(stderr, "kernelctl: %s\n", text ?: "error");
        return protocol_exit_code(m->code);
}

/* The reply to our request: an answer with our id, or an error the daemon
 * could not address (a null id, e.g. "too many connections"). */
static bool message_is_ours(const RpcMessage *m) {
        if (json_is_integer(m->id) && json_integer_value(m->id) == REQUEST_ID)
                return true;
        return m->kind == RPC_ERROR && json_is_null(m->id);
}

/* Sends one request and waits up to wait for its reply. On success the
 * result is returned in *ret_result; otherwise the problem is printed and
 * the exit code returned. */
static int call(const Options *o, const char *method, json_t *params, usec_t wait, json_t **ret_result) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *request = NULL, *buf = NULL;
        size_t len = 0, alloc = 0;
        usec_t deadline;
        int send_error, r;

        request = protocol_request(REQUEST_ID, method, params);
        if (!request)
                return fail(EXIT_FAILED, "out of memory.");
        r = connect_daemon(o->socket, wait, &fd);
        if (r != EXIT_OK)
                return r;
        /* A daemon that refuses us says why on a line and closes: read it even if the send failed. */
        send_error = send_all(fd, request, strlen(request));
        deadline = now_usec(CLOCK_MONOTONIC) + wait;

        for (;;) {
                char *nl = len ? memchr(buf, '\n', len) : NULL;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                usec_t now;
                ssize_t k;

                if (nl) {
                        RpcMessage m;
                        size_t n = (size_t) (nl - buf);

                        r = protocol_parse_message(buf, n, &m);
                        memmove(buf, nl + 1, len - n - 1);
                        len -= n + 1;
                        if (r < 0)
                                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");
                        /* Notifications (streamed output) have no use yet for these commands. */
                        if (m.kind == RPC_NOTIFICATION || !message_is_ours(&m)) {
                                rpc_message_done(&m);
                                continue;
                        }
                        if (m.kind == RPC_ERROR) {
                                r = report_error(&m);
                                rpc_message_done(&m);
                                return r;
                        }
                        *ret_result = json_incref(m.result);
                        rpc_message_done(&m);
                        return EXIT_OK;
                }

                now = now_usec(CLOCK_MONOTONIC);
                if (now >= deadline)
                        return fail(EXIT_TIMEOUT, "no reply from kernelsupd within %g s.", usec_to_seconds(wait));
                r = poll(&p, 1, (int) ((deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC));
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
                        return fail(EXIT_FAILED, "lost the connection to kernelsupd: %s.", strerror(errno));
                }
                if (k == 0) {
                        if (send_error < 0)
                                return fail(EXIT_FAILED, "cannot send to kernelsupd: %s.", strerror(-send_error));
                        return fail(EXIT_FAILED, "kernelsupd closed the connection without replying.");
                }
                len += (size_t) k;
        }
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

enum { COL_NAME, COL_STATE, COL_PID, COL_UPTIME, COL_RESTARTS, COL_INCARNATION, COL_INFO, N_COLUMNS };

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
        static const char *const header[N_COLUMNS] = { "NAME",     "STATE",       "PID", "UPTIME",
                                                       "RESTARTS", "INCARNATION", "INFO" };
        size_t n = json_array_size(contexts), widths[N_COLUMNS];
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
        }
        print_row((char *const *) header, widths);
        for (size_t i = 0; i < n; i++)
                print_row(rows + i * N_COLUMNS, widths);
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

        r = o->json ? print_json(result) : print_status_table(contexts);
        if (r != EXIT_OK)
                return r;
        json_array_foreach(contexts, i, ctx) {
                if (!state_is_up(object_string(ctx, "state")))
                        return EXIT_FAILED;
        }
        return EXIT_OK;
}

/* start, stop and restart: the result is the context's status after the action. */
static int cmd_action(const Options *o, const char *method, const char *name) {
        json_auto_t *params = NULL, *result = NULL;
        _cleanup_free_ char *shown_name = NULL, *shown_state = NULL;
        const char *state;
        bool is_stop = streq(method, "stop");
        usec_t timeout = o->timeout, wait;
        int r;

        if (!context_name_valid(name))
                return usage_error("invalid context name: '%s'", name);
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

        r = call(o, method, TAKE_PTR(params), wait, &result);
        if (r != EXIT_OK)
                return r;
        state = object_string(result, "state");
        if (!json_is_object(result) || !state)
                return fail(EXIT_FAILED, "invalid reply from kernelsupd.");

        shown_name = sanitize(object_string(result, "name") ?: name, false);
        shown_state = sanitize(state, false);
        if (!shown_name || !shown_state)
                return fail(EXIT_FAILED, "out of memory.");
        if (o->json)
                r = print_json(result);
        else {
                const json_t *pid = json_object_get(result, "pid");

                if (json_is_integer(pid))
                        printf("%s: %s (pid %lld, incarnation %lld)\n", shown_name, shown_state,
                               (long long) json_integer_value(pid),
                               (long long) json_integer_value(json_object_get(result, "incarnation")));
                else
                        printf("%s: %s\n", shown_name, shown_state);
        }
        if (r != EXIT_OK)
                return r;
        /* The reply came, but the context did not end where the action should have left it. */
        if (is_stop ? !streq(state, "stopped") : !state_is_up(state)) {
                _cleanup_free_ char *error = sanitize(object_string(result, "last_error") ?: "", false);

                return fail(EXIT_FAILED, "%s is %s, not %s%s%s.", shown_name, shown_state,
                            is_stop ? "stopped" : "ready", error && *error ? ": " : "", error ?: "");
        }
        return EXIT_OK;
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

static const Command commands[] = {
        { "status", 0, UINT_MAX, cmd_status }, { "start", 1, 1, cmd_start },     { "stop", 1, 1, cmd_stop },
        { "restart", 1, 1, cmd_restart },      { "version", 0, 0, cmd_version },
};

static int parse_timeout(const char *s, usec_t *ret) {
        usec_t u;

        if (parse_duration(s, &u) < 0 || u == 0 || u == USEC_INFINITY || u > MAX_TIMEOUT_USEC)
                return -EINVAL;
        *ret = u;
        return 0;
}

int main(int argc, char *argv[]) {
        enum { ARG_SOCKET = 0x100, ARG_JSON, ARG_TIMEOUT, ARG_VERSION };
        static const struct option options[] = {
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "json", no_argument, NULL, ARG_JSON },
                { "timeout", required_argument, NULL, ARG_TIMEOUT },
                { "version", no_argument, NULL, ARG_VERSION },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        Options o = { .timeout = USEC_INFINITY };
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

        if (!o.socket) {
                env = getenv("KERNELSUP_SOCKET");
                o.socket = env && *env ? env : DEFAULT_SOCKET;
        }

        r = cmd->run(&o, argv + optind + 1, n_args);
        if (fflush(stdout) != 0 || ferror(stdout))
                return fail(EXIT_FAILED, "cannot write output: %s.", strerror(errno));
        return r;
}
