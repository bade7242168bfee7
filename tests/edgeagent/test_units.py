"""Pure parts of the agent: settings, spec checks, quantities, env, back-off, volumes,
phase."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from edgeagent.errors import ConfigError, PodConfigError, VolumeError
from edgeagent.pods.backoff import Backoff, go_duration
from edgeagent.pods.env import expand, resolve_env
from edgeagent.pods.spec import check_pod, parse_cpu_millicores, parse_memory_bytes, qos_class
from edgeagent.pods.status import pod_phase
from edgeagent.pods.volumes import VolumeManager, write_atomic
from edgeagent.settings import env_name, load_settings


def test_settings_precedence_file_env_flags(tmp_path: pathlib.Path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "node_name: from-file\npods:\n  backoff_initial: 5\n"
        "runtime:\n  kind: process\n  docker:\n    sandbox_command: [sleep, '9']\n"
    )
    env = {
        env_name("pods.backoff_initial"): "7",
        env_name("store.commit_delay"): "2.5",
        "EDGEAGENT_NODE_NAME": "from-env",
    }
    s = load_settings(cfg, env=env, overrides={"node_name": "from-flag"})
    assert s.node_name == "from-flag"
    assert s.pods.backoff_initial == 7.0 and s.store.commit_delay == 2.5
    assert s.runtime.kind == "process" and s.runtime.docker.sandbox_command == ("sleep", "9")
    assert env_name("runtime.docker.url") == "EDGEAGENT_RUNTIME__DOCKER__URL"
    defaults = load_settings(tmp_path / "absent.yaml", env={})
    assert defaults.node_name  # host name
    assert defaults.state_dir == pathlib.Path("/var/lib/edgeagent")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("pods:\n  backof_initial: 1\n", "pods.backof_initial"),
        ("store:\n  commit_delay: soon\n", "store.commit_delay"),
        ("runtime:\n  kind: lxc\n", "runtime.kind"),
        ("[unclosed", "<file>"),
    ],
)
def test_settings_errors_name_the_key(tmp_path: pathlib.Path, text: str, key: str):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env={})
    assert err.value.key == key
    assert key in str(err.value) or "YAML" in str(err.value)


def test_quantities():
    assert parse_cpu_millicores("250m") == 250
    assert parse_cpu_millicores("2") == 2000 and parse_cpu_millicores(0.5) == 500
    assert parse_memory_bytes("64Mi") == 64 << 20 and parse_memory_bytes("1G") == 10**9
    assert parse_memory_bytes("1e3") == 1000
    with pytest.raises(ValueError):
        parse_memory_bytes("lots")


def test_check_pod_names_every_unsupported_field():
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "hostIPC": True,
            "hostPID": False,
            "dnsPolicy": "None",
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "lifecycle": {"preStop": {}},
                    "resources": {"limits": {"cpu": "1", "hugepages-2Mi": "1"}},
                    "env": [{"name": "X", "valueFrom": {"resourceFieldRef": {}}}],
                    "volumeMounts": [{"name": "nope", "mountPath": "rel"}],
                }
            ],
        },
    }
    problems = check_pod(pod, "docker")
    for want in (
        "spec.hostIPC",
        "spec.dnsPolicy",
        "spec.containers[0].lifecycle",
        "spec.containers[0].resources.limits.hugepages-2Mi",
        "spec.containers[0].env[0].valueFrom.resourceFieldRef",
        "spec.containers[0].volumeMounts[0].name: no volume named 'nope'",
        "spec.containers[0].volumeMounts[0].mountPath: must be absolute",
    ):
        assert any(p.startswith(want) for p in problems), (want, problems)
    assert not any("hostPID" in p for p in problems)  # its off value is fine
    assert any("command: required by the process runtime" in p for p in check_pod(pod, "process"))


def test_qos_class():
    assert qos_class({"containers": [{}]}) == "BestEffort"
    assert (
        qos_class({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]})
        == "Guaranteed"
    )
    assert qos_class({"containers": [{"resources": {"requests": {"cpu": "1"}}}]}) == "Burstable"


def test_env_expansion_and_missing_keys():
    assert expand("$(A)-$(B)-$$(A)", {"A": "1"}) == "1-$(B)-$(A)"
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1"},
    }
    objects = {("ConfigMap", "ns", "cm"): {"data": {"a": "1"}}}
    lookup = lambda kind, ns, name: objects.get((kind, ns, name))  # noqa: E731
    container = {
        "env": [
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}},
        ]
    }
    with pytest.raises(PodConfigError, match="couldn't find key b in ConfigMap ns/cm"):
        resolve_env(container, pod, lookup, pod_ip="", host_ip="")
    container["env"][1]["valueFrom"]["configMapKeyRef"]["optional"] = True
    assert resolve_env(container, pod, lookup, pod_ip="", host_ip="") == [("APP", "web")]
    with pytest.raises(PodConfigError, match='secret "s" not found'):
        resolve_env({"envFrom": [{"secretRef": {"name": "s"}}]}, pod, lookup, pod_ip="", host_ip="")


def test_crash_backoff_is_kubelets():
    b = Backoff(10, 300)
    assert b.remaining("c", since=100, now=100) == 0  # first restart: immediate
    assert b.step("c", 100) == 10
    assert b.remaining("c", since=105, now=106) == 9  # crashed again at 105
    assert b.step("c", 105) == 20
    for t in range(6):
        b.step("c", 110 + t)
    assert b.current("c") == 300
    assert b.remaining("c", since=116 + 601, now=116 + 601) == 0  # ran > 10 min: forgotten
    assert [go_duration(x) for x in (0.4, 1.6, 10, 80, 300)] == [
        "400ms",
        "1.6s",
        "10s",
        "1m20s",
        "5m0s",
    ]


def test_atomic_writer_swaps_and_prunes(tmp_path: pathlib.Path):
    vol = tmp_path / "vol"
    assert write_atomic(vol, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    assert (vol / "a").read_text() == "1" and (vol / "dir" / "b").read_text() == "2"
    assert os.readlink(vol / "a") == "..data/a"
    assert not write_atomic(vol, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})  # unchanged
    old = os.readlink(vol / "..data")
    assert write_atomic(vol, {"a": (b"3", 0o644)})
    assert (vol / "a").read_text() == "3" and not (vol / "dir").exists()
    assert not (vol / old).exists()
    assert stat.S_IMODE((vol / "..data" / "a").stat().st_mode) == 0o644


def test_secret_modes_and_bad_base64(tmp_path: pathlib.Path):
    vm = VolumeManager(tmp_path / "pods", None)
    pod = {
        "metadata": {"uid": "u", "namespace": "ns", "name": "p"},
        "spec": {"volumes": [{"name": "s", "secret": {"secretName": "s", "defaultMode": 0o644}}]},
    }
    objects = {
        ("Secret", "ns", "s"): {
            "metadata": {"name": "s", "namespace": "ns"},
            "data": {"k": "dmFsdWU="},
        }
    }
    vols = vm.prepare(pod, lambda kind, ns, name: objects.get((kind, ns, name)))
    f = pathlib.Path(vols["s"].path) / "..data" / "k"
    assert f.read_text() == "value" and stat.S_IMODE(f.stat().st_mode) == 0o600
    objects[("Secret", "ns", "s")]["data"]["k"] = "YOUR_PASSWORD"
    with pytest.raises(PodConfigError, match='secret "ns/s" key "k": value is not valid base64'):
        vm.prepare(pod, lambda kind, ns, name: objects.get((kind, ns, name)))


def test_projected_volume_merges_configmap_and_secret_sources(tmp_path: pathlib.Path):
    vm = VolumeManager(tmp_path / "pods", None)
    objects = {
        ("ConfigMap", "ns", "cm"): {"data": {"app.yaml": "mode: edge\n", "extra": "x"}},
        ("Secret", "ns", "s"): {"data": {"token": "dmFsdWU="}},
    }

    def lookup(kind, ns, name):
        return objects.get((kind, ns, name))

    def pod(*sources):
        vol = {"name": "all", "projected": {"defaultMode": 0o640, "sources": list(sources)}}
        return {
            "metadata": {"uid": "u", "namespace": "ns", "name": "p"},
            "spec": {"volumes": [vol]},
        }

    cm = {"configMap": {"name": "cm", "items": [{"key": "app.yaml", "path": "conf/app.yaml"}]}}
    secret = {"secret": {"name": "s"}}
    vols = vm.prepare(pod(cm, secret), lookup)
    data = pathlib.Path(vols["all"].path) / "..data"
    assert vols["all"].kind == "projected"
    assert (data / "conf" / "app.yaml").read_text() == "mode: edge\n"
    assert not (data / "extra").exists()  # only the listed item
    assert stat.S_IMODE((data / "conf" / "app.yaml").stat().st_mode) == 0o640
    assert (data / "token").read_text() == "value"
    assert stat.S_IMODE((data / "token").stat().st_mode) == 0o600  # secrets stay 0600 at most
    optional = {"configMap": {"name": "absent", "optional": True}}
    assert vm.prepare(pod(optional, secret), lookup)  # an optional source may be missing
    with pytest.raises(PodConfigError, match='configmap "absent" not found'):
        vm.prepare(pod({"configMap": {"name": "absent"}}), lookup)
    twice = {"configMap": {"name": "cm", "items": [{"key": "extra", "path": "token"}]}}
    with pytest.raises(PodConfigError, match="more than one source writes 'token'"):
        vm.prepare(pod(twice, secret), lookup)


def test_check_pod_runs_projected_configmaps_and_secrets_only():
    def spec(*sources):
        return {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "v", "projected": {"sources": list(sources)}}],
            },
        }

    ok = spec(
        {"configMap": {"name": "cm", "items": [{"key": "k", "path": "p"}]}},
        {"secret": {"name": "s"}},
    )
    assert check_pod(ok, "docker") == []
    token = {"serviceAccountToken": {"path": "token"}}
    assert check_pod(spec(token), "docker") == [
        "spec.volumes[0].projected.sources[0].serviceAccountToken"
    ]
    bad = spec(
        {"secret": {"secretName": "s"}},
        {"configMap": {"name": "cm", "items": [{"key": "k", "path": "../x"}]}},
    )
    problems = check_pod(bad, "docker")
    assert "spec.volumes[0].projected.sources[0].secret.secretName" in problems
    assert any(
        p.startswith("spec.volumes[0].projected.sources[1].configMap.items[0]") for p in problems
    )


def test_host_path_types(tmp_path: pathlib.Path):
    vm = VolumeManager(tmp_path / "pods", None)

    def pod(path, kind):
        return {
            "metadata": {"uid": "u", "namespace": "ns", "name": "p"},
            "spec": {"volumes": [{"name": "h", "hostPath": {"path": str(path), "type": kind}}]},
        }

    with pytest.raises(VolumeError, match="is not a directory"):
        vm.prepare(pod(tmp_path / "missing", "Directory"), lambda *a: None)
    vm.prepare(pod(tmp_path / "made", "DirectoryOrCreate"), lambda *a: None)
    assert (tmp_path / "made").is_dir()
    vm.prepare(pod(tmp_path / "made" / "f", "FileOrCreate"), lambda *a: None)
    assert (tmp_path / "made" / "f").is_file()
    with pytest.raises(VolumeError, match="is not a character device"):
        vm.prepare(pod(tmp_path / "made" / "f", "CharDevice"), lambda *a: None)


def test_pod_phase_rules():
    run = {"state": {"running": {}}}
    ok = {"state": {"terminated": {"exitCode": 0}}}
    bad = {"state": {"terminated": {"exitCode": 1}}}
    backoff = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1}},
    }
    creating = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    assert pod_phase("Always", [], [run, ok]) == "Running"
    assert pod_phase("Always", [], [ok]) == "Running"
    assert pod_phase("OnFailure", [], [ok]) == "Succeeded"
    assert pod_phase("OnFailure", [], [backoff]) == "Running"
    assert pod_phase("Never", [], [ok, bad]) == "Failed"
    assert pod_phase("Always", [], [creating]) == "Pending"
    assert pod_phase("Never", [bad], [creating]) == "Failed"
    assert pod_phase("Always", [backoff], [creating]) == "Pending"


def test_process_runtime_agent_imports_no_engine_client(tmp_path: pathlib.Path):
    """The agent imports only what its configuration uses (aiodocker + aiohttp: ~14 MiB)."""
    import subprocess
    import sys

    code = (
        "import sys, pathlib\n"
        "import edgeagent.__main__, edgeagent.agent\n"
        "from edgeagent.runtime import make_runtime\n"
        "from edgeagent.settings import RuntimeSettings\n"
        f"make_runtime(RuntimeSettings(kind='process'), pathlib.Path({str(tmp_path)!r}))\n"
        "print(sorted(m for m in ('aiodocker', 'aiohttp', 'numpy', 'rich', 'typer', 'aioquic',"
        " 'websockets', 'cryptography') if m in sys.modules))\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stdout


MALFORMED_SPECS = [
    # (spec, a path the problem must name): what a broken or hostile hub could send
    ({"containers": [{"name": "a", "image": "b", "ports": "x"}]}, "spec.containers[0].ports"),
    ({"containers": [{"name": "a", "image": "b", "ports": [7]}]}, "spec.containers[0].ports[0]"),
    (
        {"containers": [{"name": "a", "image": "b", "resources": {"limits": {"cpu": "1e400"}}}]},
        "spec.containers[0].resources.limits.cpu",
    ),
    (
        {"containers": [{"name": "a", "image": "b", "resources": {"limits": "x"}}]},
        "spec.containers[0].resources",
    ),
    (
        {"containers": [{"name": "a", "image": "b", "envFrom": [{"configMapRef": "x"}]}]},
        "spec.containers[0].envFrom",
    ),
    (
        {"containers": [{"name": "a", "image": "b", "env": [{"name": "A", "valueFrom": 5}]}]},
        "spec.containers[0].env",
    ),
    (
        {"containers": [{"name": "a", "image": "b", "volumeMounts": "x"}]},
        "spec.containers[0].volumeMounts",
    ),
    (
        {"containers": [{"name": "a", "image": "b", "livenessProbe": {"httpGet": "x"}}]},
        "spec.containers[0].livenessProbe",
    ),
    (
        {
            "containers": [{"name": "a", "image": "b"}],
            "volumes": [{"name": "v", "configMap": {"name": "c", "items": "x"}}],
        },
        "spec.volumes",
    ),
    ({"containers": [{"name": "a", "image": "b"}], "volumes": "x"}, "spec.volumes"),
]


@pytest.mark.parametrize(("spec", "path"), MALFORMED_SPECS)
@pytest.mark.parametrize("runtime_kind", ["docker", "process"])
def test_check_pod_names_a_malformed_spec_instead_of_raising(spec, path, runtime_kind):
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec}
    problems = check_pod(pod, runtime_kind)
    assert any(p.startswith(path) for p in problems), problems


def test_a_cpu_quantity_too_large_for_a_number_is_not_a_quantity():
    with pytest.raises(ValueError):
        parse_cpu_millicores("1e400")
    with pytest.raises(ValueError):
        parse_memory_bytes("nan")


@pytest.mark.parametrize(("spec", "_path"), MALFORMED_SPECS)
def test_a_malformed_spec_still_has_a_qos_class_for_its_refusal(spec, _path):
    assert qos_class(spec) in ("BestEffort", "Burstable", "Guaranteed")
    assert qos_class({"containers": "x"}) == "BestEffort"
