/* A resolved identity: the user a kernel runs as, and whose rights a file is written with. Resolved in the
 * daemon (spawn_user_resolve, src/daemon/spawn.h); here so that what acts as a user below the daemon
 * (userfile.h, connfile.h) needs nothing of it. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

typedef struct SpawnUser {
        bool change; /* false: keep the daemon's identity */
        uid_t uid;
        gid_t gid;
        gid_t *groups; /* supplementary groups, from getgrouplist */
        int n_groups;
        char *name;
        char *home;
        char *shell;
} SpawnUser;
