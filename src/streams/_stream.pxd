# C-level declarations of Stream and Event (streams._stream).
#
# Handles are declared with the types of include/streams/streams.h, so a
# project that cimports these classes needs `streams.get_include()` on its
# include path and no CUDA headers.  The C-level methods meant for
# cimporters run without the GIL and report errors as Python exceptions
# (`except -1`): call them inside `with nogil:`, holding a reference to each
# object for the duration of the call.

from streams._handle cimport HandleOwner

cdef extern from "streams/streams.h":
    ctypedef void* streams_stream_t
    ctypedef void* streams_event_t
    # A native host function (docs/host-callbacks.rst): runs on CUDA's
    # thread with no Python and no GIL; it must not call CUDA.
    ctypedef void (*streams_host_fn_t)(void* data) noexcept nogil


cdef class Event


# Where the exceptions of Python host callbacks wait for their owner (a
# stream's next synchronize, a graph's next launch) to raise the first one.
cdef class ErrorSlot:
    cdef object first           # (callback, exception) or None
    # A graph's slot (and a capture's): it keeps nothing itself, it only
    # passes its callbacks' errors on to the slots of the executables that
    # run them (GraphExec: each has a slot of its own, linked to the slots of
    # the callbacks it runs).  A stream's or an executable's slot keeps the
    # first error for its owner to raise.
    cdef bint relay
    # A graph served by this slot holds host callables (CUDA user objects),
    # or may (a graph of unknown make): its executables then box what node
    # updates bring in a user object too (streams/_graph.pyx, instantiate).
    cdef bint host_calls
    # Weak references to the slots that get this slot's errors too (a
    # tuple, replaced whole; None when there are none): those of the graphs
    # and executables that run this slot's callbacks without sharing it (a
    # graph that embeds this one as a child, an executable updated from
    # this one).  Weak: a slot nobody checks any more is not kept for it.
    cdef tuple forward
    cdef object __weakref__
    cdef void keep_first(self, object callback, object exc) noexcept
    cdef int raise_pending(self, str what) except -1
    # Errors of this slot reach `other` as well from now on.
    cdef int forward_to(self, ErrorSlot other) except -1
    # ... and no longer (an executable updated to another graph).
    cdef int unforward(self, ErrorSlot other) except -1


# What work can be waited for: a Stream (all its work so far) or an Event
# (the work before its last record).  One base, so that both are queried,
# waited for, pooled and released the same way.
cdef class Waitable(HandleOwner):
    cdef void* _handle          # the cudaStream_t or cudaEvent_t
    cdef int _kind              # _cudart's HANDLE_STREAM or HANDLE_EVENT
    cdef int _device            # -1 for the device-agnostic special streams
    cdef object _owner          # keeps a foreign handle's owner alive
    # rt.async_frees() at its last full synchronize; any thread that
    # synchronizes replaces it (streams_u64_get/set: never torn)
    cdef unsigned long long _frees_seen
    cdef void* _pool            # the pool its handle goes back to, or NULL
    # A stream's deadlines (streams._deadline's watch of it), or, for an
    # event, those of the stream it was last recorded on through Python;
    # None while it has none.  A wait checks it only when it is not None
    # (check_deadline), so an unwatched wait costs one pointer compare.
    # Set once for a stream (under its critical section), never cleared.
    cdef object _watch
    # The NVTX name given (Stream.name, Event.name), or None; changed under
    # the object's critical section.
    cdef object _name

    # 1 when the work is done, 0 when not; never raises cudaErrorNotReady.
    cdef int c_query(self) except -1 nogil
    # Plain cudaStreamSynchronize / cudaEventSynchronize: blocks, not
    # interruptible.
    cdef int c_synchronize(self) except -1 nogil
    # 1 when the work is done now (then as a synchronize would leave it), 0
    # when not: the idle fast path of synchronize().
    cdef int _done_now(self) except -1
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    # Name the handle for NVTX tools (nvtxNameCudaStreamA/EventA) and keep
    # the name; TypeError/ValueError for a name that is not a str.
    cdef int _set_name(self, object name) except -1


cdef class Stream(Waitable):
    cdef bint _special          # legacy / per-thread / null singletons
    cdef ErrorSlot _errors      # made with the first host callback
    # Buffers whose free is ordered after this stream's work; when the
    # stream closes with some left, _tail marks where its work ends.
    cdef int _dependents        # changed atomically (note_dependent, drop_dependent)
    cdef Event _tail            # under the stream's critical section (stream_tail)
    cdef unsigned long long _tail_gen   # tails swapped in so far (mark_tail)
    # close() between marking the stream closed and publishing its tail
    # (changed atomically), and the thread doing it (stream_tail waits).
    cdef int _tail_marking
    cdef unsigned long _tail_marker

    cdef int c_record(self, Event event) except -1 nogil
    cdef int c_wait_event(self, Event event) except -1 nogil
    cdef int c_wait_stream(self, Stream other) except -1 nogil
    cdef streams_stream_t c_handle(self) noexcept nogil
    # Enqueue fn(data) (blocking sync mode) after the work enqueued so far;
    # the caller keeps alive whatever fn and data need until it has run
    # (for every replay, when the stream is being captured).
    cdef int c_launch_host_func(self, streams_host_fn_t fn, void* data) except -1 nogil
    # The stream's device, or the current one for the special streams.
    cdef int c_device(self) except -1 nogil


cdef class Event(Waitable):
    cdef unsigned int _flags
    # Set once recorded, by whichever thread records (streams_flag_set/get)
    cdef bint _recorded

    cdef int c_record(self, Stream stream) except -1 nogil
    cdef int c_wait(self, Stream stream) except -1 nogil
    cdef streams_event_t c_handle(self) noexcept nogil


# Kernels (streams._launch) derive from this, so that Stream.launch reaches
# them without _stream importing the later module.
cdef class LaunchTarget:
    # wait_producers: order `stream` after the producers of foreign arrays
    # among `args` (streams._memory.resolve_span).
    cdef int _launch_on(self, Stream stream, object grid, object block, tuple args,
                        object shared_mem, object config, bint wait_producers) except -1


# The later module that runs Python host callbacks registers its enqueue
# function here when it is imported (the package imports it with itself).
ctypedef int (*host_call_enqueue_fn)(Stream stream, object callback, object arg,
                                     int kind, object owner, int sync_mode) except -1
cdef void set_host_call_enqueue(host_call_enqueue_fn fn) noexcept

# The later module of deadlines (streams._deadline) registers the check a
# wait makes on a watched Stream or Event: it raises the DeadlineExceeded
# the watchdog kept for the waiter, if any.
ctypedef int (*deadline_check_fn)(Waitable obj) except -1
cdef void set_deadline_check(deadline_check_fn fn) noexcept
# The check, for the waits of later modules (await): call it only when
# obj._watch is not None.
cdef int check_deadline(Waitable obj) except -1

# Python-level helpers the later modules share.
cpdef Stream as_stream(object stream, str argname=*)
cdef Event as_event(object event, str argname)
cdef Event new_event(int device, unsigned int flags)
# Wait until a Stream or Event is done, GIL released,
# Ctrl-C checked; 1 done, 0 when timeout_ns (>= 0) passed first.
cdef int wait_until_done(Waitable obj, long long timeout_ns) except -1

# A closed stream's tail (see _stream/tail.pxi): the buffers allocated on a stream
# count themselves (note_dependent before the enqueue, settle_dependent after
# it, both while holding a use of the stream; drop_dependent once their free
# is enqueued) and read the tail with stream_tail.
cdef void note_dependent(Stream s) noexcept nogil
cdef int settle_dependent(Stream s) except -1
cdef void drop_dependent(Stream s) noexcept
cdef Event stream_tail(Stream s)
cdef int mark_tail(Stream s, Event ev=*) except -1

