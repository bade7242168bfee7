"""Pod volumes on the host: configMap, secret, projected, emptyDir and hostPath.

ConfigMap, Secret and projected volumes (the ``configMap`` and ``secret`` sources of
``projected.sources``, merged into one directory as kubelet does; other projected sources
are refused by ``pods.spec``) are written the way kubelet's atomic writer does, so that an
update is seen all at once and without restarting anything: the files live in a
timestamped directory, ``..data`` is a symlink to it, and each top-level entry is a symlink
through ``..data``. An update writes a new directory and renames a new ``..data`` over the
old one (one atomic rename); the bind mount (or process-runtime symlink) of the volume
directory sees the change. ``subPath`` mounts bind one file and, as with kubelet, do not
see updates.

Secret volumes, projected volumes with a secret source and ``emptyDir.medium: Memory`` live
on the host's tmpfs (``/dev/shm``) when there is one, so secrets never reach the SD card and
memory-backed scratch space is memory; secret files are never group- or world-readable
(mode at most 0600, stricter than kubelet's 0644 default).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib
import secrets
import shutil
import stat
from typing import Any

from edgeagent.errors import PodConfigError, VolumeError
from edgeagent.pods.objects import Lookup, config_data
from edgeagent.runtime.base import Mount

__all__ = ["PreparedVolume", "VolumeManager"]

_DATA = "..data"


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedVolume:
    """A volume ready on the host.

    Attributes:
        kind: ``configMap``, ``secret``, ``projected``, ``emptyDir`` or ``hostPath``.
        path: host path of the volume root.
    """

    kind: str
    path: str


class VolumeManager:
    """Creates, refreshes and removes the volumes of pods.

    Args:
        pods_dir: ``<state_dir>/pods``; volumes are below ``<pods_dir>/<uid>/volumes``.
        shm_dir: a tmpfs for secrets and memory-backed emptyDirs; ``None`` or missing:
            use ``pods_dir``.
    """

    def __init__(self, pods_dir: pathlib.Path, shm_dir: pathlib.Path | None = None) -> None:
        self._pods = pathlib.Path(pods_dir)
        self._shm: pathlib.Path | None = None
        if shm_dir is not None and shm_dir.is_dir() and os.access(shm_dir, os.W_OK):
            self._shm = shm_dir / "edgefleet"

    def _volume_dir(self, uid: str, kind: str, name: str, memory: bool) -> pathlib.Path:
        base = self._shm if memory and self._shm is not None else self._pods
        return base / uid / "volumes" / kind / name

    def prepare(self, pod: dict[str, Any], lookup: Lookup) -> dict[str, PreparedVolume]:
        """Make every volume of the pod ready (idempotent; rewrites changed ConfigMap and
        Secret content).

        Returns:
            Volume name → prepared volume.

        Raises:
            PodConfigError: a referenced ConfigMap/Secret is missing (and not optional) or
                undecodable.
            VolumeError: a hostPath check failed or a directory cannot be written.
        """
        meta = pod["metadata"]
        uid, namespace = meta["uid"], meta["namespace"]
        out: dict[str, PreparedVolume] = {}
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            name = vol["name"]
            try:
                if "configMap" in vol or "secret" in vol or "projected" in vol:
                    out[name] = self._config_volume(uid, namespace, vol, lookup)
                elif "emptyDir" in vol:
                    memory = (vol["emptyDir"] or {}).get("medium") == "Memory"
                    path = self._volume_dir(uid, "empty-dir", name, memory)
                    path.mkdir(parents=True, exist_ok=True)
                    path.chmod(0o777)
                    out[name] = PreparedVolume("emptyDir", str(path))
                elif "hostPath" in vol:
                    out[name] = PreparedVolume("hostPath", _host_path(vol["hostPath"]))
            except OSError as exc:
                raise VolumeError(f"volume {name!r}: {exc}") from exc
        return out

    def _config_volume(
        self, uid: str, namespace: str, vol: dict[str, Any], lookup: Lookup
    ) -> PreparedVolume:
        """A ``configMap``, ``secret`` or ``projected`` volume, written atomically."""
        name = vol["name"]
        if "projected" in vol:
            kind = "projected"
            src = vol["projected"] or {}
            default_mode = src.get("defaultMode", 0o644)
            sources = [
                _source(source, default_mode)
                for source in src.get("sources") or []
                if "configMap" in source or "secret" in source
            ]
        elif "configMap" in vol:
            kind = "configMap"
            src = vol["configMap"]
            sources = [("ConfigMap", src, src["name"], src.get("defaultMode", 0o644), 0o777)]
        else:
            kind = "secret"
            src = vol["secret"]
            sources = [("Secret", src, src["secretName"], src.get("defaultMode", 0o600), 0o600)]
        memory = any(source[0] == "Secret" for source in sources)
        path = self._volume_dir(uid, kind.lower(), name, memory=memory)
        payload: dict[str, tuple[bytes, int]] = {}
        found = False
        for obj_kind, ref, obj_name, default, mask in sources:
            data = config_data(
                lookup, obj_kind, namespace, obj_name, optional=bool(ref.get("optional"))
            )
            if data is None:
                continue
            found = True
            for rel, content in _items(obj_kind, namespace, obj_name, ref, data, default, mask):
                if rel in payload:
                    raise PodConfigError(f"volume {name!r}: more than one source writes {rel!r}")
                payload[rel] = content
        if not path.exists() or found:
            write_atomic(path, payload)
        return PreparedVolume(kind, str(path))

    def mounts(
        self, container: dict[str, Any], volumes: dict[str, PreparedVolume]
    ) -> tuple[Mount, ...]:
        """The container's volume mounts as host-path mounts.

        Raises:
            VolumeError: a ``subPath`` cannot be set up.
        """
        out = []
        for m in container.get("volumeMounts") or []:
            vol = volumes[m["name"]]
            source = vol.path
            read_only = bool(m.get("readOnly")) or vol.kind in ("configMap", "secret", "projected")
            sub = m.get("subPath")
            if sub:
                source = os.path.join(vol.path, sub)
                if vol.kind in ("configMap", "secret"):
                    source = os.path.realpath(source)  # bind the file itself: no updates
                    if not os.path.exists(source):
                        raise VolumeError(f"subPath {sub!r} not found in volume {m['name']!r}")
                elif not os.path.exists(source):
                    try:
                        os.makedirs(source, mode=0o755)
                    except OSError as exc:
                        raise VolumeError(f"subPath {sub!r}: {exc}") from exc
            out.append(Mount(source=source, target=m["mountPath"], read_only=read_only))
        return tuple(out)

    def cleanup(self, uid: str) -> None:
        """Remove everything the agent created for a pod (hostPaths are left alone)."""
        for base in (self._pods, self._shm):
            if base is not None:
                shutil.rmtree(base / uid, ignore_errors=True)


_Source = tuple[str, dict[str, Any], str, int, int]
"""(kind, source, object name, default file mode, mode mask) of one ConfigMap or Secret."""


def _source(source: dict[str, Any], default_mode: int) -> _Source:
    """One ``configMap`` or ``secret`` entry of ``projected.sources`` (both name their
    object ``name``, unlike the ``secret`` volume's ``secretName``)."""
    if "configMap" in source:
        return "ConfigMap", source["configMap"], source["configMap"]["name"], default_mode, 0o777
    return "Secret", source["secret"], source["secret"]["name"], default_mode, 0o600


def _items(
    kind: str,
    namespace: str,
    name: str,
    src: dict[str, Any],
    data: dict[str, bytes],
    default_mode: int,
    mask: int,
) -> list[tuple[str, tuple[bytes, int]]]:
    """The files one ConfigMap or Secret contributes: ``[(relative path, (bytes, mode))]``,
    every key or the listed ``items`` (a missing listed key is an error unless optional).

    Raises:
        PodConfigError: a listed key is missing and the source is not optional.
    """
    items = src.get("items")
    if not items:
        return [(key, (value, int(default_mode) & mask)) for key, value in data.items()]
    out = []
    for item in items:
        if item["key"] not in data:
            if src.get("optional"):
                continue
            raise PodConfigError(f"couldn't find key {item['key']} in {kind} {namespace}/{name}")
        mode = int(item.get("mode", default_mode)) & mask
        out.append((item["path"], (data[item["key"]], mode)))
    return out


def _host_path(src: dict[str, Any]) -> str:
    path = pathlib.Path(src["path"])
    kind = src.get("type", "") or ""
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    if kind == "DirectoryOrCreate" and st is None:
        path.mkdir(parents=True, mode=0o755)
        st = path.stat()
    elif kind == "FileOrCreate" and st is None:
        if not path.parent.is_dir():
            raise VolumeError(f"hostPath type check failed: {path.parent} is not a directory")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
        st = path.stat()
    checks = {
        "DirectoryOrCreate": (stat.S_ISDIR, "a directory"),
        "Directory": (stat.S_ISDIR, "a directory"),
        "FileOrCreate": (stat.S_ISREG, "a file"),
        "File": (stat.S_ISREG, "a file"),
        "Socket": (stat.S_ISSOCK, "a socket"),
        "CharDevice": (stat.S_ISCHR, "a character device"),
        "BlockDevice": (stat.S_ISBLK, "a block device"),
    }
    if kind in checks:
        test, what = checks[kind]
        if st is None or not test(st.st_mode):
            raise VolumeError(f"hostPath type check failed: {path} is not {what}")
    elif st is None:
        # Type "" (no checks): kubelet/Docker create a missing directory.
        path.mkdir(parents=True, mode=0o755)
    return str(path)


def _current_payload(path: pathlib.Path) -> dict[str, tuple[bytes, int]] | None:
    data_dir = path / _DATA
    if not data_dir.is_dir():
        return None
    out: dict[str, tuple[bytes, int]] = {}
    for root, _dirs, files in os.walk(data_dir, followlinks=False):
        for f in files:
            full = pathlib.Path(root) / f
            rel = str(full.relative_to(data_dir))
            out[rel] = (full.read_bytes(), stat.S_IMODE(full.stat().st_mode))
    return out


def write_atomic(path: pathlib.Path, payload: dict[str, tuple[bytes, int]]) -> bool:
    """Make ``path`` hold exactly ``payload`` (relative path → (content, mode)), switching
    atomically with a ``..data`` symlink rename. Returns ``False`` if it already did."""
    path.mkdir(parents=True, exist_ok=True)
    if _current_payload(path) == payload:
        return False
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    ts_dir = path / f"{stamp}.{secrets.token_hex(4)}"
    ts_dir.mkdir(mode=0o755)
    for rel, (content, mode) in payload.items():
        target = ts_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        os.chmod(target, mode)  # the umask must not loosen or tighten it
    old = os.readlink(path / _DATA) if (path / _DATA).is_symlink() else None
    tmp_link = path / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp_link.unlink()
    tmp_link.symlink_to(ts_dir.name)
    os.replace(tmp_link, path / _DATA)
    tops = {rel.split("/")[0] for rel in payload}
    for top in tops:
        link = path / top
        want = f"{_DATA}/{top}"
        if link.is_symlink() and os.readlink(link) == want:
            continue
        tmp = path / f".{top}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(want)
        os.replace(tmp, link)
    for entry in path.iterdir():
        if entry.name.startswith(".."):
            if entry.name not in (_DATA, ts_dir.name) and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_symlink() and entry.name not in tops:
            entry.unlink()
    if old and old != ts_dir.name:
        shutil.rmtree(path / old, ignore_errors=True)
    return True
