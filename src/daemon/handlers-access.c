/* Who sees what of the control methods: the context a request names, found for the peer only if the peer may see
 * it (the threat model's "a uid sees only its own contexts"). See handlers-private.h. */
#include <unistd.h>

#include "handlers-private.h"
#include "protocol.h"

Context *handlers_find(Handlers *h, const char *name) {
        return h->host.find(h->host.userdata, name);
}

bool handlers_peer_privileged(const ControlPeer *peer) {
        return peer->uid == 0 || peer->uid == getuid();
}

bool handlers_peer_sees(const ControlPeer *peer, const Context *c) {
        return handlers_peer_sees_uid(peer, context_uid(c));
}

bool handlers_peer_sees_uid(const ControlPeer *peer, uid_t uid) {
        return handlers_peer_privileged(peer) || uid == peer->uid;
}

Context *handlers_request_context(Handlers *h, ControlRequest *req, json_t *params) {
        const char *name = json_string_value(json_object_get(params, "context"));
        Context *c;

        if (!name) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.context must be a context name");
                return NULL;
        }
        c = handlers_find(h, name);
        /* Another uid's context is answered as a missing one, so no name can be probed. */
        if (!c || !handlers_peer_sees(control_request_peer(req), c)) {
                control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s", name);
                return NULL;
        }
        if (h->host.stopping(h->host.userdata)) {
                control_request_error(req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
                return NULL;
        }
        return c;
}

ExecutionStore *handlers_executions(Handlers *h) {
        return h->executions;
}
