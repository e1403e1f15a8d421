/* What kernelctl.c (options, the verb table, --help) and kernelctl-exec.c (the exec verb) share:
 * the parsed options and the verbs' common helpers. A verb returns a kernelctl exit code
 * (doc/design.md, section 6) and has printed what it has to say. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "util.h"

/* How long a verb waits for the daemon when no --timeout says otherwise. */
#define STATUS_WAIT_USEC (15 * USEC_PER_SEC)

typedef struct Options {
        const char *socket;
        bool json;
        bool stream;             /* exec: JSON lines as outputs arrive */
        bool traceback;          /* exec: whole tracebacks */
        size_t max_output;       /* exec: the text's budget in bytes (head and tail kept); 0: none */
        const char *save_images; /* exec: the directory the text mode writes images to; NULL: none */
        const char *expect;      /* check: the kernel_id saved earlier */
        usec_t timeout;          /* USEC_INFINITY when not given */
        bool dry_run;            /* reload: say what would change */
        bool wait;               /* add: until the new context's kernel is ready */
        /* add: the new context's settings; env is NULL-terminated. */
        const char *user, *group, *cwd, *connection_file;
        const char *kernel, *transport, *restore; /* add: the new context's kernelspec, transport, restore */
        char **env;
        unsigned n_env;
} Options;

/* kernelctl-exec.c: exec CONTEXT [CODE|-]. args[0] names the context (checked by the dispatcher). */
int cmd_exec(const Options *o, char **args, unsigned n_args);
