"""HTTP/1.1 on one connection with h11 (sans-IO): a request read under the guards (line, head
and body sizes, the request clock, the keep-alive wait) and a response, streamed or not, written."""

from __future__ import annotations

import asyncio
import json
import re
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

import h11

from .messages import Request, Response, json_response
from .transports import PlainStream, TlsStream, UpgradedStream

MAX_LINE_BYTES = 8 * 1024
MAX_HEADER_LINES = 100
MAX_HEAD_BYTES = 16 * 1024
KEEP_ALIVE_TIMEOUT = 60.0  # seconds an idle keep-alive connection stays open

_METHOD = re.compile(r"[A-Z]{1,16}\Z")


class Reject(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def _next_event(conn: h11.Connection, transport: PlainStream | TlsStream) -> object:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            if status == 400 and "exceeds" in str(exc).lower():
                status = 431
            raise Reject(status, "bad request: " + str(exc)) from None
        if event is h11.NEED_DATA:
            data = await transport.recv()
            if not data and conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                return None
            conn.receive_data(data)
            continue
        return event


async def read_request(
    conn: h11.Connection,
    transport: PlainStream | TlsStream,
    timeout: float,
    max_body: int,
    peer: str,
    idle: bool,
) -> Request | None:
    if idle and not conn.trailing_data[0]:
        # wait for the next request's first bytes without the request clock running
        try:
            data = await asyncio.wait_for(transport.recv(), KEEP_ALIVE_TIMEOUT)
        except asyncio.TimeoutError:
            return None
        if not data:
            return None
        conn.receive_data(data)
    try:
        return await asyncio.wait_for(_read_request_now(conn, transport, max_body, peer), timeout)
    except asyncio.TimeoutError:
        raise Reject(408, "request timed out") from None


async def _read_request_now(
    conn: h11.Connection, transport: PlainStream | TlsStream, max_body: int, peer: str
) -> Request | None:
    event = await _next_event(conn, transport)
    if event is None or isinstance(event, h11.ConnectionClosed):
        if conn.their_state is h11.SEND_BODY:
            raise Reject(400, "request ended early")
        return None
    if not isinstance(event, h11.Request):
        raise Reject(400, "expected a request")
    raw_target = event.target.decode("latin-1")
    method = event.method.decode("ascii", "replace")
    if not _METHOD.match(method):
        raise Reject(400, "malformed method")
    if event.http_version not in (b"1.0", b"1.1"):
        raise Reject(400, "unsupported HTTP version")
    http_version = event.http_version.decode("ascii")
    if len(event.headers) > MAX_HEADER_LINES:
        raise Reject(431, "too many header lines")
    headers: dict[str, str] = {}
    for name, value in event.headers:
        if len(name) + len(value) + 2 > MAX_LINE_BYTES:
            raise Reject(431, "header line too long")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise Reject(413, f"request body over {max_body} bytes")
    if conn.they_are_waiting_for_100_continue:
        await transport.send(
            conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
        )
    body = bytearray()
    while True:
        event = await _next_event(conn, transport)
        if event is None or isinstance(event, h11.ConnectionClosed):
            raise Reject(400, "request ended early")
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                raise Reject(413, f"request body over {max_body} bytes")
        elif isinstance(event, h11.EndOfMessage):
            break
    target = urlsplit(raw_target)
    return Request(
        method=method,
        path=unquote(target.path) or "/",
        query=parse_qs(target.query, keep_blank_values=True),
        headers=headers,
        body=bytes(body),
        peer=peer,
        secure=transport.secure,
        http_version=http_version,
    )


async def switch_protocols(
    conn: h11.Connection, transport: PlainStream | TlsStream, response: Response, peer: object
) -> None:
    """Answer 101 and hand the connection to ``response.upgrade`` until it is done."""
    assert response.upgrade is not None
    if conn.their_state is not h11.MIGHT_SWITCH_PROTOCOL:
        # no Upgrade header (h11 saw none): the route's 101 cannot stand
        await write_response(
            conn,
            transport,
            Request("GET", "", {}, {}, b"", "", False),
            json_response(400, {"error": "expected an Upgrade request"}),
        )
        return
    head = h11.InformationalResponse(
        status_code=101, headers=response.headers, reason=b"Switching Protocols"
    )
    await transport.send(conn.send(head) or b"")
    leftover, _ = conn.trailing_data
    address = peer if isinstance(peer, tuple) else None
    await response.upgrade(UpgradedStream(transport, bytes(leftover), address))


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


async def write_response(
    conn: h11.Connection, transport: PlainStream | TlsStream, request: Request, response: Response
) -> None:
    headers = [(k, v) for k, v in response.headers if k.lower() not in ("content-length",)]
    names = {k.lower() for k, _ in headers}
    if "cache-control" not in names:
        headers.append(("Cache-Control", "no-store"))
    if response.stream is None:
        headers.append(("Content-Length", str(len(response.body))))
    head = h11.Response(
        status_code=response.status, headers=headers, reason=_phrase(response.status)
    )
    await transport.send(conn.send(head) or b"")
    if request.method == "HEAD":
        await transport.send(conn.send(h11.EndOfMessage()) or b"")
        return
    if response.stream is not None:
        try:
            async for chunk in response.stream:
                if chunk:
                    await transport.send(conn.send(h11.Data(data=chunk)) or b"")
        finally:
            aclose = getattr(response.stream, "aclose", None)
            if aclose is not None:
                await aclose()
    elif response.body:
        await transport.send(conn.send(h11.Data(data=response.body)) or b"")
    await transport.send(conn.send(h11.EndOfMessage()) or b"")


async def send_error(
    conn: h11.Connection, transport: PlainStream | TlsStream, status: int, detail: str
) -> None:
    """Answer a request we could not read, then close."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = json.dumps({"error": detail}).encode()
    try:
        data = conn.send(
            h11.Response(
                status_code=status,
                headers=[
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    ("Connection", "close"),
                ],
                reason=_phrase(status),
            )
        )
    except h11.LocalProtocolError:
        # h11 refuses a response before it saw a request head: write it by hand
        data = (
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (status, _phrase(status), len(body))
        )
        await transport.send(data + body)
        return
    await transport.send((data or b"") + body)
