"""What a Kubernetes 1.20 API server does with each real manifest in tests/data/manifests.

One entry per file: whether ``kubectl apply -f`` gets it served (every object created),
partly served (some objects created, the rest refused) or not served, which objects it
creates, what error kubectl reports for the rest, and why. ``test_kubectl_manifests.py``
checks every entry against a live server, and ``docs/manifests.md`` must list the same
verdicts (checked too).

The files are used byte for byte (see shared/data/manifests/PROVENANCE.md), with one
derivation: a ``namespace: <name>`` line whose value is a valid namespace name is rewritten
to the test's own namespace, so that each file lands in a namespace of its own (kubectl
refuses ``-n`` when a file names another namespace). Placeholders such as
``< Replace with the namespace to use >`` are left alone, so broken files stay broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.data import MANIFESTS as CORPUS

__all__ = [
    "MANIFESTS",
    "NOT_SERVED",
    "PARTLY",
    "SERVED",
    "Manifest",
    "in_namespace",
    "manifests_dir",
]

SERVED = "served"
PARTLY = "partly served"
NOT_SERVED = "not served"


@dataclass(frozen=True)
class Manifest:
    """The expected outcome of ``kubectl apply -f`` for one file.

    Attributes:
        path: path below tests/data/manifests.
        verdict: ``SERVED``, ``PARTLY`` or ``NOT_SERVED``.
        objects: the objects apply creates, as kubectl names them (``deployment.apps/x``).
        error: a fragment of kubectl's error output when not everything is served.
        why: the reason, for people (docs/manifests.md says the same).
    """

    path: str
    verdict: str
    objects: tuple[str, ...] = ()
    error: str = ""
    why: str = ""


def _crd(kind: str, group_version: str) -> str:
    return f'no matches for kind "{kind}" in version "{group_version}"'


_KE = "kubeedge/examples/"
_MG = "kubeedge/mappers-go/mappers/"
_NOT_K8S = "apiVersion not set, kind not set"

MANIFESTS: tuple[Manifest, ...] = (
    Manifest(
        "Azure/iotedge/e2e_deployment_files/module_to_module_deployment.template.json",
        NOT_SERVED,
        error=_NOT_K8S,
        why="not a Kubernetes object: an Azure IoT Edge deployment manifest (no apiVersion/kind)",
    ),
    Manifest(
        "NVIDIA/k8s-device-plugin/deployments/static/nvidia-device-plugin.yml",
        SERVED,
        ("daemonset.apps/nvidia-device-plugin-daemonset",),
        why="apps/v1 DaemonSet (namespace kube-system rewritten)",
    ),
    Manifest(
        "karmada-io/karmada/artifacts/example/overridepolicy_image.yaml",
        NOT_SERVED,
        error=_crd("OverridePolicy", "policy.karmada.io/v1alpha1"),
        why="CRD-backed kind; Karmada's CRDs are not installed",
    ),
    Manifest(
        "karmada-io/karmada/artifacts/example/policy_with_labelSelector.yaml",
        NOT_SERVED,
        error=_crd("PropagationPolicy", "policy.karmada.io/v1alpha1"),
        why="CRD-backed kind; Karmada's CRDs are not installed",
    ),
    Manifest(
        "karmada-io/karmada/pkg/resourceinterpreter/default/thirdparty/resourcecustomizations/"
        "apps.kruise.io/v1alpha1/CloneSet/testdata/interpretdependency-test.yaml",
        NOT_SERVED,
        error=_NOT_K8S,
        why="not a Kubernetes object: a Karmada test case (input object + expected dependencies)",
    ),
    Manifest(
        "karmada-io/karmada/samples/nginx/propagationpolicy.yaml",
        NOT_SERVED,
        error=_crd("PropagationPolicy", "policy.karmada.io/v1alpha1"),
        why="CRD-backed kind; Karmada's CRDs are not installed",
    ),
    Manifest(
        "karmada-io/website/docs/resources/tutorials/rollout/progressive/base/http-probe-app.yaml",
        PARTLY,
        (
            "deployment.apps/http-probe-app",
            "service/http-probe-app-service",
            "ingress.networking.k8s.io/http-probe-app-ingress",
        ),
        error=_crd("PropagationPolicy", "policy.karmada.io/v1alpha1"),
        why="Deployment, Service and networking.k8s.io/v1 Ingress are served; the Karmada "
        "PropagationPolicy is CRD-backed and its CRD is not installed",
    ),
    Manifest(
        "kubeedge/edgemesh/build/agent/resources/04-configmap.yaml",
        SERVED,
        ("configmap/edgemesh-agent-cfg", "configmap/edgemesh-agent-psk"),
        why="two ConfigMaps; CRLF line endings are accepted",
    ),
    Manifest(
        "kubeedge/edgemesh/build/agent/resources/05-daemonset.yaml",
        SERVED,
        ("daemonset.apps/edgemesh-agent",),
        why="apps/v1 DaemonSet; its ServiceAccount is not in the corpus (not checked for a "
        "DaemonSet object)",
    ),
    Manifest(
        _KE + "bluetooth-CC2650-demo/crds/CC2650-device-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1alpha2"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "kubeedge-counter-demo/crds/kubeedge-counter-instance.yaml",
        NOT_SERVED,
        error=_crd("Device", "devices.kubeedge.io/v1alpha2"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "kubeedge-counter-demo/crds/kubeedge-counter-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1alpha2"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "kubeedge-counter-demo/crds/kubeedge-pi-counter-app.yaml",
        SERVED,
        ("deployment.apps/kubeedge-pi-counter",),
        why="the duplicate nodeSelector key is accepted silently: kubectl 1.20 keeps the "
        "last one (node-role.kubernetes.io/edge)",
    ),
    Manifest(
        _KE + "kubeedge-edge-ai-application/deployzigbee2mqtt.yaml",
        SERVED,
        ("deployment.apps/zigbee2mqtt",),
        why="apps/v1 Deployment (privileged: allowed by --allow-privileged)",
    ),
    Manifest(
        _KE + "led-raspberrypi/crds/led-light-device-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1alpha2"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "led-raspberrypi/deployment.yaml",
        SERVED,
        (
            "deployment.apps/led-light-mapper-deployment",
            "role.rbac.authorization.k8s.io/led-light",
            "rolebinding.rbac.authorization.k8s.io/led-light-rbac",
        ),
        why="served on 1.20 only: rbac.authorization.k8s.io/v1beta1 is deprecated (kubectl "
        "warns) and removed in 1.22; the placeholder configMap volume name is not validated",
    ),
    Manifest(
        _KE + "new-counter-demo/crds/counter-instance.yaml",
        NOT_SERVED,
        error=_crd("Device", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "new-counter-demo/crds/counter-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "new-counter-demo/virtualprotocol/resource/configmap.yaml",
        SERVED,
        ("configmap/cm-mapper",),
        why="ConfigMap with no namespace: lands in the -n namespace",
    ),
    Manifest(
        _KE + "new-counter-demo/virtualprotocol/resource/deployment.yaml",
        SERVED,
        ("deployment.apps/counter-mapper", "service/mapper-service"),
        why="Deployment + NodePort Service (fixed nodePort 30077, cluster-wide: applied once "
        "at a time)",
    ),
    Manifest(
        _KE + "sound-equipment-fault-detection/vled/resource/vled-instance.yaml",
        NOT_SERVED,
        error=_crd("Device", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "sound-equipment-fault-detection/vled/resource/vled-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _KE + "temperature-sensor-demo/modbus/resource/mqtt.yaml",
        SERVED,
        ("configmap/mosquitto-config", "deployment.apps/mosquitto", "service/mosquitto-service"),
        why="ConfigMap, Deployment (subPath mount), NodePort Service (nodePort 31883)",
    ),
    Manifest(
        "kubeedge/kubeedge/build/edge/kubernetes/03-configmap-edgenodeconf.yaml",
        SERVED,
        ("configmap/edgenodeconf",),
        why="ConfigMap (namespace kubeedge rewritten)",
    ),
    Manifest(
        "kubeedge/kubeedge/build/edge/kubernetes/04-deployment-edgenode.yaml",
        SERVED,
        ("deployment.apps/edgenode1",),
        why="apps/v1 Deployment with two privileged containers",
    ),
    Manifest(
        "kubeedge/kubeedge/build/iptablesmanager/iptablesmanager-ds.yaml",
        SERVED,
        (
            "daemonset.apps/cloud-iptables-manager",
            "serviceaccount/iptables-manager-sa",
            "clusterrolebinding.rbac.authorization.k8s.io/iptables-manager",
            "clusterrole.rbac.authorization.k8s.io/iptables-manager",
        ),
        why="DaemonSet, ServiceAccount and cluster-scoped RBAC (namespaces rewritten, the "
        "binding's subject included)",
    ),
    Manifest(
        _MG + "device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml",
        NOT_SERVED,
        error="mapping values are not allowed in this context",
        why="broken on purpose: not valid YAML (kubectl fails to parse it, nothing is sent)",
    ),
    Manifest(
        _MG + "kubeedge-v1.17.0/onvif-mapper/resource/deployment.yaml",
        SERVED,
        ("deployment.apps/mapper-test",),
        why="apps/v1 Deployment; the Secret and ConfigMap it mounts are not checked at create",
    ),
    Manifest(
        _MG + "kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-instance.yaml",
        NOT_SERVED,
        error=_crd("Device", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _MG + "kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-model.yaml",
        NOT_SERVED,
        error=_crd("DeviceModel", "devices.kubeedge.io/v1beta1"),
        why="CRD-backed kind; KubeEdge's device CRDs are not installed",
    ),
    Manifest(
        _MG + "kubeedge-v1.17.0/onvif-mapper/resource/secret.yaml",
        NOT_SERVED,
        error="illegal base64 data",
        why="broken on purpose: data.password is not base64; the server answers 400 BadRequest",
    ),
    Manifest(
        "kubernetes/examples/AI/vllm-deployment/vllm-deployment.yaml",
        SERVED,
        ("deployment.apps/vllm-gemma-deployment",),
        why="apps/v1 Deployment with nvidia.com/gpu and ephemeral-storage quantities",
    ),
    Manifest(
        "kurator-dev/kurator/examples/application/cluster-selector-demo.yaml",
        NOT_SERVED,
        error=_crd("Application", "apps.kurator.dev/v1alpha1"),
        why="CRD-backed kind; Kurator's CRDs are not installed",
    ),
    Manifest(
        "openyurtio/yurt-app-manager/config/yurt-app-manager/samples/nodepool/"
        "apps_v1alpha1_nodepool_edge.yaml",
        NOT_SERVED,
        error=_crd("NodePool", "apps.openyurt.io/v1alpha1"),
        why="CRD-backed kind; OpenYurt's CRDs are not installed",
    ),
    Manifest(
        "openyurtio/yurt-app-manager/config/yurt-app-manager/samples/uniteddeployment/"
        "uniteddeployment_deployment.yaml",
        NOT_SERVED,
        error=_crd("UnitedDeployment", "apps.openyurt.io/v1alpha1"),
        why="CRD-backed kind; OpenYurt's CRDs are not installed",
    ),
    Manifest(
        "prometheus-operator/kube-prometheus/manifests/nodeExporter-daemonset.yaml",
        SERVED,
        ("daemonset.apps/node-exporter",),
        why="apps/v1 DaemonSet (hostNetwork, hostPID, hostPort; namespace monitoring rewritten)",
    ),
    Manifest(
        "prometheus-operator/kube-prometheus/tests/e2e/kind/kube-router.yaml",
        SERVED,
        (
            "configmap/kube-router-cfg",
            "daemonset.apps/kube-router",
            "serviceaccount/kube-router",
            "clusterrole.rbac.authorization.k8s.io/kube-router",
            "clusterrolebinding.rbac.authorization.k8s.io/kube-router",
        ),
        why="five objects; the ClusterRole's meaningless metadata.namespace is ignored",
    ),
    Manifest(
        "smarter-project/smarter-device-manager/smarter-device-manager-ds-with-configmap-rpi.yaml",
        NOT_SERVED,
        error="a lowercase RFC 1123 label must consist of",
        why="broken on purpose: the namespace placeholder '< Replace with the namespace to "
        "use >' is not a valid name (the Namespace is rejected as Invalid, the DaemonSet by "
        "kubectl for naming another namespace)",
    ),
    Manifest(
        "superedge/superedge/deployment/edgex/edgex-device-random.yaml",
        SERVED,
        ("service/edgex-device-random", "deployment.apps/edgex-device-random"),
        why="NodePort Service (nodePort 30088) + Deployment (namespace edgex rewritten); the "
        "envFrom ConfigMap is not checked at create",
    ),
    Manifest(
        "superedge/superedge/sample/application-grid/deploygrid.yaml",
        NOT_SERVED,
        error=_crd("DeploymentGrid", "superedge.io/v1"),
        why="CRD-backed kind; SuperEdge's CRDs are not installed",
    ),
)


def manifests_dir() -> Path:
    """The repository's copy of the shared manifests corpus (tests/data/manifests)."""
    return CORPUS


# `namespace: <valid name>` alone on a line (keeps indentation, trailing spaces and CR).
_NAMESPACE_LINE = re.compile(
    rb"^(?P<head>[ \t]*namespace:[ \t]*)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?P<tail>[ \t]*\r?)$",
    re.MULTILINE,
)


def in_namespace(data: bytes, namespace: str) -> tuple[bytes, int]:
    """Rewrite every ``namespace: <valid name>`` line of a manifest to ``namespace``.

    Args:
        data: the file's bytes, as they are.
        namespace: the namespace to put in.

    Returns:
        The derived bytes and the number of lines rewritten. Everything else (line endings,
        missing final newline, other keys, invalid placeholders) is unchanged.
    """
    replacement = namespace.encode()
    return _NAMESPACE_LINE.subn(lambda m: m.group("head") + replacement + m.group("tail"), data)
