"""Settings: YAML, then environment, then overrides; errors name key, type, unit, source."""

from __future__ import annotations

import enum
import pathlib
from dataclasses import dataclass, field
from typing import Literal

import pytest

from protocol import SessionConfig, SettingsError, describe, load_settings


class Level(enum.Enum):
    DEBUG = "debug"
    INFO = "info"


@dataclass(frozen=True)
class Transport:
    quic_port: int = field(default=4433, metadata={"help": "UDP port of the hub"})
    handshake_timeout: float = field(default=3.0, metadata={"unit": "s"})
    prefer: Literal["quic", "websocket"] = "quic"
    hub_urls: tuple[str, ...] = ()
    session: SessionConfig = field(default_factory=SessionConfig)


@dataclass(frozen=True)
class Storage:
    state_dir: pathlib.Path = pathlib.Path("/var/lib/edgeagent")
    metrics_budget: int = field(default=8 * 1024 * 1024, metadata={"unit": "bytes"})


@dataclass(frozen=True)
class Settings:
    node_name: str
    transport: Transport = field(default_factory=Transport)
    storage: Storage = field(default_factory=Storage)
    log_level: Level = Level.INFO
    debug: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    proxy: str | None = None


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_later_sources_win(tmp_path: pathlib.Path) -> None:
    path = write(
        tmp_path,
        "node_name: edge-1\n"
        "transport:\n  quic_port: 5000\n  handshake_timeout: 2\n  session:\n    window: 64\n"
        "storage:\n  state_dir: /srv/edge\n",
    )
    environ = {
        "EDGEAGENT_TRANSPORT__QUIC_PORT": "6000",
        "EDGEAGENT_DEBUG": "yes",
        "EDGEAGENT_TRANSPORT__HUB_URLS": "quic://a:4433, wss://a/edge",
        "EDGEAGENT_LABELS": "site=plant,zone=a",
        "EDGEAGENT_LOG_LEVEL": "DEBUG",
        "EDGEAGENT_TRANSPORT__SESSION__PING_INTERVAL": "10",
        "OTHER_VARIABLE": "ignored",
    }
    settings = load_settings(
        Settings,
        path=path,
        environ=environ,
        env_prefix="EDGEAGENT_",
        overrides={"transport.quic_port": 7000, "proxy": "http://proxy:3128"},
    )
    assert settings.node_name == "edge-1"
    assert settings.transport.quic_port == 7000  # override > environment > file
    assert settings.transport.handshake_timeout == 2.0
    assert settings.transport.session.window == 64
    assert settings.transport.session.ping_interval == 10.0
    assert settings.transport.hub_urls == ("quic://a:4433", "wss://a/edge")
    assert settings.storage.state_dir == pathlib.Path("/srv/edge")
    assert settings.storage.metrics_budget == 8 * 1024 * 1024  # default kept
    assert settings.debug is True and settings.log_level is Level.DEBUG
    assert settings.labels == {"site": "plant", "zone": "a"}
    assert settings.proxy == "http://proxy:3128"


def test_defaults_only_need_the_required_keys() -> None:
    settings = load_settings(Settings, overrides={"node_name": "edge-2"})
    assert settings.transport == Transport() and settings.proxy is None


def test_an_empty_file_means_defaults(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "")
    assert load_settings(Settings, path=path, overrides={"node_name": "x"}).debug is False


@pytest.mark.parametrize(
    ("kwargs", "key", "expected", "source"),
    [
        ({"overrides": {"transport.quic_port": "44x"}}, "transport.quic_port", "int", "override"),
        (
            {"environ": {"E_TRANSPORT__HANDSHAKE_TIMEOUT": "soon"}, "env_prefix": "E_"},
            "transport.handshake_timeout",
            "float (s)",
            "environment E_TRANSPORT__HANDSHAKE_TIMEOUT",
        ),
        ({"overrides": {"debug": "maybe"}}, "debug", "bool", "override"),
        ({"overrides": {"transport.prefer": "tcp"}}, "transport.prefer", "one of", "override"),
        ({"overrides": {"log_level": "loud"}}, "log_level", "one of debug, info", "override"),
        ({"overrides": {"transport.quic_prot": 1}}, "transport.quic_prot", "known", "override"),
        (
            {"environ": {"E_TRANSPORT__SESSION__WINDOW": "0"}, "env_prefix": "E_"},
            "transport.session.window",
            ">= 1",
            "",
        ),
        ({"overrides": {"storage.metrics_budget": 1.5}}, "storage.metrics_budget", "bytes", ""),
        (
            {"overrides": {"transport.handshake_timeout": "inf"}},
            "transport.handshake_timeout",
            "",
            "",
        ),
        ({"overrides": {"transport": 5}}, "transport", "mapping", ""),
    ],
)
def test_errors_name_key_type_and_source(kwargs, key: str, expected: str, source: str) -> None:
    kwargs.setdefault("overrides", {})
    kwargs["overrides"] = {"node_name": "edge-1", **kwargs["overrides"]}
    with pytest.raises(SettingsError) as info:
        load_settings(Settings, **kwargs)
    assert info.value.key == key
    assert expected in info.value.expected
    assert source in info.value.source
    assert key in str(info.value)


def test_a_missing_required_key_is_named() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(Settings)
    assert info.value.key == "node_name"


def test_yaml_types_are_checked_not_coerced(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "node_name: 12\n")
    with pytest.raises(SettingsError) as info:
        load_settings(Settings, path=path)
    assert info.value.key == "node_name" and str(path) in info.value.source


@pytest.mark.parametrize("text", ["node_name: [unclosed\n", "- a list\n- at the top\n"])
def test_a_malformed_file_is_an_error(tmp_path: pathlib.Path, text: str) -> None:
    with pytest.raises(SettingsError):
        load_settings(Settings, path=write(tmp_path, text))


def test_a_missing_file_is_an_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SettingsError, match="readable"):
        load_settings(Settings, path=tmp_path / "absent.yaml")


def test_null_text_clears_an_optional_value() -> None:
    settings = load_settings(
        Settings,
        environ={"E_PROXY": "", "E_NODE_NAME": "edge-1"},
        env_prefix="E_",
    )
    assert settings.proxy is None


def test_describe_lists_leaves_with_units_and_env_names() -> None:
    infos = {info.key: info for info in describe(Settings)}
    assert infos["transport.handshake_timeout"].unit == "s"
    assert infos["transport.quic_port"].help == "UDP port of the hub"
    assert infos["transport.session.window"].default == 256
    assert (
        infos["transport.session.liveness_timeout"].env_var("EDGEAGENT_")
        == "EDGEAGENT_TRANSPORT__SESSION__LIVENESS_TIMEOUT"
    )
