"""The artifact cache: resumable downloads, a byte budget, the digest checked first.

Layout under ``<state_dir>/upgrade/artifacts/`` (one directory per digest, so that no
name from an order is ever a path of its own)::

    <sha256>.part            bytes received so far (its size is the resume offset)
    <sha256>/<wheel name>    the verified artifact (pip wants the wheel's own file name)

An artifact is only moved out of ``.part`` after its SHA-256 matched the digest the hub
sent over the node's authenticated session; a mismatch deletes it and raises
:class:`~edgeagent.upgrade.errors.DigestMismatch`. Everything in the cache together stays
within ``budget`` bytes: older verified artifacts are evicted first, and an artifact that
cannot fit even then is refused (:class:`~edgeagent.upgrade.errors.BudgetExceeded`).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil

from edgeagent.upgrade.errors import BudgetExceeded, DigestMismatch, OrderRefused
from protocol.upgrade import ArtifactError, check_artifact_name, check_sha256

__all__ = ["ArtifactCache"]

_READ = 1024 * 1024


class ArtifactCache:
    """Artifacts by digest, within a byte budget.

    Args:
        root: the cache directory (created on first use).
        budget: the most bytes the cache may hold (partial and verified files together).
    """

    def __init__(self, root: pathlib.Path, budget: int) -> None:
        self.root = root
        self.budget = budget

    def _part(self, sha256: str) -> pathlib.Path:
        try:
            return self.root / f"{check_sha256(sha256)}.part"
        except ArtifactError as exc:
            raise OrderRefused(str(exc), reason="InvalidDigest") from exc

    def _final(self, sha256: str, name: str) -> pathlib.Path:
        try:
            return self.root / check_sha256(sha256) / check_artifact_name(name)
        except ArtifactError as exc:
            raise OrderRefused(str(exc), reason="InvalidArtifact") from exc

    def cached(self, sha256: str, name: str) -> pathlib.Path | None:
        """The verified artifact's path, or None when it is not (completely) here."""
        path = self._final(sha256, name)
        return path if path.is_file() else None

    def offset(self, sha256: str) -> int:
        """Bytes of ``sha256`` received so far: where the download resumes."""
        try:
            return self._part(sha256).stat().st_size
        except FileNotFoundError:
            return 0

    def used(self) -> int:
        """Bytes the cache holds now."""
        if not self.root.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def reserve(self, sha256: str, size: int) -> None:
        """Make room for an artifact of ``size`` bytes, evicting other verified ones
        (oldest first) and stale partial downloads.

        Raises:
            BudgetExceeded: ``size`` is over the whole budget.
        """
        if size > self.budget:
            raise BudgetExceeded(f"artifact of {size} bytes is over the budget of {self.budget}")
        self.root.mkdir(parents=True, exist_ok=True)
        others = [p for p in self.root.iterdir() if not p.name.startswith(sha256)]
        others.sort(key=lambda p: p.stat().st_mtime)
        while others and self.used() - self._size(sha256) + size > self.budget:
            victim = others.pop(0)
            if victim.is_dir():
                shutil.rmtree(victim)
            else:
                victim.unlink()

    def _size(self, sha256: str) -> int:
        entry = self.root / sha256
        own = self.offset(sha256)
        if entry.is_dir():
            own += sum(p.stat().st_size for p in entry.iterdir() if p.is_file())
        return own

    def append(self, sha256: str, offset: int, data: bytes, total: int) -> int:
        """Add ``data`` received at ``offset`` of an artifact of ``total`` bytes.

        Returns:
            The new offset (bytes received so far).

        Raises:
            OrderRefused: ``offset`` is not where the download stands (a chunk from an
                older request), or the data would run past ``total``.
            BudgetExceeded: the cache would hold more than its budget.
        """
        have = self.offset(sha256)
        if offset != have or offset + len(data) > total:
            raise OrderRefused(
                f"chunk at {offset}+{len(data)} of {total}: the download stands at {have}",
                reason="BadChunk",
            )
        if self.used() + len(data) > self.budget:
            raise BudgetExceeded(f"the artifact cache is at its budget of {self.budget} bytes")
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self._part(sha256), "ab") as out:
            out.write(data)
        return have + len(data)

    def complete(self, sha256: str, name: str) -> pathlib.Path:
        """Verify the received bytes against ``sha256`` and keep them as ``name``.

        Returns:
            The verified artifact's path.

        Raises:
            DigestMismatch: the bytes do not hash to ``sha256`` (they are deleted, so the
                next attempt starts from zero).
            OrderRefused: ``name`` is not a bare wheel file name.
        """
        final = self._final(sha256, name)
        part = self._part(sha256)
        digest = hashlib.sha256()
        with open(part, "rb") as src:
            while block := src.read(_READ):
                digest.update(block)
        actual = digest.hexdigest()
        if actual != sha256:
            part.unlink()
            raise DigestMismatch(sha256, actual)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        return final

    def discard(self, sha256: str) -> None:
        """Forget everything of ``sha256`` (partial and verified)."""
        self._part(sha256).unlink(missing_ok=True)
        shutil.rmtree(self.root / sha256, ignore_errors=True)
