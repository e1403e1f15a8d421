/* Tests for protocol.c: encoders, strict request parsing, client-side
 * decoding, exit codes. control.c: test-control.c. */

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "log.h"
#include "protocol.h"
#include "tap.h"
#include "util.h"

/* ---- protocol.c ---------------------------------------------------------------------------------------- */

static void test_encoders(void) {
        _cleanup_free_ char *req = NULL, *req2 = NULL, *res = NULL, *res2 = NULL, *err = NULL, *err2 = NULL,
                            *notif = NULL, *bad = NULL;
        json_auto_t *id = json_integer(7), *sid = json_string("abc");
        RpcRequest r;
        RpcMessage m;
        int code = 0;
        const char *message = NULL;
        json_t *root = NULL, *eid = NULL;

        req = protocol_request(7, "status", json_pack("{s:[s]}", "contexts", "a"));
        is_str(req, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"status\",\"params\":{\"contexts\":[\"a\"]}}\n",
               "protocol_request encodes one compact line");
        is_int(protocol_parse_request(req, strlen(req) - 1, &r, &code, &message, &root, &eid), 0,
               "the daemon parses kernelctl's request");
        is_str(r.method, "status", "method round trip");
        is_int(json_integer_value(r.id), 7, "id round trip");
        is_str(json_string_value(json_array_get(json_object_get(r.params, "contexts"), 0)), "a", "params round trip");
        json_decref(r.root);

        req2 = protocol_request(-3, "start", NULL);
        is_str(req2, "{\"jsonrpc\":\"2.0\",\"id\":-3,\"method\":\"start\"}\n", "no params: the member is left out");
        is_int(protocol_parse_request(req2, strlen(req2), &r, &code, &message, &root, &eid), 0,
               "the trailing newline is whitespace to the parser");
        ok(json_is_object(r.params) && json_object_size(r.params) == 0, "absent params read as {}");
        json_decref(r.root);

        res = protocol_result(id, json_pack("{s:s,s:n}", "state", "ready", "pid"));
        is_str(res, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"state\":\"ready\",\"pid\":null}}\n",
               "protocol_result keeps member order");
        is_int(protocol_parse_message(res, strlen(res), &m), 0, "kernelctl parses a result");
        is_int(m.kind, RPC_RESULT, "result kind");
        is_int(json_integer_value(m.id), 7, "result id");
        is_str(json_string_value(json_object_get(m.result, "state")), "ready", "result body");
        rpc_message_done(&m);
        ok(m.root == NULL, "rpc_message_done clears the message");
        ok(json_integer_value(id) == 7 && id->refcount == 1, "the id is borrowed, not stolen");

        res2 = protocol_result(NULL, NULL);
        is_str(res2, "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":null}\n", "null id and null result");
        is_int(protocol_parse_message(res2, strlen(res2), &m), 0, "a null result is a result");
        is_int(m.kind, RPC_RESULT, "null result kind");
        ok(json_is_null(m.result) && json_is_null(m.id), "null result and id");
        rpc_message_done(&m);

        err = protocol_error(sid, KS_ERR_NO_CONTEXT, "no context \"x\"\nsecond line",
                             json_pack("{s:s}", "context", "x"));
        ok(err && strchr(err, '\n') == err + strlen(err) - 1,
           "an encoded message has exactly one newline, at its end");
        is_int(protocol_parse_message(err, strlen(err), &m), 0, "kernelctl parses an error");
        is_int(m.kind, RPC_ERROR, "error kind");
        is_str(json_string_value(m.id), "abc", "error id");
        is_int(m.code, KS_ERR_NO_CONTEXT, "error code");
        is_str(m.message, "no context \"x\"\nsecond line", "error message with its newline");
        is_str(json_string_value(json_object_get(m.data, "context")), "x", "error data");
        rpc_message_done(&m);

        err2 = protocol_error(NULL, RPC_INTERNAL_ERROR, "bad \xff\xfe utf-8", NULL);
        ok(err2 != NULL, "an error message that is not UTF-8 is still encoded");
        is_int(protocol_parse_message(err2, strlen(err2), &m), 0, "and parses");
        is_str(m.message, "bad \xEF\xBF\xBD\xEF\xBF\xBD utf-8", "invalid bytes become U+FFFD");
        ok(m.data == NULL, "no data member");
        rpc_message_done(&m);

        notif = protocol_notification("output", json_pack("{s:s}", "text", "a\nb"));
        is_str(notif, "{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{\"text\":\"a\\nb\"}}\n",
               "protocol_notification");
        is_int(protocol_parse_message(notif, strlen(notif), &m), 0, "kernelctl parses a notification");
        is_int(m.kind, RPC_NOTIFICATION, "notification kind");
        is_str(m.method, "output", "notification method");
        is_str(json_string_value(json_object_get(m.params, "text")), "a\nb", "notification params");
        ok(m.id == NULL, "a notification has no id");
        rpc_message_done(&m);

        bad = protocol_request(1, "bad \xff method", NULL);
        ok(bad == NULL, "a method that is not UTF-8 cannot be encoded");
}

typedef struct BadRequest {
        const char *text;
        size_t len; /* 0: strlen */
        int code;
        int id; /* -1: no id could be read, -2: a null id, else the integer id */
        const char *what;
} BadRequest;

static void test_parse_request_errors(void) {
        static const char nul_in_string[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ec\0ho\"}";
        static const char nul_after[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}\0";
        static const BadRequest cases[] = {
                { "this is not json", 0, RPC_PARSE_ERROR, -1, "not JSON" },
                { "", 0, RPC_PARSE_ERROR, -1, "empty" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"", 0, RPC_PARSE_ERROR, -1, "truncated" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"} {}", 0, RPC_PARSE_ERROR, -1, "two values" },
                { nul_in_string, sizeof nul_in_string - 1, RPC_PARSE_ERROR, -1, "embedded NUL in a string" },
                { nul_after, sizeof nul_after - 1, RPC_PARSE_ERROR, -1, "NUL after the object" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}", 0, RPC_PARSE_ERROR, -1, "escaped NUL" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", 0, RPC_PARSE_ERROR, -1, "invalid UTF-8" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"x\"}", 0, RPC_PARSE_ERROR, -1,
                  "duplicate key" },
                { "{\"jsonrpc\":\"2.0\",\"id\":123456789012345678901234567890,\"method\":\"x\"}", 0, RPC_PARSE_ERROR,
                  -1, "integer id beyond 64 bits" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1e999,\"method\":\"x\"}", 0, RPC_PARSE_ERROR, -1, "real id overflow" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"n\":99999999999999999999999}}", 0,
                  RPC_PARSE_ERROR, -1, "huge number in params" },
                { "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}]", 0, RPC_INVALID_REQUEST, -1, "batch array" },
                { "42", 0, RPC_INVALID_REQUEST, -1, "a number" },
                { "\"status\"", 0, RPC_INVALID_REQUEST, -1, "a string" },
                { "null", 0, RPC_INVALID_REQUEST, -1, "null" },
                { "{\"id\":1,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, 1, "jsonrpc missing" },
                { "{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, 2, "jsonrpc 1.0" },
                { "{\"jsonrpc\":2.0,\"id\":3,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, 3, "jsonrpc a number" },
                { "{\"jsonrpc\":\"2.0\",\"id\":4}", 0, RPC_INVALID_REQUEST, 4, "method missing" },
                { "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":5}", 0, RPC_INVALID_REQUEST, 5, "method a number" },
                { "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":null}", 0, RPC_INVALID_REQUEST, 6, "method null" },
                { "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\",\"params\":[1]}", 0, RPC_INVALID_REQUEST, 7,
                  "params an array" },
                { "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\",\"params\":\"a\"}", 0, RPC_INVALID_REQUEST, 8,
                  "params a string" },
                { "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\",\"params\":null}", 0, RPC_INVALID_REQUEST, 9,
                  "params null" },
                { "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"x\",\"extra\":1}", 0, RPC_INVALID_REQUEST, 10,
                  "unknown member" },
                { "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":5}", 0, RPC_INVALID_REQUEST, -2,
                  "null id, bad method" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "fractional id" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "real id 1.0" },
                { "{\"jsonrpc\":\"2.0\",\"id\":1e300,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "real id 1e300" },
                { "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "bool id" },
                { "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "array id" },
                { "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}", 0, RPC_INVALID_REQUEST, -1, "object id" },
        };
        _cleanup_free_ char *deep = NULL;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const BadRequest *b = &cases[i];
                RpcRequest r = { .method = "untouched" };
                int code = 0;
                const char *message = NULL;
                json_t *root = NULL, *id = NULL;

                is_int(protocol_parse_request(b->text, b->len ?: strlen(b->text), &r, &code, &message, &root, &id),
                       -EBADMSG, "%s: rejected", b->what);
                is_int(code, b->code, "%s: code", b->what);
                ok(message && *message, "%s: has a message (%s)", b->what, message ?: "");
                if (b->id == -1)
                        ok(id == NULL, "%s: no id", b->what);
                else if (b->id == -2)
                        ok(json_is_null(id), "%s: null id", b->what);
                else
                        ok(json_is_integer(id) && json_integer_value(id) == b->id, "%s: id %d", b->what, b->id);
                ok(r.root == NULL && streq(r.method, "untouched"), "%s: request untouched", b->what);
                json_decref(root);
        }

        /* jansson bounds the nesting depth, so this is a parse error and not a stack overflow. */
        deep = malloc(100001);
        memset(deep, '[', 100000);
        deep[100000] = '\0';
        {
                RpcRequest r;
                int code = 0;
                const char *message = NULL;
                json_t *root = NULL, *id = NULL;

                is_int(protocol_parse_request(deep, 100000, &r, &code, &message, &root, &id), -EBADMSG,
                       "deep nesting rejected");
                is_int(code, RPC_PARSE_ERROR, "deep nesting: parse error");
                json_decref(root);
        }
}

static void test_parse_request_valid(void) {
        static const struct {
                const char *text;
                int id_type; /* 0: none, 1: integer, 2: string, 3: null */
                long long id;
        } cases[] = {
                { "{\"jsonrpc\":\"2.0\",\"method\":\"echo\"}", 0, 0 },
                { "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"echo\",\"params\":{}}", 1, 0 },
                { "{\"jsonrpc\":\"2.0\",\"id\":-9,\"method\":\"echo\"}", 1, -9 },
                { "{\"jsonrpc\":\"2.0\",\"id\":9007199254740993,\"method\":\"echo\"}", 1, 9007199254740993LL },
                { "{\"jsonrpc\":\"2.0\",\"id\":\"x-1\",\"method\":\"echo\"}", 2, 0 },
                { "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"echo\"}", 3, 0 },
                { " \t{\"params\":{\"a\":1},\"method\":\"echo\",\"jsonrpc\":\"2.0\",\"id\":3}\r", 1, 3 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RpcRequest r;
                int code = 0;
                const char *message = NULL;
                json_t *root = NULL, *id = NULL;

                is_int(protocol_parse_request(cases[i].text, strlen(cases[i].text), &r, &code, &message, &root, &id),
                       0, "valid request %zu accepted", i);
                is_str(r.method, "echo", "valid request %zu: method", i);
                ok(json_is_object(r.params), "valid request %zu: params object", i);
                switch (cases[i].id_type) {
                case 0:
                        ok(r.id == NULL, "valid request %zu: a notification", i);
                        break;
                case 1:
                        ok(json_is_integer(r.id) && json_integer_value(r.id) == cases[i].id,
                           "valid request %zu: integer id", i);
                        break;
                case 2:
                        ok(json_is_string(r.id), "valid request %zu: string id", i);
                        break;
                case 3:
                        ok(r.id && json_is_null(r.id), "valid request %zu: null id is a request, not a notification",
                           i);
                        break;
                }
                json_decref(r.root);
        }
}

static void test_parse_message_errors(void) {
        static const char *const cases[] = {
                "garbage",
                "[]",
                "{\"id\":1,\"result\":1}",
                "{\"jsonrpc\":\"2.0\",\"result\":1}",
                "{\"jsonrpc\":\"2.0\",\"id\":1}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{\"code\":1,\"message\":\"m\"}}",
                "{\"jsonrpc\":\"2.0\",\"id\":true,\"result\":1}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"oops\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"1\",\"message\":\"m\"}}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":4294967296,\"message\":\"m\"}}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"output\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":7}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":[]}",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RpcMessage m = { .code = 12345 };

                is_int(protocol_parse_message(cases[i], strlen(cases[i]), &m), -EBADMSG, "bad message %zu: %s", i,
                       cases[i]);
                ok(m.root == NULL && m.code == 12345, "bad message %zu: output untouched", i);
        }
        rpc_message_done(NULL);
}

static void test_timeout_usec(void) {
        const usec_t max = PROTOCOL_MAX_TIMEOUT_SEC * USEC_PER_SEC;
        usec_t u = 77;

        is_int(protocol_timeout_usec(NAN, max, &u), -EINVAL, "timeout NaN: -EINVAL");
        is_int(protocol_timeout_usec(-1, max, &u), -EINVAL, "timeout -1: -EINVAL");
        is_int(protocol_timeout_usec(-INFINITY, max, &u), -EINVAL, "timeout -inf: -EINVAL");
        is_int(protocol_timeout_usec(0, max, &u), -EINVAL, "timeout 0: -EINVAL");
        is_int(u, 77, "refused timeouts leave *ret alone");
        is_int(protocol_timeout_usec(1.5, max, &u), 0, "timeout 1.5");
        is_int(u, 1500000, "1.5 s is 1500000 us");
        is_int(protocol_timeout_usec(1e-9, max, &u), 0, "timeout 1e-9");
        is_int(u, 1, "a tiny timeout is 1 us, not 0");
        is_int(protocol_timeout_usec(86400, max, &u), 0, "timeout 86400: not clamped");
        ok(u == max, "86400 s exactly");
        is_int(protocol_timeout_usec(86400.5, max, &u), 1, "timeout 86400.5: clamped");
        ok(u == max, "to the maximum");
        is_int(protocol_timeout_usec(1e17, max, &u), 1, "timeout 1e17: clamped, not wrapped");
        ok(u == max, "1e17 s is the maximum");
        is_int(protocol_timeout_usec(1e300, max, &u), 1, "timeout 1e300: clamped");
        is_int(protocol_timeout_usec(INFINITY, max, &u), 1, "timeout inf: clamped");
        ok(u == max, "inf is the maximum");
        is_int(protocol_timeout_usec(1e300, USEC_INFINITY - 1, &u), 1, "a maximum near 2^64: clamped");
        ok(u == USEC_INFINITY - 1, "to it");
}

static void test_exit_codes(void) {
        /* Literal numbers on both sides: the wire codes and the exit codes are documented (kernelctl(1)), so a
         * change to either constant must fail here, not follow along. */
        is_int(protocol_exit_code(-32000), 1, "-32000 (KS_ERR_FAILED) -> 1");
        is_int(protocol_exit_code(-32001), 5, "-32001 (KS_ERR_NO_CONTEXT) -> 5");
        is_int(protocol_exit_code(-32002), 4, "-32002 (KS_ERR_PERMISSION) -> 4");
        is_int(protocol_exit_code(-32003), 6, "-32003 (KS_ERR_TIMEOUT) -> 6");
        is_int(protocol_exit_code(-32004), 7, "-32004 (KS_ERR_CELL_ERROR) -> 7");
        is_int(protocol_exit_code(-32005), 8, "-32005 (KS_ERR_REPLACED) -> 8");
        is_int(protocol_exit_code(-32700), 1, "-32700 (parse error) -> 1");
        is_int(protocol_exit_code(-32601), 1, "-32601 (method not found) -> 1");
        is_int(protocol_exit_code(-32602), 1, "-32602 (invalid params) -> 1");
        is_int(protocol_exit_code(-32099), 1, "unknown server error -> 1");
        is_int(protocol_exit_code(0), 1, "0 is no error code -> 1");
        is_int(protocol_exit_code(42), 1, "unknown code -> 1");
}

int main(void) {
        /* As kernelsupd does: a vanished peer must be an EPIPE, not a signal. */
        signal(SIGPIPE, SIG_IGN);
        /* Every log statement runs, so the sanitizers see their formats. */
        log_max_level = LOG_DEBUG;

        test_encoders();
        test_parse_request_errors();
        test_parse_request_valid();
        test_parse_message_errors();
        test_exit_codes();
        test_timeout_usec();
        return tap_done();
}
