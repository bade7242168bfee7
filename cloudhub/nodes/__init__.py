"""Edge nodes as Kubernetes Nodes: the Node and Lease objects, and their lifecycle."""

from cloudhub.nodes.lifecycle import NodeLifecycle
from cloudhub.nodes.model import EDGE_ROLE_LABEL, NodeFacts, node_facts

__all__ = ["EDGE_ROLE_LABEL", "NodeFacts", "NodeLifecycle", "node_facts"]
