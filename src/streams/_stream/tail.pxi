# Where a closed stream's work ends: the tail event that the frees of its
# buffers wait for; part of streams._stream (_stream.pyx includes it).

# Buffers allocated on a stream count themselves in its _dependents until
# their free is enqueued.  A stream closed with some left records a tail
# event, which those frees wait for on the legacy stream.  The count moves
# from any thread (atomically); the tail is read and replaced under the
# stream's critical section (free-threaded CPython; the GIL elsewhere), and
# a reader keeps its own reference to the Event, so a replacement or the
# last free clearing it cannot destroy the event under the reader.


# Tests: a pause in Stream.close between marking the stream closed and
# publishing its tail (_pause_close_before_tail), to race frees against.
cdef long long _close_pause_ns = 0


cdef void note_dependent(Stream s) noexcept nogil:
    # Before an allocation is enqueued on s, the caller holding a use of s.
    streams_count_add(&s._dependents, 1)


cdef int settle_dependent(Stream s) except -1:
    # After the allocation was enqueued on s, the caller's use still held.
    if streams_closed_now(&s._state):
        # A close() in another thread set CLOSED before this look and may
        # have read the count before it moved: mark the tail after our
        # allocation, on the handle our use keeps alive.
        mark_tail(s)
    return 0


cdef int mark_tail(Stream s, Event ev=None) except -1:
    # Record where s's work ends now; the caller holds a use of s.  The
    # record runs with the GIL released (it blocks while s's queue is full:
    # the GIL rule), the swap under s's critical section.  Of two threads
    # marking at once, the later record in stream order must be the one
    # kept: a marker keeps its event only if no other marker swapped since
    # it read _tail_gen before its record; otherwise it records again, now
    # after the other's record, and tries again (as many rounds at most as
    # markers at once).  Test: test_free_threading_gpu.py, allocations
    # racing the close of their stream.  `ev`: a new event made by the
    # caller, or None to make one here.
    cdef Event old = None
    cdef unsigned long long gen
    cdef bint settled = False
    if ev is None:
        ev = new_event(s._device, cudaEventDisableTiming)
    while not settled:
        with cython.critical_section(s):
            gen = s._tail_gen
        with nogil:
            rt.event_record(<cudaEvent_t>ev._handle, <cudaStream_t>s._handle, 0)
        streams_flag_set(<int*>&ev._recorded, True)
        with cython.critical_section(s):
            if streams_count_get(&s._dependents) == 0:
                settled = True      # nothing left to order: ev goes
            elif s._tail_gen == gen:
                old = s._tail
                s._tail = ev
                s._tail_gen = gen + 1
                settled = True
    # `old` (and `ev` when nothing was left to order) goes here, outside
    # the critical section: its close may detach.
    return 0


cdef Event stream_tail(Stream s):
    # The tail event of a closed stream, or None; the caller's reference
    # keeps it alive while it uses the handle.  A close() in another thread
    # that marked the stream closed and has not yet published its tail is
    # waited for (GIL released): the tail covers work this caller may have
    # seen enqueued.  Test: test_memory_lifetimes_gpu.py, frees racing the
    # close of their stream.
    cdef Event ev
    while (streams_count_get(&s._tail_marking) > 0
           and s._tail_marker != PyThread_get_thread_ident()):
        with nogil:
            streams_sleep_ns(20000)
    with cython.critical_section(s):
        ev = s._tail
    return ev


cdef void drop_dependent(Stream s) noexcept:
    # A buffer's free was enqueued: the last one lets the tail go.
    cdef Event old = None
    if streams_count_add(&s._dependents, -1) == 0 and streams_is_closed(&s._state):
        with cython.critical_section(s):
            if streams_count_get(&s._dependents) == 0:
                old = s._tail
                s._tail = None
