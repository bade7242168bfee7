"""``edgeagent run`` on a node that has not joined the hub it is configured for (issue 16):
it says "not joined", prints the join command to run (with this run's --config and
--state-dir), exits 2, and leaves the state directory as it was. A node with no hub
configured runs on its own (tests/edgeagent/test_daemon.py)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from tests.edgeagent.hublink.fleet import write_node_pki

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(config: pathlib.Path, state: pathlib.Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
    env["PYTHONPATH"] = str(ROOT)
    args = [sys.executable, "-m", "edgeagent", "run", "--config", str(config)]
    args += ["--state-dir", str(state), "--runtime", "process"]
    return subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _config(tmp_path: pathlib.Path, extra: str = "") -> pathlib.Path:
    config = tmp_path / "config.yaml"
    config.write_text(f"hub:\n  url: quic://hub.invalid:7443\n{extra}")
    return config


def test_run_before_join_says_not_joined_and_exits_2(tmp_path: pathlib.Path) -> None:
    config, state = _config(tmp_path), tmp_path / "state"
    done = _run(config, state)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not joined" in done.stderr
    assert f"no {state / 'pki' / 'node.crt'}" in done.stderr
    join = next(line.strip() for line in done.stderr.splitlines() if "edgeagent join" in line)
    assert join == (
        "edgeagent join --hub HUB --token TOKEN --ca-cert-hash sha256:HASH "
        f"--config {config} --state-dir {state}"
    )
    assert "cloudhub token create" in done.stderr
    assert not state.exists()  # no store made, nothing started


def test_a_key_missing_is_not_joined_either(tmp_path: pathlib.Path, pki_ca) -> None:
    config, state = _config(tmp_path), tmp_path / "state"
    write_node_pki(state / "pki", pki_ca.ca, "edge-1")
    (state / "pki" / "node.key").unlink()
    done = _run(config, state)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"not joined: this node has no {state / 'pki' / 'node.key'}" in done.stderr
    assert not (state / "store.db").exists()


def test_credential_files_set_elsewhere_are_the_ones_checked(
    tmp_path: pathlib.Path, pki_ca
) -> None:
    elsewhere = tmp_path / "tls"
    write_node_pki(elsewhere, pki_ca.ca, "edge-1")
    extra = "".join(
        f"  {key}: {elsewhere / name}\n"
        for key, name in (("ca_file", "ca.crt"), ("cert_file", "node.crt"), ("key_file", "x.key"))
    )
    config, state = _config(tmp_path, extra), tmp_path / "state"
    done = _run(config, state)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"not joined: this node has no {elsewhere / 'x.key'}" in done.stderr
