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
typedef struct streams_native_call {
    streams_host_fn_t fn;
    void *data;
    PyObject *keep;
    struct streams_native_call *next;   /* on the stack of finished calls */
} streams_native_call;

/* ---- Finished native calls ------------------------------------------------
 * A record whose function ran goes onto a lock-free stack, and its `keep`
 * is dropped by the next Python thread that drains it (any drain of the
 * deferred queue, or a thread leaving a wait).  Not the deferred queue
 * itself: CUDA's thread would take its mutex and schedule a pending call
 * (the interpreter's lock, and a drain run between the caller's next
 * bytecodes) for every call, all of it between the function's return and
 * the stream going on, and between the caller's synchronize and its next
 * enqueue, where an idle CUDA host-function thread falls asleep within
 * microseconds (benchmarks/native_wait.c).
 *
 * Who drops a finished call's `keep`: while a thread is inside a wait
 * (streams_waiter_enter/leave: Stream/Event.synchronize), that thread, as
 * it leaves; else a pending call, scheduled by the push that found the
 * stack empty.  The push and the waiter count are sequentially consistent:
 * a trampoline that saw a waiter pushed before that waiter left, so the
 * waiter's drain, after its leave, finds the record. */
static _Atomic(streams_native_call *) streams_native_finished = NULL;
static atomic_int streams_native_waiters = 0;

/* Any thread, no GIL: the call ran; its `keep` goes to a Python thread. */
static void streams_native_call_finished(streams_native_call *call) {
    streams_native_call *head;
    if (call->keep == NULL || !streams_interpreter_alive()) {
        if (call->keep != NULL)
            streams_count(STREAMS_CNT_PAYLOAD_LEAKED);  /* ending: never touch Python */
        free(call);
        return;
    }
    head = atomic_load(&streams_native_finished);
    do {
        call->next = head;
    } while (!atomic_compare_exchange_weak(&streams_native_finished, &head, call));
    if (head == NULL && atomic_load(&streams_native_waiters) == 0)
        Py_AddPendingCall(streams_drain_pending_call, NULL);
}

/* With the GIL held, outside callbacks: drop the keeps of every finished
 * call.  Returns how many. */
static Py_ssize_t streams_drain_native_finished(void) {
    streams_native_call *call, *next;
    Py_ssize_t n = 0;
    if (atomic_load_explicit(&streams_native_finished, memory_order_relaxed) == NULL)
        return 0;
    if (streams_guard_state() != 0)
        return 0;  /* a callback thread: the next safe caller drains */
    call = atomic_exchange(&streams_native_finished, NULL);
    for (; call != NULL; call = next) {
        next = call->next;
        streams_payload_decref(call->keep);
        free(call);
        streams_count(STREAMS_CNT_DEFERRED_RELEASES);
        n++;
    }
    return n;
}

/* A thread begins waiting for a stream or an event (any thread, GIL or
 * not); leaving, with the GIL held, it drops what finished meanwhile. */
static void streams_waiter_enter(void) {
    atomic_fetch_add(&streams_native_waiters, 1);
}

static void streams_waiter_leave(void) {
    atomic_fetch_sub(&streams_native_waiters, 1);
    streams_drain_native_finished();
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
    streams_count(STREAMS_CNT_NATIVE_CALL_DONE);
    streams_native_call_finished(call);
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
    call->next = NULL;
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
