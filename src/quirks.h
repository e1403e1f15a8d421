/* What the daemon does about particular kernels' own behaviour, decided from their kernel_info_reply.
 *
 * xeus-python (Debian's xpython) installs a SIGINT handler that calls exit(0) before its interpreter
 * starts, so an interrupt (SIGINT, as its kernelspec asks) ends the kernel and loses the namespace
 * instead of raising KeyboardInterrupt in the cell. Its cells run in the interpreter's main thread, where
 * Python's own handler can be put back: the daemon runs quirks_sigint_code() there, silently, as soon as
 * such a kernel answers kernel_info, before any cell of a client's.
 *
 * Pure. */
#pragma once

#include <jansson.h>

/* The code that gives SIGINT back to Python in the kernel that answered kernel_info with content
 * (borrowed), or NULL when that kernel needs none. Static. */
const char *quirks_sigint_code(const json_t *kernel_info_content);

/* The content of a silent execute_request of code: no history, no broadcast, no input. NULL on out of
 * memory. */
json_t *quirks_silent_request(const char *code);
