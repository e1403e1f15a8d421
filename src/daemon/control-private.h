/* What the parts of the control server share (control.c, control-socket.c): its limits, its structures.
 * Private to src/daemon/control*.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <uv.h>

#include <jansson.h>

#include "control.h"

/* Connections: CONTROL_MAX_CONNECTIONS at most in all, the last CONTROL_RESERVED of
 * them only for root and the daemon's own uid, so that nobody else can lock them
 * out; any other uid has CONTROL_MAX_PER_UID at most, so that one uid cannot take
 * the slots of the others. (kernelsupd(8) and kernelctl(1) give these numbers.) */
#define CONTROL_MAX_CONNECTIONS 256
#define CONTROL_RESERVED 32
#define CONTROL_MAX_PER_UID 64
/* A connection with no request open must complete a request line within this
 * long: the whole line, not each byte, so a peer that trickles bytes is closed
 * too. A connection waiting for a reply (a long cell, a wait) is never idle. */
#define CONTROL_IDLE_TIMEOUT_MSEC 5000
/* How long a peer with replies still unwritten may go without reading any of them. */
#define CONTROL_WRITE_STALL_MSEC 60000
#define CONTROL_BACKLOG 128
/* One read; a longer line is collected in the connection's line buffer. */
#define CONTROL_READ_SIZE (64 * 1024)
/* A peer that sends requests but does not read the replies must not make us
 * buffer without bound: past this (plus what its requests were allowed, see
 * control_request_allow_queue) it is disconnected. */
#define CONTROL_MAX_WRITE_QUEUE (16 * 1024 * 1024)
/* Backpressure: while this much is unread by the peer, its further requests
 * wait (we stop reading); reading resumes below a quarter of it. */
#define CONTROL_READ_PAUSE (1024 * 1024)
/* Requests held open (a wait, a cell queued or running, a check) keep their
 * parsed line, and a cell a copy of its code, while they send nothing, so
 * backpressure does not bound them: these caps do. A request counts its line
 * plus CONTROL_REQUEST_OVERHEAD; past a cap it is refused with an error that
 * names the cap (a short one only by its connection's caps, see
 * CONTROL_SMALL_REQUEST). Root and the daemon's own uid are bounded per connection
 * and per uid, but not counted in (nor refused by) the cap of all others, so
 * nobody else can lock them out. (kernelsup.ini(5) states the bound these give.) */
#define CONTROL_MAX_OPEN_PER_CONN 16
#define CONTROL_MAX_HELD_PER_CONN (2 * 1024 * 1024)
#define CONTROL_MAX_HELD_PER_UID (8 * 1024 * 1024)
#define CONTROL_MAX_HELD_OTHERS (32 * 1024 * 1024)
#define CONTROL_REQUEST_OVERHEAD 512
/* A request line this short (kernelctl status, a wait) is refused only by the
 * caps of its connection, so a uid whose big requests fill its cap (or all
 * others') can still ask for its status. */
#define CONTROL_SMALL_REQUEST 512
/* After this much held request memory was freed, give it back to the system
 * (glibc keeps a freed heap otherwise). */
#define CONTROL_TRIM_AFTER (4 * 1024 * 1024)

#define LIST_PREPEND(head, item)                                                                                      \
        do {                                                                                                          \
                (item)->prev = NULL;                                                                                  \
                (item)->next = (head);                                                                                \
                if (head)                                                                                             \
                        (head)->prev = (item);                                                                        \
                (head) = (item);                                                                                      \
        } while (0)

#define LIST_REMOVE(head, item)                                                                                       \
        do {                                                                                                          \
                if ((item)->next)                                                                                     \
                        (item)->next->prev = (item)->prev;                                                            \
                if ((item)->prev)                                                                                     \
                        (item)->prev->next = (item)->next;                                                            \
                else                                                                                                  \
                        (head) = (item)->next;                                                                        \
                (item)->next = (item)->prev = NULL;                                                                   \
        } while (0)

typedef struct ControlConnection ControlConnection;

struct ControlRequest {
        ControlConnection *conn; /* holds a reference */
        json_t *root;            /* owns id, method and params */
        json_t *id;              /* NULL for a notification: the answer is swallowed */
        const char *method;
        size_t weight; /* what it counts against the caps on held requests */
        void (*cancel)(ControlRequest *req, void *data);
        void *cancel_data;
        ControlRequest *prev, *next;
};

struct ControlConnection {
        ControlServer *server; /* NULL after the handle closed */
        uv_pipe_t pipe;
        uv_shutdown_t shutdown;
        ControlPeer peer;
        unsigned n_ref;
        bool closing;       /* no more reading or writing */
        bool shutting_down; /* flushing a last error before closing */
        /* uv_now() by which a complete request line must have come; 0 while a request is open. */
        uint64_t idle_deadline;
        bool idle_grace;        /* the deadline passed with bytes unread, and got one more loop iteration */
        bool evicted;           /* closed to make room for a newer connection of its uid (server_make_room) */
        bool read_paused;       /* backpressure: the peer has CONTROL_READ_PAUSE unread */
        size_t write_allowance; /* the most any of its requests may leave unread, beyond CONTROL_MAX_WRITE_QUEUE */
        size_t n_open;          /* requests open */
        size_t held;            /* the sum of their weights */
        char *rbuf;
        char *line; /* a partial line, waiting for its newline */
        size_t line_len, line_alloc;
        ControlRequest *requests;
        ControlConnection *prev, *next;
};

struct ControlServer {
        uv_loop_t *loop;
        uv_pipe_t pipe;
        char *path; /* the socket file we bound (NULL for a passed fd) */
        dev_t dev;
        ino_t ino;
        const ControlMethod *methods;
        size_t n_methods;
        void *userdata;
        ControlConnection *connections;
        size_t n_connections;
        size_t n_handles;
        uv_timer_t idle_timer; /* fires at the earliest idle deadline */
        uint64_t idle_timeout; /* msec */
        uint64_t write_stall;  /* msec */
        uid_t own_uid;
        size_t n_evicting;  /* connections closed by server_make_room, until their close callback */
        size_t held_others; /* the weights of the open requests of uids other than root and ours */
        size_t freed;       /* held request memory freed since the last malloc_trim() */
        bool closing;
        bool limit_logged;
};

/* The socket file (control-socket.c). */

/* Binds and listens on path: the mode, owner and group are set before listen(), so no client can connect while
 * the permissions are still wrong. A stale socket there (refusing connections) is removed first; a socket somebody
 * listens on is -EADDRINUSE, anything else -EEXIST. */
int control_socket_bind(const char *path, const ControlSocketAccess *access, int *ret_fd, struct stat *ret_st);

/* A passed fd must be a Unix stream socket (-EPROTOTYPE); we listen on a duplicate so the caller's descriptor stays
 * the caller's. */
int control_socket_dup_passed(int listen_fd, int *ret_fd);
