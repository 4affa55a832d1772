"""Behaviour that needs no GPU: import, errors, argument validation."""
import pickle
import sys

import pytest

from _support import run_python

import streams
from streams import CudaError, Event, Stream

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def test_import_and_version():
    assert streams.__version__
    assert streams.runtime_version() // 1000 in (12, 13)


def test_runtime_major_matches_the_distribution_name():
    import json
    from importlib.metadata import distribution, packages_distributions
    from pathlib import Path
    from urllib.parse import unquote, urlparse
    owners = set(packages_distributions().get("streams", ())) & {"cuda-streams",
                                                                 "cuda-streams-cu12"}
    if len(owners) != 1:
        pytest.skip(f"streams is not installed as one distribution here ({sorted(owners)})")
    # Only if the streams imported here is the one installed: a build in
    # place in another checkout (tools/gpu_matrix.sh's CUDA 12 copy) is
    # imported first from its own folder while another build is installed.
    dist = distribution(next(iter(owners)))
    root = Path(dist.locate_file("")).resolve()
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    if origin.get("dir_info", {}).get("editable"):
        root = Path(unquote(urlparse(origin["url"]).path)).resolve()
    here = Path(streams.__file__).resolve()
    if root not in here.parents:
        pytest.skip(f"the streams imported here ({here.parent}) is not the installed "
                    f"{dist.metadata['Name']} ({root})")
    expected = 12 if owners == {"cuda-streams-cu12"} else 13
    assert streams.runtime_version() // 1000 == expected, owners


def test_import_in_fresh_interpreter_prints_nothing():
    out = run_python("import streams", timeout=60)
    assert out.returncode == 0
    assert out.stdout == "" and out.stderr == ""


@needs_no_gpu
def test_no_gpu_plain_words_error():
    assert streams.device_count() == 0
    with pytest.raises(CudaError) as info:
        Stream()
    err = info.value
    assert err.name in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")
    assert "no NVIDIA driver found" in err.message or "no CUDA device" in err.message
    assert str(err).startswith(err.name + ": ")
    with pytest.raises(CudaError):
        Event()
    with pytest.raises(CudaError):
        streams.get_device()


def test_cuda_error_fields_and_pickle():
    err = CudaError(400)
    assert err.code == 400
    assert err.name == "cudaErrorInvalidResourceHandle"
    assert err.message == "invalid resource handle"
    assert str(err) == "cudaErrorInvalidResourceHandle: invalid resource handle"
    assert isinstance(err, RuntimeError)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is CudaError
    assert (again.code, again.name, again.message) == (err.code, err.name, err.message)
    assert again == err


def test_cuda_error_plain_words_for_driver_and_device():
    assert "no NVIDIA driver found" in CudaError(35).message
    assert CudaError(35).name == "cudaErrorInsufficientDriver"
    assert "no CUDA device" in CudaError(100).message
    assert CudaError(100).name == "cudaErrorNoDevice"


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


class _Proto:
    def __init__(self, value):
        self.value = value

    def __cuda_stream__(self):
        return self.value


@pytest.mark.parametrize("value, exc, text", [
    ((1, 2), ValueError, "unsupported __cuda_stream__ protocol version 1"),
    ([0, 2], ValueError, r"must return a \(version, handle\) tuple"),
    ((0,), ValueError, r"must return a \(version, handle\) tuple"),
    ((0, 1, 2), ValueError, r"must return a \(version, handle\) tuple"),
    (("0", 1), TypeError, "version must be an int"),
    ((0, "1"), TypeError, "handle must be an int"),
    ((0, 1.0), TypeError, "handle must be an int"),
    ((0, -5), ValueError, "does not fit in a pointer"),
])
def test_from_external_rejects_malformed_protocol(value, exc, text):
    with pytest.raises(exc, match=text):
        Stream.from_external(_Proto(value))


def test_from_external_protocol_and_fallbacks():
    p = _Proto((0, 2))
    s = Stream.from_external(p)
    assert s == Stream.per_thread and s.owner is p

    class TorchLike:
        cuda_stream = 1

    class CupyLike:
        ptr = 0

    assert Stream.from_external(TorchLike()) == Stream.legacy
    assert Stream.from_external(CupyLike()) == Stream.null
    assert Stream.from_external(Stream.legacy) is Stream.legacy
    with pytest.raises(TypeError, match="^obj must be a streams.Stream or an object with "
                                        r"__cuda_stream__, .cuda_stream or .ptr, not object$"):
        Stream.from_external(object())

    class BadPtr:
        ptr = "x"

    with pytest.raises(TypeError, match="BadPtr.ptr must be an int handle"):
        Stream.from_external(BadPtr())


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


def test_device_object_with_wrong_type():
    class CpuDevice:
        type = "cpu"
        index = None

    class BadIndex:
        index = "0"

    with pytest.raises(ValueError, match="is not a CUDA device"):
        Stream(device=CpuDevice())
    with pytest.raises(TypeError, match=r"device.index must be an int, got str"):
        Stream(device=BadIndex())


def test_event_rejects_timing_with_interprocess():
    with pytest.raises(ValueError, match="interprocess=True requires enable_timing=False"):
        Event(enable_timing=True, interprocess=True)


def test_event_from_ipc_handle_validates():
    with pytest.raises(TypeError, match="handle must be bytes"):
        Event.from_ipc_handle("x" * 64)
    with pytest.raises(ValueError, match="handle must be 64 bytes, got 3"):
        Event.from_ipc_handle(b"abc")


@pytest.mark.parametrize("call, exc, text", [
    (lambda: Event(device=True), TypeError,
     "device must be an int, 'cuda:N' or a device object, not bool"),
    (lambda: Event(device="cpu"), ValueError, "device='cpu' is not a CUDA device string"),
    (lambda: Event.from_ipc_handle(bytes(64), device=1.5), TypeError,
     "device must be None, an int"),
    (lambda: streams.can_access_peer(0, "cpu"), ValueError, "peer='cpu' is not a CUDA"),
    (lambda: streams.can_access_peer(0, True), TypeError, "peer must be an int"),
    (lambda: streams.enable_peer_access("gpu:x"), ValueError, "peer='gpu:x' is not a CUDA"),
    (lambda: streams.disable_peer_access([1]), TypeError, "peer must be None, an int"),
    (lambda: streams.enable_peer_access(None), ValueError, "peer is required"),
    (lambda: streams.can_access_peer(0, None), ValueError, "peer is required"),
])
def test_device_arguments_of_events_and_peers_checked_before_cuda(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


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


def test_get_include_has_header():
    import os
    inc = streams.get_include()
    assert os.path.isfile(os.path.join(inc, "streams", "streams.h"))


def test_debug_counters_shape():
    c = streams.debug_counters()
    for key in ("live_streams", "live_events", "live_callbacks", "callbacks_enqueued"):
        assert isinstance(c[key], int)


def test_show_config_reports_build_facts():
    import io
    out = io.StringIO()
    streams.show_config(out)
    text = out.getvalue()
    assert text.startswith(f"streams {streams.__version__}")
    v = streams.runtime_version()
    assert f"CUDA runtime (static): {v // 1000}.{v % 1000 // 10} ({v})" in text
    assert "built with Cython:" in text


@pytest.mark.parametrize("framework", ["torch", "paddle", "mindspore"])
def test_compat_elapsed_time_names_end_event_before_touching_cuda(framework):
    import importlib
    module = importlib.import_module(f"streams.compat.{framework}")
    event = module.Event.__new__(module.Event)     # no CUDA event behind it
    with pytest.raises(TypeError, match=r"end_event must be an Event \(a streams\.Event or any "
                                        r"streams\.compat Event\), not str"):
        event.elapsed_time("not an event")


def test_graph_node_objects_are_made_by_graphs_only():
    for cls, how in ((streams.ConditionHandle, "Graph.create_condition"),
                     (streams.GraphAllocation, "Graph.add_mem_alloc")):
        with pytest.raises(TypeError, match=how):
            cls()


def test_condition_kernels_ship_as_their_own_ptx_module():
    from streams._launch import builtin_ptx

    ptx = builtin_ptx("conditional")
    # The driver resolves this call at load: kept out of builtin.ptx, whose
    # kernels must load on any driver.
    assert ".extern .func cudaGraphSetConditional" in ptx
    assert ".entry streams_set_condition(" in ptx and ".entry streams_set_condition_lt(" in ptx
    assert "cudaGraphSetConditional" not in builtin_ptx()
    with pytest.raises(ValueError, match="no built-in PTX module 'nope'"):
        builtin_ptx("nope")


def test_builtin_kernel_names_without_gpu():
    from streams._launch import builtin_kernel

    with pytest.raises(ValueError, match="set_condition_lt"):
        builtin_kernel("set_condition_gt")


def test_condition_default_without_reset_is_refused_before_cuda():
    # CUDA applies a condition's default at every launch
    # (cudaGraphCondAssignDefault, reset=True) or never: a default that
    # reset=False would silently drop is a ValueError, before any CUDA call.
    g = streams.Graph.__new__(streams.Graph)
    with pytest.raises(ValueError, match="default=3 needs reset=True"):
        g.create_condition(3, reset=False)
    with pytest.raises(ValueError, match="never initialised|closed"):
        g.create_condition(0, reset=False)


def test_producers_giving_way_is_on_by_default_and_switches():
    # src/cudart/hostfn.h: producers of host callbacks from several threads
    # let a callback waiting for the GIL take it first; the probe
    # (benchmarks/probes/host_func_threads_breakdown.py) times it both ways.
    from streams import _cudart
    assert _cudart._producers_yield() is True
    try:
        assert _cudart._producers_yield(False) is True
        assert _cudart._producers_yield() is False
        assert _cudart._producers_yield(True) is False
    finally:
        _cudart._producers_yield(True)
    assert _cudart._producers_yield() is True
