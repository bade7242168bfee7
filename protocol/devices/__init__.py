"""Device twins shared by hub and agent: the v1beta1 device model, value rules, twin payloads.

Pure code (no I/O, no clock). See docs/devices.md for the decisions behind it.
"""

from protocol.devices.errors import DeviceError, InvalidDocument, InvalidValue, Problem
from protocol.devices.model import (
    API_VERSION,
    GROUP,
    V1ALPHA2,
    AccessMode,
    Device,
    DeviceMethod,
    DeviceModel,
    DeviceProperty,
    ModelProperty,
    PropertyType,
    check_device_against_model,
    parse_device,
    parse_device_model,
    parse_document,
)
from protocol.devices.twin import DesiredState, ReportedValue
from protocol.devices.values import (
    MAX_TEXT_BYTES,
    Reason,
    Value,
    check_desired,
    check_reported,
    coerce,
    parse_text,
    to_json,
    to_text,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "MAX_TEXT_BYTES",
    "V1ALPHA2",
    "AccessMode",
    "DesiredState",
    "Device",
    "DeviceError",
    "DeviceMethod",
    "DeviceModel",
    "DeviceProperty",
    "InvalidDocument",
    "InvalidValue",
    "ModelProperty",
    "Problem",
    "PropertyType",
    "Reason",
    "ReportedValue",
    "Value",
    "check_desired",
    "check_device_against_model",
    "check_reported",
    "coerce",
    "parse_device",
    "parse_device_model",
    "parse_document",
    "parse_text",
    "to_json",
    "to_text",
]
