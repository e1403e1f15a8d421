/* The client end of the control socket, for kernelctl: connect (retrying while the daemon is
 * away, for check and wait), send one JSON-RPC request, wait for its reply with a deadline while
 * handing on notifications, and tell the person at the terminal what went wrong.
 *
 * Functions returning int return a kernelctl exit code (EXIT_* of protocol.h): EXIT_OK, or the
 * code of a failure they have already printed on stderr as "kernelctl: ...". Nothing is kept
 * between calls; nothing re-enters but on_notify, which is called from client_transact() only. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "macro.h"
#include "protocol.h"
#include "reply.h"

/* Prints "kernelctl: MESSAGE" and returns exit_code. */
_printf_(2, 3) int client_fail(int exit_code, const char *fmt, ...);
/* Prints "kernelctl: MESSAGE" and a pointer to --help; returns EXIT_USAGE. */
_printf_(1, 2) int client_usage_error(const char *fmt, ...);
/* "invalid reply from kernelsupd (what the decoder refused)."; returns EXIT_FAILED. */
int client_invalid_reply(const ReplyProblem *problem);
/* Prints a daemon's error message (sanitized) and returns the exit code of its JSON-RPC code. */
int client_report_error(long long code, const char *message);

/* Text from the daemon goes to a terminal: a new copy of s (NULL: "") with control characters
 * (an escape sequence in an error message) as '?' and line breaks, unless keep_newlines, as
 * spaces. NULL on out of memory. */
char *client_sanitize(const char *s, bool keep_newlines);

/* How much longer than the timeout it gave the daemon a client waits for the answer. */
#define CLIENT_REPLY_GRACE_USEC (5 * USEC_PER_SEC)

static inline double client_seconds(usec_t u) {
        return (double) u / (double) USEC_PER_SEC;
}
/* A timeout for a request's params: whole seconds as an integer, else a real. New; NULL on ENOMEM. */
json_t *client_seconds_json(usec_t u);
/* Sets params.timeout to timeout, none when USEC_INFINITY (the daemon's default then): 0, or -ENOMEM. */
int client_set_timeout(json_t *params, usec_t timeout);

/* The daemon's answer: its result, or its error. Owned; freed by client_reply_done(). */
typedef struct ClientReply {
        json_t *result; /* NULL for an error */
        int code;
        char *message;
        json_t *data; /* of an error; may be NULL */
} ClientReply;
void client_reply_done(ClientReply *r);

/* Connects to the control socket at path; wait bounds a connect() to a daemon whose backlog is
 * full. *ret_fd is the caller's. */
int client_connect(const char *path, usec_t wait, int *ret_fd);

/* Called for each notification that comes before the reply; m is borrowed for the call. */
typedef void (*client_notify_fn)(const RpcMessage *m, void *userdata);

/* Sends one request on fd (params stolen, may be NULL) and waits up to wait (USEC_INFINITY: for
 * ever) for its reply, handing notifications to on_notify (may be NULL). EXIT_OK with *ret set
 * when the daemon answered, with a result or an error. */
int client_transact(int fd, const char *method, json_t *params, usec_t wait, client_notify_fn on_notify,
                    void *userdata, ClientReply *ret);

/* Connects, sends one request (params stolen) and waits up to wait for its reply. EXIT_OK with
 * the result in *ret_result (the caller's); a daemon's error is printed and its exit code
 * returned. */
int client_call(const char *socket_path, const char *method, json_t *params, usec_t wait, json_t **ret_result);

/* For check and wait, which must outlive the daemon they ask: connects (retrying while the daemon
 * is away), sends method with params (borrowed) and "timeout" set to what is left of total, and
 * asks a successor daemon again when the connection drops before the answer. EXIT_OK with *ret
 * set when a daemon answered, with a result or an error. */
int client_call_until(const char *socket_path, const char *method, const json_t *params, usec_t total,
                      ClientReply *ret);
