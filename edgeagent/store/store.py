"""The agent's local store: SQLite in WAL mode (the standard library's ``sqlite3``).

What lives here:

- **objects** received from the hub (Pods, ConfigMaps, Secrets, later devices), each with
  its uid and resourceVersion; :meth:`Store.inventory` is what the hello carries.
- **pod_status**: the last status the agent computed per pod (restart counts survive an
  agent restart or a reboot).
- **outbox**: up-going messages (``pod_status``, ``pod_deleted``, ``event``,
  ``twin_reported``, ``metrics_batch``), kept until the hub acknowledges them. A message is
  appended unsent (``id`` gives the order); the uplink hands unsent messages to the
  session, whose ``send()`` numbers them, and records that seq (``outbox_mark_sent``);
  ``ack(up_to)`` (cumulative) removes every message with a seq up to it. At the next
  ``Session.connect`` the sent-but-unacknowledged ones are the ``pending`` resent with their
  seqs. A message with a coalescing key replaces an *unsent* one with the same key (latest
  wins, as the protocol says); one already sent stays until acknowledged.
- **sequence numbers**: the wire seqs are persistent and ever-increasing across restarts:
  ``next_seq()`` (for ``Session(next_seq=…)``) is above every seq that may have left the
  node, in this life or an earlier one.
- **state**: small agent facts (node name, hub session, sequence reservation).
- **device twins** and the **metrics buffer**: :meth:`Store.twins` and :meth:`Store.metrics`
  give the ``TwinStore`` and ``MetricsStorage`` the device and metrics packages define
  (:mod:`edgeagent.store.twins`, :mod:`edgeagent.store.metrics`).

Durability and SD cards. Object changes from the hub are committed before they take
effect (listeners are told after the commit). Everything else (status, outbox, state) is
written into one open transaction that is committed at most ``commit_delay`` seconds
later by :meth:`Store.flush` (the agent runs the flusher), so a burst of changes costs one
commit and an idle agent commits nothing. Writes that nothing waits for (metrics samples,
delivery marks) are *background* writes: they wait up to ``background_commit_delay``
(5 min) or ride along with an earlier commit. Whoever must not answer before its write is
durable (the device API before it acknowledges a report) awaits :meth:`Store.wait_committed`;
whatever must be durable before it leaves the node (a sealed metrics batch) commits at once.
A SIGKILL or power cut loses at most the uncommitted tail; the database itself stays
consistent (WAL). Sequence numbers are reserved in committed blocks kept at least
``SEQ_MARGIN`` ahead of the last one used (more than a session's unacknowledged window),
so a seq sent just before a crash, whose ``outbox_mark_sent`` was not committed yet, is
never used again.

Space and other processes. An offline backlog grows the file and the WAL; once it has
drained, :meth:`Store.reclaim` (the agent's housekeeping, every 10 s) gives the free pages
back (``auto_vacuum = INCREMENTAL``, ``incremental_vacuum`` when over
``reclaim_free_fraction`` of the file is free) and truncates the WAL to
``journal_size_limit``, so an SD card gets its space back. The store runs on the event
loop's thread, so it never waits there for another process's lock (an operator's
``sqlite3`` shell in a transaction): statements wait at most ``loop_busy_timeout`` (50
ms), a batch takes the write lock when it opens (``BEGIN IMMEDIATE``) so its writes and
its commit never wait, a write that finds the lock held raises ``StoreBusyError``, and
whoever must write (the uplink before a hub message and around every send, the flusher
after lost writes) awaits :meth:`Store.wait_writable`, which polls for the lock with
back-off (SQLite gives no notice across processes).

Only this package touches SQLite (an import-linter contract enforces it).
"""

from __future__ import annotations

from edgeagent.store.deadletters import DeadLetter, DeadLettersPart
from edgeagent.store.objects import ObjectChange, ObjectsPart, RefLike, StoredObject, ref_dict
from edgeagent.store.outbox import SEQ_BLOCK, SEQ_MARGIN, OutboxEntry
from edgeagent.store.podstatus import PodStatusPart, pod_coalesce_key

__all__ = [
    "SEQ_BLOCK",
    "SEQ_MARGIN",
    "DeadLetter",
    "ObjectChange",
    "OutboxEntry",
    "RefLike",
    "Store",
    "StoredObject",
    "pod_coalesce_key",
    "ref_dict",
]


class Store(ObjectsPart, PodStatusPart, DeadLettersPart):
    """The agent's SQLite store: one object over one database, made of one part per table
    family (:mod:`.db` the database, :mod:`.objects`, :mod:`.podstatus`, :mod:`.outbox`,
    :mod:`.state`, :mod:`.deadletters`; :meth:`twins` and :meth:`metrics` the device twins'
    and the metrics buffer's stores). Not thread-safe: use it from the event loop thread.

    Open with :meth:`Store.open` (the daemon) or :meth:`Store.open_readonly`
    (``edgeagent status``).
    """
