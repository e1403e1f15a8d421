/* What kernelctl.c (options, the verb table, --help) and kernelctl-exec.c (the exec verb) share:
 * the parsed options and the verbs' common helpers. A verb returns a kernelctl exit code
 * (doc/design.md, section 6) and has printed what it has to say. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "client.h"
#include "util.h"

/* How long a verb waits for the daemon when no --timeout says otherwise. */
#define STATUS_WAIT_USEC (15 * USEC_PER_SEC)

typedef struct Options {
        const char *socket;
        bool json;
        bool stream;             /* exec, attach: JSON lines as outputs arrive */
        bool traceback;          /* exec, attach: whole tracebacks */
        size_t max_output;       /* exec: the text's budget in bytes (head and tail kept); 0: none */
        const char *save_images; /* exec: the directory the text mode writes images to; NULL: none */
        bool detach;             /* exec: print the execution's id once accepted, leave it running */
        usec_t kill_after;       /* exec: kill the kernel when an interrupt has not ended the cell by then; 0: no */
        long long from;          /* attach: the first output's number; -1 when not given (0) */
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
/* Prints one output as it arrives: a JSON line with --stream, nothing with --json (the result carries it), else
 * the renderer's text. */
void exec_print_output(const Options *o, const json_t *output);
/* The exit code of a cell's status ("ok" 0, "error" 7, ...). */
int exec_exit_code(const char *status);
/* Prints the end of a cell as exec does from the daemon's answer to execute (or attach) and returns exec's exit
 * code; show_result_outputs: print the result's outputs too (none was streamed). context: for the exit() note. */
int exec_answer(const Options *o, const char *context, const ClientReply *reply, bool show_result_outputs);

/* kernelctl-attach.c: attach, executions, cancel (exec --detach is exec's, in kernelctl-exec.c). */
int cmd_attach(const Options *o, char **args, unsigned n_args);
int cmd_executions(const Options *o, char **args, unsigned n_args);
int cmd_cancel(const Options *o, char **args, unsigned n_args);
