/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): native host functions and their one-shot records. */
#ifndef STREAMS_CUDART_NATIVE_H
#define STREAMS_CUDART_NATIVE_H

/* ---- Native host functions -----------------------------------------------
 * A C function of the user's (streams_host_fn_t) runs on CUDA's thread
 * without Python.  With nothing to keep alive it is enqueued as is.  With an
 * owner (the ctypes or cffi object that holds the code, or an object the
 * data points into) one reference travels in a small record: the trampoline
 * calls the function, then queues the reference on the deferred queue (it
 * never takes the GIL: a Python thread may hold it and wait for CUDA). */
typedef struct {
    streams_host_fn_t fn;
    void *data;
    PyObject *keep;
} streams_native_call;

/* Any thread, no GIL: hand `keep` to the next safe thread. */
static void streams_drop_later(PyObject *keep) {
    if (keep == NULL)
        return;
    if (!streams_interpreter_alive()) {
        streams_count(STREAMS_CNT_PAYLOAD_LEAKED);
        return;  /* the process is ending: leak rather than touch Python */
    }
    streams_defer(NULL, NULL, 0, keep);
}

/* cudaHostFn_t of a native call with something to keep: the record travels
 * as a one-shot ticket, like a Python one-shot's payload (the capture fence
 * and tickets, above).  A replay of a graph that captured it behind the
 * fence's back finds the ticket stale and calls nothing: the user's function
 * runs at the first replay only, never with a freed record. */
static void CUDART_CB streams_native_host_fn_trampoline(void *ticket) {
    streams_native_call *call =
        (streams_native_call *)streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    if (call == NULL)
        return;
    call->fn(call->data);
    streams_drop_later(call->keep);
    free(call);
    streams_count(STREAMS_CNT_NATIVE_CALL_DONE);
}

/* The record for one enqueue, taking over one reference to `keep` (the
 * caller took it for the record); NULL when out of memory. */
static streams_native_call *streams_native_call_new(streams_host_fn_t fn, void *data,
                                                    PyObject *keep) {
    streams_native_call *call = (streams_native_call *)malloc(sizeof(*call));
    if (call == NULL)
        return NULL;
    call->fn = fn;
    call->data = data;
    call->keep = keep;
    return call;
}

/* For tests and examples (streams.testing.native_increment): add 1 to the
 * unsigned 64-bit counter at `data`.  Memory writes only: no Python, no
 * CUDA, no lock. */
static void CUDART_CB streams_testing_native_increment(void *data) {
    if (data != NULL)
        atomic_fetch_add((_Atomic unsigned long long *)data, 1);
}

#endif /* STREAMS_CUDART_NATIVE_H */
