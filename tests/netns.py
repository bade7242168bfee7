"""Network namespaces for fault tests: a peer behind a veth link whose packets we can drop.

``veth_namespace()`` creates a namespace joined to the test's own (root) namespace by a veth
pair with a private /30, so a process started in the namespace (``NetNS.spawn``) is reached
at ``Topology.ns_addr`` and sees the test at ``Topology.host_addr``. Firewall rules are
added *inside* the namespace (``NetNS.iptables``), so they only touch traffic to and from
that namespace; deleting the namespace removes its rules and its end of the veth pair (which
destroys the pair). Everything is removed when the context exits, also when a test fails;
namespaces left by a killed run (their name carries a pid that no longer exists) are removed
at the next start.

Packets dropped with ``-j DROP`` vanish silently: no FIN, no RST, no ICMP, which is what a
dead cellular link or a NAT that forgot the flow looks like.

Needs root, ``ip`` (iproute2) and ``iptables``. ``available()`` says whether they work here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PREFIX = "eft"
_counter = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=20)


def available() -> str | None:
    """``None`` if network namespaces and iptables work here, else the reason they do not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        proc = _ip("netns", "add", probe, check=False)
        if proc.returncode != 0:
            return f"ip netns add failed: {proc.stderr.strip()}"
        proc = subprocess.run(
            ["ip", "netns", "exec", probe, "iptables", "-S"], capture_output=True, text=True
        )
        if proc.returncode != 0:
            return f"iptables in a namespace failed: {proc.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _remove_stale() -> None:
    """Delete namespaces created by test runs whose process is gone."""
    listing = _ip("netns", "list", check=False).stdout.split()
    for name in listing:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            _ip("netns", "del", name, check=False)


@dataclass
class NetNS:
    """A network namespace, by name."""

    name: str
    rules: list[tuple[str, ...]] = field(default_factory=list)

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespace and wait for it."""
        return subprocess.run(
            self.exec_argv(argv), check=check, capture_output=True, text=True, timeout=20
        )

    def iptables(self, *rule: str) -> None:
        """Append a rule (``iptables -A <rule>``) inside the namespace.

        Example: ``ns.iptables("INPUT", "-p", "udp", "-j", "DROP")``.
        """
        self.run("iptables", "-w", "-A", *rule)
        self.rules.append(rule)

    def remove_rule(self, *rule: str) -> None:
        """Delete a rule added with :meth:`iptables`."""
        self.run("iptables", "-w", "-D", *rule)
        self.rules.remove(rule)

    def flush_rules(self) -> None:
        """Delete every rule added with :meth:`iptables`."""
        for rule in reversed(list(self.rules)):
            self.remove_rule(*rule)

    def partition(self) -> None:
        """Drop every packet in and out of the namespace (no FIN, no RST)."""
        self.iptables("INPUT", "-j", "DROP")
        self.iptables("OUTPUT", "-j", "DROP")


@dataclass
class Topology:
    """A namespace and the veth link joining it to the test's namespace."""

    ns: NetNS
    host_addr: str
    """Our end of the veth pair (in the test's namespace)."""
    ns_addr: str
    """The namespace's end: where a peer started in it listens."""
    host_if: str


def _free_subnet() -> ipaddress.IPv4Network:
    used = []
    for line in _ip("-4", "-o", "addr", "show", check=False).stdout.splitlines():
        words = line.split()
        if "inet" in words:
            used.append(ipaddress.IPv4Interface(words[words.index("inet") + 1]).network)
    for _ in range(200):
        third, fourth = random.randrange(2, 255), random.randrange(0, 64) * 4
        net = ipaddress.IPv4Network(f"10.203.{third}.{fourth}/30")
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError("no free 10.203.x.y/30 subnet for a test namespace")


@contextlib.contextmanager
def veth_namespace() -> Iterator[Topology]:
    """Create a namespace joined to ours by a veth pair; remove everything at exit.

    Yields:
        The topology: addresses of both ends, and the namespace to start peers in and to
        add firewall rules to.
    """
    _remove_stale()
    n = next(_counter)
    name = f"{PREFIX}{os.getpid()}-{n}"
    host_if, ns_if = f"{PREFIX}{os.getpid() % 100000}h{n}", f"{PREFIX}{os.getpid() % 100000}n{n}"
    net = _free_subnet()
    host_addr, ns_addr = (str(a) for a in list(net.hosts())[:2])
    ns = NetNS(name)
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{host_addr}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        ns.run("ip", "addr", "add", f"{ns_addr}/30", "dev", ns_if)
        ns.run("ip", "link", "set", ns_if, "up")
        ns.run("ip", "link", "set", "lo", "up")
        yield Topology(ns=ns, host_addr=host_addr, ns_addr=ns_addr, host_if=host_if)
    finally:
        _ip("link", "del", host_if, check=False)
        _ip("netns", "del", name, check=False)
