"""Which ``streams`` call reaches each function of the CUDA runtime's
stream-management chapter (the 26 functions of CUDA 12.x's reference).

``tests/test_coverage.py`` checks that every entry resolves to a real
attribute, that the function is really called in the sources, and that the
table in ``docs/runtime-coverage.rst`` matches this list.  It lives beside
them, not in the package: nothing installed reads it.
"""

#: (runtime function, the function actually called in CUDA 13, streams API, note)
RUNTIME_STREAM_FUNCTIONS = [
    ("cudaCtxResetPersistingL2Cache", "cudaCtxResetPersistingL2Cache",
     "streams.reset_persisting_l2_cache", ""),
    ("cudaStreamAddCallback", "cudaStreamAddCallback", "Stream.add_callback", ""),
    ("cudaStreamAttachMemAsync", "cudaStreamAttachMemAsync", "Stream.attach_mem_async", ""),
    ("cudaStreamBeginCapture", "cudaStreamBeginCapture", "Stream.begin_capture",
     "also Stream.capture()"),
    ("cudaStreamBeginCaptureToGraph", "cudaStreamBeginCaptureToGraph",
     "Stream.begin_capture_to_graph", ""),
    ("cudaStreamCopyAttributes", "cudaStreamCopyAttributes", "Stream.copy_attributes", ""),
    ("cudaStreamCreate", "cudaStreamCreate", "Stream",
     "Stream() with the default priority and flags"),
    ("cudaStreamCreateWithFlags", "cudaStreamCreateWithFlags", "Stream",
     "Stream(non_blocking=True)"),
    ("cudaStreamCreateWithPriority", "cudaStreamCreateWithPriority", "Stream",
     "Stream(priority=p) with p above the lowest priority"),
    ("cudaStreamDestroy", "cudaStreamDestroy", "Stream.close", "and garbage collection"),
    ("cudaStreamEndCapture", "cudaStreamEndCapture", "Stream.end_capture", ""),
    ("cudaStreamGetAttribute", "cudaStreamGetAttribute", "Stream.get_attribute", ""),
    ("cudaStreamGetCaptureInfo", "cudaStreamGetCaptureInfo", "Stream.capture_info", ""),
    ("cudaStreamGetCaptureInfo_v3", "cudaStreamGetCaptureInfo", "Stream.capture_info",
     "CUDA 13 merged _v3 into the base name; include/streams/compat.h picks it on CUDA 12"),
    ("cudaStreamGetDevice", "cudaStreamGetDevice", "Stream.device", ""),
    ("cudaStreamGetFlags", "cudaStreamGetFlags", "Stream.flags", "and Stream.non_blocking"),
    ("cudaStreamGetId", "cudaStreamGetId", "Stream.id", ""),
    ("cudaStreamGetPriority", "cudaStreamGetPriority", "Stream.priority", ""),
    ("cudaStreamIsCapturing", "cudaStreamIsCapturing", "Stream.is_capturing",
     "and Stream.capture_status"),
    ("cudaStreamQuery", "cudaStreamQuery", "Stream.query",
     "and Stream.done; Stream.synchronize polls it so that Ctrl-C works"),
    ("cudaStreamSetAttribute", "cudaStreamSetAttribute", "Stream.set_attribute", ""),
    ("cudaStreamSynchronize", "cudaStreamSynchronize", "Stream.c_synchronize",
     "the nogil C-level method for cimporters; Python's Stream.synchronize waits "
     "interruptibly instead"),
    ("cudaStreamUpdateCaptureDependencies", "cudaStreamUpdateCaptureDependencies",
     "Stream.update_capture_dependencies", ""),
    ("cudaStreamUpdateCaptureDependencies_v2", "cudaStreamUpdateCaptureDependencies",
     "Stream.update_capture_dependencies",
     "CUDA 13 merged _v2 into the base name; include/streams/compat.h picks it on CUDA 12"),
    ("cudaStreamWaitEvent", "cudaStreamWaitEvent", "Stream.wait_event",
     "and Stream.wait_stream, Event.wait"),
    ("cudaThreadExchangeStreamCaptureMode", "cudaThreadExchangeStreamCaptureMode",
     "streams.exchange_capture_mode", "and the streams.capture_mode() context manager"),
]
