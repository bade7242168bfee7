"""Hub side of device twins: manifests, v1alpha2 conversion, CLI, twin status rules.

The device model and value rules themselves are shared with the agent and live in
``protocol.devices``; they are re-exported here for the hub's convenience.
"""

from cloudhub.devices.convert import Conversion, Note, convert_document
from cloudhub.devices.errors import ConversionError, DevicesError, ManifestError
from cloudhub.devices.manifests import LoadedDocument, load_file, load_text
from cloudhub.devices.twin import (
    DesiredEvaluation,
    Rejection,
    StatusMerge,
    evaluate_desired,
    merge_reported,
    status_with_rejections,
)
from protocol.devices import (
    DesiredState,
    Device,
    DeviceModel,
    InvalidDocument,
    InvalidValue,
    ReportedValue,
    parse_device,
    parse_device_model,
)

__all__ = [
    "Conversion",
    "ConversionError",
    "DesiredEvaluation",
    "DesiredState",
    "Device",
    "DeviceModel",
    "DevicesError",
    "InvalidDocument",
    "InvalidValue",
    "LoadedDocument",
    "ManifestError",
    "Note",
    "Rejection",
    "ReportedValue",
    "StatusMerge",
    "convert_document",
    "evaluate_desired",
    "load_file",
    "load_text",
    "merge_reported",
    "parse_device",
    "parse_device_model",
    "status_with_rejections",
]
