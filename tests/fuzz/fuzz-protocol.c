/* libFuzzer harness: the control protocol's parsers. The input is one line
 * as a peer sends it (the daemon cuts lines at '\n' and passes the rest):
 * the daemon's request parser, and kernelctl's parser of what the daemon
 * sends. Properties: a refused request says why with a JSON-RPC code; an
 * accepted one has a method and an object for params, and the reply the
 * daemon would encode for its id reads back on the client side with that id. */
#include "fuzz-util.h"
#include "protocol.h"

static void check_request(const uint8_t *data, size_t size) {
        RpcRequest rpc = {};
        const char *message = NULL;
        json_t *root = NULL, *id = NULL;
        int code = 0, r;

        r = protocol_parse_request((const char *) data, size, &rpc, &code, &message, &root, &id);
        if (r < 0) {
                FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
                if (r == -EBADMSG)
                        FUZZ_CHECK((code == RPC_PARSE_ERROR || code == RPC_INVALID_REQUEST) && message && *message);
                /* The error reply the daemon sends back must encode. */
                free(protocol_error(id, code, message, NULL));
                json_decref(root);
                return;
        }
        FUZZ_CHECK(rpc.root && rpc.method && json_is_object(rpc.params));
        {
                char *line = protocol_result(rpc.id, json_incref(rpc.params));
                RpcMessage m = {};

                FUZZ_CHECK(line && line[strlen(line) - 1] == '\n' && !memchr(line, '\n', strlen(line) - 1));
                FUZZ_CHECK(protocol_parse_message(line, strlen(line) - 1, &m) == 0);
                FUZZ_CHECK(m.kind == RPC_RESULT && json_equal(m.result, rpc.params));
                FUZZ_CHECK(rpc.id ? json_equal(m.id, rpc.id) : json_is_null(m.id));
                rpc_message_done(&m);
                free(line);
        }
        json_decref(rpc.root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        RpcMessage m = {};

        if (size > PROTOCOL_MAX_LINE)
                return -1;
        check_request(data, size);
        if (protocol_parse_message((const char *) data, size, &m) == 0) {
                FUZZ_CHECK(m.root);
                if (m.kind == RPC_ERROR)
                        FUZZ_CHECK(m.message);
                else if (m.kind == RPC_NOTIFICATION)
                        FUZZ_CHECK(m.method && json_is_object(m.params));
                (void) protocol_exit_code(m.code);
                rpc_message_done(&m);
        }
        return 0;
}
