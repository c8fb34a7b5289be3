"""What a route sees: the Request it is handed and the Response it returns, with the shorthands
for JSON and text answers; no sockets here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .transports import UpgradedStream


@dataclass
class Request:
    method: str  # "GET", "PUT", ...
    path: str  # percent-decoded path, e.g. "/myqueue/Subscriptions/s1"
    query: dict[str, list[str]]  # parsed query string
    headers: dict[str, str]  # lower-cased names
    body: bytes
    peer: str  # "127.0.0.1:54321"
    secure: bool  # came over TLS
    # who made it and how they proved it (sbemu.admin.policy.Grant), set by the route table
    # after the access policy allowed it
    grant: Any = None
    http_version: str = "1.1"  # "1.0" or "1.1" (a WebSocket upgrade needs 1.1)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)  # content-type etc.
    stream: AsyncIterator[bytes] | None = None  # when set: streamed (chunked) after headers
    # status 101: after the head, the connection is handed to this (a WebSocket, for example)
    upgrade: Callable[[UpgradedStream], Awaitable[None]] | None = None


Handler = Callable[[Request, dict[str, str]], "Response | Awaitable[Response]"]


def json_response(status: int, obj: object) -> Response:
    body = json.dumps(obj, separators=(",", ":"), default=str).encode()
    return Response(status, body, [("Content-Type", "application/json")])


def text_response(
    status: int, text: str, content_type: str = "text/plain; charset=utf-8"
) -> Response:
    return Response(status, text.encode(), [("Content-Type", content_type)])


class Dispatcher(Protocol):
    """What the listener serves: sbemu.admin.routes.HttpRoutes (the route table, which applies
    the access policy before any handler runs)."""

    def dispatch(self, request: Request) -> Response | Awaitable[Response]: ...
