"""Stream.sm_count without a GPU: decided by the stream, never by the type
or module of its owner.  test_green_release_gpu.py checks wrapped green
streams on the GPU."""
import pytest

from streams import GreenContext, SmPartition, Stream


# ---- Stream.sm_count: the stream decides --------------------------------------------------

class _LooksGreen:
    """An owner whose type claims the green module's name."""


_LooksGreen.__module__ = "streams._green"


def _outcome(fn):
    try:
        return ("value", fn())
    except Exception as exc:
        return ("raises", type(exc))


@pytest.mark.parametrize("make_owner", [
    lambda: GreenContext.__new__(GreenContext),
    lambda: SmPartition.__new__(SmPartition),
    _LooksGreen,
], ids=["GreenContext", "SmPartition", "module-named-green"])
def test_sm_count_is_decided_by_the_stream_not_its_owner(make_owner):
    """A wrapper of the legacy stream answers as the legacy stream does,
    whatever its owner is (here: no driver, the same CudaError; on a GPU,
    the device's SMs), never the owner's type's module: an owner of
    streams._green other than the private handle would raise
    AttributeError from the property."""
    expected = _outcome(lambda: Stream.legacy.sm_count)
    wrapped = Stream.from_handle(1, owner=make_owner())
    got = _outcome(lambda: wrapped.sm_count)
    assert got == expected
    assert got[1] is not AttributeError
