/* A streamed answer (http.h): a buffer the daemon's side fills and MHD's reader empties, bounded, with the control
 * request paused while it is full (doc/design.md, section 11). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http-private.h"

static void stream_resume_upstream(HttpRequest *r) {
        if (r->stream_paused && r->slen - r->soff <= r->server->config->limits.stream_buffer / 2) {
                r->stream_paused = false;
                if (r->upstream)
                        upstream_resume(r->upstream);
        }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        HttpRequest *r = cls;
        size_t n = r->slen - r->soff;

        (void) pos;
        if (r->client_gone)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n > 0) {
                if (n > max)
                        n = max;
                memcpy(buf, r->sbuf + r->soff, n);
                r->soff += n;
                if (r->soff == r->slen)
                        r->soff = r->slen = 0;
                stream_resume_upstream(r);
                return (ssize_t) n;
        }
        if (r->stream_ended)
                return MHD_CONTENT_READER_END_OF_STREAM;
        /* Nothing yet: wait without spinning until http_stream_write() or the end brings something. */
        request_suspend(r);
        return 0;
}

int http_stream_begin(HttpRequest *r, unsigned status, const char *content_type, const char *keepalive,
                      unsigned keepalive_sec) {
        struct MHD_Response *resp;

        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, r, NULL);
        if (!resp) {
                http_answer_error(r, 500, "internal", "out of memory");
                return -ENOMEM;
        }
        (void) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        (void) MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        (void) MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        r->streaming = true;
        r->keepalive = keepalive;
        r->keepalive_sec = keepalive_sec;
        r->last_write = now_usec(CLOCK_MONOTONIC);
        request_set_response(r, status, resp);
        return 0;
}

int http_stream_write(HttpRequest *r, const void *data, size_t len) {
        size_t bound = r->server->config->limits.stream_buffer;
        char *b;

        if (!r->streaming || r->stream_ended || len == 0)
                return 0;
        /* What the reader took is dropped from the front once it is half of the buffer, so the buffer stays within
         * twice what waits. */
        if (r->soff > 0 && r->soff >= r->slen / 2) {
                memmove(r->sbuf, r->sbuf + r->soff, r->slen - r->soff);
                r->slen -= r->soff;
                r->soff = 0;
        }
        if (r->slen + len > r->salloc) {
                size_t want = r->slen + len > 2 * r->salloc ? r->slen + len : 2 * r->salloc;
                b = realloc(r->sbuf, want);
                if (!b)
                        return -ENOMEM;
                r->sbuf = b;
                r->salloc = want;
        }
        memcpy(r->sbuf + r->slen, data, len);
        r->slen += len;
        r->last_write = now_usec(CLOCK_MONOTONIC);
        /* Over the bound the daemon's side waits for the reader: what it sends waits in the daemon's own bounded
         * queue, then in the kernel's socket. */
        if (r->slen - r->soff > bound && !r->stream_paused) {
                r->stream_paused = true;
                if (r->upstream)
                        upstream_pause(r->upstream);
        }
        request_resume(r);
        return 0;
}

void http_stream_end(HttpRequest *r) {
        r->stream_ended = true;
        request_resume(r);
}

void stream_done(HttpRequest *r) {
        free(r->sbuf);
        r->sbuf = NULL;
        r->slen = r->soff = r->salloc = 0;
}

void stream_tick(HttpRequest *r, usec_t now) {
        if (!r->streaming || r->stream_ended || !r->keepalive || r->slen > r->soff)
                return;
        if (now - r->last_write >= r->keepalive_sec * USEC_PER_SEC)
                (void) http_stream_write(r, r->keepalive, strlen(r->keepalive));
}
