/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the guard (may this thread call CUDA?), the shutdown flag, and whether the interpreter is alive. */
#ifndef STREAMS_CUDART_GUARD_H
#define STREAMS_CUDART_GUARD_H

/* Set by the shim while a Python host callback runs on this thread. */
static _Thread_local int streams_tls_in_callback = 0;
/* 1 once any CUDA call went through the call layer; read by the fork handler. */
static int streams_cuda_touched = 0;
/* 1 in a child forked after the parent had touched CUDA. */
static int streams_forked_child = 0;
/* 1 once Python's atexit hooks ran: callbacks stop entering Python. */
static atomic_int streams_shutting_down = 0;
/* Stream-ordered frees made through the call layer.  A wait that found its
 * work done ends with the full synchronize, which lets the memory pool give
 * freed memory back, only when one happened since its last one. */
static atomic_ullong streams_async_frees = 0;
static inline void streams_note_async_free(void) {
    atomic_fetch_add_explicit(&streams_async_frees, 1, memory_order_relaxed);
}
static inline unsigned long long streams_async_frees_so_far(void) {
    return atomic_load_explicit(&streams_async_frees, memory_order_relaxed);
}

/* Trampolines that passed the shutdown check and may be waiting for, or
 * holding, the GIL.  The atexit hook waits for this to drain so that no
 * CUDA thread is left blocked on the GIL while the interpreter finalizes.
 * The guard reads it too (below). */
static atomic_int streams_trampolines_active = 0;

/* What the calling thread may do with CUDA: call it; nothing (a host
 * callback, where CUDA forbids calls); nothing ever again (a forked child).
 * A thread counts itself in streams_trampolines_active before it flags
 * itself as in a callback, so while the count is 0 no thread is flagged:
 * the guard of every CUDA call then skips the thread-local read, which in
 * a shared object is a call of __tls_get_addr. */
enum { STREAMS_GUARD_OK = 0, STREAMS_GUARD_IN_CALLBACK = 1, STREAMS_GUARD_FORKED = 2 };

static inline int streams_guard_state(void) {
    if (STREAMS_UNLIKELY(atomic_load_explicit(&streams_trampolines_active,
                                              memory_order_relaxed) != 0)
        && streams_tls_in_callback)
        return STREAMS_GUARD_IN_CALLBACK;
    if (STREAMS_UNLIKELY(streams_forked_child)) return STREAMS_GUARD_FORKED;
    return STREAMS_GUARD_OK;
}

static inline void streams_mark_shutting_down(void) {
    atomic_store(&streams_shutting_down, 1);
}

/* A module object that outlives one interpreter (an embedding application
 * that finalizes and initializes Python again) must not keep the previous
 * interpreter's shutdown flag: callbacks would never run again. */
static inline void streams_clear_shutting_down(void) {
    atomic_store(&streams_shutting_down, 0);
}

static inline int streams_is_shutting_down(void) {
    return atomic_load_explicit(&streams_shutting_down, memory_order_relaxed);
}

static inline int streams_py_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Whether Python objects and CUDA may be touched from here to release
 * something (destructors, deleters): not while the interpreter is being
 * torn down. */
static inline int streams_interpreter_alive(void) {
    return !streams_is_shutting_down() && !streams_py_finalizing();
}

#endif /* STREAMS_CUDART_GUARD_H */
