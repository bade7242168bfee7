"""Device twins as a hub extension: ``Hub(settings, extensions=[devices_extension(s.devices)])``.

At install (after the hub's API client exists, before it serves edges) it:

1. on the embedded API, installs the Device and DeviceModel CRDs if absent (on a cluster
   they come from ``deploy/crds``; if they are not there, twins are switched off with an
   ERROR line naming the fix, and the rest of the hub runs);
2. adds two shared informers: Devices indexed by ``spec.nodeName`` and by model, and
   DeviceModels;
3. adds the ``devices`` object source: a node is sent its Devices and the DeviceModels they
   reference like pods (``object_upsert``/``object_delete``, level-based, and the Node
   authorizer's rule: a node is sent, and may name, only its own Devices);
4. on a Device whose spec (``metadata.generation``) or node changed, and on every Device of
   a DeviceModel that appeared or changed: ``twin_desired`` to the node if connected,
   queued right behind the ``object_upsert`` that carries the new object; on every
   (re)connect, after the object diff (``registry.on_synced``): ``twin_desired`` for every
   Device of the node (the edge keeps only newer versions: the version grows with the
   Device's generation and its model's resourceVersion, ``desired_version``). Nothing is
   sent for a Device whose model does not exist (yet): level-based, its desired state goes
   once the model comes, however late (a directory applied in alphabetical order creates
   Devices before their models);
5. keeps ``status.twins[].rejectedDesired`` and the ``ModelAvailable`` condition
   (:mod:`cloudhub.devices.conditions`) right whenever a Device or its model changes;
6. handles ``twin_reported``: authorized, checked against the model (a bad one is
   refused with ``INVALID_MESSAGE`` naming the problem), then merged into the Device
   status by :class:`~cloudhub.devices.status.DeviceStatusWriter` (coalesced per Device,
   409 re-read and merged again); the message is acknowledged only once the status is
   written (``inbound.done()``), so an API outage or a hub crash loses no report.

What a node is sent of a Device is its *edge view*: the object without ``status`` and
``managedFields``, whose ``resourceVersion`` is the one at which that view last changed.
Reported values written to the status bump the Device's resourceVersion; without the
edge view every report would come back down to its node as an ``object_upsert``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import pathlib
import time
from typing import TYPE_CHECKING

import yaml

from cloudhub.bridge.authz import Decision
from cloudhub.bridge.objects import object_uid
from cloudhub.devices.conditions import ModelLookup, model_condition, with_condition
from cloudhub.devices.settings import DevicesSettings
from cloudhub.devices.status import DeviceStatusWriter
from cloudhub.devices.twin import (
    DesiredEvaluation,
    evaluate_desired,
    model_revision,
    status_with_rejections,
)
from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import CRDS, DEVICEMODELS, DEVICES, Informer, TokenBucket, retrying, strip_object
from protocol.devices import (
    Device,
    DeviceModel,
    InvalidDocument,
    InvalidValue,
    ReportedValue,
    check_reported,
    parse_device,
    parse_device_model,
)
from protocol.errors import ErrorCode, InvalidMessage
from protocol.messages import ObjectRef, TwinDesired, TwinReported

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Inbound
    from cloudhub.bridge.session import NodeSession
    from cloudhub.hub import Hub

__all__ = ["CRD_DIR", "DevicesExtension", "devices_extension"]

log = logging.getLogger(__name__)

CRD_DIR = pathlib.Path(__file__).parent
"""Where the Device and DeviceModel CRDs are packaged (``devices.kubeedge.io_*.yaml``, the
same files as ``deploy/crds/``; next to this module so that the wheel's package data
carries them)."""

CRD_SERVED_TIMEOUT = 30.0
"""Seconds to wait for freshly installed CRDs to be served by the embedded API."""


def _node_of(obj: dict) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if isinstance(node, str) and node else []


def _model_of(obj: dict) -> list[str]:
    ref = (obj.get("spec") or {}).get("deviceModelRef") or {}
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or not name:
        return []
    return [f"{(obj.get('metadata') or {}).get('namespace') or ''}/{name}"]


def _generation(obj: dict | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("generation") or 0)


def edge_view(obj: dict, resource_version: str) -> dict:
    """What a node is sent of a Device or DeviceModel: no ``status``, no ``managedFields``,
    and ``resource_version`` as ``metadata.resourceVersion``."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("managedFields",)}
    meta["resourceVersion"] = resource_version
    out = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    out["metadata"] = meta
    return out


class DevicesExtension:
    """Installs device twins into a hub (see the module docstring).

    Attributes:
        enabled: False when switched off (setting, or CRDs missing on a cluster).
        devices / models: the informers, once installed.
        writer: the status writer, once installed.
    """

    def __init__(self, settings: DevicesSettings) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.devices: Informer | None = None
        self.models: Informer | None = None
        self.writer: DeviceStatusWriter | None = None
        self._hub: Hub | None = None
        self._views: dict[str, dict] = {}  # uid -> edge view
        self._parsed: dict[tuple[str, str], tuple[str, ModelLookup]] = {}

    async def __call__(self, hub: Hub) -> None:
        if not self.enabled:
            log.info("device twins are off (devices.enabled)")
            return
        assert hub.kube is not None
        self._hub = hub
        if hub.settings.kube.mode == "embedded":
            await self._install_crds(hub)
        elif not await self._served(hub):
            self.enabled = False
            log.error(
                "device twins are off: the API does not serve devices.kubeedge.io/v1beta1 "
                "Devices and DeviceModels; apply deploy/crds/ and restart the hub"
            )
            return
        s = self.settings
        self.devices = hub.add_informer(
            DEVICES,
            indexers={"node": _node_of, "model": _model_of},
            transform=strip_object,
        )
        self.models = hub.add_informer(DEVICEMODELS, transform=strip_object)
        self.writer = DeviceStatusWriter(
            hub.kube,
            self.devices,
            self.model_lookup,
            TokenBucket(s.qps, s.burst),
            workers=s.workers,
            retry_cap=s.retry_cap,
            on_refused=self._status_refused,
        )
        devices, models = self.devices, self.models
        hub.objects.add_source("devices", self.objects_of)
        hub.objects.add_kind("Device", lambda ns, name: devices.get(name, ns))
        hub.objects.add_kind("DeviceModel", lambda ns, name: models.get(name, ns))
        models.add_handler(self._on_model)
        devices.add_handler(self._on_device)
        hub.registry.on_synced.append(self._on_synced)
        hub.dispatcher.register(TwinReported, self._on_reported)
        hub.add_task(self.writer.run(), name="device-status")

    # -- CRDs -------------------------------------------------------------------------------

    async def _install_crds(self, hub: Hub) -> None:
        kube = hub.kube
        assert kube is not None
        for path in sorted(CRD_DIR.glob("devices.kubeedge.io_*.yaml")):
            crd = yaml.safe_load(path.read_text())
            try:
                # rbac: embedded API only (a cluster gets the CRDs from deploy/crds)
                await retrying(lambda c=crd: kube.create(CRDS, c), what="create CRD")
                log.info("installed CRD %s", crd["metadata"]["name"])
            except KubeConflict:
                pass  # AlreadyExists
        deadline = time.monotonic() + CRD_SERVED_TIMEOUT
        while not await self._served(hub):
            if time.monotonic() > deadline:
                raise KubeNotFound(404, "NotFound", "the device CRDs are not served")
            await asyncio.sleep(0.1)

    @staticmethod
    async def _served(hub: Hub) -> bool:
        kube = hub.kube
        assert kube is not None
        try:
            await retrying(lambda: kube.list(DEVICES, limit=1), what="list Devices")
            await retrying(lambda: kube.list(DEVICEMODELS, limit=1), what="list DeviceModels")
        except KubeNotFound:
            return False
        return True

    # -- what nodes hold --------------------------------------------------------------------

    def model_for(self, namespace: str, name: str) -> DeviceModel | None:
        """The parsed DeviceModel ``namespace/name``, or ``None`` (absent or invalid)."""
        return self.model_lookup(namespace, name).model

    def model_lookup(self, namespace: str, name: str) -> ModelLookup:
        """What the hub has of DeviceModel ``namespace/name`` (parsed once per
        resourceVersion)."""
        assert self.models is not None
        obj = self.models.get(name, namespace)
        if obj is None:
            return ModelLookup(None)
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._parsed.get((namespace, name))
        if cached is not None and cached[0] == rv:
            return cached[1]
        try:
            found = ModelLookup(parse_device_model(obj), model_revision(obj), exists=True)
        except InvalidDocument as exc:
            log.warning("DeviceModel %s/%s is not usable: %s", namespace, name, exc)
            found = ModelLookup(None, exists=True, problem=str(exc))
        self._parsed[(namespace, name)] = (rv, found)
        return found

    def _evaluate(self, device: Device) -> tuple[DesiredEvaluation, ModelLookup]:
        found = self.model_lookup(device.namespace, device.model_name)
        evaluation = evaluate_desired(device, found.model, model_revision=found.revision)
        return evaluation, found

    def _status_due(
        self, device: Device, evaluation: DesiredEvaluation, found: ModelLookup
    ) -> bool:
        """Whether the rejections or the ModelAvailable condition shown are out of date."""
        if status_with_rejections(device, evaluation).changed:
            return True
        return with_condition(device.status, model_condition(device, found), time.time())[1]

    def objects_of(self, node: str) -> list[dict]:
        """The object source: the node's Devices' models, then its Devices (edge views)."""
        assert self.devices is not None and self.models is not None
        devices = sorted(
            self.devices.by_index("node", node),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        out: list[dict] = []
        seen: set[str] = set()
        for obj in devices:
            for key in _model_of(obj):
                namespace, _, name = key.partition("/")
                model = self.models.get(name, namespace)
                uid = object_uid(model) if model is not None else ""
                if uid and uid not in seen:
                    seen.add(uid)
                    out.append(self._views.get(uid) or model)  # type: ignore[arg-type]
        for obj in devices:
            out.append(self._views.get(object_uid(obj)) or obj)
        return out

    def _update_view(self, obj: dict) -> bool:
        """Record the edge view of ``obj``; return whether it differs from the one sent."""
        uid = object_uid(obj)
        previous = self._views.get(uid)
        if previous is not None:
            same = edge_view(obj, previous["metadata"]["resourceVersion"])
            if same == previous:
                return False
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        self._views[uid] = edge_view(obj, rv)
        return True

    # -- informer events --------------------------------------------------------------------

    def _on_device(self, event: str, obj: dict, old: dict | None) -> None:
        hub = self._hub
        assert hub is not None
        uid = object_uid(obj)
        nodes = set(_node_of(obj)) | (set(_node_of(old)) if old is not None else set())
        if old is not None and object_uid(old) != uid:
            self._views.pop(object_uid(old), None)
        if event == "DELETED":
            self._views.pop(uid, None)
            hub.objects.changed(nodes)
            return
        moved = old is None or object_uid(old) != uid or _node_of(old) != _node_of(obj)
        if self._update_view(obj) or moved:
            hub.objects.changed(nodes)  # the object_upsert is queued first ...
        try:
            device = parse_device(obj)
        except InvalidDocument as exc:
            log.warning("Device is not served: %s", exc)
            return
        evaluation, found = self._evaluate(device)
        spec_changed = moved or _generation(old) != device.generation
        if device.node_name and spec_changed and found.model is not None:
            self._send_desired(device.node_name, device, evaluation)  # ... then this
        if self._status_due(device, evaluation, found):
            assert self.writer is not None
            self.writer.submit_rejections(device.namespace, device.name)

    def _on_model(self, event: str, obj: dict, old: dict | None) -> None:
        hub = self._hub
        assert hub is not None and self.devices is not None
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        self._parsed.pop((namespace, name), None)
        if event == "DELETED":
            self._views.pop(object_uid(obj), None)
            changed = True
        else:
            changed = self._update_view(obj)
        devices = self.devices.by_index("model", f"{namespace}/{name}")
        if changed:
            hub.objects.changed(n for d in devices for n in _node_of(d))
        # Every Device of the model gets what the model now gives: the desired state (a
        # newer version: the model's resourceVersion is in it), after the model's upsert,
        # and its rejections and ModelAvailable condition. Deleted: nothing is sent (the
        # edge stops serving what it cannot check), the Devices wait for it again.
        for obj_ in devices:
            try:
                device = parse_device(obj_)
            except InvalidDocument:
                continue
            evaluation, found = self._evaluate(device)
            if event != "DELETED" and found.model is not None and device.node_name:
                self._send_desired(device.node_name, device, evaluation)
            if self._status_due(device, evaluation, found):
                assert self.writer is not None
                self.writer.submit_rejections(device.namespace, device.name)

    # -- desired down -----------------------------------------------------------------------

    def _on_synced(self, session: NodeSession) -> None:
        """After the reconnect diff: the full desired state of every Device of the node."""
        assert self.devices is not None
        for obj in self.devices.by_index("node", session.node):
            try:
                device = parse_device(obj)
            except InvalidDocument:
                continue
            evaluation, found = self._evaluate(device)
            if found.model is not None:  # no model: nothing to send yet (it waits)
                self._send_to(session, device, evaluation)

    def _send_desired(self, node: str, device: Device, evaluation: DesiredEvaluation) -> None:
        hub = self._hub
        assert hub is not None
        session = hub.registry.get(node)
        if session is not None and not session.closed:
            self._send_to(session, device, evaluation)

    @staticmethod
    def _send_to(session: NodeSession, device: Device, evaluation: DesiredEvaluation) -> None:
        try:
            message = TwinDesired(
                ref=ObjectRef("Device", device.namespace, device.name, device.uid),
                version=evaluation.state.version,
                properties=dict(evaluation.state.properties),
            )
        except InvalidMessage as exc:
            session.log.error("cannot send the desired state of %s: %s", device.name, exc)
            return
        session.send(message)

    # -- reported up ------------------------------------------------------------------------

    def _on_reported(self, inbound: Inbound) -> None:
        """``twin_reported``: authorize, check against the model, then write (acked once
        written)."""
        hub = self._hub
        assert hub is not None and self.devices is not None and self.writer is not None
        message = inbound.message
        assert isinstance(message, TwinReported)
        ref = message.ref
        what = f"Device {ref.namespace}/{ref.name}"
        if ref.kind != "Device":
            inbound.refuse(
                ErrorCode.INVALID_MESSAGE, f"twin_reported names a {ref.kind}, not a Device"
            )
            return
        decision = hub.authorizer.check(inbound.node, ref)
        if decision is Decision.NOT_FOUND:  # deleted (or recreated: a new device)
            inbound.session.send_error(
                inbound, ErrorCode.NOT_FOUND, f"{what} (uid {ref.uid}) no longer exists"
            )
            inbound.done()
            return
        if decision is Decision.FORBIDDEN:
            inbound.refuse(ErrorCode.FORBIDDEN, f"{what} is not assigned to node {inbound.node}")
            return
        problem = self._check_report(message)
        if problem is not None:
            inbound.refuse(
                ErrorCode.INVALID_MESSAGE,
                f"{what}: reported {message.property!r} refused: {problem}",
            )
            return
        report = ReportedValue(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            property=message.property,
            value=message.value,
            version=message.version,
            timestamp=message.timestamp,
        )

        def written(error: KubeAPIError | None) -> None:
            if error is None:
                inbound.done()
            else:
                inbound.refuse(
                    ErrorCode.INVALID_MESSAGE, f"the API refused the {what} status: {error}"
                )

        self.writer.submit_reports(ref.namespace, ref.name, [report], written)

    def _status_refused(self, obj: dict, error: KubeAPIError) -> None:
        hub = self._hub
        assert hub is not None
        meta = obj.get("metadata") or {}
        involved = {
            "apiVersion": "devices.kubeedge.io/v1beta1",
            "kind": "Device",
            "namespace": meta.get("namespace") or "default",
            "name": meta.get("name") or "",
            "uid": meta.get("uid") or "",
        }
        node = (obj.get("spec") or {}).get("nodeName") or ""
        hub.status_refused("devices", involved, node, "Device status", error)

    def _check_report(self, message: TwinReported) -> str | None:
        """Why a report cannot be written (``None`` when it can)."""
        if not math.isfinite(message.timestamp) or message.timestamp <= 0:
            return f"timestamp {message.timestamp!r} is not a positive number of seconds"
        assert self.devices is not None
        obj = self.devices.get(message.ref.name, message.ref.namespace)
        model_name = ((obj or {}).get("spec") or {}).get("deviceModelRef", {}).get("name", "")
        model = self.model_for(message.ref.namespace, model_name)
        if model is None:
            return f"DeviceModel {model_name!r} is not known to the hub: cannot check the value"
        prop = model.property(message.property)
        if prop is None:
            return f"property {message.property!r} is not defined in DeviceModel {model.name!r}"
        try:
            check_reported(prop, message.value)
        except InvalidValue as exc:
            return f"{exc.reason}: {exc.message}"
        return None


def devices_extension(settings: DevicesSettings) -> DevicesExtension:
    """The device-twins extension for ``Hub(..., extensions=[...])``."""
    return DevicesExtension(settings)
