"""Day-2 operations through the hub (docs/streams.md): the kubelet API the Kubernetes API
server calls for ``kubectl logs``, ``exec``, ``attach`` and ``port-forward``, answered over
streams on the node's session (``protocol.streams``)."""

from cloudhub.kubelet.streams import HubStreams, NodeOffline, StreamUnavailable

__all__ = ["HubStreams", "NodeOffline", "StreamUnavailable"]
