/* A child's output relayed into our log: a pipe read on the loop, each line prefixed ("NAME: ..."), its
 * control characters escaped (\xNN), so that nothing a user's code writes reaches the log unprefixed, and
 * bounded: a budget of LOG_RELAY_BURST bytes, refilled at LOG_RELAY_RATE bytes a second, per relay; what is
 * over it is read and dropped, and one line "[N bytes of WHOSE output not logged]" says how much. Used for a
 * kernel's stdout and stderr (context-launch.c) and for a preloaded launcher's (preload.c). */
#pragma once

#include <uv.h>

#define LOG_RELAY_BURST (64 * 1024)
#define LOG_RELAY_RATE (16 * 1024)

typedef struct LogRelay LogRelay;

/* Opens the pipe: returns the write end for the child (the caller's, CLOEXEC), or -errno. prefix ("default",
 * "launcher 1000") starts each line; whose ("the kernel's") names the writer in the line about dropped bytes.
 * Where a line names private_file, the log names published_file instead (both may be NULL). The relay frees
 * itself once the last writer has closed the pipe and what was left is logged. */
int log_relay_open(uv_loop_t *loop, const char *prefix, const char *whose, const char *private_file,
                   const char *published_file);
