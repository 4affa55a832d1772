# Peer device memory access, part of streams._cudart (_cudart.pyx
# includes it).

cdef int device_can_access_peer(int dev, int peer) except -1 nogil:
    cdef int can = 0
    guard()
    check(cudaDeviceCanAccessPeer(&can, dev, peer))
    return 1 if can else 0


cdef int device_set_peer_access(int peer, bint enable) except -1 nogil:
    # The state asked for being already there is not an error here.
    cdef cudaError_t err, unchanged
    guard()
    if enable:
        err = cudaDeviceEnablePeerAccess(peer, 0)
        unchanged = cudaErrorPeerAccessAlreadyEnabled
    else:
        err = cudaDeviceDisablePeerAccess(peer)
        unchanged = cudaErrorPeerAccessNotEnabled
    if err == unchanged:
        cudaGetLastError()
        return 0
    check(err)
    return 1


cdef int memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t n,
                           cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, n, s))
