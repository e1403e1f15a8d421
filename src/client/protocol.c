/* The control protocol: newline-delimited JSON-RPC 2.0, shared by kernelsupd
 * and kernelctl. The messages are framed here; what each reply holds is
 * described in reply.h, whose types both ends encode and decode. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "protocol.h"
#include "reply.h"
#include "util.h"

int protocol_exit_code(int rpc_code) {
        static const struct {
                int code;
                int exit_code;
        } table[] = {
                { KS_ERR_FAILED, EXIT_FAILED },           { KS_ERR_NO_CONTEXT, EXIT_NO_CONTEXT },
                { KS_ERR_PERMISSION, EXIT_PERMISSION },   { KS_ERR_TIMEOUT, EXIT_TIMEOUT },
                { KS_ERR_CELL_ERROR, EXIT_CELL_ERROR },   { KS_ERR_REPLACED, EXIT_REPLACED },
                { KS_ERR_NO_EXECUTION, EXIT_NO_CONTEXT },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (table[i].code == rpc_code)
                        return table[i].exit_code;
        return EXIT_FAILED;
}

/* Serialises one message as a single line. The root is always released. An
 * encoded message never contains a raw newline: JSON escapes control
 * characters inside strings and the compact form has no whitespace. */
static char *encode_line(json_t *root) {
        json_auto_t *j = root;

        return j ? json_dump_line(j, JSON_COMPACT | JSON_PRESERVE_ORDER | json_real_flags(j)) : NULL;
}

/* A new object {"jsonrpc": "2.0"}, the start of every message. */
static json_t *message_new(void) {
        json_auto_t *j = json_object();

        if (!j || json_object_set_new(j, "jsonrpc", json_string("2.0")) < 0)
                return NULL;
        return TAKE_PTR(j);
}

/* Sets key to id, or to null when id is NULL. */
static int message_set_id(json_t *j, const json_t *id) {
        /* jansson's API takes non-const values; the id is only referenced, never modified. */
        return json_object_set_new(j, "id", id ? json_incref((json_t *) id) : json_null());
}

char *protocol_request(long long id, const char *method, json_t *params) {
        json_auto_t *p = params;
        json_auto_t *j = message_new();

        if (!j || json_object_set_new(j, "id", json_integer(id)) < 0 ||
            json_object_set_new(j, "method", json_string(method)) < 0)
                return NULL;
        if (p && json_object_set_new(j, "params", TAKE_PTR(p)) < 0)
                return NULL;
        return encode_line(TAKE_PTR(j));
}

char *protocol_result(const json_t *id, json_t *result) {
        json_auto_t *r = result;
        json_auto_t *j = message_new();

        if (!j || message_set_id(j, id) < 0)
                return NULL;
        if (json_object_set_new(j, "result", r ? TAKE_PTR(r) : json_null()) < 0)
                return NULL;
        return encode_line(TAKE_PTR(j));
}

char *protocol_error(const json_t *id, int code, const char *message, json_t *data) {
        json_auto_t *d = data;
        json_auto_t *j = message_new();
        ReplyError error = { .code = code, .message = message ?: "", .data = d };
        json_t *e = NULL;

        if (!j || message_set_id(j, id) < 0 || reply_error_encode(&error, &e) < 0)
                return NULL;
        if (json_object_set_new(j, "error", e) < 0)
                return NULL;
        return encode_line(TAKE_PTR(j));
}

char *protocol_notification(const char *method, json_t *params) {
        json_auto_t *p = params;
        json_auto_t *j = message_new();

        if (!j || json_object_set_new(j, "method", json_string(method)) < 0)
                return NULL;
        if (p && json_object_set_new(j, "params", TAKE_PTR(p)) < 0)
                return NULL;
        return encode_line(TAKE_PTR(j));
}

/* Loads exactly one JSON value from the buffer. Duplicate keys are refused
 * because two readers could pick different ones. Without JSON_ALLOW_NUL in
 * flags jansson refuses \u0000 in a string, so every string of a request is
 * also a valid C string; the daemon's replies carry kernel text, which may
 * hold U+0000 (a client reads those with json_string_length()). */
static json_t *load_line(const char *line, size_t len, size_t flags) {
        json_error_t error;

        return json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | flags, &error);
}

/* JSON-RPC 2.0 allows string, number and null ids. Fractional numbers are
 * discouraged by the specification and a bool is no id at all; we accept
 * only what both ends can echo back unchanged. */
static bool id_valid(const json_t *id) {
        return json_is_string(id) || json_is_integer(id) || json_is_null(id);
}

static bool version_valid(const json_t *root) {
        const json_t *v = json_object_get(root, "jsonrpc");

        return json_is_string(v) && streq(json_string_value(v), "2.0");
}

/* Makes sure root has an object under "params" and returns it (borrowed). */
static json_t *params_get_or_add(json_t *root) {
        json_t *params = json_object_get(root, "params");

        if (params)
                return json_is_object(params) ? params : NULL;
        params = json_object();
        if (!params || json_object_set_new(root, "params", params) < 0)
                return NULL;
        return params;
}

int protocol_parse_request(const char *line, size_t len, RpcRequest *ret, int *ret_code, const char **ret_message,
                           json_t **ret_root, json_t **ret_id) {
        json_auto_t *root = NULL;
        json_t *id = NULL, *method, *params;
        const char *key;
        json_t *value;
        const char *message;
        int code = RPC_INVALID_REQUEST;

        root = load_line(line, len, 0);
        if (!root) {
                code = RPC_PARSE_ERROR;
                message = "parse error";
                goto fail;
        }
        if (!json_is_object(root)) {
                message = json_is_array(root) ? "batch requests are not supported" : "request is not an object";
                goto fail;
        }

        /* The id first, so every later complaint can be addressed to it. */
        value = json_object_get(root, "id");
        if (value) {
                if (!id_valid(value)) {
                        message = "id must be a string, an integer or null";
                        goto fail;
                }
                id = value;
        }
        if (!version_valid(root)) {
                message = "jsonrpc must be \"2.0\"";
                goto fail;
        }
        method = json_object_get(root, "method");
        if (!method) {
                message = "method is missing";
                goto fail;
        }
        if (!json_is_string(method)) {
                message = "method must be a string";
                goto fail;
        }
        json_object_foreach(root, key, value) {
                if (!streq(key, "jsonrpc") && !streq(key, "id") && !streq(key, "method") && !streq(key, "params")) {
                        message = "unexpected member in request";
                        goto fail;
                }
        }
        value = json_object_get(root, "params");
        if (value && !json_is_object(value)) {
                message = "params must be an object";
                goto fail;
        }
        params = params_get_or_add(root);
        if (!params)
                return -ENOMEM;

        *ret = (RpcRequest){
                .id = id,
                .method = json_string_value(method),
                .params = params,
        };
        ret->root = TAKE_PTR(root);
        return 0;

fail:
        if (ret_code)
                *ret_code = code;
        if (ret_message)
                *ret_message = message;
        if (ret_id)
                *ret_id = id;
        if (ret_root)
                *ret_root = TAKE_PTR(root);
        return -EBADMSG;
}

int protocol_parse_message(const char *line, size_t len, RpcMessage *ret) {
        json_auto_t *root = NULL;
        json_t *id, *method, *result, *error, *params;
        ReplyError e;

        root = load_line(line, len, JSON_ALLOW_NUL);
        if (!root || !json_is_object(root) || !version_valid(root))
                return -EBADMSG;

        id = json_object_get(root, "id");
        method = json_object_get(root, "method");
        result = json_object_get(root, "result");
        error = json_object_get(root, "error");

        if (method) {
                /* A notification: the daemon never sends us requests. */
                if (!json_is_string(method) || id || result || error)
                        return -EBADMSG;
                params = json_object_get(root, "params");
                if (params && !json_is_object(params))
                        return -EBADMSG;
                params = params_get_or_add(root);
                if (!params)
                        return -ENOMEM;
                *ret = (RpcMessage){
                        .kind = RPC_NOTIFICATION,
                        .method = json_string_value(method),
                        .params = params,
                };
                ret->root = TAKE_PTR(root);
                return 0;
        }

        if (!id || !id_valid(id) || !result == !error)
                return -EBADMSG;

        if (result) {
                *ret = (RpcMessage){
                        .kind = RPC_RESULT,
                        .id = id,
                        .result = result,
                };
                ret->root = TAKE_PTR(root);
                return 0;
        }

        if (reply_error_decode(error, &e, NULL) < 0)
                return -EBADMSG;
        *ret = (RpcMessage){
                .kind = RPC_ERROR,
                .id = id,
                .code = (int) e.code,
                .message = e.message,
                /* Borrowed from root, like the rest. */
                .data = (json_t *) e.data,
        };
        ret->root = TAKE_PTR(root);
        return 0;
}

void rpc_message_done(RpcMessage *m) {
        if (!m)
                return;
        json_decref(m->root);
        *m = (RpcMessage){};
}

int protocol_timeout_usec(double seconds, unsigned long long max_usec, unsigned long long *ret) {
        if (isnan(seconds) || seconds <= 0)
                return -EINVAL;
        /* Compared in seconds, before any conversion can overflow. */
        if (seconds > (double) max_usec / (double) USEC_PER_SEC) {
                *ret = max_usec;
                return 1;
        }
        *ret = (unsigned long long) llround(seconds * (double) USEC_PER_SEC);
        if (*ret == 0)
                *ret = 1;
        return 0;
}

/* params[key]: an integer in [min, max], def when absent. */
static int param_uint(const json_t *params, const char *key, long long min, long long max, long long def,
                      long long *ret, char **ret_why) {
        const json_t *v = json_object_get(params, key);

        if (!v) {
                *ret = def;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
                if (asprintf(ret_why, "params.%s must be an integer from %lld to %lld", key, min, max) < 0) {
                        *ret_why = NULL;
                        return -ENOMEM;
                }
                return -EINVAL;
        }
        *ret = json_integer_value(v);
        return 0;
}

int protocol_history_params(const json_t *params, size_t def_limit, size_t max_limit, size_t *ret_offset,
                            size_t *ret_limit, char **ret_why) {
        long long offset, limit;
        int r;

        *ret_why = NULL;
        r = param_uint(params, "offset", 0, INT64_MAX, 0, &offset, ret_why);
        if (r >= 0)
                r = param_uint(params, "limit", 1, (long long) max_limit, (long long) def_limit, &limit, ret_why);
        if (r < 0)
                return r;
        *ret_offset = (size_t) offset;
        *ret_limit = (size_t) limit;
        return 0;
}
