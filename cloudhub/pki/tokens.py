"""Bootstrap tokens: what a new node presents once to get its first certificate.

Tokens have kubeadm's shape, ``[a-z0-9]{6}.[a-z0-9]{16}``: a public token id and a
secret. Each lives in a Secret ``bootstrap-token-<id>`` of type
``edgefleet.io/bootstrap-token`` in the hub's namespace (kubeadm keeps its tokens in
``kube-system`` Secrets of type ``bootstrap.kubernetes.io/token``; ours differ in that the
secret is stored only as a SHA-256 digest, never in clear, so that reading the Secret does
not give a usable token). Keys of the Secret's ``data``:

====================  ============================================================
``token-id``          the public part
``token-secret-sha256``  hex SHA-256 of the whole token ``<id>.<secret>``
``expiration``        RFC 3339 UTC time after which it is refused; absent: never
``usage``             ``single-use`` or ``multi-use``
``node-name``         if set, the only node name the token may join
``labels``            JSON object of labels applied to the Node at join
``description``       free text
``used-by``           single-use: the node that used it
``used-key-sha256``   single-use: pin of the public key it was used for
``used-at``           single-use: when (RFC 3339)
``deleted-at``        set by ``cloudhub token delete`` (the token is kept, unusable,
                      so that a join with it is told it was deleted)
====================  ============================================================

A token that can no longer be used (expired, deleted, used) is kept for
``token_retention`` seconds so that a refused join says why, then :meth:`TokenStore.prune`
deletes it. Validation checks the secret before it reveals anything else about a
token, so only a holder of the secret learns that it expired or was used.

The SHA-256 digest needs no salt or slow hash: the secret holds 16 random characters
from 36 (82 bits), beyond any dictionary.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cloudhub.errors import KubeConflict, KubeNotFound
from cloudhub.kube import SECRETS, KubeClient, retrying, update_with_retry
from cloudhub.pki.errors import (
    TokenDeleted,
    TokenExpired,
    TokenMalformed,
    TokenNotFound,
    TokenUsed,
    TokenWrong,
)

__all__ = [
    "SECRET_TYPE",
    "TOKEN_LABEL",
    "BootstrapToken",
    "TokenStore",
    "format_time",
    "parse_time",
    "split_token",
]

log = logging.getLogger(__name__)

SECRET_TYPE = "edgefleet.io/bootstrap-token"
"""Secret ``type`` of a stored bootstrap token."""

TOKEN_LABEL = "edgefleet.io/bootstrap-token"
"""Label (value ``"true"``) on every token Secret; lists select by it."""

_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def split_token(token: str) -> tuple[str, str]:
    """Split ``<id>.<secret>`` into its parts.

    Raises:
        TokenMalformed: the token does not have kubeadm's shape.
    """
    match = _TOKEN.match(token.strip()) if isinstance(token, str) else None
    if match is None:
        raise TokenMalformed(
            "the bootstrap token is malformed: expected 6 characters, a dot and 16 "
            "characters, all lower-case letters and digits (as printed by "
            "'cloudhub token create'); check that it was copied whole"
        )
    return match.group(1), match.group(2)


def format_time(seconds: float) -> str:
    """RFC 3339 UTC with second precision (``2026-01-02T03:04:05Z``), as kubeadm writes
    token expirations."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    """Seconds since the Unix epoch from an RFC 3339 time.

    Raises:
        ValueError: not an RFC 3339 time.
    """
    moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _secret_name(token_id: str) -> str:
    return f"bootstrap-token-{token_id}"


@dataclass(frozen=True, slots=True)
class BootstrapToken:
    """One stored bootstrap token (without its secret)."""

    token_id: str
    """The public part of the token."""
    expires_at: float | None
    """Seconds since the epoch after which it is refused; ``None``: never."""
    single_use: bool
    """True: the first successful join consumes it."""
    node_name: str | None = None
    """The only node name it may join, if set."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels applied to the Node at join."""
    description: str = ""
    created_at: float | None = None
    """Seconds since the epoch (the Secret's creationTimestamp)."""
    used_by: str | None = None
    """Single-use: the node that used it."""
    used_key: str | None = None
    """Single-use: ``sha256:<hex>`` pin of the public key it was used for."""
    used_at: float | None = None
    deleted_at: float | None = None
    resource_version: str = ""
    """Of the Secret it was read from."""

    def state(self, now: float) -> str:
        """``"valid"``, ``"deleted"``, ``"expired"`` or ``"used"`` at ``now``."""
        if self.deleted_at is not None:
            return "deleted"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        if self.single_use and self.used_by is not None:
            return "used"
        return "valid"

    def inactive_since(self, now: float) -> float | None:
        """When it stopped being usable (seconds since the epoch), or ``None`` if usable."""
        state = self.state(now)
        if state == "deleted":
            return self.deleted_at
        if state == "expired":
            return self.expires_at
        if state == "used":
            return self.used_at if self.used_at is not None else now
        return None


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _data(secret: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            log.warning("token Secret %s: data key %s is not base64 text", _name(secret), key)
    return out


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _from_secret(secret: dict) -> BootstrapToken:
    data = _data(secret)
    meta = secret.get("metadata") or {}

    def when(key: str) -> float | None:
        text = data.get(key)
        if not text:
            return None
        try:
            return parse_time(text)
        except ValueError:
            log.warning("token Secret %s: %s %r is not an RFC 3339 time", _name(secret), key, text)
            return 0.0  # an unreadable time counts as long past: the token is not usable

    try:
        labels = json.loads(data.get("labels") or "{}")
    except ValueError:
        labels = {}
    created = meta.get("creationTimestamp")
    return BootstrapToken(
        token_id=data.get("token-id", _name(secret).removeprefix("bootstrap-token-")),
        expires_at=when("expiration"),
        single_use=data.get("usage") == "single-use",
        node_name=data.get("node-name") or None,
        labels=labels if isinstance(labels, dict) else {},
        description=data.get("description", ""),
        created_at=parse_time(created) if created else None,
        used_by=data.get("used-by") or None,
        used_key=data.get("used-key-sha256") or None,
        used_at=when("used-at"),
        deleted_at=when("deleted-at"),
        resource_version=str(meta.get("resourceVersion", "")),
    )


class TokenStore:
    """Create, list, delete and validate bootstrap tokens kept in the API.

    Args:
        client: the hub's API client.
        namespace: the hub's namespace.
        retention: seconds an unusable token is kept before :meth:`prune` deletes it.
        clock: the wall clock, seconds since the epoch (``time.time``; a test passes one it
            can move, so expiry is reached without waiting for it).
    """

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        retention: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self._clock = clock
        self.namespace = namespace
        self.retention = retention

    async def create(
        self,
        *,
        ttl: float | None,
        single_use: bool = False,
        labels: Mapping[str, str] | None = None,
        node_name: str | None = None,
        description: str = "",
    ) -> tuple[str, BootstrapToken]:
        """Create a new token.

        Args:
            ttl: seconds until it expires; ``None`` for a token that never expires
                (kubeadm's ``--ttl 0``).
            single_use: consumed by the first successful join.
            labels: labels to apply to the Node at join (validated by the caller).
            node_name: restrict the token to this node name.
            description: free text shown by ``token list``.

        Returns:
            ``(token, stored)``: the whole token ``<id>.<secret>`` — shown once, never
            stored in clear — and what was stored.

        Raises:
            ValueError: ``ttl`` is not positive.
            KubeAPIError: the API refused the write.
        """
        if ttl is not None and not ttl > 0:
            raise ValueError(f"token ttl must be > 0 seconds (or None for no expiry), got {ttl}")
        now = self._clock()
        for _ in range(8):
            token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
            secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
            token = f"{token_id}.{secret}"
            data = {
                "token-id": token_id,
                "token-secret-sha256": _digest(token),
                "usage": "single-use" if single_use else "multi-use",
                "labels": json.dumps(dict(labels or {}), sort_keys=True),
                "description": description,
            }
            if ttl is not None:
                data["expiration"] = format_time(now + ttl)
            if node_name:
                data["node-name"] = node_name
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": SECRET_TYPE,
                "metadata": {
                    "name": _secret_name(token_id),
                    "namespace": self.namespace,
                    "labels": {
                        TOKEN_LABEL: "true",
                        "app.kubernetes.io/managed-by": "cloudhub",
                    },
                },
                "data": {k: _b64(v) for k, v in data.items()},
            }
            try:
                created = await retrying(
                    lambda b=body: self.client.create(SECRETS, b, self.namespace),
                    what="create bootstrap token",
                )
            except KubeConflict:
                continue  # the same 6-character id exists already: draw another
            return token, _from_secret(created)
        raise RuntimeError("could not find a free token id in 8 draws")  # pragma: no cover

    async def list(self, *, include_inactive: bool = True) -> list[BootstrapToken]:
        """Every stored token, oldest first (``include_inactive=False``: only usable ones)."""
        items, _ = await retrying(
            lambda: self.client.list(SECRETS, self.namespace, label_selector=f"{TOKEN_LABEL}=true"),
            what="list bootstrap tokens",
        )
        now = self._clock()
        tokens = [_from_secret(s) for s in items if s.get("type") == SECRET_TYPE]
        if not include_inactive:
            tokens = [t for t in tokens if t.state(now) == "valid"]
        return sorted(tokens, key=lambda t: (t.created_at or 0.0, t.token_id))

    async def get(self, token_id: str) -> BootstrapToken:
        """One stored token by id.

        Raises:
            TokenNotFound: no such token.
        """
        if not _TOKEN_ID.match(token_id):
            raise TokenMalformed(f"{token_id!r} is not a token id (6 lower-case letters/digits)")
        try:
            secret = await retrying(
                lambda: self.client.get(SECRETS, _secret_name(token_id), self.namespace),
                what="get bootstrap token",
            )
        except KubeNotFound as exc:
            raise TokenNotFound(
                f"bootstrap token {token_id!r} is not known to this hub", token_id=token_id
            ) from exc
        if secret.get("type") != SECRET_TYPE:
            raise TokenNotFound(
                f"bootstrap token {token_id!r} is not known to this hub", token_id=token_id
            )
        return _from_secret(secret)

    async def delete(self, token: str) -> BootstrapToken:
        """Delete a token (by id or whole token): it is refused from now on, with a message
        saying it was deleted, and purged after the retention period.

        Returns:
            The token as stored after the deletion (already-deleted tokens unchanged).

        Raises:
            TokenNotFound / TokenMalformed: no such token.
        """
        token_id = token.split(".", 1)[0].strip()
        await self.get(token_id)
        now = self._clock()

        def mark(secret: dict) -> dict | None:
            if _data(secret).get("deleted-at"):
                return None
            secret.setdefault("data", {})["deleted-at"] = _b64(format_time(now))
            return secret

        name = _secret_name(token_id)
        try:
            await update_with_retry(self.client, SECRETS, name, self.namespace, mark)
        except KubeNotFound as exc:
            raise TokenNotFound(f"bootstrap token {token_id!r} is not known to this hub") from exc
        return await self.get(token_id)

    async def validate(
        self, token: str, *, node_name: str | None = None, key_pin: str | None = None
    ) -> BootstrapToken:
        """Check a token presented at join, without consuming it.

        Args:
            token: ``<id>.<secret>``.
            node_name / key_pin: the joining node and its public key's pin; a single-use
                token already used by this same node and key is accepted again (the
                node retries a join whose answer it never received).

        Returns:
            The stored token.

        Raises:
            TokenMalformed, TokenNotFound, TokenWrong, TokenDeleted, TokenExpired,
            TokenUsed: each with a message saying what to do next.
        """
        token_id, _ = split_token(token)
        stored_secret: dict | None
        try:
            stored_secret = await retrying(
                lambda: self.client.get(SECRETS, _secret_name(token_id), self.namespace),
                what="get bootstrap token",
            )
        except KubeNotFound:
            stored_secret = None
        if stored_secret is None or stored_secret.get("type") != SECRET_TYPE:
            raise TokenNotFound(
                f"bootstrap token {token_id} is not known to this hub: it was mistyped, made "
                "for another hub, or deleted and purged long ago. Ask the operator for a new "
                "one ('cloudhub token create')",
                token_id=token_id,
            )
        expected = _data(stored_secret).get("token-secret-sha256", "")
        if not hmac.compare_digest(expected, _digest(token.strip())):
            raise TokenWrong(
                f"bootstrap token {token_id} exists but its secret part is wrong: check that "
                "the whole token was copied, or ask the operator for a new one "
                "('cloudhub token create')",
                token_id=token_id,
            )
        stored = _from_secret(stored_secret)
        now = self._clock()
        state = stored.state(now)
        if state == "deleted":
            raise TokenDeleted(
                f"bootstrap token {token_id} was deleted at {format_time(stored.deleted_at or 0)}"
                ": ask the operator for a new one ('cloudhub token create')",
                token_id=token_id,
            )
        if state == "expired":
            raise TokenExpired(
                f"bootstrap token {token_id} expired at {format_time(stored.expires_at or 0)}: "
                "ask the operator for a new one ('cloudhub token create --ttl ...')",
                token_id=token_id,
            )
        if state == "used" and not (stored.used_by == node_name and stored.used_key == key_pin):
            raise TokenUsed(
                f"bootstrap token {token_id} is single-use and was already used by node "
                f"{stored.used_by!r} at {format_time(stored.used_at or 0)}: ask the operator "
                "for a new one ('cloudhub token create')",
                token_id=token_id,
            )
        return stored

    async def consume(self, stored: BootstrapToken, *, node_name: str, key_pin: str) -> None:
        """Mark a single-use token used by ``node_name`` (no-op for multi-use tokens).

        The write is guarded by the Secret's resourceVersion, so that two nodes racing
        with one single-use token cannot both win.

        Raises:
            TokenUsed: another node or key used it first.
            TokenDeleted: it was deleted meanwhile.
        """
        if not stored.single_use:
            return
        now = self._clock()

        def mark(secret: dict) -> dict | None:
            current = _from_secret(secret)
            if current.deleted_at is not None:
                raise TokenDeleted(
                    f"bootstrap token {stored.token_id} was deleted while this node joined",
                    token_id=stored.token_id,
                )
            if current.used_by is not None:
                if current.used_by == node_name and current.used_key == key_pin:
                    return None
                raise TokenUsed(
                    f"bootstrap token {stored.token_id} is single-use and was just used by "
                    f"node {current.used_by!r}: ask the operator for a new one",
                    token_id=stored.token_id,
                )
            data = secret.setdefault("data", {})
            data["used-by"] = _b64(node_name)
            data["used-key-sha256"] = _b64(key_pin)
            data["used-at"] = _b64(format_time(now))
            return secret

        await update_with_retry(
            self.client, SECRETS, _secret_name(stored.token_id), self.namespace, mark
        )

    async def prune(self) -> list[str]:
        """Delete tokens that stopped being usable more than ``retention`` seconds ago.

        Returns:
            The ids deleted.
        """
        now = self._clock()
        gone: list[str] = []
        for stored in await self.list():
            since = stored.inactive_since(now)
            if since is None or now - since < self.retention:
                continue
            try:
                await retrying(
                    lambda s=stored: self.client.delete(
                        SECRETS, _secret_name(s.token_id), self.namespace
                    ),
                    what="delete bootstrap token",
                )
            except KubeNotFound:
                pass
            gone.append(stored.token_id)
        if gone:
            log.info("purged %d unusable bootstrap token(s): %s", len(gone), ", ".join(gone))
        return gone
