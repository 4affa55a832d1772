import gc

import pytest

import streams

GPU_COUNT = streams.device_count()
NO_GPU_REASON = (
    "no CUDA GPU here (streams.device_count() == 0, driver version "
    f"{streams.driver_version()}): GPU tests run on the device machine via tools/gpu_suite.sh"
)


def pytest_collection_modifyitems(config, items):
    if GPU_COUNT:
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_leaked_handles(request):
    """Every GPU test must give back the handles and callback payloads it made."""
    if "gpu" not in request.keywords:
        yield
        return
    gc.collect()
    before = streams.debug_counters()
    yield
    gc.collect()
    after = streams.debug_counters()
    for key in ("live_streams", "live_events", "live_callbacks"):
        assert after[key] == before[key], (
            f"{key} went from {before[key]} to {after[key]} in {request.node.name}")


@pytest.fixture
def stream():
    s = streams.Stream()
    yield s
    s.synchronize()
    s.close()
