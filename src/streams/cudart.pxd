# Raw declarations of the CUDA runtime API, as far as `streams` calls it.
#
# The package's own declaration file, not an API for other projects: only
# streams._cudart calls these functions (it alone links the static cudart,
# and a second module linking it would make a second runtime in the
# process); the other modules use the types and constants, and call CUDA
# through streams/_cudart.pxd.  Only what the package calls is declared,
# sectioned as in the CUDA runtime reference, with signatures that CUDA 12
# and 13 share (src/cuda_versions.h spells the ones that differ).
# Handles are opaque pointers: Cython never needs their layout.

from libc.stddef cimport size_t

cdef extern from "cuda_runtime_api.h" nogil:

    # ---- Errors -----------------------------------------------------------
    ctypedef enum cudaError_t:
        cudaSuccess
        cudaErrorInvalidValue
        cudaErrorMemoryAllocation
        cudaErrorInitializationError
        cudaErrorInsufficientDriver
        cudaErrorNoDevice
        cudaErrorInvalidDevice
        cudaErrorInvalidResourceHandle
        cudaErrorNotReady
        cudaErrorNotPermitted
        cudaErrorNotSupported
        cudaErrorIllegalState
        cudaErrorStreamCaptureUnsupported
        cudaErrorStreamCaptureInvalidated
        cudaErrorStreamCaptureUnjoined
        cudaErrorStreamCaptureImplicit
        cudaErrorStreamCaptureWrongThread
        cudaErrorCudartUnloading
        cudaErrorCallRequiresNewerDriver
        cudaErrorGraphExecUpdateFailure
        cudaErrorPeerAccessAlreadyEnabled
        cudaErrorPeerAccessNotEnabled
        cudaErrorUnknown

    const char* cudaGetErrorName(cudaError_t error)
    const char* cudaGetErrorString(cudaError_t error)
    cudaError_t cudaGetLastError()
    cudaError_t cudaPeekAtLastError()

    # ---- Opaque handles ---------------------------------------------------
    ctypedef struct CUstream_st
    ctypedef CUstream_st* cudaStream_t
    ctypedef struct CUevent_st
    ctypedef CUevent_st* cudaEvent_t
    ctypedef struct CUgraph_st
    ctypedef CUgraph_st* cudaGraph_t
    ctypedef struct CUgraphNode_st
    ctypedef CUgraphNode_st* cudaGraphNode_t
    ctypedef struct CUgraphExec_st
    ctypedef CUgraphExec_st* cudaGraphExec_t
    ctypedef struct CUuserObject_st
    ctypedef CUuserObject_st* cudaUserObject_t
    ctypedef struct CUlib_st
    ctypedef CUlib_st* cudaLibrary_t
    ctypedef struct CUkern_st
    ctypedef CUkern_st* cudaKernel_t

    # The special stream handles are macros casting small integers.
    cudaStream_t cudaStreamLegacy
    cudaStream_t cudaStreamPerThread

    # ---- Version and device management -----------------------------------
    cudaError_t cudaRuntimeGetVersion(int* runtimeVersion)
    cudaError_t cudaDriverGetVersion(int* driverVersion)
    cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
    cudaError_t cudaGetDeviceCount(int* count)
    cudaError_t cudaGetDevice(int* device)
    cudaError_t cudaSetDevice(int device)
    cudaError_t cudaDeviceSynchronize()
    cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority)

    enum cudaDeviceAttr:
        cudaDevAttrComputeCapabilityMajor
        cudaDevAttrComputeCapabilityMinor
        cudaDevAttrMultiProcessorCount
        cudaDevAttrConcurrentManagedAccess
        cudaDevAttrL2CacheSize
        cudaDevAttrMaxPersistingL2CacheSize
        cudaDevAttrMemoryPoolsSupported
        cudaDevAttrMemoryPoolSupportedHandleTypes
    cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device)

    cdef struct cudaDeviceProp:
        char name[256]
        size_t totalGlobalMem
    cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device)

    # ---- Peer device memory access ------------------------------------------
    cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice)
    cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
    cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)

    # ---- Stream management (every function of the runtime chapter) ------
    enum:
        cudaStreamDefault
        cudaStreamNonBlocking

    ctypedef void (*cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status,
                                          void* userData)

    enum cudaStreamCaptureStatus:
        cudaStreamCaptureStatusNone
        cudaStreamCaptureStatusActive
        cudaStreamCaptureStatusInvalidated

    enum cudaStreamCaptureMode:
        cudaStreamCaptureModeGlobal
        cudaStreamCaptureModeThreadLocal
        cudaStreamCaptureModeRelaxed

    enum:
        cudaStreamAddCaptureDependencies
        cudaStreamSetCaptureDependencies

    enum:
        cudaMemAttachGlobal
        cudaMemAttachHost
        cudaMemAttachSingle

    enum cudaAccessProperty:
        cudaAccessPropertyNormal
        cudaAccessPropertyStreaming
        cudaAccessPropertyPersisting

    cdef struct cudaAccessPolicyWindow:
        void* base_ptr
        size_t num_bytes
        float hitRatio
        cudaAccessProperty hitProp
        cudaAccessProperty missProp

    enum cudaSynchronizationPolicy:
        cudaSyncPolicyAuto
        cudaSyncPolicySpin
        cudaSyncPolicyYield
        cudaSyncPolicyBlockingSync

    # cudaStreamAttrID/cudaStreamAttrValue are macros over the launch
    # attribute types in CUDA 12 and 13.
    ctypedef enum cudaStreamAttrID:
        cudaStreamAttributeAccessPolicyWindow
        cudaStreamAttributeSynchronizationPolicy
        cudaStreamAttributePriority
    ctypedef union cudaStreamAttrValue:
        cudaAccessPolicyWindow accessPolicyWindow
        cudaSynchronizationPolicy syncPolicy
        int priority

    ctypedef struct cudaGraphEdgeData:
        unsigned char from_port
        unsigned char to_port
        unsigned char type

    cudaError_t cudaCtxResetPersistingL2Cache()
    cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                      void* userData, unsigned int flags)
    cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* devPtr, size_t length,
                                         unsigned int flags)
    cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode)
    cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                              const cudaGraphNode_t* dependencies,
                                              const cudaGraphEdgeData* dependencyData,
                                              size_t numDependencies,
                                              cudaStreamCaptureMode mode)
    cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src)
    cudaError_t cudaStreamCreate(cudaStream_t* pStream)
    cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags)
    cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                             int priority)
    cudaError_t cudaStreamDestroy(cudaStream_t stream)
    cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph)
    cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                       cudaStreamAttrValue* value_out)
    cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device)
    cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags)
    cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId)
    cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority)
    cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                      cudaStreamCaptureStatus* pCaptureStatus)
    cudaError_t cudaStreamQuery(cudaStream_t stream)
    cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                       const cudaStreamAttrValue* value)
    cudaError_t cudaStreamSynchronize(cudaStream_t stream)
    cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                    unsigned int flags)
    cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode)
    # ---- Event management -------------------------------------------------
    enum:
        cudaEventDefault
        cudaEventBlockingSync
        cudaEventDisableTiming
        cudaEventInterprocess
        cudaEventRecordDefault
        cudaEventRecordExternal
        cudaEventWaitDefault
        cudaEventWaitExternal

    ctypedef struct cudaIpcEventHandle_t:
        char reserved[64]

    cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags)
    cudaError_t cudaEventDestroy(cudaEvent_t event)
    cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
    cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                         unsigned int flags)
    cudaError_t cudaEventQuery(cudaEvent_t event)
    cudaError_t cudaEventSynchronize(cudaEvent_t event)
    cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end)
    cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event)
    cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle)

    # ---- Execution control: host functions and kernels -------------------
    ctypedef void (*cudaHostFn_t)(void* userData)
    cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData)

    ctypedef struct dim3:
        unsigned int x
        unsigned int y
        unsigned int z
    cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim,
                                 void** args, size_t sharedMem, cudaStream_t stream)

    ctypedef enum cudaLaunchAttributeID:
        cudaLaunchAttributeCooperative
        cudaLaunchAttributeClusterDimension
        cudaLaunchAttributeProgrammaticStreamSerialization
        cudaLaunchAttributeProgrammaticEvent
        cudaLaunchAttributePriority
        cudaLaunchAttributeMemSyncDomain
        cudaLaunchAttributeLaunchCompletionEvent
    ctypedef enum cudaLaunchMemSyncDomain:
        cudaLaunchMemSyncDomainDefault
        cudaLaunchMemSyncDomainRemote
    ctypedef struct _clusterDim:
        unsigned int x
        unsigned int y
        unsigned int z
    ctypedef struct _programmaticEvent:
        cudaEvent_t event
        int flags
        int triggerAtBlockStart
    ctypedef struct _launchCompletionEvent:
        cudaEvent_t event
        int flags
    ctypedef union cudaLaunchAttributeValue:
        int cooperative
        _clusterDim clusterDim
        int programmaticStreamSerializationAllowed
        _programmaticEvent programmaticEvent
        int priority
        cudaLaunchMemSyncDomain memSyncDomain
        _launchCompletionEvent launchCompletionEvent
    ctypedef struct cudaLaunchAttribute:
        cudaLaunchAttributeID id
        cudaLaunchAttributeValue val
    ctypedef struct cudaLaunchConfig_t:
        dim3 gridDim
        dim3 blockDim
        size_t dynamicSmemBytes
        cudaStream_t stream
        cudaLaunchAttribute* attrs
        unsigned int numAttrs
    cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                    void** args)

    cdef struct cudaFuncAttributes:
        size_t sharedSizeBytes
        size_t constSizeBytes
        size_t localSizeBytes
        int maxThreadsPerBlock
        int numRegs
        int ptxVersion
        int binaryVersion
        int maxDynamicSharedSizeBytes
    enum cudaFuncAttribute:
        cudaFuncAttributeMaxDynamicSharedMemorySize
    cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func)
    cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value)

    # ---- Library management (kernels from PTX/cubin without nvcc) --------
    enum cudaJitOption:
        pass
    enum cudaLibraryOption:
        pass
    cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code,
                                    cudaJitOption* jitOptions, void** jitOptionsValues,
                                    unsigned int numJitOptions,
                                    cudaLibraryOption* libraryOptions,
                                    void** libraryOptionValues,
                                    unsigned int numLibraryOptions)
    cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName,
                                        cudaJitOption* jitOptions, void** jitOptionsValues,
                                        unsigned int numJitOptions,
                                        cudaLibraryOption* libraryOptions,
                                        void** libraryOptionValues,
                                        unsigned int numLibraryOptions)
    cudaError_t cudaLibraryUnload(cudaLibrary_t library)
    cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library,
                                     const char* name)

    # ---- Memory -----------------------------------------------------------
    cudaError_t cudaMalloc(void** devPtr, size_t size)
    cudaError_t cudaFree(void* devPtr)
    cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags)
    cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream)
    cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream)
    enum:
        cudaHostAllocDefault
    cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags)
    cudaError_t cudaFreeHost(void* ptr)
    enum:
        cudaHostRegisterPortable
        cudaHostRegisterMapped
    cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags)
    cudaError_t cudaHostUnregister(void* ptr)
    cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags)
    enum cudaMemoryType:
        cudaMemoryTypeUnregistered
        cudaMemoryTypeHost
        cudaMemoryTypeDevice
        cudaMemoryTypeManaged
    cdef struct cudaPointerAttributes:
        cudaMemoryType type
        int device
        void* devicePointer
        void* hostPointer
    cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr)
    cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream)
    enum cudaMemcpyKind:
        cudaMemcpyHostToHost
        cudaMemcpyHostToDevice
        cudaMemcpyDeviceToHost
        cudaMemcpyDeviceToDevice
        cudaMemcpyDefault
    cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                cudaMemcpyKind kind, cudaStream_t stream)
    cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                    size_t count, cudaStream_t stream)

    # ---- Stream-ordered memory allocator: pools ----------------------------
    ctypedef struct CUmemPoolHandle_st
    ctypedef CUmemPoolHandle_st* cudaMemPool_t
    enum cudaMemPoolAttr:
        cudaMemPoolReuseFollowEventDependencies
        cudaMemPoolReuseAllowOpportunistic
        cudaMemPoolReuseAllowInternalDependencies
        cudaMemPoolAttrReleaseThreshold
        cudaMemPoolAttrReservedMemCurrent
        cudaMemPoolAttrReservedMemHigh
        cudaMemPoolAttrUsedMemCurrent
        cudaMemPoolAttrUsedMemHigh
    enum cudaMemLocationType:
        cudaMemLocationTypeDevice
        cudaMemLocationTypeHost
        cudaMemLocationTypeHostNuma
        cudaMemLocationTypeHostNumaCurrent
    cdef struct cudaMemLocation:
        cudaMemLocationType type
        int id
    enum cudaMemAccessFlags:
        cudaMemAccessFlagsProtNone
        cudaMemAccessFlagsProtRead
        cudaMemAccessFlagsProtReadWrite
    cdef struct cudaMemAccessDesc:
        cudaMemLocation location
        cudaMemAccessFlags flags
    enum cudaMemAllocationType:
        cudaMemAllocationTypePinned
    enum cudaMemAllocationHandleType:
        cudaMemHandleTypeNone
        cudaMemHandleTypePosixFileDescriptor
    cdef struct cudaMemPoolProps:
        cudaMemAllocationType allocType
        cudaMemAllocationHandleType handleTypes
        cudaMemLocation location
        size_t maxSize
    cdef struct cudaMemPoolPtrExportData:
        unsigned char reserved[64]
    cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* poolProps)
    cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
    cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device)
    cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                        cudaStream_t stream)
    cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
    cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr,
                                        void* value)
    cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr,
                                        void* value)
    cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const cudaMemAccessDesc* descList,
                                     size_t count)
    cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                     cudaMemLocation* location)
    cudaError_t cudaMemPoolExportToShareableHandle(void* shareableHandle,
                                                   cudaMemPool_t memPool,
                                                   cudaMemAllocationHandleType handleType,
                                                   unsigned int flags)
    cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t* memPool,
                                                     void* shareableHandle,
                                                     cudaMemAllocationHandleType handleType,
                                                     unsigned int flags)
    cudaError_t cudaMemPoolExportPointer(cudaMemPoolPtrExportData* exportData, void* ptr)
    cudaError_t cudaMemPoolImportPointer(void** ptr, cudaMemPool_t memPool,
                                         cudaMemPoolPtrExportData* exportData)

    # ---- Graph management -------------------------------------------------
    enum:
        cudaGraphInstantiateFlagAutoFreeOnLaunch
        cudaGraphInstantiateFlagUpload
        cudaGraphInstantiateFlagDeviceLaunch
        cudaGraphInstantiateFlagUseNodePriority
    enum:
        cudaGraphDebugDotFlagsVerbose
    enum:
        cudaUserObjectNoDestructorSync
    enum:
        cudaGraphUserObjectMove

    cdef struct cudaHostNodeParams:
        cudaHostFn_t fn
        void* userData

    cdef struct cudaKernelNodeParams:
        void* func
        dim3 gridDim
        dim3 blockDim
        unsigned int sharedMemBytes
        void** kernelParams
        void** extra

    cdef struct cudaMemsetParams:
        void* dst
        size_t pitch
        unsigned int value
        unsigned int elementSize
        size_t width
        size_t height

    # What a memcpy node copies (cudaGraphMemcpyNodeGetParams); the arrays
    # are read only as "present or not".
    cdef struct cudaPitchedPtr:
        void* ptr
        size_t pitch
        size_t xsize
        size_t ysize
    cdef struct cudaPos:
        size_t x
        size_t y
        size_t z
    cdef struct cudaExtent:
        size_t width
        size_t height
        size_t depth
    cdef struct cudaMemcpy3DParms:
        void* srcArray
        cudaPos srcPos
        cudaPitchedPtr srcPtr
        void* dstArray
        cudaPos dstPos
        cudaPitchedPtr dstPtr
        cudaExtent extent
        cudaMemcpyKind kind

    enum cudaGraphNodeType:
        cudaGraphNodeTypeKernel
        cudaGraphNodeTypeMemcpy
        cudaGraphNodeTypeMemset
        cudaGraphNodeTypeHost
        cudaGraphNodeTypeGraph
        cudaGraphNodeTypeEmpty
        cudaGraphNodeTypeWaitEvent
        cudaGraphNodeTypeEventRecord
        cudaGraphNodeTypeExtSemaphoreSignal
        cudaGraphNodeTypeExtSemaphoreWait
        cudaGraphNodeTypeMemAlloc
        cudaGraphNodeTypeMemFree
        cudaGraphNodeTypeConditional

    enum cudaGraphExecUpdateResult:
        cudaGraphExecUpdateSuccess
        cudaGraphExecUpdateError
        cudaGraphExecUpdateErrorTopologyChanged
        cudaGraphExecUpdateErrorNodeTypeChanged
        cudaGraphExecUpdateErrorFunctionChanged
        cudaGraphExecUpdateErrorParametersChanged
        cudaGraphExecUpdateErrorNotSupported
        cudaGraphExecUpdateErrorUnsupportedFunctionChange
        cudaGraphExecUpdateErrorAttributesChanged

    ctypedef struct cudaGraphExecUpdateResultInfo:
        cudaGraphExecUpdateResult result
        cudaGraphNode_t errorNode
        cudaGraphNode_t errorFromNode

    cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags)
    cudaError_t cudaGraphDestroy(cudaGraph_t graph)
    cudaError_t cudaGraphClone(cudaGraph_t* pGraphClone, cudaGraph_t originalGraph)
    cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes)
    cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t* pDependencies,
                                      size_t numDependencies)
    cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t* pDependencies,
                                     size_t numDependencies,
                                     const cudaHostNodeParams* pNodeParams)
    cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t* pDependencies,
                                       size_t numDependencies,
                                       const cudaKernelNodeParams* pNodeParams)
    cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t* pDependencies,
                                       size_t numDependencies,
                                       const cudaMemsetParams* pMemsetParams)
    cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t* pDependencies,
                                         size_t numDependencies, void* dst, const void* src,
                                         size_t count, cudaMemcpyKind kind)
    cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t* pDependencies,
                                           size_t numDependencies, cudaGraph_t childGraph)
    cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t* pDependencies,
                                            size_t numDependencies, cudaEvent_t event)
    cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t* pDependencies,
                                          size_t numDependencies, cudaEvent_t event)
    cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* pType)
    cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                    cudaGraphExecUpdateResultInfo* resultInfo)
    cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                              unsigned long long flags)
    cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
    cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
    cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream)
    cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int flags)
    enum:
        cudaGraphDebugDotFlagsKernelNodeParams
        cudaGraphDebugDotFlagsMemcpyNodeParams
        cudaGraphDebugDotFlagsMemsetNodeParams
        cudaGraphDebugDotFlagsHostNodeParams
        cudaGraphDebugDotFlagsEventNodeParams
        cudaGraphDebugDotFlagsExtSemasSignalNodeParams
        cudaGraphDebugDotFlagsExtSemasWaitNodeParams
        cudaGraphDebugDotFlagsKernelNodeAttributes
        cudaGraphDebugDotFlagsHandles
        cudaGraphDebugDotFlagsConditionalNodeParams
    # What each node does, as the graph holds it (Graph.to_dict).
    cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* pNodeParams)
    cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* pNodeParams)
    cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* pNodeParams)
    cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* pGraph)
    cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out)
    cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out)
    cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long* flags)
    cudaError_t cudaUserObjectCreate(cudaUserObject_t* object_out, void* ptr,
                                     cudaHostFn_t destroy, unsigned int initialRefcount,
                                     unsigned int flags)
    cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
    cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                          unsigned int count, unsigned int flags)
    cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                           unsigned int count)
    cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)

    # Conditional nodes (CUDA 12.3+; if/else and switch bodies 12.8+).  The
    # node is added with cudaGraphAddNode, which compat.h spells for 12 and 13.
    ctypedef unsigned long long cudaGraphConditionalHandle
    enum:
        cudaGraphCondAssignDefault
    enum cudaGraphConditionalNodeType:
        cudaGraphCondTypeIf
        cudaGraphCondTypeWhile
    cdef struct cudaConditionalNodeParams:
        cudaGraphConditionalHandle handle
        cudaGraphConditionalNodeType type
        unsigned int size
        cudaGraph_t* phGraph_out
    # Only the members streams sets: the rest of the union (zeroed) is CUDA's.
    cdef struct cudaGraphNodeParams:
        cudaGraphNodeType type
        cudaConditionalNodeParams conditional
    cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* pHandle_out,
                                                 cudaGraph_t graph,
                                                 unsigned int defaultLaunchValue,
                                                 unsigned int flags)

    # Graph memory nodes (the pool properties are declared with the pools)
    cdef struct cudaMemAllocNodeParams:
        cudaMemPoolProps poolProps
        size_t bytesize
        void* dptr
    enum cudaGraphMemAttributeType:
        cudaGraphMemAttrUsedMemCurrent
        cudaGraphMemAttrUsedMemHigh
        cudaGraphMemAttrReservedMemCurrent
        cudaGraphMemAttrReservedMemHigh
    cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t* pDependencies,
                                         size_t numDependencies,
                                         cudaMemAllocNodeParams* nodeParams)
    cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t* pDependencies,
                                        size_t numDependencies, void* dptr)
    cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node,
                                               cudaMemAllocNodeParams* params_out)
    cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* dptr_out)
    cudaError_t cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                               void* value)
    cudaError_t cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                               void* value)
    cudaError_t cudaDeviceGraphMemTrim(int device)

    # Kernel node attributes (cluster dimensions, cooperative)
    cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode,
                                                cudaLaunchAttributeID attr,
                                                const cudaLaunchAttributeValue* value)

    # Updating an executable graph node by node
    cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec,
                                                 cudaGraphNode_t node,
                                                 const cudaKernelNodeParams* pNodeParams)
    cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec,
                                                 cudaGraphNode_t node,
                                                 const cudaMemsetParams* pNodeParams)
    cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec,
                                                   cudaGraphNode_t node, void* dst,
                                                   const void* src, size_t count,
                                                   cudaMemcpyKind kind)
    cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec,
                                               cudaGraphNode_t node,
                                               const cudaHostNodeParams* pNodeParams)
    cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec,
                                                     cudaGraphNode_t node,
                                                     cudaGraph_t childGraph)
    cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                     cudaGraphNode_t hNode, cudaEvent_t event)
    cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                   cudaGraphNode_t hNode, cudaEvent_t event)
    cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                        unsigned int isEnabled)
    cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                        unsigned int* isEnabled)
