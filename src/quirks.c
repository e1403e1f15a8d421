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

json_t *quirks_silent_request(const char *code) {
        return json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 1, "store_history", 0,
                         "user_expressions", "allow_stdin", 0, "stop_on_error", 0);
}
