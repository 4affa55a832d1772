"""Streams and events without a GPU: the default streams, wrapped handles,
and the arguments and objects refused before CUDA is called."""
import sys

import pytest

from streams import Event, Stream


def test_special_streams_are_singletons():
    assert Stream.legacy is Stream.legacy
    assert Stream.legacy.handle == 1
    assert Stream.per_thread.handle == 2
    assert Stream.null.handle == 0
    assert Stream.null.ptr == 0
    assert Stream.legacy.device_id == -1
    assert Stream.legacy.__cuda_stream__() == (0, 1)
    # close() never destroys a default stream
    Stream.legacy.close()
    assert not Stream.legacy.closed
    assert "legacy" in repr(Stream.legacy)


def test_from_handle_special_handles_compare_equal():
    assert Stream.from_handle(0) == Stream.null
    assert Stream.from_handle(1) == Stream.legacy
    assert hash(Stream.from_handle(2)) == hash(Stream.per_thread)
    assert Stream.from_handle(1) != Stream.null


def test_from_handle_keeps_owner_alive():
    class Owner:
        pass

    owner = Owner()
    before = sys.getrefcount(owner)
    s = Stream.from_handle(1, owner=owner)
    assert s.owner is owner
    assert sys.getrefcount(owner) == before + 1
    del s
    assert sys.getrefcount(owner) == before


@pytest.mark.parametrize("bad, exc, text", [
    ("1", TypeError, "ptr must be an int"),
    (1.5, TypeError, "ptr must be an int"),
    (True, TypeError, "ptr must be an int"),
    (-1, ValueError, "does not fit in a pointer"),
    (2 ** 64, ValueError, "does not fit in a pointer"),
])
def test_from_handle_rejects_bad_ptr(bad, exc, text):
    with pytest.raises(exc, match=text):
        Stream.from_handle(bad)


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"priority": "high"}, TypeError, "priority must be an int"),
    ({"priority": 1.0}, TypeError, "priority must be an int"),
    ({"priority": True}, TypeError, "priority must be an int"),
    ({"device": 1.0}, TypeError, "device must be None, an int"),
    ({"device": True}, TypeError, "device must be an int, 'cuda:N' or a device object, not bool"),
    ({"device": "cpu"}, ValueError, "is not a CUDA device string"),
    ({"device": "cuda:x"}, ValueError, "is not a CUDA device string"),
    ({"device": [0]}, TypeError, "device must be None, an int"),
])
def test_stream_rejects_bad_arguments(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        Stream(**kwargs)


def test_event_rejects_timing_with_interprocess():
    with pytest.raises(ValueError, match="interprocess=True requires enable_timing=False"):
        Event(enable_timing=True, interprocess=True)


def test_event_from_ipc_handle_validates():
    with pytest.raises(TypeError, match="handle must be bytes"):
        Event.from_ipc_handle("x" * 64)
    with pytest.raises(ValueError, match="handle must be 64 bytes, got 3"):
        Event.from_ipc_handle(b"abc")


def test_uninitialised_subclass_is_unusable():
    class Lazy(Stream):
        def __init__(self):
            pass  # forgot super().__init__()

    s = Lazy()
    with pytest.raises(ValueError, match="closed Stream \\(or one never initialised\\)"):
        s.query()
    s.close()  # still harmless


def test_methods_reject_wrong_types_without_gpu():
    with pytest.raises(TypeError, match="event must be a streams.Event or a PyTorch, CuPy, "
                                        "cuda.core or numba-cuda event, not int"):
        Stream.legacy.wait_event(3)
    with pytest.raises(TypeError, match="other must be a streams.Stream, a PyTorch or CuPy stream, "
                                        "or an object with __cuda_stream__, not str"):
        Stream.legacy.wait_stream("s")
    with pytest.raises(TypeError, match="callback must be callable, not str"):
        Stream.legacy.launch_host_func("f")
    # An int is a native function's address: a small one is refused before CUDA.
    with pytest.raises(ValueError, match="callback=0x5 is not a function address"):
        Stream.legacy.launch_host_func(5)
    with pytest.raises(TypeError, match="callback must be callable, not NoneType"):
        Stream.legacy.add_callback(None)
    with pytest.raises(TypeError, match="event must be a streams.Event, not str"):
        Stream.legacy.record("e")
