/* What the daemon does about particular kernels' own behaviour, decided from their kernel_info_reply.
 *
 * xeus-python (Debian's xpython) installs a SIGINT handler that calls exit(0) before its interpreter
 * starts, so an interrupt (SIGINT, as its kernelspec asks) ends the kernel and loses the namespace
 * instead of raising KeyboardInterrupt in the cell. Its cells run in the interpreter's main thread, where
 * Python's own handler can be put back: the daemon runs quirks_sigint_code() there, silently, as soon as
 * such a kernel answers kernel_info, before any cell of a client's.
 *
 * ipykernel's exit() and quit() (ZMQInteractiveShell.ask_exit) end the kernel 0.1 s after the cell's reply,
 * unless the shell's keepkernel_on_exit is true, which exit() itself sets to False unless called as
 * exit(keep_kernel=True). A supervised kernel is not a cell's to end: an IPython kernel gets its ask_exit
 * wrapped to set keepkernel_on_exit = True first, the same way, as soon as it answers kernel_info (preloaded or
 * cold alike), so exit() leaves the kernel and its namespace as they are; its reply still carries the payload
 * {"source": "ask_exit", "keepkernel": true}, which exec reads to say so.
 *
 * The kernels' transports and interrupts are told by their argv, before any kernel_info.
 *
 * Pure. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "connfile.h"

/* The code that gives SIGINT back to Python in the kernel that answered kernel_info with content
 * (borrowed), or NULL when that kernel needs none. Static. */
const char *quirks_sigint_code(const json_t *kernel_info_content);

/* The code that keeps an IPython kernel running when a cell calls exit() or quit() (it binds no name in the
 * user namespace), or NULL for another kernel. Static. */
const char *quirks_keepkernel_code(const json_t *kernel_info_content);

/* What the ask_exit payload of an execute_reply's content (borrowed) says: 0 when there is none (the cell did
 * not call exit()), 1 when the kernel stays (keepkernel true), -1 when it is about to end (keepkernel false or
 * null: ipykernel's default, or a kernel the code above did not reach). */
int quirks_exit_asked(const json_t *execute_reply_content);

/* The content of a silent execute_request of code: no history, no broadcast, no input. NULL on out of
 * memory. */
json_t *quirks_silent_request(const char *code);

/* transport = auto (the default): ipc for the kernels known to bind Unix sockets (ipykernel, IRkernel), tcp for
 * every other, known or not (xeus-python aborts on an ipc endpoint, tslab writes ipc endpoints no client finds,
 * ijavascript fails with "No such device"; tcp is what every Jupyter kernel supports). Told by the kernel's argv
 * (borrowed). *ret_why (static) says why, for status and --check-config. */
Transport quirks_transport(char *const *argv, const char **ret_why);
/* Whether argv (borrowed) runs ipykernel: PYTHON -m ipykernel_launcher, or -m ipykernel. */
bool quirks_ipykernel(char *const *argv);

/* Whether a kernel ends its interpreter and starts an empty one inside the same process on SIGINT (ijavascript:
 * its session child dies with the group's signal and is replaced; its own handler restarts the session too), so
 * that an interrupt loses the namespace while the kernel stays. Told by argv (borrowed). */
bool quirks_interrupt_resets(char *const *argv);
