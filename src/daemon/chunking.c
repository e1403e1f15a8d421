/* Output chunking: see chunking.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "macro.h"
#include "util.h"

/* How much of the kernel's reason for refusing the patch is kept. */
#define WHY_MAX 300

/* The patch, run by exec() in a dictionary of its own: its helpers never
 * land in the user namespace, and the names it calls (len, range, ...) are
 * the builtins even when the user shadows them. It checks before it changes
 * anything, so a kernel it does not fit is left as it was, and outcome()
 * returns why as a string rather than raising (IPython would keep the
 * exception in sys.last_value). flush() is ipykernel's own: it hands the
 * buffer to the IO thread and waits until it is taken, so pieces leave in
 * order and a flood cannot outrun the IO thread. count() adds what each
 * write took (UTF-8 bytes, as the daemon counts stream text) to the request
 * the stream writes for (its parent msg_id), for the latest 16 requests
 * (another client's cells are never asked for); it never raises, so a write
 * fails only as ipykernel's does. take() gives and forgets the count of the
 * request running now. rewatch() replaces ipykernel 6.17's pipe watcher (the
 * thread that relays what subprocesses write to fds 1 and 2), which decodes
 * each 1000-byte read whole and dies, for the kernel's life, on a byte that is
 * not UTF-8 or a character cut at the boundary: the old thread is ended by
 * one invalid byte written into its pipe (it dies before relaying it), and a
 * thread with an incremental decoder (errors="replace", as U+FFFD) reads the
 * same pipe from then on; one that already died is replaced too. Held in a ''' string: no backslash and no ''' in
 * here (a unit test checks). */
static const char patch_code[] =
        "import functools\n"
        "import sys\n"
        "import threading\n"
        "\n"
        "def check(stream, name, OutStream):\n"
        "    kind = type(stream).__module__ + '.' + type(stream).__qualname__\n"
        "    if not isinstance(stream, OutStream):\n"
        "        raise RuntimeError(name + ' is a ' + kind + ', not ipykernel.iostream.OutStream')\n"
        "    if type(stream).write is not OutStream.write:\n"
        "        raise RuntimeError(name + ' is a ' + kind + ' with a write() of its own')\n"
        "    if not hasattr(stream, '_buffer') or not hasattr(stream, '_buffer_lock'):\n"
        "        raise RuntimeError(name + ' has no _buffer or _buffer_lock (another ipykernel)')\n"
        "\n"
        "def request_id(stream):\n"
        "    header = getattr(stream, 'parent_header', None)\n"
        "    return header.get('msg_id') if isinstance(header, dict) else None\n"
        "\n"
        "def counter(keep):\n"
        "    lock = threading.Lock()\n"
        "    counts = {}\n"
        "\n"
        "    def count(stream, string):\n"
        "        try:\n"
        "            n = len(string) if string.isascii() else len(string.encode('utf-8', 'replace'))\n"
        "            key = request_id(stream)\n"
        "            if key is None:\n"
        "                return\n"
        "            with lock:\n"
        "                if key not in counts and len(counts) >= keep:\n"
        "                    del counts[next(iter(counts))]\n"
        "                counts[key] = counts.get(key, 0) + n\n"
        "        except Exception:\n"
        "            pass\n"
        "\n"
        "    def take():\n"
        "        try:\n"
        "            key = request_id(sys.stdout) or request_id(sys.stderr)\n"
        "            if key is None:\n"
        "                return ''\n"
        "            with lock:\n"
        "                return str(counts.pop(key, 0))\n"
        "        except Exception:\n"
        "            return ''\n"
        "\n"
        "    for old in complex.__subclasses__():\n"
        "        if old.__name__ == '" CHUNKING_WRITTEN_CLASS "':\n"
        "            old.__name__ = '" CHUNKING_WRITTEN_CLASS "_replaced'\n"
        "    holder = type('" CHUNKING_WRITTEN_CLASS "', (complex,), {'take': staticmethod(take)})\n"
        "    return count, holder\n"
        "\n"
        "def patch(chunk):\n"
        "    from ipykernel.iostream import OutStream\n"
        "    check(sys.stdout, 'sys.stdout', OutStream)\n"
        "    check(sys.stderr, 'sys.stderr', OutStream)\n"
        "    write = OutStream.write\n"
        "    if hasattr(write, 'kernelsup_chunk'):\n"
        "        write = write.__wrapped__\n"
        "    flush = OutStream.flush\n"
        "    count, holder = counter(16)\n"
        "\n"
        "    def buffered(stream):\n"
        "        with stream._buffer_lock:\n"
        "            return stream._buffer.tell()\n"
        "\n"
        "    @functools.wraps(write)\n"
        "    def chunked_write(self, string):\n"
        "        if not isinstance(string, str) or len(string) <= chunk:\n"
        "            ret = write(self, string)\n"
        "            count(self, string)\n"
        "            if buffered(self) >= chunk:\n"
        "                flush(self)\n"
        "            return ret\n"
        "        first = None\n"
        "        for start in range(0, len(string), chunk):\n"
        "            piece = string[start:start + chunk]\n"
        "            ret = write(self, piece)\n"
        "            count(self, piece)\n"
        "            if start == 0:\n"
        "                first = ret\n"
        "            if buffered(self) >= chunk:\n"
        "                flush(self)\n"
        "        return None if first is None else len(string)\n"
        "\n"
        "    chunked_write.kernelsup_chunk = chunk\n"
        "    chunked_write.kernelsup_written = holder\n"
        "    OutStream.write = chunked_write\n"
        "\n"
        "def watcher(stream):\n"
        "    import codecs\n"
        "    import os\n"
        "    decoder = codecs.getincrementaldecoder('utf-8')('replace')\n"
        "\n"
        "    def run():\n"
        "        try:\n"
        "            data = os.read(stream._fid, 1000)\n"
        "            while data and stream._should_watch:\n"
        "                text = decoder.decode(data)\n"
        "                if text:\n"
        "                    stream.write(text)\n"
        "                os.write(stream._original_stdstream_copy, data)\n"
        "                data = os.read(stream._fid, 1000)\n"
        "        except Exception:\n"
        "            stream._exc = sys.exc_info()\n"
        "    return run\n"
        "\n"
        "def rewatch(stream, fd):\n"
        "    import os\n"
        "    old = getattr(stream, 'watch_fd_thread', None)\n"
        "    if old is None or getattr(old, 'kernelsup_watch', False):\n"
        "        return\n"
        "    if not getattr(stream, '_should_watch', False):\n"
        "        return\n"
        "    if os.fstat(fd).st_ino != os.fstat(stream._fid).st_ino:\n"
        "        return\n"
        "    if old.is_alive():\n"
        "        os.write(fd, bytes([255]))\n"
        "        old.join(10)\n"
        "        if old.is_alive():\n"
        "            return\n"
        "    stream._exc = None\n"
        "    new = threading.Thread(target=watcher(stream), daemon=True)\n"
        "    new.kernelsup_watch = True\n"
        "    stream.watch_fd_thread = new\n"
        "    new.start()\n"
        "\n"
        "def rewatch_all():\n"
        "    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):\n"
        "        try:\n"
        "            rewatch(stream, fd)\n"
        "        except Exception:\n"
        "            pass\n"
        "\n"
        "def outcome(chunk):\n"
        "    rewatch_all()\n"
        "    try:\n"
        "        patch(chunk)\n"
        "    except Exception as e:\n"
        "        return type(e).__name__ + ': ' + str(e)\n"
        "    return 'on'\n";

bool chunking_applies(const json_t *kernel_info_content) {
        return streq_ptr(json_string_value(json_object_get(kernel_info_content, "implementation")), "ipython");
}

json_t *chunking_request(size_t chunk) {
        _cleanup_free_ char *expr = NULL;

        /* The cell is "pass"; the patch runs as a user expression, whose value (outcome()'s) comes back in the
         * reply. An expression binds no name; the lambda's dictionary is the patch's own. */
        if (asprintf(&expr,
                     "(lambda ns: exec(compile('''%s''', '%s', 'exec'), ns) or ns['outcome'](%zu))"
                     "({'__name__': 'kernelsup'})",
                     patch_code, CHUNKING_FILENAME, chunk) < 0)
                return NULL;
        return json_pack("{s:s, s:b, s:b, s:{s:s}, s:b, s:b}", "code", "pass", "silent", 1, "store_history", 0,
                         "user_expressions", CHUNKING_EXPRESSION, expr, "allow_stdin", 0, "stop_on_error", 0);
}

/* At most max bytes of s, cut where a UTF-8 sequence begins, with control characters as blanks (the reason goes
 * into a log line). */
static char *clip_line(const char *s, size_t max) {
        size_t n = strlen(s);
        char *out;

        if (n > max) {
                n = max;
                while (n > 0 && ((unsigned char) s[n] & 0xC0) == 0x80)
                        n--;
        }
        out = strndup(s, n);
        if (!out)
                return NULL;
        for (char *p = out; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        *p = ' ';
        return out;
}

/* The text outcome() returned, as IPython shows a str: its repr, quotes around it. */
static const char *expression_text(const json_t *expr, size_t *ret_len) {
        const char *text = json_string_value(json_object_get(json_object_get(expr, "data"), "text/plain"));
        size_t n = text ? strlen(text) : 0;

        if (n < 2 || (text[0] != '\'' && text[0] != '"') || text[n - 1] != text[0])
                return NULL;
        *ret_len = n - 2;
        return text + 1;
}

int chunking_result(const json_t *reply_content, char **ret_why) {
        const char *status = json_string_value(json_object_get(reply_content, "status"));
        const json_t *expr = json_object_get(json_object_get(reply_content, "user_expressions"), CHUNKING_EXPRESSION);
        const char *expr_status = json_string_value(json_object_get(expr, "status")), *text = NULL;
        _cleanup_free_ char *why = NULL;
        size_t len = 0;
        int r;

        if (streq_ptr(expr_status, "ok"))
                text = expression_text(expr, &len);
        if (streq_ptr(status, "ok") && text && len == 2 && strncmp(text, "on", 2) == 0)
                return 1;
        if (!streq_ptr(status, "ok"))
                r = asprintf(&why, "the kernel answered with status %s", status ?: "(none)");
        else if (streq_ptr(expr_status, "error"))
                r = asprintf(&why, "%s: %s", json_string_value(json_object_get(expr, "ename")) ?: "an error",
                             json_string_value(json_object_get(expr, "evalue")) ?: "");
        else if (text)
                r = asprintf(&why, "%.*s", (int) (len < WHY_MAX ? len : WHY_MAX), text);
        else
                r = asprintf(&why, "the kernel did not evaluate the patch (its user expression)");
        if (r < 0)
                return -ENOMEM;
        *ret_why = clip_line(why, WHY_MAX);
        return *ret_why ? 0 : -ENOMEM;
}

int chunking_written(const json_t *reply_content, uint64_t *ret) {
        const json_t *expr =
                json_object_get(json_object_get(reply_content, "user_expressions"), CHUNKING_WRITTEN_EXPRESSION);
        const char *text = NULL;
        uint64_t n = 0;
        size_t len = 0;

        if (!streq_ptr(json_string_value(json_object_get(reply_content, "status")), "ok") ||
            !streq_ptr(json_string_value(json_object_get(expr, "status")), "ok"))
                return 0;
        text = expression_text(expr, &len);
        /* A count of up to 19 digits fits: no overflow to check beyond that. */
        if (!text || len == 0 || len > 19)
                return 0;
        for (size_t i = 0; i < len; i++) {
                if (text[i] < '0' || text[i] > '9')
                        return 0;
                n = n * 10 + (uint64_t) (text[i] - '0');
        }
        *ret = n;
        return 1;
}
