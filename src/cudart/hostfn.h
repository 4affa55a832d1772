/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the trampolines that run Python host callbacks on CUDA's threads. */
#ifndef STREAMS_CUDART_HOSTFN_H
#define STREAMS_CUDART_HOSTFN_H

/* ---- Host callbacks -----------------------------------------------------
 * The payload is a PyObject owned by the enqueueing side: one strong
 * reference travels with the CUDA work item.  The Python-level work (call,
 * report, deliver the error) is done by a dispatcher that streams._hostcall
 * registers, run with the GIL held and the in-callback flag set. */
typedef void (*streams_dispatch_fn)(PyObject *payload, int status);
static streams_dispatch_fn streams_dispatch = NULL;


static int streams_wait_trampolines_idle(long long timeout_ns) {
    long long deadline = streams_now_ns() + timeout_ns;
    while (atomic_load(&streams_trampolines_active) > 0) {
        if (streams_now_ns() > deadline) return -1;
        sched_yield();
    }
    return 0;
}

/* CUDA runs host functions on a thread Python does not know.  The first
 * callback on such a thread creates a Python thread state for it and keeps
 * it (the extra gilstate count pybind11 takes), for as long as the process
 * lives: creating and deleting one for every callback costs microseconds
 * with a GIL, and far more on a free-threaded CPython, where a thread
 * state deleted with objects still alive in its heap hands them over
 * (3.13t: 150 us per callback that made one object, 394-431 us per streams
 * callback on an H200, against 1.7-2.1 us kept; tools/probe_callback_backlog.py).
 *
 * On a free-threaded CPython an object belongs to the thread that made it
 * (biased reference counting): one that a callback made and another thread
 * let go of last is handed back to CUDA's thread and freed when that
 * thread next runs Python (the next callback), or by the next cyclic
 * collection (gc.collect() merges every thread's hand-backs), as for any
 * thread that sleeps (docs/safety.rst). */
static _Thread_local int streams_tls_tstate_pinned = 0;

/* Producers give way to callbacks.  A Python callback needs the GIL on
 * CUDA's thread, and the stream waits for it.  CPython's GIL is not fair: a
 * thread that was asleep waiting for it, as CUDA's thread is, must first
 * be woken and scheduled, and meanwhile a running thread that asks for the
 * free GIL takes it at once.  Threads that enqueue host functions from
 * Python take the GIL back after every launch, so with several of them
 * CUDA's thread keeps losing it to them and every callback of the stream
 * waits behind their Python work (8 producers on one stream: 4.7x the C
 * floor).  So a producer back from its launch, without the GIL, while other
 * producers are launching too, first lets a callback that waits for the GIL
 * take it: it pauses while one waits, at most STREAMS_YIELD_MAX_NS (a
 * callback waiting behind a thread that keeps the GIL long is not worth
 * more).  One producer alone never pauses.  Only the order in which threads
 * take the GIL changes: what runs, and the order of each stream's work, do
 * not.  Not on free-threaded CPython: no GIL there. */
static atomic_int streams_callbacks_awaiting_gil = 0;
static atomic_int streams_host_producers = 0;
static atomic_int streams_producers_yield = 1;
#define STREAMS_YIELD_MAX_NS 100000LL

static inline void streams_producer_enter(void) {
    atomic_fetch_add_explicit(&streams_host_producers, 1, memory_order_relaxed);
}

static inline void streams_producer_leave(void) {
#ifndef Py_GIL_DISABLED
    long long deadline;
    int others = atomic_fetch_sub_explicit(&streams_host_producers, 1,
                                           memory_order_relaxed) - 1;
    if (others <= 0
            || atomic_load_explicit(&streams_callbacks_awaiting_gil, memory_order_relaxed) == 0
            || !atomic_load_explicit(&streams_producers_yield, memory_order_relaxed))
        return;
    deadline = streams_now_ns() + STREAMS_YIELD_MAX_NS;
    while (atomic_load_explicit(&streams_callbacks_awaiting_gil, memory_order_relaxed) != 0
           && streams_now_ns() < deadline)
        sched_yield();
#else
    atomic_fetch_sub_explicit(&streams_host_producers, 1, memory_order_relaxed);
#endif
}

static void streams_run_payload(void *payload, int status, int consume) {
    PyGILState_STATE gil;
    atomic_fetch_add(&streams_trampolines_active, 1);
    /* After our atexit hook, or once finalization began, taking the GIL may
     * block forever or end this CUDA-owned thread: leak the payload. */
    if (!streams_interpreter_alive() || streams_dispatch == NULL) {
        if (consume)
            streams_count(STREAMS_CNT_PAYLOAD_LEAKED);
        atomic_fetch_sub(&streams_trampolines_active, 1);
        return;
    }
    atomic_fetch_add(&streams_callbacks_awaiting_gil, 1);
    gil = PyGILState_Ensure();
    atomic_fetch_sub(&streams_callbacks_awaiting_gil, 1);
    if (!streams_tls_tstate_pinned) {
        PyThreadState_Get()->gilstate_counter++;
        streams_tls_tstate_pinned = 1;
    }
    streams_tls_in_callback = 1;
    streams_dispatch((PyObject *)payload, status);
    /* Still flagged: dropping the payload may free the last reference to a
     * handle owner, whose deallocator must then defer its CUDA release. */
    if (consume)
        streams_payload_decref((PyObject *)payload);
    streams_tls_in_callback = 0;
    PyGILState_Release(gil);
    atomic_fetch_sub(&streams_trampolines_active, 1);
}

/* For the tests (streams._hostcall._call_on_a_native_thread): what CUDA's
 * callback thread does with a graph's payload, without CUDA: a thread
 * Python does not know runs `payload` (not consumed) `count` times, and
 * exits.  Its thread state stays, as a callback thread's does. */
typedef struct {
    void *payload;
    int count;
} streams_native_thread_job;

static void *streams_native_thread_main(void *arg) {
    streams_native_thread_job *job = (streams_native_thread_job *)arg;
    int i;
    for (i = 0; i < job->count; i++)
        streams_run_payload(job->payload, 0, 0);
    return NULL;
}

static int streams_call_on_native_thread(void *payload, int count) {
    pthread_t thread;
    streams_native_thread_job job;
    job.payload = payload;
    job.count = count;
    if (pthread_create(&thread, NULL, streams_native_thread_main, &job) != 0)
        return -1;
    pthread_join(thread, NULL);
    return 0;
}

#endif /* STREAMS_CUDART_HOSTFN_H */
