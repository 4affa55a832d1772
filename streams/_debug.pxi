# Debug counters: handles created/destroyed and callback payload references,
# so tests can assert that nothing leaks (checked in tests' teardown).

cdef unsigned long long _streams_created = 0
cdef unsigned long long _streams_destroyed = 0
cdef unsigned long long _events_created = 0
cdef unsigned long long _events_destroyed = 0


cdef inline void _debug_stream_created() noexcept:
    global _streams_created
    _streams_created += 1


cdef inline void _debug_stream_destroyed() noexcept:
    global _streams_destroyed
    _streams_destroyed += 1


cdef inline void _debug_event_created() noexcept:
    global _events_created
    _events_created += 1


cdef inline void _debug_event_destroyed() noexcept:
    global _events_destroyed
    _events_destroyed += 1


cdef long long _graphs_live = 0
cdef long long _graph_execs_live = 0


cdef inline void _debug_graph_created() noexcept:
    global _graphs_live
    _graphs_live += 1


cdef inline void _debug_graph_destroyed() noexcept:
    global _graphs_live
    _graphs_live -= 1


cdef inline void _debug_graph_exec_created() noexcept:
    global _graph_execs_live
    _graph_execs_live += 1


cdef inline void _debug_graph_exec_destroyed() noexcept:
    global _graph_execs_live
    _graph_execs_live -= 1


def debug_build():
    """Whether this extension was built with ``STREAMS_DEBUG_REFCOUNTS=1``,
    which adds the reference and allocation counts to :func:`debug_counters`."""
    return bool(streams_debug_build())


cdef dict _debug_refcounts():
    cdef unsigned long long pin = streams_dbg_value(STREAMS_DBG_PAYLOAD_INCREF)
    cdef unsigned long long pde = streams_dbg_value(STREAMS_DBG_PAYLOAD_DECREF)
    cdef unsigned long long din = streams_dbg_value(STREAMS_DBG_DLPACK_INCREF)
    cdef unsigned long long dde = streams_dbg_value(STREAMS_DBG_DLPACK_DECREF)
    cdef unsigned long long mal = streams_dbg_value(STREAMS_DBG_MEMORY_ALLOC)
    cdef unsigned long long mfr = streams_dbg_value(STREAMS_DBG_MEMORY_FREE)
    cdef unsigned long long mld = streams_dbg_value(STREAMS_DBG_MODULE_LOAD)
    cdef unsigned long long mun = streams_dbg_value(STREAMS_DBG_MODULE_UNLOAD)
    return {
        "payload_increfs": pin,
        "payload_decrefs": pde,
        "live_payload_refs": <long long>(pin - pde),
        "payloads_leaked": streams_dbg_value(STREAMS_DBG_PAYLOAD_LEAKED),
        "dlpack_increfs": din,
        "dlpack_decrefs": dde,
        "live_dlpack_refs": <long long>(din - dde),
        "memory_allocs": mal,
        "memory_frees": mfr,
        "live_allocations": <long long>(mal - mfr),
        "module_loads": mld,
        "module_unloads": mun,
        "live_modules": <long long>(mld - mun),
    }


def debug_counters():
    """Counts of owned handles and callback payloads, for leak checks.

    ``live_streams``/``live_events`` are owned handles not yet destroyed;
    ``live_callbacks`` are one-shot payloads enqueued whose callback has
    not run yet; ``live_host_calls`` every callback payload still alive
    (graph-owned ones included).

    In a debug build (:func:`debug_build`) there are more: every reference
    the C code took (``*_increfs``) and dropped (``*_decrefs``) on callback
    payloads and DLPack exports, allocations and modules made and given
    back, and the ``live_*`` differences; ``payloads_leaked`` counts
    payloads let go on purpose (a callback arriving during interpreter
    shutdown).
    """
    counters = {
        "streams_created": _streams_created,
        "streams_destroyed": _streams_destroyed,
        "live_streams": _streams_created - _streams_destroyed,
        "events_created": _events_created,
        "events_destroyed": _events_destroyed,
        "live_events": _events_created - _events_destroyed,
        "callbacks_enqueued": _callbacks_enqueued,
        "callbacks_completed": _callbacks_completed,
        "callbacks_dropped": _callbacks_dropped,
        "live_callbacks": _callbacks_enqueued - _callbacks_completed - _callbacks_dropped,
        "live_host_calls": _host_calls_live,
        "graph_callback_runs": _graph_callback_runs,
        "live_graphs": _graphs_live,
        "live_graph_execs": _graph_execs_live,
        "debug_build": bool(streams_debug_build()),
    }
    if streams_debug_build():
        counters.update(_debug_refcounts())
    return counters


if streams_install_fork_handler() != 0:
    raise ImportError("streams: pthread_atfork failed")
