/* The control methods: status, check, wait, start, stop, restart, execute, interrupt, reload, add, remove, metrics,
 * kernels, history, and the executions' attach, executions and cancel,
 * one table of them, and the requests that wait for a context's state. They reach the daemon only through the
 * HandlersHost they are given. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

#include "context.h"
#include "control.h"
#include "metrics.h"
#include "reply.h"

/* What the handlers need from their owner. Copied by handlers_new; the owner answers the callbacks, each given
 * userdata, from the loop, and none of them re-enters the handlers. */
typedef struct HandlersHost {
        uv_loop_t *loop;
        void *userdata;
        /* The context called name, NULL when there is none. */
        Context *(*find)(void *userdata, const char *name);
        /* Every context, sorted by name, *ret_n of them: valid until the next reload. */
        Context *const *(*contexts)(void *userdata, size_t *ret_n);
        /* Whether the daemon is shutting down. */
        bool (*stopping)(void *userdata);
        /* The daemon's own status for peer, in *ret (reply.h), which borrows from the daemon until the loop runs
         * again, but for degraded: when the daemon is degraded, a newly allocated sentence, also put in
         * *ret_degraded for the caller to free. */
        void (*status)(void *userdata, const ControlPeer *peer, ReplySupervisor *ret, char **ret_degraded);
        /* Reads the configuration again and applies it (dry_run: only says what would change), announced to
         * the service manager and logged: supervisor_reload()'s contract. Contexts it removes stay valid
         * until the loop runs again. */
        int (*reload)(void *userdata, bool dry_run, json_t **ret_report, char **ret_error);
        /* The configuration loaded: user_contexts_max and the defaults bound another uid's add. Valid until the
         * next reload. */
        const Config *(*config)(void *userdata);
        /* The directory add writes NAME.ini into, and remove deletes it from. */
        const char *(*contexts_dir)(void *userdata);
        /* The daemon's own values for the metrics method, all but ret->privileged. */
        void (*metrics)(void *userdata, MetricsDaemon *ret);
        /* The bound on the outputs executions keep (executions_memory); handlers_set_executions_memory changes
         * it. */
        size_t executions_memory;
} HandlersHost;

typedef struct Handlers Handlers;

int handlers_new(const HandlersHost *host, Handlers **ret);

/* The control method table, for control_server_new() with h as its userdata: valid while h is. */
const ControlMethod *handlers_methods(const Handlers *h, size_t *ret_n);

/* A reload's executions_memory, applied at once (the oldest ended executions lose their outputs). */
void handlers_set_executions_memory(Handlers *h, size_t bytes);

/* The owner's ContextHost.state_changed and .heartbeat pass c on here: the requests waiting for it move on and
 * may be answered. */
void handlers_context_changed(Handlers *h, Context *c);
void handlers_heartbeat(Handlers *h, Context *c);

/* c, removed by a reload, is about to be freed: a request waiting for it to stop is answered, any other waiting
 * for it gets an error. */
void handlers_context_removed(Handlers *h, Context *c);

/* The daemon exits: every waiting request is answered with an error. */
void handlers_shutdown(Handlers *h);

/* Call handlers_shutdown() first when requests may be waiting. NULL-safe. */
void handlers_free(Handlers *h);

/* Root and the daemon's own uid see every context; another uid only the contexts whose kernels run as that
 * uid. */
bool handlers_peer_sees(const ControlPeer *peer, const Context *c);
