/* What the files of the server (http.c, http-server.c, http-stream.c) share. */
#pragma once

#include <microhttpd.h>

#include "http.h"
#include "upstream.h"
#include "util.h"

typedef struct ServerSocket ServerSocket;
typedef struct Conn Conn;

struct HttpServer {
        uv_loop_t *loop;
        const HttpConfig *config;
        ServerSocket *sockets;
        size_t n_sockets;
        uv_timer_t tick; /* each second: keep-alives, and connections past their deadline */
        HttpRequest *requests;
        Conn *conns;
        unsigned open_handles;
        bool freeing;
        void (*on_done)(void *userdata);
        void *done_userdata;
};

struct ServerSocket {
        HttpServer *server;
        Listener listener;
        struct MHD_Daemon *mhd;
        uv_poll_t poll;   /* MHD's epoll fd */
        uv_timer_t timer; /* MHD's own timeouts */
};

/* A client's connection, as MHD_OPTION_NOTIFY_CONNECTION tells it. */
struct Conn {
        ServerSocket *sock;
        int fd;
        usec_t waiting_since; /* since when a request is awaited (the start, or the last answer); 0: one is served */
        bool peer_allowed;    /* a Unix socket's peer is root or this server's uid; TCP: true */
        Conn *prev, *next;
};

struct HttpRequest {
        HttpServer *server;
        ServerSocket *sock;
        Conn *conn;
        struct MHD_Connection *mhd;
        char *method, *path;
        char *body;
        size_t body_len;
        bool dispatched, suspended, queued, ended, failed, client_gone;
        struct MHD_Response *response;
        unsigned status;
        Upstream *upstream;
        HttpCallDone call_done;
        HttpCallNotify call_notify;
        void *data;
        void (*data_free)(void *);
        uv_poll_t *gone; /* while suspended: the client's hang-up */
        /* A stream (http-stream.c). */
        bool streaming, stream_ended, stream_paused;
        char *sbuf;
        size_t slen, soff, salloc;
        const char *keepalive;
        unsigned keepalive_sec;
        usec_t last_write;
        HttpRequest *prev, *next;
};

void request_set_response(HttpRequest *r, unsigned status, struct MHD_Response *resp);
void request_suspend(HttpRequest *r);
void request_resume(HttpRequest *r);
/* Frees what a stream holds (http-stream.c). */
void stream_done(HttpRequest *r);
/* Each second: a keep-alive for a stream that was quiet (http-stream.c). */
void stream_tick(HttpRequest *r, usec_t now);
