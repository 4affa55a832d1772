# Private hooks for tests and probes, part of streams._hostcall (_hostcall.pyx
# includes it last).

def _capture_registry():
    """(captures registered, streams mapped to one): what the registry
    holds now.  Private: its bound checked by the tests."""
    with cython.critical_section(_capture_lock):
        return len(_captures), len(_capture_of_stream)


def _register_capture(capture_id, Stream stream not None):
    """Register capture ``capture_id`` of ``stream`` as an enqueue into it
    does; True if it was not registered yet.  Private: the registry's bound
    checked without a GPU (on streams that are closed)."""
    return capture_entry(capture_id, stream, None)[2]


def _native_host_func(callback, arg=None, owner=None):
    """What ``launch_host_func`` makes of ``callback``: (fn address, data
    address, kept object or None) for a native function, None for Python
    code.  Private: tests check the classification without a GPU."""
    return native_host_func(callback, arg, owner, "callback", "arg")


def _call_on_a_native_thread(callback, arg=None, int count=1):
    """``callback(arg)`` run ``count`` times, one after another, on a thread
    Python does not know, through the trampoline CUDA's callback thread
    runs (as a graph's host node: the payload is not consumed); the thread
    then exits.  Private: tests of the trampoline without a GPU."""
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    cdef HostCall call = new_call(callback, arg, None, None, KIND_HOST_FUNC)
    call.persistent = True
    with nogil:
        rt.call_on_native_thread(<PyObject*>call, count)
