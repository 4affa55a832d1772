# Type stubs for streams._memory (streams/_memory.pyx): buffers, copies and
# sets, and the memory arguments every API takes.

import sys
from typing import Any, Literal, Protocol, SupportsIndex, final

from typing_extensions import Buffer, CapsuleType, Self, TypeAlias, disjoint_base

from streams._device import _DeviceLike
from streams._stream import Stream, _StreamArg

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
class _Buffer:
    # Common base of the memory classes.
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
    def close(self) -> None: ...

@final
class DeviceBuffer(_Buffer):
    def __init__(self, nbytes: SupportsIndex, stream: _StreamArg | None = None) -> None: ...
    @property
    def stream(self) -> Stream: ...
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
# Copies and sets
# ---------------------------------------------------------------------------

def memcpy_async(dst: _Memory, src: _Memory, nbytes: SupportsIndex | None = None, stream: _StreamArg | None = None) -> None: ...
def memcpy_peer_async(
    dst: _Memory,
    dst_device: _DeviceLike | None,
    src: _Memory,
    src_device: _DeviceLike | None,
    nbytes: SupportsIndex | None = None,
    stream: _StreamArg | None = None,
) -> None: ...
def memset_async(dst: _Memory, value: SupportsIndex, nbytes: SupportsIndex | None = None, stream: _StreamArg | None = None) -> None: ...
