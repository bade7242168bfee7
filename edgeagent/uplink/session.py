"""The agent's session with the hub: the service that joins the store and the streams to
the dialer.

:class:`HubLink` is an agent service (``edgeagent run`` starts it when ``hub.url`` is set);
what it needs of the agent comes in its :class:`SessionContext`. The agent does not wait
for it: pods run from the store whether or not the hub answers. On every session the dialer
(:mod:`edgeagent.uplink.dialer`) opens:

1. **hello**: the store's inventory (uid → resourceVersion) and this node's facts
   (:func:`edgeagent.nodeinfo.node_info`); the outbox's sent-but-unacknowledged messages
   are resent with their sequence numbers, minus those the welcome says the hub has.
2. **welcome**: the hub's ``received_up_to`` acknowledges what it already has; its clock
   is compared with ours (a difference over ``hub.max_clock_skew`` is logged with both
   times, and certificate renewal is timed by the hub's clock from then on:
   :meth:`HubLink.hub_clock`, an :class:`~edgeagent.certs.HubClock` that drops the skew when
   our clock is stepped; the certificate is refused locally only when it expired by both);
   ``hub.session`` (state, transport, since) is recorded for ``edgeagent status``.
3. **down**: every message from the hub goes to the handler registered for its kind
   (:meth:`HubLink.register`), in arrival order. Built in: ``object_upsert`` and
   ``object_delete`` are committed to the store before anything acts on them (the pod
   reconciler is told after the commit), ``sync_done`` ends the reconnect diff, ``error``
   is logged.
4. **up**: the sources (:class:`~edgeagent.uplink.sources.base.UpSource`: the store's
   outbox with pod status, ``pod_deleted`` and events; twin reports; metrics batches) are
   drained as the send scheduler (:mod:`edgeagent.uplink.scheduler`) picks them, by
   priority (CONTROL > STATUS > BULK), as many messages as the session's window allows.
   A source wakes the drain (its ``add_wakeup``, :meth:`HubLink.kick`); the outbox does so
   on every append, so a status goes up as soon as it changes, not on a timer, and what
   is still waiting for the window is coalesced in the outbox (latest wins per pod).
5. **acks**: the hub's cumulative ack is passed to every source (each drops what it
   covers) and to the ``on_acked`` callbacks of :meth:`HubLink.send`.

Certificates (docs/pki.md): with the default credentials, the files ``edgeagent join``
wrote (``<state_dir>/pki`` or the ``hub.*_file`` settings) are read at every dial and again
whenever they change, and a :class:`~edgeagent.certs.CertificateRenewer` runs on every
session: at a jittered 70-90 % of the certificate's lifetime it sends
``cert_renew_request``, takes the ``cert_renew_response`` and replaces the files
atomically; the session goes on and the next dial uses the new certificate. A refused
identity (certificate expired, revoked, not from the hub's CA) is an ERROR naming the
recovery command, recorded as ``hub.session`` state ``refused`` (``no-credentials`` when
the files are missing or unusable here); the agent keeps running
its pods and retries at the back-off cap, and picks up the files a re-join writes.

Extension points for other parts of the agent (device twins, metrics, certificate
renewal), all to be used before the agent starts:

- :meth:`HubLink.register` ``(kind, handler)``: a handler for a down-going kind (the
  context's ``handlers``, e.g. ``twin_desired`` → ``TwinSource.on_desired``, are
  registered the same way at start);
- :meth:`HubLink.add_source` ``(source)``: an up-going stream (the context's ``sources``,
  twin reports and metrics batches with their own outboxes, are added the same way);
- :meth:`HubLink.add_session_task` ``(factory)``: a coroutine run for each session and
  cancelled when it ends (e.g. certificate renewal over the live session);
- :meth:`HubLink.send` ``(message, on_acked=...)``: push one message on the current
  session, outside the sources (a request answered on the same session: certificate
  renewal);
  :meth:`HubLink.connection_id` tells sessions apart.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from edgeagent.certs.clock import HubClock
from edgeagent.credentials import RENEW_HINT
from edgeagent.errors import HubUnavailable, StoreError
from edgeagent.nodeinfo import AGENT_VERSION, node_info
from edgeagent.store import Store
from edgeagent.uplink.dialer import Uplink, UplinkSettings
from edgeagent.uplink.scheduler import SendScheduler
from edgeagent.uplink.sources.base import DownHandler, UpSource
from edgeagent.uplink.sources.outbox import OutboxSource, hello, resend_list
from protocol.errors import (
    CloseCode,
    ConnectionClosed,
    ErrorCode,
    InvalidMessage,
    MessageTooLarge,
    ProtocolError,
)
from protocol.events import SendFailed
from protocol.messages import (
    CertRenewResponse,
    Error,
    Hello,
    Message,
    ObjectDelete,
    ObjectUpsert,
    SyncDone,
)
from protocol.session import Acked, Closed, MessageReceived, PeerDead, PeerError, SessionConfig

if TYPE_CHECKING:
    from edgeagent.certs import CertificateRenewer
    from edgeagent.settings import AgentSettings, HubSettings
    from protocol.transport import Link, PEMCredentials, TLSCredentials

__all__ = ["HubLink", "SessionContext", "SessionTask"]

log = logging.getLogger(__name__)

SessionTask = Callable[["Link"], Awaitable[None]]
"""``factory(link)``: a coroutine run for one session, cancelled when it ends."""


class SessionContext(Protocol):
    """What the hub session needs of the running agent (``edgeagent.agent.AgentContext``
    has it): passed in, so this package imports nothing above it."""

    @property
    def settings(self) -> AgentSettings: ...
    @property
    def store(self) -> Store: ...
    @property
    def node_name(self) -> str: ...
    @property
    def host_ip(self) -> str: ...
    @property
    def sources(self) -> Sequence[UpSource]: ...
    @property
    def handlers(self) -> Mapping[type, DownHandler]: ...


def _source_name(source: Any) -> str:
    return getattr(source, "name", type(source).__name__)


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


class HubLink:
    """The hub connection service.

    Args:
        credentials: returns the TLS credentials for the next dial. Default: the files
            named by the ``hub`` settings (:class:`~edgeagent.credentials.FileCredentials`),
            renewed over the session by a :class:`~edgeagent.certs.CertificateRenewer`
            (see the module docstring); credentials given here are the caller's to renew.
        wall_clock: seconds since the epoch (clock-skew check, ``hub.session`` times).
    """

    name = "hub"

    def __init__(
        self,
        *,
        credentials: Callable[[], TLSCredentials | PEMCredentials] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self._wall = wall_clock
        self._handlers: dict[type[Message], DownHandler] = {}
        self._sources: list[UpSource] = []
        self._scheduler: SendScheduler[UpSource] = SendScheduler()
        self._session_tasks: list[SessionTask] = []
        self.capabilities: list[str] = ["pods"]
        """Sent in the hello; parts that add handlers add what they can do."""
        self._wake = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._link: Link | None = None
        self._session_no = 0
        self._acked_up_to = 0
        self._on_acked: dict[int, Callable[[], None]] = {}
        self._unhandled: set[str] = set()
        self._store: Store | None = None
        self._outbox: OutboxSource | None = None
        self.uplink: Uplink | None = None
        """The uplink while the service runs (for observation: transport, link changes)."""
        self.synced = asyncio.Event()
        """Set when the current session's ``sync_done`` arrived; cleared when it ends."""
        self.clock = HubClock(wall=wall_clock)
        """The hub's clock, measured at every welcome (dropped when ours is stepped)."""
        self.renewer: CertificateRenewer | None = None
        """The certificate renewer while the service runs with the default credentials."""

    # -- extension points ----------------------------------------------------------------

    def register(self, kind: type[Message], handler: DownHandler) -> None:
        """Handle every hub message of ``kind`` with ``handler`` (replacing a built-in one).

        Raises:
            ValueError: ``kind`` is not a message the hub may send.
        """
        if not getattr(kind, "from_hub", False) or getattr(kind, "control", False):
            raise ValueError(f"{kind.__name__} is not an application message the hub sends")
        self._handlers[kind] = handler

    def add_source(self, source: UpSource) -> None:
        """Drain ``source`` on every session, by its priority, after the outbox, the
        agent context's sources and the sources of its class added before it."""
        self._sources.append(source)

    def add_session_task(self, factory: SessionTask) -> None:
        """Run ``factory(link)`` for every session; it is cancelled when the session ends
        (an exception it raises is logged and ends only that task)."""
        self._session_tasks.append(factory)

    def kick(self) -> None:
        """Something new to send: drain the sources now (cheap; call it freely)."""
        self._scheduler.wake()
        self._wake.set()

    # -- observation ---------------------------------------------------------------------

    @property
    def link(self) -> Link | None:
        """The open session's link, if any."""
        link = self._link
        return link if link is not None and not link.closed else None

    @property
    def skew(self) -> float | None:
        """Our clock minus the hub's at the last welcome, seconds (``None`` before it, or
        once our clock was stepped since: :class:`~edgeagent.certs.HubClock`)."""
        return self.clock.skew

    def hub_clock(self) -> float:
        """Seconds since the epoch by the hub's clock as last seen (``HubClock.now``): the
        hub judges certificates by its clock, so their renewal is timed with this one."""
        return self.clock.now()

    def connection_id(self) -> int | None:
        """A number that changes with every session, or ``None`` while offline."""
        return self._session_no if self.link is not None else None

    async def send(
        self, message: Message, *, on_acked: Callable[[], None] | None = None
    ) -> int | None:
        """Send one message on the current session (waiting while its window is full).

        For a request answered on the same session (certificate renewal): nothing is
        stored here; after a new session (:meth:`connection_id` changed) the caller sends
        again what was not acknowledged. A stream goes through a source instead
        (:meth:`add_source`), which the scheduler drains by priority.

        Args:
            message: an edge message.
            on_acked: called once the hub's cumulative ack covers this message (never if
                the session ends first).

        Returns:
            The message's seq, or ``None`` for a kind that needs no ack.

        Raises:
            HubUnavailable: no session is open, or it closed before the message was sent.
        """
        link = self.link
        if link is None:
            raise HubUnavailable("no session with the hub is open")
        async with self._send_lock:  # seqs are recorded in the order they were given
            try:
                seq = await link.send(message)
            except ConnectionClosed as exc:
                raise HubUnavailable(f"the session with the hub closed: {exc}") from exc
            if seq is not None and self._store is not None:
                self._store.note_seq_used(seq)
        if seq is not None:
            if on_acked is not None:
                if link is self._link and seq > self._acked_up_to:
                    self._on_acked[seq] = on_acked
                elif link is self._link:
                    on_acked()
        return seq

    # -- the service ---------------------------------------------------------------------

    async def run(self, ctx: SessionContext) -> None:
        """Keep a session with the hub until cancelled (the agent's service entry point).

        Never raises for hub or network trouble: the uplink retries with back-off, and the
        agent runs its pods meanwhile.

        Raises:
            ConfigError: ``hub.url`` is not usable.
        """
        settings = ctx.settings
        hub = settings.hub
        dialer = _dialer_settings(hub)
        store = ctx.store
        self._store = store
        handlers: dict[type[Message], DownHandler] = {
            ObjectUpsert: self._on_upsert,
            ObjectDelete: self._on_delete,
            SyncDone: self._on_sync_done,
            Error: self._on_error,
        }
        handlers.update(ctx.handlers)
        # Up: the store's outbox, the agent's other streams, then what was added here; the
        # scheduler drains them by priority (CONTROL > STATUS > BULK).
        scheduler: SendScheduler[UpSource] = SendScheduler()
        outbox = OutboxSource(store, node_name=ctx.node_name, max_attempts=hub.dead_letter_attempts)
        self._outbox = outbox
        for source in [outbox, *ctx.sources, *self._sources]:
            scheduler.add(source)
        self._scheduler = scheduler
        removers: list[Callable[[], Any]] = [s.add_wakeup(self.kick) for s in scheduler.sources]
        if self._credentials is None:
            handlers[CertRenewResponse] = self._use_the_join_files(settings)
        handlers.update(self._handlers)

        def make_hello() -> Hello:
            return hello(
                store,
                node_name=ctx.node_name,
                agent_version=AGENT_VERSION,
                capabilities=tuple(self.capabilities),
                node_info=node_info(settings, ctx.host_ip),
            )

        try:
            make_hello()
        except InvalidMessage as exc:
            # No session can ever open (e.g. a host name with "_" as the node name): say so
            # once and leave the pods running, rather than failing every few seconds.
            log.error(
                "cannot connect to the hub: %s; set node_name to a valid Kubernetes node "
                "name (lower-case letters, digits, '-' and '.')",
                exc,
            )
            self._record(store, "disconnected", reason=f"invalid hello: {exc}")
            await asyncio.Event().wait()  # until the agent stops
        uplink = Uplink(
            dialer,
            credentials=self._credentials,
            make_hello=make_hello,
            pending=lambda: resend_list(store),
            next_seq=store.next_seq,
            on_link=lambda link: self._serve(link, ctx, handlers),
            on_refused=lambda reason, by_hub: self._record(
                store, "refused" if by_hub else "no-credentials", reason=reason
            ),
            explain=lambda exc: self._explain_dial_failure(store, exc),
            wake=self._credentials_changed,
        )
        self.uplink = uplink
        self._record(store, "connecting", reason=f"dialling {hub.url}")
        log.info("connecting to the hub at %s (%s)", hub.url, ", ".join(hub.transports))
        # The uplink runs as a task of its own so that stopping (this task cancelled) goes
        # through uplink.close(): the session is closed with GOING_AWAY, not dropped.
        run = asyncio.get_running_loop().create_task(uplink.run(), name="hub-uplink")
        try:
            await asyncio.wait({run})
            run.result()
        finally:
            for remove in removers:
                remove()
            try:
                await uplink.close()
            finally:
                if not run.done():
                    run.cancel()
                await asyncio.gather(run, return_exceptions=True)
                self._record(store, "disconnected", reason="agent stopped")

    def _use_the_join_files(self, settings: AgentSettings) -> DownHandler:
        """The default credentials: the files ``edgeagent join`` wrote, read at every dial,
        renewed over the session by a :class:`~edgeagent.certs.CertificateRenewer` on the
        hub's clock. Returns the ``cert_renew_response`` handler."""
        import random

        from edgeagent.certs import CertificateRenewer, CertPaths
        from edgeagent.credentials import FileCredentials

        self._credentials = FileCredentials(
            settings, wall_clock=self._wall, hub_clock=self.hub_clock
        )
        self.renewer = CertificateRenewer(
            CertPaths.from_settings(settings), uniform=random.uniform, clock=self.hub_clock
        )
        return self.renewer.handle

    def _credentials_changed(self) -> bool:
        """The default credentials' files changed since the last dial read them (a
        re-join): the uplink dials again at once instead of waiting out its back-off."""
        from edgeagent.credentials import FileCredentials

        credentials = self._credentials
        return isinstance(credentials, FileCredentials) and credentials.changed()

    def _explain_dial_failure(self, store: Store, exc: Exception) -> str | None:
        """This node's clock as the cause of a failed dial (issue 15 item 6b), recorded as
        ``hub.session`` state ``clock-wrong``; ``None`` when time is not the cause. For a
        certificate the hub rejected, the cause that fits (expired by whose clock, or not
        from the hub's CA), which the uplink records as ``refused``."""
        from edgeagent.certs.clock import explain_rejection, explain_tls_failure
        from edgeagent.credentials import FileCredentials
        from protocol.transport.errors import CertificateRejected

        credentials = self._credentials
        if isinstance(exc, CertificateRejected):  # the hub's verdict: whose clock, or CA
            not_after = credentials.not_after if isinstance(credentials, FileCredentials) else 0
            return explain_rejection(self._wall(), not_after, self.clock.measured(), RENEW_HINT)
        known = []
        if isinstance(credentials, FileCredentials) and credentials.not_before:
            known.append(("this node's certificate (issued by the hub)", credentials.not_before))
        text = explain_tls_failure(str(exc), self._wall(), known)
        if text:
            text += "; the agent connects by itself once the clock is right"
            self._record(store, "clock-wrong", reason=text)
        return text

    def _record(self, store: Store, state: str, **extra: Any) -> None:
        value = {"state": state, "since": _iso(self._wall()), **extra}
        try:
            store.set_state("hub.session", value)
        except StoreError as exc:
            log.warning("cannot record the hub session state: %s", exc)

    async def _serve(
        self, link: Link, ctx: SessionContext, handlers: dict[type[Message], DownHandler]
    ) -> None:
        """One session (the uplink's ``on_link``): until the link closes."""
        store = ctx.store
        welcome = link.welcome
        assert welcome is not None
        self.clock.measure(welcome.hub_time, limit=ctx.settings.hub.max_clock_skew)
        self._session_no += 1
        self._link = link
        self._acked_up_to = welcome.received_up_to
        self._on_acked = {}
        self.synced.clear()
        tasks: list[asyncio.Task[Any]] = []
        try:
            store.advance_seq(welcome.received_up_to)
            for source in self._scheduler.sources:
                source.session_started(welcome.received_up_to)
            self._record(
                store,
                "connected",
                transport=link.transport,
                session_id=welcome.session_id,
                hub=ctx.settings.hub.url,
            )
            log.info(
                "connected to the hub over %s (session %s, hub has up to seq %d, %d resent)",
                link.transport,
                welcome.session_id,
                welcome.received_up_to,
                sum(1 for seq, _ in link.session.unacked() if seq > welcome.received_up_to),
            )
            loop = asyncio.get_running_loop()
            tasks.append(loop.create_task(self._drain(link, store), name="hub-drain"))
            for factory in self._session_tasks:
                tasks.append(loop.create_task(self._session_task(factory, link), name="hub-task"))
            renewer = self.renewer
            if renewer is not None:
                renewal = self._session_task(lambda _link: renewer.run(self.send), link)
                tasks.append(loop.create_task(renewal, name="hub-cert-renewal"))
            self.kick()
            async for event in link:
                if isinstance(event, MessageReceived):
                    if not await self._dispatch(link, handlers, event.message):
                        break
                elif isinstance(event, Acked):
                    self._on_ack(event.up_to)
                elif isinstance(event, PeerError):  # the session delivers ``error`` so
                    self._on_refused(event.error)
                    if not await self._dispatch(link, handlers, event.error):
                        break
                elif isinstance(event, SendFailed):
                    self._on_send_failed(event)
                elif isinstance(event, PeerDead):
                    log.warning("the hub went silent for %.0f s", event.silent_for)
                elif isinstance(event, Closed):
                    if event.by_peer and event.code is CloseCode.UNAUTHORIZED:
                        log.error(
                            "the hub closed the session and refuses this node (%s): %s",
                            event.reason,
                            RENEW_HINT,
                        )
                    else:
                        log.info(
                            "session with the hub closed: %s%s%s",
                            event.code.name,
                            f" ({event.reason})" if event.reason else "",
                            " by the hub" if event.by_peer else "",
                        )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for source in self._scheduler.sources:
                try:
                    source.session_ended()
                except Exception:
                    log.exception("%s: session_ended failed", _source_name(source))
            self._link = None
            self._on_acked = {}
            self.synced.clear()
            closed = link.close_event
            reason = (
                closed.code.name + (f": {closed.reason}" if closed.reason else "") if closed else ""
            )
            self._record(store, "disconnected", reason=reason or "link ended")

    async def _session_task(self, factory: SessionTask, link: Link) -> None:
        try:
            await factory(link)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a hub session task failed")

    # -- down ----------------------------------------------------------------------------

    async def _dispatch(
        self, link: Link, handlers: dict[type[Message], DownHandler], message: Message
    ) -> bool:
        """Give ``message`` to its handler. Returns False when the session must end (the
        store could not keep an object: the next session's inventory makes the hub resend
        it)."""
        handler = handlers.get(type(message))
        if handler is None:
            kind = type(message).kind
            if kind not in self._unhandled:
                self._unhandled.add(kind)
                log.warning("the hub sent %s messages, which this agent does not handle", kind)
            return True
        try:
            if self._store is not None:  # the handler's writes never wait for a lock
                await self._store.wait_writable()
            result = handler(message)
            if inspect.isawaitable(result):
                await result
        except StoreError as exc:
            log.error(
                "could not store %s from the hub (%s); reconnecting so that the hub resends it",
                type(message).kind,
                exc,
            )
            await link.close(CloseCode.GOING_AWAY, "edge store write failed")
            return False
        except (ProtocolError, ValueError, KeyError, TypeError):
            log.exception("handling %s from the hub failed", type(message).kind)
        return True

    def _on_upsert(self, message: Message) -> None:
        assert isinstance(message, ObjectUpsert) and self._store is not None
        self._store.apply_upsert(message.ref, message.resource_version, message.object)

    def _on_delete(self, message: Message) -> None:
        assert isinstance(message, ObjectDelete) and self._store is not None
        self._store.apply_delete(message.ref.uid)

    def _on_sync_done(self, message: Message) -> None:
        assert isinstance(message, SyncDone) and self._store is not None
        log.info("in sync with the hub: %d object(s) for this node", message.inventory_size)
        self._store.note_full_sync(message.inventory_size)  # ends a pod adoption
        self.synced.set()

    def _on_error(self, message: Message) -> None:
        assert isinstance(message, Error)
        log.warning(
            "the hub answered%s with %s: %s",
            f" message {message.in_reply_to}" if message.in_reply_to is not None else "",
            message.code.name,
            message.message,
        )

    # -- up ------------------------------------------------------------------------------

    def _on_refused(self, error: Error) -> None:
        """An ``error`` ``TOO_LARGE`` naming one of our seqs: the hub refused that message
        (and acknowledges it): dead-letter it before the ack drops it from the outbox."""
        seq = error.in_reply_to
        if error.code is not ErrorCode.TOO_LARGE or not seq or self._outbox is None:
            return
        try:
            if not self._outbox.refused(seq, error.message):
                log.warning("the hub refused message %d as too large: %s", seq, error.message)
        except StoreError as exc:
            log.error("cannot dead-letter message %d the hub refused: %s", seq, exc)

    def _on_send_failed(self, event: SendFailed) -> None:
        """A message resent at connect no longer fits the limits the hub agreed to."""
        if self._outbox is None:
            return
        try:
            self._outbox.send_failed(event.seq, event.error)
        except StoreError as exc:
            log.error("cannot record the failed resend of message %d: %s", event.seq, exc)
        self.kick()

    def _too_large(self, source: UpSource, item: Any, error: MessageTooLarge) -> None:
        """``send()`` refused ``item`` as over the agreed limits: the source keeps it out
        of this session (and dead-letters it at its bound); a source that cannot is not
        drained again until something new wakes it. The session goes on either way."""
        handler = getattr(source, "too_large", None)
        if handler is not None:
            handler(item, error)
            return
        log.error(
            "%s: a %s message cannot be sent to the hub: %s",
            _source_name(source),
            type(item.message).kind,
            error,
        )
        self._scheduler.idle(source)

    def _on_ack(self, up_to: int) -> None:
        self._acked_up_to = max(self._acked_up_to, up_to)
        for source in self._scheduler.sources:
            try:
                source.acked(up_to)
            except StoreError as exc:
                log.warning("recording an ack in %s failed: %s", _source_name(source), exc)
        if self._on_acked:
            for seq in sorted(s for s in self._on_acked if s <= up_to):
                callback = self._on_acked.pop(seq)
                try:
                    callback()
                except Exception:
                    log.exception("an on_acked callback failed")
        self.kick()  # the window has room again

    async def _drain(self, link: Link, store: Store) -> None:
        """Send what the sources have, in order, as the window allows; then wait for a
        kick (an append, an ack). A failure here ends the session (the next one starts
        from what the store holds) rather than leaving a session that sends nothing."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if not await self._drain_once(link, store):
                    return
        except (StoreError, ProtocolError, ValueError, TypeError, KeyError) as exc:
            log.error("sending to the hub failed: %s; reconnecting", exc, exc_info=True)
            await link.close(CloseCode.GOING_AWAY, "edge outbox failure")

    async def _drain_once(self, link: Link, store: Store) -> bool:
        """Send from the sources the scheduler picks, batch by batch, while the window has
        room and a source has something. Returns False once the link is closed."""
        session = link.session
        window = session.config.window
        scheduler = self._scheduler
        while (pick := scheduler.next(session.window_free, window)) is not None:
            source, limit = pick
            # Every write below finds the batch open (the write lock held): one that had
            # to wait for another process's lock would stall the loop (heartbeats).
            await store.wait_writable()
            items = source.messages_to_send(limit)
            if not items:
                scheduler.idle(source)
                continue
            for item in items:
                async with self._send_lock:
                    try:
                        seq = await link.send(item.message)
                    except ConnectionClosed:
                        return False
                    except MessageTooLarge as exc:
                        self._too_large(source, item, exc)
                        continue
                    await store.wait_writable()  # a commit may have closed the batch meanwhile
                    source.sent(item, seq)
                    if seq is not None:
                        store.note_seq_used(seq)
                if seq is not None and seq <= self._acked_up_to:
                    source.acked(self._acked_up_to)  # the ack overtook the send
        return True


def _dialer_settings(hub: HubSettings) -> UplinkSettings:
    """The dialer's settings from the agent's ``hub`` group.

    Raises:
        ConfigError: ``hub.url`` is not usable.
    """
    host, quic_port, websocket_port = hub.address()
    return UplinkSettings(
        host=host,
        quic_port=quic_port,
        websocket_port=websocket_port,
        server_name=hub.server_name or None,
        quic_handshake_timeout=hub.quic_handshake_timeout,
        quic_max_datagram_size=hub.quic_max_datagram_size,
        quic_loopback_datagram_size=hub.quic_loopback_datagram_size,
        websocket_timeout=hub.websocket_timeout,
        quic_retry_interval=hub.quic_retry_interval,
        quic_retry_first=hub.quic_retry_first,
        backoff_base=hub.backoff_base,
        backoff_cap=hub.backoff_cap,
        healthy_after=hub.healthy_after,
        session=SessionConfig(
            # the hub's heartbeat_interval decides; this only has to be below
            ping_interval=min(SessionConfig().ping_interval, hub.liveness_timeout / 2),
            liveness_timeout=hub.liveness_timeout,
        ),
        transports=hub.transports,
    )
