/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order): the capture fence and the capture lock.  Needs only
 * <pthread.h>, <stdlib.h>, <time.h> and <stddef.h>. */
#ifndef STREAMS_CUDART_FENCE_H
#define STREAMS_CUDART_FENCE_H

/* ---- The capture fence and the capture lock --------------------------------
 * A one-shot work item (a callback enqueued on a stream that is not being
 * captured) is called once and frees what it carries.  Had a capture begun
 * on its stream between the enqueue's "is this stream capturing?" and
 * cudaLaunchHostFunc, CUDA would put it into the capture's graph instead,
 * to be called on every replay: the second replay would use a freed
 * payload.  And a capture ended (its graph perhaps destroyed) between the
 * same check and the attaching of a graph-owned payload to that graph would
 * hand CUDA a dead graph.  Defences:
 *
 *  - The fence, per stream: the check and the launch of a one-shot enqueue
 *    on stream S run inside a read hold of S's fence; a capture begun or
 *    ended through streams on S (cudaStreamBeginCapture[ToGraph],
 *    cudaStreamEndCapture) runs inside a write hold of S's fence.  So no
 *    capture that streams starts or ends on S can change S's state in the
 *    middle of an enqueue on S: what the check saw is what the launch gets.
 *    (A host-function launch racing a capture's begin or end on the same
 *    stream crashes the driver: benchmarks/capture_race.c.)  Holds on
 *    different streams never wait for one another: a read hold may block in
 *    the driver for as long as its stream's queue is full, and whatever the
 *    GPU waits for (a host thread about to write a word, a callback) may be
 *    a thread that begins or ends a capture on another stream meanwhile.
 *    Writers first: a stream that threads keep enqueuing host functions on
 *    still lets a capture begin or end on it (with readers first, the
 *    capturing thread of benchmarks/capture_race.c waits for ever).
 *
 *  - The capture lock, one for the process: an enqueue into a capture
 *    attaches a user object to the capture's graph, and CUDA graph objects
 *    are not internally synchronized (two threads attaching to one
 *    capture's graph at once crash in the driver), and the capture must
 *    not end (its graph be destroyed) meanwhile.  So enqueues into a
 *    capture, and every capture's begin and end, take it.  A one-shot
 *    enqueue asks its stream's capture status under it too (inside the
 *    stream's read hold): the end of a capture begun on another stream
 *    also ends the capture of every stream that joined it, and must not
 *    race that question.  It is held only across calls that cannot wait
 *    for the GPU (a launch into a capture queues nothing, a status never
 *    waits), and never while waiting for a stream's fence: the fence comes
 *    first.
 *
 * Nobody waits for either with the GIL held (the callers release it first).
 *
 *
 * One-shot tickets, for what the fence cannot see: src/cudart/tickets.h.
 * This part needs only pthreads and libc (no Python, no CUDA), so that
 * tests/cudart/test_fence_cpu.py compiles it alone and hammers it. */

/* The streams with a hold or a waiting writer: a small table under one
 * mutex that is only ever held for a look-up, never across a CUDA call. */
typedef struct {
    void *stream;
    int readers;            /* read holds now */
    int writer;             /* 1 while a capture begins or ends on it */
    int writers_waiting;    /* writers first: readers wait for these too */
} streams_fence_entry;

static pthread_mutex_t streams_fence_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t streams_fence_cond = PTHREAD_COND_INITIALIZER;
static streams_fence_entry *streams_fence_table = NULL;
static size_t streams_fence_len = 0, streams_fence_cap = 0;
static pthread_mutex_t streams_capture_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry of `stream`, made if `make`; NULL if absent (or out of memory,
 * which the caller treats as "wait and try again"). */
static streams_fence_entry *streams_fence_find(void *stream, int make) {
    size_t i;
    for (i = 0; i < streams_fence_len; i++)
        if (streams_fence_table[i].stream == stream)
            return &streams_fence_table[i];
    if (!make)
        return NULL;
    if (streams_fence_len == streams_fence_cap) {
        size_t cap = streams_fence_cap ? 2 * streams_fence_cap : 16;
        streams_fence_entry *t = (streams_fence_entry *)realloc(
            streams_fence_table, cap * sizeof(streams_fence_entry));
        if (t == NULL)
            return NULL;
        streams_fence_table = t;
        streams_fence_cap = cap;
    }
    streams_fence_table[streams_fence_len].stream = stream;
    streams_fence_table[streams_fence_len].readers = 0;
    streams_fence_table[streams_fence_len].writer = 0;
    streams_fence_table[streams_fence_len].writers_waiting = 0;
    return &streams_fence_table[streams_fence_len++];
}

static void streams_fence_forget_if_idle(streams_fence_entry *e) {
    if (e->readers == 0 && e->writer == 0 && e->writers_waiting == 0)
        *e = streams_fence_table[--streams_fence_len];
}

/* Waits for a change of the table, its lock held: for a hold to end, or,
 * when the table could not grow (out of memory), for a millisecond at most
 * before the caller tries again. */
static void streams_fence_wait(int out_of_memory) {
    struct timespec ts;
    if (!out_of_memory) {
        pthread_cond_wait(&streams_fence_cond, &streams_fence_lock);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&streams_fence_cond, &streams_fence_lock, &ts);
}

/* A read hold of `stream`'s fence. */
static void streams_fence_enter(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_lock(&streams_fence_lock);
    for (;;) {
        e = streams_fence_find(stream, 1);
        if (e != NULL && e->writer == 0 && e->writers_waiting == 0)
            break;
        streams_fence_wait(e == NULL);
    }
    e->readers++;
    pthread_mutex_unlock(&streams_fence_lock);
}

/* A read hold of `stream`'s fence if one is free now: 1 taken, 0 not (a
 * capture begins or ends on it, or waits to).  For a look that must not
 * wait on a stream other than the caller's (the sweep of the captures'
 * registry, streams/_hostcall.pyx). */
static int streams_fence_try_enter(void *stream) {
    streams_fence_entry *e;
    int taken = 0;
    pthread_mutex_lock(&streams_fence_lock);
    e = streams_fence_find(stream, 1);
    if (e != NULL && e->writer == 0 && e->writers_waiting == 0) {
        e->readers++;
        taken = 1;
    }
    pthread_mutex_unlock(&streams_fence_lock);
    return taken;
}

static void streams_fence_leave(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_lock(&streams_fence_lock);
    e = streams_fence_find(stream, 0);
    if (e != NULL) {
        e->readers--;
        streams_fence_forget_if_idle(e);
    }
    pthread_cond_broadcast(&streams_fence_cond);
    pthread_mutex_unlock(&streams_fence_lock);
}

/* A write hold of `stream`'s fence (a capture beginning or ending on it),
 * then the capture lock. */
static void streams_fence_close(void *stream) {
    streams_fence_entry *e;
    int waiting = 0;
    pthread_mutex_lock(&streams_fence_lock);
    for (;;) {
        e = streams_fence_find(stream, 1);
        if (e != NULL && !waiting) {
            e->writers_waiting++;
            waiting = 1;
        }
        if (e != NULL && e->readers == 0 && e->writer == 0)
            break;
        streams_fence_wait(e == NULL);
    }
    e->writers_waiting--;
    e->writer = 1;
    pthread_mutex_unlock(&streams_fence_lock);
    pthread_mutex_lock(&streams_capture_lock);
}

static void streams_fence_open(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_unlock(&streams_capture_lock);
    pthread_mutex_lock(&streams_fence_lock);
    e = streams_fence_find(stream, 0);
    if (e != NULL) {
        e->writer = 0;
        streams_fence_forget_if_idle(e);
    }
    pthread_cond_broadcast(&streams_fence_cond);
    pthread_mutex_unlock(&streams_fence_lock);
}

/* The capture lock alone: an enqueue into a capture. */
static inline void streams_capture_enter(void) { pthread_mutex_lock(&streams_capture_lock); }
static inline void streams_capture_leave(void) { pthread_mutex_unlock(&streams_capture_lock); }

/* How many streams have a hold or a waiting writer now (tests). */
static inline size_t streams_fence_streams_now(void) {
    size_t n;
    pthread_mutex_lock(&streams_fence_lock);
    n = streams_fence_len;
    pthread_mutex_unlock(&streams_fence_lock);
    return n;
}

#endif /* STREAMS_CUDART_FENCE_H */
