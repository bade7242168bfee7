"""Image pre-pull on the agent: ``image_pull_order`` in, images pulled, progress out.

:class:`ImagePuller` is an agent service (``Agent(services=[link, puller])``). Made before
the link runs, it registers ``image_pull_order`` on the
:class:`~edgeagent.uplink.session.HubLink` and carries each order out in a task it owns
(one order per pre-pull at a time; a newer generation of the same pre-pull cancels the
older one):

- the docker runtime pulls every image that is not present through the Docker API (the
  same ``ensure_image`` pods use, ``IfNotPresent``: an image present counts as pulled),
  reporting ``Pulling`` first, then ``Pulled`` with the count, or ``Failed`` with the
  runtime's reason (``ErrImagePull``) and message naming the image;
- the process runtime runs commands, not images: it reports ``Pulled`` at once with the
  reason ``NotApplicable`` (so a placement that waits for the pre-pull is not held up by
  a node that has nothing to pull).

Reports go through the store's outbox (at-least-once, they survive a restart). The image
references were checked by :func:`protocol.prepull.check_image` when the order was
decoded; they reach the Docker API as a query parameter, never a command line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeagent.errors import ContainerRuntimeError
from edgeagent.runtime.base import PullPolicy
from edgeagent.tasks import TaskSet
from protocol.prepull import ImagePullOrder, ImagePullProgress

if TYPE_CHECKING:
    from edgeagent.runtime.base import ContainerRuntime
    from edgeagent.store import Store
    from edgeagent.uplink.session import HubLink

__all__ = ["ImagePuller"]

log = logging.getLogger(__name__)


class ImagePuller:
    """Image pre-pull over the hub link (see the module docstring).

    Args:
        link: the agent's hub link (not running yet).
        clock: epoch seconds (``observed_at`` of the reports).
    """

    name = "prepull"

    def __init__(self, link: HubLink, clock: Callable[[], float] = time.time) -> None:
        self.link = link
        self.clock = clock
        self._tasks = TaskSet("prepull")
        self._runtime: ContainerRuntime | None = None
        self._store: Store | None = None
        self._early: list[ImagePullOrder] = []
        self._running: dict[str, tuple[int, asyncio.Task[Any]]] = {}
        link.register(ImagePullOrder, self._on_order)

    async def run(self, ctx: Any) -> None:
        """Own the pulls until the agent stops (``ctx.runtime``, ``ctx.store``)."""
        self._runtime = ctx.runtime
        self._store = ctx.store
        early, self._early = self._early, []
        for order in early:
            self._on_order(order)
        try:
            await asyncio.Event().wait()
        finally:
            await self._tasks.close()

    def _on_order(self, order: ImagePullOrder) -> None:
        if self._runtime is None:
            self._early.append(order)
            return
        running = self._running.get(order.uid)
        if running is not None:
            if running[0] >= order.generation and not running[1].done():
                return  # already at it
            running[1].cancel()
        task = self._tasks.spawn(self._pull(order), f"pull-{order.prepull}")
        self._running[order.uid] = (order.generation, task)

    async def _pull(self, order: ImagePullOrder) -> None:
        runtime = self._runtime
        assert runtime is not None
        if not runtime.has_images:
            self._report(
                order,
                "Pulled",
                0,
                "NotApplicable",
                "the process runtime runs commands, not images: nothing to pull",
            )
            return
        self._report(order, "Pulling", 0)
        pulled = 0
        for image in order.images:
            try:
                await runtime.ensure_image(image, PullPolicy.IF_NOT_PRESENT)
            except ContainerRuntimeError as exc:
                reason = getattr(exc, "reason", "") or "ErrImagePull"
                log.warning("pre-pull %s: %s failed: %s", order.prepull, image, exc)
                self._report(order, "Failed", pulled, reason, f"{image}: {exc}"[:1000])
                return
            pulled += 1
        log.info("pre-pull %s: %d image(s) present", order.prepull, pulled)
        self._report(order, "Pulled", pulled)

    def _report(
        self, order: ImagePullOrder, phase: str, pulled: int, reason: str = "", message: str = ""
    ) -> None:
        progress = ImagePullProgress(
            prepull=order.prepull,
            namespace=order.namespace,
            uid=order.uid,
            generation=order.generation,
            phase=phase,
            pulled=pulled,
            observed_at=self.clock(),
            reason=reason,
            message=message,
        )
        assert self._store is not None
        body = {f.name: getattr(progress, f.name) for f in dataclasses.fields(progress)}
        self._store.outbox_append(ImagePullProgress.kind, body)
