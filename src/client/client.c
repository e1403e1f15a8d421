/* The client end of the control socket (client.h): the transport kernelctl's verbs share. */

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "util.h"

#define REQUEST_ID 1
/* How often check and wait try to connect while the daemon is not listening yet. */
#define CONNECT_RETRY_USEC (50 * USEC_PER_MSEC)

/* "kernelctl: MESSAGE" and then tail on stderr. */
_printf_(1, 0) static void print_problem(const char *fmt, va_list ap, const char *tail) {
        fputs("kernelctl: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputs(tail, stderr);
}

int client_usage_error(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        print_problem(fmt, ap, "\nTry 'kernelctl --help'.\n");
        va_end(ap);
        return EXIT_USAGE;
}

int client_fail(int exit_code, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        print_problem(fmt, ap, "\n");
        va_end(ap);
        return exit_code;
}

/* Text from the daemon goes to a terminal: control characters (an escape
 * sequence in an error message) are shown as '?', and line breaks, unless
 * keep_newlines, as spaces. */
char *client_sanitize(const char *s, bool keep_newlines) {
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
                return client_fail(EXIT_UNREACHABLE, "kernelsupd is not running: cannot connect to %s (%s).", path,
                                   strerror(e));
        case EACCES:
        case EPERM:
                return client_fail(EXIT_PERMISSION, "permission denied on %s.", path);
        case EAGAIN:
        case EINPROGRESS:
                return client_fail(EXIT_TIMEOUT, "no reply from kernelsupd within %g s.", client_seconds(wait));
        default:
                return client_fail(EXIT_UNREACHABLE, "cannot connect to %s (%s).", path, strerror(e));
        }
}

static bool socket_path_ok(const char *path) {
        return strlen(path) < sizeof(((struct sockaddr_un *) NULL)->sun_path);
}

int client_connect(const char *path, usec_t wait, int *ret_fd) {
        int r;

        if (!socket_path_ok(path))
                return client_usage_error("socket path too long: %s", path);
        r = connect_raw(path, wait, ret_fd);
        if (r == -EMFILE || r == -ENFILE || r == -ENOMEM || r == -ENOBUFS || r == -EAFNOSUPPORT)
                return client_fail(EXIT_FAILED, "cannot create a socket: %s.", strerror(-r));
        return r < 0 ? connect_failed(path, wait, -r) : EXIT_OK;
}

/* check and wait: the daemon may be starting (or restarting): try again
 * while nobody listens, until deadline (CLOCK_MONOTONIC). */
static int connect_retry(const char *path, usec_t deadline, usec_t total, int *ret_fd) {
        if (!socket_path_ok(path))
                return client_usage_error("socket path too long: %s", path);
        for (;;) {
                usec_t now = now_usec(CLOCK_MONOTONIC), nap;
                int r = connect_raw(path, deadline > now ? deadline - now : 1, ret_fd);

                if (r >= 0)
                        return EXIT_OK;
                if (!connect_error_unreachable(-r))
                        return connect_failed(path, total, -r);
                now = now_usec(CLOCK_MONOTONIC);
                if (now >= deadline)
                        return client_fail(EXIT_UNREACHABLE,
                                           "kernelsupd did not become reachable on %s within %g s (%s).", path,
                                           client_seconds(total), strerror(-r));
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
int client_report_error(long long code, const char *message) {
        _cleanup_free_ char *text = client_sanitize(message, true);

        fprintf(stderr, "kernelctl: %s\n", text ?: "error");
        return protocol_exit_code((int) code);
}

/* The reply to our request: an answer with our id, or an error the daemon
 * could not address (a null id, e.g. "too many connections"). */
static bool message_is_ours(const RpcMessage *m) {
        if (json_is_integer(m->id) && json_integer_value(m->id) == REQUEST_ID)
                return true;
        return m->kind == RPC_ERROR && json_is_null(m->id);
}

void client_reply_done(ClientReply *r) {
        json_decref(r->result);
        json_decref(r->data);
        free(r->message);
        *r = (ClientReply){};
}

/* check and wait outlive a daemon that dies under them (a crash, the watchdog): they connect
 * again to its successor. client_transact() then returns EXIT_LOST quietly when the connection drops. */
#define EXIT_LOST 100
static bool lost_is_retried;

int client_transact(int fd, const char *method, json_t *params, usec_t wait, client_notify_fn on_notify,
                    void *userdata, ClientReply *ret) {
        _cleanup_free_ char *request = NULL, *buf = NULL;
        size_t len = 0, alloc = 0;
        usec_t deadline;
        int send_error, r;

        request = protocol_request(REQUEST_ID, method, params);
        if (!request)
                return client_fail(EXIT_FAILED, "out of memory.");
        if (strlen(request) - 1 > PROTOCOL_MAX_LINE)
                return client_fail(EXIT_FAILED, "the request is too large (%zu bytes; kernelsupd takes at most %d).",
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
                                return client_fail(EXIT_FAILED, "invalid reply from kernelsupd.");
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
                        *ret = (ClientReply){
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
                                return client_fail(EXIT_TIMEOUT, "no reply from kernelsupd within %g s.",
                                                   client_seconds(wait));
                        poll_ms = (int) ((deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC);
                }
                r = poll(&p, 1, poll_ms);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return client_fail(EXIT_FAILED, "poll failed: %s.", strerror(errno));
                }
                if (r == 0)
                        continue;

                if (alloc - len < 65536) {
                        char *b;

                        if (alloc >= PROTOCOL_MAX_REPLY_LINE)
                                return client_fail(EXIT_FAILED, "invalid reply from kernelsupd (line too long).");
                        b = realloc(buf, alloc * 2 + 65536);
                        if (!b)
                                return client_fail(EXIT_FAILED, "out of memory.");
                        buf = b;
                        alloc = alloc * 2 + 65536;
                }
                k = recv(fd, buf + len, alloc - len, 0);
                if (k < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        if (lost_is_retried)
                                return EXIT_LOST;
                        return client_fail(EXIT_FAILED, "lost the connection to kernelsupd: %s.", strerror(errno));
                }
                if (k == 0) {
                        if (lost_is_retried)
                                return EXIT_LOST;
                        if (send_error < 0)
                                return client_fail(EXIT_FAILED, "cannot send to kernelsupd: %s.",
                                                   strerror(-send_error));
                        return client_fail(EXIT_FAILED, "kernelsupd closed the connection without replying.");
                }
                len += (size_t) k;
        }
}

/* Sends one request and waits up to wait for its reply. On success the
 * result is returned in *ret_result; otherwise the problem is printed and
 * the exit code returned. */
int client_call(const char *socket_path, const char *method, json_t *params, usec_t wait, json_t **ret_result) {
        json_auto_t *owned = params;
        _cleanup_close_ int fd = -1;
        ClientReply reply = {};
        int r;

        r = client_connect(socket_path, wait, &fd);
        if (r != EXIT_OK)
                return r;
        r = client_transact(fd, method, TAKE_PTR(owned), wait, NULL, NULL, &reply);
        if (r != EXIT_OK)
                return r;
        if (!reply.result) {
                r = client_report_error(reply.code, reply.message);
                client_reply_done(&reply);
                return r;
        }
        *ret_result = TAKE_PTR(reply.result);
        client_reply_done(&reply);
        return EXIT_OK;
}

json_t *client_seconds_json(usec_t u) {
        return u % USEC_PER_SEC == 0 ? json_integer((json_int_t) (u / USEC_PER_SEC)) : json_real(client_seconds(u));
}

int client_set_timeout(json_t *params, usec_t timeout) {
        if (timeout == USEC_INFINITY)
                return 0;
        return json_object_set_new(params, "timeout", client_seconds_json(timeout)) < 0 ? -ENOMEM : 0;
}

/* For check and wait, which must outlive the daemon they ask: connects (retrying while the daemon is away),
 * sends method with params (borrowed) and "timeout" set to what is left of total, and asks again a successor
 * daemon when the connection drops before the answer. */
int client_call_until(const char *socket_path, const char *method, const json_t *params, usec_t total,
                      ClientReply *ret) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + total, left, now;
        _cleanup_close_ int fd = -1;
        int r;

        lost_is_retried = true;
        do {
                json_t *p;

                fd = safe_close(fd);
                r = connect_retry(socket_path, deadline, total, &fd);
                if (r != EXIT_OK)
                        return r;
                now = now_usec(CLOCK_MONOTONIC);
                /* What connecting took comes out of the daemon's share; at least a moment is left to it. */
                left = deadline > now + USEC_PER_MSEC ? deadline - now : USEC_PER_MSEC;
                p = json_deep_copy(params);
                if (!p || json_object_set_new(p, "timeout", client_seconds_json(left)) < 0) {
                        json_decref(p);
                        return client_fail(EXIT_FAILED, "out of memory.");
                }
                r = client_transact(fd, method, p, left + CLIENT_REPLY_GRACE_USEC, NULL, NULL, ret);
        } while (r == EXIT_LOST && now_usec(CLOCK_MONOTONIC) < deadline);
        if (r == EXIT_LOST)
                return client_fail(EXIT_UNREACHABLE, "kernelsupd went away and did not come back within %g s.",
                                   client_seconds(total));
        return r;
}
int client_invalid_reply(const ReplyProblem *problem) {
        _cleanup_free_ char *text = client_sanitize(problem ? problem->text : "", false);

        return client_fail(EXIT_FAILED, "invalid reply from kernelsupd (%s).", text ?: "?");
}
