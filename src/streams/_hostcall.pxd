# Host functions: Python host callbacks (their payload, HostCall) and
# native host functions (C code run without Python), the two enqueue paths
# (a one-shot work item, or a graph-owned node when the stream is being
# captured), and the registry that hands a capture's error slot to the graph
# it becomes.
from streams._stream cimport ErrorSlot, Stream

cdef enum:
    KIND_HOST_FUNC = 0      # callback(arg)
    KIND_STREAM_CB = 1      # callback(stream, status, arg)


cdef class HostCall:
    cdef object fn
    cdef object arg
    cdef Stream stream       # passed to stream callbacks (or None)
    cdef ErrorSlot errors    # where an exception waits for the owner
    cdef int kind
    cdef bint persistent     # owned by a graph: may run many times


cdef HostCall new_call(object callback, object arg, Stream stream, ErrorSlot errors, int kind)
# relay: a graph's or a capture's slot, which only passes errors on.
cdef ErrorSlot new_error_slot(bint relay=*)
# Captures and the error slot (and the Graph) their callbacks report to, by
# CUDA's capture id (unique in the process).  Bounded: captures that streams
# does not end (another library does, or their stream is closed) are found
# ended and forgotten when the registry grows and when their stream
# registers its next one; the hook (set_capture_hook) is then given the
# target of each.
cdef int register_capture(unsigned long long capture_id, ErrorSlot slot, object target,
                          Stream stream) except -1
# (slot, target, registered now) of a capture, registered first if it is not
# (a new relay slot, with `target`); a registered capture without a target,
# or with a weak reference to a Graph that is gone, gets `target`.  The
# target is the Graph of begin_capture_to_graph, or a weak reference to the
# Graph capture_info made for a plain capture (the one end_capture returns).
cdef tuple capture_entry(unsigned long long capture_id, Stream stream, object target)
# end_capture is about to end this capture (by id, or by its stream when
# CUDA no longer tells the id): the registry keeps it for take_capture.
cdef int claim_capture(unsigned long long capture_id, Stream stream) except -1
# By id, or, when CUDA no longer tells the id (an invalidated capture), by
# the stream that captured.
cdef tuple take_capture(unsigned long long capture_id, Stream stream)
# A registration made for a capture that ended before it was used.
cdef int forget_capture(unsigned long long capture_id, object slot, Stream stream) except -1
cdef int set_capture_hook(object hook) except -1
# A native host function (`void fn(void* data)`, no Python): (fn address,
# data address, the object to keep alive while CUDA may call it, or None);
# None when `callback` is Python code (a callable, or a ctypes/cffi callback
# made from a Python function).
cdef tuple native_host_func(object callback, object data, object owner, str fn_name,
                            str data_name)
