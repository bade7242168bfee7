"""Many simulated agents in one process, with certificates from one CA."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from protocol import pki
from protocol.transport import TLSCredentials
from tests.sim.agent import SimAgent

__all__ = ["SimFleet", "node_credentials"]

DAY = 86400.0


def node_credentials(
    ca: pki.CertificateAuthority, name: str, *, lifetime: float = DAY
) -> TLSCredentials:
    """A fresh key and a node certificate for ``name`` signed by ``ca``."""
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(ca, pki.build_node_csr(name, key), lifetime=lifetime, now=time.time())
    return TLSCredentials(cas=(ca.certificate,), chain=(cert,), private_key=key)


class SimFleet:
    """``count`` agents named ``{prefix}{i}`` (i from 0), all dialling one transport.

    Args:
        ca: the hub CA (signs each node's certificate).
        count: how many agents.
        prefix: node name prefix (names must be RFC 1123).
        **agent: passed to every :class:`SimAgent` (host, ports, transport, ...).
    """

    def __init__(
        self, ca: pki.CertificateAuthority, count: int, *, prefix: str = "sim-", **agent: Any
    ) -> None:
        self.agents = [
            SimAgent(f"{prefix}{i}", node_credentials(ca, f"{prefix}{i}"), **agent)
            for i in range(count)
        ]

    def __iter__(self):
        return iter(self.agents)

    def __len__(self) -> int:
        return len(self.agents)

    def __getitem__(self, i: int) -> SimAgent:
        return self.agents[i]

    def start(self) -> None:
        """Start every agent."""
        for agent in self.agents:
            agent.start()

    async def stop(self) -> None:
        """Stop every agent."""
        await asyncio.gather(*(agent.stop() for agent in self.agents))

    def count(self, predicate: Callable[[SimAgent], bool]) -> int:
        """How many agents satisfy ``predicate`` now."""
        return sum(1 for agent in self.agents if predicate(agent))

    async def wait_all(self, predicate: Callable[[SimAgent], bool], timeout: float = 30.0) -> None:
        """Wait until every agent satisfies ``predicate``.

        Raises:
            TimeoutError: not within ``timeout`` seconds (the message says how many did).
        """

        async def one(agent: SimAgent) -> None:
            async with agent.changed:
                await agent.changed.wait_for(lambda: predicate(agent))

        try:
            await asyncio.wait_for(asyncio.gather(*(one(a) for a in self.agents)), timeout)
        except asyncio.TimeoutError:
            done = self.count(predicate)
            raise TimeoutError(f"{done} of {len(self.agents)} agents within {timeout} s") from None
