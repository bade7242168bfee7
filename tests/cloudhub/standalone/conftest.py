"""Fixtures for tests of the embedded API server itself (not portable to a real cluster)."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer


@contextlib.asynccontextmanager
async def running(
    settings: APIServerSettings,
) -> AsyncIterator[tuple[EmbeddedAPIServer, client.ApiClient]]:
    """The server and a kubernetes_asyncio client configured from its kubeconfig."""
    async with EmbeddedAPIServer(settings) as api:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(api.kubeconfig_path), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api_client:
            yield api, api_client


@pytest.fixture
def data_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "apiserver"


def settings(**overrides: Any) -> APIServerSettings:
    """Test settings: an ephemeral port; everything else as given."""
    return APIServerSettings(port=0, **overrides)
