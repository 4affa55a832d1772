"""The call layer without a GPU: CudaError's fields, words and pickling, the
plain-words error where there is no driver or device, the debug counters,
and the switch of how producers of host callbacks give way."""
import pickle

import pytest

from _support import needs_no_gpu

import streams
from streams import CudaError, Event, Stream


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


def test_debug_counters_shape():
    c = streams.debug_counters()
    for key in ("live_streams", "live_events", "live_callbacks", "callbacks_enqueued"):
        assert isinstance(c[key], int)


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
