"""Every test of the semaphore folder gives back the semaphores it made
(streams.debug_counters()["live_semaphores"]); tests/conftest.py's leak
check covers the GPU tests' other handles."""
import gc

import pytest

import streams


@pytest.fixture(autouse=True)
def no_leaked_semaphores():
    gc.collect()
    before = streams.debug_counters()["live_semaphores"]
    yield
    gc.collect()
    after = streams.debug_counters()["live_semaphores"]
    assert after == before, f"live_semaphores went from {before} to {after}"
