"""The edge agent's exception tree.

Every error the agent raises derives from :class:`AgentError`. Two branches say whose
fault it is, as in ``protocol.errors``:

- :class:`UsageError` — we (or the operator) misused something: a bad setting, an
  invalid pod spec, a store used after close.
- :class:`EnvironmentFault` — something outside the agent misbehaved or is missing:
  the container engine, the disk, a corrupted database file, the hub or the node's
  certificate.

Third-party exceptions (``sqlite3``, ``aiodocker``, ``OSError``) are translated at the
boundary of the module that calls them and chained with ``from``.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ConfigError",
    "ContainerNotFoundError",
    "ContainerRuntimeError",
    "CredentialsError",
    "EnvironmentFault",
    "HubUnavailable",
    "ImagePullError",
    "PodConfigError",
    "PodSpecError",
    "RuntimeUnavailableError",
    "StoreBusyError",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
    "UnsupportedFieldsError",
    "UsageError",
    "VolumeError",
]


class AgentError(Exception):
    """Root of every error raised by :mod:`edgeagent`."""


class UsageError(AgentError):
    """The agent or its operator misused something (bad settings, bad spec, wrong call)."""


class EnvironmentFault(AgentError):
    """Something outside the agent failed: the engine, the disk, the database file."""


# --- settings ---------------------------------------------------------------------------


class ConfigError(UsageError):
    """A setting is unknown or has an invalid value.

    Attributes:
        key: dotted setting name (``"store.commit_delay"``), or ``""`` for the file itself.
        source: where the value came from (a file path, ``"env EDGEAGENT_…"``, ``"flag"``).
    """

    def __init__(self, message: str, *, key: str = "", source: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.source = source


# --- store ------------------------------------------------------------------------------


class StoreError(EnvironmentFault):
    """The local SQLite store failed.

    Attributes:
        path: the database file.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreFullError(StoreError):
    """The disk (or the file system holding the store) is full; the write was not kept."""


class StoreCorruptError(StoreError):
    """The database file is damaged. At open the file is moved aside instead of raising."""


class StoreLockedError(StoreError):
    """Another agent process holds the state directory."""


class StoreBusyError(StoreError):
    """Another process (an operator's ``sqlite3`` shell) holds the database's write lock:
    the write was not made. Nothing is lost that the caller does not still hold; wait with
    :meth:`edgeagent.store.Store.wait_writable` (off the event loop's critical path) and
    write again."""


class StoreClosedError(UsageError):
    """The store was used after :meth:`edgeagent.store.Store.close`."""


# --- container runtime ------------------------------------------------------------------


class ContainerRuntimeError(EnvironmentFault):
    """The container engine (or the process runtime) failed an operation.

    Attributes:
        operation: what was attempted (``"create"``, ``"start"``, ``"pull"`` …).
    """

    def __init__(self, message: str, *, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation


class RuntimeUnavailableError(ContainerRuntimeError):
    """The engine cannot be reached (socket missing, daemon down)."""


class ContainerNotFoundError(ContainerRuntimeError):
    """No container (or process record) has that id."""


class ImagePullError(ContainerRuntimeError):
    """An image could not be made present.

    Attributes:
        image: the image reference.
        reason: the kubelet reason to show in the container status:
            ``"ErrImagePull"`` or ``"ErrImageNeverPull"``.
    """

    def __init__(self, message: str, *, image: str, reason: str = "ErrImagePull") -> None:
        super().__init__(message, operation="pull")
        self.image = image
        self.reason = reason


# --- pods -------------------------------------------------------------------------------


class PodSpecError(UsageError):
    """A pod spec cannot be run as given.

    Attributes:
        reason: a CamelCase reason for the pod status and the Event.
    """

    reason = "InvalidPodSpec"


class UnsupportedFieldsError(PodSpecError):
    """The pod uses fields this agent does not implement; it is not run at all.

    Attributes:
        fields: JSON paths of the offending fields (``"spec.containers[0].securityContext"``).
    """

    reason = "UnsupportedPodSpec"

    def __init__(self, fields: list[str] | tuple[str, ...]) -> None:
        self.fields = tuple(fields)
        super().__init__("unsupported field(s): " + ", ".join(self.fields))


class PodConfigError(PodSpecError):
    """A referenced ConfigMap, Secret or key is missing or unusable (kubelet's
    ``CreateContainerConfigError``); the pod waits and is retried when objects arrive."""

    reason = "CreateContainerConfigError"


class VolumeError(PodConfigError):
    """A volume cannot be set up (hostPath type check, unwritable directory); the pod
    stays ``ContainerCreating`` with a ``FailedMount`` Event, as with kubelet."""

    reason = "FailedMount"


# --- the hub connection -----------------------------------------------------------------


class CredentialsError(EnvironmentFault):
    """The node's TLS material (hub CA, node certificate, key) is missing, unreadable or
    expired; the message names the file and the command that fixes it.

    Attributes:
        path: the file concerned, if one.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StatsError(EnvironmentFault):
    """A container's or process tree's resource usage could not be read (its cgroup is
    gone, ``/proc`` refused, the engine answered an unexpected shape). The runtimes catch
    it and leave the container out of that sample.

    Attributes:
        source: what was being read (``"cgroup /edgeagent.slice/pod-1"``).
        reason: why it failed.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"cannot read {source}: {reason}")
        self.source = source
        self.reason = reason


class HubUnavailable(EnvironmentFault):
    """No session with the hub is open (or it closed while sending): the message was not
    sent; keep it and send it on the next session."""
