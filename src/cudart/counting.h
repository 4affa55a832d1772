/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the handle and reference counters of debug_counters(). */
#ifndef STREAMS_CUDART_COUNTING_H
#define STREAMS_CUDART_COUNTING_H

/* ---- Counters -----------------------------------------------------------
 * The list is in src/counters.h (every module names them).  Atomic:
 * releases happen on whichever thread is the last user of a handle, and
 * CUDA's threads count while Python threads do. */
#include "counters.h"
#ifdef STREAMS_DEBUG_REFCOUNTS
#define STREAMS_DEBUG_BUILD 1
#else
#define STREAMS_DEBUG_BUILD 0
#endif
static atomic_ullong streams_counters[STREAMS_CNT_N];

static inline void streams_count(int which) {
    if (which >= STREAMS_CNT_FIRST_DEBUG && !STREAMS_DEBUG_BUILD)
        return;
    atomic_fetch_add_explicit(&streams_counters[which], 1, memory_order_relaxed);
}
static inline unsigned long long streams_counter(int which) {
    return atomic_load(&streams_counters[which]);
}
static inline int streams_debug_build(void) { return STREAMS_DEBUG_BUILD; }

/* Debug builds: whether the calling thread holds the GIL, asked by the
 * guard of every CUDA call (streams/_cudart/machinery.pxi, guard): a call made so
 * breaks the GIL rule (streams/_stream.pyx), and the GPU suite's teardown
 * fails on it.  Release builds: 0, a constant the check compiles away to. */
static inline int streams_gil_held_here(void) {
#if STREAMS_DEBUG_BUILD
    return PyGILState_Check();
#else
    return 0;
#endif
}

/* The same check for the shim's own CUDA calls (marks, markers): a call
 * made holding the GIL is counted, and its site's name kept (the first 16)
 * for streams._cudart._cuda_calls_with_gil(). */
#define STREAMS_GIL_C_SITES 16
static const char *streams_gil_c_sites[STREAMS_GIL_C_SITES];
static atomic_int streams_gil_c_n;
static inline void streams_gil_rule(const char *site) {
#if STREAMS_DEBUG_BUILD
    int i;
    if (!PyGILState_Check())
        return;
    streams_count(STREAMS_CNT_CUDA_WITH_GIL);
    i = atomic_fetch_add(&streams_gil_c_n, 1);
    if (i < STREAMS_GIL_C_SITES)
        streams_gil_c_sites[i] = site;
#else
    (void)site;
#endif
}
static inline const char *streams_gil_c_site(int i) {
    return (i >= 0 && i < STREAMS_GIL_C_SITES && i < atomic_load(&streams_gil_c_n))
        ? streams_gil_c_sites[i] : NULL;
}

static inline void streams_payload_incref(PyObject *payload) {
    streams_count(STREAMS_CNT_PAYLOAD_INCREF);
    Py_INCREF(payload);
}
static inline void streams_payload_decref(PyObject *payload) {
    streams_count(STREAMS_CNT_PAYLOAD_DECREF);
    Py_DECREF(payload);
}

#endif /* STREAMS_CUDART_COUNTING_H */
