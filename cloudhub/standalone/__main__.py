"""``python -m cloudhub.standalone``: run the embedded Kubernetes-compatible API alone.

It serves until SIGINT or SIGTERM, then flushes and exits 0. Exit codes: 0 after a
clean stop, 2 for bad options, 1 when it cannot start (unusable data directory,
port in use).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import signal
import sys

from cloudhub.standalone.errors import StandaloneError
from cloudhub.standalone.server import EmbeddedAPIServer
from cloudhub.standalone.settings import APIServerSettings

DESCRIPTION = """\
Run EdgeFleet's embedded Kubernetes-compatible API server (HTTPS, bearer token).

It serves the core resources the hub uses (namespaces, nodes, pods, configmaps,
secrets, events, services, serviceaccounts, endpoints), leases, apps/v1 workloads,
RBAC objects, CustomResourceDefinitions and the custom resources they define, with
list/watch/resourceVersion semantics of Kubernetes 1.20. It writes a kubeconfig
that kubectl and kubernetes_asyncio use as is, and prints its path once serving.
"""


def build_parser() -> argparse.ArgumentParser:
    defaults = APIServerSettings()
    parser = argparse.ArgumentParser(
        prog="python -m cloudhub.standalone",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        type=pathlib.Path,
        help="directory for the SQLite database (state.db), TLS files, token and kubeconfig; "
        "objects survive restarts. Omit it (or use --in-memory) to keep nothing on disk",
    )
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="keep objects in memory only (lost at exit); TLS files and kubeconfig go to a "
        "temporary directory removed at exit",
    )
    parser.add_argument(
        "--host",
        default=defaults.host,
        help=f"address to listen on (default {defaults.host}; use 0.0.0.0 to expose it)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=defaults.port,
        help=f"TCP port (default {defaults.port}, as kube-apiserver; 0 picks a free one)",
    )
    parser.add_argument(
        "--advertise-host",
        help="host name or address put in the kubeconfig and the serving certificate "
        "(default: --host, or 127.0.0.1 when it is a wildcard)",
    )
    parser.add_argument(
        "--token",
        help="bearer token clients must send (default: generated once and kept in DATA_DIR/token)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        type=pathlib.Path,
        help="also copy the kubeconfig to this path",
    )
    parser.add_argument(
        "--watch-history",
        type=int,
        default=defaults.watch_history_events,
        help="changes kept for watches and paging; older resourceVersions get 410 Gone "
        f"(default {defaults.watch_history_events})",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=defaults.bookmark_interval_s,
        help=f"seconds between watch BOOKMARK events (default {defaults.bookmark_interval_s:g})",
    )
    parser.add_argument(
        "--commit-interval",
        type=float,
        default=defaults.commit_interval_s,
        help="seconds to gather writes into one SQLite transaction (default "
        f"{defaults.commit_interval_s:g}: commit as soon as the previous one finished)",
    )
    parser.add_argument(
        "--event-ttl",
        type=float,
        default=defaults.event_ttl_s,
        help="seconds an Event is kept after its last write, as kube-apiserver's --event-ttl "
        f"(default {defaults.event_ttl_s:g})",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="PRAGMA synchronous=NORMAL: acknowledged writes survive a crash of this process "
        "but may be lost on power failure (default: FULL, fsync at every commit)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log at DEBUG level")
    return parser


def _copy_private(source: pathlib.Path, target: pathlib.Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch(mode=0o600)
    target.chmod(0o600)
    target.write_bytes(source.read_bytes())


async def serve(settings: APIServerSettings, kubeconfig_out: pathlib.Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with EmbeddedAPIServer(settings) as api:
        if kubeconfig_out is not None:
            await asyncio.to_thread(_copy_private, api.kubeconfig_path, kubeconfig_out)
        print(f"serving {api.url}", flush=True)
        print(f"kubeconfig {kubeconfig_out or api.kubeconfig_path}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.in_memory and args.data_dir:
        parser.error("--in-memory and --data-dir exclude each other")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = APIServerSettings(
            data_dir=None if args.in_memory else args.data_dir,
            host=args.host,
            port=args.port,
            advertise_host=args.advertise_host,
            token=args.token,
            watch_history_events=args.watch_history,
            bookmark_interval_s=args.bookmark_interval,
            commit_interval_s=args.commit_interval,
            synchronous_full=not args.no_fsync,
            event_ttl_s=args.event_ttl,
        )
    except StandaloneError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(serve(settings, args.kubeconfig_out))
    except StandaloneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
