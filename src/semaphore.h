/* The host side of a timeline semaphore (streams._semaphore): one page of
 * shared memory that holds the counter, and the calls that read, raise,
 * poison and wait for it.  No CUDA and no Python: the GPU reaches the same
 * page through a registration the call layer makes (host_register), and
 * the module's waits call these without the GIL.
 *
 * The page is a memfd (anonymous shared memory, no file system and no
 * /dev/shm): another process of the same user opens it again through
 * /proc/<pid>/fd/<fd> of a process that holds it, and checks the magic and
 * the nonce before it trusts it.  Linux only; elsewhere every call reports
 * ENOSYS.
 *
 * Values: 0 to STREAMS_SEM_MAX (2**62 - 1).  The poison,
 * STREAMS_SEM_POISON (2**63 - 1), satisfies every wait for a value in that
 * range under the GPU's comparison, the cyclic one of cuStreamWaitValue64
 * ((int64_t)(*addr - value) >= 0), and the host's plain >= alike, so
 * writing it releases every waiter; `abandoned` then tells the host it was
 * a poison, not a signal, even if a late GPU signal overwrote it. */
#ifndef STREAMS_SEMAPHORE_H
#define STREAMS_SEMAPHORE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#define STREAMS_HAVE_SEMAPHORE_PAGE 1
#else
#define STREAMS_HAVE_SEMAPHORE_PAGE 0
#endif

#include "streams/clock.h"

#define STREAMS_SEM_PAGE_SIZE 4096
#define STREAMS_SEM_MAGIC 0x314d45534d525453ULL    /* "STRMSEM1" */
#define STREAMS_SEM_MAX ((1ULL << 62) - 1)
#define STREAMS_SEM_POISON ((1ULL << 63) - 1)
#define STREAMS_SEM_REASON_MAX 1024

typedef struct {
    uint64_t value;          /* offset 0, 8-byte aligned: the counter */
    uint64_t magic;
    uint64_t nonce[2];
    uint32_t abandon_claim;  /* 0, then 1 for the one abandon that writes the reason */
    uint32_t abandoned;      /* 1 once `reason` is whole (release/acquire) */
    uint32_t reason_len;
    uint32_t pad;
    char reason[STREAMS_SEM_REASON_MAX];
} streams_sem_page;

static inline uint64_t streams_sem_load(const streams_sem_page *p) {
    return __atomic_load_n(&p->value, __ATOMIC_ACQUIRE);
}

/* 1 once abandoned: the flag, or a value past the range (the poison
 * written, the flag not yet seen). */
static inline int streams_sem_is_abandoned(const streams_sem_page *p) {
    return __atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE) != 0
        || streams_sem_load(p) > STREAMS_SEM_MAX;
}

/* The reason an abandon wrote (NUL-terminated in `out`), or "" while none
 * is whole. */
static inline void streams_sem_reason(const streams_sem_page *p, char *out, size_t cap) {
    size_t n = 0;
    if (__atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE)) {
        n = p->reason_len;
        if (n > cap - 1)
            n = cap - 1;
        memcpy(out, p->reason, n);
    }
    out[n] = '\0';
}

/* Raise the counter to `v`: 0 done (also when it already is `v`), 1 when
 * `v` is below the counter (*now set), 2 when abandoned.  A compare-and-swap
 * loop, so two processes raising at once never lower it. */
static inline int streams_sem_raise(streams_sem_page *p, uint64_t v, uint64_t *now) {
    uint64_t cur = streams_sem_load(p);
    for (;;) {
        if (__atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE) || cur > STREAMS_SEM_MAX)
            return 2;
        if (v < cur) {
            *now = cur;
            return 1;
        }
        if (v == cur)
            return 0;
        if (__atomic_compare_exchange_n(&p->value, &cur, v, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 0;
    }
}

/* Poison the counter.  The first abandon writes its reason (truncated to
 * STREAMS_SEM_REASON_MAX bytes) before the flag; every one writes the
 * poison after it, so a waiter released by the poison finds the reason. */
static inline void streams_sem_abandon(streams_sem_page *p, const char *reason, size_t n) {
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(&p->abandon_claim, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        if (n > STREAMS_SEM_REASON_MAX)
            n = STREAMS_SEM_REASON_MAX;
        memcpy(p->reason, reason, n);
        p->reason_len = (uint32_t)n;
        __atomic_store_n(&p->abandoned, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&p->value, STREAMS_SEM_POISON, __ATOMIC_SEQ_CST);
}

/* Wait until the counter is at least `target` or `slice_end` passes:
 * 1 reached, 2 abandoned, 0 not yet.  Pauses until `spin_until`, then
 * sleeps `*nap_ns`, doubling to 1 ms: a read of the page is a load from
 * memory, no system call and no lock, so polling costs only the pauses. */
static inline int streams_sem_poll(const streams_sem_page *p, uint64_t target,
                                   long long slice_end, long long spin_until,
                                   long long *nap_ns) {
    long long now;
    uint64_t v;
    for (;;) {
        if (__atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE))
            return 2;
        v = streams_sem_load(p);
        if (v > STREAMS_SEM_MAX)
            return 2;
        if (v >= target)
            return 1;
        now = streams_now_ns();
        if (now >= slice_end)
            return 0;
        if (now < spin_until) {
            streams_cpu_relax();
        } else {
            streams_sleep_ns(*nap_ns);
            if (*nap_ns < 1000000)
                *nap_ns *= 2;
        }
    }
}

#if STREAMS_HAVE_SEMAPHORE_PAGE

/* A new page: 0 with *fd and *page set, else an errno. */
static inline int streams_sem_page_new(uint64_t initial, const uint64_t nonce[2], int *fd,
                                       streams_sem_page **page) {
    void *mem;
    int f = (int)syscall(SYS_memfd_create, "streams-semaphore", 1U /* MFD_CLOEXEC */);
    int err;
    if (f < 0)
        return errno;
    if (ftruncate(f, STREAMS_SEM_PAGE_SIZE) != 0) {
        err = errno;
        close(f);
        return err;
    }
    mem = mmap(NULL, STREAMS_SEM_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (mem == MAP_FAILED) {
        err = errno;
        close(f);
        return err;
    }
    *page = (streams_sem_page *)mem;
    (*page)->nonce[0] = nonce[0];
    (*page)->nonce[1] = nonce[1];
    (*page)->value = initial;
    __atomic_store_n(&(*page)->magic, STREAMS_SEM_MAGIC, __ATOMIC_RELEASE);
    *fd = f;
    return 0;
}

/* The page that process `pid` holds as its descriptor `their_fd`: 0 with
 * *fd and *page set; an errno (ENOENT: no such process or descriptor,
 * EACCES: not allowed to open it); -1 when the file is not a semaphore
 * page, -2 when it is another semaphore's (the nonce differs: the process
 * or the descriptor number was reused). */
static inline int streams_sem_page_open(int pid, int their_fd, const uint64_t nonce[2],
                                        int *fd, streams_sem_page **page) {
    char path[64];
    struct stat st;
    void *mem;
    streams_sem_page *p;
    int f, err;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, their_fd);
    f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0)
        return errno;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != STREAMS_SEM_PAGE_SIZE) {
        close(f);
        return -1;
    }
    mem = mmap(NULL, STREAMS_SEM_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (mem == MAP_FAILED) {
        err = errno;
        close(f);
        return err;
    }
    p = (streams_sem_page *)mem;
    if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != STREAMS_SEM_MAGIC) {
        munmap(mem, STREAMS_SEM_PAGE_SIZE);
        close(f);
        return -1;
    }
    if (p->nonce[0] != nonce[0] || p->nonce[1] != nonce[1]) {
        munmap(mem, STREAMS_SEM_PAGE_SIZE);
        close(f);
        return -2;
    }
    *fd = f;
    *page = p;
    return 0;
}

static inline void streams_sem_page_unmap(void *page) {
    if (page)
        munmap(page, STREAMS_SEM_PAGE_SIZE);
}

static inline void streams_sem_fd_close(int fd) {
    if (fd >= 0)
        close(fd);
}

/* A descriptor that becomes readable when process `pid` ends (pidfd_open,
 * Linux 5.3), or -1 where there is none: streams_sem_peer_gone then asks
 * kill() and /proc instead. */
static inline int streams_sem_pidfd(int pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    return (int)syscall(434, pid, 0);    /* the number on every architecture */
#endif
}

/* 1 when process `pid` has ended (a zombie has: it runs nothing more). */
static inline int streams_sem_peer_gone(int pidfd, int pid) {
    struct pollfd pfd;
    char path[64], buf[512];
    char *close_paren;
    FILE *f;
    size_t n;
    if (pidfd >= 0) {
        pfd.fd = pidfd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        return poll(&pfd, 1, 0) > 0;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (!f)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    close_paren = strrchr(buf, ')');
    return close_paren && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

#else

static inline int streams_sem_page_new(uint64_t initial, const uint64_t nonce[2], int *fd,
                                       streams_sem_page **page) { return ENOSYS; }
static inline int streams_sem_page_open(int pid, int their_fd, const uint64_t nonce[2],
                                        int *fd, streams_sem_page **page) { return ENOSYS; }
static inline void streams_sem_page_unmap(void *page) {}
static inline void streams_sem_fd_close(int fd) {}
static inline int streams_sem_pidfd(int pid) { return -1; }
static inline int streams_sem_peer_gone(int pidfd, int pid) { return 0; }

#endif /* STREAMS_HAVE_SEMAPHORE_PAGE */

#endif /* STREAMS_SEMAPHORE_H */
