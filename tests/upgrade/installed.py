"""Agents installed by deploy/install.sh into roots, run under a stand-in for their
systemd unit: shared by the acceptance test (test_acceptance.py) and the ``upgrade``
benchmark (tests/bench/bench_upgrade.py).

The install and the unit's stand-in are :mod:`cloudhub.devtools.installed` (shared with
``cloudhub demo --upgrade``); :class:`Unit` runs it over the tests' agent process.
"""

from __future__ import annotations

import pathlib
import subprocess

from cloudhub.devtools.installed import (
    SystemdUnit,
    bumped,
    current_version,
    install,
    install_roots,
    installed_env,
)
from edgeagent.upgrade import Layout
from tests.edgeagent.hublink.fleet import AgentProcess, write_node_pki

__all__ = ["Unit", "bumped", "current_version", "install", "install_roots"]


class Unit(SystemdUnit, AgentProcess):
    """The systemd unit's stand-in for the agent installed under ``root``."""

    def __init__(
        self,
        root: pathlib.Path,
        node: str,
        hub_url: str,
        ca,
        *,
        bad_version: str = "",
        kind: str = "process",
        engine=None,
    ):
        super().__init__(root / "run", node, kind, hub_url, ca, engine=engine)
        self.install_root = root
        self.prefix = root / "opt" / "edgeagent"
        self.state = root / "var" / "lib" / "edgeagent"
        self.config = root / "etc" / "edgeagent" / "config.yaml"
        self.bad_version = bad_version
        self.unit_init()
        write_node_pki(self.state / "pki", ca, node)  # what 'edgeagent join' leaves

    def args(self) -> list[str]:
        args = super().args()
        args[0] = str(self.prefix / "bin" / "python")
        if self.bad_version and Layout(self.prefix).version() == self.bad_version:
            args[args.index("--config") + 1] = str(self.config) + ".missing"
        return args

    def start_once(self) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"--- start {Layout(self.prefix).version()} ---\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.args(),
                env=installed_env(),
                stdout=log,
                stderr=log,
                cwd=self.root,
                start_new_session=True,
            )

    start = start_once
