# The call layer of streams: what streams._cudart, the one owner of the CUDA
# runtime, gives the other modules.  Every wrapper refuses to call CUDA where
# CUDA forbids it (inside a host callback, in a forked child) and raises
# CudaError on failure; use them from `with nogil:` blocks.  The release_*
# functions never raise: they release now, later on a safe thread (inside a
# host callback), or never (interpreter teardown, forked child).
#
# In the chapters of the CUDA runtime API reference, after the package's
# machinery, each under a ### banner, in the order of the parts _cudart.pyx
# includes (_cudart/*.pxi); green contexts, kernel nodes and adopted kernels
# through the driver follow in sections of their own.
#
# Internal to the package: it cimports the CUDA headers' declarations.
from cpython.ref cimport PyObject

from streams.cudart cimport *

cdef extern from "counters.h":
    enum:
        STREAMS_MAX_DEVICES
        STREAMS_CNT_STREAM_CREATED
        STREAMS_CNT_STREAM_DESTROYED
        STREAMS_CNT_EVENT_CREATED
        STREAMS_CNT_EVENT_DESTROYED
        STREAMS_CNT_GRAPH_CREATED
        STREAMS_CNT_GRAPH_DESTROYED
        STREAMS_CNT_EXEC_CREATED
        STREAMS_CNT_EXEC_DESTROYED
        STREAMS_CNT_MODULE_CREATED
        STREAMS_CNT_MODULE_DESTROYED
        STREAMS_CNT_BUFFER_CREATED
        STREAMS_CNT_BUFFER_FREED
        STREAMS_CNT_HOST_CALL_CREATED
        STREAMS_CNT_HOST_CALL_FREED
        STREAMS_CNT_CALLBACK_ENQUEUED
        STREAMS_CNT_CALLBACK_COMPLETED
        STREAMS_CNT_CALLBACK_DROPPED
        STREAMS_CNT_GRAPH_CALLBACK_RUNS
        STREAMS_CNT_DEFERRED_RELEASES
        STREAMS_CNT_MEMPOOL_CREATED
        STREAMS_CNT_MEMPOOL_DESTROYED
        STREAMS_CNT_MARKER_CREATED
        STREAMS_CNT_GRAPH_ABANDONED
        STREAMS_CNT_NATIVE_CALL_ENQUEUED
        STREAMS_CNT_NATIVE_CALL_DONE
        STREAMS_CNT_PAYLOAD_INCREF
        STREAMS_CNT_PAYLOAD_DECREF
        STREAMS_CNT_DLPACK_INCREF
        STREAMS_CNT_DLPACK_DECREF
        STREAMS_CNT_MEMORY_ALLOC
        STREAMS_CNT_MEMORY_FREE
        STREAMS_CNT_MODULE_LOAD
        STREAMS_CNT_MODULE_UNLOAD
        STREAMS_CNT_PAYLOAD_LEAKED
        STREAMS_CNT_CUDA_WITH_GIL
        STREAMS_CNT_GREEN_CTX_CREATED
        STREAMS_CNT_GREEN_CTX_DESTROYED
        STREAMS_CNT_SEMAPHORE_CREATED
        STREAMS_CNT_SEMAPHORE_DESTROYED

### The package's machinery: errors, the guard, counters, deferred releases, handles #######
# A release run later on a safe thread, with the GIL held.
ctypedef void (*release_fn)(void* arg, int kind) noexcept nogil
# Runs a Python host callback's payload (streams._hostcall registers it).
ctypedef void (*dispatch_fn)(PyObject* payload, int status) noexcept
# The kinds of handle destroyed through one path: destroy_handle raises on
# a CUDA error (close()); release_handle never raises, and defers where CUDA
# cannot be called (inside a host callback) or skips where it must not be
# (a forked child, interpreter teardown).
cdef enum:
    HANDLE_STREAM
    HANDLE_EVENT
    HANDLE_GRAPH
    HANDLE_GRAPH_EXEC
    HANDLE_HOST_MEMORY      # cudaHostAlloc
    HANDLE_MANAGED_MEMORY   # cudaMallocManaged
    HANDLE_MEM_POOL         # cudaMemPoolCreate, cudaMemPoolImportFromShareableHandle
    HANDLE_GREEN_CTX        # cuGreenCtxCreate (streams/_cudart.pyx, green contexts)
    HANDLE_KINDS
cdef int destroy_handle(int kind, void* h) except -1 nogil
cdef void release_handle(int kind, void* h) noexcept nogil
# A green context's last release: destroyed once the work queued in it is
# done (parked on an event of the whole context), never waiting here.
cdef void release_green_ctx(void* ctx, int device) noexcept nogil
# A memory pool is destroyed only once the frees of its memory, each marked
# in `frees` (marks_new, marks_record), have run on the GPU: now when they
# have, else parked until they have (drain_deferred).  They take `frees`.
# destroy_pool raises (close()); release_pool never does.
cdef int destroy_pool(void* pool, void* frees) except -1 nogil
cdef void release_pool(void* pool, void* frees) noexcept nogil
cdef int raise_cuda_error(cudaError_t err) except -1
cdef int check(cudaError_t err) except -1 nogil
cdef int guard() except -1 nogil
# The guard's refusal alone (no check of the GIL rule): for callers that
# hold the GIL and call no CUDA themselves (close() refusing first).
cdef int refuse_forbidden() except -1 nogil
# What a release (that never raises) may do here: call CUDA now, defer to a
# safe thread (inside a host callback), or skip, leaving the handle to the
# process's end (a forked child, interpreter teardown).
cdef enum:
    RELEASE_NOW
    RELEASE_DEFER
    RELEASE_SKIP
cdef int release_decision() noexcept nogil
cdef bint may_release_any_thread() noexcept nogil
cdef str error_name(int code)
cdef int raise_closed(object obj) except -1
cdef int refuse_construction(object obj, str how) except -1
cdef void count(int which) noexcept nogil
cdef void payload_incref(PyObject* payload) noexcept
cdef void payload_decref(PyObject* payload) noexcept
cdef int defer_release(release_fn fn, void* arg, object keep, bint wake=*) except -1
cdef Py_ssize_t drain_deferred() noexcept
# Marks (src/cudart/marks.h): an event after each launch of an executable
# that holds Python objects; when it goes, park() keeps `a` and `b` until
# every marked launch has ended (drain_deferred lets them go).
cdef void* marks_new() except NULL
cdef void marks_free(void* marks) noexcept nogil
cdef int marks_record(void* marks, cudaStream_t s) except -1 nogil
cdef void park(void* marks, object a, object b) noexcept

### Versions and device management #########################################################
cdef int get_device_count() except -1 nogil
cdef int no_device_error() except -1
cdef int get_device() except -1 nogil
cdef int set_device(int dev) except -1 nogil
cdef int device_get_attribute(int* value, cudaDeviceAttr attr, int dev) except -1 nogil
cdef int device_get_name(char* out, size_t size, int dev) except -1 nogil
cdef int device_get_stream_priority_range(int* least, int* greatest) except -1 nogil
cdef int ctx_reset_persisting_l2_cache() except -1 nogil
cdef unsigned long long device_synchronize_request(int dev) except 0 nogil
cdef int device_synchronize_wait(int dev, unsigned long long ticket, long long slice_ns, long long* in_flight_ns) except -1 nogil

### Stream management, and stream capture ##################################################
cdef int stream_create(cudaStream_t* out, unsigned int flags, int priority, bint default_priority) except -1 nogil
cdef int stream_query(cudaStream_t h) except -1 nogil
cdef int stream_synchronize(cudaStream_t h) except -1 nogil
cdef int stream_wait_event(cudaStream_t h, cudaEvent_t ev, unsigned int flags) except -1 nogil
cdef int stream_wait_stream(cudaStream_t waiter, cudaStream_t other, int other_device) except -1 nogil
cdef int stream_get_priority(cudaStream_t h, int* out) except -1 nogil
cdef int stream_get_flags(cudaStream_t h, unsigned int* out) except -1 nogil
cdef int stream_get_id(cudaStream_t h, unsigned long long* out) except -1 nogil
cdef int stream_get_device(cudaStream_t h, int* out) except -1 nogil
cdef int stream_get_attribute(cudaStream_t h, cudaStreamAttrID attr, cudaStreamAttrValue* out) except -1 nogil
cdef int stream_set_attribute(cudaStream_t h, cudaStreamAttrID attr, const cudaStreamAttrValue* value) except -1 nogil
cdef int stream_copy_attributes(cudaStream_t dst, cudaStream_t src) except -1 nogil
cdef int stream_attach_mem_async(cudaStream_t h, void* p, size_t length, unsigned int flags) except -1 nogil
cdef int stream_begin_capture(cudaStream_t h, cudaStreamCaptureMode mode) except -1 nogil
cdef int stream_begin_capture_to_graph(cudaStream_t h, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaStreamCaptureMode mode) except -1 nogil
cdef int stream_end_capture(cudaStream_t h, cudaGraph_t* out) except -1 nogil
# The capture fence of stream `h` (src/cudart/fence.h): an enqueue's read
# hold, from its "is this stream capturing?" to its launch; captures begin
# and end on `h` (above) in a write hold.  Holds on different streams never
# wait for one another.  Taken without the GIL.
cdef int fence_enter(cudaStream_t h) except -1 nogil
cdef bint fence_try_enter(cudaStream_t h) except -1 nogil
cdef void fence_leave(cudaStream_t h) noexcept nogil
# The capture lock, for an enqueue into a capture (it touches the capture's
# graph, which CUDA does not synchronize, and the capture must not end
# meanwhile); captures begin and end holding it too.  Taken without the GIL.
cdef int capture_lock_enter() except -1 nogil
cdef void capture_lock_leave() noexcept nogil
# Streams whose fence has a hold or a waiting writer now (tests).
cdef size_t fence_streams_now() noexcept nogil
cdef int stream_is_capturing(cudaStream_t h, cudaStreamCaptureStatus* out) except -1 nogil
# Whether work enqueued on `h` now would land in a capture, never raising:
# True when it is being captured (or its capture was invalidated and not yet
# ended), or when CUDA will not say (the legacy stream while another
# blocking stream is being captured); False on any other error.
cdef bint stream_in_capture(cudaStream_t h) noexcept nogil
cdef int stream_get_capture_info(cudaStream_t h, cudaStreamCaptureStatus* status, unsigned long long* cid, cudaGraph_t* graph, const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* n) except -1 nogil
# The capture status under the capture lock (src/cudart/fence.h): asked by
# one-shot enqueues inside their stream's read fence.  cid may be NULL.
cdef int stream_capture_state_locked(cudaStream_t h, cudaStreamCaptureStatus* status,
                                     unsigned long long* cid) except -1 nogil
cdef int stream_update_capture_dependencies(cudaStream_t h, cudaGraphNode_t* deps, size_t n, unsigned int flags) except -1 nogil
cdef int thread_exchange_capture_mode(cudaStreamCaptureMode* mode) except -1 nogil

### Event management #######################################################################
cdef int event_create(cudaEvent_t* out, unsigned int flags) except -1 nogil
cdef int event_record(cudaEvent_t ev, cudaStream_t s, unsigned int flags) except -1 nogil
cdef int event_query(cudaEvent_t h) except -1 nogil
cdef int event_synchronize(cudaEvent_t h) except -1 nogil
cdef int event_elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end) except -1 nogil
cdef int ipc_get_event_handle(cudaIpcEventHandle_t* out, cudaEvent_t h) except -1 nogil
cdef int ipc_open_event_handle(cudaEvent_t* out, cudaIpcEventHandle_t handle) except -1 nogil

### Execution control: host functions, function attributes, kernel launches ################
cdef void set_dispatcher(dispatch_fn fn) noexcept
# sync_mode: 0 blocking (cudaLaunchHostFunc), 1 spin-wait (the driver's
# cuLaunchHostFunc of CUDA 13.1; NotImplementedError where it is missing).
# launch_host_func enqueues a one-shot (by ticket): call it inside the
# capture fence, having seen the stream not capturing.
cdef int launch_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil
# Around the launch of a Python callback's host function, without the GIL:
# a thread back from one, while others launch too, lets a callback waiting
# for the GIL on CUDA's thread have it first (src/cudart/hostfn.h).
cdef void producer_enter() noexcept nogil
cdef void producer_leave() noexcept nogil
cdef int launch_graph_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil
# For the tests: a thread Python does not know runs a graph's payload (not
# consumed) `count` times as CUDA's callback thread would, and exits.
cdef int call_on_native_thread(PyObject* payload, int count) except -1 nogil
# 0 when sync_mode can be used here; raises NotImplementedError naming the
# versions needed otherwise (no CUDA work is enqueued).
cdef int check_host_func_sync_mode(int sync_mode) except -1
# ---- native host functions: fn(data) on CUDA's thread, no Python, no GIL ----
ctypedef void (*host_fn)(void* data) noexcept nogil
# keep: NULL (fn and data are enqueued as they are, captured or not), or one
# reference the caller took that the call hands to the deferred queue once
# fn has run; when this raises, the reference is still the caller's.  With
# keep, the work item is a one-shot record carried by a ticket, as
# launch_host_func's payload: call it inside the capture fence, having seen
# the stream not capturing (a capture that took it in anyway calls fn at its
# first replay only, never with a freed record).
cdef int launch_native_host_func(cudaStream_t h, host_fn fn, void* data, PyObject* keep,
                                 int sync_mode) except -1 nogil
cdef int stream_add_callback(cudaStream_t h, PyObject* payload) except -1 nogil
# ---- kernels -----------------------------------------------------------------------------

cdef int func_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil
cdef int func_set_attribute(const void* func, cudaFuncAttribute attr, int value) except -1 nogil
cdef int func_get_param_info(const void* func, size_t index, size_t* offset, size_t* size) except -1 nogil
cdef int launch_kernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t s) except -1 nogil
cdef int launch_kernel_ex(const cudaLaunchConfig_t* config, const void* func, void** args) except -1 nogil
# The asyncio doorbell (src/notify.h) as a host function on s.
cdef int launch_notify(cudaStream_t s, void* node) except -1 nogil

### Memory management, and stream memory operations ########################################
cdef int host_alloc(void** out, size_t n) except -1 nogil
cdef int malloc_managed(void** out, size_t n, unsigned int flags) except -1 nogil
cdef int pointer_get_attributes(cudaPointerAttributes* out, const void* p) except -1 nogil
cdef int memset_async(void* p, int value, size_t n, cudaStream_t s) except -1 nogil
cdef int memcpy_async(void* dst, const void* src, size_t n, cudaStream_t s) except -1 nogil
# 0, or -2 when this build's runtime is older than CUDA 12.8 (no batched copies).
cdef int memcpy_batch_async(void** dsts, void** srcs, size_t* sizes, size_t count, cudaStream_t s) except -1 nogil
# Prefetch (one range, to `loc`) and advice (cudaMemoryAdvise `advice`,
# about `loc`), in the runtime's location form.
cdef int mem_prefetch_async(void* p, size_t n, cudaMemLocation loc, cudaStream_t s) except -1 nogil
cdef int mem_advise(void* p, size_t n, int advice, cudaMemLocation loc) except -1 nogil
# Batches: every range to locs[0] (nlocs 1), discarding first with `discard`;
# or discarded only.  0, or -2 when this build's runtime is older than
# CUDA 13.0 (no batched prefetch or discard).
cdef int mem_prefetch_batch_async(void** ps, size_t* ns, size_t count, cudaMemLocation* locs, bint discard, cudaStream_t s) except -1 nogil
cdef int mem_discard_batch_async(void** ps, size_t* ns, size_t count, cudaStream_t s) except -1 nogil
# Whether this build's runtime has the batched prefetch and discard (13.0).
cdef bint mem_batch_available() noexcept nogil
# A cudaMemRangeAttribute of a managed range into `size` bytes at `out`.
cdef int mem_range_attribute(void* out, size_t size, int attribute, void* p, size_t n) except -1 nogil
# The driver's cuStreamWaitValue32/64 and cuStreamWriteValue32/64.
cdef int stream_wait_value(cudaStream_t s, unsigned long long addr, unsigned long long value, unsigned int flags, bint wide) except -1 nogil
cdef int stream_write_value(cudaStream_t s, unsigned long long addr, unsigned long long value, unsigned int flags, bint wide) except -1 nogil
# Whether `dev` takes 64-bit stream memory operations (the driver's
# CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS): 1 or 0.
cdef int device_has_64_bit_memops(int dev) except -1 nogil
# ---- host memory registered for the GPU (a TimelineSemaphore's page) ---------------------
# Page-lock [p, p + n), which mmap mapped, for every device and map it
# (cudaHostRegisterMapped | cudaHostRegisterPortable, in relaxed capture
# mode: a registration must not break another thread's capture); *dptr is
# its device address.
cdef int host_register(void* p, size_t n, void** dptr) except -1 nogil
# Unregister (when `registered`) and unmap the page once every GPU
# operation marked in `marks` has run (parked until then, never waiting;
# they take `marks`, which may be NULL).  destroy_mapped_page raises on a
# failed unregistration when it runs now (close()); release_mapped_page
# never raises (a failure becomes a CudaWarning), defers inside a host
# callback, and leaves the page to the process's end where CUDA must not be
# called (a forked child, interpreter teardown).
cdef int destroy_mapped_page(void* p, size_t n, bint registered, void* marks) except -1 nogil
cdef void release_mapped_page(void* p, size_t n, bint registered, void* marks) noexcept nogil

### Stream-ordered memory allocator: asynchronous allocations and memory pools #############
cdef int malloc_async(void** out, size_t n, cudaStream_t s) except -1 nogil
cdef int free_async(void* p, cudaStream_t s) except -1 nogil
# How many stream-ordered frees the package has made so far.
cdef unsigned long long async_frees() noexcept nogil
# ---- memory pools ------------------------------------------------------------------------

cdef int mem_pool_create(cudaMemPool_t* out, int dev, bint ipc, size_t max_size) except -1 nogil
cdef int device_get_default_mem_pool(cudaMemPool_t* out, int dev) except -1 nogil
cdef int malloc_from_pool_async(void** out, size_t n, cudaMemPool_t pool, cudaStream_t s) except -1 nogil
cdef int mem_pool_trim_to(cudaMemPool_t pool, size_t keep) except -1 nogil
cdef int mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) except -1 nogil
cdef int mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) except -1 nogil
cdef int mem_pool_set_access(cudaMemPool_t pool, int dev, cudaMemAccessFlags flags) except -1 nogil
cdef int mem_pool_get_access(cudaMemPool_t pool, int dev, cudaMemAccessFlags* out) except -1 nogil
cdef int mem_pool_export_fd(cudaMemPool_t pool, int* fd) except -1 nogil
cdef int mem_pool_import_fd(cudaMemPool_t* out, int fd) except -1 nogil
cdef int mem_pool_export_pointer(cudaMemPoolPtrExportData* out, void* p) except -1 nogil
cdef int mem_pool_import_pointer(void** out, cudaMemPool_t pool, cudaMemPoolPtrExportData* data) except -1 nogil

### Peer device memory access ##############################################################
# 1 when `dev` can map `peer`'s memory (0 for dev == peer, as CUDA answers).
cdef int device_can_access_peer(int dev, int peer) except -1 nogil
# Enable or disable the current device's access to `peer`: 1 when the call
# changed the state, 0 when it already was so.
cdef int device_set_peer_access(int peer, bint enable) except -1 nogil
cdef int memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t n, cudaStream_t s) except -1 nogil

### Graph management #######################################################################
cdef int graph_create(cudaGraph_t* out) except -1 nogil
cdef void count_graph_adopted() noexcept nogil
cdef int graph_clone(cudaGraph_t* out, cudaGraph_t g) except -1 nogil
cdef int graph_get_nodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) except -1 nogil
cdef int graph_get_edges(cudaGraph_t g, cudaGraphNode_t* src, cudaGraphNode_t* dst, cudaGraphEdgeData* data, size_t* n) except -1 nogil
cdef int graph_node_get_type(cudaGraphNode_t node, cudaGraphNodeType* out) except -1 nogil
cdef int graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t* deps, size_t* n) except -1 nogil
cdef int graph_add_empty_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n) except -1 nogil
cdef int graph_add_kernel_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, const cudaKernelNodeParams* params) except -1 nogil
cdef int graph_add_memset_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, const cudaMemsetParams* params) except -1 nogil
cdef int graph_add_memcpy_node_1d(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, void* dst, const void* src, size_t count) except -1 nogil
cdef int graph_add_child_graph_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaGraph_t child) except -1 nogil
cdef int graph_add_event_record_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaEvent_t ev) except -1 nogil
cdef int graph_add_event_wait_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaEvent_t ev) except -1 nogil
cdef int graph_debug_dot_print(cudaGraph_t g, const char* path, unsigned int flags) except -1 nogil
cdef int graph_memset_node_get_params(cudaGraphNode_t node, cudaMemsetParams* out) except -1 nogil
cdef int graph_memcpy_node_get_params(cudaGraphNode_t node, cudaMemcpy3DParms* out) except -1 nogil
# python: whether the node calls a Python callable through streams' trampoline.
cdef int graph_host_node_get_params(cudaGraphNode_t node, cudaHostNodeParams* out, bint* python) except -1 nogil
cdef int graph_child_graph_node_get_graph(cudaGraphNode_t node, cudaGraph_t* out) except -1 nogil
cdef int graph_event_node_get_event(cudaGraphNode_t node, bint record, cudaEvent_t* out) except -1 nogil
cdef int graph_mem_alloc_node_get_params(cudaGraphNode_t node, cudaMemAllocNodeParams* out) except -1 nogil
cdef int graph_mem_free_node_get_params(cudaGraphNode_t node, void** out) except -1 nogil
cdef int graph_exec_get_flags(cudaGraphExec_t ex, unsigned long long* out) except -1 nogil
cdef int graph_instantiate(cudaGraphExec_t* out, cudaGraph_t g, unsigned long long flags) except -1 nogil
cdef int graph_launch(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil
cdef int graph_upload(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil
cdef int graph_exec_update(cudaGraphExec_t ex, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) except -1 nogil
# ---- host nodes (their payloads: see host functions above) -------------------------------

cdef int graph_add_native_host_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, host_fn fn, void* data) except -1 nogil
cdef int graph_exec_native_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, host_fn fn, void* data) except -1 nogil
cdef int graph_attach_payload(cudaGraph_t g, PyObject* payload) except -1
cdef int graph_attach_reference(cudaGraph_t g, PyObject* obj, bint* moved) except -1 nogil
cdef int graph_add_host_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, PyObject* payload) except -1 nogil
# ---- user objects, conditional and memory nodes, executable updates ----------------------

cdef int graph_attach_owned(cudaGraph_t g, PyObject* obj, cudaUserObject_t* out) except -1
cdef int graph_release_user_object(cudaGraph_t g, cudaUserObject_t uo) except -1 nogil
cdef int graph_destroy_node(cudaGraphNode_t node) except -1 nogil
cdef int graph_conditional_handle_create(cudaGraphConditionalHandle* out, cudaGraph_t g, unsigned int default_value, unsigned int flags) except -1 nogil
cdef int graph_add_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaGraphNodeParams* params) except -1 nogil
cdef int graph_add_mem_alloc_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, cudaMemAllocNodeParams* params) except -1 nogil
cdef int graph_add_mem_free_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, void* dptr) except -1 nogil
cdef int device_get_graph_mem_attribute(int dev, cudaGraphMemAttributeType attr, unsigned long long* value) except -1 nogil
cdef int device_reset_graph_mem_high(int dev) except -1 nogil
cdef int device_graph_mem_trim(int dev) except -1 nogil
cdef int graph_kernel_node_set_attribute(cudaGraphNode_t node, cudaLaunchAttributeID attr, const cudaLaunchAttributeValue* value) except -1 nogil
cdef int graph_exec_kernel_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, const cudaKernelNodeParams* params) except -1 nogil
cdef int graph_exec_memset_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, const cudaMemsetParams* params) except -1 nogil
cdef int graph_exec_memcpy_node_set_params_1d(cudaGraphExec_t ex, cudaGraphNode_t node, void* dst, const void* src, size_t count) except -1 nogil
cdef int graph_exec_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, PyObject* payload) except -1 nogil
cdef int graph_exec_child_graph_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, cudaGraph_t child) except -1 nogil
cdef int graph_exec_event_node_set_event(cudaGraphExec_t ex, cudaGraphNode_t node, cudaEvent_t ev, bint record) except -1 nogil
cdef int graph_node_set_enabled(cudaGraphExec_t ex, cudaGraphNode_t node, bint enabled) except -1 nogil
cdef int graph_node_get_enabled(cudaGraphExec_t ex, cudaGraphNode_t node, unsigned int* enabled) except -1 nogil

### Library management #####################################################################
cdef int library_load_data(cudaLibrary_t* out, const void* image, bint resident) except -1 nogil
cdef int library_load_from_file(cudaLibrary_t* out, const char* path) except -1 nogil
cdef int library_unload(cudaLibrary_t lib, unsigned long long devices) except -1 nogil
cdef void release_library(cudaLibrary_t lib, unsigned long long devices) noexcept nogil
cdef int library_get_kernel(cudaKernel_t* out, cudaLibrary_t lib, const char* name) except -1 nogil

# ---- green contexts: begin ----
# Spatial partitions of a device's SMs, through the driver's green-context
# entry points (src/green.h); each raises NotImplementedError
# naming the versions where the driver or this build's runtime has none.
cdef extern from "green.h" nogil:
    ctypedef struct streams_dev_resource:
        int type
        unsigned int sm_count
        unsigned int min_partition_size
        unsigned int coscheduled_alignment
        unsigned int flags
    ctypedef void* streams_green_ctx
    ctypedef void* streams_resource_desc
    enum:
        STREAMS_DEV_RESOURCE_TYPE_SM
# 0 when the driver and runtime have green contexts; else raises
# NotImplementedError naming the versions.
cdef int green_require() except -1
# The SM resource of a whole device.
cdef int device_sm_resource(int dev, streams_dev_resource* out) except -1 nogil
# Split `input` into at most *groups groups of at least min_count SMs each
# (result NULL: only count them); *groups is set to the number made.
cdef int sm_resource_split(streams_dev_resource* result, unsigned int* groups,
                           const streams_dev_resource* input, streams_dev_resource* remaining,
                           unsigned int min_count) except -1 nogil
cdef int green_ctx_create(streams_green_ctx* out, streams_dev_resource* resource,
                          int dev) except -1 nogil
# A stream of the green context, CU_STREAM_NON_BLOCKING (the driver's only choice).
cdef int green_ctx_stream_create(cudaStream_t* out, streams_green_ctx ctx,
                                 int priority) except -1 nogil
cdef int green_ctx_sm_count(streams_green_ctx ctx, unsigned int* out) except -1 nogil
# The SMs a stream's work may run on: its green context's, or (-1) not known
# (a stream of an ordinary context, or a driver without the calls).
cdef int stream_sm_count(cudaStream_t s, long long* out) except -1 nogil
# ---- green contexts: end ----

# ---- kernel nodes through the driver: begin ----
# A kernel node as the driver records it (src/kernel_node.h):
# read, and changed in a graph or an executable, for nodes of any origin
# (a capture of another library's launch too).
cdef extern from "kernel_node.h" nogil:
    ctypedef struct streams_kernel_node_params:
        void* func
        unsigned int grid[3]
        unsigned int block[3]
        unsigned int shared_mem
        void** kernel_params
        void** extra
        void* kern
        void* ctx
    void* STREAMS_LAUNCH_PARAM_END
    void* STREAMS_LAUNCH_PARAM_BUFFER_POINTER
    void* STREAMS_LAUNCH_PARAM_BUFFER_SIZE
# 0 when the driver and runtime have what these need; else raises
# NotImplementedError naming the versions.
cdef int kernel_node_require() except -1
cdef int kernel_node_get(cudaGraphNode_t node, streams_kernel_node_params* out) except -1 nogil
cdef int kernel_node_context_ok(void* ctx) except -1 nogil
# 1 with the offset and size of parameter `index`, 0 when there is no such
# parameter.
cdef int kernel_param_info(void* func, void* kern, size_t index, size_t* offset,
                           size_t* size) except -1 nogil
# The kernel's name, or NULL where the driver cannot tell it.
cdef const char* kernel_name(void* func, void* kern) noexcept nogil
# A CU_FUNC_ATTRIBUTE_* of the kernel (on the current device for a CUkernel):
# 1 with *out set, 0 where the driver cannot tell it.
cdef int kernel_attribute(void* func, void* kern, int attribute, int* out) noexcept nogil
# The CUfunction of a library kernel (a CUkernel or cudaKernel_t) in the
# current device's primary context (cuKernelGetFunction, which loads it
# there): 1 with *out set, 0 where the driver refuses it.
cdef int kernel_function(void* kern, void** out) except -1 nogil
cdef int graph_exec_kernel_node_set(cudaGraphExec_t ex, cudaGraphNode_t node,
                                    const streams_kernel_node_params* params) except -1 nogil
cdef int graph_kernel_node_set(cudaGraphNode_t node,
                               const streams_kernel_node_params* params) except -1 nogil
# ---- kernel nodes through the driver: end ----

# ==== adopted kernels and cleanup warnings (begin) ==========================================
# The name CUDA gives a library kernel (is_kernel: the driver's cuKernelGetName)
# or a context's function (cuFuncGetName), both CUDA 12.3: 0 with `out` set,
# 1 where this driver cannot tell.
cdef int func_get_name(const void* func, bint is_kernel, const char** out) except -1 nogil
# A device synchronize of each device in the bit set `devices`, never raising:
# what an adopted kernel's owner waits for before it is let go.  A failure is
# reported as a CudaWarning (cleanup_failed).
cdef void sync_devices_quietly(unsigned long long devices) noexcept nogil
# What a failed cleanup was: the HANDLE_* kinds above, and these.
cdef enum:
    CLEANUP_LIBRARY = HANDLE_KINDS      # cudaLibraryUnload (and its device synchronize)
    CLEANUP_DEVICE_MEMORY               # cudaFreeAsync of a DeviceBuffer
    CLEANUP_DEVICE_SYNC                 # an adopted kernel's owner let go
    CLEANUP_MARKER_EVENT                # cudaEventDestroy of the shim's own events
    CLEANUP_HOST_REGISTRATION           # cudaHostUnregister of a semaphore's page
    CLEANUP_KINDS
# A release that failed, on any thread, GIL or not: queued, and reported as
# a streams.CudaWarning by the next flush (a release on a thread that holds
# the GIL, drain_deferred, the next library call).
cdef void cleanup_failed(int what, const void* h, int err) noexcept nogil
# With the GIL held: warn for every queued failure.  Never raises (a warning
# that filters turn into an error goes to sys.unraisablehook).
cdef void flush_cleanup_warnings() noexcept
# Test-only fault injection (streams.testing.inject_cleanup_failure): the
# error the next release of `what` must report instead of its own (the real
# release still runs), or 0.
cdef int injected_failure(int what) noexcept nogil
# A CUfunction (a context's function, which the runtime's calls cannot take:
# they read an unknown pointer as a cudaKernel_t) goes through the driver,
# reached with cudaGetDriverEntryPoint: cuLaunchKernelEx, cuFuncGetAttribute,
# cuFuncSetAttribute, cuFuncGetParamInfo (CUDA 12.4; 2 where missing, 1 past
# the last parameter, as func_get_param_info), cuGraphAddKernelNode and
# cuGraphExecKernelNodeSetParams.  The launch config and attributes are the
# runtime's (the driver's structs have their layout and numbering).
cdef int launch_function(const cudaLaunchConfig_t* config, const void* func, void** args) except -1 nogil
cdef int function_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil
cdef int function_set_max_dynamic_shared(const void* func, int value) except -1 nogil
cdef int function_get_param_info(const void* func, size_t index, size_t* offset, size_t* size) except -1 nogil
cdef int graph_add_function_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, const cudaKernelNodeParams* params) except -1 nogil
cdef int graph_exec_function_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node, const cudaKernelNodeParams* params) except -1 nogil
# ==== adopted kernels and cleanup warnings (end) ============================================
