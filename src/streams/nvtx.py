"""NVTX annotations for Nsight Systems and other NVTX tools (docs/nvtx.rst).

``with streams.nvtx.range("decode", color="green"):`` marks a span of this
thread's time; ``@streams.nvtx.range()`` does it for each call of a
function; :func:`mark` marks an instant; ``domain=`` groups annotations
under a name (made once, kept for the process).  Streams and events take
names (``Stream(name="io")``, ``event.name = "ready"``), devices too
(:func:`name_device`).  :func:`trace_calls` puts a range around each of the
package's own operations (synchronize, record, wait, launch, copy, ...).

With no tool attached, each call costs a load and a branch; in a build
without the NVTX headers (:data:`available` False) each does nothing.
Cython code calls ``nvtx_range_push``/``nvtx_range_pop``/``nvtx_mark``
without the GIL (``from streams._nvtx cimport ...``; docs/cython.rst).
"""
from streams import _args
from streams._nvtx import (Range, available, mark, name_category, name_device, pop, push,
                           trace_calls, tracing_calls)

#: ``range(message=None, *, color=None, domain=None, category=None)``: a
#: context manager and decorator (:class:`Range`).
range = Range

_args._make_public(Range, __name__)

__all__ = ["Range", "available", "mark", "name_category", "name_device", "pop", "push", "range",
           "trace_calls", "tracing_calls"]
