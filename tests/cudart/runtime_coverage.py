"""Which ``streams`` call reaches each function of the CUDA runtime's
stream-management chapter (the 26 functions of CUDA 12.x's reference), and
each graph-management function of conditional nodes, memory nodes and node
by node updates of executables (``RUNTIME_GRAPH_FUNCTIONS``).

``tests/cudart/test_coverage.py`` checks that every entry resolves to a real
attribute, that the function is really called in the sources, and that the
table in ``docs/runtime-coverage.rst`` matches this list.  It lives beside
them, not in the package: nothing installed reads it.
"""
import re

_MERGED = "CUDA 13 merged {} into the base name; src/cuda_versions.h picks it on CUDA 12"

#: (runtime function, streams API, note)
_TABLE = [
    ("cudaCtxResetPersistingL2Cache", "streams.reset_persisting_l2_cache", ""),
    ("cudaStreamAddCallback", "Stream.add_callback", ""),
    ("cudaStreamAttachMemAsync", "Stream.attach_mem_async", ""),
    ("cudaStreamBeginCapture", "Stream.begin_capture", "also Stream.capture()"),
    ("cudaStreamBeginCaptureToGraph", "Stream.begin_capture_to_graph", ""),
    ("cudaStreamCopyAttributes", "Stream.copy_attributes", ""),
    ("cudaStreamCreate", "Stream", "Stream() with the default priority and flags"),
    ("cudaStreamCreateWithFlags", "Stream", "Stream(non_blocking=True)"),
    ("cudaStreamCreateWithPriority", "Stream",
     "Stream(priority=p) with p above the lowest priority"),
    ("cudaStreamDestroy", "Stream.close", "and garbage collection"),
    ("cudaStreamEndCapture", "Stream.end_capture", ""),
    ("cudaStreamGetAttribute", "Stream.get_attribute", ""),
    ("cudaStreamGetCaptureInfo", "Stream.capture_info", ""),
    ("cudaStreamGetCaptureInfo_v3", "Stream.capture_info", _MERGED.format("_v3")),
    ("cudaStreamGetDevice", "Stream.device", ""),
    ("cudaStreamGetFlags", "Stream.flags", "and Stream.non_blocking"),
    ("cudaStreamGetId", "Stream.id", ""),
    ("cudaStreamGetPriority", "Stream.priority", ""),
    ("cudaStreamIsCapturing", "Stream.is_capturing", "and Stream.capture_status"),
    ("cudaStreamQuery", "Stream.query",
     "and Stream.done; Stream.synchronize polls it so that Ctrl-C works"),
    ("cudaStreamSetAttribute", "Stream.set_attribute", ""),
    ("cudaStreamSynchronize", "Stream.c_synchronize",
     "the nogil C-level method for cimporters; Python's Stream.synchronize waits "
     "interruptibly instead"),
    ("cudaStreamUpdateCaptureDependencies", "Stream.update_capture_dependencies", ""),
    ("cudaStreamUpdateCaptureDependencies_v2", "Stream.update_capture_dependencies",
     _MERGED.format("_v2")),
    ("cudaStreamWaitEvent", "Stream.wait_event", "and Stream.wait_stream, Event.wait"),
    ("cudaThreadExchangeStreamCaptureMode", "streams.exchange_capture_mode",
     "and the streams.capture_mode() context manager"),
]

#: (runtime function, the function actually called in CUDA 13, streams API, note).
#: The one called is the runtime function itself, but for the _vN variants
#: that CUDA 13 merged into their base names.
RUNTIME_STREAM_FUNCTIONS = [(name, re.sub(r"_v\d+$", "", name), api, note)
                            for name, api, note in _TABLE]

_NODE_PARAMS = "CUDA 13 added edge data to it (CUDA 12.3's _v2); src/cuda_versions.h passes none"

#: (runtime function, streams API, note): graph nodes and updates.
_GRAPH_TABLE = [
    ("cudaDeviceGetGraphMemAttribute", "streams.graph_memory_info", ""),
    ("cudaDeviceGraphMemTrim", "streams.trim_graph_memory", ""),
    ("cudaDeviceSetGraphMemAttribute", "streams.reset_graph_memory_high",
     "the two high watermarks"),
    ("cudaGraphAddMemAllocNode", "Graph.add_mem_alloc", ""),
    ("cudaGraphAddMemFreeNode", "Graph.add_mem_free", ""),
    ("cudaGraphAddNode", "Graph.add_if",
     "and add_if_else, add_while, add_switch; " + _NODE_PARAMS),
    ("cudaGraphConditionalHandleCreate", "Graph.create_condition", ""),
    ("cudaGraphDestroyNode", "Graph.add_kernel_node",
     "removes a kernel node whose launch attributes CUDA refused"),
    ("cudaGraphExecChildGraphNodeSetParams", "GraphExec.set_child_graph_node", ""),
    ("cudaGraphExecEventRecordNodeSetEvent", "GraphExec.set_event_record_node", ""),
    ("cudaGraphExecEventWaitNodeSetEvent", "GraphExec.set_event_wait_node", ""),
    ("cudaGraphExecHostNodeSetParams", "GraphExec.set_host_node", ""),
    ("cudaGraphExecKernelNodeSetParams", "GraphExec.set_kernel_node", ""),
    ("cudaGraphExecMemcpyNodeSetParams1D", "GraphExec.set_memcpy_node", ""),
    ("cudaGraphExecMemsetNodeSetParams", "GraphExec.set_memset_node", ""),
    ("cudaGraphKernelNodeSetAttribute", "Graph.add_kernel_node", "cluster= and cooperative="),
    ("cudaGraphNodeGetEnabled", "GraphExec.is_enabled", ""),
    ("cudaGraphNodeSetEnabled", "GraphExec.set_enabled", ""),
    ("cudaGraphReleaseUserObject", "Graph.instantiate",
     "and GraphExec.update: the executable alone owns what node updates need"),
]

#: (runtime function, the function called, streams API, note), as above.
RUNTIME_GRAPH_FUNCTIONS = [(name, name, api, note) for name, api, note in _GRAPH_TABLE]
