"""DeviceModel and Device documents (``devices.kubeedge.io/v1beta1``), parsed and checked.

EdgeFleet serves KubeEdge's v1beta1 device API as its own (docs/devices.md), so these
parsers accept the documents KubeEdge users already have. The field names are KubeEdge's
(``pkg/apis/devices/v1beta1`` in kubeedge/kubeedge): a DeviceModel lists properties
(``name``, ``type``, ``accessMode``, ``minimum``, ``maximum``, ``unit``, ``description``) and
names a ``protocol``; a Device points at its model (``deviceModelRef.name``), names its node
(``nodeName``), carries an opaque ``protocol`` block for the mapper, and lists properties
with their ``desired`` values and mapper hints (``visitors``, ``collectCycle``,
``reportCycle``, ``reportToCloud``, ``pushMethod``).

Both the hub and the agent parse with these functions: the hub to validate and to compute
twin state, the agent to serve devices to mappers and validate what they report. Parsing
is pure and collects every problem with its field path before raising ``InvalidDocument``.

Where we are stricter or looser than KubeEdge's CRD, it is said at the field.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.devices.errors import InvalidDocument, Problem

GROUP = "devices.kubeedge.io"
API_VERSION = f"{GROUP}/v1beta1"
"""The one version we serve; ``v1alpha2`` documents are converted (``cloudhub devices convert``)."""
V1ALPHA2 = f"{GROUP}/v1alpha2"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_PROPERTY_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


class PropertyType(str, enum.Enum):
    """The type of a model property.

    KubeEdge v1beta1 spells these in upper case (``INT``, ``STRING``…) and v1alpha2 and
    the issue in lower case; both spellings are accepted, the value here is lower case.
    ``BYTES`` values travel base64-encoded in text and JSON. ``STREAM`` properties (camera
    frames, video) are handled by the mapper alone and carry no twin value: a desired or
    reported value for one is refused (``NotATwinProperty``).
    """

    INT = "int"
    FLOAT = "float"
    DOUBLE = "double"
    STRING = "string"
    BOOLEAN = "boolean"
    BYTES = "bytes"
    STREAM = "stream"

    @property
    def numeric(self) -> bool:
        """Whether ``minimum``/``maximum`` apply (int, float, double)."""
        return self in (PropertyType.INT, PropertyType.FLOAT, PropertyType.DOUBLE)

    @property
    def kubeedge(self) -> str:
        """The KubeEdge v1beta1 spelling (upper case)."""
        return self.value.upper()


class AccessMode(str, enum.Enum):
    """Who may set a property: ``ReadWrite`` takes desired values, ``ReadOnly`` does not."""

    READ_WRITE = "ReadWrite"
    READ_ONLY = "ReadOnly"


@dataclass(frozen=True, slots=True)
class ModelProperty:
    """One property of a DeviceModel.

    Attributes:
        name: unique within the model.
        type: the value type.
        access_mode: ``ReadOnly`` properties refuse desired values.
        description: free text.
        unit: free text (e.g. ``degree celsius``), shown to people and mappers.
        minimum: inclusive lower bound for numeric types, ``None`` if unbounded.
        maximum: inclusive upper bound for numeric types, ``None`` if unbounded.
    """

    name: str
    type: PropertyType
    access_mode: AccessMode
    description: str = ""
    unit: str = ""
    minimum: int | float | None = None
    maximum: int | float | None = None


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """A parsed ``DeviceModel``.

    Attributes:
        namespace: ``""`` when the document names none (the API server defaults it).
        name: the model name Devices refer to.
        properties: in document order, names unique.
        protocol: the protocol name mappers use (``spec.protocol``), ``""`` if absent.
        uid: ``metadata.uid`` when read from the API, else ``""``.
        generation: ``metadata.generation`` when read from the API, else 0.
    """

    namespace: str
    name: str
    properties: tuple[ModelProperty, ...]
    protocol: str = ""
    uid: str = ""
    generation: int = 0

    def property(self, name: str) -> ModelProperty | None:
        """The property called ``name``, or ``None``."""
        for prop in self.properties:
            if prop.name == name:
                return prop
        return None


@dataclass(frozen=True, slots=True)
class DeviceProperty:
    """One entry of a Device's ``spec.properties``.

    Attributes:
        name: a property of the device's model.
        desired: the desired value in KubeEdge's text form (``desired.value``), or ``None``
            when the Device sets none. Checked against the model by
            ``protocol.devices.values.check_desired``, not here.
        visitors: opaque mapper configuration (``protocolName``, ``configData``).
        collect_cycle: how often the mapper reads the device; KubeEdge ≥ 1.15 mappers read
            it as nanoseconds. 0 when unset.
        report_cycle: how often the mapper reports, same unit. 0 when unset.
        report_to_cloud: KubeEdge's flag; kept for mappers, twins report regardless.
        push_method: opaque (``mqtt``, ``http``, ``dbMethod``…), ``None`` when unset.
    """

    name: str
    desired: str | None = None
    visitors: Mapping[str, Any] = field(default_factory=dict)
    collect_cycle: int = 0
    report_cycle: int = 0
    report_to_cloud: bool = False
    push_method: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DeviceMethod:
    """One entry of ``spec.methods``: a named action over some properties (opaque to us)."""

    name: str
    description: str = ""
    property_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Device:
    """A parsed ``Device``.

    Attributes:
        namespace: ``""`` when the document names none.
        name: device name.
        model_name: ``spec.deviceModelRef.name``, a DeviceModel in the same namespace.
        node_name: the edge node serving it, ``""`` while unassigned.
        protocol_name: ``spec.protocol.protocolName``, ``""`` if absent.
        protocol_config: ``spec.protocol.configData`` as given (opaque), ``None`` if absent.
        properties: ``spec.properties`` in order, names unique.
        methods: ``spec.methods``.
        uid: ``metadata.uid``: the device's identity. A Device deleted and recreated under
            the same name has a new uid and is a new device.
        generation: ``metadata.generation``, bumped by the API server on every spec
            change: the version of the desired state.
        status: the raw ``status`` mapping (written by the hub), ``{}`` if absent.
    """

    namespace: str
    name: str
    model_name: str
    node_name: str = ""
    protocol_name: str = ""
    protocol_config: Mapping[str, Any] | None = None
    properties: tuple[DeviceProperty, ...] = ()
    methods: tuple[DeviceMethod, ...] = ()
    uid: str = ""
    generation: int = 0
    status: Mapping[str, Any] = field(default_factory=dict)

    def property(self, name: str) -> DeviceProperty | None:
        """The ``spec.properties`` entry called ``name``, or ``None``."""
        for prop in self.properties:
            if prop.name == name:
                return prop
        return None


# ---------------------------------------------------------------------------------------
# Parsing


class _Checker:
    """Collects problems while walking a document."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def mapping(self, obj: Any, path: str, *, required: bool = False) -> Mapping[str, Any] | None:
        if obj is None:
            if required:
                self.add(path, "required")
            return None
        if not isinstance(obj, Mapping):
            self.add(path, f"must be a mapping, got {_describe(obj)}")
            return None
        return obj

    def items(self, obj: Any, path: str, *, required: bool = False) -> list[Any]:
        if obj is None:
            if required:
                self.add(path, "required")
            return []
        if not isinstance(obj, list):
            self.add(path, f"must be a list, got {_describe(obj)}")
            return []
        return obj

    def string(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
        value = obj.get(key)
        where = _join(path, key)
        if value is None:
            if required:
                self.add(where, "required")
            return ""
        if not isinstance(value, str):
            hint = ""
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                hint = f" (quote it: '{_number(value)}')"
            self.add(where, f"must be a string, got {_describe(value)}{hint}")
            return ""
        if required and not value:
            self.add(where, "must not be empty")
        return value

    def integer(self, obj: Mapping[str, Any], key: str, path: str) -> int:
        value = obj.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(_join(path, key), f"must be an integer, got {_describe(value)}")
            return 0
        if value < 0:
            self.add(_join(path, key), f"must not be negative, got {value}")
            return 0
        return value

    def boolean(self, obj: Mapping[str, Any], key: str, path: str) -> bool:
        value = obj.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.add(_join(path, key), f"must be true or false, got {_describe(value)}")
            return False
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _number(value: int | float) -> str:
    """A number as text; an integer past Python's int/str limit (4300 digits) by size."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"<{value.bit_length()}-bit integer>"
    return str(value)


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {_number(value)}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if value is None:
        return "null"
    return type(value).__name__


def _check_header(
    c: _Checker, obj: Any, kind: str
) -> tuple[Mapping[str, Any], str, str, str, int] | None:
    """Check apiVersion, kind and metadata.

    Returns (doc, namespace, name, uid, generation), or None when the rest of the document
    cannot be read usefully (not a mapping, or a v1alpha2 document).
    """
    if not isinstance(obj, Mapping):
        c.add("", f"a {kind} document must be a mapping, got {_describe(obj)}")
        return None
    api_version = obj.get("apiVersion")
    if api_version == V1ALPHA2:
        # Everything else would differ too; one clear pointer beats a page of mismatches.
        c.add(
            "apiVersion",
            f"{V1ALPHA2} is not served; convert the file with `cloudhub devices convert`",
        )
        return None
    if api_version != API_VERSION:
        c.add("apiVersion", f"must be {API_VERSION}, got {_describe(api_version)}")
    if obj.get("kind") != kind:
        c.add("kind", f"must be {kind}, got {_describe(obj.get('kind'))}")
    meta = c.mapping(obj.get("metadata"), "metadata", required=True) or {}
    name = c.string(meta, "name", "metadata", required=True)
    if name and (len(name) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(name)):
        c.add(
            "metadata.name",
            f"{name!r} is not a valid object name (lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters)",
        )
    namespace = c.string(meta, "namespace", "metadata")
    if namespace and (len(namespace) > 63 or not _DNS_LABEL_RE.fullmatch(namespace)):
        c.add("metadata.namespace", f"{namespace!r} is not a valid namespace name")
    uid = c.string(meta, "uid", "metadata")
    generation = meta.get("generation", 0)
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        c.add("metadata.generation", f"must be a non-negative integer, got {_describe(generation)}")
        generation = 0
    return obj, namespace, name, uid, generation


def _duplicate(c: _Checker, raw: Any, path: str, seen: set[str]) -> bool:
    """Record a list entry's name; report and return True if an earlier entry had it."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    if not isinstance(name, str) or not name:
        return False
    if name in seen:
        c.add(_join(path, "name"), f"duplicate property name {name!r}")
        return True
    seen.add(name)
    return False


def _parse_type(c: _Checker, raw: Any, path: str) -> PropertyType | None:
    if raw is None:
        c.add(path, "required")
        return None
    if isinstance(raw, Mapping):
        c.add(
            path,
            "must be a type name such as INT or STRING; a mapping like `string: {accessMode: "
            "...}` is the v1alpha2 form: convert the file with `cloudhub devices convert`",
        )
        return None
    if isinstance(raw, str):
        for t in PropertyType:
            if raw in (t.value, t.kubeedge):
                return t
    allowed = ", ".join(t.kubeedge for t in PropertyType)
    c.add(path, f"must be one of {allowed} (or lower case), got {_describe(raw)}")
    return None


def _parse_bound(
    c: _Checker, obj: Mapping[str, Any], key: str, path: str, ptype: PropertyType | None
) -> int | float | None:
    if obj.get(key) is None:
        return None
    text = c.string(obj, key, path)
    if not text or ptype is None:
        return None
    where = _join(path, key)
    if not ptype.numeric:
        c.add(where, f"applies only to INT, FLOAT and DOUBLE properties, not {ptype.kubeedge}")
        return None
    if ptype is PropertyType.INT and len(text.strip().lstrip("+-").lstrip("0")) > 19:
        c.add(where, f"must be an integer that fits 64 bits, got {text[:40]!r}")
        return None
    try:
        bound: int | float = int(text) if ptype is PropertyType.INT else float(text)
    except ValueError:
        kind = "an integer" if ptype is PropertyType.INT else "a number"
        c.add(where, f"must be {kind}, got {text!r}")
        return None
    if isinstance(bound, float) and not math.isfinite(bound):
        c.add(where, f"must be finite, got {text!r}")
        return None
    return bound


def _parse_model_property(c: _Checker, raw: Any, path: str) -> ModelProperty | None:
    obj = c.mapping(raw, path, required=True)
    if obj is None:
        return None
    before = len(c.problems)
    name = c.string(obj, "name", path, required=True)
    if name and not _PROPERTY_NAME_RE.fullmatch(name):
        c.add(
            _join(path, "name"),
            f"{name!r} is not a valid property name (1-63 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit)",
        )
    ptype = _parse_type(c, obj.get("type"), _join(path, "type"))
    access_raw = obj.get("accessMode")
    access: AccessMode | None = None
    if access_raw is None:
        c.add(_join(path, "accessMode"), "required (ReadWrite or ReadOnly)")
    else:
        try:
            access = AccessMode(access_raw)
        except ValueError:
            c.add(
                _join(path, "accessMode"),
                f"must be ReadWrite or ReadOnly, got {_describe(access_raw)}",
            )
    minimum = _parse_bound(c, obj, "minimum", path, ptype)
    maximum = _parse_bound(c, obj, "maximum", path, ptype)
    if minimum is not None and maximum is not None and minimum > maximum:
        c.add(_join(path, "minimum"), f"{minimum} is greater than maximum {maximum}")
    description = c.string(obj, "description", path)
    unit = c.string(obj, "unit", path)
    if len(c.problems) != before or ptype is None or access is None:
        return None
    return ModelProperty(
        name=name,
        type=ptype,
        access_mode=access,
        description=description,
        unit=unit,
        minimum=minimum,
        maximum=maximum,
    )


def parse_device_model(obj: Any) -> DeviceModel:
    """Parse and check a ``DeviceModel`` document (a dict from YAML or the API).

    Args:
        obj: the document.

    Returns:
        The parsed model.

    Raises:
        InvalidDocument: with every problem found, each with its field path; a v1alpha2
            document is refused with a hint to convert it.
    """
    c = _Checker()
    header = _check_header(c, obj, "DeviceModel")
    if header is None:
        raise InvalidDocument(c.problems, kind="DeviceModel", name=_name_of(obj))
    doc, namespace, name, uid, generation = header
    spec = c.mapping(doc.get("spec"), "spec", required=True) or {}
    protocol = c.string(spec, "protocol", "spec")
    props: list[ModelProperty] = []
    seen: set[str] = set()
    for i, raw in enumerate(c.items(spec.get("properties"), "spec.properties", required=True)):
        path = f"spec.properties[{i}]"
        if _duplicate(c, raw, path, seen):
            continue
        prop = _parse_model_property(c, raw, path)
        if prop is not None:
            props.append(prop)
    if c.problems:
        raise InvalidDocument(c.problems, kind="DeviceModel", name=_qualified(namespace, name))
    return DeviceModel(
        namespace=namespace,
        name=name,
        properties=tuple(props),
        protocol=protocol,
        uid=uid,
        generation=generation,
    )


def _parse_device_property(c: _Checker, raw: Any, path: str) -> DeviceProperty | None:
    obj = c.mapping(raw, path, required=True)
    if obj is None:
        return None
    before = len(c.problems)
    name = c.string(obj, "name", path, required=True)
    desired: str | None = None
    desired_obj = c.mapping(obj.get("desired"), _join(path, "desired"))
    if desired_obj is not None:
        dpath = _join(path, "desired")
        if desired_obj.get("value") is None:
            c.add(_join(dpath, "value"), "required when desired is given")
        else:
            desired = c.string(desired_obj, "value", dpath)
        meta = c.mapping(desired_obj.get("metadata"), _join(dpath, "metadata"))
        for key, value in (meta or {}).items():
            if not isinstance(value, str):
                c.add(_join(dpath, f"metadata.{key}"), f"must be a string, got {_describe(value)}")
    visitors = c.mapping(obj.get("visitors"), _join(path, "visitors")) or {}
    if visitors:
        c.string(visitors, "protocolName", _join(path, "visitors"))
        c.mapping(visitors.get("configData"), _join(path, "visitors.configData"))
    collect = c.integer(obj, "collectCycle", path)
    report = c.integer(obj, "reportCycle", path)
    to_cloud = c.boolean(obj, "reportToCloud", path)
    push = c.mapping(obj.get("pushMethod"), _join(path, "pushMethod"))
    if len(c.problems) != before:
        return None
    return DeviceProperty(
        name=name,
        desired=desired,
        visitors=dict(visitors),
        collect_cycle=collect,
        report_cycle=report,
        report_to_cloud=to_cloud,
        push_method=dict(push) if push is not None else None,
    )


def _parse_method(c: _Checker, raw: Any, path: str) -> DeviceMethod | None:
    obj = c.mapping(raw, path, required=True)
    if obj is None:
        return None
    before = len(c.problems)
    name = c.string(obj, "name", path, required=True)
    description = c.string(obj, "description", path)
    names: list[str] = []
    for j, item in enumerate(c.items(obj.get("propertyNames"), _join(path, "propertyNames"))):
        if not isinstance(item, str) or not item:
            c.add(f"{path}.propertyNames[{j}]", f"must be a property name, got {_describe(item)}")
        else:
            names.append(item)
    if len(c.problems) != before:
        return None
    return DeviceMethod(name=name, description=description, property_names=tuple(names))


def parse_device(obj: Any) -> Device:
    """Parse and check a ``Device`` document (a dict from YAML or the API).

    Checks the document alone. Whether its properties exist in its model and whether
    its desired values fit them needs the model: see ``check_device_against_model`` and
    ``protocol.devices.values.check_desired``.

    Args:
        obj: the document.

    Returns:
        The parsed device.

    Raises:
        InvalidDocument: with every problem found, each with its field path.
    """
    c = _Checker()
    header = _check_header(c, obj, "Device")
    if header is None:
        raise InvalidDocument(c.problems, kind="Device", name=_name_of(obj))
    doc, namespace, name, uid, generation = header
    spec = c.mapping(doc.get("spec"), "spec", required=True) or {}
    ref = c.mapping(spec.get("deviceModelRef"), "spec.deviceModelRef", required=True)
    model_name = (
        c.string(ref, "name", "spec.deviceModelRef", required=True) if ref is not None else ""
    )
    node_name = c.string(spec, "nodeName", "spec")
    if node_name and (len(node_name) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(node_name)):
        c.add("spec.nodeName", f"{node_name!r} is not a valid node name")
    protocol = c.mapping(spec.get("protocol"), "spec.protocol") or {}
    protocol_name = c.string(protocol, "protocolName", "spec.protocol") if protocol else ""
    config = c.mapping(protocol.get("configData"), "spec.protocol.configData")
    props: list[DeviceProperty] = []
    seen: set[str] = set()
    for i, raw in enumerate(c.items(spec.get("properties"), "spec.properties")):
        path = f"spec.properties[{i}]"
        if _duplicate(c, raw, path, seen):
            continue
        prop = _parse_device_property(c, raw, path)
        if prop is not None:
            props.append(prop)
    methods: list[DeviceMethod] = []
    for i, raw in enumerate(c.items(spec.get("methods"), "spec.methods")):
        method = _parse_method(c, raw, f"spec.methods[{i}]")
        if method is not None:
            methods.append(method)
    status = c.mapping(doc.get("status"), "status") or {}
    if c.problems:
        raise InvalidDocument(c.problems, kind="Device", name=_qualified(namespace, name))
    return Device(
        namespace=namespace,
        name=name,
        model_name=model_name,
        node_name=node_name,
        protocol_name=protocol_name,
        protocol_config=dict(config) if config is not None else None,
        properties=tuple(props),
        methods=tuple(methods),
        uid=uid,
        generation=generation,
        status=dict(status),
    )


def parse_document(obj: Any) -> DeviceModel | Device:
    """Parse a DeviceModel or a Device, chosen by its ``kind``.

    Raises:
        InvalidDocument: the kind is neither, or the document breaks its schema.
    """
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if kind == "DeviceModel":
        return parse_device_model(obj)
    if kind == "Device":
        return parse_device(obj)
    raise InvalidDocument(
        [Problem("kind", f"must be DeviceModel or Device, got {_describe(kind)}")]
    )


def check_device_against_model(device: Device, model: DeviceModel) -> list[Problem]:
    """Problems with a Device's structure given its model (not its desired values).

    A Device may only list properties its model defines, and its methods may only name
    the Device's properties (as KubeEdge's device controller requires).

    Returns:
        The problems, empty when the device fits. Desired values are checked separately
        because an invalid one is shown as a rejection in the Device status, not refused.
    """
    problems: list[Problem] = []
    if model.name != device.model_name:
        problems.append(
            Problem(
                "spec.deviceModelRef.name",
                f"refers to {device.model_name!r}, checked against model {model.name!r}",
            )
        )
    for i, prop in enumerate(device.properties):
        if model.property(prop.name) is None:
            problems.append(
                Problem(
                    f"spec.properties[{i}].name",
                    f"property {prop.name!r} is not defined in DeviceModel "
                    f"{_qualified(model.namespace, model.name)}",
                )
            )
    names = {p.name for p in device.properties} | {p.name for p in model.properties}
    for i, method in enumerate(device.methods):
        for j, pname in enumerate(method.property_names):
            if pname not in names:
                problems.append(
                    Problem(
                        f"spec.methods[{i}].propertyNames[{j}]",
                        f"names {pname!r}, which is neither a device nor a model property",
                    )
                )
    return problems


def _name_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return ""
    ns, name = meta.get("namespace"), meta.get("name")
    return _qualified(ns if isinstance(ns, str) else "", name if isinstance(name, str) else "")


def _qualified(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name
