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

/* CUDA runs host functions on a thread Python does not know.  Creating and
 * deleting a Python thread state for every callback costs microseconds, so
 * the first callback on such a thread keeps its thread state alive (the
 * same extra gilstate count pybind11 takes); it lives until the process
 * ends.
 *
 * Not on a free-threaded CPython: there an object belongs to the thread
 * state that made it (biased reference counting), and another thread that
 * drops its last reference hands it back to that thread state, which frees
 * it the next time it runs Python.  A kept thread state of CUDA's thread
 * runs Python only at the next callback, so what a callback made and
 * someone else let go (an exception, the report given to
 * sys.unraisablehook, which names the callback's payload) would stay alive
 * until then: a leak for as long as no callback comes.  A thread state
 * deleted after each callback gives its objects back at once, and later
 * drops free them on the spot. */
static _Thread_local int streams_tls_tstate_pinned = 0;
#ifdef Py_GIL_DISABLED
#define STREAMS_PIN_CALLBACK_TSTATE 0
#else
#define STREAMS_PIN_CALLBACK_TSTATE 1
#endif

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
    gil = PyGILState_Ensure();
    if (STREAMS_PIN_CALLBACK_TSTATE && !streams_tls_tstate_pinned) {
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

#endif /* STREAMS_CUDART_HOSTFN_H */
