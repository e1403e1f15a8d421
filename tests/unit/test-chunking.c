/* Output chunking's pure part: which kernels get the patch, the request that
 * installs it, how its reply reads, and how a cell's reply gives the count of
 * what the cell wrote. (That the patch does its work in a
 * real ipykernel is tests/integration/test-flood.py's.) */
#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "macro.h"
#include "tap.h"

static void test_applies(void) {
        json_auto_t *ipython = json_pack("{s:s}", "implementation", "ipython");
        json_auto_t *stub = json_pack("{s:s}", "implementation", "stubkernel");
        json_auto_t *number = json_pack("{s:i}", "implementation", 1);
        json_auto_t *upper = json_pack("{s:s}", "implementation", "IPython");
        json_auto_t *none = json_object();

        ok(chunking_applies(ipython), "implementation ipython: patched");
        ok(!chunking_applies(stub), "another implementation: left alone");
        ok(!chunking_applies(number), "a number as implementation: left alone");
        ok(!chunking_applies(upper), "IPython (another spelling): left alone");
        ok(!chunking_applies(none), "no implementation: left alone");
        ok(!chunking_applies(NULL), "no content: left alone");
}

static const char *expression(const json_t *req) {
        return json_string_value(json_object_get(json_object_get(req, "user_expressions"), CHUNKING_EXPRESSION));
}

static void test_request(void) {
        json_auto_t *req = chunking_request(CHUNKING_CHARS);
        const char *code = expression(req);
        const char *open, *close;
        char call[64];

        ok(req && code, "the patch is a user expression");
        if (!code)
                return;
        is_str(json_string_value(json_object_get(req, "code")), "pass", "the cell is pass");
        is_int(json_object_size(json_object_get(req, "user_expressions")), 1, "the only user expression");
        ok(json_is_true(json_object_get(req, "silent")), "silent: no execute_input, no execution_count");
        ok(json_is_false(json_object_get(req, "store_history")), "store_history false: In, Out, _ unchanged");
        ok(json_is_false(json_object_get(req, "allow_stdin")), "allow_stdin false");
        ok(json_is_false(json_object_get(req, "stop_on_error")), "stop_on_error false: a failure aborts nothing");
        ok(strncmp(code, "(lambda ns: exec(compile('''", 28) == 0, "the expression only calls exec: it binds no name");
        ok(strstr(code, "ns['outcome'](1048576))({'__name__': 'kernelsup'})") != NULL,
           "in a dictionary of its own, returning outcome()");
        ok(strstr(code, "'" CHUNKING_FILENAME "'") != NULL, "tracebacks name it");
        /* The patch sits in a ''' string: one more ''' or a backslash would change what Python reads. */
        open = strstr(code, "'''");
        close = open ? strstr(open + 3, "'''") : NULL;
        ok(open && close && !strstr(close + 3, "'''"), "exactly one ''' string");
        ok(!strchr(code, '\\'), "no backslash in the code");
        snprintf(call, sizeof call, "    return 'on'\n'''");
        ok(close && strncmp(close - strlen(call) + 3, call, strlen(call)) == 0, "the string ends with outcome()");
        ok(strstr(code, "OutStream.write = chunked_write") != NULL, "it patches the class");
        ok(strstr(code, "hasattr(write, 'kernelsup_chunk')") != NULL, "a second run replaces the first patch");

        ok(strstr(code, "    count, holder = counter(16)\n") != NULL, "it counts the latest 16 requests' writes");
        ok(strstr(code, "holder = type('" CHUNKING_WRITTEN_CLASS "', (complex,), ") != NULL,
           "the counts are handed out by a subclass of complex named as the expression looks for it");
        ok(strstr(code, "old.__name__ = '" CHUNKING_WRITTEN_CLASS "_replaced'") != NULL,
           "a second patch renames the first one's class: the expression finds one");

        json_auto_t *small = chunking_request(4096);
        ok(small && expression(small) && strstr(expression(small), "ns['outcome'](4096))"), "chunk size 4096");
}

/* A reply whose user expression has status and, for "ok", the text outcome() returned, for "error" ename and
 * evalue. */
static json_t *reply(const char *status, const char *text, const char *evalue) {
        json_t *e = evalue ? json_pack("{s:s, s:s, s:s}", "status", status, "ename", text, "evalue", evalue)
                    : text ? json_pack("{s:s, s:{s:s}}", "status", status, "data", "text/plain", text)
                           : json_pack("{s:s}", "status", status);

        return json_pack("{s:s, s:{s:o}}", "status", "ok", "user_expressions", CHUNKING_EXPRESSION, e);
}

static void test_result(void) {
        json_auto_t *okc = reply("ok", "'on'", NULL);
        json_auto_t *refused =
                reply("ok", "'RuntimeError: sys.stdout is a io.StringIO, not ipykernel.iostream.OutStream'", NULL);
        json_auto_t *dquoted = reply("ok", "\"ImportError: No module named 'ipykernel'\"", NULL);
        json_auto_t *unquoted = reply("ok", "None", NULL);
        json_auto_t *err = reply("error", "SyntaxError", "invalid syntax");
        json_auto_t *lines = reply("ok", "'E: a\nb\tc\x1b[0m'", NULL);
        json_auto_t *aborted = json_pack("{s:s}", "status", "aborted");
        json_auto_t *cell_error = json_pack("{s:s, s:s, s:s}", "status", "error", "ename", "E", "evalue", "v");
        json_auto_t *no_expr = json_pack("{s:s, s:{}}", "status", "ok", "user_expressions");
        json_auto_t *bare = json_object();
        char *why = NULL, big[2000];

        is_int(chunking_result(okc, &why), 1, "reply ok, outcome 'on': on");
        ok(!why, "no reason when on");
        is_int(chunking_result(refused, &why), 0, "the patch refused: off");
        is_str(why, "RuntimeError: sys.stdout is a io.StringIO, not ipykernel.iostream.OutStream", "names why");
        free(why);
        is_int(chunking_result(dquoted, &why), 0, "a reason in double quotes: off");
        is_str(why, "ImportError: No module named 'ipykernel'", "its quotes taken off");
        free(why);
        is_int(chunking_result(unquoted, &why), 0, "an outcome that is no string: off");
        is_str(why, "the kernel did not evaluate the patch (its user expression)", "says so");
        free(why);
        is_int(chunking_result(err, &why), 0, "the expression raised: off");
        is_str(why, "SyntaxError: invalid syntax", "names the error");
        free(why);
        is_int(chunking_result(lines, &why), 0, "an error with control characters: off");
        is_str(why, "E: a b c [0m", "control characters become blanks (one log line)");
        free(why);
        is_int(chunking_result(aborted, &why), 0, "status aborted: off");
        is_str(why, "the kernel answered with status aborted", "says the status");
        free(why);
        is_int(chunking_result(cell_error, &why), 0, "the cell itself failed: off");
        is_str(why, "the kernel answered with status error", "says so");
        free(why);
        is_int(chunking_result(no_expr, &why), 0, "ok without the expression's result: off");
        is_str(why, "the kernel did not evaluate the patch (its user expression)", "says so");
        free(why);
        is_int(chunking_result(bare, &why), 0, "no status: off");
        is_str(why, "the kernel answered with status (none)", "says there was none");
        free(why);

        /* A huge evalue is clipped, never cutting a UTF-8 sequence ("é" is 2 bytes; 300 is odd after "E: "). */
        big[0] = '\0';
        for (size_t i = 0; i < 900; i++)
                strcat(big, "\xc3\xa9");
        json_auto_t *huge = reply("error", "E", big);
        is_int(chunking_result(huge, &why), 0, "a huge error: off");
        ok(why && strlen(why) <= 300 && strlen(why) >= 298, "clipped to 300 bytes (%zu)", why ? strlen(why) : 0);
        json_auto_t *valid = why ? json_string(why) : NULL;
        ok(valid != NULL, "still valid UTF-8");
        free(why);
}

/* The execute_reply of a cell that carried the count's expression: status, and the expression's status and
 * text/plain (NULL: no data). */
static json_t *count_reply(const char *status, const char *expr_status, const char *text) {
        json_t *e = text ? json_pack("{s:s, s:{s:s}}", "status", expr_status, "data", "text/plain", text)
                         : json_pack("{s:s}", "status", expr_status);

        return json_pack("{s:s, s:{s:o}}", "status", status, "user_expressions", CHUNKING_WRITTEN_EXPRESSION, e);
}

static void test_written(void) {
        static const struct {
                const char *status, *expr_status, *text;
                int want;
                uint64_t n;
                const char *name;
        } cases[] = {
                { "ok", "ok", "'1073741824'", 1, 1073741824, "a GiB" },
                { "ok", "ok", "'0'", 1, 0, "nothing written" },
                { "ok", "ok", "\"42\"", 1, 42, "in double quotes" },
                { "ok", "ok", "'9999999999999999999'", 1, 9999999999999999999ULL, "19 digits" },
                { "ok", "ok", "'99999999999999999999'", 0, 0, "20 digits: refused, not wrapped" },
                { "ok", "ok", "''", 0, 0, "'' (the patch is gone): no count" },
                { "ok", "ok", "'-1'", 0, 0, "a sign: no count" },
                { "ok", "ok", "'12a'", 0, 0, "not all digits: no count" },
                { "ok", "ok", "' 12'", 0, 0, "a blank: no count" },
                { "ok", "ok", "12", 0, 0, "not a string (a user's formatter): no count" },
                { "ok", "ok", "'12", 0, 0, "one quote: no count" },
                { "ok", "ok", NULL, 0, 0, "no text/plain: no count" },
                { "ok", "error", "'12'", 0, 0, "the expression raised: no count" },
                { "error", "ok", "'12'", 0, 0, "the cell raised: no count" },
                { "aborted", "ok", "'12'", 0, 0, "aborted: no count" },
        };
        static const char head[] = "([c.take() for c in (0j).__class__.__subclasses__() if c.__name__ == '";
        json_auto_t *none = json_pack("{s:s, s:{}}", "status", "ok", "user_expressions");
        json_auto_t *bare = json_object();
        uint64_t n;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                json_auto_t *r = count_reply(cases[i].status, cases[i].expr_status, cases[i].text);

                n = 7;
                is_int(chunking_written(r, &n), cases[i].want, "count: %s", cases[i].name);
                ok(n == (cases[i].want ? cases[i].n : 7), "count: %s: %s", cases[i].name,
                   cases[i].want ? "the number" : "left as it was");
        }
        is_int(chunking_written(none, &n), 0, "count: no such user expression: none");
        is_int(chunking_written(bare, &n), 0, "count: an empty reply: none");
        is_int(chunking_written(NULL, &n), 0, "count: no reply: none");
        ok(strncmp(CHUNKING_WRITTEN_CODE, head, strlen(head)) == 0,
           "the expression reaches the class through a literal: no name the user could rebind, nothing to raise");
        ok(strstr(CHUNKING_WRITTEN_CODE, "'" CHUNKING_WRITTEN_CLASS "'] + [''])[0]") != NULL,
           "and gives '' when the class is gone");
}

int main(void) {
        test_applies();
        test_request();
        test_result();
        test_written();
        return tap_done();
}
