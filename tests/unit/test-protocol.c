/* Tests for protocol.c (encoders, strict request parsing, client-side
 * decoding, exit codes) and for control.c with a real uv loop and real
 * client sockets on a temporary path. */

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
        is_str(m.message, "bad ?? utf-8", "invalid bytes become '?'");
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

/* ---- control.c ----------------------------------------------------------------------------------------- */

static uv_loop_t loop;
static int n_cancelled, n_late_answers;
static char tmpdir[] = "/tmp/test-protocol.XXXXXX";

typedef struct Later {
        uv_timer_t timer;
        ControlRequest *req;
} Later;

static void later_free(uv_handle_t *h) {
        free(h->data);
}

static void later_fire(uv_timer_t *t) {
        Later *l = t->data;

        n_late_answers++;
        control_request_reply(l->req, json_string("later"));
        uv_close((uv_handle_t *) &l->timer, later_free);
}

static void later_cancel(ControlRequest *req, void *data) {
        Later *l = data;

        n_cancelled++;
        uv_timer_stop(&l->timer);
        uv_close((uv_handle_t *) &l->timer, later_free);
}

/* Answers from a timer after params.ms; "later" cancels on disconnect, "orphan" does not. */
static void later_start(ControlRequest *req, json_t *params, bool cancellable) {
        Later *l = calloc(1, sizeof *l);

        uv_timer_init(&loop, &l->timer);
        l->timer.data = l;
        l->req = req;
        if (cancellable)
                control_request_set_cancel(req, later_cancel, l);
        uv_timer_start(&l->timer, later_fire, (uint64_t) json_integer_value(json_object_get(params, "ms")), 0);
}

static void method_later(ControlRequest *req, json_t *params, void *userdata) {
        later_start(req, params, true);
}

static void method_orphan(ControlRequest *req, json_t *params, void *userdata) {
        later_start(req, params, false);
}

static void hold_cancel(ControlRequest *req, void *data) {
        n_cancelled++;
}

static void method_hold(ControlRequest *req, json_t *params, void *userdata) {
        control_request_set_cancel(req, hold_cancel, NULL);
}

static unsigned n_echo;

static void method_echo(ControlRequest *req, json_t *params, void *userdata) {
        n_echo++;
        control_request_reply(req, json_pack("{s:O,s:s,s:s}", "params", params, "method", control_request_method(req),
                                             "userdata", (const char *) userdata));
}

static void method_fail(ControlRequest *req, json_t *params, void *userdata) {
        control_request_error(req, KS_ERR_NO_CONTEXT, json_pack("{s:s}", "context", "nope"), "no such context: %s",
                              "nope");
}

static void method_stream(ControlRequest *req, json_t *params, void *userdata) {
        is_int(control_request_notify(req, "output", json_pack("{s:s}", "text", "one")), 0, "notify 1 queued");
        is_int(control_request_notify(req, "output", json_pack("{s:s}", "text", "two")), 0, "notify 2 queued");
        control_request_reply(req, json_true());
}

/* params {n, size, allow}: n notifications of size bytes at once, then a reply. */
static unsigned n_spewed, n_spew_refused;
static bool spew_ran;

static void method_spew(ControlRequest *req, json_t *params, void *userdata) {
        size_t size = (size_t) json_integer_value(json_object_get(params, "size"));
        json_int_t n = json_integer_value(json_object_get(params, "n"));
        _cleanup_free_ char *text = malloc(size + 1);

        if (json_integer_value(json_object_get(params, "allow")) > 0)
                control_request_allow_queue(req, (size_t) json_integer_value(json_object_get(params, "allow")));
        memset(text, 's', size);
        text[size] = '\0';
        n_spewed = n_spew_refused = 0;
        for (json_int_t i = 0; i < n; i++) {
                if (control_request_notify(req, "output", json_pack("{s:s}", "text", text)) == 0)
                        n_spewed++;
                else
                        n_spew_refused++;
        }
        spew_ran = true;
        control_request_reply(req, json_true());
}

static void method_peer(ControlRequest *req, json_t *params, void *userdata) {
        const ControlPeer *p = control_request_peer(req);

        control_request_reply(req, json_pack("{s:I,s:I,s:I}", "pid", (json_int_t) p->pid, "uid", (json_int_t) p->uid,
                                             "gid", (json_int_t) p->gid));
}

static const ControlMethod methods[] = {
        { "echo", method_echo, 0 }, { "later", method_later, 0 }, { "orphan", method_orphan, 0 },
        { "hold", method_hold, 0 }, { "fail", method_fail, 0 },   { "stream", method_stream, 0 },
        { "peer", method_peer, 0 }, { "spew", method_spew, 0 },
};

/* Runs the loop until fd is ready for events. Gives up after 30 s so that a
 * broken server fails the test instead of hanging it; nothing is timed. */
static bool pump_until(int fd, short events) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;

        for (;;) {
                struct pollfd p[2] = {
                        { .fd = fd, .events = events },
                        { .fd = uv_backend_fd(&loop), .events = POLLIN },
                };
                int t;

                uv_run(&loop, UV_RUN_NOWAIT);
                if (poll(p, 1, 0) > 0)
                        return true;
                if (now_usec(CLOCK_MONOTONIC) > deadline)
                        return false;
                t = uv_backend_timeout(&loop);
                if (t < 0 || t > 100)
                        t = 100;
                (void) poll(p, 2, t);
        }
}

/* A few loop iterations without waiting, for what is already pending. */
static void pump_briefly(void) {
        for (int i = 0; i < 10; i++)
                uv_run(&loop, UV_RUN_NOWAIT);
}

/* Runs the loop until *counter reaches want. */
static bool pump_until_count(const int *counter, int want) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;

        while (*counter < want) {
                struct pollfd p = { .fd = uv_backend_fd(&loop), .events = POLLIN };
                int t = uv_backend_timeout(&loop);

                if (now_usec(CLOCK_MONOTONIC) > deadline)
                        return false;
                (void) poll(&p, 1, t < 0 || t > 100 ? 100 : t);
                uv_run(&loop, UV_RUN_NOWAIT);
        }
        return true;
}

typedef struct Client {
        int fd;
        char *buf;
        size_t len, alloc;
        bool eof;
        int error; /* errno that ended the stream, 0 for a clean EOF */
} Client;

static void client_done(Client *c) {
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        *c = (Client){ .fd = -1 };
}

static int client_connect(const char *path, Client *ret) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret = (Client){ .fd = fd };
        return 0;
}

static int client_send(Client *c, const char *data, size_t len) {
        while (len > 0) {
                ssize_t k = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);

                if (k < 0) {
                        if (errno != EAGAIN)
                                return -errno;
                        if (!pump_until(c->fd, POLLOUT))
                                return -ETIMEDOUT;
                        continue;
                }
                data += k;
                len -= (size_t) k;
        }
        return 0;
}

static int client_send_str(Client *c, const char *s) {
        return client_send(c, s, strlen(s));
}

/* One line without its newline (caller frees), or NULL at the end of the stream. */
static char *client_read_line(Client *c) {
        for (;;) {
                char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
                ssize_t k;

                if (nl) {
                        size_t n = (size_t) (nl - c->buf);
                        char *line = malloc(n + 1);

                        memcpy(line, c->buf, n);
                        line[n] = '\0';
                        memmove(c->buf, nl + 1, c->len - n - 1);
                        c->len -= n + 1;
                        return line;
                }
                if (c->eof)
                        return NULL;
                if (!pump_until(c->fd, POLLIN)) {
                        c->eof = true;
                        c->error = ETIMEDOUT;
                        return NULL;
                }
                if (c->alloc - c->len < 65536) {
                        c->alloc = c->alloc * 2 + 65536;
                        c->buf = realloc(c->buf, c->alloc);
                }
                k = recv(c->fd, c->buf + c->len, c->alloc - c->len, MSG_DONTWAIT);
                if (k > 0)
                        c->len += (size_t) k;
                else if (k == 0)
                        c->eof = true;
                else if (errno != EAGAIN) {
                        c->eof = true;
                        c->error = errno;
                }
        }
}

/* Reads one message; false (and a diagnostic) at the end of the stream or on garbage. */
static bool client_read_message(Client *c, RpcMessage *m) {
        _cleanup_free_ char *line = client_read_line(c);

        if (!line) {
                printf("# stream ended: %s\n", c->error ? strerror(c->error) : "EOF");
                return false;
        }
        if (protocol_parse_message(line, strlen(line), m) < 0) {
                printf("# unparsable line: %.200s\n", line);
                return false;
        }
        return true;
}

/* True when the server has closed the connection: everything left is read and then EOF or a reset. */
static bool client_closed_by_server(Client *c) {
        char *line;

        while ((line = client_read_line(c)))
                free(line);
        return c->eof && (c->error == 0 || c->error == ECONNRESET);
}

static bool reply_is_result(const RpcMessage *m, long long id) {
        return m->kind == RPC_RESULT && json_is_integer(m->id) && json_integer_value(m->id) == id;
}

static bool reply_is_error(const RpcMessage *m, int code) {
        return m->kind == RPC_ERROR && m->code == code;
}

static bool client_echo_works(Client *c, long long id) {
        _cleanup_free_ char *req = protocol_request(id, "echo", json_pack("{s:I}", "n", (json_int_t) id));
        RpcMessage m;
        bool good;

        if (client_send_str(c, req) < 0 || !client_read_message(c, &m))
                return false;
        good = reply_is_result(&m, id) &&
               json_integer_value(json_object_get(json_object_get(m.result, "params"), "n")) == id;
        rpc_message_done(&m);
        return good;
}

static char *path_in_tmp(const char *name) {
        char *p;

        if (asprintf(&p, "%s/%s", tmpdir, name) < 0)
                abort();
        return p;
}

static void test_server_requests(ControlServer *s, const char *path) {
        Client c;
        RpcMessage m;
        struct stat st;
        _cleanup_free_ char *later = NULL, *echo = NULL, *both = NULL;

        ok(stat(path, &st) == 0 && S_ISSOCK(st.st_mode), "the socket file exists");
        is_int(st.st_mode & 07777, 0660, "socket file mode 0660");

        is_int(client_connect(path, &c), 0, "client connects");

        ok(client_echo_works(&c, 1), "a valid request gets its result");

        is_int(client_send_str(&c, "this is not json\n"), 0, "send garbage");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_PARSE_ERROR) && json_is_null(m.id),
           "garbage gets -32700 with a null id");
        rpc_message_done(&m);
        ok(client_echo_works(&c, 2), "the connection still works after garbage");

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n"), 0, "send unknown method");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_METHOD_NOT_FOUND) && json_integer_value(m.id) == 3 &&
                   strstr(m.message, "nope"),
           "unknown method gets -32601 with its id and name");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"echo\",\"params\":[1]}\n"), 0,
               "send params array");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) && json_integer_value(m.id) == 4,
           "params array gets -32600 with its id");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"echo\"}\n"
                                   "{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}\n"
                                   "{\"jsonrpc\":\"2.0\",\"method\":\"fail\"}\n"
                                   "\n \r\n"
                                   "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"echo\"}\n"),
               0, "send notifications, blank lines, then a request");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 5),
           "notifications (even unknown or failing ones) and blank lines get no reply");
        rpc_message_done(&m);

        is_int(client_send_str(&c,
                               "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"echo\",\"params\":{\"k\":\"v\"}}\n"),
               0, "send a string id");
        ok(client_read_message(&c, &m) && m.kind == RPC_RESULT && json_is_string(m.id) &&
                   streq(json_string_value(m.id), "s"),
           "a string id comes back");
        is_str(json_string_value(json_object_get(json_object_get(m.result, "params"), "k")), "v",
               "the handler saw the params");
        is_str(json_string_value(json_object_get(m.result, "method")), "echo", "control_request_method");
        is_str(json_string_value(json_object_get(m.result, "userdata")), "ud", "the handler got the userdata");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"echo\"}\n"), 0, "send a null id");
        ok(client_read_message(&c, &m) && m.kind == RPC_RESULT && json_is_null(m.id),
           "a request with a null id is answered with a null id");
        rpc_message_done(&m);

        /* Two requests in one write: the later one is still pending when the echo is answered. */
        later = protocol_request(7, "later", json_pack("{s:i}", "ms", 1));
        echo = protocol_request(8, "echo", NULL);
        ok(asprintf(&both, "%s%s", later, echo) > 0, "two requests");
        is_int(client_send_str(&c, both), 0, "send later then echo");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 8), "the echo is answered while later is pending");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_result(&m, 7) && streq(json_string_value(m.result), "later"),
           "then later answers from its timer");
        rpc_message_done(&m);

        /* A request split over several writes. */
        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":9,"), 0, "send half a request");
        pump_briefly();
        is_int(client_send_str(&c, "\"method\":\"echo\"}\n"), 0, "send the other half");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 9), "a split request is answered");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"fail\"}\n"), 0, "send fail");
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_NO_CONTEXT) && json_integer_value(m.id) == 10,
           "a handler error keeps its code and id");
        is_str(m.message, "no such context: nope", "the formatted message");
        is_str(json_string_value(json_object_get(m.data, "context")), "nope", "the error data");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"stream\"}\n"), 0, "send stream");
        ok(client_read_message(&c, &m) && m.kind == RPC_NOTIFICATION && streq(m.method, "output") &&
                   streq(json_string_value(json_object_get(m.params, "text")), "one"),
           "first notification");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && m.kind == RPC_NOTIFICATION &&
                   streq(json_string_value(json_object_get(m.params, "text")), "two"),
           "second notification");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_result(&m, 11) && json_is_true(m.result), "then the reply");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"peer\"}\n"), 0, "send peer");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 12), "peer answers");
        is_int(json_integer_value(json_object_get(m.result, "uid")), getuid(), "peer uid is getuid()");
        is_int(json_integer_value(json_object_get(m.result, "gid")), getgid(), "peer gid is getgid()");
        is_int(json_integer_value(json_object_get(m.result, "pid")), getpid(), "peer pid is getpid()");
        rpc_message_done(&m);

        client_done(&c);
}

/* A request of exactly PROTOCOL_MAX_LINE bytes passes; one byte more closes the connection. */
static void test_server_line_limit(const char *path) {
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"echo\",\"params\":{\"pad\":\"";
        static const char tail[] = "\"}}";
        size_t pad = PROTOCOL_MAX_LINE - (sizeof head - 1) - (sizeof tail - 1);
        _cleanup_free_ char *line = malloc(PROTOCOL_MAX_LINE + 2);
        _cleanup_free_ char *big = NULL;
        Client c;
        RpcMessage m;
        int r;

        memcpy(line, head, sizeof head - 1);
        memset(line + sizeof head - 1, 'x', pad);
        memcpy(line + sizeof head - 1 + pad, tail, sizeof tail - 1);
        line[PROTOCOL_MAX_LINE] = '\n';

        is_int(client_connect(path, &c), 0, "connect for the limit");
        is_int(client_send(&c, line, PROTOCOL_MAX_LINE + 1), 0, "send a request of exactly the maximum length");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 50) &&
                   strlen(json_string_value(json_object_get(json_object_get(m.result, "params"), "pad"))) == pad,
           "a request of exactly PROTOCOL_MAX_LINE bytes is served");
        rpc_message_done(&m);

        /* One byte more: pad with a space before the closing brace. */
        memmove(line + PROTOCOL_MAX_LINE - 1, line + PROTOCOL_MAX_LINE - 2, 2);
        line[PROTOCOL_MAX_LINE - 2] = ' ';
        line[PROTOCOL_MAX_LINE] = '}';
        line[PROTOCOL_MAX_LINE + 1] = '\n';
        r = client_send(&c, line, PROTOCOL_MAX_LINE + 2);
        ok(r == 0 || r == -EPIPE || r == -ECONNRESET, "send one byte over the maximum (%d)", r);
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) && json_is_null(m.id) &&
                   streq(m.message, "request too long"),
           "one byte over gets \"request too long\"");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and the connection is closed");
        client_done(&c);

        /* 300 KiB without any newline: refused before its end arrives. */
        big = malloc(300 * 1024);
        memset(big, 'a', 300 * 1024);
        is_int(client_connect(path, &c), 0, "connect for 300 KiB");
        r = client_send(&c, big, 300 * 1024);
        ok(r == 0 || r == -EPIPE || r == -ECONNRESET, "send 300 KiB (%d)", r);
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) &&
                   streq(m.message, "request too long"),
           "a 300 KiB line gets an error");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and a closed connection");
        client_done(&c);
}

static void test_server_disconnects(const char *path) {
        _cleanup_free_ char *later = protocol_request(20, "later", json_pack("{s:i}", "ms", 600000));
        _cleanup_free_ char *orphan = protocol_request(21, "orphan", json_pack("{s:i}", "ms", 1));
        _cleanup_free_ char *line = NULL;
        Client c;
        int answers;

        /* The peer leaves while "later" waits: cancel runs, the timer is stopped. */
        n_cancelled = 0;
        is_int(client_connect(path, &c), 0, "connect for disconnect");
        is_int(client_send_str(&c, later), 0, "send a pending request");
        client_done(&c);
        ok(pump_until_count(&n_cancelled, 1), "disconnect with a pending request fires cancel");
        is_int(n_cancelled, 1, "exactly once");

        /* Without a cancel callback the request lives on; its late answer is dropped. */
        answers = n_late_answers;
        is_int(client_connect(path, &c), 0, "connect for orphan");
        is_int(client_send_str(&c, orphan), 0, "send an orphan request");
        client_done(&c);
        ok(pump_until_count(&n_late_answers, answers + 1), "the orphan's handler answers after the peer left");

        /* The peer stops reading (SHUT_RD): the server's write fails with EPIPE and it drops the peer. */
        answers = n_late_answers;
        is_int(client_connect(path, &c), 0, "connect for EPIPE");
        is_int(client_send_str(&c, orphan), 0, "send an orphan request");
        pump_briefly();
        is_int(shutdown(c.fd, SHUT_RD), 0, "the client shuts its read side");
        ok(pump_until_count(&n_late_answers, answers + 1), "the answer is written into EPIPE");
        {
                usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;
                ssize_t k;

                /* A blank line is harmless to a live server; EPIPE shows it closed its end. */
                while ((k = send(c.fd, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL)) >= 0 &&
                       now_usec(CLOCK_MONOTONIC) < deadline)
                        pump_briefly();
                /* A close with unread data in its buffer may reach us as a reset rather than EPIPE. */
                ok(k < 0 && (errno == EPIPE || errno == ECONNRESET),
                   "the server closed the connection after EPIPE (send: %s)", k < 0 ? strerror(errno) : "ok");
        }
        client_done(&c);

        /* A partial line and then EOF: dropped without a reply or a crash. */
        is_int(client_connect(path, &c), 0, "connect for a partial line");
        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":22,"), 0, "send a partial line");
        is_int(shutdown(c.fd, SHUT_WR), 0, "and EOF");
        line = client_read_line(&c);
        ok(!line && c.eof && c.error == 0, "the server closes without a reply");
        client_done(&c);
}

/* Sends a spew request and runs the loop until the server has handled it. */
static void spew(Client *c, int n, int size, long long allow) {
        _cleanup_free_ char *req = protocol_request(
                31, "spew", json_pack("{s:i, s:i, s:I}", "n", n, "size", size, "allow", (json_int_t) allow));

        spew_ran = false;
        is_int(client_send_str(c, req), 0, "send a spew request");
        while (!spew_ran && pump_until(c->fd, POLLIN))
                ;
}

/* Flow control: a peer that does not read gets backpressure (its further
 * requests wait), and is disconnected only past the bound on what it leaves
 * unread; a request's allowance raises that bound. */
static void test_server_slow_reader(const char *path) {
        _cleanup_free_ char *echo = protocol_request(32, "echo", json_object());
        unsigned before;
        char *line;
        int lines = 0;
        Client c;

        /* 100 notifications of 256 KiB: 25 MiB unread, over the 16 MiB bound. */
        is_int(client_connect(path, &c), 0, "connect a peer that does not read");
        spew(&c, 100, 256 * 1024, 0);
        ok(n_spew_refused > 0 && n_spewed < 100, "past 16 MiB unread the notifications are refused (%u queued)",
           n_spewed);
        ok(client_closed_by_server(&c), "and the connection closed");
        client_done(&c);

        /* The same with an allowance of 32 MiB: kept, and all of it arrives once the peer reads. */
        is_int(client_connect(path, &c), 0, "connect a slow reader");
        spew(&c, 100, 256 * 1024, 32 * 1024 * 1024);
        is_int(n_spewed, 100, "within the allowance every notification is queued");
        before = n_echo;
        is_int(client_send_str(&c, echo), 0, "send another request while 25 MiB are unread");
        for (int i = 0; i < 20; i++)
                uv_run(&loop, UV_RUN_NOWAIT);
        is_int(n_echo, before, "backpressure: the server does not read it yet");
        while ((line = client_read_line(&c))) {
                RpcMessage m;
                bool last = false;

                if (protocol_parse_message(line, strlen(line), &m) == 0) {
                        last = reply_is_result(&m, 32);
                        rpc_message_done(&m);
                }
                free(line);
                lines++;
                if (last)
                        break;
        }
        is_int(lines, 102, "the reader gets 100 notifications, the reply, then the other request's reply");
        is_int(n_echo, before + 1, "the other request was handled once the peer read");
        client_done(&c);
}

/* The idle timeout, shortened here to 300 ms: a silent peer and one that trickles bytes are closed with an error
 * line; one that waits for an answer is not idle, and after the answer its clock runs again; a request that came in
 * time while the loop was busy is answered, not mistaken for silence. */
static void test_server_idle(ControlServer *s, const char *path) {
        _cleanup_free_ char *later = protocol_request(40, "later", json_pack("{s:i}", "ms", 1200));
        _cleanup_free_ char *echo = protocol_request(41, "echo", json_pack("{s:s}", "pad", "x"));
        const char *trickle =
                "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"echo\",\"params\":{\"pad\":\""
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}\n";
        size_t sent = 0;
        RpcMessage m = {}; /* rpc_message_done() zeroes it again, so a failed read leaves nothing to free */
        Client c;

        control_server_set_idle_timeout(s, 300);

        is_int(client_connect(path, &c), 0, "connect and send nothing");
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT) && json_is_null(m.id) &&
                   strstr(m.message, "idle timeout"),
           "a silent peer gets an idle timeout error");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and is closed");
        client_done(&c);

        /* One byte at a time, each within the timeout of the last: the whole line has one deadline. */
        is_int(client_connect(path, &c), 0, "connect a peer that trickles its request");
        while (trickle[sent] && client_send(&c, trickle + sent, 1) == 0) {
                struct pollfd p = { .fd = c.fd, .events = POLLIN };

                sent++;
                pump_briefly();
                if (poll(&p, 1, 100) > 0)
                        break;
        }
        ok(sent < strlen(trickle), "the trickling peer is cut off before its line is complete (%zu of %zu bytes)",
           sent, strlen(trickle));
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT), "with an idle timeout error");
        rpc_message_done(&m);
        client_done(&c);

        /* Waiting 1.2 s for an answer, four times the timeout, is not idle. */
        is_int(client_connect(path, &c), 0, "connect for a slow answer");
        is_int(client_send_str(&c, later), 0, "send a request answered after 1.2 s");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 40), "the slow answer arrives on the open connection");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT),
           "after the answer the clock runs again: idle timeout");
        rpc_message_done(&m);
        client_done(&c);

        /* The loop is blocked past the deadline while a complete request waits unread. */
        is_int(client_connect(path, &c), 0, "connect while the loop runs");
        pump_briefly();
        is_int(client_send_str(&c, echo), 0, "send a request");
        usleep(500 * 1000); /* the daemon busy elsewhere, not a wait for an event */
        ok(client_read_message(&c, &m) && reply_is_result(&m, 41),
           "a request that came in time is answered after the loop was blocked past the deadline");
        rpc_message_done(&m);
        client_done(&c);

        control_server_set_idle_timeout(s, 0);
}

static void test_server_connection_limit(const char *path) {
        Client clients[256], extra;
        RpcMessage m;
        struct rlimit rl;
        int n_ok = 0;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 600) {
                rl.rlim_cur = rl.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 600) {
                diag("RLIMIT_NOFILE too small for 257 connections, skipping the limit test");
                return;
        }

        /* An echo on each makes sure the server has accepted it before the next connects. */
        for (int i = 0; i < 256; i++)
                if (client_connect(path, &clients[i]) == 0 && client_echo_works(&clients[i], 100 + i))
                        n_ok++;
        is_int(n_ok, 256, "256 connections are served");

        is_int(client_connect(path, &extra), 0, "the 257th connects");
        ok(client_read_message(&extra, &m) && reply_is_error(&m, KS_ERR_FAILED) && json_is_null(m.id) &&
                   streq(m.message, "too many connections"),
           "the 257th gets an error line");
        rpc_message_done(&m);
        ok(client_closed_by_server(&extra), "and is closed");
        client_done(&extra);

        /* Once one leaves (its EOF is seen together with the echo on another), there is room again. */
        client_done(&clients[0]);
        ok(client_echo_works(&clients[1], 99), "the others still work");
        is_int(client_connect(path, &extra), 0, "connect again after one left");
        ok(client_echo_works(&extra, 98), "served again below the limit");
        client_done(&extra);

        for (int i = 1; i < 256; i++)
                client_done(&clients[i]);
        /* Let the server see those EOFs (all ready at once, so one iteration) before the next test. */
        pump_briefly();
}

static void test_server_paths(const char *path) {
        _cleanup_free_ char *file = path_in_tmp("regular"), *stale = path_in_tmp("stale.sock");
        _cleanup_free_ char *passed = path_in_tmp("passed.sock");
        char longpath[200];
        ControlServer *s = NULL;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        Client c;
        int fd, pipefd[2], dgram;

        is_int(control_server_new(&loop, path, -1, (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s), -EADDRINUSE,
               "a second server on a live socket gets -EADDRINUSE");
        ok(s == NULL, "and no server");
        is_int(client_connect(path, &c), 0, "the first server still listens");
        ok(client_echo_works(&c, 60), "and still answers");
        client_done(&c);

        fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ok(fd >= 0, "create a regular file");
        close(fd);
        is_int(control_server_new(&loop, file, -1, (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s), -EEXIST,
               "a regular file at the path gets -EEXIST");
        ok(stat(file, &st) == 0 && S_ISREG(st.st_mode), "and the file is left alone");

        memset(longpath, 'l', sizeof longpath - 1);
        longpath[0] = '/';
        longpath[sizeof longpath - 1] = '\0';
        is_int(control_server_new(&loop, longpath, -1, (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s),
               -ENAMETOOLONG, "a path longer than sun_path gets -ENAMETOOLONG");
        is_int(control_server_new(&loop, NULL, -1, (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s), -EINVAL,
               "neither path nor fd gets -EINVAL");

        /* A stale socket: bound, never listened on, closed. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strncpy(sa.sun_path, stale, sizeof sa.sun_path - 1);
        ok(bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0, "bind a socket that nobody listens on");
        close(fd);
        is_int(control_server_new(&loop, stale, -1, getgid(), methods, ELEMENTSOF(methods), (void *) "ud", &s), 0,
               "a stale socket file is replaced");
        ok(stat(stale, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0660 && st.st_gid == getgid(),
           "the new socket has mode 0660 and the group");
        is_int(client_connect(stale, &c), 0, "connect to the replacement");
        ok(client_echo_works(&c, 61), "the replacement answers");
        client_done(&c);
        control_server_close(s);
        ok(stat(stale, &st) < 0 && errno == ENOENT, "closing removes the socket file it bound");

        /* A socket passed in, as systemd would. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strncpy(sa.sun_path, passed, sizeof sa.sun_path - 1);
        ok(bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0 && listen(fd, 16) == 0, "a listening socket to pass");
        is_int(control_server_new(&loop, NULL, fd, (gid_t) -1, methods, ELEMENTSOF(methods), (void *) "ud", &s), 0,
               "a passed listening fd is served");
        is_int(client_connect(passed, &c), 0, "connect to the passed socket");
        ok(client_echo_works(&c, 62), "the passed socket answers");
        client_done(&c);
        control_server_close(s);
        pump_briefly();
        ok(stat(passed, &st) == 0 && S_ISSOCK(st.st_mode), "a passed socket's file is not removed");
        ok(fcntl(fd, F_GETFD) >= 0, "the caller's fd stays open");
        close(fd);
        unlink(passed);

        ok(pipe2(pipefd, O_CLOEXEC) == 0, "a pipe");
        is_int(control_server_new(&loop, NULL, pipefd[0], (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s),
               -ENOTSOCK, "a passed fd that is no socket gets -ENOTSOCK");
        close(pipefd[0]);
        close(pipefd[1]);
        dgram = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        is_int(control_server_new(&loop, NULL, dgram, (gid_t) -1, methods, ELEMENTSOF(methods), NULL, &s), -EPROTOTYPE,
               "a passed datagram socket gets -EPROTOTYPE");
        close(dgram);
        unlink(file);
}

static void test_server_close(ControlServer *s, const char *path) {
        _cleanup_free_ char *hold = protocol_request(40, "hold", NULL);
        _cleanup_free_ char *orphan_later = protocol_request(42, "orphan", json_pack("{s:i}", "ms", 50));
        Client c;
        struct stat st;
        int answers = n_late_answers;

        is_int(client_connect(path, &c), 0, "connect before closing the server");
        is_int(client_send_str(&c, hold), 0, "a request that never answers");
        is_int(client_send_str(&c, orphan_later), 0, "and one without cancel");
        ok(client_echo_works(&c, 43), "the server has read them");
        n_cancelled = 0;
        control_server_close(s);
        is_int(n_cancelled, 1, "control_server_close cancels open requests at once");
        ok(stat(path, &st) < 0 && errno == ENOENT, "and removes its socket file");
        ok(client_closed_by_server(&c), "and closes every connection");
        client_done(&c);
        ok(pump_until_count(&n_late_answers, answers + 1), "a request without cancel answers after the close");
}

static void test_server(void) {
        _cleanup_free_ char *path = NULL;
        ControlServer *s = NULL;

        if (!mkdtemp(tmpdir)) {
                ok(false, "mkdtemp: %s", strerror(errno));
                return;
        }
        path = path_in_tmp("control.sock");
        is_int(uv_loop_init(&loop), 0, "uv_loop_init");
        is_int(control_server_new(&loop, path, -1, (gid_t) -1, methods, ELEMENTSOF(methods), (void *) "ud", &s), 0,
               "control_server_new binds a fresh path");

        test_server_requests(s, path);
        test_server_line_limit(path);
        test_server_disconnects(path);
        test_server_slow_reader(path);
        test_server_idle(s, path);
        test_server_connection_limit(path);
        test_server_paths(path);
        test_server_close(s, path);

        is_int(uv_run(&loop, UV_RUN_DEFAULT), 0, "the loop runs dry");
        is_int(uv_loop_close(&loop), 0, "uv_loop_close() == 0: every handle was closed");
        ok(rmdir(tmpdir) == 0, "the temporary directory is empty");
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
        test_server();
        return tap_done();
}
