"""A native host function's data given as ctypes.byref(x, offset), without
a GPU: the address of x plus the offset, the byref object kept, other
ctypes arguments refused.  The GPU half is test_native_host_byref_gpu.py."""
import ctypes

import pytest

import streams
from streams import Stream
from streams._hostcall import _native_host_func
from streams.testing import native_increment


# ---- native host functions: ctypes.byref ------------------------------------------------------

def test_byref_is_native_data_at_its_address_and_keeps_its_object():
    """ctypes.byref(x, offset) is the address of x plus offset, and what is
    kept (until the call has run) is the byref object, which holds x.
    The failure it catches: TypeError "must be None, an int address or a
    ctypes/cffi pointer, not CArgObject", while the refusal of a ctypes
    scalar tells the user to pass ctypes.byref(x)."""
    words = (ctypes.c_uint64 * 2)()
    for offset in (0, 8):
        ref = ctypes.byref(words, offset)
        fn, data, keep = _native_host_func(native_increment, ref, owner="o")
        assert (fn, data) == (native_increment, ctypes.addressof(words) + offset)
        assert keep[0] is ref and keep[1] == "o"
        assert keep[0]._obj is words, "the byref object keeps what it points into"
    # The advice of the refusal of a scalar is an accepted form.
    with pytest.raises(TypeError, match=r"pass ctypes.byref\(x\)"):
        _native_host_func(native_increment, ctypes.c_uint64(0))
    fn, data, keep = _native_host_func(native_increment, ctypes.byref(ctypes.c_uint64(0)))
    assert data != 0 and keep is not None


def test_a_ctypes_parameter_that_is_not_a_pointer_is_refused():
    """The other CArgObjects (from_param of a simple type) carry a value,
    not an address."""
    with pytest.raises(TypeError, match="is not a pointer"):
        _native_host_func(native_increment, ctypes.c_int.from_param(5))


def test_byref_reaches_cuda_from_launch_host_func():
    """The whole call takes it: here (no GPU) it gets as far as CUDA."""
    counter = ctypes.c_uint64(0)
    if streams.device_count() > 0:
        pytest.skip("the GPU half (test_native_host_byref_gpu.py) runs the function")
    with pytest.raises(streams.CudaError):
        Stream.legacy.launch_host_func(native_increment, ctypes.byref(counter))
