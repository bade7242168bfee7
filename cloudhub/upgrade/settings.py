"""Settings of agent upgrades in the hub: the ``upgrade`` group of the hub's settings.

YAML ``upgrade: {...}``, the environment (``CLOUDHUB_UPGRADE__ARTIFACT_DIR``) and flags
(``--upgrade-artifact-dir``). Durations in seconds. Nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import SettingsError

__all__ = ["UpgradeSettings"]


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class UpgradeSettings:
    """The EdgeUpgrade controller run by ``cloudhub serve`` (docs/upgrade.md)."""

    enabled: bool = field(
        default=True, metadata=_h("roll EdgeUpgrades out: order, serve and gate agent upgrades")
    )
    artifact_dir: str = field(
        default="/var/lib/cloudhub/artifacts",
        metadata=_h("directory of the wheels EdgeUpgrades name (spec.artifact.name)"),
    )
    interval: float = field(
        default=2.0,
        metadata=_h("seconds between two passes over the EdgeUpgrades and their nodes", "s"),
    )
    install_crd: bool = field(
        default=True,
        metadata=_h("create the EdgeUpgrade CRD on the embedded API when it is missing"),
    )

    admission: bool = field(
        default=False,
        metadata=_h(
            "on a real cluster, serve the validating webhook that refuses EdgeUpgrades and "
            "EdgeImagePrePulls selecting nodes their creator may not see (deploy/admission/; "
            "the base Deployment turns it on)"
        ),
    )
    admission_host: str = field(
        default="0.0.0.0", metadata=_h("address of the admission webhook's HTTPS server")
    )
    admission_port: int = field(
        default=8443,
        metadata=_h("port of the admission webhook's HTTPS server (0: any free port)"),
    )
    admission_webhook: str = field(
        default="edgefleet-node-selection",
        metadata=_h(
            "ValidatingWebhookConfiguration whose caBundle the hub sets to the hub CA when it "
            "serves the webhook (empty: leave it alone)"
        ),
    )

    admission_ca_interval: float = field(
        default=30.0,
        metadata=_h(
            "seconds between two checks that the webhook configuration carries the hub CA "
            "(it may be applied after the hub starts, or written back without it; one get "
            "each)",
            "s",
        ),
    )

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise SettingsError("upgrade.interval", "> 0", self.interval)
        if not self.admission_ca_interval > 0:
            raise SettingsError("upgrade.admission_ca_interval", "> 0", self.admission_ca_interval)
        if not 0 <= self.admission_port <= 65535:
            raise SettingsError("upgrade.admission_port", "a port 0..65535", self.admission_port)
