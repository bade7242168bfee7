"""A reusable simulated edge agent (tests and benchmarks): ``SimAgent``, ``SimFleet``.

Run many in a separate process with ``python -m tests.sim --help``.
"""

from tests.sim.agent import CREATED_AT, SimAgent, default_node_info, running_status
from tests.sim.fleet import SimFleet, node_credentials

__all__ = [
    "CREATED_AT",
    "SimAgent",
    "SimFleet",
    "default_node_info",
    "node_credentials",
    "running_status",
]
