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
