"""``cloudhub serve``: --help lists every setting; bad settings and missing TLS fail clearly."""

from __future__ import annotations

import pathlib
import signal
import socket
import subprocess
import sys

from click.testing import CliRunner

from cloudhub.__main__ import main
from cloudhub.settings import HubSettings
from protocol.settings import describe


def test_help_explains_every_option_and_its_default() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for info in describe(HubSettings):
        flag = "--" + info.key.replace(".", "-").replace("_", "-")
        assert flag in text, flag
        assert info.env_var("CLOUDHUB_") in text
    assert "--listen-quic-port INT UDP port for QUIC" in text
    assert "Default: 7443" in text and "Default: 9095" in text


def test_help_says_tls_files_are_optional() -> None:
    # The hub runs its own CA unless an outside CA's three files are given (item 16).
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    text = " ".join(result.output.split())
    assert "are required" not in text
    assert "by default the hub runs its own CA" in text
    for flag in ("--tls-ca-file", "--tls-cert-file", "--tls-key-file"):
        described = text.split(flag + " VALUE ", 1)[1].split(" --", 1)[0]
        assert "Default: unset" in described, described
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs/hub.md").read_text()
    tls_row = next(line for line in docs.splitlines() if line.startswith("| `tls` |"))
    assert "required" not in tls_row and "the hub's own CA" in tls_row


def serve(tmp_path: pathlib.Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``cloudhub serve FLAGS`` as an operator runs it, text logs, until it exits."""
    env = {"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cloudhub",
            "serve",
            *flags,
            "--observability-http-port",
            "0",
            "--observability-log-format",
            "text",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )


def test_a_missing_kubeconfig_is_named(tmp_path: pathlib.Path) -> None:
    proc = serve(tmp_path, "--kube-kubeconfig", str(tmp_path / "kubeconfig"))
    assert proc.returncode == 1, proc.stderr
    assert f"kubeconfig '{tmp_path / 'kubeconfig'}' does not exist" in proc.stderr
    assert "current-context" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_setting_is_a_usage_error_naming_the_key() -> None:
    result = CliRunner().invoke(main, ["serve", "--status-qps", "lots"])
    assert result.exit_code == 2
    assert "status.qps" in result.output and "lots" in result.output


def test_partial_tls_material_exits_1_with_the_settings_to_give(tmp_path: pathlib.Path) -> None:
    # tls.* files name an outside CA: all three or none (none: the hub's own CA).
    (tmp_path / "ca.crt").write_text("unused\n")
    proc = serve(tmp_path, "--tls-ca-file", str(tmp_path / "ca.crt"))
    assert proc.returncode == 1, proc.stderr
    assert "tls.cert_file, tls.key_file" in proc.stderr


def test_join_port_in_use_exits_1_naming_the_setting(tmp_path: pathlib.Path) -> None:
    env = {"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cloudhub",
                "serve",
                "--kube-embedded-data-dir",
                str(tmp_path / "api"),
                "--kube-embedded-port",
                "0",
                "--listen-quic-port",
                "0",
                "--listen-websocket-port",
                "0",
                "--observability-http-port",
                "0",
                "--pki-join-host",
                "127.0.0.1",
                "--pki-join-port",
                str(port),
                "--observability-log-format",
                "text",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    assert proc.returncode == 1, proc.stderr
    assert f"join endpoint cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "pki.join_port" in proc.stderr and "Traceback" not in proc.stderr


def test_sigterm_while_the_api_is_unreachable_at_start_exits_0(tmp_path: pathlib.Path) -> None:
    """A hub still waiting for its informers' first list (the API is down) must stop on
    SIGTERM like a serving one, not hang until it is killed."""
    from protocol import pki
    from tests.testpki import make_test_pki

    pki_ca = make_test_pki()
    (tmp_path / "ca.crt").write_bytes(pki_ca.server.ca_pem)
    (tmp_path / "hub.crt").write_bytes(pki.dump_certificate_pem(pki_ca.server.chain))
    (tmp_path / "hub.key").write_bytes(pki.dump_private_key_pem(pki_ca.server.private_key))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{dead_port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
    )
    env = {"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudhub", "serve", "--observability-log-format", "text"]
        + [f"--tls-{k}-file={tmp_path / f}" for k, f in [("ca", "ca.crt"), ("cert", "hub.crt")]]
        + [f"--tls-key-file={tmp_path / 'hub.key'}", f"--kube-kubeconfig={tmp_path / 'kubeconfig'}"]
        + ["--listen-quic-host=127.0.0.1", "--listen-quic-port=0"]
        + ["--listen-websocket-host=127.0.0.1", "--listen-websocket-port=0"]
        + ["--observability-http-host=127.0.0.1", "--observability-http-port=0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first failed list: starting, signals handled
            if "list " in line and "failed" in line:
                break
        else:
            raise AssertionError(f"the hub ended before listing (exit {proc.wait()})")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_session_port_nodes_would_not_find_is_named_at_start(tmp_path: pathlib.Path) -> None:
    """``cloudhub serve --listen-quic-port P`` alone: the join endpoint would tell nodes
    pki.session_port (7443), so every node joins and then dials a port nobody serves; the
    hub says so at start, naming the setting."""
    port = _free_port(socket.SOCK_STREAM)
    env = {"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudhub",
            "serve",
            "--observability-log-format=text",
            f"--kube-embedded-data-dir={tmp_path / 'api'}",
            "--kube-embedded-port=0",
            f"--listen-quic-port={port}",
            f"--listen-websocket-port={port}",
            "--listen-quic-host=127.0.0.1",
            "--listen-websocket-host=127.0.0.1",
            "--pki-join-host=127.0.0.1",
            "--pki-join-port=0",
            "--kubelet-port=0",
            "--observability-http-host=127.0.0.1",
            "--observability-http-port=0",
            f"--upgrade-artifact-dir={tmp_path / 'artifacts'}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    warned = ""
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "pki.session_port" in line:
                warned = line
            if "serving edges" in line:
                break
        else:
            raise AssertionError(f"the hub ended before serving (exit {proc.wait()})")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "WARN" in warned and f"listens on {port}" in warned, warned
    assert f"--pki-session-port {port}" in warned and "told to connect to port 7443" in warned
