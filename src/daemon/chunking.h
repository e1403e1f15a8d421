/* Output chunking: what the daemon runs once in an IPython kernel so that
 * its stdout and stderr reach iopub in stream messages of bounded size.
 *
 * ipykernel 6 merges everything a cell writes within its flush_interval
 * (0.2 s) into one stream message of any size: a fast flood arrives as one
 * frame over the daemon's bound (exec_message_bound), is dropped whole, and
 * the caller gets none of its head. The request built here patches
 * ipykernel's OutStream class (not an instance, not the user namespace) so
 * that write() hands a long string over in pieces of at most `chunk`
 * characters and flushes whenever the stream's buffer holds `chunk`
 * characters, waiting for the IO thread to take it (so a flood does not
 * pile up in the IO thread's queue). write() keeps its return value and errors.
 *
 * The patch also counts what each request's writes to stdout and stderr
 * took, so that the daemon can tell how much of a cell's output the kernel's
 * iopub socket dropped (it drops messages queued past its high-water mark for
 * a reader slower than the kernel, and tells nobody): a cell sent to a
 * patched kernel carries the user expression CHUNKING_WRITTEN_EXPRESSION,
 * whose value in the execute_reply is the number of bytes the cell wrote.
 *
 * Pure: builds the request and reads its reply; the context sends it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Characters of text per stream message a patched kernel sends at most
 * (twice that when a writer's own piece lands on a nearly full buffer, plus
 * the 1000 bytes ipykernel's fd watcher reads at once). JSON escapes a
 * character in at most 6 bytes, so such a message stays under 13 MiB: within
 * the 16 MiB exec_message_bound gives beyond any output_limit. */
#define CHUNKING_CHARS ((size_t) 1 << 20)

/* The name of the user expression that runs the patch. */
#define CHUNKING_EXPRESSION "kernelsup_output_chunking"

/* The filename the patch's code carries in tracebacks. */
#define CHUNKING_FILENAME "<kernelsup output chunking>"

/* Whether a kernel that answered kernel_info with content (borrowed) is
 * IPython's (implementation "ipython"): only those are patched. */
bool chunking_applies(const json_t *kernel_info_content);

/* The content of the execute_request that installs the patch with pieces of
 * chunk characters: silent, not stored in the history (no execution_count,
 * no execute_input, In, Out and _ unchanged); the patch runs as the user
 * expression CHUNKING_EXPRESSION of the cell "pass", so its failure leaves
 * no traceback and no sys.last_value, and its names stay out of the user
 * namespace. Running it again in the same kernel (an adopted one) replaces
 * the earlier patch instead of wrapping it. NULL on out of memory. */
json_t *chunking_request(size_t chunk);

/* Reads the execute_reply content (borrowed) to that request: 1 when the
 * patch is in place (the reply and its user expression ok); 0 when it is
 * not, and *ret_why (newly allocated, one line) says why, e.g.
 * "RuntimeError: sys.stdout is a io.StringIO, not
 * ipykernel.iostream.OutStream" (clipped to 300 bytes). -ENOMEM. */
int chunking_result(const json_t *reply_content, char **ret_why);

/* The class the patch defines to hand out the counts: a subclass of complex,
 * which the expression below finds through a literal (0j), so that it needs
 * no name the user could have rebound and cannot raise (IPython would keep
 * the exception in sys.last_value). A second patch renames the earlier one's. */
#define CHUNKING_WRITTEN_CLASS "kernelsup_written"

/* The user expression (name and code) that asks a patched kernel what the
 * request it runs wrote to stdout and stderr: its value is that count as a
 * string of digits, '' if the patch is gone. Evaluating it changes nothing
 * the user sees: no name, no execution_count, no history, no sys.last_value
 * (and IPython evaluates user expressions only after a cell that did not
 * raise). Not an IPython kernel's business otherwise: send it only to a
 * kernel chunking_result() said is patched. The class name is
 * CHUNKING_WRITTEN_CLASS's (a unit test checks). */
#define CHUNKING_WRITTEN_EXPRESSION "kernelsup_written"
#define CHUNKING_WRITTEN_CODE                                                                                         \
        "([c.take() for c in (0j).__class__.__subclasses__() if c.__name__ == 'kernelsup_written'] + [''])[0]"

/* Reads the count from the execute_reply content (borrowed) of a cell that
 * carried the expression: 1 and *ret the bytes the cell wrote to stdout and
 * stderr (UTF-8, as iopub carries them); 0 when the reply holds no count (the
 * cell raised or was aborted: IPython then evaluates no user expression; the
 * patch is gone; an answer that is no string of digits). */
int chunking_written(const json_t *reply_content, uint64_t *ret);
