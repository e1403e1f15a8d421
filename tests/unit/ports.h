/* Five free loopback ports for a kernel a unit test starts itself. */
#pragma once

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connfile.h"
#include "util.h"

/* Ports below the ephemeral range (32768-60999 on Linux by default), so a
 * connect() retried before the kernel binds can never get the destination
 * port as its source port and connect to itself (doc/design.md, section 4). Each port is
 * checked by binding it; all are held at once, so they are distinct. */
static inline int pick_ports(uint16_t ret[_CHANNEL_MAX]) {
        int fds[_CHANNEL_MAX];
        uint16_t start;
        size_t n = 0;

        if (random_bytes(&start, sizeof start) < 0)
                return -EIO;
        /* 30200-32699: the integration tests take 20000-29999 and test-connfile 30100-30199. */
        start = (uint16_t) (30200 + start % 2000);
        for (unsigned p = start; p < 32700 && n < _CHANNEL_MAX; p++) {
                struct sockaddr_in sa = {
                        .sin_family = AF_INET,
                        .sin_port = htons((uint16_t) p),
                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                };
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

                if (fd < 0)
                        break;
                if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                        close(fd);
                        continue;
                }
                fds[n] = fd;
                ret[n++] = (uint16_t) p;
        }
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
        return n == _CHANNEL_MAX ? 0 : -EADDRNOTAVAIL;
}
