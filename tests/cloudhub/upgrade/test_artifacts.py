"""cloudhub.upgrade.artifacts.ArtifactServer against a real artifact directory: what an
operator's mistakes in ``upgrade.artifact_dir`` give the node."""

from __future__ import annotations

import hashlib
import pathlib

from cloudhub.upgrade.artifacts import ArtifactServer
from protocol.upgrade import ArtifactRequest

WHEEL = "edgefleet-0.5.0-py3-none-any.whl"
DIGEST = hashlib.sha256(b"wheel").hexdigest()


def test_an_artifact_that_cannot_be_read_is_answered_not_raised(tmp_path: pathlib.Path) -> None:
    """Found by breakit5: a directory (or an unreadable file) of the artifact's name made
    the request handler raise (a traceback in the hub's log) and the node got no answer:
    it waited for its chunk timeout and then sat in Downloading until the health gate's
    timeout failed it, with no word of why."""
    (tmp_path / WHEEL).mkdir()
    server = ArtifactServer(tmp_path)
    server.allow("pi-1", DIGEST, WHEEL)
    chunk = server.answer("pi-1", ArtifactRequest(DIGEST, 0, 1024))
    assert chunk.error == "NotFound" and chunk.data == b""


def test_the_artifact_is_served_in_chunks_from_an_offset(tmp_path: pathlib.Path) -> None:
    (tmp_path / WHEEL).write_bytes(b"wheel")
    server = ArtifactServer(tmp_path)
    server.allow("pi-1", DIGEST, WHEEL)
    chunk = server.answer("pi-1", ArtifactRequest(DIGEST, 2, 1024))
    assert (chunk.error, chunk.offset, chunk.data, chunk.total) == ("", 2, b"eel", 5)
    server.revoke("pi-1", DIGEST)
    assert server.answer("pi-1", ArtifactRequest(DIGEST, 0, 1024)).error == "NotOrdered"
