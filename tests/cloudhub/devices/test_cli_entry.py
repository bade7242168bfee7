"""``cloudhub devices`` as an operator runs it: the installed command line, real KubeEdge files.

docs/devices.md documents ``cloudhub devices convert`` and ``validate``; these run them
through ``python -m cloudhub`` (what the ``cloudhub`` script calls), not the click group
on its own, on the device models and devices of tests/data.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import yaml

from tests.data import MANIFESTS

REPO = pathlib.Path(__file__).resolve().parents[3]
KUBEEDGE = MANIFESTS / "kubeedge"
COUNTER = KUBEEDGE / "examples/kubeedge-counter-demo/crds"
V1ALPHA2 = [
    COUNTER / "kubeedge-counter-model.yaml",
    COUNTER / "kubeedge-counter-instance.yaml",
    KUBEEDGE / "examples/bluetooth-CC2650-demo/crds/CC2650-device-model.yaml",
    KUBEEDGE / "examples/led-raspberrypi/crds/led-light-device-model.yaml",
]
V1BETA1 = [
    KUBEEDGE / "examples/new-counter-demo/crds/counter-model.yaml",
    KUBEEDGE / "examples/new-counter-demo/crds/counter-instance.yaml",
    KUBEEDGE / "examples/sound-equipment-fault-detection/vled/resource/vled-model.yaml",
    KUBEEDGE / "examples/sound-equipment-fault-detection/vled/resource/vled-instance.yaml",
    KUBEEDGE / "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-model.yaml",
    KUBEEDGE
    / "mappers-go/mappers/kubeedge-v1.17.0/onvif-mapper/resource/onvifdevice-instance.yaml",
]
MQTT = KUBEEDGE / "mappers-go/mappers/device-v1beta1/mqtt-mapper/resource"
BROKEN = MQTT / "mqttdevice-instance.yaml"  # upstream's file is not valid YAML


def cloudhub(*args: str | pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudhub", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_devices_is_a_cloudhub_command_whose_help_teaches_the_workflow(
    tmp_path: pathlib.Path,
) -> None:
    top = cloudhub("--help", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    assert "devices" in top.stdout
    group = cloudhub("devices", "--help", cwd=tmp_path)
    assert group.returncode == 0, group.stderr
    text = " ".join(group.stdout.split())
    assert "cloudhub devices convert model.yaml device.yaml > v1beta1.yaml" in text
    assert "kubectl apply -f v1beta1.yaml" in text
    assert "Exit status: 0" in text and "--strict" in text
    for command in ("convert", "validate"):
        sub = cloudhub("devices", command, "--help", cwd=tmp_path)
        assert sub.returncode == 0, sub.stderr
        assert "Example:" in sub.stdout and f"cloudhub devices {command}" in sub.stdout


def test_v1alpha2_examples_convert_to_files_that_validate(tmp_path: pathlib.Path) -> None:
    converted = cloudhub("devices", "convert", *V1ALPHA2, cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    docs = list(yaml.safe_load_all(converted.stdout))
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("devices.kubeedge.io/v1beta1", "DeviceModel"),
        ("devices.kubeedge.io/v1beta1", "Device"),
        ("devices.kubeedge.io/v1beta1", "DeviceModel"),
        ("devices.kubeedge.io/v1beta1", "DeviceModel"),
    ]
    # What v1beta1 cannot hold is named, with the file and line it came from.
    note = f"note: {V1ALPHA2[2]}:1: DeviceModel default/cc2650-sensortag: spec.propertyVisitors"
    assert note in converted.stderr
    out = tmp_path / "v1beta1.yaml"
    out.write_text(converted.stdout)
    checked = cloudhub("devices", "validate", out, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.count("ok: ") == 4
    assert "ok: " + f"{out}:" in checked.stdout and "Device counter" in checked.stdout
    strict = cloudhub("devices", "convert", "--strict", *V1ALPHA2, cwd=tmp_path)
    assert strict.returncode == 1  # notes were printed


def test_upstream_v1beta1_models_and_devices_validate(tmp_path: pathlib.Path) -> None:
    checked = cloudhub("devices", "validate", *V1BETA1, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.count("ok: ") == len(V1BETA1)
    assert "Device default/onvif-device-01" in checked.stdout


def test_refused_input_exits_1_naming_file_line_and_what_to_do(tmp_path: pathlib.Path) -> None:
    old = cloudhub("devices", "validate", V1ALPHA2[0], cwd=tmp_path)
    assert old.returncode == 1
    assert "v1alpha2 is not served; convert the file with `cloudhub devices convert`" in (
        old.stderr
    )
    broken = cloudhub("devices", "validate", *V1BETA1[:2], BROKEN, cwd=tmp_path)
    assert broken.returncode == 1
    assert f"error: {BROKEN}:2:8: invalid YAML: mapping values are not allowed here" in (
        broken.stderr
    )
    assert broken.stdout.count("ok: ") == 2  # the good files are still checked
    usage = cloudhub("devices", "validate", cwd=tmp_path)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
