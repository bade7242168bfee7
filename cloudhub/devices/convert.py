"""Convert ``devices.kubeedge.io/v1alpha2`` DeviceModel and Device documents to v1beta1.

We serve v1beta1 only (docs/devices.md); older documents go through this converter
(``cloudhub devices convert``). What v1beta1 cannot say is not guessed: it is left out and
reported as a ``Note`` naming the v1alpha2 field and what to do instead.

Mapping (v1alpha2 -> v1beta1), following the two KubeEdge API versions:

DeviceModel
  ``properties[].type.<t>.accessMode``  -> ``properties[].accessMode``
  ``properties[].type.<t>``             -> ``properties[].type: <T>`` (upper case)
  ``properties[].type.<t>.minimum/maximum/unit`` -> same names, bounds as strings
  ``properties[].type.<t>.defaultValue`` -> not converted (v1beta1 models have no defaults)
  ``propertyVisitors``                  -> not converted (visitors live on each Device)

Device
  ``nodeSelector`` with one ``In`` term naming one node -> ``nodeName``
  ``protocol.<modbus|opcua|bluetooth>`` -> ``protocol: {protocolName: <key>, configData}``
  ``protocol.customizedProtocol``       -> ``protocol: {protocolName, configData}``
  ``protocol.common``                   -> ``protocol.configData.common``
  ``propertyVisitors[]``                -> ``properties[]`` (name, cycles, ``visitors``)
  ``status.twins[].desired``            -> ``spec.properties[].desired`` (desired is spec now)
  ``status.twins[].reported``           -> ``status.twins[].reported``
  ``data``                              -> not converted (v1beta1 uses ``pushMethod``)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.devices.errors import ConversionError
from protocol.devices import (
    API_VERSION,
    GROUP,
    V1ALPHA2,
    parse_device,
    parse_device_model,
)

_V1ALPHA2_TYPES = ("int", "string", "double", "float", "boolean", "bytes")
_BUILTIN_PROTOCOLS = ("modbus", "opcua", "bluetooth")
_KEPT_METADATA = ("name", "namespace", "labels", "annotations")


@dataclass(frozen=True, slots=True)
class Note:
    """Something the converter left out or changed.

    Attributes:
        path: the v1alpha2 field, e.g. ``spec.properties[0].type.string.defaultValue``.
        message: what happened and what to do instead.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class Conversion:
    """The result of converting one document.

    Attributes:
        document: the v1beta1 document (a new dict).
        notes: what was not converted or was changed, in document order.
        converted: False when the input was already v1beta1 (returned as is).
    """

    document: dict[str, Any]
    notes: tuple[Note, ...]
    converted: bool


class _Notes(list[Note]):
    def add(self, path: str, message: str) -> None:
        self.append(Note(path, message))


def convert_document(doc: Any) -> Conversion:
    """Convert one DeviceModel or Device document to ``devices.kubeedge.io/v1beta1``.

    Args:
        doc: the parsed YAML document.

    Returns:
        The converted document and notes. A v1beta1 document is returned unchanged
        (``converted=False``) once it passes the v1beta1 checks.

    Raises:
        ConversionError: the document is not a devices.kubeedge.io DeviceModel or Device,
            has another apiVersion, or its v1alpha2 structure cannot be read.
        InvalidDocument: the result (or the v1beta1 input) breaks the v1beta1 schema.
    """
    if not isinstance(doc, Mapping):
        raise ConversionError(f"not a Kubernetes object: the document is {type(doc).__name__}")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not (isinstance(api_version, str) and api_version.startswith(GROUP + "/")):
        raise ConversionError(
            f"not a device document: {kind or 'an object with no kind'} in "
            f"{api_version or 'no apiVersion'} (only {GROUP} DeviceModel and Device convert)"
        )
    if kind not in ("DeviceModel", "Device"):
        raise ConversionError(f"{api_version} kind {kind!r} is neither DeviceModel nor Device")
    if api_version == API_VERSION:
        _check(kind, doc)
        return Conversion(dict(doc), (), converted=False)
    if api_version != V1ALPHA2:
        raise ConversionError(f"apiVersion {api_version} is not convertible (only {V1ALPHA2})")
    notes = _Notes()
    out = _model(doc, notes) if kind == "DeviceModel" else _device(doc, notes)
    _check(kind, out)
    return Conversion(out, tuple(notes), converted=True)


def _check(kind: str, doc: Mapping[str, Any]) -> None:
    if kind == "DeviceModel":
        parse_device_model(doc)
    else:
        parse_device(doc)


def _need_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConversionError(f"{path}: must be a mapping in {V1ALPHA2}")
    return value


def _need_list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConversionError(f"{path}: must be a list in {V1ALPHA2}")
    return value


def _metadata(doc: Mapping[str, Any], notes: _Notes) -> dict[str, Any]:
    meta = _need_mapping(doc.get("metadata"), "metadata")
    dropped = sorted(k for k in meta if k not in _KEPT_METADATA)
    if dropped:
        notes.add(
            "metadata", f"dropped {', '.join(dropped)} (set by the API server, not by manifests)"
        )
    return {k: meta[k] for k in _KEPT_METADATA if k in meta}


def _model(doc: Mapping[str, Any], notes: _Notes) -> dict[str, Any]:
    spec = _need_mapping(doc.get("spec"), "spec")
    props: list[dict[str, Any]] = []
    for i, raw in enumerate(_need_list(spec.get("properties"), "spec.properties")):
        path = f"spec.properties[{i}]"
        prop = _need_mapping(raw, path)
        out: dict[str, Any] = {"name": prop.get("name")}
        if prop.get("description") is not None:
            out["description"] = prop["description"]
        type_block = _need_mapping(prop.get("type"), f"{path}.type")
        keys = [k for k in type_block if k in _V1ALPHA2_TYPES]
        if len(keys) != 1:
            raise ConversionError(
                f"{path}.type: must hold exactly one of {', '.join(_V1ALPHA2_TYPES)}, "
                f"got {sorted(type_block) or 'nothing'}"
            )
        tname = keys[0]
        tpath = f"{path}.type.{tname}"
        body = _need_mapping(type_block[tname], tpath)
        out["type"] = tname.upper()
        access = body.get("accessMode")
        if access is None:
            out["accessMode"] = "ReadOnly"
            notes.add(
                f"{tpath}.accessMode",
                "missing; set to ReadOnly (change it to ReadWrite if the cloud sets this property)",
            )
        else:
            out["accessMode"] = access
        for bound in ("minimum", "maximum"):
            if body.get(bound) is not None:
                out[bound] = str(body[bound])
        if body.get("unit") is not None:
            out["unit"] = body["unit"]
        if "defaultValue" in body:
            notes.add(
                f"{tpath}.defaultValue",
                f"{body['defaultValue']!r} not converted: v1beta1 models have no default value; "
                "set it as spec.properties[].desired.value on each Device",
            )
        for key in sorted(set(body) - {"accessMode", "minimum", "maximum", "unit", "defaultValue"}):
            notes.add(f"{tpath}.{key}", "not converted: no such field in v1beta1")
        props.append(out)
    if "propertyVisitors" in spec:
        notes.add(
            "spec.propertyVisitors",
            "not converted: v1beta1 models carry no visitors; put each one on the Devices "
            "using this model, as spec.properties[].visitors",
        )
    for key in sorted(set(spec) - {"properties", "propertyVisitors"}):
        notes.add(f"spec.{key}", "not converted: no such field in a v1beta1 DeviceModel")
    notes.add(
        "spec.protocol",
        "not set: v1alpha2 models name no protocol; add the protocol name your mapper serves",
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceModel",
        "metadata": _metadata(doc, notes),
        "spec": {"properties": props},
    }


def _node_name(selector: Mapping[str, Any], notes: _Notes) -> str | None:
    terms = _need_list(selector.get("nodeSelectorTerms"), "spec.nodeSelector.nodeSelectorTerms")
    exprs = []
    if len(terms) == 1:
        term = _need_mapping(terms[0], "spec.nodeSelector.nodeSelectorTerms[0]")
        if not term.get("matchFields"):
            exprs = _need_list(term.get("matchExpressions"), "matchExpressions")
    if len(exprs) == 1:
        expr = _need_mapping(exprs[0], "matchExpressions[0]")
        values = expr.get("values") or []
        if (
            expr.get("key") in ("", "kubernetes.io/hostname")
            and expr.get("operator") == "In"
            and isinstance(values, list)
            and len(values) == 1
            and isinstance(values[0], str)
        ):
            return values[0]
    notes.add(
        "spec.nodeSelector",
        "not converted: v1beta1 binds a device to exactly one node (spec.nodeName); only a "
        "selector with one term matching one node name converts; set spec.nodeName",
    )
    return None


def _protocol(raw: Any, notes: _Notes) -> dict[str, Any] | None:
    proto = _need_mapping(raw, "spec.protocol")
    if not proto:
        return None
    present = [k for k in (*_BUILTIN_PROTOCOLS, "customizedProtocol") if proto.get(k) is not None]
    out: dict[str, Any] = {}
    if present:
        if len(present) > 1:
            notes.add(
                "spec.protocol",
                f"names several protocols ({', '.join(present)}); kept {present[0]} only",
            )
        key = present[0]
        body = _need_mapping(proto[key], f"spec.protocol.{key}")
        if key == "customizedProtocol":
            out["protocolName"] = body.get("protocolName", "")
            config = dict(_need_mapping(body.get("configData"), "configData"))
        else:
            out["protocolName"] = key
            config = dict(body)
    else:
        config = {}
    if proto.get("common") is not None:
        config["common"] = proto["common"]
        notes.add(
            "spec.protocol.common",
            "moved to spec.protocol.configData.common (opaque to EdgeFleet; the mapper reads it)",
        )
    if config:
        out["configData"] = config
    return out or None


def _visitor(raw: Any, path: str, notes: _Notes) -> dict[str, Any]:
    visitor = _need_mapping(raw, path)
    name = visitor.get("propertyName")
    out: dict[str, Any] = {"name": name}
    for cycle in ("collectCycle", "reportCycle"):
        if visitor.get(cycle) is not None:
            out[cycle] = visitor[cycle]
    config: dict[str, Any] = {}
    protocol_name = ""
    for key in (*_BUILTIN_PROTOCOLS, "customizedProtocol"):
        if visitor.get(key) is None:
            continue
        body = _need_mapping(visitor[key], f"{path}.{key}")
        if key == "customizedProtocol":
            protocol_name = body.get("protocolName", "")
            config.update(_need_mapping(body.get("configData"), f"{path}.{key}.configData"))
        else:
            protocol_name = key
            config.update(body)
    if visitor.get("customizedValues") is not None:
        config["customizedValues"] = visitor["customizedValues"]
    if protocol_name or config:
        out["visitors"] = {"protocolName": protocol_name, "configData": config}
    known = {"propertyName", "collectCycle", "reportCycle", "customizedValues"}
    for key in sorted(set(visitor) - known - {*_BUILTIN_PROTOCOLS, "customizedProtocol"}):
        notes.add(f"{path}.{key}", "not converted: no such field in v1beta1")
    return out


def _device(doc: Mapping[str, Any], notes: _Notes) -> dict[str, Any]:
    spec = _need_mapping(doc.get("spec"), "spec")
    out_spec: dict[str, Any] = {}
    ref = _need_mapping(spec.get("deviceModelRef"), "spec.deviceModelRef")
    out_spec["deviceModelRef"] = {"name": ref.get("name")}
    if spec.get("nodeSelector") is not None:
        node = _node_name(_need_mapping(spec["nodeSelector"], "spec.nodeSelector"), notes)
        if node is not None:
            out_spec["nodeName"] = node
    protocol = _protocol(spec.get("protocol"), notes)
    if protocol is not None:
        out_spec["protocol"] = protocol
    props: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(_need_list(spec.get("propertyVisitors"), "spec.propertyVisitors")):
        prop = _visitor(raw, f"spec.propertyVisitors[{i}]", notes)
        props.append(prop)
        by_name[str(prop["name"])] = prop
    if spec.get("data") is not None:
        notes.add(
            "spec.data",
            "not converted: v1beta1 has no data section; use spec.properties[].pushMethod",
        )
    for key in sorted(set(spec) - {"deviceModelRef", "nodeSelector", "protocol",
                                   "propertyVisitors", "data"}):  # fmt: skip
        notes.add(f"spec.{key}", "not converted: no such field in a v1beta1 Device")

    status = _need_mapping(doc.get("status"), "status")
    twins_out: list[dict[str, Any]] = []
    for i, raw in enumerate(_need_list(status.get("twins"), "status.twins")):
        path = f"status.twins[{i}]"
        twin = _need_mapping(raw, path)
        name = twin.get("propertyName")
        desired = _need_mapping(twin.get("desired"), f"{path}.desired")
        if desired.get("value") is not None:
            value = desired["value"]
            if not isinstance(value, str):
                notes.add(f"{path}.desired.value", f"{value!r} written as the string {value!s}")
                value = str(value)
            prop = by_name.get(str(name))
            if prop is None:
                prop = {"name": name}
                props.append(prop)
                by_name[str(name)] = prop
            prop["desired"] = {"value": value}
        reported = _need_mapping(twin.get("reported"), f"{path}.reported")
        if reported.get("value") is not None:
            twins_out.append({"propertyName": name, "reported": dict(reported)})
    if props:
        out_spec["properties"] = props
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Device",
        "metadata": _metadata(doc, notes),
        "spec": out_spec,
    }
    if twins_out:
        out["status"] = {"twins": twins_out}
    return out
