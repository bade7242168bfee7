"""The bridge between edge sessions and the Kubernetes API's objects.

- :class:`NodeObjects`: what each node must hold (sources), the level every session syncs to.
- :class:`NodeSession`: one node's session (held objects, outbox, acknowledgements).
- :class:`SessionRegistry`: node -> current session, connect/disconnect hooks.
- :class:`Dispatcher` / :class:`Inbound`: the message kind -> handler table.
- :class:`NodeAuthorizer`: what a node may name.
- :class:`EdgeServer`: the transports' handler: identity, sync, dispatch.
"""

from cloudhub.bridge.acks import AckTracker
from cloudhub.bridge.authz import Decision, NodeAuthorizer
from cloudhub.bridge.dispatch import Dispatcher, Handler, Inbound
from cloudhub.bridge.objects import Lookup, NodeObjects, ObjectSource, object_ref, object_uid
from cloudhub.bridge.outbox import Outbox
from cloudhub.bridge.registry import SessionRegistry
from cloudhub.bridge.server import EdgeServer, PeerCheck
from cloudhub.bridge.session import UNKNOWN_KIND, NodeSession

__all__ = [
    "UNKNOWN_KIND",
    "AckTracker",
    "Decision",
    "Dispatcher",
    "EdgeServer",
    "Handler",
    "Inbound",
    "Lookup",
    "NodeAuthorizer",
    "NodeObjects",
    "NodeSession",
    "ObjectSource",
    "Outbox",
    "PeerCheck",
    "SessionRegistry",
    "object_ref",
    "object_uid",
]
