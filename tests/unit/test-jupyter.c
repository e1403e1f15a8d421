/* Tests of the Jupyter wire protocol's pure layer against vectors computed
 * independently: signing, new messages, the round trip, parse errors. A
 * KernelConn against an in-process fake kernel: test-jupyter-conn.c;
 * against a real ipykernel: test-jupyter-live.c. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "jupyter.h"
#include "util.h"
#include "ports.h"
#include "tap.h"
#include "jupyter-world.h"

#define VEC_HEADER                                                                                                    \
        "{\"msg_id\":\"a3b1c2d4-0000-4000-8000-000000000001\",\"msg_type\":\"kernel_info_request\",\"session\":"      \
        "\"s1\",\"username\":\"kernelsup\",\"date\":\"2024-01-02T03:04:05.678901Z\",\"version\":\"5.3\"}"

/* ---- The pure layer. ---- */

static void test_sign_vectors(void) {
        const char *parts[4] = { VEC_HEADER, "{}", "{}", "{\"code\":\"x=6*7\"}" };
        size_t lens[4];
        char hex[65];

        for (size_t i = 0; i < 4; i++)
                lens[i] = strlen(parts[i]);
        /* Computed once with Python's hmac module over the same bytes:
         * /usr/bin/python3 -c 'import hmac, hashlib
         * h = hmac.new(KEY.encode(), digestmod=hashlib.sha256)
         * for p in [VEC_HEADER.encode(), b"{}", b"{}", b"{\"code\":\"x=6*7\"}"]: h.update(p)
         * print(h.hexdigest())'  (KEY and VEC_HEADER as #defined above) */
        jupyter_sign(KEY, parts, lens, hex);
        is_str(hex, "a6fbd7ddcffd46efcdd940377e3266de81fc5dd48ac532f3d3557ca90c20fed5", "sign: matches Python hmac");

        /* A one-byte key and an empty part, with the lengths (not NULs) ending
         * the parts: hmac.new(b"k", digestmod=hashlib.sha256) updated with
         * b"a", b"", b"bc", b"{}" gives this. */
        {
                const char *p2[4] = { "aXXX", "", "bcYY", "{}" };
                const size_t l2[4] = { 1, 0, 2, 2 };

                jupyter_sign("k", p2, l2, hex);
                is_str(hex, "e5fe6dabcb528b3991d1ca2283a45bcf189c27b2f7956b494054e7344962a5d3",
                       "sign: lengths bound the parts, empty part");
        }

        memset(hex, 'x', sizeof hex);
        jupyter_sign("", parts, lens, hex);
        is_str(hex, "", "sign: empty key gives an empty signature");
}

static bool is_digits(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        return true;
}

static void test_msg_new(void) {
        JupyterMsg m, m2, untouched;
        const char *id, *date;
        int r;

        r = jupyter_msg_new("execute_request", "sess-1", json_pack("{s:s}", "code", "1"), &m);
        is_int(r, 0, "new: ok");
        is_str(jupyter_msg_type(&m), "execute_request", "new: msg_type");
        is_str(json_string_value(json_object_get(m.header, "session")), "sess-1", "new: session");
        is_str(json_string_value(json_object_get(m.header, "username")), "kernelsup", "new: username");
        is_str(json_string_value(json_object_get(m.header, "version")), "5.3", "new: version");
        id = jupyter_msg_id(&m);
        ok(strlen(id) == 36 && id[8] == '-' && id[14] == '4' && id[23] == '-', "new: msg_id is a v4 uuid (%s)", id);
        date = json_string_value(json_object_get(m.header, "date"));
        ok(date && strlen(date) == 27 && is_digits(date, 4) && date[4] == '-' && date[10] == 'T' && date[19] == '.' &&
                   is_digits(date + 20, 6) && date[26] == 'Z',
           "new: date is ISO 8601 UTC with microseconds (%s)", date ? date : "(null)");
        ok(json_is_object(m.parent_header) && json_object_size(m.parent_header) == 0, "new: parent is {}");
        ok(json_is_object(m.metadata) && json_object_size(m.metadata) == 0, "new: metadata is {}");
        is_str(jupyter_msg_parent_id(&m), "", "new: no parent id");
        is_str(json_string_value(json_object_get(m.content, "code")), "1", "new: content kept");

        r = jupyter_msg_new("execute_request", "sess-1", NULL, &m2);
        is_int(r, 0, "new: NULL content");
        ok(json_is_object(m2.content) && json_object_size(m2.content) == 0, "new: NULL content gives {}");
        ok(!streq(jupyter_msg_id(&m), jupyter_msg_id(&m2)), "new: msg_ids differ");
        jupyter_msg_done(&m);
        jupyter_msg_done(&m2);
        ok(!m.header && !m.content, "done: clears the message");
        jupyter_msg_done(&m); /* twice is harmless */
        is_str(jupyter_msg_type(&m), "", "accessor on an empty message gives \"\"");

        untouched = (JupyterMsg){ .header = json_object() };
        is_int(jupyter_msg_new("x", "s", json_integer(1), &untouched), -EINVAL, "new: non-object content");
        is_int(jupyter_msg_new("", "s", json_object(), &untouched), -EINVAL, "new: empty msg_type");
        is_int(jupyter_msg_new(NULL, "s", NULL, &untouched), -EINVAL, "new: NULL msg_type");
        is_int(jupyter_msg_new("x", NULL, NULL, &untouched), -EINVAL, "new: NULL session");
        ok(untouched.header && json_object_size(untouched.header) == 0 && !untouched.content,
           "new: ret untouched on failure");
        json_decref(untouched.header);
}

static bool is_lower_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* A message to take apart, serialised with key. */
static void make_frames(const char *key, JupyterMsg *ret_m, JupyterFrames *ret_f) {
        int r;

        r = jupyter_msg_new(
                "kernel_info_request", "sess",
                json_pack("{s:s, s:[i, i], s:{s:b}}", "code", "print('é')", "list", 1, 2, "nested", "t", 1), ret_m);
        if (r < 0)
                abort();
        json_object_set_new(ret_m->parent_header, "msg_id", json_string("parent-1"));
        r = jupyter_msg_serialize(ret_m, key, ret_f);
        if (r < 0)
                abort();
}

static void test_roundtrip(void) {
        JupyterMsg m, p, untouched = {};
        JupyterFrames f, fe;
        const void *frames[10];
        size_t lens[10], n = 0;
        char sig[65];
        int r;

        make_frames(KEY, &m, &f);
        is_str(f.part[0], JUPYTER_DELIM, "serialize: delimiter first");
        is_int(f.len[0], strlen(JUPYTER_DELIM), "serialize: delimiter length");
        ok(f.len[1] == 64 && strlen(f.part[1]) == 64 && is_lower_hex(f.part[1], 64), "serialize: 64 hex signature");
        jupyter_sign(KEY, (const char *const *) &f.part[2], &f.len[2], sig);
        is_str(f.part[1], sig, "serialize: signature over the four dicts as sent");
        ok(!strstr(f.part[5], ", ") && !strstr(f.part[5], ": "), "serialize: compact JSON (%s)", f.part[5]);
        for (size_t i = 2; i < 6; i++)
                is_int(f.len[i], strlen(f.part[i]), "serialize: len[%zu]", i);

        /* Routing identities in front (one looking almost like the delimiter), a buffer after. */
        frames[n] = "id-1", lens[n++] = 4;
        frames[n] = "<IDS|MSG>x", lens[n++] = 10;
        for (size_t i = 0; i < 6; i++)
                frames[n] = f.part[i], lens[n++] = f.len[i];
        frames[n] = "\x00\x01binary", lens[n++] = 8;
        r = jupyter_msg_parse(frames, lens, n, KEY, &p);
        is_int(r, 0, "parse: round trip with identities and a buffer");
        if (r == 0) {
                ok(json_equal(p.header, m.header), "parse: header equal");
                ok(json_equal(p.parent_header, m.parent_header), "parse: parent equal");
                ok(json_equal(p.metadata, m.metadata), "parse: metadata equal");
                ok(json_equal(p.content, m.content), "parse: content equal");
                is_str(jupyter_msg_parent_id(&p), "parent-1", "parse: parent id");
                is_str(jupyter_msg_id(&p), jupyter_msg_id(&m), "parse: msg id");
                jupyter_msg_done(&p);
        }

        /* Without a header there is no message. */
        untouched.content = json_object();
        is_int(jupyter_msg_serialize(&untouched, KEY, &fe), -EINVAL, "serialize: no header");
        untouched.header = json_array();
        is_int(jupyter_msg_serialize(&untouched, KEY, &fe), -EINVAL, "serialize: non-object header");
        jupyter_msg_done(&untouched);

        /* The other dicts default to {}. */
        untouched.header = json_pack("{s:s}", "msg_type", "x");
        r = jupyter_msg_serialize(&untouched, KEY, &fe);
        is_int(r, 0, "serialize: missing parent/metadata/content");
        if (r == 0) {
                ok(streq(fe.part[3], "{}") && streq(fe.part[4], "{}") && streq(fe.part[5], "{}"),
                   "serialize: missing dicts go out as {}");
                jupyter_frames_done(&fe);
        }
        jupyter_msg_done(&untouched);

        jupyter_frames_done(&f);
        ok(!f.part[0] && !f.part[5], "frames_done clears");
        jupyter_frames_done(&f);
        jupyter_msg_done(&m);
}

/* Parses the six frames f, with part `which` replaced by `with` (when not
 * NULL) and, when resign, the signature recomputed with key afterwards. */
static int parse_modified(const JupyterFrames *f, int which, const char *with, bool resign, const char *key,
                          JupyterMsg *ret) {
        const char *parts[6];
        size_t lens[6];
        char sig[65];

        for (size_t i = 0; i < 6; i++)
                parts[i] = f->part[i], lens[i] = f->len[i];
        if (with)
                parts[which] = with, lens[which] = strlen(with);
        if (resign) {
                jupyter_sign(key, &parts[2], &lens[2], sig);
                parts[1] = sig, lens[1] = strlen(sig);
        }
        return jupyter_msg_parse((const void *const *) parts, lens, 6, key, ret);
}

static void test_parse_errors(void) {
        JupyterMsg m, p, untouched = {};
        JupyterFrames f, fu;
        char bad_sig[65];
        int r;

        make_frames(KEY, &m, &f);
        untouched.header = json_object();

        is_int(jupyter_msg_parse((const void *const *) &f.part[1], &f.len[1], 5, KEY, &untouched), -EBADMSG,
               "parse: no delimiter");
        is_int(jupyter_msg_parse((const void *const *) f.part, f.len, 5, KEY, &untouched), -EBADMSG,
               "parse: too few frames after the delimiter");
        is_int(jupyter_msg_parse((const void *const *) f.part, f.len, 1, KEY, &untouched), -EBADMSG,
               "parse: only the delimiter");
        is_int(jupyter_msg_parse(NULL, NULL, 0, KEY, &untouched), -EBADMSG, "parse: no frames");

        snprintf(bad_sig, sizeof bad_sig, "%s", f.part[1]);
        bad_sig[10] = bad_sig[10] == '0' ? '1' : '0';
        is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM, "parse: one hex digit off: EPERM");
        bad_sig[10] = f.part[1][10];
        bad_sig[63] = '\0';
        is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM, "parse: truncated signature: EPERM");
        is_int(parse_modified(&f, 1, "", false, KEY, &untouched), -EPERM, "parse: empty signature: EPERM");
        snprintf(bad_sig, sizeof bad_sig, "%s", f.part[1]);
        for (char *s = bad_sig; *s; s++)
                if (*s >= 'a' && *s <= 'f')
                        *s = (char) (*s - 'a' + 'A');
        if (!streq(bad_sig, f.part[1]))
                is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM,
                       "parse: upper-case signature is not Jupyter's: EPERM");
        is_int(parse_modified(&f, 0, NULL, false, OTHER_KEY, &untouched), -EPERM, "parse: wrong key: EPERM");
        is_int(parse_modified(&f, 5, "{\"code\":\"evil\"}", false, KEY, &untouched), -EPERM,
               "parse: tampered content: EPERM");
        is_int(parse_modified(&f, 3, "{\"msg_id\":\"other\"}", false, KEY, &untouched), -EPERM,
               "parse: tampered parent: EPERM");

        /* Well signed but not four JSON objects. */
        is_int(parse_modified(&f, 5, "[1,2]", true, KEY, &untouched), -EBADMSG, "parse: array content: EBADMSG");
        is_int(parse_modified(&f, 2, "\"header\"", true, KEY, &untouched), -EBADMSG, "parse: string header: EBADMSG");
        is_int(parse_modified(&f, 4, "null", true, KEY, &untouched), -EBADMSG, "parse: null metadata: EBADMSG");
        is_int(parse_modified(&f, 5, "{\"a\":", true, KEY, &untouched), -EBADMSG, "parse: invalid JSON: EBADMSG");
        is_int(parse_modified(&f, 3, "{} {}", true, KEY, &untouched), -EBADMSG, "parse: trailing data: EBADMSG");
        is_int(parse_modified(&f, 4, "", true, KEY, &untouched), -EBADMSG, "parse: empty frame: EBADMSG");
        ok(untouched.header && json_object_size(untouched.header) == 0 && !untouched.content,
           "parse: ret untouched on failure");

        /* An empty key disables signing, as in Jupyter. */
        r = jupyter_msg_serialize(&m, "", &fu);
        is_int(r, 0, "serialize with an empty key");
        if (r == 0) {
                is_int(fu.len[1], 0, "serialize: empty key gives an empty signature");
                is_str(fu.part[1], "", "serialize: empty signature text");
                r = parse_modified(&fu, 0, NULL, false, "", &p);
                is_int(r, 0, "parse: unsigned message with an empty key");
                if (r == 0) {
                        ok(json_equal(p.content, m.content), "parse: unsigned content equal");
                        jupyter_msg_done(&p);
                }
                r = parse_modified(&fu, 1, "whatever", false, "", &p);
                is_int(r, 0, "parse: empty key ignores the signature frame");
                if (r == 0)
                        jupyter_msg_done(&p);
                is_int(parse_modified(&fu, 0, NULL, false, KEY, &untouched), -EPERM,
                       "parse: unsigned message with a key: EPERM");
                is_int(parse_modified(&fu, 5, "7", false, "", &untouched), -EBADMSG,
                       "parse: empty key still needs objects");
                jupyter_frames_done(&fu);
        }

        json_decref(untouched.header);
        jupyter_frames_done(&f);
        jupyter_msg_done(&m);
}

/* Repairs in and compares with want (NULL: in needs no repair, nothing is copied). */
static void repair_is(const char *in, size_t len, const char *want, const char *what) {
        _cleanup_free_ char *out = NULL;
        size_t out_len = 0;
        int r = jupyter_json_repair(in, len, &out, &out_len);

        if (!want)
                ok(r == 0 && !out, "repair: %s: unchanged", what);
        else
                ok(r == 1 && out && out_len == strlen(want) && memcmp(out, want, out_len) == 0 && out[out_len] == '\0',
                   "repair: %s", what);
}
#define REPAIR_IS(in, want, what) repair_is(in, sizeof in - 1, want, what)

/* Python's json writes a lone surrogate as an escape; bytes that are not UTF-8 come from any other writer. */
static void test_json_repair(void) {
        REPAIR_IS("{\"t\":\"caf\\u00e9 \\u20ac\"}", NULL, "valid escapes");
        REPAIR_IS("{\"t\":\"\\ud83d\\ude00\"}", NULL, "a surrogate pair is kept");
        REPAIR_IS("{\"t\":\"\\uD83D\\uDE00\"}", NULL, "a pair in upper case is kept");
        REPAIR_IS("{\"t\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", NULL, "raw UTF-8 of 2, 3, 4 bytes");
        REPAIR_IS("{\"t\":\"a\\u0000b\"}", NULL, "\\u0000 is left to JSON_ALLOW_NUL");
        REPAIR_IS("{\"t\":\"bad: \\udcff\"}", "{\"t\":\"bad: \\uFFFD\"}", "a lone low surrogate");
        REPAIR_IS("{\"t\":\"\\ud800x\"}", "{\"t\":\"\\uFFFDx\"}", "a lone high surrogate");
        REPAIR_IS("{\"t\":\"\\ud800\"}", "{\"t\":\"\\uFFFD\"}", "a high surrogate before the quote");
        REPAIR_IS("{\"t\":\"\\ud800\\ud800\\udc00\"}", "{\"t\":\"\\uFFFD\\ud800\\udc00\"}",
                  "a high surrogate before a pair");
        REPAIR_IS("{\"t\":\"\\udc00\\ud800\"}", "{\"t\":\"\\uFFFD\\uFFFD\"}", "a pair in the wrong order");
        REPAIR_IS("{\"t\":\"\\ud800\\u0041\"}", "{\"t\":\"\\uFFFD\\u0041\"}", "a high surrogate before a BMP escape");
        REPAIR_IS("{\"t\":\"\\\\udcff\"}", NULL, "an escaped backslash before u is text, not an escape");
        REPAIR_IS("{\"t\":\"\\\\\\udcff\"}", "{\"t\":\"\\\\\\uFFFD\"}", "an escaped backslash, then a surrogate");
        REPAIR_IS("{\"t\":\"\\udcf\"}", NULL, "a short escape is left to the parser");
        REPAIR_IS("\\ud800", "\\uFFFD", "a surrogate at the very end");
        REPAIR_IS("\\", NULL, "a lone backslash at the end");
        REPAIR_IS("{\"t\":\"bad \xff\xfe\"}", "{\"t\":\"bad \xEF\xBF\xBD\xEF\xBF\xBD\"}", "two invalid bytes");
        REPAIR_IS("\xe2\x82", "\xEF\xBF\xBD", "a truncated sequence is one U+FFFD (a maximal subpart)");
        REPAIR_IS("\xe2\x82x", "\xEF\xBF\xBDx", "a sequence cut by ASCII");
        REPAIR_IS("\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD", "an overlong encoding");
        REPAIR_IS("\xed\xb3\xbf", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", "a surrogate encoded in UTF-8");
        REPAIR_IS("\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", "over U+10FFFF");
        REPAIR_IS("\xf4\x8f\xbf\xbf", NULL, "U+10FFFF itself");
        REPAIR_IS("\x80", "\xEF\xBF\xBD", "a lone continuation byte");
        REPAIR_IS("\\\xff", "\\\xEF\xBF\xBD", "a backslash before an invalid byte");
        repair_is("a\0b", 3, NULL, "a raw NUL is left to the parser");
}

/* What Python's json writes parses, as jupyter_client reads it. */
static void test_parse_python_json(void) {
        JupyterMsg m, p;
        JupyterFrames f;
        int r;

        make_frames(KEY, &m, &f);
        r = parse_modified(&f, 5, "{\"name\":\"stdout\",\"text\":\"A\\nbad: \\udcff\\nB\\n\"}", true, KEY, &p);
        is_int(r, 0, "parse: a lone surrogate");
        if (r == 0) {
                is_str(json_string_value(json_object_get(p.content, "text")), "A\nbad: \xEF\xBF\xBD\nB\n",
                       "parse: the surrogate is U+FFFD, the text around it kept");
                jupyter_msg_done(&p);
        }
        r = parse_modified(&f, 5, "{\"evalue\":\"bad\\u0000byte\"}", true, KEY, &p);
        is_int(r, 0, "parse: \\u0000");
        if (r == 0) {
                const json_t *v = json_object_get(p.content, "evalue");

                ok(json_string_length(v) == 8 && memcmp(json_string_value(v), "bad\0byte", 8) == 0,
                   "parse: \\u0000 kept as a NUL byte inside the string");
                jupyter_msg_done(&p);
        }
        r = parse_modified(&f, 5, "{\"t\":\"bad \xff\xfe\"}", true, KEY, &p);
        is_int(r, 0, "parse: invalid UTF-8");
        if (r == 0) {
                is_str(json_string_value(json_object_get(p.content, "t")), "bad \xEF\xBF\xBD\xEF\xBF\xBD",
                       "parse: invalid bytes are U+FFFD");
                jupyter_msg_done(&p);
        }
        r = parse_modified(&f, 2,
                           "{\"msg_id\":\"i\",\"msg_type\":\"execute_input\",\"x\":1000000000000000000000000000000}",
                           true, KEY, &p);
        is_int(r, 0, "parse: an integer over jansson's range (10**30)");
        if (r == 0) {
                is_str(jupyter_msg_type(&p), "execute_input", "parse: the huge integer's header keeps its fields");
                ok(json_is_real(json_object_get(p.header, "x")), "parse: the huge integer is read as a real");
                jupyter_msg_done(&p);
        }
        is_int(parse_modified(&f, 5, "{\"t\":\"\\udcff\"", true, KEY, &p), -EBADMSG,
               "parse: a repaired dict that is still not JSON: EBADMSG");
        jupyter_frames_done(&f);
        jupyter_msg_done(&m);
}

int main(void) {
        test_sign_vectors();
        test_msg_new();
        test_roundtrip();
        test_parse_errors();
        test_json_repair();
        test_parse_python_json();

        return tap_done();
}
