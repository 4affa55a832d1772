# Type stubs for streams._memory (streams/_memory.pyx): buffers, copies and
# sets, and the memory arguments every API takes.

import sys
from collections.abc import Iterable
from typing import Any, Literal, Protocol, SupportsIndex, final

from typing_extensions import Buffer, CapsuleType, Self, TypeAlias, disjoint_base

from streams._device import _DeviceLike
from streams._stream import Stream, _StreamArg
from streams._handle import HandleOwner

# ---------------------------------------------------------------------------
# Memory arguments
# ---------------------------------------------------------------------------

class _HasCudaArrayInterface(Protocol):
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...

class _HasDLPack(Protocol):
    def __dlpack__(self, *, stream: Any = ...) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

# Memory CUDA knows, as an address: a streams buffer, an object with
# __cuda_array_interface__ or DLPack, or an int address CUDA allocated.
_Address: TypeAlias = _Buffer | _HasCudaArrayInterface | _HasDLPack | int
# Copies and sets (memcpy_async, memset_async) also take a C-contiguous
# host buffer (numpy array, bytearray): pageable memory.
_Memory: TypeAlias = _Address | Buffer
# Pointer arguments of kernels: None is NULL.
_DevicePointer: TypeAlias = _Address | None

def _address_of(obj: _Address, argname: str = "ptr") -> int: ...

# ---------------------------------------------------------------------------
# Buffers
# ---------------------------------------------------------------------------

@disjoint_base
class _Buffer(HandleOwner):
    # Common base of the memory classes.
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    def __len__(self) -> int: ...

@final
class DeviceBuffer(_Buffer):
    def __init__(self, nbytes: SupportsIndex, stream: _StreamArg | None = None) -> None: ...
    @property
    def stream(self) -> Stream: ...
    # The MemoryPool it came from (None for DeviceBuffer(...)).
    @property
    def pool(self) -> MemoryPool | None: ...
    def export(self) -> IpcBufferDescriptor: ...
    def close(self, stream: _StreamArg | None = None) -> None: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __dlpack__(
        self,
        *,
        stream: Stream | int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...

@disjoint_base
class _HostBuffer(_Buffer):
    # Host memory with the buffer protocol (memoryview, numpy.asarray).
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...

    # Host memory: `stream` orders nothing.
    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...

@final
class PinnedBuffer(_HostBuffer):
    def __init__(self, nbytes: SupportsIndex) -> None: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@final
class ManagedBuffer(_HostBuffer):
    def __init__(
        self, nbytes: SupportsIndex, *, attach: Literal["global", "host"] = "global", stream: _StreamArg | None = None
    ) -> None: ...
    @property
    def stream(self) -> Stream: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

# ---------------------------------------------------------------------------
# Memory pools
# ---------------------------------------------------------------------------

_Access: TypeAlias = Literal["rw", "r", "none"]

class IpcBufferDescriptor:
    __slots__ = ("data", "nbytes", "device_id")
    data: bytes
    nbytes: int
    device_id: int
    def __init__(self, data: bytes, nbytes: SupportsIndex, device_id: SupportsIndex) -> None: ...
    def __reduce__(self) -> tuple[type[IpcBufferDescriptor], tuple[bytes, int, int]]: ...
    def __eq__(self, other: object) -> bool: ...

@final
class MemoryPool(HandleOwner):
    def __init__(
        self,
        device: _DeviceLike | None = None,
        *,
        release_threshold: SupportsIndex | None = None,
        ipc: bool = False,
        max_size: SupportsIndex | None = None,
    ) -> None: ...
    @staticmethod
    def default(device: _DeviceLike | None = None) -> MemoryPool: ...
    @staticmethod
    def import_handle(fd: SupportsIndex, device: _DeviceLike | None = None) -> MemoryPool: ...
    def allocate(self, nbytes: SupportsIndex, stream: _StreamArg | None = None) -> DeviceBuffer: ...
    def import_buffer(self, descriptor: IpcBufferDescriptor, stream: _StreamArg | None = None) -> DeviceBuffer: ...
    def export_handle(self) -> int: ...
    @property
    def release_threshold(self) -> int: ...
    @release_threshold.setter
    def release_threshold(self, value: SupportsIndex) -> None: ...
    @property
    def reserved_current(self) -> int: ...
    @property
    def reserved_high(self) -> int: ...
    @property
    def used_current(self) -> int: ...
    @property
    def used_high(self) -> int: ...
    def reset_high(self) -> None: ...
    @property
    def follow_event_dependencies(self) -> bool: ...
    @follow_event_dependencies.setter
    def follow_event_dependencies(self, value: bool) -> None: ...
    @property
    def allow_opportunistic(self) -> bool: ...
    @allow_opportunistic.setter
    def allow_opportunistic(self, value: bool) -> None: ...
    @property
    def allow_internal_dependencies(self) -> bool: ...
    @allow_internal_dependencies.setter
    def allow_internal_dependencies(self, value: bool) -> None: ...
    def trim(self, min_bytes: SupportsIndex = 0) -> None: ...
    def set_access(self, device: _DeviceLike, access: _Access = "rw") -> None: ...
    def get_access(self, device: _DeviceLike) -> _Access: ...
    @property
    def handle(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def ipc(self) -> bool: ...
    @property
    def is_default(self) -> bool: ...

# ---------------------------------------------------------------------------
# Copies and sets
# ---------------------------------------------------------------------------

# wait_producers=False: the stream does not wait for the producers of
# foreign arrays (the caller orders them; docs/interop.rst).
def memcpy_async(
    dst: _Memory,
    src: _Memory,
    nbytes: SupportsIndex | None = None,
    stream: _StreamArg | None = None,
    *,
    wait_producers: bool = True,
) -> None: ...
# Each copy: (dst, src) or (dst, src, nbytes); nbytes None is all of src.
def memcpy_batch_async(
    copies: Iterable[tuple[_Memory, _Memory] | tuple[_Memory, _Memory, SupportsIndex | None]],
    stream: _StreamArg | None = None,
    *,
    wait_producers: bool = True,
) -> None: ...
def memcpy_peer_async(
    dst: _Memory,
    dst_device: _DeviceLike | None,
    src: _Memory,
    src_device: _DeviceLike | None,
    nbytes: SupportsIndex | None = None,
    stream: _StreamArg | None = None,
    *,
    wait_producers: bool = True,
) -> None: ...
def memset_async(
    dst: _Memory,
    value: SupportsIndex,
    nbytes: SupportsIndex | None = None,
    stream: _StreamArg | None = None,
    *,
    wait_producers: bool = True,
) -> None: ...

# Private: Stream.wait_value and Stream.write_value.
def _stream_wait_value(stream: Stream, address: _Address, value: SupportsIndex, op: str, flush: bool, width: int) -> None: ...
def _stream_write_value(stream: Stream, address: _Address, value: SupportsIndex, width: int) -> None: ...

# Managed memory: prefetch, discard, advice.  A location is a device,
# "host", "host_numa_current" or ("host_numa", node); a range is memory
# (its whole length) or (memory, nbytes).
_Location: TypeAlias = _DeviceLike | Literal["host", "host_numa_current"] | tuple[Literal["host_numa"], int]
_Range: TypeAlias = _Memory | tuple[_Memory, int]
_Advice: TypeAlias = Literal["read_mostly", "unset_read_mostly", "preferred_location",
                             "unset_preferred_location", "accessed_by", "unset_accessed_by"]

def prefetch(buffers: _Range | list[_Range] | tuple[_Range, ...], location: _Location,
             stream: _StreamArg | None = None) -> None: ...
def discard(buffers: _Range | list[_Range] | tuple[_Range, ...],
            stream: _StreamArg | None = None) -> None: ...
def discard_and_prefetch(buffers: _Range | list[_Range] | tuple[_Range, ...],
                         location: _Location, stream: _StreamArg | None = None) -> None: ...
def advise(buffer: _Range, advice: _Advice, location: _Location | None = None) -> None: ...
def managed_range_info(buffer: _Range) -> dict[str, Any]: ...
