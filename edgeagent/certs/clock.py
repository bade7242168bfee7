"""This node's clock against the hub's: the skew check, the hub's clock as last measured,
and what to say when a clock is wrong.

- :func:`check_clock_skew`: one comparison (the join's ``hubTime``), logged when large.
- :class:`HubClock`: the hub's clock for a running agent. Measured at every welcome
  (``Welcome.hub_time``); between welcomes it follows our wall clock corrected by the last
  skew, *as long as the wall clock moves with the monotonic clock*. When the two disagree
  (NTP stepped the clock of a board that booted with no RTC, a resume from suspend, an
  operator's ``date -s``), the measurement no longer describes this clock: it is dropped
  and the wall clock is used alone until the next welcome measures again. Without this,
  the skew measured while the clock was an hour behind is applied on top of the corrected
  clock, and a certificate with minutes left is judged expired.
- :func:`clock_behind` / :func:`describe_clock`: messages that name the local clock
  against a certificate's ``notBefore`` or the hub's time, and say what to do (NTP).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable

__all__ = [
    "JUMP_TOLERANCE",
    "MAX_CLOCK_SKEW",
    "NTP_HINT",
    "HubClock",
    "check_clock_skew",
    "clock_behind",
    "explain_rejection",
    "explain_tls_failure",
    "iso",
    "span",
]

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW = 60.0
"""Seconds of difference with the hub's clock beyond which a warning is logged.
Certificates start 5 minutes in the past (``protocol.pki.CLOCK_SKEW``), so a board
without a real-time clock that boots a little behind still connects; beyond a minute,
timestamps in status, events and metrics are visibly off."""

JUMP_TOLERANCE = 2.0
"""Seconds the wall clock may drift from the monotonic clock since a measurement before it
counts as stepped (plus 0.05 % of the time elapsed: NTP slews at most 500 ppm)."""

NTP_HINT = (
    "set this node's clock: enable NTP ('timedatectl set-ntp true', then 'timedatectl "
    "status' shows 'System clock synchronized: yes'), or set it by hand with "
    "'date -s'; a board without a real-time clock starts at the last shutdown's time"
)


def iso(t: float) -> str:
    """``t`` (seconds since the epoch) as an RFC 3339 UTC time to the second."""
    try:
        moment = datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{t!r} s since the epoch"
    return moment.isoformat(timespec="seconds")


def span(seconds: float) -> str:
    """``seconds`` (its size) in the unit a reader takes in: s, minutes, hours, days."""
    seconds = abs(seconds)
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} s"


def check_clock_skew(hub_time: float, local_time: float, *, limit: float = MAX_CLOCK_SKEW) -> float:
    """Compare our clock with the hub's and log a warning naming both when they differ.

    Args:
        hub_time: the hub's clock (``Welcome.hub_time``), seconds since the epoch.
        local_time: our clock when the welcome arrived (``time.time()``).
        limit: seconds of skew tolerated silently.

    Returns:
        The skew in seconds, positive when our clock is ahead of the hub's.
    """
    skew = local_time - hub_time
    if abs(skew) > limit:
        log.warning(
            "clock skew with the hub: this node's clock reads %s, the hub's %s (%s by %.0f s);"
            " status and event times will be off: check NTP (timedatectl status)",
            iso(local_time),
            iso(hub_time),
            "ahead" if skew > 0 else "behind",
            abs(skew),
        )
    return skew


def clock_behind(local_time: float, not_before: float, whose: str) -> str | None:
    """The message for a clock behind a certificate's start, or ``None`` when it is not.

    Args:
        local_time: this node's clock, seconds since the epoch.
        not_before: the certificate's ``notBefore``, seconds since the epoch.
        whose: which certificate, for the message ("the hub's serving certificate").

    Returns:
        A sentence naming both times and what to do, or ``None`` if ``local_time`` is not
        before ``not_before``.
    """
    if local_time >= not_before:
        return None
    return (
        f"this node's clock reads {iso(local_time)}, before {whose}'s notBefore "
        f"{iso(not_before)}: the clock is at least {span(not_before - local_time)} behind; "
        f"{NTP_HINT}"
    )


_NOT_YET_VALID = ("not yet valid", "not valid yet")
"""How OpenSSL (``certificate is not yet valid``) and aioquic (``Certificate is not valid
yet``) say that a certificate starts after the local clock's now."""
_EXPIRED = ("has expired", "no longer valid", "certificate_expired")


def explain_tls_failure(
    error: str, local_time: float, known: list[tuple[str, float]], hub_time: float | None = None
) -> str | None:
    """Say what is wrong when verifying the hub's serving certificate failed for time.

    Args:
        error: the TLS failure's text (OpenSSL's or aioquic's words).
        local_time: this node's clock, seconds since the epoch.
        known: ``(name, notBefore)`` of certificates the hub issued by its clock (this
            node's certificate, the hub CA): a clock before one of them is behind by at
            least the difference, whatever the TLS error says.
        hub_time: the hub's clock as last measured, if any.

    Returns:
        A message naming this node's clock against the hub's (or a certificate's
        notBefore) and what to do, or ``None`` when time is not the cause.
    """
    text = error.lower()
    behind = next(
        ((name, nb) for name, nb in sorted(known, key=lambda item: -item[1]) if local_time < nb),
        None,
    )
    if behind is not None:
        name, not_before = behind
        lead = clock_behind(local_time, not_before, name)
        return f"cannot verify the hub's certificate by this node's clock: {lead}"
    if hub_time is not None and hub_time - local_time > MAX_CLOCK_SKEW:
        return (
            f"cannot verify the hub's certificate by this node's clock: it reads "
            f"{iso(local_time)}, the hub's {iso(hub_time)} (behind by "
            f"{span(hub_time - local_time)}); {NTP_HINT}"
        )
    if any(words in text for words in _NOT_YET_VALID):
        return (
            f"the hub's serving certificate is not valid yet by this node's clock, which "
            f"reads {iso(local_time)}: the clock is behind the hub's; {NTP_HINT}"
        )
    if any(words in text for words in _EXPIRED):
        return (
            f"the hub's serving certificate has expired by this node's clock, which reads "
            f"{iso(local_time)}: if the clock is ahead, {NTP_HINT}; if it is right, the "
            "hub's operator must renew the hub's certificate"
        )
    return None


def explain_rejection(
    local_time: float, not_after: float, hub_time: float | None, renew_hint: str
) -> str:
    """Why the hub rejected this node's certificate at TLS, as far as the clocks tell.

    Args:
        local_time: this node's clock, seconds since the epoch.
        not_after: the certificate's ``notAfter``, seconds since the epoch (0: unknown).
        hub_time: the hub's clock as last measured, or ``None`` (never measured, or
            dropped after a step of our clock).
        renew_hint: what to run for a new certificate.

    Returns:
        The cause that fits (expired by the hub's clock while ours is behind; expired by
        both; valid by both, so another CA or damaged files) and what to do.
    """
    if not not_after:
        return (
            "it expired (check this node's clock: timedatectl status), was not issued by "
            f"this hub's CA, or is damaged; {renew_hint}"
        )
    ends = iso(not_after)
    if local_time >= not_after:
        return f"it expired at {ends}, {span(local_time - not_after)} ago; {renew_hint}"
    if hub_time is not None and hub_time >= not_after:
        return (
            f"it expired at {ends} by the hub's clock, which reads {iso(hub_time)}, while "
            f"this node's reads {iso(local_time)} ({span(hub_time - local_time)} behind: "
            f"{NTP_HINT}); a new certificate is needed either way: {renew_hint}"
        )
    if hub_time is not None:
        return (
            f"it is valid until {ends} by this node's clock and the hub's, so it was not "
            "issued by this hub's CA (a node joined to another fleet, or a hub whose CA was "
            f"replaced) or is damaged; {renew_hint}"
        )
    return (
        f"it is valid until {ends} by this node's clock: unless that clock is behind "
        "(timedatectl status), it was not issued by this hub's CA (a node joined to another "
        f"fleet, or a hub whose CA was replaced) or is damaged; {renew_hint}"
    )


class HubClock:
    """The hub's clock as this node last measured it (see the module docstring).

    Args:
        wall: seconds since the epoch (``time.time``).
        monotonic: seconds, monotonic (``time.monotonic``).
        tolerance: seconds of wall-against-monotonic drift that are not a step.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        tolerance: float = JUMP_TOLERANCE,
    ) -> None:
        self._wall = wall
        self._mono = monotonic
        self._tolerance = tolerance
        self._skew: float | None = None
        self._wall_at = 0.0
        self._mono_at = 0.0
        self.steps = 0
        """How many times a step of the wall clock dropped the measurement."""

    def measure(self, hub_time: float, *, limit: float = MAX_CLOCK_SKEW) -> float:
        """Record the hub's clock now (a welcome's ``hub_time``), logging a large skew.

        Returns:
            The skew in seconds, positive when our clock is ahead of the hub's.
        """
        local = self._wall()
        self._skew = check_clock_skew(hub_time, local, limit=limit)
        self._wall_at, self._mono_at = local, self._mono()
        return self._skew

    @property
    def skew(self) -> float | None:
        """Our clock minus the hub's, seconds, while the last measurement still holds
        (``None`` before the first, and after a step of our clock dropped it)."""
        self._check_step()
        return self._skew

    def measured(self) -> float | None:
        """The hub's clock now while a measurement holds, else ``None``."""
        skew = self.skew
        return None if skew is None else self._wall() - skew

    def now(self) -> float:
        """Seconds since the epoch by the hub's clock: ours corrected by the skew while the
        measurement holds, ours alone otherwise. The hub judges certificates by its
        clock, so their renewal is timed with this one."""
        wall = self._wall()
        self._check_step(wall)
        return wall - (self._skew or 0.0)

    def _check_step(self, wall: float | None = None) -> None:
        if self._skew is None:
            return
        wall = self._wall() if wall is None else wall
        elapsed = self._mono() - self._mono_at
        step = (wall - self._wall_at) - elapsed
        if abs(step) <= self._tolerance + 0.0005 * abs(elapsed):
            return
        log.warning(
            "this node's clock was stepped %s by %s since the hub's clock was measured "
            "(NTP, a resume, or 'date -s'); dropping the %.0f s skew measured then: the "
            "clock is used as it is until the next welcome measures again",
            "forward" if step > 0 else "back",
            span(step),
            self._skew,
        )
        self._skew = None
        self.steps += 1
