/* ZMTP 3.0 with the NULL mechanism (rfc.zeromq.org/spec/23), as much of it as a Jupyter client needs, pure: the
 * bytes we send (greeting, READY, frame headers) and a reader of what a kernel's libzmq sends, which keeps only
 * what it is told to keep and skips the rest as it streams past. libzmq hands over a multipart message only whole,
 * so a kernel could make its peer hold any number of buffer frames of a message at once (a comm_msg of fifteen
 * 16 MiB buffers held 240 MiB in the daemon); this reader never holds a skipped byte. No I/O, no allocation but
 * the kept frames'. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZMTP_GREETING_SIZE 64
/* A frame header: flags, then a size of one byte, or of eight (network order) with ZMTP_FLAG_LONG. */
#define ZMTP_HEADER_MAX 9
#define ZMTP_FLAG_MORE 0x01
#define ZMTP_FLAG_LONG 0x02
#define ZMTP_FLAG_COMMAND 0x04
/* The most of a command's body the reader keeps (READY's properties, ERROR's reason); the rest is skipped. */
#define ZMTP_COMMAND_KEPT 512
/* Frames a message of ZMTP_KEEP_FIRST keeps (the heartbeat's echo is one or two). */
#define ZMTP_KEEP_FIRST_MAX 3
/* Jupyter's delimiter, then the signature and four dicts, are what ZMTP_KEEP_JUPYTER keeps. */
#define ZMTP_JUPYTER_KEPT 6

/* Our greeting: signature, version 3.0, mechanism NULL, as a client. */
void zmtp_greeting(uint8_t ret[ZMTP_GREETING_SIZE]);
/* Checks the peer's greeting: 0, or -EPROTO (not ZMTP, or a version before 3.0, or a mechanism other than NULL). */
int zmtp_greeting_check(const uint8_t g[ZMTP_GREETING_SIZE]);
/* Writes the header of a frame of size bytes into ret; returns its length (2 or 9). */
size_t zmtp_header(uint8_t flags, uint64_t size, uint8_t ret[ZMTP_HEADER_MAX]);
/* The READY command, whole (header and body), for a socket of type socket_type ("DEALER", "SUB") with the routing
 * identity (at most 255 bytes, not starting with a NUL, which libzmq keeps for its own; NULL: none, the peer's
 * ROUTER makes one up), into ret of size bytes; returns its length, or -ENOBUFS. */
int zmtp_ready(const char *socket_type, const char *identity, uint8_t *ret, size_t size);

/* What the reader keeps of each message. */
typedef enum ZmtpKeep {
        /* Jupyter's envelope: frames before "<IDS|MSG>" are skipped (routing identities, topics), the delimiter
         * and the five frames after it kept, every later frame (a message's buffers) skipped. */
        ZMTP_KEEP_JUPYTER,
        /* The first ZMTP_KEEP_FIRST_MAX frames, the rest skipped (counted). */
        ZMTP_KEEP_FIRST,
} ZmtpKeep;

typedef struct ZmtpSink {
        /* A message ended: its kept frames (ZMTP_KEEP_JUPYTER: the delimiter first; none when it had none) and how
         * many frames it had in all. The frames are borrowed for the call. */
        int (*message)(void *userdata, const void *const *frames, const size_t *lens, size_t n, size_t n_total);
        /* A message ended whose kept frames came to more than max bytes: none was kept past the bound. */
        int (*oversized)(void *userdata);
        /* A command: its name (NUL-terminated, at most 255 bytes) and the first ZMTP_COMMAND_KEPT bytes of its
         * data. */
        int (*command)(void *userdata, const char *name, const uint8_t *data, size_t len);
} ZmtpSink;

typedef struct ZmtpReader {
        ZmtpKeep keep;
        size_t max; /* the most a message's kept frames may add up to; 0: no bound */
        const ZmtpSink *sink;
        void *userdata;

        size_t greeting_got;
        uint8_t greeting[ZMTP_GREETING_SIZE];

        uint8_t header[ZMTP_HEADER_MAX];
        size_t header_got;
        uint8_t flags;   /* of the frame being read */
        uint64_t left;   /* bytes of its body still to come */
        bool in_body;    /* its header is complete */
        bool keeping;    /* its body goes to frame[n_kept - 1] (else it is skipped) */
        size_t kept_cap; /* what that frame has room for */

        /* The message being read. */
        size_t n_frames;
        size_t n_kept;
        bool delimited; /* ZMTP_KEEP_JUPYTER: the delimiter was seen */
        bool over;      /* its kept frames passed max: nothing more is kept, and it is reported oversized */
        size_t kept_bytes;
        char *frame[ZMTP_JUPYTER_KEPT];
        size_t frame_len[ZMTP_JUPYTER_KEPT];
        bool probing; /* the frame is before the delimiter and has its size: it is compared */
        char probe[sizeof "<IDS|MSG>" - 1];
        size_t probe_len;

        /* The command being read. */
        uint8_t command[ZMTP_COMMAND_KEPT + 1];
        size_t command_len;
} ZmtpReader;

void zmtp_reader_init(ZmtpReader *r, ZmtpKeep keep, size_t max, const ZmtpSink *sink, void *userdata);
/* Frees what a message half read holds, and forgets where the stream was: the next byte is a greeting's. */
void zmtp_reader_reset(ZmtpReader *r);
/* Reads p[0..len). A sink's negative return stops the reading and is returned (the reader may be reset or
 * freed then, but not fed again without a reset). Otherwise 0, or -EPROTO for a bad greeting or a frame that
 * is no ZMTP, -ENOMEM. */
int zmtp_reader_feed(ZmtpReader *r, const void *p, size_t len);
