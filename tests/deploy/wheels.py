"""EdgeFleet wheels and wheelhouses built from this tree, for the deploy tests: the
builders are :mod:`cloudhub.devtools.wheels` (shared with ``cloudhub demo --upgrade``);
here the wheelhouse served over HTTP.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import pathlib
import tarfile
import threading
from collections.abc import Iterator

from cloudhub.devtools.wheels import REPO, build_wheel, make_wheelhouse, write_manifest

__all__ = ["REPO", "build_wheel", "make_wheelhouse", "wheelhouse_over_http", "write_manifest"]


@contextlib.contextmanager
def wheelhouse_over_http(house: pathlib.Path, name: str, served: pathlib.Path) -> Iterator[str]:
    """Serve ``house`` as the archive ``name`` (``wheelhouse/`` inside, as release.sh
    packs it) from ``served`` over plain HTTP on loopback, a real server in a thread.

    Yields:
        The server's base URL (``http://127.0.0.1:PORT``); the archive is ``{url}/{name}``.
    """
    served.mkdir()
    with tarfile.open(served / name, "w:gz") as archive:
        archive.add(house, arcname="wheelhouse")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
