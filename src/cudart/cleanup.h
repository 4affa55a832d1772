/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): failed releases made by the shim itself. */
#ifndef STREAMS_CUDART_CLEANUP_H
#define STREAMS_CUDART_CLEANUP_H

/* ---- Releases the shim makes ------------------------------------------------
 * The shim destroys events of its own (the per-thread marker events, the
 * marks of graph launches) where nothing can be raised: a thread's exit, an
 * executable let go.  A failure is reported as every other failed release
 * is, as a streams.CudaWarning: the call layer (streams/_cudart.pyx) hands
 * over its queue of failures (cleanup_failed) and its fault injection
 * (injected_failure, for tests) at import.  Both take no GIL. */
/* ---- The queue of failed releases ------------------------------------------
 * Any thread, no GIL: a release that failed where nothing can be raised
 * queues (what, handle, error) here; the next flush, with the GIL, takes the
 * queue and warns (streams/_cudart/cleanup.pxi, flush_cleanup_warnings).
 * The lock is held only to copy a few words, never across a call; a fork
 * re-makes it in the child, where another thread of the parent may have
 * held it, and empties the queue there, which names the parent's handles
 * (src/cudart/fork.h; tests/cudart/test_shared_state_cpu.py forks while a thread
 * holds it).  The fault injection of the tests (streams_cleanup_inject_*)
 * is kept under the same lock. */
#define STREAMS_CLEANUP_QUEUE 64
#define STREAMS_CLEANUP_INJECT_KINDS 32
typedef struct {
    int what;
    uintptr_t handle;
    int err;
} streams_cleanup_error;

static pthread_mutex_t streams_cleanup_lock = PTHREAD_MUTEX_INITIALIZER;
static streams_cleanup_error streams_cleanup_queue[STREAMS_CLEANUP_QUEUE];
static atomic_int streams_cleanup_len = 0;       /* read without the lock: a hint */
static unsigned long long streams_cleanup_lost = 0;
static int streams_cleanup_inject_left[STREAMS_CLEANUP_INJECT_KINDS];
static int streams_cleanup_inject_error[STREAMS_CLEANUP_INJECT_KINDS];
static atomic_int streams_cleanup_injecting = 0; /* any injection armed: a hint */
static atomic_int streams_cleanup_holds = 0;     /* streams_cleanup_hold_for: held now */

static void streams_cleanup_push(int what, const void *handle, int err) {
    int n;
    pthread_mutex_lock(&streams_cleanup_lock);
    n = atomic_load_explicit(&streams_cleanup_len, memory_order_relaxed);
    if (n < STREAMS_CLEANUP_QUEUE) {
        streams_cleanup_queue[n].what = what;
        streams_cleanup_queue[n].handle = (uintptr_t)handle;
        streams_cleanup_queue[n].err = err;
        atomic_store_explicit(&streams_cleanup_len, n + 1, memory_order_relaxed);
    } else {
        streams_cleanup_lost++;
    }
    pthread_mutex_unlock(&streams_cleanup_lock);
}

static int streams_cleanup_queued(void) {
    return atomic_load_explicit(&streams_cleanup_len, memory_order_relaxed);
}

/* Moves the queue into `out` (room for STREAMS_CLEANUP_QUEUE); returns how
 * many, and how many more were lost. */
static int streams_cleanup_take(streams_cleanup_error *out, unsigned long long *lost) {
    int i, n;
    pthread_mutex_lock(&streams_cleanup_lock);
    n = atomic_load_explicit(&streams_cleanup_len, memory_order_relaxed);
    for (i = 0; i < n; i++)
        out[i] = streams_cleanup_queue[i];
    atomic_store_explicit(&streams_cleanup_len, 0, memory_order_relaxed);
    *lost = streams_cleanup_lost;
    streams_cleanup_lost = 0;
    pthread_mutex_unlock(&streams_cleanup_lock);
    return n;
}

/* Tests: the next `count` releases of kind `what` report `err`. */
static int streams_cleanup_inject(int what, int err, int count) {
    if (what < 0 || what >= STREAMS_CLEANUP_INJECT_KINDS)
        return -1;
    pthread_mutex_lock(&streams_cleanup_lock);
    streams_cleanup_inject_error[what] = err;
    streams_cleanup_inject_left[what] = count;
    if (count > 0)
        atomic_store(&streams_cleanup_injecting, 1);
    pthread_mutex_unlock(&streams_cleanup_lock);
    return 0;
}

/* The error a test asked a release of kind `what` to report, or 0. */
static int streams_cleanup_injected(int what) {
    int err = 0;
    if (!atomic_load_explicit(&streams_cleanup_injecting, memory_order_relaxed)
            || what < 0 || what >= STREAMS_CLEANUP_INJECT_KINDS)
        return 0;       /* the usual case, without the lock */
    int i, armed = 0;
    pthread_mutex_lock(&streams_cleanup_lock);
    if (streams_cleanup_inject_left[what] > 0) {
        streams_cleanup_inject_left[what]--;
        err = streams_cleanup_inject_error[what];
    }
    /* The hint goes once no kind has a count left: later releases skip
     * the lock again. */
    for (i = 0; i < STREAMS_CLEANUP_INJECT_KINDS; i++)
        armed |= streams_cleanup_inject_left[i] > 0;
    if (!armed)
        atomic_store(&streams_cleanup_injecting, 0);
    pthread_mutex_unlock(&streams_cleanup_lock);
    return err;
}

/* Tests: hold the lock for `ns` nanoseconds (no GIL), as a release failing
 * on another thread holds it for a moment, so that a fork can be made
 * while it is held. */
static void streams_cleanup_hold_for(long long ns) {
    pthread_mutex_lock(&streams_cleanup_lock);
    atomic_fetch_add(&streams_cleanup_holds, 1);
    streams_sleep_ns(ns);
    atomic_fetch_sub(&streams_cleanup_holds, 1);
    pthread_mutex_unlock(&streams_cleanup_lock);
}

static int streams_cleanup_holds_now(void) {
    return atomic_load(&streams_cleanup_holds);
}

/* In a forked child: the lock re-made, the parent's failures and
 * injections dropped. */
static void streams_cleanup_after_fork_child(void) {
    int i;
    pthread_mutex_init(&streams_cleanup_lock, NULL);
    atomic_store(&streams_cleanup_len, 0);
    streams_cleanup_lost = 0;
    for (i = 0; i < STREAMS_CLEANUP_INJECT_KINDS; i++)
        streams_cleanup_inject_left[i] = 0;
    atomic_store(&streams_cleanup_injecting, 0);
    atomic_store(&streams_cleanup_holds, 0);
}

typedef void (*streams_cleanup_failed_fn)(int what, const void *handle, int err);
typedef int (*streams_injected_failure_fn)(int what);
static streams_cleanup_failed_fn streams_cleanup_failed_hook = NULL;
static streams_injected_failure_fn streams_injected_failure_hook = NULL;
static int streams_cleanup_marker_kind = -1;

static void streams_set_cleanup_hooks(streams_cleanup_failed_fn failed,
                                      streams_injected_failure_fn injected, int marker_kind) {
    streams_cleanup_failed_hook = failed;
    streams_injected_failure_hook = injected;
    streams_cleanup_marker_kind = marker_kind;
}

/* Any thread, no GIL: destroy one of the shim's own events; a failure is
 * queued for the next flush (the injected error, if a test asked for one,
 * after the real destroy, so nothing leaks). */
static void streams_destroy_marker_event(cudaEvent_t ev) {
    int injected = 0;
    cudaError_t err;
    if (ev == NULL)
        return;
    if (streams_injected_failure_hook != NULL && streams_cleanup_marker_kind >= 0)
        injected = streams_injected_failure_hook(streams_cleanup_marker_kind);
    err = cudaEventDestroy(ev);
    if (err != cudaSuccess)
        cudaGetLastError();  /* must not leak into this thread's next call */
    if (injected)
        err = (cudaError_t)injected;
    if (err != cudaSuccess && streams_cleanup_failed_hook != NULL)
        streams_cleanup_failed_hook(streams_cleanup_marker_kind, (const void *)ev, (int)err);
}

#endif /* STREAMS_CUDART_CLEANUP_H */
