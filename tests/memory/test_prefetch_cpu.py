"""prefetch, discard, discard_and_prefetch, advise and managed_range_info
without a GPU: each argument is checked, and named, before any CUDA call
(tests/memory/test_prefetch_gpu.py moves the pages)."""
import pytest

import streams

RANGE = (0x10000, 4096)     # a raw (address, nbytes) range: never reached without a GPU


@pytest.mark.parametrize("location, error, match", [
    ("nowhere", ValueError, "location must be a device, 'host'"),
    (2.5, TypeError, "location must be a device, 'host'"),
    (("host_numa",), ValueError, r"a tuple location is \('host_numa', node\)"),
    (("numa", 0), ValueError, r"a tuple location is \('host_numa', node\)"),
    (("host_numa", -1), ValueError, "a host NUMA node is an int >= 0"),
    (("host_numa", True), ValueError, "a host NUMA node is an int >= 0"),
    (("host_numa", 1.0), ValueError, "a host NUMA node is an int >= 0"),
    (None, TypeError, "location must be a device, 'host'.*not None"),
])
def test_a_bad_location_is_named(location, error, match):
    with pytest.raises(error, match=match):
        streams.prefetch(RANGE, location)
    with pytest.raises(error, match=match):
        streams.discard_and_prefetch(RANGE, location)
    with pytest.raises(error, match=match):
        streams.advise(RANGE, "preferred_location", location)


def test_a_bad_advice_is_named():
    for advice in ("mostly_read", None, 1):
        with pytest.raises(ValueError, match="advice must be one of read_mostly"):
            streams.advise(RANGE, advice)
    with pytest.raises(ValueError, match="advice 'read_mostly' takes no location"):
        streams.advise(RANGE, "read_mostly", 0)


def test_an_empty_batch_is_refused():
    for op in (lambda b: streams.prefetch(b, "host"), streams.discard,
               lambda b: streams.discard_and_prefetch(b, "host")):
        for empty in ([], ()):
            with pytest.raises(ValueError, match="buffers is empty"):
                op(empty)


def test_memory_is_checked_before_the_stream_or_cuda():
    with pytest.raises(TypeError, match="buffers must be memory"):
        streams.discard(None)
    with pytest.raises(TypeError, match=r"buffers\[1\] must be memory"):
        streams.prefetch([RANGE, None], "host")


def test_a_discard_needs_writable_memory():
    # A discard makes the contents unspecified: read-only memory is refused.
    for op in (streams.discard, lambda b: streams.discard_and_prefetch(b, "host")):
        with pytest.raises(TypeError, match="writable"):
            op(b"abcd")


def test_a_numpy_count_makes_a_pair():
    # (memory, nbytes) with a numpy integer is one range (named "buffers"),
    # not two (named "buffers[0]" and "buffers[1]").
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"^buffers must be memory"):
        streams.prefetch((None, np.int64(8)), "host")
    with pytest.raises(TypeError, match=r"^buffers\[0\] must be memory"):
        streams.prefetch((None, np.int64(-8)), "host")     # not a count: two items


@pytest.mark.skipif(streams.runtime_version() >= 13000,
                    reason="a CUDA 13 build has the batched discard (the cuda12 row runs this)")
def test_a_discard_without_the_batch_api_is_refused_before_any_stream():
    # The CUDA 12 build: refused before the stream is looked at or an array
    # resolved (which could leave a wait on the stream for its producer),
    # so with no driver too.
    for op in (streams.discard, lambda b: streams.discard_and_prefetch(b, "host")):
        with pytest.raises(NotImplementedError, match=r"needs CUDA 13\.0 or newer.*"
                                                      r"uses the CUDA 12\.\d runtime"):
            op(bytearray(8))
