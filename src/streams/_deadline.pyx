# cython: language_level=3
"""Deadlines on stream work and graph replays, and the watchdog that checks
them (docs/deadlines.rst).

A deadline ends with a progress marker: a sequence number that the GPU
writes, in the stream's order after the watched work, into a 64-bit slot of
a page of host memory mapped for the GPU.  The write is a timeline
semaphore's signal (streams._semaphore.value_op): a stream memory operation,
or a one-thread kernel where the device has none.  Each watched stream has
one slot and numbers its markers 1, 2, ...: the slot holds the last marker
its work passed, so the host learns what is done with a plain load (no CUDA
call, no lock, no GIL).  The pages live as long as the process: a marker
queued on a stream that was closed still lands in mapped memory.

One daemon thread, the watchdog, started at the first deadline, wakes every
``tick`` while deadlines are pending (and about 0.1 s, or a tick or two,
after the last was reached) and sleeps on an event after that.
It forgets the deadlines whose markers arrived and reports those past due:
to a handler, or to the next wait on the stream (the check _stream calls in
its waits, registered here).  A layer above _semaphore; _graph reaches it
through GraphExec.launch(deadline=) by a late import.
"""
import atexit as _atexit
import os as _os
import sys as _sys
import threading as _threading
from collections import deque as _deque

cimport cython
from cpython.exc cimport PyErr_Restore, PyErr_WriteUnraisable
from cpython.ref cimport PyObject, Py_INCREF
from libc.math cimport isfinite
from libc.stdint cimport uintptr_t
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap

cimport streams._cudart as rt
from streams._graph cimport GraphExec, exec_name
from streams._platform cimport (streams_flag_get, streams_flag_set, streams_now_ns,
                                streams_u64_get, streams_u64_set)
from streams._semaphore cimport PATH_AUTO, value_op
from streams._stream cimport Stream, Waitable, as_stream, set_deadline_check
from streams.cudart cimport *


cdef enum:
    PAGE_BYTES = 4096
    SLOTS_PER_PAGE = 512            # 64-bit slots

# The states of a Deadline.
cdef enum:
    OPEN = 0                        # a scope entered, nothing armed yet
    PENDING = 1                     # its marker is queued and not seen
    MET = 2                         # its marker arrived in time
    EXPIRED = 3                     # past due before its marker arrived
    CANCELLED = 4                   # its scope ended by an exception: nothing armed

_STATE_NAMES = ("open", "pending", "met", "expired", "cancelled")


class DeadlineExceeded(TimeoutError):
    """Work under a deadline was not done in time: the watchdog saw its
    progress marker missing once the deadline passed.

    Raised by the next wait on the stream (``synchronize``,
    ``Event.synchronize`` of an event recorded on it, ``await``) unless a
    handler takes it (``streams.watchdog.handler``, or ``handler=`` of the
    deadline).  ``stream``, ``what`` (the work's name), ``graph`` (the
    executable of a replay, else None), ``node`` (None: one marker per
    deadline does not say which node stalls), ``expected`` (the marker),
    ``last_seen`` (the last marker the stream passed), ``age`` (seconds
    since the deadline began, when it expired), ``seconds`` (its length),
    ``also`` (other deadlines of the stream that expired with it, not
    raised separately).
    """

    def __init__(self, message, *, stream=None, what=None, graph=None, node=None,
                 expected=None, last_seen=None, age=None, seconds=None):
        super().__init__(message)
        self.stream = stream
        self.what = what
        self.graph = graph
        self.node = node
        self.expected = expected
        self.last_seen = last_seen
        self.age = age
        self.seconds = seconds
        self.also = []

    def __reduce__(self):
        # The stream and the graph stay behind: handles do not cross processes.
        return (_rebuild_exceeded, (self.args[0] if self.args else "", self.what,
                                    self.expected, self.last_seen, self.age, self.seconds))


def _rebuild_exceeded(message, what, expected, last_seen, age, seconds):
    return DeadlineExceeded(message, what=what, expected=expected, last_seen=last_seen,
                            age=age, seconds=seconds)


# ---- the marker pages ------------------------------------------------------------------

@cython.final
cdef class _Page:
    # One page of 512 slots, shared anonymous memory (not copied on write at
    # a fork: the GPU keeps writing the parent's page), registered with CUDA
    # at the first marker that lands in it.  Never unmapped once registered:
    # a marker may still be queued (the process's end frees it).
    cdef unsigned long long* host
    cdef unsigned long long dptr    # the device address of slot 0, once registered
    cdef int registered             # flag (streams_flag_get/set)
    cdef int generation             # the fork generation it belongs to
    cdef object lock

    def __cinit__(self):
        cdef void* mem = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0)
        if mem == MAP_FAILED:
            raise MemoryError("a page for deadline markers could not be mapped")
        self.host = <unsigned long long*>mem
        self.lock = _threading.Lock()
        self.generation = _generation

    def __dealloc__(self):
        # Only a page the GPU never saw (a forked child's copy of one is
        # never registered in the child).
        if self.host != NULL and not streams_flag_get(&self.registered):
            munmap(<void*>self.host, PAGE_BYTES)

    cdef int register(self) except -1:
        cdef void* dptr = NULL
        if streams_flag_get(&self.registered):
            return 0
        with self.lock:
            if streams_flag_get(&self.registered):
                return 0
            rt.drain_deferred()
            with nogil:
                rt.host_register(<void*>self.host, PAGE_BYTES, &dptr)
            self.dptr = <unsigned long long>dptr
            streams_flag_set(&self.registered, 1)     # releasing: dptr first
        return 0


# ---- one stream's watch ----------------------------------------------------------------

@cython.final
@cython.no_gc_clear     # its __dealloc__ reads `page` and `queue`
cdef class _Watch:
    # A stream's slot and its armed deadlines, oldest first (the order of
    # their markers on the stream).  `queue`, `expired`, `quiet_since` and
    # membership of _active change
    # under the module's _lock; `seq` and the marker's enqueue under
    # `order` (so markers are written in the order they are numbered).
    cdef _Page page
    cdef int index
    cdef unsigned long long seq     # the last marker numbered
    cdef object queue               # deque of Deadline: PENDING or EXPIRED, not yet reached
    cdef list expired               # DeadlineExceeded kept for the stream's next wait
    cdef long long quiet_since      # when a pass first saw its queue empty (0: not empty)
    cdef object order
    cdef str name                   # the stream's repr, for reports

    cdef unsigned long long last_seen(self) noexcept:
        return streams_u64_get(&self.page.host[self.index])

    def __dealloc__(self):
        # Its queue is empty (a pending deadline keeps its stream, which
        # keeps this) and the last marker it numbered has landed: the slot
        # is free for another stream, in this process.  A marker enqueued
        # by an arm that then failed (interrupted before its deadline was
        # queued) may still be on its way: such a slot is not reused.
        if (self.page is not None and self.page.generation == _generation
                and self.queue is not None and not self.queue
                and self.last_seen() >= self.seq):
            try:
                _free.append((self.page, self.index))
            except BaseException:
                pass                # interpreter teardown: the slot goes with the process


cdef _Watch _new_watch(str name):
    cdef _Watch w = _Watch.__new__(_Watch)
    cdef _Page page
    with _lock:
        if _free:
            page, w.index = _free.pop()
        else:
            page = _Page()
            _pages.append(page)
            _free.extend((page, i) for i in range(SLOTS_PER_PAGE - 1, 0, -1))
            w.index = 0
    w.page = page
    streams_u64_set(&page.host[w.index], 0)
    w.queue = _deque()
    w.expired = []
    w.order = _threading.Lock()
    w.name = name
    return w


cdef _Watch _watch_of(Stream s):
    cdef _Watch w = <_Watch>s._watch if s._watch is not None else None
    if w is not None:
        return w
    w = _new_watch(repr(s))
    with cython.critical_section(s):
        if s._watch is None:
            s._watch = w
        else:
            w = <_Watch>s._watch   # another thread's; this one's slot goes back with it
    return w


# ---- deadlines -------------------------------------------------------------------------

cdef double _as_seconds(object seconds, str argname) except -1.0:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{argname} must be a number of seconds, not {type(seconds).__name__}")
    s = float(seconds)
    if not isfinite(s) or s <= 0:
        raise ValueError(f"{argname} must be a finite number of seconds > 0, got {seconds!r}")
    if s > 1e9:
        raise ValueError(f"{argname}={seconds!r} is too long (at most 1e9 seconds)")
    return s


cdef object _as_handler(object handler, str argname):
    if handler is not None and not callable(handler):
        raise TypeError(f"{argname} must be callable or None, not {type(handler).__name__}")
    return handler


@cython.final
cdef int _refuse_capturing(Stream s, str arg) except -1:
    # A deadline's marker cannot go into a capture (its graph would write
    # it on every replay): refused, naming the argument.
    cdef bint capturing
    s._use()
    try:
        with nogil:
            rt.guard()
            capturing = rt.stream_in_capture(<cudaStream_t>s._handle)
    finally:
        s._unuse()
    if capturing:
        raise ValueError(_CAPTURING.format(arg=arg, stream=repr(s)))
    return 0


cdef class Deadline:
    """A deadline on stream work: made by :func:`streams.deadline` (a
    ``with`` scope) or returned by ``GraphExec.launch(stream,
    deadline=...)``.

    ``state`` is "open" (a scope not yet ended), "pending" (its marker is
    queued), "met", "expired" (past due before the marker arrived; it
    stays listed by ``streams.watchdog.pending()`` until the marker
    arrives), or "cancelled" (its scope ended with an exception: nothing
    was armed).
    """
    cdef readonly object stream
    cdef readonly double seconds
    cdef object _what               # what= as given (None: named when asked for)
    cdef uintptr_t _graph_handle    # the replayed executable's, at its launch
    cdef readonly object graph
    cdef object _handler
    cdef _Watch _watch
    cdef unsigned long long _marker
    cdef long long _start_ns
    cdef long long _due_ns
    cdef int _state

    def __init__(self, *args, **kwargs):
        raise TypeError("Deadline cannot be instantiated directly; use streams.deadline(stream, "
                        "seconds) or GraphExec.launch(stream, deadline=seconds)")

    @property
    def state(self):
        """"open", "pending", "met", "expired" or "cancelled"."""
        return _STATE_NAMES[self._state]

    @property
    def marker(self):
        """The marker the stream writes after the work, or None before it
        is armed."""
        return self._marker if self._marker else None

    @property
    def last_seen(self):
        """The last marker the stream's work passed (read now), or None
        before it is armed."""
        if self._watch is None or not self._marker:
            return None
        return self._watch.last_seen()

    @property
    def reached(self):
        """True once the stream's work passed the marker (met or late)."""
        if self._watch is None or not self._marker:
            return False
        return self._watch.last_seen() >= self._marker

    @property
    def age(self):
        """Seconds since the deadline began (its scope's entry, its replay's
        launch), or None before."""
        if self._start_ns == 0:
            return None
        return (streams_now_ns() - self._start_ns) / 1e9

    @property
    def expired(self):
        """True once the watchdog saw it past due before its marker."""
        return self._state == EXPIRED

    @property
    def node(self):
        """None: a deadline's one marker follows all of its work, so it
        cannot say which node of a graph stalls."""
        return None

    @property
    def what(self):
        """The work's name in reports: ``what=`` as given, else the replayed
        executable's repr at its launch, or the stream's.  Made when asked
        for, not when the deadline is armed: a repr per launch would cost
        more than the marker (benchmarks row graph_launch_deadline)."""
        if self._what is not None:
            return self._what
        if self.graph is not None:
            # GraphExec's repr at the launch (it says "(closed)" once closed).
            return exec_name(self._graph_handle)
        if self._watch is not None:
            return self._watch.name
        return repr(self.stream)

    def __enter__(self):
        cdef Stream s = <Stream>self.stream
        if self._state != OPEN or self._start_ns != 0:
            raise ValueError("a Deadline is entered once")
        _refuse_capturing(s, "streams.deadline")
        self._start_ns = streams_now_ns()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._state != OPEN or self._start_ns == 0:
            raise ValueError("a Deadline's scope is left once, after it was entered")
        if exc_type is not None:
            self._state = CANCELLED
            return False
        _arm(self, <Stream>self.stream, True)
        return False

    def __repr__(self):
        tail = f" marker {self._marker}" if self._marker else ""
        return (f"<streams.Deadline {self.seconds:g} s {self.state} on {self.what}{tail}>")


_CAPTURING = ("{arg}: {stream} is capturing, and a marker written there would be captured "
              "into the graph; give the deadline to the replay instead "
              "(GraphExec.launch(stream, deadline=...))")


cdef Deadline _new_deadline(Stream s, double seconds, object what, object graph,
                            object handler):
    cdef Deadline d = Deadline.__new__(Deadline)
    d.stream = s
    d.seconds = seconds
    d._what = what
    d.graph = graph
    d._handler = handler
    return d


def deadline(stream, seconds, *, what=None, handler=None):
    """A scope whose work on ``stream`` must be done within ``seconds`` of
    entering it::

        with streams.deadline(s, 0.5, what="step 12"):
            model_step(s)

    On leaving the scope a progress marker is written on ``stream`` after
    everything enqueued so far (one stream memory operation).  If the
    watchdog sees the marker missing once the deadline passed, it reports a
    :class:`DeadlineExceeded`: to ``handler`` (called once, from the
    watchdog's thread), else to ``streams.watchdog.handler``, else to the
    next wait on ``stream``.  ``what`` names the work in reports (default:
    the stream's repr).  A scope left by an exception arms nothing.
    Refused (ValueError) while ``stream`` is capturing.  Returns the
    :class:`Deadline`.
    """
    cdef Stream s = as_stream(stream, "stream")
    cdef double secs = _as_seconds(seconds, "seconds")
    if what is not None and not isinstance(what, str):
        raise TypeError(f"what must be a str or None, not {type(what).__name__}")
    return _new_deadline(s, secs, what, None, _as_handler(handler, "handler"))


def replay_with_deadline(GraphExec exe, Stream s, seconds):
    """GraphExec.launch(stream, deadline=seconds): refuse a capturing
    stream, replay, then write the marker."""
    cdef double secs = _as_seconds(seconds, "deadline")
    cdef Deadline d
    _refuse_capturing(s, "deadline=")
    d = _new_deadline(s, secs, None, exe, None)
    d._graph_handle = <uintptr_t>exe._handle
    d._start_ns = streams_now_ns()
    with nogil:
        exe.c_launch(s)
    _arm(d, s, False)
    return d


cdef int _arm(Deadline d, Stream s, bint refuse_capture) except -1:
    # One marker after the work enqueued so far, numbered under the
    # watch's order lock (a marker numbered later is never written before
    # one numbered earlier), then the deadline is queued for the watchdog.
    cdef _Watch w
    cdef _Page page
    cdef int refused
    with nogil:
        rt.guard()          # a forked child: the guard's error, before any lock
    w = _watch_of(s)
    page = w.page
    if not streams_flag_get(&page.registered):
        page.register()
    with w.order:
        w.seq += 1
        try:
            refused = value_op(s, page.dptr + 8 * <unsigned long long>w.index, w.seq, True,
                               PATH_AUTO, NULL, refuse_capture)
        except BaseException:
            w.seq -= 1
            raise
        if refused:
            w.seq -= 1
            raise ValueError(_CAPTURING.format(arg="streams.deadline", stream=repr(s)))
        d._marker = w.seq
    d._watch = w
    d._due_ns = d._start_ns + <long long>(d.seconds * 1e9)
    _queue(w, d)
    return 0


cdef int _queue(_Watch w, Deadline d) except -1:
    cdef bint wake = False
    with _lock:
        d._state = PENDING
        w.queue.append(d)
        w.quiet_since = 0
        if w not in _active:
            wake = not _active
            _active.add(w)
        if _thread is None:
            _start_locked()
    if wake:
        _wake.set()
    return 0


# ---- the check a wait makes ------------------------------------------------------------

cdef int _check(Waitable obj) except -1:
    # An event's _watch is replaced by each record in another thread: read
    # under the same critical section (free-threaded builds).
    cdef _Watch w
    with cython.critical_section(obj):
        w = <_Watch>obj._watch
    if w is None:
        return 0
    return _raise_expired(w)


cdef int _raise_expired(_Watch w) except -1:
    # The expiries kept for the stream's next wait: the first is raised,
    # with the others in its `also`.
    cdef list found
    if not w.expired:
        return 0
    with _lock:
        # Emptied in place, never replaced: the look above reads the list
        # without the lock.
        found = w.expired[:]
        del w.expired[:]
    if not found:
        return 0
    first = found[0]
    first.also = found[1:]
    raise first


set_deadline_check(_check)


# ---- the watchdog ----------------------------------------------------------------------

# The module's state, under _lock (remade in a forked child: the
# watchdog's thread is not there, and the pages' markers are the parent's).
_lock = _threading.Lock()
_wake = _threading.Event()
_active = set()             # watches with queued deadlines
_pages = []
_free = []                  # (page, index) of free slots
_thread = None
_handler = None
cdef double _tick_s = 0.005
cdef long long _LINGER_NS = 100000000    # 0.1 s
cdef int _generation = 0    # of the pages: a forked child's are new
cdef int _run = 0           # of the thread: a stop or a fork ends the one running


cdef int _start_locked() except -1:
    global _thread, _run
    _run += 1
    t = _threading.Thread(target=_watchdog_main, args=(_run,),
                          name="streams-watchdog", daemon=True)
    t.start()
    _thread = t
    return 0


def _watchdog_main(int run):
    # Sleeps on _wake (GIL released) while nothing is pending, else for a
    # tick; then one pass.  Ends once stopped (a later start or a fork
    # moved _run on).
    cdef bint idle = False
    while True:
        with _lock:
            if run != _run:
                return
            # Cleared here, not before the check: a stopped thread still
            # running must not clear a wake meant for its successor.
            _wake.clear()
            idle = not _active
        _wake.wait(None if idle else _tick_s)
        with _lock:
            if run != _run:
                return
        _pass()


cdef int _forget_arrived(_Watch w) except -1:
    # Under _lock: the deadlines whose markers landed leave the queue, met
    # (an expired one stays expired).
    cdef unsigned long long last = w.last_seen()
    cdef Deadline d
    q = w.queue
    while q and (<Deadline>q[0])._marker <= last:
        d = <Deadline>q.popleft()
        if d._state == PENDING:
            d._state = MET
    return 0


cdef int _pass() except -1:
    # Forget what arrived; expire what is past due; report outside the lock.
    cdef long long now = streams_now_ns()
    cdef _Watch w
    cdef Deadline d
    cdef unsigned long long last
    cdef list fired = []
    with _lock:
        for w in list(_active):
            last = w.last_seen()
            _forget_arrived(w)
            q = w.queue
            for d in q:
                if d._state == PENDING and now >= d._due_ns:
                    d._state = EXPIRED
                    fired.append((w, d, last))
            if q:
                w.quiet_since = 0
            elif w.quiet_since == 0:
                # Looked at for _LINGER_NS more before it is dropped: a
                # loop that arms a deadline per step then does not wake the
                # thread (an Event.set, then the thread taking the GIL)
                # once per step (test_deadline_cpu.py,
                # test_a_drained_watch_stays_watched_for_a_while).
                w.quiet_since = now
            elif now - w.quiet_since >= _LINGER_NS:
                _active.discard(w)
    for w, d, last in fired:
        _report(w, d, last, now)
    return 0


cdef int _report(_Watch w, Deadline d, unsigned long long last, long long now) except -1:
    cdef double age = (now - d._start_ns) / 1e9
    name = d.what
    graph = f" (graph replay {name})" if d.graph is not None else ""
    what = ("" if d.graph is not None or d._what is None or d._what == w.name
            else f" ({d._what})")
    exc = DeadlineExceeded(
        f"deadline of {d.seconds:g} s missed on {w.name}{graph}{what}: marker {d._marker} "
        f"expected, last seen {last}, pending for {age:.3f} s",
        stream=d.stream, what=name, graph=d.graph, node=None, expected=d._marker,
        last_seen=last, age=age, seconds=d.seconds)
    handler = d._handler if d._handler is not None else _handler
    if handler is None:
        with _lock:
            w.expired.append(exc)
        return 0
    try:
        handler(exc)
    except BaseException as err:
        _unraisable(handler, err)
    return 0


cdef void _unraisable(object where, BaseException exc) noexcept:
    # The handler's exception goes to sys.unraisablehook, never lost
    # (test_deadline_cpu.py, test_a_handler_that_raises_reaches_unraisablehook).
    cdef object exc_type = type(exc)
    cdef object tb = exc.__traceback__
    Py_INCREF(exc_type)
    Py_INCREF(exc)
    if tb is None:
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, NULL)
    else:
        Py_INCREF(tb)
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, <PyObject*>tb)
    PyErr_WriteUnraisable(where)


def _stop_at_exit():
    _stop(5.0)


cdef int _stop(double timeout) except -1:
    global _thread, _run
    with _lock:
        t = _thread
        _thread = None
        _run += 1
        # No pass looks at them until a later start: what arrived is
        # forgotten and drained watches go now, so that their slots can go
        # back with their streams.
        for w in list(_active):
            _forget_arrived(<_Watch>w)
            if not (<_Watch>w).queue:
                _active.discard(w)
    _wake.set()
    if t is not None and t is not _threading.current_thread():
        t.join(timeout)
    return 0


def _after_fork_in_child():
    # The thread is not here, and the pages hold the parent's markers
    # (shared memory): this process starts over.  Its watches of inherited
    # streams keep their parent's slots and give them back to nobody.
    global _lock, _wake, _active, _pages, _free, _thread, _run, _generation
    _generation += 1
    _run += 1
    _lock = _threading.Lock()
    _wake = _threading.Event()
    _active = set()
    _pages = []
    _free = []
    _thread = None


_atexit.register(_stop_at_exit)
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


@cython.final
cdef class Watchdog:
    """The watchdog of deadlines: ``streams.watchdog``, the one instance.

    A daemon thread, started by the first deadline armed, that wakes every
    ``tick`` seconds while deadlines are pending and for about 0.1 s (or a
    tick or two) after (then sleeps, costing nothing), forgets the deadlines whose markers arrived
    and reports the expired ones (docs/deadlines.rst).  It stops at
    interpreter exit and is not in a forked child (which starts its own at
    its first deadline).
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Watchdog cannot be instantiated directly; use streams.watchdog")

    def pending(self):
        """The deadlines armed and not yet reached, oldest first: each a
        :class:`Deadline` with its ``stream``, ``what``, ``graph``,
        ``marker``, ``last_seen``, ``age`` and ``state`` ("pending", or
        "expired": reported, its marker still missing)."""
        cdef _Watch w
        with _lock:
            found = [d for w in _active for d in w.queue]
        # Reached since the watchdog's last tick: not pending any more.
        found = [d for d in found if not d.reached]
        found.sort(key=_start_of)
        return found

    @property
    def handler(self):
        """Called with each :class:`DeadlineExceeded` (once per deadline,
        from the watchdog's thread, holding the GIL) for deadlines without
        a handler of their own; None (the default): the next wait on the
        stream raises it.  What the handler raises goes to
        ``sys.unraisablehook``."""
        return _handler

    @handler.setter
    def handler(self, value):
        global _handler
        _handler = _as_handler(value, "handler")

    @property
    def tick(self):
        """Seconds between the watchdog's looks while deadlines are
        pending (default 0.005): a deadline is reported at most about a
        tick after it passed."""
        return _tick_s

    @tick.setter
    def tick(self, value):
        global _tick_s
        cdef double t = _as_seconds(value, "tick")
        if t > 10.0:
            raise ValueError(f"tick must be at most 10 seconds, got {value!r}")
        _tick_s = t

    @property
    def running(self):
        """True while the watchdog's thread runs in this process."""
        t = _thread
        return t is not None and t.is_alive()

    def stop(self, timeout=5.0):
        """Stop the watchdog's thread (a later deadline starts it again).
        Pending deadlines stay queued, unchecked until then."""
        _stop(_as_seconds(timeout, "timeout"))

    def __repr__(self):
        with _lock:
            n = sum(len((<_Watch>w).queue) for w in _active)
        return f"<streams.watchdog {'running' if self.running else 'stopped'}, {n} pending>"


def _start_of(Deadline d):
    return d._start_ns


watchdog = Watchdog.__new__(Watchdog)


include "_deadline/_testing.pxi"
