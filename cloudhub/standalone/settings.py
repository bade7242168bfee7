"""Settings of the embedded API server: one frozen dataclass, passed down once.

Every field has a unit in its name or docstring, and a default that suits one
machine. Load order (file, environment, flags) belongs to the caller: the hub's
settings loader or ``python -m cloudhub.standalone``; nothing here reads the
environment.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

from cloudhub.standalone.errors import ConfigurationError

__all__ = ["APIServerSettings"]


@dataclasses.dataclass(frozen=True, slots=True)
class APIServerSettings:
    """How the embedded Kubernetes-compatible API server runs.

    Attributes:
        data_dir: Directory holding the SQLite database (``state.db``), the CA and
            serving key pair, the bearer token and the kubeconfig. ``None`` keeps
            everything in memory (objects are lost when the server stops) and puts
            the TLS files and kubeconfig in a private temporary directory that is
            removed on close.
        host: Address to listen on. Loopback by default: the API holds every
            Secret, so exposing it is a decision the operator makes explicitly.
        port: TCP port; ``0`` picks a free one (read it back from
            ``EmbeddedAPIServer.url``). 6443 is the port kube-apiserver uses.
        advertise_host: Host name or address written into the kubeconfig and the
            serving certificate's subject alternative names, besides
            ``127.0.0.1``, ``::1`` and ``localhost``. ``None`` uses ``host`` when
            it is not a wildcard address.
        token: Bearer token clients must send. ``None`` generates a random one
            (kept in ``data_dir/token`` so that it survives restarts).
        watch_history_events: How many of the most recent changes the server
            keeps for watches and for consistent ``continue`` paging. A watch or
            a list asking for a resourceVersion older than that gets 410 Gone, as
            kube-apiserver does once etcd compacted the revision. 10,000 changes
            cover several minutes of a busy single-machine fleet.
        watch_queue_events: Events a single watcher may have waiting before the
            server ends that watch (the client re-watches from its last
            resourceVersion, as it does after any disconnect). Bounds the memory a
            stalled client can hold, like kube-apiserver's per-watcher buffer.
        bookmark_interval_s: Seconds between BOOKMARK events on watches that ask
            for them (``allowWatchBookmarks``). kube-apiserver sends one about
            every minute, and one shortly (2 s) before a watch's timeout.
        default_watch_timeout_s: Watch duration in seconds when the client gives
            no ``timeoutSeconds``. kube-apiserver picks a random duration between
            30 and 60 minutes; a fixed value here is enough as clients re-watch.
        max_request_body_bytes: Largest request body accepted (413 beyond). 3 MiB,
            as kube-apiserver: etcd's default value limit is 1.5 MiB per object.
        max_object_bytes: Largest object stored, as JSON (413 beyond). 1.5 MiB, etcd's
            default request limit: without one, patches that each fit in a request
            (a JSON patch ``copy`` doubles an object) grow an object without bound.
        commit_interval_s: Longest time the writer waits to gather more writes
            into one SQLite transaction (group commit). ``0`` commits as soon as the
            previous commit finished, which already batches concurrent writes.
        synchronous_full: ``True`` makes every commit fsync the WAL
            (``PRAGMA synchronous=FULL``), so an acknowledged write survives power
            loss; ``False`` (``NORMAL``) survives a process crash but may lose the
            last commits on power loss.
        event_ttl_s: Seconds an Event is kept after its last write (creation or
            update), then deleted: kube-apiserver's ``--event-ttl``, 1 h by default.
            Events are a record of recent happenings, not a log: without a TTL a
            fleet's reconnects alone grow the store without bound.
    """

    data_dir: pathlib.Path | None = None
    host: str = "127.0.0.1"
    port: int = 6443
    advertise_host: str | None = None
    token: str | None = None
    watch_history_events: int = 10_000
    watch_queue_events: int = 10_000
    bookmark_interval_s: float = 60.0
    default_watch_timeout_s: float = 1800.0
    max_request_body_bytes: int = 3 * 1024 * 1024
    max_object_bytes: int = 1_572_864
    commit_interval_s: float = 0.0
    synchronous_full: bool = True
    event_ttl_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.data_dir is not None and not isinstance(self.data_dir, pathlib.Path):
            object.__setattr__(self, "data_dir", pathlib.Path(self.data_dir))
        for name in (
            "bookmark_interval_s",
            "default_watch_timeout_s",
            "commit_interval_s",
            "event_ttl_s",
        ):
            if not math.isfinite(getattr(self, name)):
                raise ConfigurationError(f"{name} must be a finite number of seconds")
        if not 0 <= self.port <= 65535:
            raise ConfigurationError(f"port must be 0..65535, got {self.port}")
        if self.watch_history_events < 1:
            raise ConfigurationError(
                f"watch_history_events must be at least 1, got {self.watch_history_events}"
            )
        if self.watch_queue_events < 1:
            raise ConfigurationError(
                f"watch_queue_events must be at least 1, got {self.watch_queue_events}"
            )
        if self.bookmark_interval_s <= 0:
            raise ConfigurationError(
                f"bookmark_interval_s must be positive, got {self.bookmark_interval_s}"
            )
        if self.default_watch_timeout_s <= 0:
            raise ConfigurationError(
                f"default_watch_timeout_s must be positive, got {self.default_watch_timeout_s}"
            )
        if self.max_request_body_bytes < 1024:
            raise ConfigurationError(
                f"max_request_body_bytes must be at least 1024, got {self.max_request_body_bytes}"
            )
        if self.max_object_bytes < 1024:
            raise ConfigurationError(
                f"max_object_bytes must be at least 1024, got {self.max_object_bytes}"
            )
        if self.event_ttl_s <= 0:
            raise ConfigurationError(f"event_ttl_s must be positive, got {self.event_ttl_s}")
        if self.commit_interval_s < 0:
            raise ConfigurationError(
                f"commit_interval_s must not be negative, got {self.commit_interval_s}"
            )
        if self.token is not None and (not self.token or any(c.isspace() for c in self.token)):
            raise ConfigurationError("token must be a non-empty string without whitespace")

    @property
    def in_memory(self) -> bool:
        """True when nothing is written to disk but the temporary TLS files."""
        return self.data_dir is None
