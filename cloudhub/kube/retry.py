"""Write retries: a fresh read on 409 Conflict, back-off on 5xx, 429 and timeouts.

Every write the hub makes goes through here so that a transient API error loses
nothing (issue 4, "Pods down, status up").
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cloudhub.errors import KubeAPIError, KubeConflict
from cloudhub.kube.client import KubeClient
from cloudhub.kube.resources import ResourceType
from protocol.backoff import backoff

__all__ = ["retrying", "update_with_retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = 8,
    base: float = 0.2,
    cap: float = 10.0,
    what: str = "API write",
) -> T:
    """Run ``call`` until it succeeds, backing off with full jitter on retryable errors.

    Args:
        call: makes one attempt.
        attempts: tries before giving up (>= 1).
        base / cap: back-off bounds in seconds.
        what: named in log lines.

    Raises:
        KubeAPIError: a non-retryable error at once (404, 409, 422, …), or the last
            retryable one after ``attempts`` tries.
    """
    delays = backoff(uniform=random.uniform, base=base, cap=cap)
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except KubeAPIError as exc:
            if not exc.retryable or attempt == attempts:
                raise
            delay = next(delays)
            log.warning("%s failed (%s); retry %d in %.2f s", what, exc, attempt, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


async def update_with_retry(
    client: KubeClient,
    rt: ResourceType,
    name: str,
    namespace: str | None,
    mutate: Callable[[dict], dict | None],
    *,
    subresource: str | None = None,
    attempts: int = 8,
    fence: Callable[[], bool] | None = None,
) -> dict | None:
    """Read-modify-write an object, re-reading and re-applying ``mutate`` on 409 Conflict.

    Args:
        mutate: receives the fresh object and returns the object to write, or
            ``None`` when no write is needed.
        subresource: ``"status"`` to write through the status subresource.
        fence: asked before every read and write attempt (the first, each retry after
            an error or a conflict); ``False`` ends the update with nothing more sent: the
            caller lost the right to write meanwhile (a hub replica that no longer owns
            the node, or is fenced), however long the retries took.

    Returns:
        The written object, or ``None`` when ``mutate`` decided no write was needed or
        ``fence`` said stop.

    Raises:
        KubeNotFound: the object does not exist. KubeAPIError: retries exhausted.
    """
    for attempt in range(1, attempts + 1):
        if fence is not None and not fence():
            return None
        current = await retrying(lambda: client.get(rt, name, namespace), what=f"get {name}")
        desired = mutate(current)
        if desired is None:
            return None

        async def write(d: dict = desired) -> dict | None:
            if fence is not None and not fence():
                return None
            return await client.replace(rt, d, subresource=subresource)

        try:
            return await retrying(write, what=f"update {rt.plural}/{name}")
        except KubeConflict:
            if attempt == attempts:
                raise
            log.debug("conflict updating %s/%s; re-reading", rt.plural, name)
    raise AssertionError("unreachable")  # pragma: no cover
