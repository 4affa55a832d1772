"""Green contexts without a GPU: construction refused, objects made with
__new__ refusing every use, a closed context's errors, the argument checks
that come before CUDA, and the refusal where the driver has no green
contexts."""
import pytest

import streams
from streams import GreenContext, SmPartition, SmResource

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-driver path; a GPU is present")


@pytest.mark.parametrize("cls, hint", [(SmPartition, "split_sm"), (SmResource, "sm_resource")])
def test_data_classes_are_made_by_the_device_only(cls, hint):
    with pytest.raises(TypeError, match=f"cannot be instantiated directly; .*{hint}"):
        cls()


def test_a_partition_made_with_new_is_refused():
    p = SmPartition.__new__(SmPartition)
    assert "never initialised" in repr(p)
    with pytest.raises(ValueError, match="not made by Device.split_sm"):
        p.sm_count
    with pytest.raises(ValueError, match="not made by Device.split_sm"):
        GreenContext(p)


def test_green_context_checks_its_partition_argument():
    with pytest.raises(TypeError, match="partition must be a streams.SmPartition"):
        GreenContext(3)
    with pytest.raises(TypeError, match="partition must be a streams.SmPartition"):
        GreenContext(None)


def test_green_context_made_with_new_acts_closed():
    ctx = GreenContext.__new__(GreenContext)
    assert ctx.closed
    assert "closed" in repr(ctx)
    for use in (lambda: ctx.create_stream(), lambda: ctx.sm_count, lambda: ctx.device,
                lambda: ctx.__enter__()):
        with pytest.raises(ValueError, match="closed GreenContext"):
            use()
    ctx.close()
    ctx.close()
    assert ctx.partition is None


def test_create_stream_checks_arguments_before_the_context():
    ctx = GreenContext.__new__(GreenContext)
    with pytest.raises(TypeError, match="priority must be an int"):
        ctx.create_stream(priority=1.5)
    with pytest.raises(ValueError, match="non_blocking must be True"):
        ctx.create_stream(non_blocking=False)


def test_internal_handle_cannot_be_made():
    from streams._green import _GreenHandle
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        _GreenHandle()
    h = _GreenHandle.__new__(_GreenHandle)
    del h      # a NULL context: nothing released


def test_split_checks_argument_types_first():
    from streams._green import _split_sm
    with pytest.raises(TypeError, match="count must be an int"):
        _split_sm(0, "8", None)
    with pytest.raises(TypeError, match="groups must be an int"):
        _split_sm(0, 8, 2.0)
    with pytest.raises(ValueError, match="groups must be >= 1"):
        _split_sm(0, 8, 0)


@needs_no_gpu
def test_without_a_driver_green_contexts_are_refused_naming_the_versions():
    from streams._green import _sm_resource, _split_sm
    for call in (lambda: _sm_resource(0), lambda: _split_sm(0, 8, None)):
        with pytest.raises(NotImplementedError,
                           match=r"green contexts need a driver for CUDA 12\.5 or newer.*"
                                 r"this driver supports CUDA 0\.0"):
            call()


def test_counters_count_green_contexts():
    c = streams.debug_counters()
    for key in ("green_contexts_created", "green_contexts_destroyed", "live_green_contexts"):
        assert isinstance(c[key], int)
    assert c["live_green_contexts"] == 0
