# Private hooks for tests, part of streams._asyncio (_asyncio.pyx includes it
# last): the doorbell checked without a GPU, and what it still tracks.

@cython.final
cdef class _DoorbellProbe:
    """A wait whose host function the test calls (``ring``, from any thread)
    instead of CUDA: the doorbell, its ordering and its cleanup, checked
    without a GPU."""
    cdef streams_wait_node* _node

    def ring(self):
        cdef streams_wait_node* node = self._node
        if node == NULL:
            raise RuntimeError("already rung")
        self._node = NULL
        with nogil:
            streams_notify_host_fn(<void*>node)


def _probe_wait():
    """(awaitable, probe) in the running loop: the awaitable completes once
    ``probe.ring()`` ran, as if CUDA had run the host function.  Private."""
    cdef _DoorbellProbe probe = _DoorbellProbe.__new__(_DoorbellProbe)
    cdef _Doorbell bell
    cdef unsigned long long token
    import asyncio
    loop = asyncio.get_running_loop()
    found = _doorbell(loop)
    if found is None:
        raise NotImplementedError("this loop has no doorbell (it polls)")
    bell = <_Doorbell>found
    token = bell._register(loop)
    probe._node = streams_wait_node_new(bell._n, token)
    if probe._node == NULL:
        bell._waiting.pop(token, None)
        raise MemoryError()
    return _resolved(bell, token), probe


def _async_waits():
    """Waits the doorbells of live loops still track: futures not resolved,
    and host functions queued or run but not yet read by their loop.  Both
    are 0 once every awaited piece of work has finished and each loop has
    run its reader (tests use it to see that cancellation leaves nothing).
    Loops closed meanwhile are forgotten first."""
    waiting = in_flight = 0
    # Under the lock: a sweep in another thread (a new loop's first await)
    # would otherwise free a notifier this reads.
    with _bells_lock:
        _sweep()
        for _, bell in list(_bells.values()):
            if bell is not False:
                waiting += len((<_Doorbell>bell)._waiting)
                if (<_Doorbell>bell)._n != NULL:
                    in_flight += streams_notifier_live_nodes((<_Doorbell>bell)._n)
    return {"waiting": waiting, "in_flight": in_flight}


def _doorbell_entries():
    """How many loops the doorbell table holds, after a sweep (closed or
    dead loops dropped)."""
    with _bells_lock:
        _sweep()
        return len(_bells)
