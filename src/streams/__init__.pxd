# `cimport streams` / `from streams cimport Stream, Event, ...` for other
# Cython projects: every class with a C-level API.  Add streams.get_include()
# to the extension's include_dirs; no CUDA headers are needed.
from streams._stream cimport Event, Stream, streams_event_t, streams_host_fn_t, streams_stream_t
from streams._graph cimport Graph, GraphExec, streams_graph_exec_t, streams_graph_t
from streams._launch cimport Kernel, PreparedLaunch
# NVTX ranges and marks without the GIL (docs/nvtx.rst, "From Cython").
from streams._nvtx cimport nvtx_domain, nvtx_mark, nvtx_range_pop, nvtx_range_push
