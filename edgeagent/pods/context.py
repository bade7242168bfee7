"""What a pod worker needs of its reconciler (:class:`PodContext`), and the pod identity.

The reconciler (:mod:`edgeagent.pods.reconciler`) creates and owns the workers
(:mod:`edgeagent.pods.worker`) and is their context; the worker sees it only through this
protocol, so the two modules do not import each other.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from edgeagent.errors import StoreError
    from edgeagent.pods.volumes import VolumeManager
    from edgeagent.runtime.base import ContainerRuntime
    from edgeagent.settings import AgentSettings
    from edgeagent.store import Store

__all__ = ["PodContext", "PodRef"]


@dataclasses.dataclass(frozen=True, slots=True)
class PodRef:
    """The pod's identity (the fields of ``protocol.messages.ObjectRef``)."""

    kind: str
    namespace: str
    name: str
    uid: str


class PodContext(Protocol):
    """The parts shared by every pod worker of one agent.

    Attributes:
        store: the agent store (the pod, its ConfigMaps/Secrets; status goes back in).
        runtime: the connected container runtime.
        settings: the agent settings.
        host_ip: the node IP (``status.hostIP``).
        wall: seconds since the epoch (status timestamps).
        volumes: prepares each pod's volumes.
        logs_dir: where the process runtime writes container logs.
    """

    store: Store
    runtime: ContainerRuntime
    settings: AgentSettings
    host_ip: str
    wall: Callable[[], float]
    volumes: VolumeManager
    logs_dir: pathlib.Path

    def event(self, ref: PodRef, etype: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event about the pod."""
        ...

    def store_failed(self, exc: StoreError) -> None:
        """A status or event write failed (disk full)."""
        ...

    def note_started(self, uid: str, container: str) -> None:
        """A container attempt of the pod was started now."""
        ...
