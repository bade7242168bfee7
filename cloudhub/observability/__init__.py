"""Metrics, health endpoints and structured logs of the hub."""

from cloudhub.observability.http import HealthServer, ReadinessCheck
from cloudhub.observability.logs import JSONFormatter, TextFormatter, setup_logging
from cloudhub.observability.metrics import DEPTH_BUCKETS, HubMetrics

__all__ = [
    "DEPTH_BUCKETS",
    "HealthServer",
    "HubMetrics",
    "JSONFormatter",
    "ReadinessCheck",
    "TextFormatter",
    "setup_logging",
]
