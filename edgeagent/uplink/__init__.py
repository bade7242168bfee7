"""Everything between the agent and the hub.

- :mod:`.dialer`: which transport to dial (QUIC, then WebSocket), when to fall back and go
  back, back-off with jitter (:class:`Uplink`);
- :mod:`.session`: one session at a time (:class:`HubLink`): hello, the down-handlers,
  the drain, acks;
- :mod:`.scheduler`: the one send scheduler (CONTROL > STATUS > BULK);
- :mod:`.sources`: one source per up-going stream (``outbox``, ``twins``, ``metrics``)
  behind one :class:`~edgeagent.uplink.sources.base.UpSource` protocol.

Names are imported on first use (PEP 562): the dialer and the session pull in the
protocol, which an agent with no hub never loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeagent.lazy import lazy_exports

if TYPE_CHECKING:
    from edgeagent.uplink.dialer import QUIC, WEBSOCKET, Uplink, UplinkSettings
    from edgeagent.uplink.session import HubLink, SessionContext

__all__ = ["QUIC", "WEBSOCKET", "HubLink", "SessionContext", "Uplink", "UplinkSettings"]

_WHERE = {
    "QUIC": "dialer",
    "WEBSOCKET": "dialer",
    "Uplink": "dialer",
    "UplinkSettings": "dialer",
    "HubLink": "session",
    "SessionContext": "session",
}


__getattr__, __dir__ = lazy_exports(globals(), _WHERE)
