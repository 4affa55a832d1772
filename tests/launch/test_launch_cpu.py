"""Extended launches without a GPU: what a LaunchConfig holds, its argument
checks and its immutability."""
import pytest

from streams import LaunchConfig


# ---- LaunchConfig ----------------------------------------------------------------------------

def test_launch_config_holds_what_it_was_given():
    cfg = LaunchConfig((4, 2), 128, 1024, cluster=2, cooperative=True,
                       programmatic_stream_serialization=True, priority=-1,
                       mem_sync_domain="Remote")
    assert cfg.grid == (4, 2, 1) and cfg.block == (128, 1, 1) and cfg.shared_mem == 1024
    assert cfg.cluster == (2, 1, 1) and cfg.cooperative is True
    assert cfg.programmatic_stream_serialization is True
    assert cfg.priority == -1 and cfg.mem_sync_domain == "remote"
    assert cfg.programmatic_event is None and cfg.completion_event is None
    assert "cluster=(2, 1, 1)" in repr(cfg) and "priority=-1" in repr(cfg)
    plain = LaunchConfig(1, 1)
    assert plain.cluster is None and plain.priority is None and plain.mem_sync_domain is None
    assert repr(plain) == "LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1))"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"grid": 0}, ValueError, "grid"),
    ({"block": "x"}, TypeError, "block"),
    ({"shared_mem": -1}, ValueError, "shared_mem must be >= 0"),
    ({"cluster": (1, 2, 3, 4)}, TypeError, "cluster must be an int or a tuple"),
    ({"cooperative": "yes"}, TypeError, "cooperative must be a bool"),
    ({"priority": "high"}, TypeError, "priority must be an int"),
    ({"mem_sync_domain": "local"}, ValueError, "mem_sync_domain must be 'default', 'remote'"),
    ({"trigger_at_block_start": True}, ValueError, "needs a programmatic_event"),
    ({"completion_event": object()}, TypeError, "completion_event must be a streams.Event"),
])
def test_launch_config_arguments(kwargs, error, message):
    args = {"grid": 1, "block": 1}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        LaunchConfig(**args)


def test_launch_config_is_immutable():
    cfg = LaunchConfig(1, 1)
    with pytest.raises(AttributeError):
        cfg.priority = 3


# ---- the built-in kernels -----------------------------------------------------------------

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
