"""``cloudhub devices``: convert and validate KubeEdge device manifests.

Attached to the hub's command line in ``cloudhub/__main__.py`` (``cloudhub devices ...``).

- ``cloudhub devices convert FILE...`` prints the v1beta1 form of every DeviceModel and
  Device in the files on stdout (YAML, ``---``-separated) and, on stderr, what it could
  not convert. A file that is not valid YAML or has a duplicate key is refused whole, with
  the file, line and problem; a document that is not a device document is refused.
- ``cloudhub devices validate FILE...`` checks v1beta1 documents: the schema, each
  Device against its DeviceModel when that model is among the files, and desired values.

Exit status: 0 when everything converted/validated (notes allowed unless ``--strict``),
1 when anything was refused, 2 for usage errors (click).
"""

from __future__ import annotations

from typing import Any

import click
import yaml

from cloudhub.devices.convert import convert_document
from cloudhub.devices.errors import ConversionError, ManifestError
from cloudhub.devices.manifests import LoadedDocument, load_file
from cloudhub.devices.twin import evaluate_desired
from protocol.devices import (
    Device,
    DeviceModel,
    InvalidDocument,
    check_device_against_model,
    parse_document,
)


def _label(doc: LoadedDocument) -> str:
    content = doc.content if isinstance(doc.content, dict) else {}
    meta = content.get("metadata") if isinstance(content.get("metadata"), dict) else {}
    kind = content.get("kind") or "object"
    name = meta.get("name") or "?"
    if meta.get("namespace"):
        name = f"{meta['namespace']}/{name}"
    return f"{doc.path}:{doc.line}: {kind} {name}"


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True)


@click.group("devices")
def devices() -> None:
    """KubeEdge device manifests: convert v1alpha2 to v1beta1, validate v1beta1.

    The hub serves devices.kubeedge.io/v1beta1 DeviceModels and Devices only (docs/devices.md).
    Older v1alpha2 files, as most KubeEdge examples still are, convert first:

    \b
      cloudhub devices convert model.yaml device.yaml > v1beta1.yaml
      cloudhub devices validate v1beta1.yaml
      kubectl apply -f v1beta1.yaml

    Both read every YAML document of every FILE strictly (a syntax error or a duplicate key
    refuses the whole file, naming file, line and column). Messages go to standard error as
    "error: FILE:LINE: Kind name: problem" (the document was refused) or "note: ..." (it
    was converted, but a field was not). Exit status: 0 when every document converted or
    validated, 1 when any was refused (with --strict, also when a note was printed), 2 for
    a usage error.
    """


@devices.command("convert", short_help="Print the v1beta1 form of v1alpha2 device files.")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--strict", is_flag=True, help="Exit 1 when any field could not be converted (a note)."
)
def convert_command(files: tuple[str, ...], strict: bool) -> None:
    """Print the devices.kubeedge.io/v1beta1 form of the DeviceModels and Devices in FILES.

    The converted documents go to standard output, "---"-separated, ready for
    "cloudhub devices validate" and "kubectl apply -f -"; v1beta1 documents pass through
    unchanged. What v1beta1 cannot hold (model default values and property visitors, device
    node selectors other than one node, device data) is named on standard error with what to
    do instead.

    \b
    Example:
      cloudhub devices convert counter-model.yaml counter-instance.yaml > counter.yaml
    """
    failed = False
    out: list[str] = []
    for path in files:
        try:
            docs = load_file(path)
        except ManifestError as exc:
            click.echo(f"error: {exc}", err=True)
            failed = True
            continue
        if not docs:
            click.echo(f"error: {path}: no YAML documents", err=True)
            failed = True
        for doc in docs:
            label = _label(doc)
            try:
                result = convert_document(doc.content)
            except ConversionError as exc:
                click.echo(f"error: {label}: {exc}", err=True)
                failed = True
                continue
            except InvalidDocument as exc:
                for problem in exc.problems:
                    click.echo(f"error: {label}: {problem}", err=True)
                failed = True
                continue
            if not result.converted:
                click.echo(f"note: {label}: already v1beta1, printed unchanged", err=True)
            for note in result.notes:
                click.echo(f"note: {label}: {note}", err=True)
            if result.notes and strict:
                failed = True
            out.append(_dump(result.document))
    if out:
        click.echo("---\n" + "---\n".join(out), nl=False)
    if failed:
        raise SystemExit(1)


@devices.command("validate", short_help="Check v1beta1 device files before applying them.")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate_command(files: tuple[str, ...]) -> None:
    """Check the v1beta1 DeviceModels and Devices in FILES before applying them.

    Each document against the v1beta1 schema; each Device against its DeviceModel when the
    model is among the FILES (property names, types, access modes), and its desired values
    against the model's types and bounds, as the hub will judge them. A Device whose model is
    not among the FILES gets a note and is checked on its own. Prints "ok: FILE:LINE: Kind
    name" for each valid document on standard output.

    \b
    Example:
      cloudhub devices validate thermostat-model.yaml thermostat.yaml
    """
    failed = False
    models: dict[tuple[str, str], DeviceModel] = {}
    parsed_devices: list[tuple[str, Device]] = []
    for path in files:
        try:
            docs = load_file(path)
        except ManifestError as exc:
            click.echo(f"error: {exc}", err=True)
            failed = True
            continue
        if not docs:  # nothing checked is not a pass
            click.echo(f"error: {path}: no YAML documents", err=True)
            failed = True
        for doc in docs:
            label = _label(doc)
            try:
                obj = parse_document(doc.content)
            except InvalidDocument as exc:
                for problem in exc.problems:
                    click.echo(f"error: {label}: {problem}", err=True)
                failed = True
                continue
            if isinstance(obj, DeviceModel):
                models[(obj.namespace or "default", obj.name)] = obj
            else:
                parsed_devices.append((label, obj))
            click.echo(f"ok: {label}")
    for label, device in parsed_devices:
        model = models.get((device.namespace or "default", device.model_name))
        if model is None:
            click.echo(f"note: {label}: model {device.model_name!r} not among the files", err=True)
            continue
        for problem in check_device_against_model(device, model):
            click.echo(f"error: {label}: {problem}", err=True)
            failed = True
        for rejection in evaluate_desired(device, model).rejections:
            click.echo(f"error: {label}: desired value rejected: {rejection.message}", err=True)
            failed = True
    if failed:
        raise SystemExit(1)
