"""What tools and people see of the package: every public class says it is
``streams.<Name>`` (reprs, tracebacks, pickles, argument errors) and has a
signature that ``inspect`` reads (IDEs, ``help``, Sphinx).  No GPU needed."""
import inspect
import pickle

import pytest

import streams
from _support import run_python

PUBLIC_CLASSES = sorted(name for name in streams.__all__
                        if isinstance(getattr(streams, name), type))


def test_there_are_public_classes():
    assert {"Stream", "Event", "CudaError", "Graph", "DeviceBuffer"} <= set(PUBLIC_CLASSES)


@pytest.mark.parametrize("name", PUBLIC_CLASSES)
def test_public_classes_report_the_package_as_their_module(name):
    cls = getattr(streams, name)
    assert cls.__module__ == "streams"
    assert cls.__name__ == cls.__qualname__ == name
    if not issubclass(cls, streams.StreamsEnum):    # enums' reprs say <enum 'Name'>
        assert repr(cls) == f"<class 'streams.{name}'>"


@pytest.mark.parametrize("name", PUBLIC_CLASSES)
def test_public_classes_have_a_signature(name):
    cls = getattr(streams, name)
    sig = inspect.signature(cls)
    assert str(sig).startswith("(")
    if not cls.__flags__ & (1 << 9):       # not a heap type: a Cython class
        # Its signature is the docstring's first line, which help() shows
        # once (as the signature, no longer as the docstring's start).
        assert cls.__text_signature__ is not None
        assert not (cls.__doc__ or "").startswith(f"{name}(")


@pytest.mark.parametrize("cls, expected", [
    (streams.Stream, "(device=None, priority=0, non_blocking=False, *, name=None)"),
    (streams.Event, "(enable_timing=False, blocking=False, interprocess=False, device=None, *, "
                    "name=None)"),
    (streams.StreamPool, "(device=None, priority=0, non_blocking=False, *, maxsize=16)"),
    (streams.EventPool, "(enable_timing=False, blocking=False, device=None, *, maxsize=64)"),
    (streams.DeviceBuffer, "(nbytes, stream=None)"),
    (streams.Device, "(device=None)"),
    (streams.Graph, "()"),
    (streams.CudaError, "(code, name=None, message=None)"),
    (streams.HostCallbackError, "(*args)"),
    (streams.CudaWarning, "(*args)"),
])
def test_signatures_are_the_constructors(cls, expected):
    assert str(inspect.signature(cls)) == expected


def test_a_traceback_names_streams_cuda_error():
    result = run_python("import streams; raise streams.CudaError(2)", timeout=60)
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1].startswith(
        "streams.CudaError: cudaErrorMemoryAllocation: "), result.stderr


def test_exceptions_pickle_by_their_public_name():
    for exc in (streams.CudaError(2), streams.HostCallbackError("callback raised"),
                streams.CudaWarning("destroy failed"), streams.CompileError("bad", log="line 1")):
        data = pickle.dumps(exc)
        assert b"streams._" not in data, data
        back = pickle.loads(data)
        assert type(back) is type(exc) and back.args == exc.args
    err = pickle.loads(pickle.dumps(streams.CudaError(2)))
    assert err == streams.CudaError(2) and err.code == 2
    # Pickles made before the classes said "streams" name the extension,
    # which still holds the same class.
    assert streams._cudart.CudaError is streams.CudaError
    old = pickle.dumps(streams.CudaError(2), protocol=0).replace(
        b"cstreams\nCudaError", b"cstreams._cudart\nCudaError")
    assert b"streams._cudart" in old and pickle.loads(old) == streams.CudaError(2)


def test_enum_members_pickle_by_their_public_name():
    for member in (streams.CaptureMode.RELAXED, streams.NodeType.KERNEL):
        assert pickle.loads(pickle.dumps(member)) is member


def test_argument_errors_name_the_public_class():
    with pytest.raises(TypeError, match=r"expected streams\.Stream, got str"):
        streams._graph.capture_info("not a stream")


def test_a_subclass_still_says_what_closed():
    # raise_closed names the streams class in the MRO: public classes now
    # report "streams" as their module, private ones their extension.
    class MyEvent(streams.Event):
        pass

    with pytest.raises(ValueError, match=r"operation on a closed Event \(or one never "):
        MyEvent.__new__(MyEvent).query()


def test_the_compat_classes_keep_their_own_module():
    from streams.compat import cupy
    assert cupy.Stream.__module__ == "streams.compat.cupy"
    assert issubclass(cupy.Stream, streams.Stream)
