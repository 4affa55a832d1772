# cython: language_level=3
"""Awaiting streams and events without blocking the event loop: ``await
stream``, ``await event``, ``Stream.wait_async`` and ``Event.wait_async``.

A host function (src/notify.h) rings an eventfd that the running loop
watches.  It runs on CUDA's callback thread without the GIL and without CUDA
calls, so it can neither deadlock with Python nor stall other callbacks.  One
doorbell per loop, found through a weak mapping: when the loop goes, so does
its doorbell, and the C notifier lives on only until the last host function
still queued has run.  Where there is no eventfd, or the loop has no
``add_reader``, a wait polls.

A layer above ``_hostcall``; ``Waitable.wait_async`` reaches it by a late
import (``_later``).  The private hooks of the tests are included last
(``_asyncio/_testing.pxi``).
"""
import threading as _threading
import weakref as _weakref

cimport cython

cimport streams._cudart as rt
from streams._stream cimport Event, Stream, Waitable, check_deadline, new_event
from streams.cudart cimport *


cdef extern from "notify.h" nogil:
    ctypedef struct streams_notifier:
        pass
    ctypedef struct streams_wait_node:
        streams_wait_node* next
        unsigned long long token
    int STREAMS_HAVE_EVENTFD
    streams_notifier* streams_notifier_new()
    int streams_notifier_fd(streams_notifier* n)
    long streams_notifier_live_nodes(streams_notifier* n)
    void streams_notifier_unref(streams_notifier* n)
    streams_wait_node* streams_wait_node_new(streams_notifier* n, unsigned long long token)
    void streams_wait_node_abandon(streams_wait_node* node)
    void streams_wait_node_free(streams_wait_node* node)
    streams_wait_node* streams_notifier_take(streams_notifier* n)
    void streams_notify_host_fn(void* node)


@cython.final
cdef class _Doorbell:
    """One event loop's eventfd, and the futures of the waits it resolves."""
    # The GC may clear `_waiting` (futures hold their loop, whose reader
    # holds this object): __dealloc__ reads the C notifier only.
    cdef streams_notifier* _n
    cdef dict _waiting            # token -> future
    cdef unsigned long long _next
    cdef object __weakref__

    def __cinit__(self):
        self._n = NULL
        self._waiting = {}

    def __dealloc__(self):
        # The loop is gone: host functions still queued free the notifier.
        if self._n != NULL:
            streams_notifier_unref(self._n)
            self._n = NULL

    cdef unsigned long long _register(self, object loop):
        self._next += 1
        self._waiting[self._next] = loop.create_future()
        return self._next

    def _ring(self):
        """The loop's reader: resolve every wait whose host function ran,
        in the order they ran."""
        cdef streams_wait_node* node
        cdef streams_wait_node* after
        if self._n == NULL:
            return
        node = streams_notifier_take(self._n)
        while node != NULL:
            after = node.next
            fut = self._waiting.pop(node.token, None)
            streams_wait_node_free(node)
            node = after
            if fut is not None and not fut.done():
                fut.set_result(None)


# id(loop) -> (weak reference to the loop, its _Doorbell or False: poll).
# A plain dict changed only under _bells_lock (read without it: one dict
# operation is atomic), not a WeakKeyDictionary: that one deletes an entry
# from the thread where a loop dies, without the lock, and under
# free-threaded CPython a sweep iterating it then fails ("dictionary changed
# size during iteration";
# test_doorbells_of_many_loops_swept_while_others_count_them).  An entry
# whose loop has died is dropped by the next sweep, or replaced when a new
# loop gets the same id.
cdef dict _bells = {}
cdef object _bells_lock = _threading.Lock()


cdef object _bell_of(object loop):
    # The loop's entry value, or None where it has none (a dead loop's entry
    # under a reused id is not this loop's).
    entry = _bells.get(id(loop))
    if entry is None or (<tuple>entry)[0]() is not loop:
        return None
    return (<tuple>entry)[1]


cdef int _sweep() except -1:
    # The futures a doorbell holds hold their loop: a loop closed with waits
    # pending would keep its doorbell (and eventfd) for ever.  Dropped here,
    # whenever a new loop gets one; host functions still queued free the
    # notifier when they run.  The caller holds _bells_lock: two sweeps at
    # once would both let go of one notifier, and a reader of `_n` in
    # another thread (_async_waits) would read a freed one.
    #
    # What else a doorbell has (`_waiting`, `_next`) is its loop's: only
    # code running in that loop's thread registers, rings and pops (asyncio
    # runs a loop in one thread, and _wait works with the running loop of
    # its own thread); a sweep touches them only once the loop is closed.
    cdef _Doorbell bell
    for key, entry in list(_bells.items()):
        loop = (<tuple>entry)[0]()
        found = (<tuple>entry)[1]
        if loop is None:
            del _bells[key]     # its doorbell, unless still referenced, goes now
        elif found is not False and loop.is_closed():
            bell = <_Doorbell>found
            bell._waiting.clear()
            if bell._n != NULL:
                streams_notifier_unref(bell._n)
                bell._n = NULL
            del _bells[key]
    return 0


cdef object _doorbell(object loop):
    found = _bell_of(loop)
    if found is not None:
        return found if found is not False else None
    # Made, and the table swept, by one thread at a time: two sweeps at once
    # would both let go of one closed loop's notifier.  A lock, not a
    # critical section: a critical section is let go of whenever its thread
    # pauses for another.  Taken only the first time a loop awaits.
    with _bells_lock:
        return _new_doorbell(loop)


cdef object _new_doorbell(object loop):
    cdef _Doorbell bell
    cdef streams_notifier* n
    found = _bell_of(loop)
    if found is not None:
        return found if found is not False else None
    _sweep()
    ref = _weakref.ref(loop)
    n = streams_notifier_new() if STREAMS_HAVE_EVENTFD else NULL
    if n == NULL:
        _bells[id(loop)] = (ref, False)
        return None
    bell = _Doorbell.__new__(_Doorbell)
    bell._n = n
    try:
        loop.add_reader(streams_notifier_fd(n), bell._ring)
    except NotImplementedError:
        _bells[id(loop)] = (ref, False)     # e.g. the Windows proactor loop
        return None
    _bells[id(loop)] = (ref, bell)
    return bell


cdef int _notify_unless_capturing(cudaStream_t h, void* node) except -1 nogil:
    # 1: the doorbell's host function is enqueued, as a one-shot (a ticket:
    # shim.h); 0: the stream is being captured (nothing enqueued).  In the
    # capture fence, so no capture that streams begins can take the host
    # function into a graph (where replays would ring a freed node).
    cdef cudaStreamCaptureStatus now = cudaStreamCaptureStatusNone
    rt.fence_enter(h)
    try:
        rt.stream_capture_state_locked(h, &now, NULL)
        if now != cudaStreamCaptureStatusNone:
            return 0
        rt.launch_notify(h, node)
        return 1
    finally:
        rt.fence_leave(h)


cdef int _record_unless_capturing(cudaStream_t h, cudaEvent_t ev) except -1 nogil:
    # 1: ``ev`` is recorded on ``h``; 0: ``h`` is being captured (nothing
    # recorded).  In the capture fence, as _notify_unless_capturing.
    cdef cudaStreamCaptureStatus now = cudaStreamCaptureStatusNone
    rt.fence_enter(h)
    try:
        rt.stream_capture_state_locked(h, &now, NULL)
        if now != cudaStreamCaptureStatusNone:
            return 0
        rt.event_record(ev, h, 0)
        return 1
    finally:
        rt.fence_leave(h)


cdef int _ring_after(Event ev, streams_wait_node* node, bint* enqueued) except -1:
    # The doorbell's host function on a private stream that waits for
    # ``ev``: waits on different events finish independently, in the order
    # the GPU reaches them, and the host function occupies no stream of the
    # user's (after ``await stream``, ``stream.query()`` is true: nothing of
    # the await is left on it; test_asyncio_gpu.py,
    # test_await_stream_and_event).  An event of unknown device
    # (Event.from_handle without device=): a stream of the current device,
    # which may wait for an event of any.  enqueued[0] = 1: enqueued; 0: the
    # wait joined a capture (the event was recorded in one), nothing
    # enqueued.
    # ``enqueued`` is set before the private stream's close, which may raise:
    # the node then belongs to the host function, never abandoned.
    cdef Stream s
    dev = ev._device
    s = Stream(dev if dev >= 0 else None, 0, True)
    try:
        s.wait_event(ev)
        with nogil:
            enqueued[0] = _notify_unless_capturing(<cudaStream_t>s._handle, <void*>node)
    finally:
        s.close()
    return enqueued[0]


cdef int _enqueue_doorbell(Waitable obj, _Doorbell bell, unsigned long long token) except -1:
    cdef streams_wait_node* node = streams_wait_node_new(bell._n, token)
    cdef bint enqueued = False
    cdef bint recorded = False
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef Stream s
    cdef Event mark
    if node == NULL:
        raise MemoryError()
    try:
        # Creating and destroying the private stream and event are calls
        # CUDA's global capture mode refuses during another thread's
        # capture: relaxed, as the await's query (see
        # _query_unless_capturing).
        with nogil:
            rt.thread_exchange_capture_mode(&mode)
        try:
            if isinstance(obj, Stream):
                # An event recorded on the stream, outside any capture, and
                # the doorbell behind it elsewhere.
                s = <Stream>obj
                mark = new_event(s._device, cudaEventDisableTiming)
                try:
                    s._use()
                    try:
                        with nogil:
                            recorded = _record_unless_capturing(<cudaStream_t>s._handle,
                                                                <cudaEvent_t>mark._handle)
                    finally:
                        s._unuse()
                    if not recorded:
                        raise RuntimeError(_AWAIT_CAPTURING)
                    _ring_after(mark, node, &enqueued)
                finally:
                    mark.close()
                if not enqueued:
                    raise RuntimeError(_AWAIT_CAPTURING)
            else:
                _ring_after(<Event>obj, node, &enqueued)
                if not enqueued:
                    raise RuntimeError("cannot await an event recorded in a capture (it marks "
                                       "a graph node, not work that will run)")
        finally:
            with nogil:
                rt.thread_exchange_capture_mode(&mode)
    except BaseException:
        if not enqueued:
            streams_wait_node_abandon(node)
        raise
    return 0


cdef str _AWAIT_CAPTURING = ("cannot await a stream that is being captured (the wait would "
                             "become a graph node, and a query would invalidate the capture)")


# An await's status query is harmless to any capture, but in CUDA's default
# (global) capture mode it is refused in every thread while another thread
# captures in global mode, and the refusal also invalidates that capture: an
# `await` in one thread would break another thread's unrelated capture.  So
# the query runs in relaxed mode (CUDA keeps the mode per thread), and this
# thread's own mode is restored after it.

cdef int _query_unless_capturing(Stream stream) except -1:
    # 1 done, 0 not yet; raises if the stream is being captured.  One fence
    # hold for both: a capture begun by streams between them would be
    # invalidated by the query.
    cdef cudaStreamCaptureStatus now = cudaStreamCaptureStatusNone
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef int done = -1
    stream._use()
    try:
        with nogil:
            rt.thread_exchange_capture_mode(&mode)
            try:
                rt.fence_enter(<cudaStream_t>stream._handle)
                try:
                    rt.stream_capture_state_locked(<cudaStream_t>stream._handle, &now, NULL)
                    if now == cudaStreamCaptureStatusNone:
                        done = rt.stream_query(<cudaStream_t>stream._handle)
                finally:
                    rt.fence_leave(<cudaStream_t>stream._handle)
            finally:
                rt.thread_exchange_capture_mode(&mode)
    finally:
        stream._unuse()
    if done < 0:
        raise RuntimeError(_AWAIT_CAPTURING)
    return done


cdef int _query_event(Event event) except -1:
    # 1 when the event's last record has completed, else 0.
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef int done = 0
    event._use()
    try:
        with nogil:
            rt.thread_exchange_capture_mode(&mode)
            try:
                done = rt.event_query(<cudaEvent_t>event._handle)
            finally:
                rt.thread_exchange_capture_mode(&mode)
    finally:
        event._unuse()
    return done


cdef int _query_waitable(Waitable obj) except -1:
    if isinstance(obj, Stream):
        return _query_unless_capturing(<Stream>obj)
    return _query_event(<Event>obj)


async def _poll(obj):
    import asyncio
    delay = 50e-6
    while not _query_waitable(<Waitable>obj):
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2e-3)


async def _poll_watched(Waitable obj):
    # A stream or event with deadlines polls, so that a deadline the
    # watchdog saw expire raises in the awaiting task though the work never
    # ends, where the doorbell would ring only at its end
    # (tests/deadline/test_deadline_gpu.py, test_a_missed_deadline_raises_
    # in_await).
    import asyncio
    delay = 50e-6
    while not _query_waitable(obj):
        check_deadline(obj)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2e-3)
    check_deadline(obj)


async def _wait(Waitable obj):
    cdef _Doorbell bell
    cdef unsigned long long token
    import asyncio      # not at import: most programs never await
    loop = asyncio.get_running_loop()
    if obj._watch is not None:
        await _poll_watched(obj)
        return None
    # No query of a capturing stream: it is an error that also invalidates
    # the capture (the user's end_capture would then fail).
    if _query_waitable(obj):
        return None
    found = _doorbell(loop)
    if found is None:
        await _poll(obj)
        return None
    bell = <_Doorbell>found
    token = bell._register(loop)
    try:
        _enqueue_doorbell(obj, bell, token)
    except BaseException:
        bell._waiting.pop(token, None)
        raise
    await _resolved(bell, token)
    return None


async def _resolved(_Doorbell bell, unsigned long long token):
    try:
        await bell._waiting[token]
    finally:
        # Cancelled: the host function still runs once the GPU gets there,
        # and its node is freed then, resolving nothing.
        bell._waiting.pop(token, None)


def wait_async(obj):
    """The coroutine behind ``Stream.wait_async`` and ``Event.wait_async``."""
    if not isinstance(obj, Waitable):
        raise TypeError(f"wait_async needs a streams.Stream or Event, not {type(obj).__name__}")
    return _wait(obj)


include "_asyncio/_testing.pxi"
