# cython: language_level=3
"""Timeline semaphores: a 64-bit counter that only grows, which streams
(stream-ordered), host threads and other processes signal and wait for
(docs/coordinating-processes.rst).

The counter lives in one page of shared host memory (a memfd, src/semaphore.h)
that the GPU reaches through a mapped registration (cudaHostRegister,
made at the first GPU operation): the host reads and raises it with plain
atomic operations, no CUDA call and no copy; the GPU with the driver's
64-bit stream memory operations (``cuStreamWaitValue64``/``WriteValue64``,
path "memops") or, on a device without them, with two one-thread kernels of
the same meaning (path "kernel", ``streams/kernels/builtin.cu``).  Another
process imports the page from a descriptor (``export``/``import_``): it
opens the exporter's descriptor again through ``/proc``, so nothing but the
descriptor's three numbers crosses, and no file system is shared.

The page's release waits for the GPU operations queued on it: each one is
marked (an event after it, as a memory pool's frees are), and ``close()``
parks the unregistration until the marks are done, never waiting itself.
A layer above ``_green``; nothing reaches it from below.
"""
import os as _os
import threading as _threading

cimport cython
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EACCES, EPERM
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

cimport streams._cudart as rt
from streams._args cimport as_timeout_ns
from streams._device cimport (WAIT_SLICE_NS, DeviceScope, current_device, enter_device,
                              exit_device)
from streams._handle cimport HandleOwner
from streams._launch cimport Kernel, semaphore_kernel
from streams._platform cimport streams_flag_get, streams_flag_set, streams_now_ns
from streams._stream cimport Stream, as_stream
from streams.cudart cimport *


cdef extern from "semaphore.h" nogil:
    ctypedef struct streams_sem_page:
        uint64_t value
    int STREAMS_SEM_PAGE_SIZE
    unsigned long long STREAMS_SEM_MAX
    unsigned long long STREAMS_SEM_POISON
    int STREAMS_SEM_REASON_MAX
    uint64_t streams_sem_load(const streams_sem_page* p)
    int streams_sem_is_abandoned(const streams_sem_page* p)
    void streams_sem_reason(const streams_sem_page* p, char* out, size_t cap)
    int streams_sem_raise(streams_sem_page* p, uint64_t v, uint64_t* now)
    void streams_sem_abandon(streams_sem_page* p, const char* reason, size_t n)
    int streams_sem_poll(const streams_sem_page* p, uint64_t target, long long slice_end,
                         long long spin_until, long long* nap_ns)
    int streams_sem_page_new(uint64_t initial, const uint64_t* nonce, int* fd,
                             streams_sem_page** page)
    int streams_sem_page_open(int pid, int their_fd, const uint64_t* nonce, int* fd,
                              streams_sem_page** page)
    void streams_sem_page_unmap(void* page)
    void streams_sem_fd_close(int fd)
    int streams_sem_pidfd(int pid)
    int streams_sem_peer_gone(int pidfd, int pid)


# What each device can do (-1: not asked yet); what `path` asks for is
# PATH_AUTO, PATH_MEMOPS or PATH_KERNEL (_semaphore.pxd).
cdef int _memops_cache[rt.STREAMS_MAX_DEVICES]
for _i in range(rt.STREAMS_MAX_DEVICES):
    _memops_cache[_i] = -1
# Whether the kernel path's kernels are loaded into each device's context.
cdef int _kernels_loaded[rt.STREAMS_MAX_DEVICES]
# Pause-spinning before sleeping, as the other waits do (_stream's _SPIN_NS).
cdef long long _SPIN_NS = 100000


cdef int device_has_memops(int dev) except -1:
    # Asked once per device (a racing second ask writes the same answer).
    cdef int has
    if 0 <= dev < rt.STREAMS_MAX_DEVICES:
        has = streams_flag_get(&_memops_cache[dev])
        if has >= 0:
            return has
    with nogil:
        has = rt.device_has_64_bit_memops(dev)
    if 0 <= dev < rt.STREAMS_MAX_DEVICES:
        streams_flag_set(&_memops_cache[dev], has)
    return has


cdef int _load_kernels_on(int dev) except -1:
    # The kernel path's kernels, loaded into `dev`'s context before their
    # first launch there: under lazy loading that launch would load them,
    # and a load may wait for the device's queued work, a stream blocked on
    # a semaphore among it (test_semaphore_gpu.py,
    # test_registering_a_page_while_a_stream_waits_does_not_deadlock).
    # In relaxed capture mode: the first operation may be one being
    # captured, and loading is no work of the capture.
    cdef Kernel signal, wait
    cdef DeviceScope scope
    cdef void* fn = NULL
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    if 0 <= dev < rt.STREAMS_MAX_DEVICES and streams_flag_get(&_kernels_loaded[dev]):
        return 0
    with nogil:
        rt.thread_exchange_capture_mode(&mode)
    try:
        signal = semaphore_kernel(True)
        wait = semaphore_kernel(False)
        with nogil:
            enter_device(&scope, dev)
            try:
                rt.kernel_function(signal.c_handle(), &fn)
                rt.kernel_function(wait.c_handle(), &fn)
            finally:
                exit_device(&scope)
    except NotImplementedError:
        pass                # a driver without cuKernelGetFunction: loaded at first launch
    finally:
        with nogil:
            rt.thread_exchange_capture_mode(&mode)
    if 0 <= dev < rt.STREAMS_MAX_DEVICES:
        streams_flag_set(&_kernels_loaded[dev], 1)
    return 0


cdef int value_op(Stream s, unsigned long long addr, uint64_t v, bint signal, int path,
                  void* marks, bint refuse_capture) except -1:
    # One GPU operation on a registered page: the path asked for, or the
    # one the stream's device has.  A mark after it unless it is captured
    # (the page outlives the operation: close() parks its release until
    # the mark is done; a captured one is the graph's, which the caller
    # keeps the page open for, docs/graphs.rst).  1, and nothing enqueued,
    # when refuse_capture and the stream is capturing (a deadline's marker:
    # _deadline.pyx).
    cdef DeviceScope scope
    cdef int dev
    cdef bint memops
    cdef bint capturing = False
    cdef Kernel kernel = None
    cdef unsigned long long value = v
    cdef void* args[2]
    s._use()
    try:
        with nogil:
            dev = s.c_device()      # a call of CUDA's for the special streams
        if path == PATH_KERNEL:
            memops = False
        else:
            memops = device_has_memops(dev) == 1
            if not memops and path == PATH_MEMOPS:
                raise ValueError(f"path='memops' was asked for, but device {dev} has no "
                                 "64-bit stream memory operations: use path=None or "
                                 "'kernel'")
        if not memops:
            _load_kernels_on(dev)
            kernel = semaphore_kernel(signal)
        args[0] = &addr
        args[1] = &value
        with nogil:
            enter_device(&scope, dev)
            try:
                if marks != NULL or refuse_capture:
                    capturing = rt.stream_in_capture(<cudaStream_t>s._handle)
                if not (capturing and refuse_capture):
                    if memops and signal:
                        rt.stream_write_value(<cudaStream_t>s._handle, addr, value, 0, True)
                    elif memops:
                        rt.stream_wait_value(<cudaStream_t>s._handle, addr, value, 0, True)
                    else:
                        kernel.c_launch(s, 1, 1, 1, 1, 1, 1, args, 0)
                    if marks != NULL and not capturing:
                        rt.marks_record(marks, <cudaStream_t>s._handle)
            finally:
                exit_device(&scope)
    finally:
        s._unuse()
    return 1 if capturing and refuse_capture else 0


class SemaphoreAbandoned(RuntimeError):
    """A :class:`TimelineSemaphore` was abandoned: ``abandon(reason)`` was
    called in some process, or an importer saw the exporting process end.
    Every GPU wait on it was released by the poisoned value; host waits
    raise this instead of returning.  ``reason`` says why."""

    def __init__(self, reason):
        super().__init__(f"the timeline semaphore was abandoned: {reason}")
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.reason,))


class SemaphoreDescriptor:
    """What ``TimelineSemaphore.export()`` gives another process: the
    exporting process's id, the number of its descriptor of the semaphore's
    page, and the page's nonce.  Picklable (plain ``pickle`` and
    ``multiprocessing`` alike: nothing but these numbers crosses); pass it
    to ``TimelineSemaphore.import_()`` while the exporter holds the
    semaphore open."""
    __slots__ = ("pid", "fd", "nonce")

    def __init__(self, pid, fd, nonce):
        for name, v in (("pid", pid), ("fd", fd)):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        if not isinstance(nonce, bytes) or len(nonce) != 16:
            raise ValueError("nonce must be the 16 bytes of the semaphore's page")
        pid, fd = pid.__index__(), fd.__index__()
        if not 0 < pid < 2**31:
            raise ValueError(f"pid must be a process id, got {pid}")
        if not 0 <= fd < 2**31:
            raise ValueError(f"fd must be a file descriptor number, got {fd}")
        self.pid = pid
        self.fd = fd
        self.nonce = nonce

    def __reduce__(self):
        return (SemaphoreDescriptor, (self.pid, self.fd, self.nonce))

    def __eq__(self, other):
        if not isinstance(other, SemaphoreDescriptor):
            return NotImplemented
        return (self.pid, self.fd, self.nonce) == (other.pid, other.fd, other.nonce)

    def __hash__(self):
        return hash((self.pid, self.fd, self.nonce))

    def __repr__(self):
        return f"SemaphoreDescriptor(pid={self.pid}, fd={self.fd})"


cdef uint64_t _as_value(object value, str argname) except? 0xFFFFFFFFFFFFFFFF:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{argname} must be an int, not {type(value).__name__}")
    v = value.__index__()
    if v < 0:
        raise ValueError(f"{argname} must be >= 0, got {v}")
    if v > STREAMS_SEM_MAX:
        raise ValueError(f"{argname}={v} is past TimelineSemaphore.MAX_VALUE (2**62 - 1)")
    return <uint64_t>v


cdef int _path_of(object path) except -1:
    if path is None:
        return PATH_AUTO
    if path == "memops":
        return PATH_MEMOPS
    if path == "kernel":
        return PATH_KERNEL
    raise ValueError(f"path must be None, 'memops' or 'kernel', got {path!r}")


@cython.final
cdef class TimelineSemaphore(HandleOwner):
    """TimelineSemaphore(initial_value=0, *, path=None)

    A 64-bit counter that only grows, shared by streams, host threads and
    processes (docs/coordinating-processes.rst).

    ``signal(stream, v)`` and ``wait(stream, v)`` are stream-ordered (the
    wait holds the stream's later work until the counter is at least ``v``)
    and can be captured into graphs; ``signal_host``, ``wait_host``,
    ``wait_async`` and ``value`` are the host's.  Values are 0 to
    ``MAX_VALUE`` (2**62 - 1) and never go backwards.  ``export()`` gives a
    picklable descriptor that ``TimelineSemaphore.import_()`` opens in
    another process of the same user on the same machine.  ``abandon(reason)``
    releases every GPU waiter with a poisoned value, after which host waits
    raise :class:`SemaphoreAbandoned`.

    ``path`` chooses how the GPU operations are made: "memops" (the driver's
    64-bit stream memory operations), "kernel" (a one-thread kernel each),
    or None, the first where the stream's device has them.  The semaphore
    belongs to no device: any device's streams may use it.
    """
    cdef streams_sem_page* _page
    cdef int _fd                    # this process's descriptor of the page
    cdef int _peer_pid              # the exporter's id (an importer), else 0
    cdef int _pidfd                 # readable once the exporter ended, or -1
    cdef int _path
    cdef int _registered            # the page is registered with CUDA (flag)
    cdef void* _dptr                # its device address, once registered
    cdef void* _marks               # where the GPU operations on it end
    cdef unsigned long long _signalled   # the highest value a signal(stream) enqueued here
    cdef bytes _nonce
    cdef object _register_lock

    #: The highest value a semaphore takes (2**62 - 1): past it is the poison.
    MAX_VALUE = STREAMS_SEM_MAX

    def __cinit__(self, *args, **kwargs):
        self._page = NULL
        self._fd = -1
        self._pidfd = -1
        self._register_lock = _threading.Lock()

    @cython.embedsignature(False)
    def __init__(self, initial_value=0, *, path=None):
        cdef uint64_t initial
        cdef uint64_t nonce[2]
        cdef int err
        cdef int fd = -1
        cdef streams_sem_page* page = NULL
        self._init_once()
        try:
            initial = _as_value(initial_value, "initial_value")
            self._path = _path_of(path)
            self._nonce = _os.urandom(16)
            memcpy(nonce, <const char*>self._nonce, 16)
            err = streams_sem_page_new(initial, nonce, &fd, &page)
            if err != 0:
                raise OSError(err, f"a timeline semaphore's page could not be made: "
                                   f"{_os.strerror(err)}")
        except BaseException:
            self._init_abandoned()
            raise
        self._page = page
        self._fd = fd
        rt.count(rt.STREAMS_CNT_SEMAPHORE_CREATED)
        self._opened(True)

    @staticmethod
    def import_(desc):
        """The semaphore that ``desc`` (a :class:`SemaphoreDescriptor` from
        ``export()`` in another process, or this one) names.

        The exporter must still hold it open.  Raises ValueError when the
        exporting process is gone or holds no such page (the descriptor is
        stale), PermissionError when this process may not open it (another
        user, a process that is not dumpable).  Host waits of the import
        raise :class:`SemaphoreAbandoned` once the exporter has ended.
        """
        cdef TimelineSemaphore sem
        cdef uint64_t nonce[2]
        cdef int err, fd = -1, pid, their_fd
        cdef streams_sem_page* page = NULL
        if not isinstance(desc, SemaphoreDescriptor):
            raise TypeError(f"desc must be a streams.SemaphoreDescriptor, not "
                            f"{type(desc).__name__}")
        pid, their_fd = desc.pid, desc.fd
        memcpy(nonce, <const char*>(<bytes>desc.nonce), 16)
        with nogil:
            err = streams_sem_page_open(pid, their_fd, nonce, &fd, &page)
        if err == -1:
            raise ValueError(f"desc: descriptor {their_fd} of process {pid} is not a timeline "
                             "semaphore (a stale descriptor: the number was reused)")
        if err == -2:
            raise ValueError(f"desc: descriptor {their_fd} of process {pid} is another "
                             "timeline semaphore (a stale descriptor: the number was reused)")
        if err == EACCES or err == EPERM:
            raise PermissionError(err, f"desc: process {pid} does not let this process open "
                                       f"its descriptor {their_fd} ({_os.strerror(err)}): "
                                       "both must run as the same user, and the exporter "
                                       "must be dumpable")
        if err != 0:
            raise ValueError(f"desc: process {pid} is gone or no longer holds the semaphore "
                             f"(descriptor {their_fd}: {_os.strerror(err)}); import while "
                             "the exporter holds it open")
        sem = TimelineSemaphore.__new__(TimelineSemaphore)
        sem._page = page
        sem._fd = fd
        sem._nonce = desc.nonce
        if pid != _os.getpid():
            sem._peer_pid = pid
            sem._pidfd = streams_sem_pidfd(pid)
        sem._init_once()
        rt.count(rt.STREAMS_CNT_SEMAPHORE_CREATED)
        sem._opened(True)
        return sem

    def export(self):
        """A :class:`SemaphoreDescriptor` of this semaphore for
        ``TimelineSemaphore.import_()`` in another process (of the same
        user, on this machine), valid while this object is open."""
        self._check_open()
        return SemaphoreDescriptor(_os.getpid(), self._fd, self._nonce)

    # ---- the host's side ------------------------------------------------------------------
    @property
    def value(self):
        """The counter now (a poisoned one, past ``MAX_VALUE``, once abandoned)."""
        cdef uint64_t v
        self._use()
        v = streams_sem_load(self._page)
        self._unuse()
        return v

    @property
    def abandoned(self):
        """None, or the reason given to the ``abandon()`` that poisoned it."""
        self._use()
        try:
            if not streams_sem_is_abandoned(self._page):
                return None
            return self._reason()
        finally:
            self._unuse()

    cdef str _reason(self):
        cdef char buf[1025]
        streams_sem_reason(self._page, buf, sizeof(buf))
        text = (<bytes>buf).decode("utf-8", "replace")
        return text or "abandoned (no reason recorded)"

    @property
    def exporter_pid(self):
        """The id of the process this semaphore was imported from, or None
        (made here, or imported from this process)."""
        return self._peer_pid or None

    def signal_host(self, value):
        """Raise the counter to ``value`` now, from the host.  A value below
        the counter is a ValueError (the counter never goes backwards); the
        counter's value itself is a no-op.  Raises SemaphoreAbandoned once
        abandoned."""
        cdef uint64_t v = _as_value(value, "value")
        cdef uint64_t now = 0
        cdef int r
        self._use()
        try:
            r = streams_sem_raise(self._page, v, &now)
            if r == 2:
                raise SemaphoreAbandoned(self._reason())
        finally:
            self._unuse()
        if r == 1:
            raise ValueError(f"value={v} goes backwards: the semaphore is at {now}")

    cdef int _peer_gone(self) noexcept nogil:
        return self._peer_pid != 0 and streams_sem_peer_gone(self._pidfd, self._peer_pid)

    cdef int _poison_for_peer(self) except -1:
        reason = f"the exporting process {self._peer_pid} ended"
        data = reason.encode("utf-8")
        streams_sem_abandon(self._page, data, len(data))
        raise SemaphoreAbandoned(self._reason())

    def wait_host(self, value, timeout=None):
        """Wait until the counter is at least ``value``.  The GIL is released
        and Ctrl-C works.

        Returns True once it is; with ``timeout`` in seconds, returns False if
        it expired first (as ``Stream.synchronize`` does).  Raises
        SemaphoreAbandoned once the semaphore is abandoned, and, in an
        importer, once the exporting process has ended (which abandons it,
        releasing every GPU waiter).  In threads other than the main one
        Python cannot deliver Ctrl-C: give those waits a ``timeout``.
        """
        cdef uint64_t target = _as_value(value, "value")
        cdef long long timeout_ns = as_timeout_ns(timeout)
        cdef long long now = streams_now_ns()
        cdef long long deadline = -1 if timeout_ns < 0 else now + timeout_ns
        cdef long long spin_until = now + _SPIN_NS
        cdef long long nap_ns = 20000
        cdef long long slice_end
        cdef int r = 0, gone = 0
        self._use()
        try:
            while True:
                with nogil:
                    slice_end = streams_now_ns() + WAIT_SLICE_NS
                    if deadline >= 0 and deadline < slice_end:
                        slice_end = deadline
                    r = streams_sem_poll(self._page, target, slice_end, spin_until, &nap_ns)
                    if r == 0:
                        gone = self._peer_gone()
                if r == 1:
                    return True
                if r == 2:
                    raise SemaphoreAbandoned(self._reason())
                if gone:
                    self._poison_for_peer()
                PyErr_CheckSignals()
                if deadline >= 0 and streams_now_ns() >= deadline:
                    return False
        finally:
            self._unuse()

    def wait_async(self, value, timeout=None):
        """``await sem.wait_async(value, timeout=None)``: wait_host without
        blocking the event loop.  True once the counter is at least
        ``value``, False when ``timeout`` (seconds) expired first; raises as
        wait_host does.  Arguments are checked at the call."""
        cdef uint64_t target = _as_value(value, "value")
        cdef long long timeout_ns = as_timeout_ns(timeout)
        self._check_open()
        return _wait_async(self, target, timeout_ns)

    cdef int _poll_once(self, uint64_t target) except -1:
        # 1 reached, 0 not yet; raises once abandoned or the exporter ended.
        cdef long long nap_ns = 0
        cdef int r
        self._use()
        try:
            r = streams_sem_poll(self._page, target, 0, 0, &nap_ns)
            if r == 2:
                raise SemaphoreAbandoned(self._reason())
            if r == 0 and self._peer_gone():
                self._poison_for_peer()
            return r
        finally:
            self._unuse()

    def abandon(self, reason):
        """Poison the semaphore: every GPU wait on it, queued or captured, in
        every process, is released, and host waits (and later ``signal``,
        ``wait`` and ``signal_host`` calls) raise SemaphoreAbandoned with
        ``reason`` (a str; the first abandon's reason is kept, up to 1024
        bytes).  For a peer that died or stalls: no stream stays blocked."""
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, not {type(reason).__name__}")
        data = reason.encode("utf-8")[:STREAMS_SEM_REASON_MAX]
        self._use()
        try:
            streams_sem_abandon(self._page, data, len(data))
        finally:
            self._unuse()

    # ---- the GPU's side -------------------------------------------------------------------
    @property
    def path(self):
        """How GPU operations are made on the current device: "memops" or
        "kernel" (as ``path`` asked, or the first that device has)."""
        self._check_open()
        if self._path == PATH_MEMOPS:
            return "memops"
        if self._path == PATH_KERNEL:
            return "kernel"
        return "memops" if device_has_memops(current_device()) else "kernel"

    def signal(self, stream, value):
        """Set the counter to ``value`` in ``stream``'s order (after the work
        before it, and a system-scope fence: its writes are visible first).
        A value below the counter, or below a signal already enqueued here,
        is a ValueError.  Can be captured into a graph.  Returns self."""
        cdef uint64_t v = _as_value(value, "value")
        cdef Stream s = as_stream(stream, "stream")
        cdef uint64_t now
        self._use()
        try:
            if streams_sem_is_abandoned(self._page):
                raise SemaphoreAbandoned(self._reason())
            now = streams_sem_load(self._page)
            if v < now or v < self._signalled:
                raise ValueError(f"value={v} goes backwards: the semaphore is at {now}"
                                 + (f", and a signal of {self._signalled} is enqueued"
                                    if self._signalled > now else ""))
            self._enqueue(s, v, True)
            if v > self._signalled:
                self._signalled = v
        finally:
            self._unuse()
        return self

    def wait(self, stream, value):
        """Make ``stream``'s later work wait until the counter is at least
        ``value`` (the GPU waits; the host does not).  Can be captured into
        a graph.  Returns self.

        CUDA does not see this dependency: while a stream waits for a value
        the host or another process writes, a call that may synchronize
        the device implicitly (loading a module, a device synchronize) may
        wait for that stream (see ``Stream.wait_value``).
        """
        cdef uint64_t v = _as_value(value, "value")
        cdef Stream s = as_stream(stream, "stream")
        self._use()
        try:
            if streams_sem_is_abandoned(self._page):
                raise SemaphoreAbandoned(self._reason())
            self._enqueue(s, v, False)
        finally:
            self._unuse()
        return self

    cdef int _register(self) except -1:
        # The page, registered with CUDA at the first GPU operation: the
        # host side needs no CUDA (no device, no context), and a process
        # that only waits on the host never registers.
        cdef void* dptr = NULL
        cdef void* marks
        if streams_flag_get(&self._registered):
            return 0
        with self._register_lock:
            if streams_flag_get(&self._registered):
                return 0
            rt.drain_deferred()
            marks = rt.marks_new()
            try:
                with nogil:
                    rt.host_register(<void*>self._page, STREAMS_SEM_PAGE_SIZE, &dptr)
            except BaseException:
                with nogil:
                    rt.marks_free(marks)
                raise
            self._dptr = dptr
            self._marks = marks
            streams_flag_set(&self._registered, 1)     # releasing: the two above first
        return 0

    cdef int _enqueue(self, Stream s, uint64_t v, bint signal) except -1:
        self._register()
        value_op(s, <unsigned long long>self._dptr, v, signal, self._path, self._marks, False)
        return 0

    # ---- life ---------------------------------------------------------------------------
    cdef void _close_fds(self) noexcept nogil:
        streams_sem_fd_close(self._fd)
        self._fd = -1
        streams_sem_fd_close(self._pidfd)
        self._pidfd = -1

    cdef int _destroy(self) except -1 nogil:
        cdef streams_sem_page* page = self._page
        cdef void* marks = self._marks
        self._page = NULL
        self._marks = NULL
        self._close_fds()
        rt.count(rt.STREAMS_CNT_SEMAPHORE_DESTROYED)
        if page == NULL:
            return 0
        if not streams_flag_get(&self._registered):
            streams_sem_page_unmap(page)
            return 0
        return rt.destroy_mapped_page(<void*>page, STREAMS_SEM_PAGE_SIZE, True, marks)

    cdef void _release(self) noexcept nogil:
        cdef streams_sem_page* page = self._page
        cdef void* marks = self._marks
        self._page = NULL
        self._marks = NULL
        self._close_fds()
        rt.count(rt.STREAMS_CNT_SEMAPHORE_DESTROYED)
        if page == NULL:
            return
        if not streams_flag_get(&self._registered):
            streams_sem_page_unmap(page)
            return
        rt.release_mapped_page(<void*>page, STREAMS_SEM_PAGE_SIZE, True, marks)

    def close(self):
        """Close this process's view of the semaphore; later use raises
        ValueError.  Idempotent.  Never waits: the page stays mapped (and
        registered) until the GPU operations queued on it here have run.
        Other processes' views stay open; abandon() first to release their
        waiters."""
        self._close_handle()

    def __reduce__(self):
        raise TypeError("a TimelineSemaphore cannot be pickled: pickle sem.export() and "
                        "open it with TimelineSemaphore.import_()")

    def __repr__(self):
        if not self._is_initialised() or self.closed:
            return "<streams.TimelineSemaphore (closed)>"
        tail = f" imported from process {self._peer_pid}" if self._peer_pid else ""
        try:
            value = self.value
        except ValueError:
            return "<streams.TimelineSemaphore (closed)>"
        if value > STREAMS_SEM_MAX:
            return f"<streams.TimelineSemaphore abandoned{tail}>"
        return f"<streams.TimelineSemaphore value={value}{tail}>"


async def _wait_async(TimelineSemaphore sem, uint64_t target, long long timeout_ns):
    # A poll on the event loop, not the asyncio doorbell: the doorbell is a
    # host function queued after work on a stream, and this wait would need
    # a stream blocked on the semaphore, which a timeout or a cancellation
    # would leave blocked until someone signals.  A poll reads the page (a
    # load from memory: no CUDA call, no lock, no system call) between
    # sleeps of 50 us doubling to 2 ms, the schedule of _asyncio's polling
    # wait, so the loop and the GIL are free in between.
    import asyncio
    loop = asyncio.get_running_loop()
    deadline = None if timeout_ns < 0 else loop.time() + timeout_ns / 1e9
    delay = 50e-6
    while not sem._poll_once(target):
        if deadline is not None:
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(delay, left))
        else:
            await asyncio.sleep(delay)
        delay = min(delay * 2, 2e-3)
    return True
