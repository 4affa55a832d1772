/* Internal C shim of the `streams` extension: the parts that must not be
 * written in Cython because they run on threads Python does not own, or
 * before/after the interpreter is usable.
 *
 *  - the host-function trampoline that CUDA calls on its own callback thread;
 *  - the per-thread "inside a host callback" flag (CUDA forbids CUDA calls
 *    there, and making one can deadlock the callback thread on itself);
 *  - the fork flag (a child forked after CUDA was initialised must not touch
 *    the inherited, unusable CUDA state);
 *  - the shutdown flag (after Python's atexit ran, callbacks must not touch
 *    the interpreter any more: they leak their payload instead).
 *
 * Included by exactly one translation unit (streams/_core.pyx). */
#ifndef STREAMS_SHIM_H
#define STREAMS_SHIM_H

#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <sched.h>
#include <cuda_runtime_api.h>
#include "streams/streams.h"

#if defined(__GNUC__)
#define STREAMS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define STREAMS_UNLIKELY(x) (x)
#endif

/* Set by the shim while a Python host callback runs on this thread. */
static _Thread_local int streams_tls_in_callback = 0;
/* 1 once any CUDA call went through check(); read by the fork handler. */
static int streams_cuda_touched = 0;
/* 1 in a child forked after the parent had touched CUDA. */
static int streams_forked_child = 0;
/* 1 once Python's atexit hooks ran: callbacks stop entering Python. */
static atomic_int streams_shutting_down = 0;

/* 0: the caller may call CUDA; 1: inside a host callback; 2: forked child. */
static inline int streams_guard_state(void) {
    if (STREAMS_UNLIKELY(streams_tls_in_callback)) return 1;
    if (STREAMS_UNLIKELY(streams_forked_child)) return 2;
    return 0;
}

static void streams_atfork_child(void) {
    streams_forked_child = streams_cuda_touched;
}

static int streams_install_fork_handler(void) {
    return pthread_atfork(NULL, NULL, streams_atfork_child);
}

static inline void streams_mark_shutting_down(void) {
    atomic_store(&streams_shutting_down, 1);
}

static inline int streams_is_shutting_down(void) {
    return atomic_load_explicit(&streams_shutting_down, memory_order_relaxed);
}

/* Monotonic clock in nanoseconds, for the interruptible waits. */
static inline long long streams_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void streams_cpu_yield(void) { sched_yield(); }

/* About a quarter microsecond of spinning without a system call, so that a
 * short wait polls often without hammering the driver's locks. */
static inline void streams_cpu_relax(void) {
    int i;
    for (i = 0; i < 64; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

static inline void streams_sleep_ns(long long ns) {
    struct timespec ts;
    ts.tv_sec = ns / 1000000000LL;
    ts.tv_nsec = ns % 1000000000LL;
    nanosleep(&ts, NULL);
}

/* ---- Host callbacks ---------------------------------------------------
 * The payload is a PyObject owned by the enqueueing side: one strong
 * reference travels with the CUDA work item.  The Python-level work (call,
 * report, deliver the error) is done by a dispatcher that the Cython module
 * registers, run with the GIL held and the in-callback flag set. */
typedef void (*streams_dispatch_fn)(PyObject *payload, int status);
static streams_dispatch_fn streams_dispatch = NULL;

static inline int streams_py_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Trampolines that passed the shutdown check and may be waiting for, or
 * holding, the GIL.  The atexit hook waits for this to drain so that no
 * CUDA thread is left blocked on the GIL while the interpreter finalizes. */
static atomic_int streams_trampolines_active = 0;

static int streams_wait_trampolines_idle(long long timeout_ns) {
    long long deadline = streams_now_ns() + timeout_ns;
    while (atomic_load(&streams_trampolines_active) > 0) {
        if (streams_now_ns() > deadline) return -1;
        sched_yield();
    }
    return 0;
}

/* ---- Debug build: STREAMS_DEBUG_REFCOUNTS=1 when building ---------------
 * Counts every reference the C paths take or drop on a callback payload or
 * a DLPack export, and every owned allocation and module made or given
 * back, so that tests can prove each INCREF has its DECREF (a leaked
 * payload is otherwise invisible when something else keeps it alive).  In
 * a normal build the counting compiles away.  Atomic: CUDA's threads may
 * count while Python threads do. */
enum {
    STREAMS_DBG_PAYLOAD_INCREF, STREAMS_DBG_PAYLOAD_DECREF,
    STREAMS_DBG_DLPACK_INCREF, STREAMS_DBG_DLPACK_DECREF,
    STREAMS_DBG_MEMORY_ALLOC, STREAMS_DBG_MEMORY_FREE,
    STREAMS_DBG_MODULE_LOAD, STREAMS_DBG_MODULE_UNLOAD,
    STREAMS_DBG_PAYLOAD_LEAKED,  /* dropped on purpose at shutdown or on ENOMEM */
    STREAMS_DBG_NCOUNTERS
};
#ifdef STREAMS_DEBUG_REFCOUNTS
#define STREAMS_DEBUG_BUILD 1
static atomic_ullong streams_dbg_counters[STREAMS_DBG_NCOUNTERS];
static inline void streams_dbg_count(int which) {
    atomic_fetch_add_explicit(&streams_dbg_counters[which], 1, memory_order_relaxed);
}
static inline unsigned long long streams_dbg_value(int which) {
    return atomic_load(&streams_dbg_counters[which]);
}
#else
#define STREAMS_DEBUG_BUILD 0
static inline void streams_dbg_count(int which) { (void)which; }
static inline unsigned long long streams_dbg_value(int which) { (void)which; return 0; }
#endif
static inline int streams_debug_build(void) { return STREAMS_DEBUG_BUILD; }

static inline void streams_payload_incref(PyObject *payload) {
    streams_dbg_count(STREAMS_DBG_PAYLOAD_INCREF);
    Py_INCREF(payload);
}
static inline void streams_payload_decref(PyObject *payload) {
    streams_dbg_count(STREAMS_DBG_PAYLOAD_DECREF);
    Py_DECREF(payload);
}

/* CUDA runs host functions on a thread Python does not know.  Creating and
 * deleting a Python thread state for every callback costs microseconds, so
 * the first callback on such a thread keeps its thread state alive (the
 * same extra gilstate count pybind11 takes); it lives until the process
 * ends. */
static _Thread_local int streams_tls_tstate_pinned = 0;

static void streams_run_payload(void *payload, int status, int consume) {
    PyGILState_STATE gil;
    atomic_fetch_add(&streams_trampolines_active, 1);
    /* After our atexit hook, or once finalization began, taking the GIL may
     * block forever or end this CUDA-owned thread: leak the payload. */
    if (atomic_load(&streams_shutting_down) || streams_py_finalizing() ||
            streams_dispatch == NULL) {
        if (consume)
            streams_dbg_count(STREAMS_DBG_PAYLOAD_LEAKED);
        atomic_fetch_sub(&streams_trampolines_active, 1);
        return;
    }
    gil = PyGILState_Ensure();
    if (!streams_tls_tstate_pinned) {
        PyThreadState_Get()->gilstate_counter++;
        streams_tls_tstate_pinned = 1;
    }
    streams_tls_in_callback = 1;
    streams_dispatch((PyObject *)payload, status);
    /* Still flagged: dropping the payload may free the last reference to a
     * Stream, whose deallocator must then defer cudaStreamDestroy. */
    if (consume)
        streams_payload_decref((PyObject *)payload);
    streams_tls_in_callback = 0;
    PyGILState_Release(gil);
    atomic_fetch_sub(&streams_trampolines_active, 1);
}

/* cudaHostFn_t: one-shot payload, consumed by the call. */
static void CUDART_CB streams_host_fn_trampoline(void *payload) {
    streams_run_payload(payload, 0, 1);
}

/* cudaStreamCallback_t: one-shot payload with CUDA's status. */
static void CUDART_CB streams_stream_callback_trampoline(cudaStream_t stream,
                                                         cudaError_t status, void *payload) {
    (void)stream;
    streams_run_payload(payload, (int)status, 1);
}

/* cudaHostFn_t for graph nodes: the payload is owned by a CUDA user object
 * and may run on every replay, so the call does not consume it. */
static void CUDART_CB streams_graph_host_fn_trampoline(void *payload) {
    streams_run_payload(payload, 0, 0);
}

/* ---- Payloads owned by CUDA user objects (graph host nodes) -------------
 * CUDA destroys a user object on one of its own threads, possibly while a
 * Python thread holds the GIL and waits on CUDA: taking the GIL there could
 * deadlock.  So the destructor only queues the payload; the references are
 * dropped later with the GIL held, by a pending call or by the next
 * streams API call that drains the queue. */
static pthread_mutex_t streams_deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static PyObject **streams_deferred = NULL;
static size_t streams_deferred_len = 0, streams_deferred_cap = 0;
static atomic_int streams_deferred_pending = 0;

/* With the GIL held: drop every queued reference.  Returns how many. */
static Py_ssize_t streams_drain_deferred(void) {
    PyObject **items;
    size_t n, i;
    if (!atomic_load_explicit(&streams_deferred_pending, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&streams_deferred_lock);
    items = streams_deferred;
    n = streams_deferred_len;
    streams_deferred = NULL;
    streams_deferred_len = streams_deferred_cap = 0;
    atomic_store(&streams_deferred_pending, 0);
    pthread_mutex_unlock(&streams_deferred_lock);
    for (i = 0; i < n; i++)
        streams_payload_decref(items[i]);
    free(items);
    return (Py_ssize_t)n;
}

static int streams_drain_deferred_pending_call(void *unused) {
    (void)unused;
    streams_drain_deferred();
    return 0;
}

/* cudaHostFn_t destructor of a user object: no GIL, no Python calls. */
static void CUDART_CB streams_user_object_release(void *payload) {
    int queued = 0;
    if (atomic_load(&streams_shutting_down)) {
        streams_dbg_count(STREAMS_DBG_PAYLOAD_LEAKED);
        return;  /* the process is ending: leak rather than touch Python */
    }
    pthread_mutex_lock(&streams_deferred_lock);
    if (streams_deferred_len == streams_deferred_cap) {
        size_t cap = streams_deferred_cap ? 2 * streams_deferred_cap : 64;
        PyObject **grown = (PyObject **)realloc(streams_deferred, cap * sizeof(PyObject *));
        if (grown) {
            streams_deferred = grown;
            streams_deferred_cap = cap;
        }
    }
    if (streams_deferred_len < streams_deferred_cap) {
        streams_deferred[streams_deferred_len++] = (PyObject *)payload;
        queued = 1;
    }
    atomic_store(&streams_deferred_pending, 1);
    pthread_mutex_unlock(&streams_deferred_lock);
    if (!queued)  /* out of memory: the payload leaks, which is safe */
        streams_dbg_count(STREAMS_DBG_PAYLOAD_LEAKED);
    /* Safe without the GIL; if the queue of pending calls is full, the
     * next drain from a streams API call picks the payload up. */
    Py_AddPendingCall(streams_drain_deferred_pending_call, NULL);
}

#endif /* STREAMS_SHIM_H */
