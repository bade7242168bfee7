"""The agent's local SQLite store (the only package that touches SQLite)."""

from edgeagent.store.db import agent_running
from edgeagent.store.store import (
    SEQ_BLOCK,
    SEQ_MARGIN,
    DeadLetter,
    ObjectChange,
    OutboxEntry,
    RefLike,
    Store,
    StoredObject,
    pod_coalesce_key,
    ref_dict,
)

__all__ = [
    "SEQ_BLOCK",
    "SEQ_MARGIN",
    "DeadLetter",
    "ObjectChange",
    "OutboxEntry",
    "RefLike",
    "Store",
    "StoredObject",
    "agent_running",
    "pod_coalesce_key",
    "ref_dict",
]
