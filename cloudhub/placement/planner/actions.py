"""The two writes a plan makes: create a pod bound to a node, delete a pod.

Both count at once (a scheduler's "assume"): a planned pod is in the ledger and charged
to its node before the API has it, a pod planned for deletion no longer counts, so a
plan is never repeated while the API catches up. The caller of
:meth:`~cloudhub.placement.planner.planner.Planner.plan` writes them and feeds back what
it then observes.
"""

from __future__ import annotations

from cloudhub.placement.model import Placement
from cloudhub.placement.plan import Plan, PodCreate, PodDelete
from cloudhub.placement.planner.capacity import discharge
from cloudhub.placement.planner.context import Context
from cloudhub.placement.planner.state import GroupState, PlacementState, PodRecord

__all__ = ["create", "delete", "pod_name"]

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' generated names
_SUFFIX_SPACE = len(_SUFFIX_ALPHABET) ** 5
_PAIRS = [a + b for b in _SUFFIX_ALPHABET for a in _SUFFIX_ALPHABET]


def create(
    state: PlacementState, group: GroupState, node_name: str, ctx: Context, plan: Plan
) -> PodRecord:
    """Plan one replica of ``group`` on ``node_name`` (bound, charged, assumed)."""
    p = state.p
    tmpl = group.tmpl
    ledger = ctx.ledger
    pod = PodRecord.planned(p.namespace, pod_name(p, ctx), node_name, p, group.value, tmpl, ctx.now)
    key = (pod.namespace, pod.name)
    ledger.pods[key] = pod
    by_node = ledger.by_node.get(node_name)
    if by_node is None:
        by_node = ledger.by_node[node_name] = set()
    by_node.add(key)
    by_owner = ledger.by_owner_uid.get(p.uid)
    if by_owner is None:
        by_owner = ledger.by_owner_uid[p.uid] = set()
    by_owner.add(key)
    node = ctx.nodes[node_name]
    node.pods.add(key)
    state.pods[key] = pod
    group.pods[key] = pod
    group.created_now.append(pod)
    req = pod.req
    node.ucpu += req.cpu
    node.umem += req.memory
    node.upods += 1
    for res, units in req.extended:
        node.uext[res] = node.uext.get(res, 0) + units
    node.prio[pod.priority] += 1
    pod.charged = True
    plan.creates.append(PodCreate(p, group.value, node_name, pod.name, tmpl))
    return pod


def pod_name(p: Placement, ctx: Context) -> str:
    """A name for a new pod of ``p``: its name and a 5-character suffix, as Kubernetes
    generates them, from a per-placement serial (no randomness, no collision with a
    pod the ledger holds)."""
    prefix = p.name[:57].rstrip("-.")
    serial = ctx.serial.get(p.key)
    if serial is None:
        serial = int.from_bytes(p.uid.encode()[-4:] or b"\0", "big")
    pods = ctx.ledger.pods
    namespace = p.namespace
    while True:
        serial += 1
        s = (serial * 7_368_787) % _SUFFIX_SPACE
        suffix = _PAIRS[s % 729] + _PAIRS[(s // 729) % 729] + _SUFFIX_ALPHABET[s // 531441]
        name = f"{prefix}-{suffix}"
        if (namespace, name) not in pods:
            ctx.serial[p.key] = serial
            return name


def delete(pod: PodRecord, reason: str, ctx: Context, plan: Plan, force: bool = False) -> None:
    """Plan the deletion of ``pod`` (its capacity is freed at once).

    A pod planned in this very round is forgotten instead (never written); a pod
    already being deleted is deleted again only after ``redelete_after_s``. A pod on
    a node that no longer exists is deleted with ``force`` (no kubelet will confirm).
    """
    now = ctx.now
    ledger = ctx.ledger
    if pod.deleting and not (now - pod.deleting_at > ctx.settings.redelete_after_s):
        return
    if pod.assumed and pod.created == now:
        before = len(plan.creates)
        plan.creates = [
            c for c in plan.creates if (c.namespace, c.name) != (pod.namespace, pod.name)
        ]
        if len(plan.creates) != before:
            # Planned in this very round and never written: just forget it.
            ledger.touch(pod)
            ledger.unbind(pod)
            return
    pod.deleting = True
    pod.deleting_at = now
    if pod.charged:
        discharge(pod, ctx.nodes)
        ledger.capacity_freed(pod.node)
    force = force or pod.node not in ctx.nodes
    plan.deletes.append(PodDelete(pod.namespace, pod.name, pod.uid, pod.node, reason, force))
