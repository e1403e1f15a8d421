/* The Jupyter wire protocol (messaging spec 5.3), in two layers:
 *  - pure: build, sign (HMAC-SHA256), serialise, parse and verify messages;
 *  - KernelConn: ZMTP 3.0 (zmtp.h) over libuv streams to the kernel's libzmq, as DEALER to shell, control and
 *    stdin, SUB to iopub and DEALER to the heartbeat. Not libzmq: it hands over a message only whole, buffers and all,
 *    so a kernel could make us hold any amount; our reader skips what it does not keep as it streams past. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "connfile.h"

#define JUPYTER_DELIM "<IDS|MSG>"
#define JUPYTER_PROTOCOL_VERSION "5.3"

typedef struct JupyterMsg {
        json_t *header;        /* msg_id, msg_type, session, username, date, version */
        json_t *parent_header; /* {} when none */
        json_t *metadata;
        json_t *content;
} JupyterMsg;

void jupyter_msg_done(JupyterMsg *m); /* drops the four references */

/* Accessors; "" when missing. */
const char *jupyter_msg_type(const JupyterMsg *m);
const char *jupyter_msg_id(const JupyterMsg *m);
const char *jupyter_msg_parent_id(const JupyterMsg *m);

/* Builds a request: a new header (uuid msg_id, session, username "kernelsup",
 * ISO date, version 5.3), empty parent and metadata. content is stolen (NULL: {}). */
int jupyter_msg_new(const char *msg_type, const char *session, json_t *content, JupyterMsg *ret);

/* hex HMAC-SHA256 over header, parent_header, metadata and content, as sent.
 * On an OpenSSL failure (memory exhaustion only) ret_hex is "", which fails
 * closed: a peer with a key rejects the message. */
void jupyter_sign(const char *key, const char *const parts[4], const size_t lens[4], char ret_hex[65]);

/* The frames after the routing identities: delimiter, signature, header,
 * parent, metadata, content. Each part is newly allocated. */
typedef struct JupyterFrames {
        char *part[6];
        size_t len[6];
} JupyterFrames;
int jupyter_msg_serialize(const JupyterMsg *m, const char *key, JupyterFrames *ret);
void jupyter_frames_done(JupyterFrames *f);

/* Jupyter's JSON is what Python's json module writes, which is more than jansson reads: a str holding a lone
 * surrogate (a file name decoded with surrogateescape) is written as a "\udcff" escape, and a kernel may send
 * bytes that are not UTF-8. This rewrites the JSON text p[0..len) so that jansson reads it as jupyter_client
 * does with U+FFFD in place of each bad unit: a \uD800-\uDFFF escape that is not half of a pair becomes
 * \uFFFD, each ill-formed UTF-8 subpart becomes U+FFFD's bytes (as utf8_repair()). Backslash escapes are
 * followed outside strings too, which valid JSON cannot hold anyway. Returns 0 with *ret NULL when nothing
 * needed rewriting (nothing copied), 1 with *ret a new NUL-terminated buffer of *ret_len bytes (the caller
 * frees it), -ENOMEM. Pure: no I/O, no state. */
int jupyter_json_repair(const char *p, size_t len, char **ret, size_t *ret_len);

/* Parses the multipart message frames[0..n): skips identities up to the
 * delimiter, verifies the signature in constant time (an empty key disables
 * signing, as in Jupyter), and parses the four JSON dicts. Extra buffers are
 * ignored. -EBADMSG when malformed, -EPERM when the signature is wrong.
 * Each dict is read through jupyter_json_repair(), with \u0000 allowed
 * (JSON_ALLOW_NUL: a string's json_string_length() may then exceed its
 * strlen(), and consumers of text must use the former), and a dict holding
 * an integer out of jansson's range is read again with every integer as a
 * real, so that what a Python kernel sends always parses. */
int jupyter_msg_parse(const void *const *frames, const size_t *lens, size_t n, const char *key, JupyterMsg *ret);

/* ---- A live connection to one kernel. ---- */

typedef struct KernelConn KernelConn;

typedef struct KernelConnCallbacks {
        /* A verified reply on shell or control (channel says which). msg is
         * borrowed for the call. */
        void (*on_reply)(KernelConn *c, Channel channel, const JupyterMsg *msg, void *userdata);
        /* A verified message on iopub. */
        void (*on_iopub)(KernelConn *c, const JupyterMsg *msg, void *userdata);
        /* The heartbeat echoed a ping sent with kernel_conn_ping. */
        void (*on_hb)(KernelConn *c, void *userdata);
        /* A message on channel was lost: its envelope and dicts came to more than max_message (read past,
         * never held), or the connection broke after the kernel's READY (it is made again after RECONNECT_IVL_MSEC,
         * longer after connections that break before READY, and a SUB subscribes again; what the kernel published on
         * iopub meanwhile is lost, and so are the replies to requests sent on shell or control before). May be NULL.
         */
        void (*on_dropped)(KernelConn *c, Channel channel, void *userdata);
        /* The kernel asked for input (an input_request on stdin, msg borrowed for the call; its parent is the
         * shell request whose code asked). It was answered already, with an empty value: cells run without stdin,
         * and a kernel that asks although the request said allow_stdin false (IRkernel's readline) would wait for
         * the answer forever. May be NULL. */
        void (*on_input_request)(KernelConn *c, const JupyterMsg *msg, void *userdata);
        /* A message on channel failed verification or could not be parsed (its header, its signature) and was
         * dropped (and counted). May be NULL. */
        void (*on_unreadable)(KernelConn *c, Channel channel, void *userdata);
} KernelConnCallbacks;

/* Connects to the kernel at ci, over its transport (tcp, or ipc: the Unix sockets "<ip>-<port>"), and goes on
 * trying while nobody listens. max_message bounds what one message received on shell, control and iopub may
 * make us hold (0: no bound): the delimiter, signature and four dicts together; the frames before the
 * delimiter and the buffers after the dicts are never held, whatever their number and size. A message over
 * it is read past and dropped, see on_dropped. Per connection at most one message is held while it is read,
 * and the bytes read are parsed as they come: nothing else queues. Callbacks run from the loop,
 * never from inside a kernel_conn_* call. Messages that fail verification
 * are dropped (and counted). -EINVAL for a bad ip (for ipc: a path that is
 * not absolute) or a zero port. On a
 * failure after handles were set up, their memory is freed by the loop.
 * Requests sent before the kernel listens are queued and delivered when the
 * connection comes up; make a new KernelConn for each kernel launch, so a
 * queued request never reaches a different kernel. iopub only delivers once
 * the SUB's subscription has reached the kernel: as jupyter_client does,
 * repeat kernel_info_request until an iopub message arrives before relying
 * on iopub output. */
int kernel_conn_new(uv_loop_t *loop, const ConnectionInfo *ci, size_t max_message, const KernelConnCallbacks *cb,
                    void *userdata, KernelConn **ret);

/* Sends a request on CHANNEL_SHELL or CHANNEL_CONTROL. content is stolen.
 * ret_msg_id (37 bytes), when not NULL, receives the request's msg_id to
 * match replies and iopub messages by parent id. Never blocks: -EAGAIN when
 * the queue is full, -EINVAL for another channel or a non-object content,
 * -ESHUTDOWN after kernel_conn_close (from a callback of this connection). */
int kernel_conn_send(KernelConn *c, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]);

/* Sends one heartbeat ping, [empty delimiter, 8-byte payload] as a REQ frames it, so that a REP heartbeat
 * (IRkernel, tslab) answers as a ROUTER echo (ipykernel) does; on_hb fires when it comes back. Only the latest
 * ping counts: echoes of older ones are ignored. After a ping that was not echoed the heartbeat is connected
 * anew first (kernel_conn_hb_fresh() counts these). -EAGAIN when the queue is full. */
int kernel_conn_ping(KernelConn *c);
/* How many times the heartbeat was connected anew after a missed beat. */
unsigned kernel_conn_hb_fresh(const KernelConn *c);

/* Counts of messages dropped for a bad signature or a bad format. */
unsigned kernel_conn_dropped(const KernelConn *c);
/* Counts of connections that broke (see on_dropped), all channels. */
unsigned kernel_conn_reconnects(const KernelConn *c);

/* Closes the connections (what was not written yet is dropped); the memory is freed after the last uv_close
 * callback. No callback runs after this. */
void kernel_conn_close(KernelConn *c);
