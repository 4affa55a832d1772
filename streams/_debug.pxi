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


def debug_counters():
    """Counts of owned handles and callback payloads, for leak checks.

    ``live_streams``/``live_events`` are owned handles not yet destroyed;
    ``live_callbacks`` are payloads enqueued whose callback has not run yet.
    """
    return {
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
    }


if streams_install_fork_handler() != 0:
    raise ImportError("streams: pthread_atfork failed")
