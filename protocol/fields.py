"""The field checks and wire mapping of message classes, generated once per class.

:func:`compile_message` is what ``protocol.messages`` registers every message class with.
"""

from __future__ import annotations

import dataclasses
import itertools
import typing
from collections.abc import Callable
from typing import Any

from protocol.errors import CloseCode, DecodeError, ErrorCode, InvalidMessage
from protocol.objectref import MISSING, REF_SETTERS, ObjectRef

__all__ = ["MAX_SEQ", "MIN_FRAME_SIZE", "check_limits", "compile_message"]

MAX_SEQ = 2**64 - 1
"""The largest sequence number (msgpack's unsigned 64-bit range)."""


# Each message class gets three functions compiled from its annotations when it is
# registered: ``__init__`` (replacing the dataclass one: type checks on the arguments, the
# slots set, then the class's ``_check()`` value rules), ``_to_body`` and ``_from_body``.
# They are generated, as dataclasses generates ``__init__``, because this is the
# per-message cost of the whole layer (the goal is at most 1.3x the bare transport's cost
# per 1 KiB message): straight-line code with the checks inlined runs several times faster
# than a loop over field descriptors, and checking before storing saves reading every field
# back as a ``__post_init__`` would.

_INT_MIN = -(2**63)

# annotation -> (check expression over ``v``, what is expected, in words)
_CHECKS: dict[object, tuple[str, str]] = {
    str: ("isinstance(v, str)", "str"),
    int: ("isinstance(v, int) and v.__class__ is not bool and _INT_MIN <= v <= MAX_SEQ", "int"),
    float: (
        "isinstance(v, (float, int)) and v.__class__ is not bool and -_INF < v < _INF",
        "finite number",
    ),
    bool: ("v.__class__ is bool", "bool"),
    bytes: ("isinstance(v, bytes)", "bytes"),
    Any: ("v is not MISSING", "any value"),
    # container checks run in C: all(map(isinstance, items, repeat(type)))
    dict[str, Any]: ("isinstance(v, dict) and all(map(isinstance, v, _STR))", "map with str keys"),
    dict[str, str]: (
        "isinstance(v, dict) and all(map(isinstance, v, _STR))"
        " and all(map(isinstance, v.values(), _STR))",
        "map of str to str",
    ),
    dict[str, list]: (
        "isinstance(v, dict) and all(map(isinstance, v, _STR))"
        " and all(map(isinstance, v.values(), _LIST))",
        "map of str to list",
    ),
    tuple[str, ...]: ("isinstance(v, tuple) and all(map(isinstance, v, _STR))", "list of str"),
    ObjectRef: ("v.__class__ is ObjectRef", "ObjectRef map"),
    CloseCode: ("v.__class__ is CloseCode", "CloseCode int"),
    ErrorCode: ("v.__class__ is ErrorCode", "ErrorCode int"),
}


def _or_new(value: object, factory: Callable[[], Any]) -> object:
    return factory() if value is MISSING else value


def _bad(cls: type[Any], name: str, value: object) -> InvalidMessage:
    """The error for a field that failed its type check (slow path)."""
    if value is MISSING:
        return InvalidMessage(name, "missing")
    return InvalidMessage(name, f"expected {cls._expected[name]}, got {type(value).__name__}")


def _decode_conversion(name: str, hint: object, env: dict[str, Any]) -> list[str]:
    """Generated lines that turn field ``name``'s decoded wire value into its Python type
    before the check: an ``ObjectRef`` map (its own errors name ``<field>.<key>``), an enum
    int, a list as a tuple; nothing for the other types."""
    if hint is ObjectRef:  # a map on the wire; its own errors name ``<field>.<key>``
        return [
            "        if v.__class__ is dict:",
            "            r = v.get",
            "            k, ns, n, u = r('kind', MISSING), r('namespace', ''), "
            "r('name', MISSING), r('uid', MISSING)",
            "            if (k.__class__ is str and ns.__class__ is str and n.__class__ is str"
            " and u.__class__ is str and k and n and u):",  # ObjectRef's own rules
            "                v = _new(ObjectRef)",
            "                _ref_kind(v, k); _ref_namespace(v, ns); _ref_name(v, n); "
            "_ref_uid(v, u)",
            "            else:",
            "                try:",
            "                    v = ObjectRef(k, ns, n, u)",
            "                except InvalidMessage as exc:",
            f"                    raise DecodeError('b.{name}.' + exc.field, exc.reason, "
            "cls.kind) from exc",
        ]
    elif hint in (CloseCode, ErrorCode):
        env[f"_enum_{name}"] = hint
        return [
            "        if v.__class__ is int:",
            "            try:",
            f"                v = _enum_{name}(v)",
            "            except ValueError:",
            f"                raise DecodeError('b.{name}', 'unknown {hint.__name__} value ' "
            "+ str(v), cls.kind) from None",
        ]
    elif hint == tuple[str, ...]:
        return ["        if v.__class__ is list: v = tuple(v)"]
    return []


def compile_message(cls: type[Any], *, has_rules: bool) -> None:
    """Generate ``__init__``, ``_to_body`` and ``_from_body`` for a message class (a
    ``protocol.messages.Message`` dataclass; ``has_rules``: it overrides ``_check()``).

    ``__init__`` keeps the dataclass signature (field order, defaults, default factories).
    ``_from_body`` runs exactly the checks ``__init__`` runs (the same expressions, on the
    decoded values), then builds the instance from its slots without going through
    ``__init__`` again: decoding validates every field once, not twice.
    A nested ``ObjectRef`` map is checked as ``ObjectRef()`` checks it and built the same
    way; anything unusual about it takes ``ObjectRef()`` itself, for the same error.
    """
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {
        "ObjectRef": ObjectRef,
        "CloseCode": CloseCode,
        "ErrorCode": ErrorCode,
        "MAX_SEQ": MAX_SEQ,
        "_INT_MIN": _INT_MIN,
        "_INF": float("inf"),
        "MISSING": MISSING,
        "_STR": itertools.repeat(str),  # endless and stateless: map() stops at the items
        "_LIST": itertools.repeat(list),
        "_bad": _bad,
        "_or_new": _or_new,
        "cls": cls,
        "InvalidMessage": InvalidMessage,
        "DecodeError": DecodeError,
        "_new": object.__new__,
        **REF_SETTERS,
    }
    params, init_lines, to_body, to_body_refs, decode_lines, sets = [], [], [], [], [], []
    expected: dict[str, str] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name, hint = f.name, hints[f.name]
        hint_args = typing.get_args(hint)
        optional = type(None) in hint_args and len(hint_args) == 2
        if optional:
            hint = next(a for a in hint_args if a is not type(None))
        if hint not in _CHECKS:  # pragma: no cover - a programming error caught at import
            raise TypeError(f"{cls.__name__}.{name}: unsupported annotation {hint!r}")
        expr, words = _CHECKS[hint]
        if optional:
            expr, words = f"v is None or ({expr})", f"{words} or nil"
        expected[name] = words
        check = f"if not ({expr}):\n        raise _bad(cls, {name!r}, v)"
        # wire form: ObjectRef as a map; enums are ints and pack as such
        if hint is ObjectRef:
            to_body_refs.append(f"    {name}_ = self.{name}")
            to_body.append(
                f"{name!r}: {{'kind': {name}_.kind, 'namespace': {name}_.namespace, "
                f"'name': {name}_.name, 'uid': {name}_.uid}}"
            )
        else:
            to_body.append(f"{name!r}: self.{name}")
        value = f"get({name!r}, MISSING)"
        params.append(name)
        if f.default is not dataclasses.MISSING:
            env[f"_default_{name}"] = f.default
            value = f"get({name!r}, _default_{name})"
            params[-1] = f"{name}=_default_{name}"
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{name}"] = f.default_factory
            value = f"_or_new(get({name!r}, MISSING), _factory_{name})"
            params[-1] = f"{name}=MISSING"
            init_lines.append(f"    if {name} is MISSING:\n        {name} = _factory_{name}()")
        init_lines.append(f"    v = {name}\n    {check}")
        decode_lines.append(f"        v = {value}")
        decode_lines += _decode_conversion(name, hint, env)
        decode_lines.append(f"        {check}".replace("\n", "\n    "))
        decode_lines.append(f"        {name}_ = v")
        env[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot, as __init__ sets it
        sets.append(name)
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(params)}):",
            *init_lines,
            *(f"    _set_{n}(self, {n})" for n in sets),
            *(["    self._check()"] if has_rules else []),
            "def _to_body(self):",
            *to_body_refs,
            f"    return {{{', '.join(to_body)}}}",
            "def _from_body(body):",
            "    get = body.get",
            "    try:",
            *decode_lines,
            "        self = _new(cls)",
            *(f"        _set_{n}(self, {n}_)" for n in sets),
            *(["        self._check()"] if has_rules else []),
            "    except InvalidMessage as exc:",
            "        raise DecodeError('b.' + exc.field, exc.reason, cls.kind) from exc",
            "    return self",
        ]
    )
    exec(compile(source, f"<protocol.messages {cls.__name__}>", "exec"), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    cls._to_body = env["_to_body"]  # type: ignore[method-assign]
    cls._from_body = staticmethod(env["_from_body"])  # type: ignore[method-assign,assignment]
    cls._expected = expected


MIN_FRAME_SIZE = 1024
"""The smallest frame limit (bytes) a hello or welcome may announce (0: none announced).
Below it control messages (pongs, acks, a stream's open) would not fit a frame, or every
message would be cut into chunks of a few bytes."""


def check_limits(max_frame_size: int, max_message_size: int) -> None:
    """The frame and message limits a hello or welcome announces (bytes); raises
    ``InvalidMessage`` unless each is in 0..2**32-1 and the frame limit is 0 or at least
    :data:`MIN_FRAME_SIZE`."""
    if not (0 <= max_frame_size <= 2**32 - 1 and 0 <= max_message_size <= 2**32 - 1):
        raise InvalidMessage("max_frame_size", "limits must be in 0..2**32-1 bytes")
    if 0 < max_frame_size < MIN_FRAME_SIZE:
        raise InvalidMessage(
            "max_frame_size", f"must be 0 (none announced) or at least {MIN_FRAME_SIZE} bytes"
        )
