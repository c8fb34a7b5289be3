"""The admin HTTP listener: JSON routes, 404/405/400/408/431/500, Connection: close."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping

import pytest

from sbemu.admin import Route, start_admin


def healthy() -> tuple[int, dict[str, object]]:
    return 200, {"status": "healthy", "message": "Service is healthy."}


async def unhealthy() -> tuple[int, dict[str, object]]:
    return 503, {
        "status": "unhealthy",
        "message": "Service not available. Please try after some time.",
    }


def broken() -> tuple[int, dict[str, object]]:
    raise RuntimeError("route bug")


ROUTES: Mapping[str, Route] = {"/health": healthy, "/unhealthy": unhealthy, "/broken": broken}


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = await start_admin("127.0.0.1", 0, ROUTES, request_timeout=0.3)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read until the server closes; (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, status, _ = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body) or raw.startswith(b"HEAD")
    return int(status), headers, body


async def get(port: int, path: str) -> tuple[int, dict[str, object]]:
    status, headers, body = await exchange(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert headers["content-type"] == "application/json"
    return status, json.loads(body)


async def test_health_returns_route_json(port: int) -> None:
    assert await get(port, "/health") == (
        200,
        {"status": "healthy", "message": "Service is healthy."},
    )


async def test_async_route_and_non_200_status(port: int) -> None:
    status, body = await get(port, "/unhealthy")
    assert status == 503 and body["status"] == "unhealthy"


async def test_query_string_is_ignored_and_http10_works(port: int) -> None:
    assert (await get(port, "/health?verbose=1"))[0] == 200
    status, _, body = await exchange(port, b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 200 and json.loads(body)["status"] == "healthy"


async def test_unknown_path_is_404_json(port: int) -> None:
    assert await get(port, "/nope") == (404, {"error": "not found", "path": "/nope"})


async def test_other_methods_are_405(port: int) -> None:
    status, headers, body = await exchange(
        port, b"POST /health HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert status == 405
    assert headers["allow"] == "GET, HEAD"
    assert "error" in json.loads(body)


async def test_head_has_no_body(port: int) -> None:
    status, headers, body = await exchange(port, b"HEAD /health HTTP/1.1\r\n\r\n")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01\x02garbage\r\n\r\n",
        b"GET\r\n\r\n",
        b"get /health HTTP/1.1\r\n\r\n",
        b"GET /health HTTP/2.0\r\n\r\n",
        b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n",  # a TLS ClientHello
    ],
)
async def test_garbage_is_400(port: int, raw: bytes) -> None:
    status, _, body = await exchange(port, raw)
    assert status == 400 and "error" in json.loads(body)


async def test_request_ending_early_is_400(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    writer.write_eof()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert data.startswith(b"HTTP/1.1 400 ")


async def test_oversized_head_is_431(port: int) -> None:
    status, _, _ = await exchange(
        port, b"GET /health HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n"
    )
    assert status == 431
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(150))
    status, _, _ = await exchange(port, b"GET /health HTTP/1.1\r\n" + many + b"\r\n")
    assert status == 431


async def test_slow_client_gets_408_and_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /hea")  # then nothing: the fixture's timeout is 0.3 s
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert data.startswith(b"HTTP/1.1 408 ")


async def test_failing_route_is_500_and_listener_keeps_serving(port: int) -> None:
    assert await get(port, "/broken") == (500, {"error": "internal error"})
    assert (await get(port, "/health"))[0] == 200


async def test_connect_and_close_without_request(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()
    assert (await get(port, "/health"))[0] == 200


async def test_concurrent_requests(port: int) -> None:
    results = await asyncio.gather(*(get(port, "/health") for _ in range(20)))
    assert all(status == 200 for status, _ in results)


async def test_port_in_use_raises_oserror(port: int) -> None:
    with pytest.raises(OSError):
        await start_admin("127.0.0.1", port, ROUTES)
