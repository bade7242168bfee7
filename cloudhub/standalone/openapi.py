"""OpenAPI documents (placeholder: not served yet)."""

from __future__ import annotations

from aiohttp import web

from cloudhub.standalone.errors import StatusError

__all__ = ["OpenAPI"]


class OpenAPI:
    def __init__(self, registry: object) -> None:
        self.registry = registry

    def respond(self, request: web.Request, parts: list[str]) -> web.Response:
        raise StatusError(404, "NotFound", "the server could not find the requested resource")
