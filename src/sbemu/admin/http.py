"""A tiny HTTP/1.1 server for the admin port: ``GET <path>`` answered with JSON from a route.

What belongs here: reading one request from a socket defensively and writing one JSON response,
then closing (``Connection: close``; no keep-alive, no bodies, no chunking). What does not: the
routes themselves, which the server supplies as callables returning ``(status, body)``; e.g.
``/health`` gives ``{"status": "healthy", "message": "Service is healthy."}`` with 200, or
``"unhealthy"`` with 503, as Microsoft's emulator does on its port 5300.

Guards: the request line and each header line are capped (8 KiB), headers at 100 lines, and the
whole request head must arrive within ``request_timeout`` seconds (slow clients get 408);
anything that is not ``METHOD SP target SP HTTP/1.x`` gets 400; methods other than GET and
HEAD get 405. A route that raises gives 500 and is logged; the listener keeps serving.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Route", "RouteResult", "start_admin"]

log = logging.getLogger(__name__)

RouteResult = tuple[int, Mapping[str, object]]  # (HTTP status, JSON body)
Route = Callable[[], RouteResult | Awaitable[RouteResult]]  # plain or async callable

MAX_LINE_BYTES = 8 * 1024
MAX_HEADER_LINES = 100
DEFAULT_REQUEST_TIMEOUT = 5.0  # seconds for the whole request head
WRITE_TIMEOUT = 5.0  # seconds to hand the response to a slow reader

_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) (\S{1,8000}) HTTP/1\.([01])\r?\n\Z")
_HEADER_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r?\n\Z")


class _BadRequest(Exception):
    """The peer sent something that is not an HTTP/1.x request head we accept."""

    def __init__(self, status: HTTPStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def start_admin(
    host: str,
    port: int,
    routes: Mapping[str, Route],
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    post_routes: Mapping[str, Callable[[str], Any]] | None = None,
) -> asyncio.Server:
    """Listen on ``host:port`` (0 = ephemeral) and answer GET/HEAD on ``routes`` with JSON.

    Raises OSError when the address cannot be bound.
    """
    table = dict(routes)
    posts = dict(post_routes or {})

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _serve_one(reader, writer, table, request_timeout, posts)
        except (ConnectionError, asyncio.TimeoutError) as exc:
            log.debug("admin connection dropped: %r", exc)
        except Exception:  # a guard: one bad connection never stops the listener
            log.exception("admin connection failed")
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT)
            except (OSError, asyncio.TimeoutError):
                pass

    return await asyncio.start_server(on_connection, host, port, limit=MAX_LINE_BYTES)


async def _serve_one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    routes: Mapping[str, Route],
    request_timeout: float,
    post_routes: Mapping[str, Callable[[str], Any]] | None = None,
) -> None:
    try:
        method, target = await asyncio.wait_for(_read_head(reader), request_timeout)
    except asyncio.TimeoutError:
        await _respond(writer, HTTPStatus.REQUEST_TIMEOUT, {"error": "request timed out"})
        return
    except _BadRequest as exc:
        await _respond(writer, exc.status, {"error": exc.detail})
        return
    if not method:
        return  # the peer connected and closed without a request
    path = urlsplit(target).path or "/"
    if method == "POST" and post_routes:
        # POST routes are prefixes; the handler gets the rest of the path (operator commands).
        for prefix, handler in post_routes.items():
            if path.startswith(prefix):
                try:
                    status, body = handler(path[len(prefix) :])
                    status = HTTPStatus(status)
                except Exception:
                    log.exception("admin route %s failed", path)
                    status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"}
                await _respond(writer, status, body)
                return
    if method not in ("GET", "HEAD"):
        await _respond(
            writer,
            HTTPStatus.METHOD_NOT_ALLOWED,
            {"error": f"method {method} not allowed", "allow": ["GET", "HEAD"]},
            extra_headers=("Allow: GET, HEAD",),
        )
        return
    route = routes.get(path)
    if route is None:
        await _respond(
            writer,
            HTTPStatus.NOT_FOUND,
            {"error": "not found", "path": path},
            head=method == "HEAD",
        )
        return
    try:
        result = route()
        if inspect.isawaitable(result):
            result = await result
        status, body = result
        status = HTTPStatus(status)
    except Exception:
        log.exception("admin route %s failed", path)
        status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"}
    await _respond(writer, status, body, head=method == "HEAD")


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
    """Read the request line and headers; ('', '') when the peer closed before sending any."""
    line = await _read_line(reader)
    if not line:
        return "", ""
    match = _REQUEST_LINE.match(line)
    if match is None:
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
    for _ in range(MAX_HEADER_LINES + 1):
        header = await _read_line(reader)
        if header in (b"\r\n", b"\n"):
            return match.group(1).decode("ascii"), match.group(2).decode("latin-1")
        if not header:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "request head ended early")
        if not _HEADER_LINE.match(header):
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed header line")
    raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many header lines")


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "request head ended early") from None
        return b""
    except asyncio.LimitOverrunError:
        raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "line too long") from None


async def _respond(
    writer: asyncio.StreamWriter,
    status: HTTPStatus,
    body: Mapping[str, object],
    *,
    head: bool = False,
    extra_headers: tuple[str, ...] = (),
) -> None:
    payload = json.dumps(body, separators=(",", ":"), default=str).encode()
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Cache-Control: no-store",
        "Connection: close",
        *extra_headers,
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
    if not head:
        writer.write(payload)
    await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
