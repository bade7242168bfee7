"""Handlers for the pod messages an edge sends: ``pod_status`` and ``pod_deleted``.

Both name a pod; node authorization decides first (:mod:`cloudhub.bridge.authz`): another
node's pod is refused with ``FORBIDDEN``, a pod the API no longer has is answered
``NOT_FOUND`` for a status (nothing to write) and accepted silently for a deletion (already
gone). ``pod_deleted`` finalises only a pod that is terminating (has a
``deletionTimestamp``): kubelet never deletes a pod nobody asked to delete.
"""

from __future__ import annotations

from cloudhub.bridge.authz import Decision, NodeAuthorizer
from cloudhub.bridge.dispatch import Dispatcher, Inbound
from cloudhub.errors import KubeAPIError
from cloudhub.pods.status import condition_problem
from cloudhub.pods.writer import PodReportWriter
from protocol.errors import ErrorCode
from protocol.messages import PodDeleted, PodStatus

__all__ = ["PodHandlers"]


class PodHandlers:
    """The ``pod_status`` and ``pod_deleted`` handlers.

    Args:
        authorizer: node authorization.
        writer: where accepted reports go.
    """

    def __init__(self, authorizer: NodeAuthorizer, writer: PodReportWriter) -> None:
        self.authorizer = authorizer
        self.writer = writer

    def register(self, dispatcher: Dispatcher) -> None:
        """Put both handlers in the dispatch table."""
        dispatcher.register(PodStatus, self.on_status)
        dispatcher.register(PodDeleted, self.on_deleted)

    def _authorized(self, inbound: Inbound, ref, *, missing_ok: bool) -> bool:
        decision = self.authorizer.check(inbound.node, ref)
        if decision is Decision.ALLOWED:
            return True
        if decision is Decision.FORBIDDEN:
            inbound.refuse(
                ErrorCode.FORBIDDEN,
                f"pod {ref.namespace}/{ref.name} is not bound to node {inbound.node}",
            )
        elif missing_ok:
            inbound.done()
        else:
            inbound.session.send_error(
                inbound, ErrorCode.NOT_FOUND, f"pod {ref.namespace}/{ref.name} no longer exists"
            )
            inbound.done()
        return False

    def on_status(self, inbound: Inbound) -> None:
        """``pod_status``: queue the status for writing; ack once written."""
        message = inbound.message
        assert isinstance(message, PodStatus)
        if self._authorized(inbound, message.ref, missing_ok=False):
            problem = condition_problem(message.status)
            if problem is not None:
                inbound.refuse(ErrorCode.INVALID_MESSAGE, problem)
                return
            self.writer.submit_status(
                inbound.node, message.ref, message.status, _outcome(inbound, "status")
            )

    def on_deleted(self, inbound: Inbound) -> None:
        """``pod_deleted``: finalise the terminating pod (delete, grace 0); ack once done."""
        message = inbound.message
        assert isinstance(message, PodDeleted)
        ref = message.ref
        if not self._authorized(inbound, ref, missing_ok=True):
            return
        pod = self.authorizer.objects.lookup(ref)
        if pod is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            inbound.refuse(
                ErrorCode.INVALID_MESSAGE,
                f"pod {ref.namespace}/{ref.name} is not being deleted; "
                "only a terminating pod is finalised",
            )
            return
        self.writer.submit_deleted(inbound.node, ref, _outcome(inbound, "deletion"))


def _outcome(inbound: Inbound, what: str):
    def done(error: KubeAPIError | None) -> None:
        if error is None:
            inbound.done()
        else:
            inbound.refuse(ErrorCode.INVALID_MESSAGE, f"the API refused the {what}: {error}")

    return done
