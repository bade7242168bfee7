"""Node labels given at join: syntax (Kubernetes label rules) and who may set what."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["RESERVED_SUFFIXES", "check_labels", "parse_labels", "reserved"]

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

RESERVED_SUFFIXES = ("kubernetes.io", "k8s.io", "edgefleet.io")
"""Label prefixes (and their subdomains) a node may not ask for itself: only the operator
may set them, through the token (kubelet's ``--node-labels`` is restricted the same way
by the NodeRestriction admission plugin)."""


def parse_labels(text: str) -> dict[str, str]:
    """Parse ``k=v,k2=v2`` (as ``kubectl label`` and kubelet's ``--node-labels``).

    Raises:
        ValueError: an item is not ``key=value`` or breaks the label syntax.
    """
    labels: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    check_labels(labels)
    return labels


def check_labels(labels: Mapping[str, str]) -> None:
    """Check keys and values against Kubernetes' label syntax.

    Raises:
        ValueError: naming the first bad key or value.
    """
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"label {key!r}: keys and values must be strings")
        prefix, slash, name = key.rpartition("/")
        if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
            raise ValueError(f"label key {key!r}: the prefix must be a DNS subdomain")
        if not _NAME.match(name):
            raise ValueError(
                f"label key {key!r}: the name must be 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        if value and not _NAME.match(value):
            raise ValueError(
                f"label {key}={value!r}: the value must be empty or 1-63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit"
            )


def reserved(key: str) -> bool:
    """True for a key under a prefix only the operator may set (see RESERVED_SUFFIXES)."""
    prefix = key.rpartition("/")[0]
    return any(prefix == s or prefix.endswith("." + s) for s in RESERVED_SUFFIXES)
