"""Settings of the hub's device twins: the ``devices`` group of the hub's root settings
(``CLOUDHUB_DEVICES__…``, ``--devices-…``). Durations in seconds, rates per second.
Nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import SettingsError

__all__ = ["DevicesSettings"]


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class DevicesSettings:
    """Device twins on the hub: Devices and DeviceModels sent to their nodes, desired
    state down, reported state written to the Device status."""

    enabled: bool = field(
        default=True,
        metadata=_h(
            "serve device twins (needs the Device and DeviceModel CRDs of deploy/crds; the "
            "embedded API gets them at start)"
        ),
    )
    qps: float = field(
        default=100.0,
        metadata=_h(
            "Device status writes per second, whatever the fleet reports (reports of one "
            "device are coalesced into one write, latest version per property)",
            "1/s",
        ),
    )
    burst: int = field(default=200, metadata=_h("Device status writes allowed at once"))
    workers: int = field(
        default=8, metadata=_h("Device status writes in flight at once (each waits for a token)")
    )
    retry_cap: float = field(
        default=30.0,
        metadata=_h(
            "longest back-off between retries of a status write the API refused with a "
            "transient error (5xx, 429, no answer); retried until it succeeds, and the "
            "reports stay unacknowledged on the edge meanwhile",
            "s",
        ),
    )

    def __post_init__(self) -> None:
        for name in ("qps", "burst", "workers", "retry_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not value > 0:
                raise SettingsError(name, "> 0", value)
