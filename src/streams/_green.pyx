# cython: language_level=3
# Green contexts: a device's SMs cut into disjoint partitions, each with its
# own context, whose streams run work on that partition's SMs only.
#
# The objects, from the device down:
#   SmResource    what a device offers: its SM count and the granularity of
#                 a split (Device.sm_resource()).
#   SmPartition   one group of a split, or its remainder (Device.split_sm()):
#                 plain data, the driver's CUdevResource.
#   GreenContext  a context on one partition; makes Streams.  Closable; the
#                 driver's context lives on while a stream made from it does
#                 (each holds the _GreenHandle), so closing the context never
#                 detaches a stream that is still in use.
cimport cython
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cimport streams._cudart as rt
from streams._cudart cimport streams_dev_resource, streams_green_ctx
from streams.cudart cimport (cudaDevAttrComputeCapabilityMajor, cudaDevAttrMultiProcessorCount,
                             cudaStream_t)
from streams._args cimport as_int
from streams._device cimport check_device_index, priority_range, resolve_device
from streams._platform cimport streams_flag_claim, streams_flag_get, streams_flag_set
from streams._stream cimport Stream


cdef unsigned int _granularity_fallback(int device) except 0:
    # A CUDA 12 driver leaves the granularity fields at 0; its documented
    # rule is 8 SMs (multiples of 8) from compute capability 9.0, 2 before.
    cdef int major = 0
    with nogil:
        rt.device_get_attribute(&major, cudaDevAttrComputeCapabilityMajor, device)
    return 8 if major >= 9 else 2


@cython.final
cdef class SmResource:
    """The SMs of a device, as a green-context split sees them
    (``Device.sm_resource()``).

    ``sm_count`` SMs; a partition has at least ``min_partition_size`` of
    them, and its size is a multiple of ``alignment``.
    """

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use streams.Device(n).sm_resource()")

    def __repr__(self):
        return (f"<streams.SmResource device={self.device} sm_count={self.sm_count} "
                f"min_partition_size={self.min_partition_size} alignment={self.alignment}>")


@cython.final
cdef class SmPartition:
    """A set of SMs of one device, from ``Device.split_sm()``: one of the
    disjoint groups, or the remainder.  ``GreenContext(partition)`` runs work
    on it.  Partitions of one split are disjoint; those of two splits may
    share SMs."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use streams.Device(n).split_sm()")

    cdef int _check(self) except -1:
        if not self._valid:
            raise ValueError("this SmPartition was not made by Device.split_sm()")
        return 0

    @property
    def sm_count(self):
        self._check()
        return self._res.sm_count

    def __repr__(self):
        if not self._valid:
            return "<streams.SmPartition (never initialised)>"
        what = " remainder" if self.remainder else ""
        return f"<streams.SmPartition{what} device={self.device} sm_count={self._res.sm_count}>"


cdef SmPartition _partition(int device, const streams_dev_resource* res, bint remainder):
    cdef SmPartition p = SmPartition.__new__(SmPartition)
    memcpy(&p._res, res, sizeof(streams_dev_resource))
    p.device = device
    p.remainder = remainder
    p._valid = True
    return p


cdef int _device_resource(int device, streams_dev_resource* out) except -1:
    rt.green_require()
    with nogil:
        rt.device_sm_resource(device, out)
    return 0


def _sm_resource(int device):
    cdef streams_dev_resource res
    cdef SmResource r = SmResource.__new__(SmResource)
    cdef unsigned int fallback
    _device_resource(device, &res)
    r.device = device
    r.sm_count = res.sm_count
    fallback = _granularity_fallback(device)
    r.min_partition_size = res.min_partition_size or fallback
    r.alignment = res.coscheduled_alignment or fallback
    return r


def _split_sm(int device, count, groups):
    cdef streams_dev_resource whole
    cdef streams_dev_resource rest
    cdef streams_dev_resource* parts = NULL
    cdef unsigned int n_count, n_groups, possible = 0, i
    cdef int c = as_int(count, "count")
    cdef int g = 0
    if groups is not None:
        g = as_int(groups, "groups")
        if g < 1:
            raise ValueError(f"groups must be >= 1 (or None for as many as fit), got {g}")
    _device_resource(device, &whole)
    if c < 1 or <unsigned int>c > whole.sm_count:
        raise ValueError(f"count must be between 1 and the device's {whole.sm_count} SMs, "
                         f"got {c}")
    n_count = <unsigned int>c
    # A dry run first: how many groups of at least `count` SMs the driver
    # makes once it has rounded `count` up to its granularity.
    possible = whole.sm_count
    with nogil:
        rt.sm_resource_split(NULL, &possible, &whole, NULL, n_count)
    if possible == 0:
        raise ValueError(f"count={c}: device {device} cannot make a partition of {c} SMs "
                         f"(its {whole.sm_count} SMs split in multiples of "
                         f"{whole.coscheduled_alignment or _granularity_fallback(device)})")
    if groups is None:
        n_groups = possible
    elif <unsigned int>g > possible:
        raise ValueError(f"groups={g}: device {device}'s {whole.sm_count} SMs make at most "
                         f"{possible} partitions of at least {c} SMs")
    else:
        n_groups = <unsigned int>g
    parts = <streams_dev_resource*>malloc(n_groups * sizeof(streams_dev_resource))
    if parts == NULL:
        raise MemoryError()
    try:
        with nogil:
            rt.sm_resource_split(parts, &n_groups, &whole, &rest, n_count)
        result = [_partition(device, &parts[i], False) for i in range(n_groups)]
    finally:
        free(parts)
    remainder = _partition(device, &rest, True) if rest.sm_count else None
    return result, remainder


# The driver's green context, let go when the last holder goes: the
# GreenContext until it is closed, and every Stream made from it; destroyed
# once the work queued in it is done.
@cython.final
@cython.no_gc_clear
cdef class _GreenHandle:

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use streams.GreenContext(partition)")

    def __repr__(self):
        return f"<streams green context handle device={self.device}>"

    def __dealloc__(self):
        # Work may still be queued in the context (a stream made here closed
        # right after a launch): the release parks it until that work is
        # done, and never waits for it here (rt.release_green_ctx).
        if self.ctx != NULL:
            rt.release_green_ctx(self.ctx, self.device)
            self.ctx = NULL


@cython.final
cdef class GreenContext:
    """A context on the SMs of one partition: ``GreenContext(partition, device=None)``.

    Streams it makes (``create_stream``) run their work on the partition's
    SMs only; events, waits and graphs mix them freely with ordinary
    streams of the same device.  ``device``, when given, must be the
    partition's.  ``close()`` (or leaving ``with``) lets the
    context go once the last stream made from it is closed; until then those
    streams keep working.  Idempotent; making a stream after it raises.
    """

    def __init__(self, partition, device=None):
        # Claimed atomically (0 -> 2), given back if it fails (2 -> 0),
        # done (1): two threads running __init__ on one object never both
        # make a context.
        if not streams_flag_claim(&self._init_state, 0, 2):
            raise RuntimeError("GreenContext.__init__ may run only once (it has run, or is "
                               "running in another thread): make a new one instead")
        try:
            self._init(partition, device)
        except BaseException:
            streams_flag_claim(&self._init_state, 2, 0)
            raise

    cdef int _init(self, object partition, object device) except -1:
        cdef _GreenHandle h
        cdef streams_dev_resource res
        if not isinstance(partition, SmPartition):
            raise TypeError(f"partition must be a streams.SmPartition (from "
                            f"Device.split_sm()), not {type(partition).__name__}")
        (<SmPartition>partition)._check()
        check_device_index((<SmPartition>partition).device, "partition")
        if device is not None and resolve_device(device) != (<SmPartition>partition).device:
            raise ValueError(f"partition is of device {(<SmPartition>partition).device}, "
                             f"not of device {resolve_device(device)}")
        rt.green_require()
        memcpy(&res, &(<SmPartition>partition)._res, sizeof(res))
        h = _GreenHandle.__new__(_GreenHandle)
        h.device = (<SmPartition>partition).device
        with nogil:
            rt.green_ctx_create(&h.ctx, &res, h.device)
        # Published together, under the section that close() and every
        # reader take.
        with cython.critical_section(self):
            self._handle = h
            self.partition = partition
        streams_flag_set(&self._init_state, 1)
        return 0

    cdef _GreenHandle _open(self):
        # The reference is taken inside the object's critical section: a
        # close() in another thread drops the context's last reference
        # under the same section, so it is never freed between the read and
        # the reference.  Once taken, the holder keeps the driver's context
        # alive for this call (and for a stream made with it).
        cdef _GreenHandle h
        with cython.critical_section(self):
            h = self._handle
        if h is None:
            raise ValueError("operation on a closed GreenContext (or one never initialised)")
        return h

    @property
    def closed(self):
        return self._handle is None

    @property
    def device(self):
        return self._open().device

    @property
    def sm_count(self):
        """The SMs this context runs on, as the driver reports them."""
        cdef _GreenHandle h = self._open()
        cdef unsigned int n = 0
        with nogil:
            rt.green_ctx_sm_count(h.ctx, &n)
        return n

    def create_stream(self, priority=0, non_blocking=True):
        """A new :class:`~streams.Stream` whose work runs on this context's
        SMs.  ``priority`` as for ``Stream``; the driver makes only
        non-blocking streams here, so ``non_blocking`` must be True."""
        cdef _GreenHandle h
        cdef int prio, least, greatest
        cdef cudaStream_t s = NULL
        cdef Stream st
        prio = as_int(priority, "priority")
        if non_blocking is not True:
            raise ValueError("non_blocking must be True: CUDA makes a green context's streams "
                             "non-blocking only")
        h = self._open()
        priority_range(h.device, &least, &greatest)
        prio = greatest if prio < greatest else (least if prio > least else prio)
        rt.drain_deferred()
        with nogil:
            rt.green_ctx_stream_create(&s, h.ctx, prio)
        st = Stream.__new__(Stream)
        st._handle = <void*>s
        st._device = h.device
        st._owner = h
        st._opened(True)
        return st

    def close(self):
        """Let the context go once no stream made from it remains.  Idempotent.

        Safe while other threads use the context: a ``create_stream``
        that started first makes its stream (which keeps the context), one
        that starts after raises ValueError.
        """
        cdef _GreenHandle h
        with cython.critical_section(self):
            h = self._handle
            self._handle = None
        # `h` goes here, outside the section: the last holder's release
        # destroys the driver's context.
        h = None

    def __enter__(self):
        self._open()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        cdef _GreenHandle h
        with cython.critical_section(self):
            h = self._handle
        if h is None:
            return "<streams.GreenContext (closed)>"
        return (f"<streams.GreenContext device={h.device} "
                f"sm_count={self.partition.sm_count}>")
