"""The hub's side of the artifact transfer: chunks of an ordered wheel, to that node only.

:class:`ArtifactServer` answers an ``artifact_request`` from a node with an
``artifact_chunk``. It serves a file only from its ``artifact_dir`` (by a name that
passed :func:`protocol.upgrade.check_artifact_name`), only to a node that has an order
for that digest (:meth:`ArtifactServer.allow`), and only once the file's SHA-256 matched
the EdgeUpgrade's (hashed once per file and remembered by size and mtime): a node never
receives bytes the resource's creator did not name by digest.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

from protocol.upgrade import (
    MAX_ARTIFACT_CHUNK,
    ArtifactChunk,
    ArtifactError,
    ArtifactRequest,
    check_artifact_name,
)

__all__ = ["ArtifactServer"]


class ArtifactServer:
    """Serves ordered artifacts in chunks.

    Args:
        artifact_dir: where the hub's wheels are (``upgrade.artifact_dir``).
    """

    def __init__(self, artifact_dir: pathlib.Path) -> None:
        self.artifact_dir = pathlib.Path(artifact_dir)
        self._orders: dict[tuple[str, str], str] = {}
        self._verified: dict[str, tuple[int, int, str]] = {}
        self.bytes_served = 0

    def allow(self, node: str, sha256: str, name: str) -> None:
        """``node`` was ordered the artifact ``name`` with digest ``sha256``."""
        self._orders[(node, sha256)] = name

    def revoke(self, node: str, sha256: str | None = None) -> None:
        """Forget ``node``'s order for ``sha256`` (every order of it when None)."""
        for key in [k for k in self._orders if k[0] == node and sha256 in (None, k[1])]:
            del self._orders[key]

    def _path(self, name: str, sha256: str) -> pathlib.Path | str:
        """The file to serve, or why there is none (``NotFound``, ``WrongDigest``)."""
        try:
            path = self.artifact_dir / check_artifact_name(name)
            stat = path.stat()
        except (ArtifactError, OSError):
            return "NotFound"
        known = self._verified.get(name)
        if known is None or known[:2] != (stat.st_size, stat.st_mtime_ns):
            digest = hashlib.sha256()
            try:  # a directory of that name, a file the hub may not read: not servable
                with open(path, "rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
            except OSError:
                return "NotFound"
            known = (stat.st_size, stat.st_mtime_ns, digest.hexdigest())
            self._verified[name] = known
        return path if known[2] == sha256 else "WrongDigest"

    def answer(self, node: str, request: ArtifactRequest) -> ArtifactChunk:
        """The chunk for ``node``'s request (``error`` set when there is none to give:
        ``NotOrdered``, ``NotFound`` (missing or unreadable), ``WrongDigest`` (the file's
        SHA-256 is not the ordered one))."""
        name = self._orders.get((node, request.sha256))
        if name is None:
            return ArtifactChunk(request.sha256, request.offset, b"", request.offset, "NotOrdered")
        path = self._path(name, request.sha256)
        if isinstance(path, str):
            return ArtifactChunk(request.sha256, request.offset, b"", request.offset, path)
        total = self._verified[name][0]
        offset = min(request.offset, total)
        length = min(request.length, MAX_ARTIFACT_CHUNK, total - offset)
        try:
            with open(path, "rb") as src:
                src.seek(offset, os.SEEK_SET)
                data = src.read(length)
        except OSError:  # removed or made unreadable since it was checked
            return ArtifactChunk(request.sha256, request.offset, b"", request.offset, "NotFound")
        self.bytes_served += len(data)
        return ArtifactChunk(request.sha256, offset, data, total)
