"""Run a real upstream kube-apiserver (v1.20.2) backed by etcd on loopback, for tests.

The binary is built once by ``tests/k8s/build-kube-apiserver.sh`` from Debian bookworm's
``kubernetes`` source package and cached outside the repository; etcd is Debian's
``etcd-server`` (3.4). :func:`start` runs both on free 127.0.0.1 ports inside a work
directory, with a serving certificate from a CA made here with ``cryptography`` and a
static bearer token for an ``admin`` user in group ``system:masters``, waits until the
API is ready, and writes a kubeconfig that kubernetes_asyncio and kubectl use as they
are. No controller-manager or scheduler runs: only what the API server itself does
(validation, defaulting, RBAC, watch, CRDs, the system namespaces) happens.

Both processes die with the test process, however it ends: each runs in its own process
group, gets ``SIGKILL`` from the kernel when the thread that started it exits
(``setpriv --pdeathsig``, used when starting from the main thread), and a small watchdog
process kills both groups when the pipe from the test process closes.

Example::

    server = start(tmp_path)
    try:
        ...  # use server.kubeconfig, or server.url with server.token and server.ca_file
    finally:
        server.stop()
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = [
    "BINARY_ENV",
    "FRONT_PROXY_CLIENT",
    "KUBECTL_ENV",
    "KUBE_VERSION",
    "RECIPE",
    "KubeAPIServerError",
    "RunningAPIServer",
    "binary_path",
    "build_script",
    "etcd_path",
    "kubectl_path",
    "start",
]

KUBE_VERSION = "v1.20.2"
"""The upstream version that the build script produces and :func:`start` expects."""

RECIPE = "v1.20.2+edgefleet.2"
"""What the cached binary must have been built as (``RECIPE`` in the build script, written
to ``kube-apiserver.recipe`` beside the binary): recipe 2 has the kubernetes#99804 fix, so
typed CRD string fields accept ``""`` as on released 1.20 binaries. A binary of another
recipe counts as missing, and the build script rebuilds it."""

BINARY_ENV = "EDGEFLEET_KUBE_APISERVER"
"""Environment variable naming the kube-apiserver binary (overrides the default cache path)."""

KUBECTL_ENV = "EDGEFLEET_KUBECTL"
"""Environment variable naming the kubectl to test with (overrides the cached Debian one)."""

_DEFAULT_BINARY = Path("~/.cache/edgefleet/kube-apiserver-v1.20.2/kube-apiserver")

# The kube-apiserver flags that stand in for a control plane with no controller-manager:
# no ServiceAccount admission (nobody creates the default ServiceAccount or its token), no
# endpoint reconciler (nobody is there to keep the `kubernetes` Service's endpoints), and
# privileged containers allowed, as kubeadm clusters do, so real DaemonSets validate.
FRONT_PROXY_CLIENT = "front-proxy-client"
"""Common name of the API server's front-proxy client certificate (``--proxy-client-cert-file``),
the one name in ``--requestheader-allowed-names``."""

_FIXED_APISERVER_FLAGS = (
    "--authorization-mode=RBAC",
    "--disable-admission-plugins=ServiceAccount",
    "--endpoint-reconciler-type=none",
    "--allow-privileged=true",
    "--service-cluster-ip-range=10.96.0.0/16",
    "--service-account-issuer=https://kubernetes.default.svc",
    "--api-audiences=https://kubernetes.default.svc",
    "--profiling=false",
    "--v=1",
)

# Namespaces the API server's bootstrap controller creates by itself; `start` returns
# only once they exist, so that every user sees the same starting state.
_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_HISTORY_REVISIONS = 100
"""How many etcd revisions `start` writes and compacts away before kube-apiserver starts.

A fresh etcd starts at revision 1, so a fresh API server's watch window reaches back to
resourceVersion 1 and nothing is ever "too old". Real clusters have a past: this makes
every resourceVersion below 100 answer 410 Gone to a watch, as on any cluster that has
been up for a while, so that clients' relist-on-410 paths can be exercised.
"""

_ETCD_DATA = "etcd-data"
"""etcd's data directory inside the work directory."""

_PORT_ATTEMPTS = 3
"""How many times `start` picks new ports when another process took one meanwhile."""


class KubeAPIServerError(Exception):
    """etcd or kube-apiserver could not be started, or did not become ready in time.

    Attributes:
        component: ``"etcd"`` or ``"kube-apiserver"``.
        log_tail: the last lines the component wrote (its log file), for the failure report.
    """

    def __init__(self, component: str, message: str, log_tail: str = "") -> None:
        self.component = component
        self.log_tail = log_tail
        text = f"{component}: {message}"
        if log_tail:
            text += f"\n--- last lines of its log ---\n{log_tail}"
        super().__init__(text)


def binary_path() -> Path | None:
    """The cached kube-apiserver binary, if it has been built by this recipe.

    Returns:
        ``$EDGEFLEET_KUBE_APISERVER`` when set, else
        ``~/.cache/edgefleet/kube-apiserver-v1.20.2/kube-apiserver``, when that file exists,
        is executable and its ``.recipe`` stamp says :data:`RECIPE`; ``None`` otherwise (run
        :func:`build_script` to make it, or to rebuild one of an older recipe).
    """
    configured = os.environ.get(BINARY_ENV)
    path = Path(configured) if configured else _DEFAULT_BINARY.expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None
    return path if built_recipe(path) == RECIPE else None


def built_recipe(binary: Path) -> str | None:
    """The recipe stamp beside ``binary`` (``<binary>.recipe``), or ``None`` without one."""
    try:
        return binary.with_name(binary.name + ".recipe").read_text().strip()
    except OSError:
        return None


def kubectl_path() -> Path | None:
    """The kubectl to test with: ``$EDGEFLEET_KUBECTL``, else Debian's v1.20.2 beside the binary.

    The build script unpacks Debian's ``kubernetes-client`` next to the kube-apiserver
    binary, because on our machine images ``/usr/bin/kubectl`` belongs to another package
    (a much newer kubectl). As a last resort the ``kubectl`` on ``PATH`` is used.

    Returns:
        The path, or ``None`` when no kubectl is found.
    """
    configured = os.environ.get(KUBECTL_ENV)
    if configured:
        path = Path(configured)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    candidates = []
    configured_binary = os.environ.get(BINARY_ENV)
    base = Path(configured_binary) if configured_binary else _DEFAULT_BINARY.expanduser()
    candidates.append(base.with_name("kubectl"))
    on_path = shutil.which("kubectl")
    if on_path:
        candidates.append(Path(on_path))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def etcd_path() -> Path | None:
    """Debian's etcd (package ``etcd-server``) on ``PATH``, or ``None``."""
    found = shutil.which("etcd")
    return Path(found) if found else None


def build_script() -> Path:
    """The script that builds and caches the binary (``tests/k8s/build-kube-apiserver.sh``)."""
    return Path(__file__).with_name("build-kube-apiserver.sh")


@dataclass
class RunningAPIServer:
    """A started etcd + kube-apiserver pair. Call :meth:`stop` when done (or use ``with``).

    Attributes:
        url: the API's base URL, ``https://127.0.0.1:<port>``.
        token: the admin bearer token (user ``admin``, group ``system:masters``).
        kubeconfig: a kubeconfig file for ``url`` with the CA and the token, usable by
            kubernetes_asyncio's ``load_kube_config`` and by ``kubectl --kubeconfig``.
        ca_file: PEM file of the CA that signed the serving certificate.
        workdir: the directory holding certificates, etcd's data and both logs
            (``etcd.log``, ``kube-apiserver.log``).
        etcd_url: etcd's client URL, ``http://127.0.0.1:<port>``.
        start_seconds: wall time from launching etcd to the API being ready (seconds).
    """

    url: str
    token: str
    kubeconfig: Path
    ca_file: Path
    workdir: Path
    etcd_url: str
    start_seconds: float
    _processes: list[tuple[str, subprocess.Popen[bytes]]] = field(repr=False)
    _watchdog: subprocess.Popen[bytes] = field(repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts exactly this server's CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    @property
    def pids(self) -> dict[str, int]:
        """Process ids by component: ``{"etcd": ..., "kube-apiserver": ...}``."""
        return {name: proc.pid for name, proc in self._processes}

    def running(self) -> bool:
        """Whether both etcd and kube-apiserver are still running."""
        return all(proc.poll() is None for _, proc in self._processes)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop kube-apiserver, then etcd (SIGTERM, then SIGKILL after ``timeout`` seconds).

        Safe to call more than once. etcd's data directory is removed (its write-ahead log
        alone preallocates 64 MB); the rest of the work directory, logs included, is left in
        place for its owner.
        """
        for _name, proc in reversed(self._processes):
            _terminate_group(proc, timeout)
        _close_watchdog(self._watchdog)
        shutil.rmtree(self.workdir / _ETCD_DATA, ignore_errors=True)

    def __enter__(self) -> RunningAPIServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start(
    workdir: Path,
    *,
    binary: Path | None = None,
    etcd: Path | None = None,
    ready_timeout: float = 120.0,
    kubelet_ca: bytes | None = None,
) -> RunningAPIServer:
    """Start etcd and kube-apiserver on free loopback ports and wait until the API is ready.

    Ready means ``/readyz`` answers 200 (all post-start hooks done, RBAC bootstrap policy
    in place) and the system namespaces (default, kube-system, kube-public,
    kube-node-lease) exist. Takes a few seconds on an idle machine.

    Args:
        workdir: an existing, empty-or-reusable directory for certificates, data and logs.
        binary: the kube-apiserver to run; default :func:`binary_path`.
        etcd: the etcd to run; default :func:`etcd_path`.
        ready_timeout: seconds to wait for each component to become ready; generous,
            because the machine may be shared with other busy processes.
        kubelet_ca: PEM CA the kubelets' (the hub's kubelet API's) serving certificates
            chain to (``--kubelet-certificate-authority``); ``None``: not verified, as
            kube-apiserver does without the flag. The API server always dials kubelets
            with a client certificate from its own CA (``kubelet_client_*`` in ``pki/``)
            at the Node's ``InternalDNS`` address first (docs/streams.md).

    Returns:
        The running pair; the caller must :meth:`RunningAPIServer.stop` it.

    Raises:
        FileNotFoundError: the kube-apiserver binary or etcd is missing (build it with
            :func:`build_script`).
        KubeAPIServerError: a component exited early, or was not ready within
            ``ready_timeout`` seconds; carries the tail of its log.
    """
    binary = binary or binary_path()
    if binary is None or not os.access(binary, os.X_OK):
        raise FileNotFoundError(
            f"no kube-apiserver binary at {binary or _DEFAULT_BINARY}: "
            f"run {build_script()} (or set ${BINARY_ENV})"
        )
    etcd = etcd or etcd_path()
    if etcd is None or not os.access(etcd, os.X_OK):
        raise FileNotFoundError(f"no etcd at {etcd or 'PATH'}: install Debian's etcd-server")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    pki = _write_pki(workdir)
    kubelet_flags = [
        f"--kubelet-client-certificate={pki['kubelet_client_cert']}",
        f"--kubelet-client-key={pki['kubelet_client_key']}",
        "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname",
        # the aggregation layer (APIServices: the hub's metrics.k8s.io): the API server
        # proxies with this client certificate and names the user in X-Remote-* headers,
        # which aggregated servers trust from certificates of the front-proxy CA only
        f"--requestheader-client-ca-file={pki['front_proxy_ca']}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki['proxy_client_cert']}",
        f"--proxy-client-key-file={pki['proxy_client_key']}",
    ]
    if kubelet_ca is not None:
        (workdir / "pki" / "kubelet-ca.crt").write_bytes(kubelet_ca)
        kubelet_flags.append(
            f"--kubelet-certificate-authority={workdir / 'pki' / 'kubelet-ca.crt'}"
        )
    token = secrets.token_urlsafe(32)
    token_file = workdir / "tokens.csv"
    # Static token file format: token,user,uid,"group1,group2".
    token_file.write_text(f'{token},admin,admin,"system:masters"\n')
    token_file.chmod(0o600)

    began = time.monotonic()
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        watchdog = _start_watchdog()
        processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        try:
            etcd_port, peer_port, api_port = _free_ports(3)
            etcd_url = f"http://127.0.0.1:{etcd_port}"
            processes.append(
                ("etcd", _spawn_etcd(etcd, workdir, etcd_port, peer_port, watchdog, attempt))
            )
            _wait_etcd(etcd_url, processes[-1][1], workdir / "etcd.log", ready_timeout)
            _age_etcd(etcd_port)
            url = f"https://127.0.0.1:{api_port}"
            args = [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki['serving_cert']}",
                f"--tls-private-key-file={pki['serving_key']}",
                f"--client-ca-file={pki['ca_cert']}",
                f"--token-auth-file={token_file}",
                f"--service-account-key-file={pki['sa_key']}",
                f"--service-account-signing-key-file={pki['sa_key']}",
                f"--cert-dir={workdir / 'apiserver-certs'}",
                *kubelet_flags,
                *_FIXED_APISERVER_FLAGS,
            ]
            processes.append(
                (
                    "kube-apiserver",
                    _spawn(binary, args, workdir / "kube-apiserver.log", watchdog, attempt),
                )
            )
            context = ssl.create_default_context(cafile=str(pki["ca_cert"]))
            _wait_apiserver(
                url, token, context, processes[-1][1], workdir / "kube-apiserver.log", ready_timeout
            )
        except _PortTaken:
            for _, proc in reversed(processes):
                _terminate_group(proc, 10.0)
            _close_watchdog(watchdog)
            if attempt == _PORT_ATTEMPTS:
                raise KubeAPIServerError(
                    "kube-apiserver", f"ports kept being taken, {attempt} attempts"
                ) from None
            continue
        except BaseException:
            for _, proc in reversed(processes):
                _terminate_group(proc, 10.0)
            _close_watchdog(watchdog)
            raise
        kubeconfig = workdir / "kubeconfig"
        _write_kubeconfig(kubeconfig, url, token, pki["ca_cert"])
        return RunningAPIServer(
            url=url,
            token=token,
            kubeconfig=kubeconfig,
            ca_file=pki["ca_cert"],
            workdir=workdir,
            etcd_url=etcd_url,
            start_seconds=time.monotonic() - began,
            _processes=processes,
            _watchdog=watchdog,
        )
    raise AssertionError("unreachable")  # pragma: no cover


# --- certificates and kubeconfig ----------------------------------------------------------


def _write_pki(workdir: Path) -> dict[str, Path]:
    """Write a CA, a serving certificate for 127.0.0.1/localhost and a service-account key,
    made with the project's one certificate builder (:mod:`protocol.pki`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from protocol.pki import (
        build_node_csr,
        dump_certificate_pem,
        dump_private_key_pem,
        generate_ca,
        generate_private_key,
        issue_server_certificate,
        leaf_certificate_builder,  # the builder's leaf with any subject
        sign_node_csr,
    )

    now = time.time()
    lifetime = 2 * 86400.0
    ca = generate_ca("edgefleet-test-kube-ca", lifetime=lifetime, now=now)
    serving_cert, serving_key = issue_server_certificate(
        ca,
        dns_names=["localhost", "kubernetes.default.svc"],
        ip_addresses=["127.0.0.1"],
        lifetime=lifetime,
        now=now,
    )
    sa_key = generate_private_key()
    # the API server's client certificate toward kubelets (the hub's kubelet API)
    kubelet_key = generate_private_key()
    kubelet_cert = sign_node_csr(
        ca, build_node_csr("kube-apiserver", kubelet_key), lifetime=lifetime, now=now
    )

    # the front proxy (aggregation layer): its own CA, as kubeadm makes front-proxy-ca
    front_proxy_ca = generate_ca("edgefleet-test-front-proxy-ca", lifetime=lifetime, now=now)
    proxy_key = generate_private_key()
    proxy_cert = leaf_certificate_builder(
        front_proxy_ca,
        x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, FRONT_PROXY_CLIENT)]),
        proxy_key.public_key(),
        lifetime,
        now,
        x509.ExtendedKeyUsageOID.CLIENT_AUTH,
    ).sign(front_proxy_ca.private_key, hashes.SHA256())

    pki_dir = workdir / "pki"
    pki_dir.mkdir(exist_ok=True)
    paths = {
        "ca_cert": pki_dir / "ca.crt",
        "serving_cert": pki_dir / "apiserver.crt",
        "serving_key": pki_dir / "apiserver.key",
        "sa_key": pki_dir / "sa.key",
        "kubelet_client_cert": pki_dir / "kubelet-client.crt",
        "kubelet_client_key": pki_dir / "kubelet-client.key",
        "front_proxy_ca": pki_dir / "front-proxy-ca.crt",
        "proxy_client_cert": pki_dir / "front-proxy-client.crt",
        "proxy_client_key": pki_dir / "front-proxy-client.key",
    }
    paths["front_proxy_ca"].write_bytes(dump_certificate_pem(front_proxy_ca.certificate))
    paths["proxy_client_cert"].write_bytes(dump_certificate_pem(proxy_cert))
    paths["kubelet_client_cert"].write_bytes(dump_certificate_pem(kubelet_cert))
    paths["ca_cert"].write_bytes(dump_certificate_pem(ca.certificate))
    paths["serving_cert"].write_bytes(dump_certificate_pem(serving_cert))
    # kube-apiserver 1.20 reads public keys out of --service-account-key-file only from
    # "EC PRIVATE KEY" (SEC 1) blocks, not PKCS#8 ones.
    sa_pem = sa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    for name, data in (
        ("serving_key", dump_private_key_pem(serving_key)),
        ("sa_key", sa_pem),
        ("kubelet_client_key", dump_private_key_pem(kubelet_key)),
        ("proxy_client_key", dump_private_key_pem(proxy_key)),
    ):
        paths[name].touch(mode=0o600)
        paths[name].write_bytes(data)
    return paths


def _write_kubeconfig(path: Path, url: str, token: str, ca_file: Path) -> None:
    ca_data = base64.b64encode(ca_file.read_bytes()).decode("ascii")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kube-apiserver",
                "cluster": {"server": url, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [
            {"name": "kube-apiserver", "context": {"cluster": "kube-apiserver", "user": "admin"}}
        ],
        "current-context": "kube-apiserver",
        "preferences": {},
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


# --- processes --------------------------------------------------------------------------


class _PortTaken(Exception):
    """A port picked as free was bound by someone else before our server could bind it."""


def _free_ports(count: int) -> list[int]:
    """Ports the kernel considers free on 127.0.0.1 right now (held together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# The watchdog reads process-group ids, one a line, from a pipe held by the test process.
# "done" (sent by stop()) ends it at once. End of file without "done" means the test process
# died or forgot its servers: it terminates every group it was told about, then kills what
# is left after 10 s.
_WATCHDOG_SOURCE = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups = []
for line in sys.stdin:
    line = line.strip()
    if line == "done":
        sys.exit(0)
    if line:
        groups.append(int(line))
for sig in (signal.SIGTERM, signal.SIGKILL):
    alive = []
    for group in groups:
        try:
            os.killpg(group, sig)
            alive.append(group)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        still = []
        for group in alive:
            try:
                os.killpg(group, 0)
                still.append(group)
            except ProcessLookupError:
                pass
        alive = still
    if not alive:
        break
"""


def _start_watchdog() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG_SOURCE],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _close_watchdog(watchdog: subprocess.Popen[bytes]) -> None:
    """Tell the watchdog the servers were stopped on purpose, and reap it."""
    if watchdog.poll() is not None:
        return
    with contextlib.suppress(OSError, ValueError):
        assert watchdog.stdin is not None
        watchdog.stdin.write(b"done\n")
        watchdog.stdin.close()
    try:
        watchdog.wait(10)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _spawn(
    program: Path,
    args: list[str],
    log_path: Path,
    watchdog: subprocess.Popen[bytes],
    attempt: int,
) -> subprocess.Popen[bytes]:
    """Start ``program`` in its own process group, tied to this process's life."""
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so it is only
    # safe from the main thread; the watchdog covers every other case.
    if setpriv and threading.current_thread() is threading.main_thread():
        prefix = [setpriv, "--pdeathsig", "KILL", "--"]
    with log_path.open("ab") as log:
        log.write(f"--- attempt {attempt}: {program} {' '.join(args)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            [*prefix, str(program), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=log_path.parent,
            start_new_session=True,
        )
    assert watchdog.stdin is not None
    watchdog.stdin.write(f"{proc.pid}\n".encode())
    watchdog.stdin.flush()
    return proc


def _spawn_etcd(
    etcd: Path,
    workdir: Path,
    client_port: int,
    peer_port: int,
    watchdog: subprocess.Popen[bytes],
    attempt: int,
) -> subprocess.Popen[bytes]:
    data_dir = workdir / _ETCD_DATA
    if data_dir.exists():
        shutil.rmtree(data_dir)
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    args = [
        "--name=edgefleet-test",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=edgefleet-test={peer}",
        "--initial-cluster-state=new",
        "--logger=zap",
        "--log-level=warn",
        # The tests' data is small: keep the backend and snapshot sizes small too.
        "--quota-backend-bytes=1073741824",
        "--snapshot-count=10000",
    ]
    return _spawn(etcd, args, workdir / "etcd.log", watchdog, attempt)


def _age_etcd(port: int) -> None:
    """Give the new etcd a compacted past of `_HISTORY_REVISIONS` revisions (v3 JSON gateway)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(path: str, body: dict[str, object]) -> dict[str, object]:
        connection.request(
            "POST", path, json.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise KubeAPIServerError("etcd", f"{path} answered {response.status}: {payload!r}")
        return json.loads(payload)

    key = base64.b64encode(b"/edgefleet-test/history").decode()
    try:
        for revision in range(_HISTORY_REVISIONS):
            value = base64.b64encode(str(revision).encode()).decode()
            call("/v3/kv/put", {"key": key, "value": value})
        deleted = call("/v3/kv/deleterange", {"key": key})
        header = deleted["header"]
        assert isinstance(header, dict)
        call("/v3/kv/compaction", {"revision": header["revision"], "physical": True})
    except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
        raise KubeAPIServerError("etcd", f"could not write its initial history: {error}") from error
    finally:
        connection.close()


def _terminate_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _check_alive(name: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    if proc.poll() is None:
        return
    tail = _log_tail(log_path)
    if "address already in use" in tail:
        raise _PortTaken(name)
    raise KubeAPIServerError(name, f"exited with status {proc.returncode} while starting", tail)


_POLL_INTERVAL = 0.1
"""Seconds between readiness probes while waiting for a component."""


def _wait_etcd(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        _check_alive("etcd", proc, log_path)
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if json.loads(response.read()).get("health") == "true":
                    return
        except (OSError, ValueError, http.client.HTTPException):
            pass  # not listening yet, or answering half-started
        if time.monotonic() > deadline:
            raise KubeAPIServerError(
                "etcd", f"/health not true within {timeout:.0f} s", _log_tail(log_path)
            )
        time.sleep(_POLL_INTERVAL)


def _wait_apiserver(
    url: str,
    token: str,
    context: ssl.SSLContext,
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    paths = ["/readyz", *(f"/api/v1/namespaces/{ns}" for ns in _SYSTEM_NAMESPACES)]
    while paths:
        _check_alive("kube-apiserver", proc, log_path)
        request = urllib.request.Request(
            url + paths[0], headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                if response.status == 200:
                    paths.pop(0)
                    continue
        except (OSError, http.client.HTTPException):
            pass  # not listening yet, or not ready (HTTPError is an OSError)
        if time.monotonic() > deadline:
            raise KubeAPIServerError(
                "kube-apiserver",
                f"{paths[0]} not ready within {timeout:.0f} s",
                _log_tail(log_path),
            )
        time.sleep(_POLL_INTERVAL)
