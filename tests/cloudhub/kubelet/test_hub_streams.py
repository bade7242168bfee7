"""The hub's streams toward nodes (cloudhub/kubelet/streams.py), with simulated agents
speaking the real protocol over real WebSocket/TLS: a stream lives on its node's session
only (another node naming its id touches nothing), an edge cannot open one, a node
without a session is refused at once with the offline message, and a session's end ends
its streams; the metrics count them."""

from __future__ import annotations

import pytest

from cloudhub.kubelet import NodeOffline
from cloudhub.kubelet.extension import kubelet_extension
from protocol.errors import ErrorCode
from protocol.stream_messages import StreamClose, StreamData, StreamOpen, StreamReset
from tests.cloudhub.hub.conftest import eventually


def sample(hub, name: str, **labels: str) -> float:
    value = hub.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_streams_stay_on_their_node_and_end_with_its_session(hubs) -> None:
    hub = await hubs.start(extensions=[kubelet_extension()])
    a, b = hubs.agent("edge-a"), hubs.agent("edge-b")
    await a.wait_for(lambda: a.synced)
    await b.wait_for(lambda: b.synced)
    streams = hub.streams
    stream = await streams.open(
        "edge-b", "logs", "default", "web", "app", {"follow": True}, user="alice"
    )
    assert sample(hub, "edgefleet_hub_streams_open", kind="logs") == 1

    # node A names B's stream: data, a close, a reset; none of it reaches B's stream
    for message in (
        StreamData(stream_id=stream.id, channel=1, data=b"forged"),
        StreamClose(stream_id=stream.id, exit_code=0),
        StreamReset(stream_id=stream.id, code=ErrorCode.INTERNAL, reason="forged"),
    ):
        a.send(message)

    async def a_processed() -> bool:
        return sample(hub, "edgefleet_hub_messages_total", direction="in", kind="stream_reset") >= 1

    await eventually(a_processed, "the hub read node A's messages")
    assert stream.ended is None and not stream._queue

    # B's own data arrives (within the window the open granted it)
    b.send(StreamData(stream_id=stream.id, channel=1, data=b"real"))
    event = await stream.read()
    assert event is not None and event.data == b"real"

    # B goes away: the stream ends with the offline reason, and B is offline for new ones
    await b.stop()
    ended = await stream.wait_ended()
    assert ended.code is ErrorCode.INTERNAL and "edge-b went offline at" in ended.reason
    streams.finished(stream)
    assert sample(hub, "edgefleet_hub_streams_total", kind="logs", result="lost") == 1
    with pytest.raises(NodeOffline, match="node edge-b is offline since"):
        await streams.open("edge-b", "logs", "default", "web", "app")
    with pytest.raises(NodeOffline, match="not connected to this hub"):
        await streams.open("edge-never", "exec", "default", "web", "app")
    assert sample(hub, "edgefleet_hub_streams_total", kind="exec", result="offline") == 1


async def test_an_edge_cannot_open_a_stream(hubs) -> None:
    """stream_open is a hub-to-edge kind: the protocol session refuses to send it from an
    edge at all (and a hub session refuses to receive it)."""
    await hubs.start(extensions=[kubelet_extension()])
    a = hubs.agent("edge-c")
    await a.wait_for(lambda: a.synced)
    assert a.link is not None
    forged = StreamOpen(
        stream_id=7, operation="exec", namespace="default", pod="p", container="c", window=1 << 16
    )
    with pytest.raises(Exception, match="stream_open"):
        await a.link.send(forged)
