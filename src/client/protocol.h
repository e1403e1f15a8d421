/* The control protocol, shared by kernelsupd and kernelctl so both ends agree
 * by construction: newline-delimited JSON-RPC 2.0 over a SOCK_STREAM Unix
 * socket, one object per line, at most PROTOCOL_MAX_LINE bytes. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define PROTOCOL_MAX_LINE (256 * 1024)
/* A line the daemon sends may be longer: the reply of a cell holds its outputs, up to output_limit of text each. */
#define PROTOCOL_MAX_REPLY_LINE (64 * 1024 * 1024)

/* The longest timeout a request or kernelctl's --timeout takes: one day. */
#define PROTOCOL_MAX_TIMEOUT_SEC 86400

/* JSON-RPC's own error codes ... */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602
#define RPC_INTERNAL_ERROR -32603
/* ... and ours, each mapping to a kernelctl exit code (doc/design.md, section 6). */
#define KS_ERR_FAILED -32000       /* exit 1 */
#define KS_ERR_NO_CONTEXT -32001   /* exit 5 */
#define KS_ERR_PERMISSION -32002   /* exit 4 */
#define KS_ERR_TIMEOUT -32003      /* exit 6 */
#define KS_ERR_CELL_ERROR -32004   /* exit 7 */
#define KS_ERR_REPLACED -32005     /* exit 8 */
#define KS_ERR_NO_EXECUTION -32006 /* exit 5: no execution of that id that the peer may see */

/* kernelctl exit codes. */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,
        EXIT_USAGE = 2,
        EXIT_UNREACHABLE = 3,
        EXIT_PERMISSION = 4,
        EXIT_NO_CONTEXT = 5,
        EXIT_TIMEOUT = 6,
        EXIT_CELL_ERROR = 7,
        EXIT_REPLACED = 8,
        EXIT_REBUILT = 9,         /* check: kernel replaced, its namespace rebuilt by replaying the journal */
        EXIT_KERNEL_ABORTED = 10, /* exec: the kernel answered the cell "aborted" (or "abort") without running it */
        EXIT_NOT_STARTED = 11,    /* exec: the cell never started (its timeout passed first); it will not run */
};

/* The exit code for a JSON-RPC error code (unknown codes: EXIT_FAILED). */
int protocol_exit_code(int rpc_code);

/* Encoders: each returns one newly allocated line ending in "\n" (NULL on
 * out-of-memory). json arguments are stolen; id is borrowed (NULL: null). */
char *protocol_request(long long id, const char *method, json_t *params);
char *protocol_result(const json_t *id, json_t *result);
char *protocol_error(const json_t *id, int code, const char *message, json_t *data);
char *protocol_notification(const char *method, json_t *params);

/* A parsed incoming request (daemon side). root owns everything; the other
 * fields are borrowed from it. params is an object ({} when absent). */
typedef struct RpcRequest {
        json_t *root;
        json_t *id; /* NULL for a notification */
        const char *method;
        json_t *params;
} RpcRequest;

/* Parses one line (without its newline). On failure returns -EBADMSG and sets
 * *ret_code (RPC_PARSE_ERROR or RPC_INVALID_REQUEST), *ret_message, and
 * *ret_id to the request's id when one could be read (borrowed from
 * *ret_root, which the caller frees with json_decref; may be NULL). */
int protocol_parse_request(const char *line, size_t len, RpcRequest *ret, int *ret_code, const char **ret_message,
                           json_t **ret_root, json_t **ret_id);

/* A parsed incoming message (client side). */
typedef enum RpcKind { RPC_RESULT, RPC_ERROR, RPC_NOTIFICATION } RpcKind;
typedef struct RpcMessage {
        json_t *root; /* owns everything below */
        RpcKind kind;
        json_t *id;
        json_t *result; /* RPC_RESULT */
        int code;       /* RPC_ERROR */
        const char *message;
        json_t *data;       /* RPC_ERROR, may be NULL */
        const char *method; /* RPC_NOTIFICATION */
        json_t *params;
} RpcMessage;
int protocol_parse_message(const char *line, size_t len, RpcMessage *ret);
void rpc_message_done(RpcMessage *m);

/* What the result (or an error's data) of each method holds: reply.h. */

/* A timeout in seconds (a request's "timeout") as microseconds in *ret:
 * -EINVAL for NaN, zero and negative values; infinity and anything above
 * max_usec are clamped to max_usec, and 1 is returned then; else 0. */
int protocol_timeout_usec(double seconds, unsigned long long max_usec, unsigned long long *ret);

/* history's paging params: "offset" an integer from 0 to INT64_MAX (absent: 0) and "limit" one from 1 to
 * max_limit (absent: def_limit); other members are ignored. 0 with both; -EINVAL with *ret_why (newly
 * allocated: "params.limit must be an integer from 1 to 1000"); -ENOMEM. params NULL: the defaults. */
int protocol_history_params(const json_t *params, size_t def_limit, size_t max_limit, size_t *ret_offset,
                            size_t *ret_limit, char **ret_why);
