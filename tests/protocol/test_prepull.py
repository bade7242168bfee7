"""The image pre-pull messages: image references and fields checked on both sides."""

from __future__ import annotations

import pytest

from protocol.codec import decode_payload, encode
from protocol.errors import InvalidMessage
from protocol.prepull import MAX_IMAGES, ImagePullOrder, ImagePullProgress, check_image


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "busybox:1.36",
        "127.0.0.1:5000/edge/busybox:v1",
        "registry.example.com/a/b/c:tag_1.0-x",
        "app@sha256:" + "ab" * 32,
    ],
)
def test_image_references_pass(image: str) -> None:
    assert check_image(image) == image


@pytest.mark.parametrize(
    "image",
    [
        "",
        "-x",
        "Busybox",
        "busy box",
        "busybox;rm -rf /",
        "../etc/passwd",
        "a/../b",
        "a:" + "1" * 200,
        "a" * 256,
        "app@sha256:short",
        "--insecure",
        None,
        5,
    ],
)
def test_anything_else_is_refused(image: object) -> None:
    with pytest.raises(InvalidMessage) as caught:
        check_image(image)
    assert caught.value.field == "images"


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: ImagePullOrder("p", "ns", "u", 1, ()), "images"),
        (lambda: ImagePullOrder("p", "ns", "u", 1, ("a",) * (MAX_IMAGES + 1)), "images"),
        (lambda: ImagePullOrder("p", "ns", "u", 1, ("-a",)), "images"),
        (lambda: ImagePullOrder("", "ns", "u", 1, ("a",)), "prepull"),
        (lambda: ImagePullOrder("p", "ns", "u", 0, ("a",)), "generation"),
        (lambda: ImagePullProgress("p", "ns", "u", 1, "Done", 0, 1.0), "phase"),
        (lambda: ImagePullProgress("p", "ns", "u", 1, "Pulled", -1, 1.0), "pulled"),
        (lambda: ImagePullProgress("p", "", "u", 1, "Pulled", 0, 1.0), "prepull"),
    ],
)
def test_bad_fields_are_refused(make, field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        make()
    assert caught.value.field == field


def test_the_messages_cross_the_codec() -> None:
    order = ImagePullOrder("p", "ns", "u", 2, ("127.0.0.1:5000/edge/busybox:v1",))
    assert decode_payload(encode(order)[4:])[1] == order
    assert ImagePullOrder.from_hub and not ImagePullOrder.from_edge
    assert ImagePullProgress.needs_ack and ImagePullProgress.from_edge


def test_a_huge_image_name_is_refused_without_quoting_all_of_it() -> None:
    """Found by breakit5: the error (a hub's close reason, a status message, a log line)
    quoted the whole value: 1 MiB of it for a 1 MiB image name."""
    with pytest.raises(InvalidMessage) as caught:
        check_image("a" * (1 << 20))
    assert len(str(caught.value)) < 300
    assert "1048576 characters" in str(caught.value)
