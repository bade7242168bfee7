"""Load a program's settings: a YAML file, then environment variables, then explicit overrides.

Both programs describe their settings as a root frozen dataclass made of per-concern
groups (kopf's ``OperatorSettings``, aioquic's ``QuicConfiguration``)::

    @dataclass(frozen=True)
    class Transport:
        quic_port: int = field(default=4433, metadata={"help": "UDP port of the hub"})
        handshake_timeout: float = field(default=3.0, metadata={"unit": "s"})

    @dataclass(frozen=True)
    class AgentSettings:
        transport: Transport = field(default_factory=Transport)

    settings = load_settings(
        AgentSettings,
        path="/etc/edgeagent/config.yaml",
        environ=os.environ,
        env_prefix="EDGEAGENT_",          # EDGEAGENT_TRANSPORT__QUIC_PORT=4434
        overrides={"transport.quic_port": 4435},
    )

Later sources win. Environment variable names are the prefix, then the dotted key in upper
case with ``__`` between levels. Values from the environment (and string overrides for
non-string fields) are parsed from text: ``true/false/yes/no/on/off/1/0`` for bools,
comma-separated items for tuples, ``k=v,k2=v2`` for maps, an empty string or ``null`` for
``None``, a member name or value for enums. Unknown keys are errors (a typo must not pass
silently), so use a prefix that only this program's settings use.

Field metadata may give ``"unit"`` (``"s"``, ``"bytes"``, ``"millicores"``) and ``"help"``;
``describe()`` lists them and errors mention the unit. The module reads no environment and
no file at import; PyYAML is imported only when a file is given (the agent is RSS-sensitive).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import pathlib
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, TypeVar

from protocol.errors import SettingsError

__all__ = ["SettingInfo", "describe", "load_settings"]

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NONE_TEXT = frozenset({"", "null", "none", "~"})


@dataclasses.dataclass(frozen=True, slots=True)
class SettingInfo:
    """One leaf setting, as ``describe()`` reports it."""

    key: str
    """Dotted key, e.g. ``"transport.quic_port"``."""
    type: str
    """The expected type in words."""
    default: Any
    """The default value (``dataclasses.MISSING`` if required)."""
    unit: str
    """The unit from the field's metadata, or ``""``."""
    help: str
    """The help text from the field's metadata, or ``""``."""

    def env_var(self, prefix: str) -> str:
        """The environment variable that sets it under ``prefix``."""
        return prefix + self.key.upper().replace(".", "__")


def describe(cls: type) -> list[SettingInfo]:
    """List every leaf setting of a settings dataclass, depth first, in field order."""
    return list(_describe(cls, ""))


def _describe(cls: type, prefix: str) -> Iterator[SettingInfo]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        hint = hints[f.name]
        if _is_group(hint):
            yield from _describe(hint, key + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        yield SettingInfo(
            key,
            _type_words(hint),
            default,
            f.metadata.get("unit", ""),
            f.metadata.get("help", ""),
        )


def load_settings(
    cls: type[T],
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    env_prefix: str = "",
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """Build a settings object from defaults, a YAML file, the environment and overrides.

    Args:
        cls: the root settings dataclass (fields may be nested dataclasses: groups).
        path: a YAML file holding a (nested) mapping of keys, or ``None``. A missing file
            is an error; an empty one means "all defaults".
        environ: the environment to read (pass ``os.environ``), or ``None`` to skip it.
        env_prefix: only variables starting with it are read (e.g. ``"EDGEAGENT_"``);
            required when ``environ`` is given.
        overrides: dotted key -> value (e.g. from command-line flags), applied last.

    Returns:
        An instance of ``cls``.

    Raises:
        SettingsError: an unknown key, a missing required key, a value of the wrong type,
            an unreadable or malformed file, or a value the dataclass itself refuses; the
            error names the dotted key, the expected type (with its unit) and the source.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    layers: list[tuple[dict[str, Any], str, bool]] = []  # (nested values, source, is text)
    if path is not None:
        layers.append((_read_yaml(pathlib.Path(path)), str(path), False))
    if environ is not None:
        if not env_prefix:
            raise ValueError("env_prefix is required when environ is given")
        for name in sorted(environ):
            if name.startswith(env_prefix) and len(name) > len(env_prefix):
                dotted = name[len(env_prefix) :].lower().replace("__", ".")
                layers.append(
                    (
                        _nest(dotted, environ[name], f"environment {name}"),
                        f"environment {name}",
                        True,
                    )
                )
    for dotted, value in (overrides or {}).items():
        layers.append((_nest(dotted, value, "override"), f"override {dotted}", False))
    return _build(cls, layers, "")


def _read_yaml(path: pathlib.Path) -> dict[str, Any]:
    import yaml  # lazy: only programs that use a config file pay for PyYAML

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(
            "<file>", "a readable YAML file", str(path), exc.strerror or ""
        ) from exc
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(text, Loader=loader)  # a SafeLoader: no object construction
    except yaml.YAMLError as exc:
        raise SettingsError("<file>", "valid YAML", None, f"{path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(
            "<file>", "a mapping at the top of the file", type(data).__name__, str(path)
        )
    return data


def _nest(dotted: str, value: Any, source: str) -> dict[str, Any]:
    parts = dotted.split(".")
    if not all(parts):
        raise SettingsError(dotted, "a dotted key like group.name", None, source)
    nested: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        nested = {part: nested}
    return nested


def _is_group(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _build(cls: type[T], layers: list[tuple[dict[str, Any], str, bool]], prefix: str) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for values, source, _ in layers:
        if not isinstance(values, dict):
            raise SettingsError(prefix.rstrip("."), "a mapping of settings", values, source)
        for name in values:
            if name not in fields:
                known = ", ".join(fields)
                raise SettingsError(
                    f"{prefix}{name}", f"one of the known settings ({known})", None, source
                )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        key = prefix + name
        hint = hints[name]
        if _is_group(hint):
            sub = [(v[name], src, text) for v, src, text in layers if name in v]
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if sub or required:
                kwargs[name] = _build(hint, sub, key + ".")
            continue
        for values, source, text in layers:
            if name in values:
                kwargs[name] = _coerce(values[name], hint, key, source, text, f.metadata)
        if name not in kwargs and (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ):
            raise SettingsError(key, _expected(hint, f.metadata), "nothing (it is required)")
    try:
        return cls(**kwargs)
    except SettingsError as exc:  # the dataclass's own checks, relative to this group
        raise SettingsError(prefix + exc.key, exc.expected, exc.got, exc.source) from exc
    except (TypeError, ValueError) as exc:
        raise SettingsError(prefix.rstrip(".") or cls.__name__, str(exc)) from exc


def _expected(hint: Any, metadata: Mapping[str, Any]) -> str:
    unit = metadata.get("unit")
    words = _type_words(hint)
    return f"{words} ({unit})" if unit else words


def _type_words(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_type_words(a) for a in inner) + " or null"
    if origin is tuple:
        return f"list of {_type_words(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_words(args[0])} to {_type_words(args[1])}" if args else "map"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(m.name.lower() for m in hint)
    if hint is Any:
        return "any value"
    return getattr(hint, "__name__", str(hint))


def _coerce(
    value: Any, hint: Any, key: str, source: str, text: bool, metadata: Mapping[str, Any]
) -> Any:
    """Check (and, for text, parse) one value against its annotation."""
    try:
        return _convert(value, hint, text or isinstance(value, str))
    except _Mismatch:
        shown = value if not isinstance(value, str) or len(value) < 200 else value[:200] + "..."
        raise SettingsError(key, _expected(hint, metadata), shown, source) from None


class _Mismatch(Exception):
    pass


def _convert(value: Any, hint: Any, text: bool) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if type(None) in args:  # X | None
        if value is None or (
            text and isinstance(value, str) and value.strip().lower() in _NONE_TEXT
        ):
            return None
        inner = [a for a in args if a is not type(None)]
        for candidate in inner:
            try:
                return _convert(value, candidate, text)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        for option in args:
            if value == option or (text and isinstance(value, str) and value == str(option)):
                return option
        raise _Mismatch
    if hint is bool:
        if isinstance(value, bool):
            return value
        if text and isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
        raise _Mismatch
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text and isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            result = float(value)
        elif text and isinstance(value, str):
            try:
                result = float(value.strip())
            except ValueError:
                raise _Mismatch from None
        else:
            raise _Mismatch
        if not math.isfinite(result):
            raise _Mismatch
        return result
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if hint is pathlib.Path:
        if isinstance(value, (str, pathlib.PurePath)):
            return pathlib.Path(value)
        raise _Mismatch
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        for member in hint:
            if value == member.value or (
                isinstance(value, str) and value.strip().lower() == member.name.lower()
            ):
                return member
        raise _Mismatch
    if origin is tuple:
        item = args[0] if args else Any
        if text and isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        return tuple(_convert(v, item, text) for v in value)
    if origin is dict:
        key_hint, value_hint = args if args else (Any, Any)
        if text and isinstance(value, str):
            pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
            if any(len(pair) != 2 for pair in pairs):
                raise _Mismatch
            value = {k.strip(): v.strip() for k, v in pairs}
        if not isinstance(value, dict):
            raise _Mismatch
        return {
            _convert(k, key_hint, text): _convert(v, value_hint, text) for k, v in value.items()
        }
    raise TypeError(f"unsupported settings annotation {hint!r}")  # a programming error
