"""Device arguments without a GPU: device objects of the wrong kind, and the
device and peer arguments of events and the peer calls, refused with an
error naming the argument before CUDA is called."""
import pytest

import streams
from streams import Event, Stream


def test_device_object_with_wrong_type():
    class CpuDevice:
        type = "cpu"
        index = None

    class BadIndex:
        index = "0"

    with pytest.raises(ValueError, match="is not a CUDA device"):
        Stream(device=CpuDevice())
    with pytest.raises(TypeError, match=r"device.index must be an int, got str"):
        Stream(device=BadIndex())


@pytest.mark.parametrize("call, exc, text", [
    (lambda: Event(device=True), TypeError,
     "device must be an int, 'cuda:N' or a device object, not bool"),
    (lambda: Event(device="cpu"), ValueError, "device='cpu' is not a CUDA device string"),
    (lambda: Event.from_ipc_handle(bytes(64), device=1.5), TypeError,
     "device must be None, an int"),
    (lambda: streams.can_access_peer(0, "cpu"), ValueError, "peer='cpu' is not a CUDA"),
    (lambda: streams.can_access_peer(0, True), TypeError, "peer must be an int"),
    (lambda: streams.enable_peer_access("gpu:x"), ValueError, "peer='gpu:x' is not a CUDA"),
    (lambda: streams.disable_peer_access([1]), TypeError, "peer must be None, an int"),
    (lambda: streams.enable_peer_access(None), ValueError, "peer is required"),
    (lambda: streams.can_access_peer(0, None), ValueError, "peer is required"),
])
def test_device_arguments_of_events_and_peers_checked_before_cuda(call, exc, text):
    with pytest.raises(exc, match=text):
        call()
