"""A native host function's data given as ctypes.byref, on the GPU: the
function writes where the byref points (with its offset), and the byref
object is kept until the function has run.  The CPU half is
test_native_host_byref_cpu.py."""
import ctypes
import sys

import pytest

from _support import MS, closing, wait_for_refcount

from streams import Stream
from streams.testing import native_increment, spin


pytestmark = pytest.mark.gpu


# ---- native host function data through ctypes.byref ----------------------------------------

def test_byref_data_is_written_where_it_points_and_kept_until_run():
    """native_increment adds 1 to the word its data points to: given
    ctypes.byref(words, 8), the second word counts the calls and the first
    stays 0; a byref of an object nobody else holds keeps it until the
    function has run (its reference count)."""
    words = (ctypes.c_uint64 * 2)()
    with closing(Stream(non_blocking=True)) as s:
        for _ in range(3):
            s.launch_host_func(native_increment, ctypes.byref(words, 8))
        s.synchronize()
        assert (words[0], words[1]) == (0, 3)
        lone = ctypes.c_uint64(0)
        base = sys.getrefcount(lone)
        spin(s, 200 * MS)
        s.launch_host_func(native_increment, ctypes.byref(lone))
        assert sys.getrefcount(lone) > base, "the byref object (holding lone) is kept"
        s.synchronize()
        assert wait_for_refcount(lone, base), "the byref object is let go once it has run"
        assert lone.value == 1
