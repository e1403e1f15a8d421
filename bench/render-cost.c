/* What the renderer of a cell's text (src/client/render.h) costs: an ordinary cell (a few lines of stdout with
 * colour and a progress bar's frames, a DataFrame-like result, an error with its traceback) rendered N times,
 * without and with a budget; and a 10 MiB print under a 4 KiB budget. Prints microseconds per cell.
 * Built on demand: make bench/render-cost && bench/render-cost [N]. */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "render.h"

static const char ORDINARY[] =
        "[{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"hello world\\nline two "
        "\\u001b[31mred\\u001b[0m\\n"
        "10%\\r50%\\r100%\\n\"},"
        "{\"output_type\":\"execute_result\",\"data\":{\"text/plain\":\"   a\\n0  1\\n1  2\","
        "\"text/html\":\"<table><tr><td>1</td></tr></table>\"}},"
        "{\"output_type\":\"error\",\"ename\":\"ZeroDivisionError\",\"evalue\":\"division by zero\",\"traceback\":["
        "\"\\u001b[0;31m-----\\u001b[0m\",\"Cell \\u001b[0;32mIn[2], line 5\\u001b[0m\\n----> 5 g()\\n\","
        "\"File /usr/lib/x.py:3, in h()\\n\",\"\\u001b[0;31mZeroDivisionError\\u001b[0m: division by zero\"]}]";

static void sink(CellRenderTarget t, const char *s, size_t n, void *userdata) {
        (void) t;
        (void) s;
        *(size_t *) userdata += n;
}

static double now(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

/* Microseconds per rendering of outputs, with budget max. */
static double run(const json_t *outputs, size_t max, long n) {
        size_t total = 0, i;
        const json_t *o;
        double start = now();

        for (long k = 0; k < n; k++) {
                CellRender *r = cell_render_new(max, false, sink, &total);

                if (!r)
                        exit(1);
                json_array_foreach(outputs, i, o) {
                        (void) cell_render_output(r, o);
                }
                (void) cell_render_finish(r, NULL, NULL);
                cell_render_free(r);
        }
        return (now() - start) / (double) n;
}

int main(int argc, char *argv[]) {
        long n = argc > 1 ? atol(argv[1]) : 100000;
        json_t *ordinary = json_loads(ORDINARY, 0, NULL), *flood;
        char *big = malloc(10 << 20);

        if (!ordinary || !big || n <= 0)
                return 1;
        memset(big, 'y', (10 << 20) - 1);
        big[(10 << 20) - 1] = '\0';
        flood = json_pack("[{s:s, s:s, s:s}]", "output_type", "stream", "name", "stdout", "text", big);
        printf("ordinary cell, no budget:  %8.2f us\n", run(ordinary, 0, n));
        printf("ordinary cell, budget 4K:  %8.2f us\n", run(ordinary, 4096, n));
        printf("10 MiB print, budget 4K:   %8.2f us\n", run(flood, 4096, 5));
        json_decref(ordinary);
        json_decref(flood);
        free(big);
        return 0;
}
