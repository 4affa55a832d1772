/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the deferred releases. */
#ifndef STREAMS_CUDART_DEFERRED_H
#define STREAMS_CUDART_DEFERRED_H

/* ---- Deferred releases --------------------------------------------------
 * An item is a C release function with its argument, and/or a Python
 * reference to drop.  The queue is drained with the GIL held, outside any
 * host callback: by a pending call CUDA-owned threads schedule, or by the
 * next streams call that makes or closes a handle.  First in, first out:
 * a buffer freed in a callback is queued before the stream it kept alive. */
typedef void (*streams_release_fn)(void *arg, int kind);
typedef struct {
    streams_release_fn fn;
    void *arg;
    int kind;           /* what `arg` is, for a release function of several kinds */
    PyObject *keep;
} streams_deferred_item;

static pthread_mutex_t streams_deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static streams_deferred_item *streams_deferred = NULL;
static size_t streams_deferred_len = 0, streams_deferred_cap = 0;
static atomic_int streams_deferred_pending = 0;

static int streams_drain_pending_call(void *unused);

/* Any thread, GIL or not.  Returns 0, or -1 when out of memory (the item is
 * then dropped: a leak, which is safe).  `wake`: ask the interpreter for a
 * drain soon (a pending call).  Without it the item waits for the next
 * drain by a streams call: for a release that is waiting for a state no
 * callback announces (the end of a capture), which would otherwise be
 * retried by pending call after pending call, between every few bytecodes. */
static int streams_defer_ex(streams_release_fn fn, void *arg, int kind, PyObject *keep,
                            int wake) {
    int queued = 0;
    pthread_mutex_lock(&streams_deferred_lock);
    if (streams_deferred_len == streams_deferred_cap) {
        size_t cap = streams_deferred_cap ? 2 * streams_deferred_cap : 64;
        streams_deferred_item *grown = (streams_deferred_item *)realloc(
            streams_deferred, cap * sizeof(streams_deferred_item));
        if (grown) {
            streams_deferred = grown;
            streams_deferred_cap = cap;
        }
    }
    if (streams_deferred_len < streams_deferred_cap) {
        streams_deferred_item *item = &streams_deferred[streams_deferred_len++];
        item->fn = fn;
        item->arg = arg;
        item->kind = kind;
        item->keep = keep;
        queued = 1;
    }
    atomic_store(&streams_deferred_pending, 1);
    pthread_mutex_unlock(&streams_deferred_lock);
    if (!queued) {
        streams_count(STREAMS_CNT_PAYLOAD_LEAKED);
        return -1;
    }
    /* Safe without the GIL.  If the interpreter's queue of pending calls is
     * full, the next drain from a streams call picks the item up. */
    if (wake && streams_interpreter_alive())
        Py_AddPendingCall(streams_drain_pending_call, NULL);
    return 0;
}

static int streams_defer(streams_release_fn fn, void *arg, int kind, PyObject *keep) {
    return streams_defer_ex(fn, arg, kind, keep, 1);
}

/* Run a release without holding the GIL: some releases wait for the device
 * (unloading a library, freeing host or managed memory), and a Python host
 * callback queued there may be waiting for the GIL this thread holds. */
static void streams_release_without_gil(streams_release_fn fn, void *arg, int kind) {
    PyThreadState *saved;
    if (PyGILState_Check()) {
        saved = PyEval_SaveThread();
        fn(arg, kind);
        PyEval_RestoreThread(saved);
    } else {
        fn(arg, kind);
    }
}

/* With the GIL held, outside callbacks: run every queued release.
 * Returns how many ran. */
static Py_ssize_t streams_drain_deferred(void) {
    streams_deferred_item *items;
    size_t n, i;
    if (!atomic_load_explicit(&streams_deferred_pending, memory_order_acquire))
        return 0;
    if (streams_guard_state() != 0)
        return 0;  /* a callback thread: the next safe caller drains */
    pthread_mutex_lock(&streams_deferred_lock);
    items = streams_deferred;
    n = streams_deferred_len;
    streams_deferred = NULL;
    streams_deferred_len = streams_deferred_cap = 0;
    atomic_store(&streams_deferred_pending, 0);
    pthread_mutex_unlock(&streams_deferred_lock);
    for (i = 0; i < n; i++) {
        if (items[i].fn && streams_interpreter_alive())
            streams_release_without_gil(items[i].fn, items[i].arg, items[i].kind);
        if (items[i].keep)
            streams_payload_decref(items[i].keep);
        streams_count(STREAMS_CNT_DEFERRED_RELEASES);
    }
    free(items);
    return (Py_ssize_t)n;
}

static int streams_drain_pending_call(void *unused) {
    (void)unused;
    streams_drain_deferred();
    return 0;
}

#endif /* STREAMS_CUDART_DEFERRED_H */
