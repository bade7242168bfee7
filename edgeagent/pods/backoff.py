"""Crash-loop and image-pull back-off, as kubelet computes them.

Pure bookkeeping on times the caller passes in (seconds, any clock as long as it is the
same one): 10 s doubling to 5 min by default, forgotten after the container ran (or no
pull failed) for twice the maximum.

Container restarts follow kubelet's ``doBackOff``: the first restart is immediate and
starts the back-off; after each later crash the restart waits until ``finished_at +
current back-off``, and the back-off doubles at each restart.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Backoff", "go_duration"]


@dataclasses.dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    """Per-key exponential back-off.

    Args:
        initial: first delay in seconds.
        maximum: cap in seconds; an entry idle for ``2 * maximum`` is forgotten.
    """

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def _live(self, key: str, at: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and at - entry.last_update > 2 * self.maximum:
            del self._entries[key]
            return None
        return entry

    def remaining(self, key: str, since: float, now: float) -> float:
        """Seconds still to wait before acting on ``key``, counted from ``since`` (the
        container's finish time, or the last pull failure); 0 when free to go."""
        entry = self._live(key, since)
        if entry is None:
            return 0.0
        return max(0.0, entry.delay - (now - since))

    def remaining_since_update(self, key: str, now: float) -> float:
        """Seconds still to wait counted from the last :meth:`step` (image pulls)."""
        entry = self._live(key, now)
        if entry is None:
            return 0.0
        return max(0.0, entry.delay - (now - entry.last_update))

    def step(self, key: str, at: float) -> float:
        """Record an attempt at time ``at``; returns the back-off now in force."""
        entry = self._live(key, at)
        if entry is None:
            entry = self._entries[key] = _Entry(self.initial, at)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last_update = at
        return entry.delay

    def current(self, key: str) -> float:
        """The back-off in force for ``key`` (0 if none)."""
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def reset(self, key: str) -> None:
        """Forget ``key`` (a pull succeeded)."""
        self._entries.pop(key, None)


def go_duration(seconds: float) -> str:
    """Format like Go's ``time.Duration.String`` for kubelet-identical messages:
    ``10s``, ``1m20s``, ``5m0s``, ``400ms``."""
    if seconds < 1:
        ms = round(seconds * 1000)
        return f"{ms}ms" if ms else "0s"
    total = round(seconds, 3)
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(int(minutes), 60)
    sec_text = f"{secs:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{sec_text}s"
    if minutes:
        return f"{minutes}m{sec_text}s"
    return f"{sec_text}s"
