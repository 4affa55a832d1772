"""Native host functions (``void fn(void* data)``, no Python, no GIL) on
streams and in graphs, what they keep alive, and the host-function sync
modes.  The CPU tests check how callbacks are told apart and refused before
CUDA is touched; the GPU tests check what the functions wrote."""
import ctypes
import gc
import sys

import time

import pytest

from _support import wait_for_refcount

import streams
from streams import Graph, PinnedBuffer, Stream
from streams._hostcall import _native_host_func
from streams.testing import native_increment, spin

MS = 1000
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


# ---- CPU: what is native, what is Python -------------------------------------------------

def test_int_address_is_native_and_keeps_nothing():
    assert _native_host_func(native_increment, 0x1000) == (native_increment, 0x1000, None)
    assert _native_host_func(native_increment) == (native_increment, 0, None)


def test_ctypes_function_from_address_is_native_and_kept():
    fn = HOST_FN(native_increment)
    got = _native_host_func(fn, None)
    assert got == (native_increment, 0, fn)
    data = ctypes.c_uint64(0)
    fn_addr, data_addr, keep = _native_host_func(fn, ctypes.pointer(data), owner="o")
    assert (fn_addr, data_addr) == (native_increment, ctypes.addressof(data))
    assert keep[0] is fn and keep[2] == "o", "code, data and owner all kept"


def test_ctypes_function_of_a_library_is_native():
    libc = ctypes.CDLL(None)
    free = libc.free
    free.restype = None
    free.argtypes = [ctypes.c_void_p]
    fn_addr, _, keep = _native_host_func(free)
    assert fn_addr == ctypes.cast(free, ctypes.c_void_p).value and keep is free


def test_ctypes_callback_of_a_python_function_is_python_code():
    # It needs the GIL like any Python code: it runs as a Python callback.
    assert _native_host_func(HOST_FN(lambda p: None)) is None
    assert _native_host_func(print) is None


@pytest.mark.parametrize("bad, match", [
    (ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(native_increment), "must be void"),
    (ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(native_increment), "must be void"),
    (ctypes.CFUNCTYPE(None, ctypes.c_double)(native_increment), "must be void"),
])
def test_ctypes_function_of_another_type_is_refused(bad, match):
    with pytest.raises(TypeError, match=match):
        _native_host_func(bad)


def test_null_and_implausible_addresses_are_refused():
    with pytest.raises(ValueError, match="NULL ctypes function pointer"):
        _native_host_func(HOST_FN())
    for address in (0, 1, 0xFFFF):
        with pytest.raises(ValueError, match="is not a function address"):
            _native_host_func(address)
    with pytest.raises(ValueError, match="does not fit in a pointer"):
        _native_host_func(-1)
    with pytest.raises(TypeError, match="must be callable or a native function, not bool"):
        _native_host_func(True)


def test_native_data_must_be_a_pointer():
    with pytest.raises(TypeError, match="arg of a native host function must be None, an int"):
        _native_host_func(native_increment, "text")
    with pytest.raises(TypeError, match="is not a pointer"):
        _native_host_func(native_increment, ctypes.c_double(1.0))
    with pytest.raises(ValueError, match="does not fit in a pointer"):
        _native_host_func(native_increment, 1 << 64)


def test_refusals_before_cuda_is_touched():
    # Each refused before any CUDA call (this machine may have no driver).
    with pytest.raises(ValueError, match="is not a function address"):
        Stream.legacy.launch_host_func(5)
    with pytest.raises(TypeError, match="owner is for native host functions"):
        Stream.legacy.launch_host_func(print, None, owner=object())
    with pytest.raises(ValueError, match="sync_mode"):
        Stream.legacy.launch_host_func(native_increment, None, sync_mode="sometimes")
    with pytest.raises(ValueError, match="closed Stream"):
        Stream.__new__(Stream).launch_host_func(native_increment, None)
    # A Graph made with __new__ refuses everything before reading anything
    # (the open check comes first, as for every add_* method).
    with pytest.raises(ValueError, match="closed Graph"):
        Graph.__new__(Graph).add_host_node(7)


def test_host_func_sync_mode_enum():
    assert streams.HostFuncSyncMode("spin_wait") == 1
    assert streams.HostFuncSyncMode.BLOCKING == "blocking"


def test_testing_native_increment_counts_when_called_directly():
    # The shipped test function, called here through ctypes: it adds 1.
    counter = ctypes.c_uint64(41)
    HOST_FN(native_increment)(ctypes.addressof(counter))
    HOST_FN(native_increment)(None)     # NULL data: nothing
    assert counter.value == 42


# ---- GPU ----------------------------------------------------------------------------------

class Counter:
    """An unsigned 64-bit counter in pinned memory."""

    def __init__(self):
        self.buf = PinnedBuffer(8)
        self.cell = ctypes.c_uint64.from_address(self.buf.ptr)
        self.cell.value = 0
        self.ptr = self.buf.ptr

    @property
    def value(self):
        return self.cell.value

    def close(self):
        self.buf.close()


@pytest.fixture
def counter():
    c = Counter()
    yield c
    c.close()


@pytest.mark.gpu
def test_native_address_runs_in_stream_order(stream, counter):
    before = streams.debug_counters()["native_calls_enqueued"]
    spin(stream, 100 * MS)
    stream.launch_host_func(native_increment, counter.ptr)
    stream.launch_host_func(native_increment, counter.ptr)
    assert counter.value == 0, "the native functions must wait for the spin"
    assert not stream.query()
    stream.synchronize()
    assert counter.value == 2
    # Nothing to keep: enqueued as the C call, without a record.
    assert streams.debug_counters()["native_calls_enqueued"] == before


@pytest.mark.gpu
def test_native_function_blocks_later_work(stream, counter):
    # A copy enqueued after the host function runs only once it returned:
    # the copy reads the counter the function wrote (1), not the 0 before.
    copy = PinnedBuffer(8)
    try:
        out = ctypes.c_uint64.from_address(copy.ptr)
        out.value = 99
        spin(stream, 50 * MS)
        stream.launch_host_func(native_increment, counter.ptr)
        assert counter.value == 0, "nothing ran yet"
        # (A copy between host buffers may run on the calling thread once
        # the stream reaches it: it is not asserted pending.)
        streams.memcpy_async(copy, counter.buf, 8, stream=stream)
        stream.synchronize()
        assert counter.value == 1
        assert out.value == 1, "the copy ran after the native function"
    finally:
        copy.close()


@pytest.mark.gpu
def test_ctypes_function_and_data_kept_until_the_call_ran(stream, counter):
    fn = HOST_FN(native_increment)
    data = ctypes.c_void_p(counter.ptr)
    owner = object()
    refs = (sys.getrefcount(fn), sys.getrefcount(data), sys.getrefcount(owner))
    live = streams.debug_counters()["live_native_calls"]
    spin(stream, 100 * MS)
    stream.launch_host_func(fn, data, owner=owner)
    assert streams.debug_counters()["live_native_calls"] == live + 1
    assert (sys.getrefcount(fn), sys.getrefcount(data), sys.getrefcount(owner)) != refs, \
        "the record holds what the call needs"
    stream.synchronize()
    assert counter.value == 1
    # The record's reference goes to the deferred queue on CUDA's thread
    # once fn has returned, which may be just after the synchronize.
    deadline = time.monotonic() + 5
    while ((sys.getrefcount(fn), sys.getrefcount(data), sys.getrefcount(owner)) != refs
           and time.monotonic() < deadline):
        streams._cudart._drain_deferred()
        gc.collect()
        time.sleep(0.01)
    assert streams.debug_counters()["live_native_calls"] == live
    assert (sys.getrefcount(fn), sys.getrefcount(data), sys.getrefcount(owner)) == refs


@pytest.mark.gpu
def test_ctypes_callback_of_python_function_runs_with_the_data_address(stream, counter):
    seen = []
    cb = HOST_FN(lambda p: seen.append(p))
    spin(stream, 20 * MS)
    stream.launch_host_func(cb, counter.ptr)
    stream.synchronize()
    assert seen == [counter.ptr]


@pytest.mark.gpu
def test_graph_native_node_runs_on_every_replay(stream, counter):
    fn = HOST_FN(native_increment)
    rc = sys.getrefcount(fn)
    g = Graph()
    g.add_host_node(fn, counter.ptr)
    g.add_host_node(native_increment, counter.ptr)   # an address: nothing kept
    ex = g.instantiate()
    g.close()
    del g
    for _ in range(5):
        ex.launch(stream)
    stream.synchronize()
    assert counter.value == 10
    assert sys.getrefcount(fn) > rc, "the executable still holds the function"
    ex.close()
    del ex
    stream.synchronize()
    # CUDA releases the executable's user object on its own thread, later.
    assert wait_for_refcount(fn, rc, timeout=5), \
        f"released once no graph or executable needs it ({sys.getrefcount(fn)} != {rc})"


@pytest.mark.gpu
def test_exec_set_host_node_switches_a_python_node_to_native(stream, counter):
    calls = []
    g = Graph()
    node = g.add_host_node(calls.append, "python")
    with g.instantiate() as ex:
        ex.launch(stream)
        stream.synchronize()
        ex.set_host_node(node, HOST_FN(native_increment), counter.ptr)
        ex.launch(stream)
        ex.launch(stream)
        stream.synchronize()
        ex.set_host_node(node, calls.append, "again")
        ex.launch(stream)
        stream.synchronize()
    g.close()
    assert calls == ["python", "again"]
    assert counter.value == 2


@pytest.mark.gpu
def test_captured_native_functions_replay(stream, counter):
    fn = HOST_FN(native_increment)
    rc = sys.getrefcount(fn)
    with stream.capture() as cap:
        stream.launch_host_func(fn, counter.ptr)              # kept by the graph
        stream.launch_host_func(native_increment, counter.ptr)
    graph = cap.graph
    assert counter.value == 0, "captured, not run"
    with graph.instantiate() as ex:
        for _ in range(3):
            ex.launch(stream)
        stream.synchronize()
    graph.close()
    assert counter.value == 6
    del graph, cap, ex
    stream.synchronize()
    gc.collect()
    # The graph's user object is released on CUDA's thread, later.
    assert wait_for_refcount(fn, rc, timeout=5), (sys.getrefcount(fn), rc)


@pytest.mark.gpu
def test_spin_wait_sync_mode_or_a_clear_refusal(stream, counter):
    driver = streams.driver_version()
    if driver >= 13010 and streams.runtime_version() >= 12050:
        spin(stream, 20 * MS)
        stream.launch_host_func(native_increment, counter.ptr, sync_mode="spin_wait")
        seen = []
        stream.launch_host_func(seen.append, 1, sync_mode=streams.HostFuncSyncMode.SPIN_WAIT)
        assert counter.value == 0
        stream.synchronize()
        assert counter.value == 1 and seen == [1]
        return
    # The GPU machine's 13.0 driver: refused, nothing enqueued.
    for cb, arg in ((native_increment, counter.ptr), (print, None)):
        with pytest.raises(NotImplementedError,
                           match=r"needs a driver for CUDA 13\.1 or newer .* this driver "
                                 r"supports CUDA \d+\.\d+"):
            stream.launch_host_func(cb, arg, sync_mode="spin_wait")
    stream.synchronize()
    assert counter.value == 0
    assert streams.debug_counters()["live_callbacks"] == 0


@pytest.mark.gpu
def test_many_native_calls_with_owners_leave_nothing(stream, counter):
    fn = HOST_FN(native_increment)
    live = streams.debug_counters()["live_native_calls"]
    for _ in range(2000):
        stream.launch_host_func(fn, counter.ptr)
    stream.synchronize()
    streams._cudart._drain_deferred()
    assert counter.value == 2000
    assert streams.debug_counters()["live_native_calls"] == live
