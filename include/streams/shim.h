/* Internal C shim of `streams._cudart`, the one module that links the CUDA
 * runtime: the parts that run on threads Python does not own, or before or
 * after the interpreter is usable, and so cannot be written in Cython.
 *
 *  - the guard: the per-thread "inside a host callback" flag (CUDA forbids
 *    CUDA calls there, and one can deadlock the callback thread on itself)
 *    and the fork flag (a child forked after CUDA was initialised must not
 *    touch the inherited, unusable CUDA state);
 *  - the shutdown flag (after Python's atexit ran, callbacks must not enter
 *    the interpreter any more: they leak their payload instead);
 *  - the host-function trampolines CUDA calls on its own thread;
 *  - the deferred releases: a handle whose last reference drops where CUDA
 *    cannot be called (a host callback) is released later, on a safe thread;
 *  - per-thread marker events (wait_stream, foreign streams' orderings);
 *  - one helper thread per device for interruptible device synchronization;
 *  - the handle and reference counters of debug_counters().
 *
 * Included by exactly one translation unit (streams/_cudart.pyx). */
#ifndef STREAMS_SHIM_H
#define STREAMS_SHIM_H

#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include "streams/streams.h"
#include "streams/clock.h"
#include "streams/notify.h"

#if defined(__GNUC__)
#define STREAMS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define STREAMS_UNLIKELY(x) (x)
#endif

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

/* ---- Counters -----------------------------------------------------------
 * The list is in streams/counters.h (every module names them).  Atomic:
 * releases happen on whichever thread is the last user of a handle, and
 * CUDA's threads count while Python threads do. */
#include "streams/counters.h"
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

static inline void streams_payload_incref(PyObject *payload) {
    streams_count(STREAMS_CNT_PAYLOAD_INCREF);
    Py_INCREF(payload);
}
static inline void streams_payload_decref(PyObject *payload) {
    streams_count(STREAMS_CNT_PAYLOAD_DECREF);
    Py_DECREF(payload);
}

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
 * then dropped: a leak, which is safe). */
static int streams_defer(streams_release_fn fn, void *arg, int kind, PyObject *keep) {
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
    if (streams_interpreter_alive())
        Py_AddPendingCall(streams_drain_pending_call, NULL);
    return 0;
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

/* ---- The capture fence and one-shot tickets ------------------------------
 * A one-shot work item (a callback enqueued on a stream that is not being
 * captured) is called once and frees what it carries.  Had a capture begun
 * on its stream between the enqueue's "is this stream capturing?" and
 * cudaLaunchHostFunc, CUDA would put it into the capture's graph instead,
 * to be called on every replay: the second replay would use a freed
 * payload.  And a capture ended (its graph perhaps destroyed) between the
 * same check and the attaching of a graph-owned payload to that graph would
 * hand CUDA a dead graph.  Two defences:
 *
 *  - The fence: the check, the attaching and the launch of an enqueue run
 *    inside a read hold of one process-wide lock; every capture begun or
 *    ended through streams (cudaStreamBeginCapture[ToGraph],
 *    cudaStreamEndCapture) runs inside a write hold.  So no capture that
 *    streams starts or ends, on any stream (an end also takes the streams
 *    that joined its capture out of it), can change a stream's state in
 *    the middle of an enqueue: what the check saw is what the launch gets.
 *    One-shot enqueues do not exclude one another; an enqueue into a
 *    capture takes the lock exclusively, because it attaches a user object
 *    to the capture's graph and CUDA graph objects are not internally
 *    synchronized (two threads attaching to one capture's graph at once
 *    crashed in the driver).  Nobody waits for the lock with
 *    the GIL held: a launch in a read hold may wait for its stream's queue
 *    to drain, which may need a Python callback, hence the GIL.  (A read
 *    hold takes the GIL only to raise an error; its holder then waits for
 *    no one that waits for the lock with the GIL.)
 *
 *  - Tickets, for what the fence cannot see (a capture begun by another
 *    library, or a stream that joins a capture by waiting on an event
 *    recorded in it, while another thread enqueues): a one-shot work item
 *    carries no pointer but a ticket, an index into a table of slots that
 *    is never freed, and the slot's generation.  The first call claims the
 *    ticket (a compare-and-swap of the slot's token) and takes the payload;
 *    any later call with the same ticket (a replay of a graph that captured
 *    the work item behind the enqueue's back) finds the token changed and
 *    does nothing.  Such a callback runs at its first replay only, never
 *    after its payload is gone; a capture of it that is never replayed
 *    keeps its slot and payload for the life of the process.
 *    (Generations are 32 bits: a stale ticket could match again only after
 *    2^32 reuses of its slot, and would then run another pending payload
 *    early, still never a freed one.) */
/* Writers first: glibc's default rwlock prefers readers, and a stream that
 * threads keep enqueuing host functions on then never lets a capture begin
 * or end (benchmarks/capture_race.c, the fenced variants: the capturing
 * thread waited for ever).  Nothing takes a read hold while holding one,
 * which a writer-preferring lock would deadlock. */
#ifdef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
static pthread_rwlock_t streams_capture_fence = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
#else
static pthread_rwlock_t streams_capture_fence = PTHREAD_RWLOCK_INITIALIZER;
#endif

static inline void streams_fence_enter(void) { pthread_rwlock_rdlock(&streams_capture_fence); }
static inline void streams_fence_leave(void) { pthread_rwlock_unlock(&streams_capture_fence); }
static inline void streams_fence_close(void) { pthread_rwlock_wrlock(&streams_capture_fence); }
static inline void streams_fence_open(void) { pthread_rwlock_unlock(&streams_capture_fence); }

#define STREAMS_TICKET_CHUNK 1024u
#define STREAMS_TICKET_CHUNKS 4096u     /* about 4 million one-shots pending at once */
#define STREAMS_TICKET_NONE 0xFFFFFFFFu
_Static_assert(sizeof(void *) >= 8, "a ticket travels as a host function's void *");

typedef struct {
    atomic_ullong token;    /* the ticket that may claim the slot now; 0: free */
    void *payload;
    unsigned int generation;
    unsigned int next_free;
} streams_ticket_slot;

static _Atomic(streams_ticket_slot *) streams_ticket_chunks[STREAMS_TICKET_CHUNKS];
static pthread_mutex_t streams_ticket_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int streams_ticket_free = STREAMS_TICKET_NONE;
static unsigned int streams_ticket_made = 0;   /* slots made so far */
static atomic_llong streams_tickets_pending = 0;
static atomic_ullong streams_tickets_stale = 0;

static inline streams_ticket_slot *streams_ticket_slot_at(unsigned int index) {
    streams_ticket_slot *chunk;
    if (index / STREAMS_TICKET_CHUNK >= STREAMS_TICKET_CHUNKS)
        return NULL;
    chunk = atomic_load_explicit(&streams_ticket_chunks[index / STREAMS_TICKET_CHUNK],
                                 memory_order_acquire);
    return chunk ? &chunk[index % STREAMS_TICKET_CHUNK] : NULL;
}

/* A ticket for `payload` (never 0), or 0 when out of memory or slots.
 * Any thread, GIL or not. */
static unsigned long long streams_ticket_new(void *payload) {
    streams_ticket_slot *slot = NULL;
    unsigned int index;
    unsigned long long token;
    pthread_mutex_lock(&streams_ticket_lock);
    if (streams_ticket_free != STREAMS_TICKET_NONE) {
        index = streams_ticket_free;
        slot = streams_ticket_slot_at(index);
        streams_ticket_free = slot->next_free;
    } else if (streams_ticket_made / STREAMS_TICKET_CHUNK < STREAMS_TICKET_CHUNKS) {
        index = streams_ticket_made;
        if (index % STREAMS_TICKET_CHUNK == 0) {
            streams_ticket_slot *chunk = (streams_ticket_slot *)calloc(
                STREAMS_TICKET_CHUNK, sizeof(streams_ticket_slot));
            if (chunk == NULL) {
                pthread_mutex_unlock(&streams_ticket_lock);
                return 0;
            }
            atomic_store_explicit(&streams_ticket_chunks[index / STREAMS_TICKET_CHUNK], chunk,
                                  memory_order_release);
        }
        streams_ticket_made++;
        slot = streams_ticket_slot_at(index);
    } else {
        pthread_mutex_unlock(&streams_ticket_lock);
        return 0;
    }
    if (++slot->generation == 0)
        slot->generation = 1;   /* a ticket is never 0 */
    token = ((unsigned long long)slot->generation << 32) | index;
    slot->payload = payload;
    atomic_store_explicit(&slot->token, token, memory_order_release);
    pthread_mutex_unlock(&streams_ticket_lock);
    atomic_fetch_add_explicit(&streams_tickets_pending, 1, memory_order_relaxed);
    return token;
}

/* The payload of `token`, whose slot is free again; NULL when the ticket
 * was claimed before (a replay of a one-shot captured behind our back) or
 * was never issued.  Any thread, GIL or not. */
static void *streams_ticket_take(unsigned long long token) {
    streams_ticket_slot *slot = streams_ticket_slot_at((unsigned int)(token & 0xFFFFFFFFu));
    unsigned long long expected = token;
    void *payload;
    if (slot == NULL || token == 0
        || !atomic_compare_exchange_strong(&slot->token, &expected, 0)) {
        atomic_fetch_add_explicit(&streams_tickets_stale, 1, memory_order_relaxed);
        return NULL;
    }
    payload = slot->payload;
    slot->payload = NULL;
    pthread_mutex_lock(&streams_ticket_lock);
    slot->next_free = streams_ticket_free;
    streams_ticket_free = (unsigned int)(token & 0xFFFFFFFFu);
    pthread_mutex_unlock(&streams_ticket_lock);
    atomic_fetch_sub_explicit(&streams_tickets_pending, 1, memory_order_relaxed);
    return payload;
}

static inline long long streams_tickets_pending_now(void) {
    return atomic_load(&streams_tickets_pending);
}
static inline unsigned long long streams_tickets_stale_calls(void) {
    return atomic_load(&streams_tickets_stale);
}

/* cudaHostFn_t: a one-shot payload, by ticket, consumed by the call. */
static void CUDART_CB streams_host_fn_trampoline(void *ticket) {
    void *payload = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    if (payload != NULL)
        streams_run_payload(payload, 0, 1);
}

/* cudaStreamCallback_t: a one-shot payload, by ticket, with CUDA's status.
 * (CUDA refuses to capture stream callbacks; the ticket costs nothing.) */
static void CUDART_CB streams_stream_callback_trampoline(cudaStream_t stream,
                                                         cudaError_t status, void *ticket) {
    void *payload = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    (void)stream;
    if (payload != NULL)
        streams_run_payload(payload, (int)status, 1);
}

/* cudaHostFn_t of the asyncio doorbell (streams/notify.h): a wait node, by
 * ticket, rung once. */
static void CUDART_CB streams_notify_ticket_fn(void *ticket) {
    void *node = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    if (node != NULL)
        streams_notify_host_fn(node);
}

/* cudaHostFn_t for graph nodes: the payload is owned by a CUDA user object
 * and may run on every replay, so the call does not consume it. */
static void CUDART_CB streams_graph_host_fn_trampoline(void *payload) {
    streams_run_payload(payload, 0, 0);
}

/* cudaHostFn_t destructor of a user object, called on a CUDA thread
 * possibly while a Python thread holds the GIL and waits on CUDA: taking
 * the GIL here could deadlock, so the reference is only queued. */
static void CUDART_CB streams_user_object_release(void *payload) {
    if (!streams_interpreter_alive()) {
        streams_count(STREAMS_CNT_PAYLOAD_LEAKED);
        return;  /* the process is ending: leak rather than touch Python */
    }
    streams_defer(NULL, NULL, 0, (PyObject *)payload);
}

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

/* ---- Per-thread marker events -------------------------------------------
 * "Make stream A wait for what stream B has so far" records an event on B
 * and waits on it from A.  One event a thread and device serves every such
 * wait: cudaStreamWaitEvent takes the event's state at call time, so its
 * next record cannot disturb an earlier wait; and being per thread, two
 * threads cannot record each other's per-thread default stream into it. */
static pthread_key_t streams_marker_key;
static pthread_once_t streams_marker_once = PTHREAD_ONCE_INIT;

static void streams_free_markers(void *p) {
    cudaEvent_t *markers = (cudaEvent_t *)p;
    int i;
    if (markers == NULL)
        return;
    if (streams_guard_state() == 0 && !streams_is_shutting_down()) {
        for (i = 0; i < STREAMS_MAX_DEVICES; i++)
            if (markers[i])
                cudaEventDestroy(markers[i]);
    }
    free(markers);
}

static void streams_marker_key_init(void) {
    pthread_key_create(&streams_marker_key, streams_free_markers);
}

/* The calling thread's marker event on device `dev` (made on first use). */
static cudaError_t streams_thread_marker(int dev, cudaEvent_t *out) {
    cudaEvent_t *markers;
    cudaError_t err = cudaSuccess;
    int cur = -1;
    if (dev < 0 || dev >= STREAMS_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_once(&streams_marker_once, streams_marker_key_init);
    markers = (cudaEvent_t *)pthread_getspecific(streams_marker_key);
    if (markers == NULL) {
        markers = (cudaEvent_t *)calloc(STREAMS_MAX_DEVICES, sizeof(cudaEvent_t));
        if (markers == NULL)
            return cudaErrorMemoryAllocation;
        pthread_setspecific(streams_marker_key, markers);
    }
    if (markers[dev] == NULL) {
        err = cudaGetDevice(&cur);
        if (err == cudaSuccess && cur != dev)
            err = cudaSetDevice(dev);
        if (err == cudaSuccess)
            err = cudaEventCreateWithFlags(&markers[dev], cudaEventDisableTiming);
        if (err == cudaSuccess)
            streams_count(STREAMS_CNT_MARKER_CREATED);
        if (cur >= 0 && cur != dev)
            cudaSetDevice(cur);
        if (err != cudaSuccess) {
            markers[dev] = NULL;
            return err;
        }
    }
    *out = markers[dev];
    return cudaSuccess;
}

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
        cudaEventDestroy(ev);
    pthread_mutex_unlock(&m->lock);
    return err;
}

/* 1 when every marked launch has ended (an event that reports an error
 * other than not-ready belongs to a context that runs nothing more). */
static int streams_marks_done(streams_marks_t *m) {
    size_t i;
    int done = 1;
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
    for (i = 0; i < m->count; i++)
        cudaEventDestroy(m->ring[(m->head + i) % m->cap]);
    free(m->ring);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* What gone executables still hold, until their marks say the replays
 * ended; and memory pools whose destroy waits for the frees of their
 * memory still queued (`release`, run once the marks are done).  Parked
 * and polled with the GIL held (attached, on a free-threaded CPython, where
 * several threads do it at once: the list is under streams_parked_lock,
 * held to change the list and to ask the marks, which never waits for the
 * GPU; what is let go is let go outside it).  Never taken on the status or
 * enqueue paths. */
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
 * The drops run after the list is consistent again: a drop may run a
 * finalizer that parks or polls. */
static Py_ssize_t streams_poll_parked(void) {
    streams_parked_t *done_items;
    size_t i, kept = 0, n_done = 0, total;
    if (streams_parked_count() == 0 || streams_guard_state() != 0
            || streams_is_shutting_down())
        return 0;
    pthread_mutex_lock(&streams_parked_lock);
    total = streams_parked_len;
    done_items = total ? (streams_parked_t *)malloc(total * sizeof(*done_items)) : NULL;
    if (!done_items) {
        pthread_mutex_unlock(&streams_parked_lock);
        return 0;
    }
    /* cudaEventQuery never waits for the GPU: the lock is held briefly. */
    for (i = 0; i < total; i++) {
        if (streams_marks_done(streams_parked[i].marks))
            done_items[n_done++] = streams_parked[i];
        else
            streams_parked[kept++] = streams_parked[i];
    }
    streams_parked_len = kept;
    atomic_store_explicit(&streams_parked_now, kept, memory_order_relaxed);
    pthread_mutex_unlock(&streams_parked_lock);
    for (i = 0; i < n_done; i++) {
        streams_marks_free(done_items[i].marks);
        if (done_items[i].release)
            streams_release_without_gil(done_items[i].release, done_items[i].arg,
                                        done_items[i].kind);
        Py_XDECREF(done_items[i].keep[0]);
        Py_XDECREF(done_items[i].keep[1]);
    }
    free(done_items);
    return (Py_ssize_t)n_done;
}

/* ---- Device synchronization on a helper thread ---------------------------
 * cudaDeviceSynchronize cannot be interrupted, so one helper thread per
 * device makes the call and waiting threads poll its progress with the GIL
 * released, checking for Ctrl-C between slices.  Requests are numbered: a
 * waiter is done once a synchronize that *started* after its request has
 * finished, so calls that arrive while one runs share the next one, and a
 * waiter that gives up (timeout, Ctrl-C) leaves no thread behind. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int running;                 /* the helper thread exists */
    unsigned long long requested, started, finished;
    long long started_at_ns;     /* when the synchronize in flight began */
    cudaError_t last_error;      /* of the synchronize that finished last */
} streams_devsync_t;

static streams_devsync_t streams_devsync[STREAMS_MAX_DEVICES];
static pthread_once_t streams_devsync_once = PTHREAD_ONCE_INIT;

static void streams_devsync_init(void) {
    int i;
    for (i = 0; i < STREAMS_MAX_DEVICES; i++) {
        pthread_mutex_init(&streams_devsync[i].lock, NULL);
        pthread_cond_init(&streams_devsync[i].wake, NULL);
        pthread_cond_init(&streams_devsync[i].done, NULL);
    }
}

static void *streams_devsync_main(void *arg) {
    int dev = (int)(intptr_t)arg;
    streams_devsync_t *d = &streams_devsync[dev];
    cudaError_t err;
    unsigned long long ticket;
    err = cudaSetDevice(dev);
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (d->started == d->requested)
            pthread_cond_wait(&d->wake, &d->lock);
        ticket = d->requested;
        d->started = ticket;
        d->started_at_ns = streams_now_ns();
        pthread_mutex_unlock(&d->lock);
        if (err == cudaSuccess || err == cudaErrorInvalidDevice)
            err = cudaSetDevice(dev);
        if (err == cudaSuccess)
            err = cudaDeviceSynchronize();
        /* CUDA's per-thread last error of this helper thread is never read. */
        cudaGetLastError();
        pthread_mutex_lock(&d->lock);
        d->finished = ticket;
        d->last_error = err;
        err = cudaSuccess;
        pthread_cond_broadcast(&d->done);
    }
    return NULL;
}

/* Ask for a synchronize of `dev`; returns the ticket to wait for, or 0
 * (with *err set) when the helper thread cannot be started. */
static unsigned long long streams_devsync_request(int dev, cudaError_t *err) {
    streams_devsync_t *d;
    pthread_t thread;
    pthread_attr_t attr;
    unsigned long long ticket;
    *err = cudaSuccess;
    if (dev < 0 || dev >= STREAMS_MAX_DEVICES) {
        *err = cudaErrorInvalidDevice;
        return 0;
    }
    pthread_once(&streams_devsync_once, streams_devsync_init);
    d = &streams_devsync[dev];
    pthread_mutex_lock(&d->lock);
    if (!d->running) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, streams_devsync_main, (void *)(intptr_t)dev) != 0) {
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&d->lock);
            *err = cudaErrorMemoryAllocation;
            return 0;
        }
        pthread_attr_destroy(&attr);
        d->running = 1;
    }
    ticket = ++d->requested;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    return ticket;
}

/* Wait up to `slice_ns` for `ticket`.  1: done (*err: that synchronize's
 * result); 0: not yet.  *in_flight_ns: how long the synchronize that will
 * answer this ticket has been running (0 while it has not started). */
static int streams_devsync_wait(int dev, unsigned long long ticket, long long slice_ns,
                                cudaError_t *err, long long *in_flight_ns) {
    streams_devsync_t *d = &streams_devsync[dev];
    struct timespec until;
    long long deadline_ns;
    int done;
    clock_gettime(CLOCK_REALTIME, &until);
    deadline_ns = (long long)until.tv_sec * 1000000000LL + until.tv_nsec + slice_ns;
    until.tv_sec = deadline_ns / 1000000000LL;
    until.tv_nsec = deadline_ns % 1000000000LL;
    pthread_mutex_lock(&d->lock);
    while (d->finished < ticket) {
        if (pthread_cond_timedwait(&d->done, &d->lock, &until) != 0)
            break;
    }
    done = d->finished >= ticket;
    *err = done ? d->last_error : cudaSuccess;
    *in_flight_ns = (!done && d->started >= ticket) ? streams_now_ns() - d->started_at_ns : 0;
    pthread_mutex_unlock(&d->lock);
    return done;
}

/* ---- fork ------------------------------------------------------------------
 * The child gets one thread: locks another thread held at the fork are
 * re-made, the helper threads and callbacks in flight do not exist there. */
static void streams_atfork_prepare(void) {
    pthread_mutex_lock(&streams_deferred_lock);
}

static void streams_atfork_parent(void) {
    pthread_mutex_unlock(&streams_deferred_lock);
}

static void streams_atfork_child(void) {
    int i;
    pthread_mutex_init(&streams_deferred_lock, NULL);
    /* Another thread may have held it at the fork; the child never polls
     * the parent's parked items (CUDA is unusable there) but may park. */
    pthread_mutex_init(&streams_parked_lock, NULL);
    /* The queued releases name the parent's handles: never run them. */
    streams_deferred = NULL;
    streams_deferred_len = streams_deferred_cap = 0;
    atomic_store(&streams_deferred_pending, 0);
    atomic_store(&streams_trampolines_active, 0);
    for (i = 0; i < STREAMS_MAX_DEVICES; i++) {
        pthread_mutex_init(&streams_devsync[i].lock, NULL);
        pthread_cond_init(&streams_devsync[i].wake, NULL);
        pthread_cond_init(&streams_devsync[i].done, NULL);
        streams_devsync[i].running = 0;
        streams_devsync[i].requested = streams_devsync[i].started = 0;
        streams_devsync[i].finished = 0;
    }
    streams_forked_child = streams_cuda_touched;
}

static int streams_install_fork_handler(void) {
    pthread_once(&streams_devsync_once, streams_devsync_init);
    return pthread_atfork(streams_atfork_prepare, streams_atfork_parent, streams_atfork_child);
}

#endif /* STREAMS_SHIM_H */
