/* Particular kernels' behaviour the daemon makes up for (quirks.h). */

#include <string.h>

#include "quirks.h"
#include "util.h"

/* Python's own handler raises KeyboardInterrupt in the main thread; the name goes again, so the user's
 * namespace holds nothing of ours. */
#define SIGINT_CODE                                                                                                   \
        "import signal as _kernelsup_signal\n"                                                                        \
        "_kernelsup_signal.signal(_kernelsup_signal.SIGINT, _kernelsup_signal.default_int_handler)\n"                 \
        "del _kernelsup_signal\n"

const char *quirks_sigint_code(const json_t *kernel_info_content) {
        const char *impl = json_string_value(json_object_get(kernel_info_content, "implementation"));

        return impl && streq(impl, "xeus-python") ? SIGINT_CODE : NULL;
}

/* exit() (IPython's ZMQExitAutocall) sets keepkernel_on_exit from its own argument, False unless asked, before it
 * calls the shell's ask_exit: so it is ask_exit that is wrapped, on the shell (not its class, so that a second
 * request replaces the first), to set keepkernel_on_exit to True first. Through IPython's module, not the user
 * namespace, where get_ipython may be rebound (an adopted kernel); an expression, so no name is bound. */
#define KEEPKERNEL_CODE                                                                                               \
        "(lambda s, a: setattr(s, 'ask_exit', lambda: (setattr(s, 'keepkernel_on_exit', True), a(s))[1]))"            \
        "(__import__('IPython').get_ipython(), type(__import__('IPython').get_ipython()).ask_exit)\n"

const char *quirks_keepkernel_code(const json_t *kernel_info_content) {
        const char *impl = json_string_value(json_object_get(kernel_info_content, "implementation"));

        return impl && streq(impl, "ipython") ? KEEPKERNEL_CODE : NULL;
}

int quirks_exit_asked(const json_t *execute_reply_content) {
        const json_t *payload = json_object_get(execute_reply_content, "payload"), *p;
        size_t i;

        json_array_foreach(payload, i, p) {
                if (streq_ptr(json_string_value(json_object_get(p, "source")), "ask_exit"))
                        return json_is_true(json_object_get(p, "keepkernel")) ? 1 : -1;
        }
        return 0;
}

json_t *quirks_silent_request(const char *code) {
        return json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 1, "store_history", 0,
                         "user_expressions", "allow_stdin", 0, "stop_on_error", 0);
}

/* The basename of argv[0], or of a script run by node (node /path/ijskernel ...). */
static const char *argv_program(char *const *argv) {
        const char *p, *slash;

        if (!argv || !argv[0])
                return "";
        p = argv[0];
        slash = strrchr(p, '/');
        if (slash)
                p = slash + 1;
        if ((streq(p, "node") || streq(p, "nodejs")) && argv[1] && argv[1][0] != '-') {
                slash = strrchr(argv[1], '/');
                p = slash ? slash + 1 : argv[1];
        }
        return p;
}

static bool argv_has_word(char *const *argv, const char *needle) {
        for (size_t i = 0; argv && argv[i]; i++)
                if (strstr(argv[i], needle))
                        return true;
        return false;
}

/* ijavascript's kernel as `ijsinstall --spec-path=full` runs it: node .../ijavascript/lib/kernel.js. */
#define IJAVASCRIPT_SCRIPT "ijavascript/lib/kernel.js"

typedef struct KnownKernel {
        const char *program; /* argv_program(), or NULL: told by needle */
        const char *needle;  /* a word of argv, or NULL */
        Transport transport;
        const char *why;
} KnownKernel;

static const KnownKernel known_kernels[] = {
        { NULL, "IRkernel::main", TRANSPORT_IPC, "auto: IRkernel binds Unix sockets" },
        { "xpython", NULL, TRANSPORT_TCP, "auto: xeus-python aborts on an ipc endpoint" },
        { "xpython_raw", NULL, TRANSPORT_TCP, "auto: xeus-python aborts on an ipc endpoint" },
        { "tslab", NULL, TRANSPORT_TCP, "auto: tslab writes ipc endpoints that no client finds" },
        { "ijskernel", NULL, TRANSPORT_TCP, "auto: ijavascript cannot bind an ipc endpoint" },
        { NULL, IJAVASCRIPT_SCRIPT, TRANSPORT_TCP, "auto: ijavascript cannot bind an ipc endpoint" },
};

bool quirks_ipykernel(char *const *argv) {
        const char *module = argv && argv[0] && argv[1] && streq(argv[1], "-m") ? argv[2] : NULL;

        return module && (streq(module, "ipykernel_launcher") || streq(module, "ipykernel"));
}

Transport quirks_transport(char *const *argv, const char **ret_why) {
        const char *program = argv_program(argv);

        if (quirks_ipykernel(argv)) {
                *ret_why = "auto: ipykernel binds Unix sockets";
                return TRANSPORT_IPC;
        }
        for (size_t i = 0; i < ELEMENTSOF(known_kernels); i++) {
                const KnownKernel *k = &known_kernels[i];

                if (k->program ? streq(program, k->program) : argv_has_word(argv, k->needle)) {
                        *ret_why = k->why;
                        return k->transport;
                }
        }
        *ret_why = "auto: a kernel not known to bind Unix sockets; tcp is what every Jupyter kernel supports";
        return TRANSPORT_TCP;
}

bool quirks_interrupt_resets(char *const *argv) {
        const char *program = argv_program(argv);

        return streq(program, "ijskernel") || argv_has_word(argv, IJAVASCRIPT_SCRIPT);
}
