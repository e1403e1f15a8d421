/* The cell journal: see journal.h for the format and the promises. */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal.h"
#include "util.h"

#define JOURNAL_MAGIC "KSJRNL1\n"
#define HEADER_SIZE 8
#define FRAME_HEAD 8    /* length, CRC */
#define CELL_HEAD 12    /* kind, outcome, client length, time */
#define KIND_CELL 'C'   /* a cell */
#define KIND_MARK 'I'   /* the journal is incomplete from here on */
#define KIND_KERNEL 'K' /* a kernel whose namespace the cells rebuild: 'K' and its 36-character id */
#define KERNEL_FRAME (FRAME_HEAD + 1 + 36)
#define JOURNAL_MIN 1024

static const char *const outcome_names[_CELL_OUTCOME_MAX] = {
        [CELL_OK] = "ok",
        [CELL_ERROR] = "error",
        [CELL_ABORTED] = "aborted",
};

const char *cell_outcome_to_string(CellOutcome o) {
        return o >= 0 && o < _CELL_OUTCOME_MAX ? outcome_names[o] : NULL;
}

uint32_t journal_crc32(const void *p, size_t n) {
        static uint32_t table[256];
        const uint8_t *b = p;
        uint32_t c = 0xffffffffu;

        if (!table[1])
                for (uint32_t i = 0; i < 256; i++) {
                        uint32_t v = i;

                        for (int k = 0; k < 8; k++)
                                v = v & 1 ? 0xedb88320u ^ (v >> 1) : v >> 1;
                        table[i] = v;
                }
        for (size_t i = 0; i < n; i++)
                c = table[(c ^ b[i]) & 0xff] ^ (c >> 8);
        return c ^ 0xffffffffu;
}

static void put_le(uint8_t *p, uint64_t v, size_t n) {
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, size_t n) {
        uint64_t v = 0;

        for (size_t i = 0; i < n; i++)
                v |= (uint64_t) p[i] << (8 * i);
        return v;
}

void journal_entry_done(JournalEntry *e) {
        free(e->client);
        free(e->code);
        *e = (JournalEntry){};
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
        for (size_t done = 0; done < n;) {
                ssize_t k = pread(fd, (uint8_t *) buf + done, n - done, (off_t) (off + done));

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EBADMSG; /* shorter than it said */
                done += (size_t) k;
        }
        return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
        for (size_t done = 0; done < n;) {
                ssize_t k = pwrite(fd, (const uint8_t *) buf + done, n - done, (off_t) (off + done));

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                done += (size_t) k;
        }
        return 0;
}

/* Writes a whole frame around payload at off and makes it durable. */
static int frame_write(int fd, uint64_t off, const uint8_t *frame, size_t len) {
        int r = pwrite_all(fd, frame, len, off);

        if (r < 0)
                return r;
        return fdatasync(fd) < 0 ? -errno : 0;
}

/* The payload of one cell: its kind, outcome, client length and time, then client and code. */
static int cell_parse(const uint8_t *p, size_t len, JournalEntry *ret) {
        size_t client_len;

        if (len < CELL_HEAD || p[0] != KIND_CELL || p[1] >= _CELL_OUTCOME_MAX)
                return -EBADMSG;
        client_len = (size_t) get_le(p + 2, 2);
        if (client_len > JOURNAL_CLIENT_MAX || client_len > len - CELL_HEAD)
                return -EBADMSG;
        if (!ret)
                return 0;
        *ret = (JournalEntry){ .outcome = p[1], .at = get_le(p + 4, 8), .code_len = len - CELL_HEAD - client_len };
        ret->client = strndup((const char *) p + CELL_HEAD, client_len);
        ret->code = malloc(ret->code_len + 1);
        if (!ret->client || !ret->code) {
                journal_entry_done(ret);
                return -ENOMEM;
        }
        memcpy(ret->code, p + CELL_HEAD + client_len, ret->code_len);
        ret->code[ret->code_len] = '\0';
        return 0;
}

/* Reads the frame at off: its payload (malloc'd, the caller frees it) and length. -EBADMSG when the frame is torn,
 * too long or its CRC is wrong. */
static int frame_read(const Journal *j, uint64_t off, uint8_t **ret, size_t *ret_len) {
        uint8_t head[FRAME_HEAD];
        _cleanup_free_ uint8_t *p = NULL;
        uint64_t len;
        int r;

        if (j->size - off < FRAME_HEAD)
                return -EBADMSG;
        r = pread_all(j->fd, head, sizeof head, off);
        if (r < 0)
                return r;
        len = get_le(head, 4);
        /* A cell never exceeds max, and the mark is one byte. */
        if (len == 0 || len > j->max || len > j->size - off - FRAME_HEAD)
                return -EBADMSG;
        p = malloc(len);
        if (!p)
                return -ENOMEM;
        r = pread_all(j->fd, p, len, off + FRAME_HEAD);
        if (r < 0)
                return r;
        if (journal_crc32(p, len) != (uint32_t) get_le(head + 4, 4))
                return -EBADMSG;
        *ret = TAKE_PTR(p);
        *ret_len = len;
        return 0;
}

static int offsets_push(Journal *j, uint64_t off) {
        if (j->n == j->n_allocated) {
                size_t m = j->n_allocated ? 2 * j->n_allocated : 64;
                uint64_t *v = reallocarray(j->offsets, m, sizeof *v);

                if (!v)
                        return -ENOMEM;
                j->offsets = v;
                j->n_allocated = m;
        }
        j->offsets[j->n++] = off;
        return 0;
}

/* id: 36 bytes, not necessarily NUL-terminated (a frame's). */
static bool has_kernel(const Journal *j, const char *id) {
        for (size_t i = 0; i < j->n_kernels; i++)
                if (memcmp(j->kernels[i], id, 36) == 0)
                        return true;
        return false;
}

static int kernels_push(Journal *j, const char *id) {
        char(*v)[37];

        if (has_kernel(j, id))
                return 0;
        v = reallocarray(j->kernels, j->n_kernels + 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        j->kernels = v;
        memcpy(v[j->n_kernels], id, 36);
        v[j->n_kernels++][36] = '\0';
        return 0;
}

bool journal_has_kernel(const Journal *j, const char *kernel_id) {
        return strnlen(kernel_id, 37) == 36 && has_kernel(j, kernel_id);
}

static void kernel_frame(uint8_t frame[static KERNEL_FRAME], const char *kernel_id) {
        frame[FRAME_HEAD] = KIND_KERNEL;
        memcpy(frame + FRAME_HEAD + 1, kernel_id, 36);
        put_le(frame, 37, 4);
        put_le(frame + 4, journal_crc32(frame + FRAME_HEAD, 37), 4);
}

/* Cuts the file at off, durably. */
static int journal_cut(Journal *j, uint64_t off) {
        if (ftruncate(j->fd, (off_t) off) < 0 || fdatasync(j->fd) < 0)
                return -errno;
        j->size = off;
        return 0;
}

/* Empties the file down to its header. */
static int journal_write_header(Journal *j) {
        int r = journal_cut(j, 0);

        if (r < 0)
                return r;
        r = frame_write(j->fd, 0, (const uint8_t *) JOURNAL_MAGIC, HEADER_SIZE);
        if (r < 0)
                return r;
        j->size = HEADER_SIZE;
        return 0;
}

/* Checks every frame from the header on and cuts the file after the last good one. */
static int journal_scan(Journal *j) {
        uint64_t off = HEADER_SIZE, was = j->size;
        char magic[HEADER_SIZE];
        int r;

        if (j->size < HEADER_SIZE || pread_all(j->fd, magic, HEADER_SIZE, 0) < 0 ||
            memcmp(magic, JOURNAL_MAGIC, HEADER_SIZE) != 0) {
                j->cut = j->size;
                return journal_write_header(j);
        }
        while (off < j->size && !j->incomplete) {
                _cleanup_free_ uint8_t *p = NULL;
                size_t len;

                r = frame_read(j, off, &p, &len);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        break;
                if (len == 1 && p[0] == KIND_MARK)
                        j->incomplete = true;
                else if (len == 37 && p[0] == KIND_KERNEL) {
                        r = kernels_push(j, (const char *) p + 1);
                        if (r < 0)
                                return r;
                } else if (cell_parse(p, len, NULL) < 0)
                        break;
                else {
                        r = offsets_push(j, off);
                        if (r < 0)
                                return r;
                }
                off += FRAME_HEAD + len;
        }
        if (off == was)
                return 0;
        j->cut = was - off;
        return journal_cut(j, off);
}

/* journals/ for one call: no descriptor is kept between calls (10,000 journals would hold 10,000). */
static int journal_dir(const Journal *j) {
        int fd = openat(j->state_dirfd, JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        return fd < 0 ? -errno : fd;
}

static int journal_file_open(Journal *j) {
        _cleanup_close_ int dfd = journal_dir(j);
        struct stat st = {};
        int fd;

        if (dfd < 0)
                return dfd;
        fd = openat(dfd, j->name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                int r = S_ISREG(st.st_mode) ? -errno : -EINVAL;

                close(fd);
                return r;
        }
        if (j->fd >= 0)
                close(j->fd);
        j->fd = fd;
        j->size = (uint64_t) st.st_size;
        return 0;
}

static int journal_dir_open(int state_dirfd) {
        int fd;

        if (mkdirat(state_dirfd, JOURNAL_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(state_dirfd, JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* The file for one public call (kept open only within it): 1 when opened here (journal_drop closes it), 0
 * when already open, or -errno. A file that is gone or whose size is not what was written since (someone else
 * changed it) is -ESTALE: nothing is appended at an offset that no longer means anything. */
static int journal_hold(Journal *j) {
        uint64_t size = j->size;
        int r;

        if (j->fd >= 0)
                return 0;
        r = journal_file_open(j);
        if (r < 0)
                return r;
        if (j->size != size) {
                j->size = size;
                close(j->fd);
                j->fd = -1;
                return -ESTALE;
        }
        return 1;
}

static void journal_drop(Journal *j, int held) {
        if (held > 0 && j->fd >= 0) {
                close(j->fd);
                j->fd = -1;
        }
}

Journal *journal_free(Journal *j) {
        if (!j)
                return NULL;
        if (j->fd >= 0)
                close(j->fd);
        free(j->name);
        free(j->offsets);
        free(j->kernels);
        free(j);
        return NULL;
}

int journal_open(int state_dirfd, const char *name, uint64_t max, Journal **ret) {
        _cleanup_(journal_freep) Journal *j = NULL;
        int r;

        if (!context_name_valid(name) || max < JOURNAL_MIN || max > UINT32_MAX)
                return -EINVAL;
        j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->fd = -1;
        j->max = max;
        if (asprintf(&j->name, "%s.journal", name) < 0) {
                j->name = NULL;
                return -ENOMEM;
        }
        j->state_dirfd = state_dirfd;
        r = journal_dir_open(state_dirfd);
        if (r < 0)
                return r;
        close(r);
        r = journal_file_open(j);
        if (r < 0)
                return r;
        r = journal_scan(j);
        journal_drop(j, 1);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(j);
        return 0;
}

/* The file cannot hold what happened any more: record that it is incomplete, or remove it where even that cannot be
 * written, so that no later open takes it for a complete journal. */
/* Removes tmp (when not NULL) and the journal itself, durably. */
static void journal_unlink(const Journal *j, const char *tmp) {
        _cleanup_close_ int dfd = journal_dir(j);

        if (dfd < 0)
                return;
        if (tmp)
                (void) unlinkat(dfd, tmp, 0);
        if (unlinkat(dfd, j->name, 0) == 0)
                (void) fsync(dfd);
}

static void journal_mark_incomplete(Journal *j) {
        static const uint8_t mark[] = { 1, 0, 0, 0, 0, 0, 0, 0, KIND_MARK };
        uint8_t frame[sizeof mark];

        memcpy(frame, mark, sizeof mark);
        put_le(frame + 4, journal_crc32(&frame[FRAME_HEAD], 1), 4);
        j->incomplete = true;
        /* Whatever a failed write left past the last good frame goes first. */
        if (j->fd >= 0 && ftruncate(j->fd, (off_t) j->size) == 0 &&
            frame_write(j->fd, j->size, frame, sizeof frame) == 0) {
                j->size += sizeof frame;
                return;
        }
        journal_unlink(j, NULL);
}

void journal_set_incomplete(Journal *j) {
        int held;

        if (j->incomplete)
                return;
        held = journal_hold(j);
        journal_mark_incomplete(j);
        journal_drop(j, held);
}

/* journal_hold() for a write: a file that cannot be held makes the journal incomplete. */
static int journal_hold_write(Journal *j) {
        int held = journal_hold(j);

        if (held < 0) {
                j->last_error = held;
                journal_mark_incomplete(j);
        }
        return held;
}

static int journal_append_held(Journal *j, const JournalEntry *e);

int journal_append(Journal *j, const JournalEntry *e) {
        int held, r;

        if (j->incomplete)
                return -ESTALE;
        held = journal_hold_write(j);
        if (held < 0)
                return held;
        r = journal_append_held(j, e);
        journal_drop(j, held);
        return r;
}

static int journal_append_held(Journal *j, const JournalEntry *e) {
        size_t client_len = e->client ? strnlen(e->client, JOURNAL_CLIENT_MAX) : 0;
        size_t len = CELL_HEAD + client_len + e->code_len;
        _cleanup_free_ uint8_t *frame = NULL;
        int r;

        if (j->incomplete)
                return -ESTALE;
        if (e->outcome < 0 || e->outcome >= _CELL_OUTCOME_MAX)
                return -EINVAL;
        if (e->code_len > j->max || j->size + FRAME_HEAD + len > j->max) {
                journal_mark_incomplete(j);
                return -EFBIG;
        }
        frame = malloc(FRAME_HEAD + len);
        if (!frame)
                return -ENOMEM;
        /* Room for the offset first: once the frame is on disk, remembering it cannot fail. */
        r = offsets_push(j, j->size);
        if (r < 0)
                return r;
        j->n--;
        frame[FRAME_HEAD] = KIND_CELL;
        frame[FRAME_HEAD + 1] = (uint8_t) e->outcome;
        put_le(frame + FRAME_HEAD + 2, client_len, 2);
        put_le(frame + FRAME_HEAD + 4, e->at, 8);
        memcpy(frame + FRAME_HEAD + CELL_HEAD, e->client, client_len);
        memcpy(frame + FRAME_HEAD + CELL_HEAD + client_len, e->code, e->code_len);
        put_le(frame, len, 4);
        put_le(frame + 4, journal_crc32(frame + FRAME_HEAD, len), 4);
        r = frame_write(j->fd, j->size, frame, FRAME_HEAD + len);
        if (r < 0) {
                j->last_error = r;
                journal_mark_incomplete(j);
                return r;
        }
        j->n++;
        j->size += FRAME_HEAD + len;
        j->last_error = 0;
        return 0;
}

int journal_read(Journal *j, size_t i, JournalEntry *ret) {
        _cleanup_free_ uint8_t *p = NULL;
        size_t len;
        int held, r;

        if (i >= j->n)
                return -ERANGE;
        held = journal_hold(j);
        if (held < 0)
                return held;
        r = frame_read(j, j->offsets[i], &p, &len);
        journal_drop(j, held);
        if (r < 0)
                return r;
        return cell_parse(p, len, ret);
}

void journal_page_free(JournalPageCell *cells, size_t n) {
        for (size_t i = 0; cells && i < n; i++)
                journal_entry_done(&cells[i].e);
        free(cells);
}

#define PAGE_CELL_ROOM_MIN 1024

int journal_page(Journal *j, size_t offset, size_t limit, size_t max_bytes, JournalPageCell **ret, size_t *ret_n,
                 long long *ret_next) {
        size_t n = offset < j->n ? j->n - offset : 0, got = 0, bytes = 0;
        JournalPageCell *cells;
        int r = 0;

        if (n > limit)
                n = limit;
        cells = calloc(n ? n : 1, sizeof *cells);
        if (!cells)
                return -ENOMEM;
        while (got < n && bytes < max_bytes) {
                JournalPageCell *c = &cells[got];
                size_t room = max_bytes - bytes < PAGE_CELL_ROOM_MIN ? PAGE_CELL_ROOM_MIN : max_bytes - bytes;

                r = journal_read(j, offset + got, &c->e);
                if (r < 0)
                        break;
                c->index = offset + got++;
                c->truncated = c->e.code_len > room;
                if (c->truncated) {
                        c->e.code[room] = '\0';
                        c->e.code_len = room;
                }
                bytes += c->e.code_len;
        }
        if (r < 0) {
                journal_page_free(cells, got);
                return r;
        }
        *ret = cells;
        *ret_n = got;
        *ret_next = offset + got < j->n ? (long long) (offset + got) : -1;
        return 0;
}

static int journal_add_kernel_held(Journal *j, const char *kernel_id);

int journal_add_kernel(Journal *j, const char *kernel_id) {
        int held, r;

        if (strlen(kernel_id) != 36)
                return -EINVAL;
        if (j->incomplete)
                return -ESTALE;
        if (journal_has_kernel(j, kernel_id))
                return 0;
        held = journal_hold_write(j);
        if (held < 0)
                return held;
        r = journal_add_kernel_held(j, kernel_id);
        journal_drop(j, held);
        return r;
}

static int journal_add_kernel_held(Journal *j, const char *kernel_id) {
        uint8_t frame[KERNEL_FRAME];
        int r;

        if (strlen(kernel_id) != 36)
                return -EINVAL;
        if (j->incomplete)
                return -ESTALE;
        if (journal_has_kernel(j, kernel_id))
                return 0;
        if (j->size + KERNEL_FRAME > j->max) {
                journal_mark_incomplete(j);
                return -EFBIG;
        }
        kernel_frame(frame, kernel_id);
        r = kernels_push(j, kernel_id);
        if (r < 0)
                return r;
        r = frame_write(j->fd, j->size, frame, sizeof frame);
        if (r < 0) {
                j->n_kernels--;
                j->last_error = r;
                journal_mark_incomplete(j);
                return r;
        }
        j->size += sizeof frame;
        return 0;
}

/* Writes the new file next to the old one: the header, the first n cells' frames as they are, and kernel_id. */
static int journal_write_new(Journal *j, const char *tmp, size_t n, const char *kernel_id) {
        _cleanup_close_ int fd = -1, dfd = journal_dir(j);
        uint64_t off = HEADER_SIZE;
        int r;

        if (dfd < 0)
                return dfd;
        (void) unlinkat(dfd, tmp, 0);
        fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r = pwrite_all(fd, JOURNAL_MAGIC, HEADER_SIZE, 0);
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_free_ uint8_t *p = NULL;
                uint8_t head[FRAME_HEAD];
                size_t len;

                r = frame_read(j, j->offsets[i], &p, &len);
                if (r < 0)
                        break;
                put_le(head, len, 4);
                put_le(head + 4, journal_crc32(p, len), 4);
                r = pwrite_all(fd, head, FRAME_HEAD, off);
                if (r >= 0)
                        r = pwrite_all(fd, p, len, off + FRAME_HEAD);
                off += FRAME_HEAD + len;
        }
        if (r >= 0 && kernel_id) {
                uint8_t frame[KERNEL_FRAME];

                kernel_frame(frame, kernel_id);
                r = pwrite_all(fd, frame, sizeof frame, off);
        }
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        return r;
}

static int journal_rewrite_held(Journal *j, size_t n, const char *kernel_id);

int journal_rewrite(Journal *j, size_t n, const char *kernel_id) {
        int held, r;

        if (kernel_id && strlen(kernel_id) != 36)
                return -EINVAL;
        /* n == 0 copies nothing of the old file, which may be gone (an incomplete journal). */
        held = journal_hold(j);
        if (held < 0 && n > 0 && j->n > 0)
                n = 0;
        r = journal_rewrite_held(j, n, kernel_id);
        journal_drop(j, held > 0 || j->fd >= 0 ? 1 : 0);
        return r;
}

static int journal_rewrite_renamed(Journal *j, const char *tmp) {
        _cleanup_close_ int dfd = journal_dir(j);

        if (dfd < 0)
                return dfd;
        if (renameat(dfd, tmp, dfd, j->name) < 0 || fsync(dfd) < 0)
                return -errno;
        return 0;
}

static int journal_rewrite_held(Journal *j, size_t n, const char *kernel_id) {
        char tmp[NAME_MAX + 1];
        int r;

        if (n > j->n)
                n = j->n;
        snprintf(tmp, sizeof tmp, "%s.new", j->name);
        r = journal_write_new(j, tmp, n, kernel_id);
        if (r >= 0)
                r = journal_rewrite_renamed(j, tmp);
        if (r < 0) {
                /* The old journal must not outlive the namespace it rebuilds: without a file, nothing is
                 * replayed. */
                journal_unlink(j, tmp);
                j->incomplete = true;
                j->last_error = r;
                return r;
        }
        j->n = j->n_kernels = 0;
        j->incomplete = false;
        j->cut = 0;
        j->last_error = 0;
        r = journal_file_open(j);
        if (r < 0)
                return r;
        return journal_scan(j);
}

/* The journal's cells from first on, read into memory (n of them, the caller frees with entries_free). */
static int entries_read(Journal *j, size_t first, size_t n, JournalEntry **ret) {
        JournalEntry *e = calloc(n ? n : 1, sizeof *e);
        int r = e ? 0 : -ENOMEM;

        for (size_t i = 0; i < n && r >= 0; i++)
                r = journal_read(j, first + i, &e[i]);
        if (r < 0) {
                for (size_t i = 0; e && i < n; i++)
                        journal_entry_done(&e[i]);
                free(e);
                return r;
        }
        *ret = e;
        return 0;
}

int journal_rewrite_insert(Journal *j, size_t n, const JournalEntry *extra, const size_t *at, size_t n_extra) {
        _cleanup_free_ char(*kernels)[37] = NULL;
        JournalEntry *tail = NULL;
        size_t first = n, n_kernels = j->n_kernels, k = 0;
        int r;

        if (n > j->n)
                n = first = j->n;
        for (size_t i = 0; i < n_extra; i++)
                if (at[i] < first)
                        first = at[i];
        kernels = calloc(n_kernels ? n_kernels : 1, sizeof *kernels);
        if (!kernels)
                return -ENOMEM;
        memcpy(kernels, j->kernels, n_kernels * sizeof *kernels);
        r = entries_read(j, first, n - first, &tail);
        if (r < 0)
                return r;
        /* No kernel is named until every cell is back: a crash in between leaves a journal that promises nothing. */
        r = journal_rewrite(j, first, NULL);
        for (size_t i = first; i <= n && r >= 0; i++) {
                for (; k < n_extra && r >= 0 && (at[k] <= i || i == n); k++)
                        r = journal_append(j, &extra[k]);
                if (i < n && r >= 0)
                        r = journal_append(j, &tail[i - first]);
        }
        for (size_t i = 0; i < n_kernels && r >= 0; i++)
                r = journal_add_kernel(j, kernels[i]);
        for (size_t i = 0; i < n - first; i++)
                journal_entry_done(&tail[i]);
        free(tail);
        return r;
}

int journal_remove(int state_dirfd, const char *name) {
        char fname[NAME_MAX + 1];
        _cleanup_close_ int dfd = -1;

        if (!context_name_valid(name))
                return -EINVAL;
        snprintf(fname, sizeof fname, "%s.journal", name);
        dfd = openat(state_dirfd, JOURNAL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? 0 : -errno;
        if (unlinkat(dfd, fname, 0) < 0)
                return errno == ENOENT ? 0 : -errno;
        return fsync(dfd) < 0 ? -errno : 0;
}
