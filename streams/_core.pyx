# cython: language_level=3
# The one extension module of `streams`: it links the static CUDA runtime,
# so every class lives here (one copy of cudart per process).  Each concept
# has its own source file, included below in dependency order; the C-level
# class declarations are in _core.pxd.

cimport cython
import os as _os
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from streams.cudart cimport *

include "_shim.pxi"
include "_errors.pxi"
include "_device.pxi"
include "_callbacks.pxi"
include "_debug.pxi"
include "_event.pxi"
include "_stream.pxi"
include "_kernels.pxi"
include "_graph.pxi"
include "_memory.pxi"
include "_module.pxi"
include "_attributes.pxi"
