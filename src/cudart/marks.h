/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the marks where the replays of a graph executable end, and the parked list. */
#ifndef STREAMS_CUDART_MARKS_H
#define STREAMS_CUDART_MARKS_H

/* ---- Marks: where the replays of a graph executable end -----------------
 * An executable that holds Python objects its replays use (the buffers,
 * modules and events of its graph's nodes and of node updates) records an
 * event after each of its launches, on that launch's stream.  When the
 * executable goes, those objects are parked until every recorded event has
 * completed: no replay still queued or running can then use them.  The
 * events are reused in launch order (the oldest, once complete, is recorded
 * again), so a set holds about as many events as launches are in flight.
 * Recording again an event that has not completed would lose the launch it
 * marks (a stream handle may be reused by a new stream): never done. */
typedef struct {
    pthread_mutex_t lock;
    cudaEvent_t *ring;
    size_t head, count, cap;
} streams_marks_t;

static streams_marks_t *streams_marks_new(void) {
    streams_marks_t *m = (streams_marks_t *)calloc(1, sizeof(*m));
    if (m)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

static int streams_marks_push(streams_marks_t *m, cudaEvent_t ev) {
    cudaEvent_t *ring;
    size_t cap, i;
    if (m->count == m->cap) {
        cap = m->cap ? 2 * m->cap : 8;
        ring = (cudaEvent_t *)malloc(cap * sizeof(cudaEvent_t));
        if (!ring)
            return -1;
        for (i = 0; i < m->count; i++)
            ring[i] = m->ring[(m->head + i) % m->cap];
        free(m->ring);
        m->ring = ring;
        m->cap = cap;
        m->head = 0;
    }
    m->ring[(m->head + m->count) % m->cap] = ev;
    m->count++;
    return 0;
}

/* After a launch on `stream`: mark where it ends. */
static cudaError_t streams_marks_record(streams_marks_t *m, cudaStream_t stream) {
    streams_gil_rule("streams_marks_record");
    cudaEvent_t ev = NULL;
    cudaError_t err;
    pthread_mutex_lock(&m->lock);
    if (m->count > 0 && cudaEventQuery(m->ring[m->head]) == cudaSuccess) {
        ev = m->ring[m->head];
        m->head = (m->head + 1) % m->cap;
        m->count--;
    } else {
        err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (err != cudaSuccess) {
            pthread_mutex_unlock(&m->lock);
            return err;
        }
    }
    err = cudaEventRecord(ev, stream);
    if (err == cudaSuccess && streams_marks_push(m, ev) != 0)
        err = cudaErrorMemoryAllocation;
    if (err != cudaSuccess)
        streams_destroy_marker_event(ev);
    pthread_mutex_unlock(&m->lock);
    return err;
}

/* 1 when every marked launch has ended (an event that reports an error
 * other than not-ready belongs to a context that runs nothing more). */
static int streams_marks_done(streams_marks_t *m) {
    size_t i;
    int done = 1;
    streams_gil_rule("streams_marks_done");
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->count && done; i++)
        if (cudaEventQuery(m->ring[(m->head + i) % m->cap]) == cudaErrorNotReady)
            done = 0;
    pthread_mutex_unlock(&m->lock);
    return done;
}

static void streams_marks_free(streams_marks_t *m) {
    size_t i;
    if (!m)
        return;
    streams_gil_rule("streams_marks_free");
    for (i = 0; i < m->count; i++)
        streams_destroy_marker_event(m->ring[(m->head + i) % m->cap]);
    free(m->ring);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* What gone executables still hold, until their marks say the replays
 * ended; and memory pools and green contexts whose destroy waits for work
 * still queued (`release`, run once the marks are done).  Parked and
 * polled from threads that hold the GIL (attached, on a free-threaded
 * CPython, where several threads do it at once): the list is under
 * streams_parked_lock, held only to change the list; the marks are asked
 * and what is let go is let go outside it (streams_poll_parked).  Never
 * taken on the status or enqueue paths. */
typedef struct {
    streams_marks_t *marks;
    PyObject *keep[2];
    streams_release_fn release;     /* NULL: nothing but the references */
    void *arg;
    int kind;
} streams_parked_t;
static pthread_mutex_t streams_parked_lock = PTHREAD_MUTEX_INITIALIZER;
static streams_parked_t *streams_parked = NULL;
static size_t streams_parked_len = 0, streams_parked_cap = 0;
static atomic_size_t streams_parked_now = 0;    /* streams_parked_len, read without the lock */

static int streams_park_item(streams_parked_t item) {
    streams_parked_t *grown;
    size_t cap;
    pthread_mutex_lock(&streams_parked_lock);
    if (streams_parked_len == streams_parked_cap) {
        cap = streams_parked_cap ? 2 * streams_parked_cap : 8;
        grown = (streams_parked_t *)realloc(streams_parked, cap * sizeof(*grown));
        if (!grown) {
            pthread_mutex_unlock(&streams_parked_lock);
            return -1;
        }
        streams_parked = grown;
        streams_parked_cap = cap;
    }
    streams_parked[streams_parked_len++] = item;
    atomic_store_explicit(&streams_parked_now, streams_parked_len, memory_order_relaxed);
    pthread_mutex_unlock(&streams_parked_lock);
    return 0;
}

/* Takes the marks; keeps a reference to each object (NULL: none).  -1
 * when out of memory: the caller then waits for the marks itself. */
static int streams_park(streams_marks_t *m, PyObject *a, PyObject *b) {
    streams_parked_t item = {m, {a, b}, NULL, NULL, 0};
    /* Taken before the item is in the list: a poll in another thread may
     * let it go at once. */
    Py_XINCREF(a);
    Py_XINCREF(b);
    if (streams_park_item(item) != 0) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return -1;
    }
    return 0;
}

/* Takes the marks; runs `fn(arg, kind)` (on a thread that may call CUDA,
 * without the GIL) once they are done.  -1 when out of memory: nothing
 * was parked. */
static int streams_park_release(streams_marks_t *m, streams_release_fn fn, void *arg,
                                int kind) {
    streams_parked_t item = {m, {NULL, NULL}, fn, arg, kind};
    return streams_park_item(item);
}

static size_t streams_parked_count(void) {
    return atomic_load_explicit(&streams_parked_now, memory_order_relaxed);
}

/* Let go of what the ended replays held; returns how many were let go.
 * Called with the GIL held.  The items are taken out of the list under its
 * lock, their marks asked and the done ones' marks freed with neither the
 * lock nor the GIL held (cudaEventQuery and cudaEventDestroy take driver
 * locks, which a thread blocked in a full queue may hold: the GIL rule,
 * streams/_stream.pyx), the rest put back.  The drops run after the list
 * is consistent again: a drop may run a finalizer that parks or polls. */
static Py_ssize_t streams_poll_parked(void) {
    streams_parked_t *items, *grown, t;
    size_t i, n_done = 0, total, need, cap;
    PyThreadState *saved;
    if (streams_parked_count() == 0 || streams_guard_state() != 0
            || streams_is_shutting_down())
        return 0;
    pthread_mutex_lock(&streams_parked_lock);
    total = streams_parked_len;
    items = total ? (streams_parked_t *)malloc(total * sizeof(*items)) : NULL;
    if (!items) {
        pthread_mutex_unlock(&streams_parked_lock);
        return 0;
    }
    memcpy(items, streams_parked, total * sizeof(*items));
    streams_parked_len = 0;
    pthread_mutex_unlock(&streams_parked_lock);
    saved = PyEval_SaveThread();
    for (i = 0; i < total; i++) {
        if (streams_marks_done(items[i].marks)) {     /* done ones to the front */
            t = items[n_done];
            items[n_done++] = items[i];
            items[i] = t;
        }
    }
    for (i = 0; i < n_done; i++) {
        streams_marks_free(items[i].marks);
        if (items[i].release)
            items[i].release(items[i].arg, items[i].kind);
    }
    PyEval_RestoreThread(saved);
    pthread_mutex_lock(&streams_parked_lock);
    need = streams_parked_len + (total - n_done);
    if (need > streams_parked_cap) {
        cap = streams_parked_cap ? streams_parked_cap : 8;
        while (cap < need)
            cap *= 2;
        grown = (streams_parked_t *)realloc(streams_parked, cap * sizeof(*grown));
        if (grown) {
            streams_parked = grown;
            streams_parked_cap = cap;
        }
    }
    /* Out of memory for the list: the rest stay out of it, leaked (their
     * references and events kept for the life of the process). */
    for (i = n_done; i < total && streams_parked_len < streams_parked_cap; i++)
        streams_parked[streams_parked_len++] = items[i];
    atomic_store_explicit(&streams_parked_now, streams_parked_len, memory_order_relaxed);
    pthread_mutex_unlock(&streams_parked_lock);
    for (i = 0; i < n_done; i++) {
        Py_XDECREF(items[i].keep[0]);
        Py_XDECREF(items[i].keep[1]);
    }
    free(items);
    return (Py_ssize_t)n_done;
}

#endif /* STREAMS_CUDART_MARKS_H */
