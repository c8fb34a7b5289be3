"""The admin HTTP core: routes, keep-alive, bodies, TLS on the same port, 400/404/405/408/413/431/500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvloop
from cryptography import x509

from sbemu.admin import HttpRoutes, Request, Response, certs, json_response, start_admin
from sbemu.admin.access import Access
from sbemu.admin.certs import ca_path, ensure_certificates, server_ssl_context
from sbemu.admin.http.transports import PlainStream, TlsStream
from sbemu.admin.policy import PUBLIC, AccessPolicy


def healthy(request: Request, params: dict[str, str]) -> Response:
    return json_response(200, {"status": "healthy", "message": "Service is healthy."})


async def unhealthy(request: Request, params: dict[str, str]) -> Response:
    return json_response(
        503,
        {"status": "unhealthy", "message": "Service not available. Please try after some time."},
    )


def broken(request: Request, params: dict[str, str]) -> Response:
    raise RuntimeError("route bug")


def echo(request: Request, params: dict[str, str]) -> Response:
    return json_response(
        200,
        {
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "params": params,
            "body": request.body.decode(),
            "secure": request.secure,
            "type": request.headers.get("content-type"),
        },
    )


async def ticks() -> AsyncIterator[bytes]:
    for i in range(3):
        yield b"data: %d\n\n" % i


def stream(request: Request, params: dict[str, str]) -> Response:
    return Response(200, headers=[("Content-Type", "text/event-stream")], stream=ticks())


def public_routes() -> HttpRoutes:
    """A table under the real access policy whose routes are all PUBLIC: these tests are about
    HTTP itself (tests/security checks the rules)."""
    access = Access("127.0.0.1", [])
    return HttpRoutes(AccessPolicy("127.0.0.1", [], access, time.time))


def make_routes() -> HttpRoutes:
    routes = public_routes()
    routes.add("GET", "/health", healthy, rule=PUBLIC)
    routes.add("GET", "/unhealthy", unhealthy, rule=PUBLIC)
    routes.add("GET", "/broken", broken, rule=PUBLIC)
    routes.add("GET", "/events", stream, rule=PUBLIC)
    routes.add("PUT", "/api/entities/{ns}/{entity}", echo, rule=PUBLIC)
    routes.add("GET", "/api/entities/{ns}/special", echo, rule=PUBLIC)
    routes.add("GET", "/api/entities/{ns}/{entity}", echo, rule=PUBLIC)
    routes.add("GET", "/", echo, rule=PUBLIC, prefix=True)
    routes.add("PUT", "/", echo, rule=PUBLIC, prefix=True)
    return routes


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = await start_admin("127.0.0.1", 0, make_routes(), request_timeout=0.3, max_body=1000)
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
    assert int(headers["content-length"]) == len(body) or raw.startswith(b"HEAD")
    return int(status), headers, body


async def get(port: int, path: str) -> tuple[int, dict[str, object]]:
    status, headers, body = await exchange(
        port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
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


async def test_unknown_path_is_404_json() -> None:
    routes = public_routes()
    routes.add("GET", "/health", healthy, rule=PUBLIC)
    server = await start_admin("127.0.0.1", 0, routes)
    try:
        port = server.sockets[0].getsockname()[1]
        assert await get(port, "/nope") == (404, {"error": "not found", "path": "/nope"})
    finally:
        server.close()
        await server.wait_closed()


async def test_other_methods_are_405(port: int) -> None:
    status, headers, body = await exchange(
        port,
        b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    )
    assert status == 405
    assert headers["allow"] == "GET, HEAD"
    assert "error" in json.loads(body)


async def test_head_has_no_body(port: int) -> None:
    status, headers, body = await exchange(
        port, b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01\x02garbage\r\n\r\n",
        b"GET\r\n\r\n",
        b"get /health HTTP/1.1\r\n\r\n",
        b"GET /health HTTP/2.0\r\n\r\n",
        b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n",  # TLS without a certificate
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
        port, b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9_000 + b"\r\n\r\n"
    )
    assert status == 431
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(150))
    status, _, _ = await exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
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
        await start_admin("127.0.0.1", port, make_routes())


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split(" ")[1]), headers, body


async def test_keep_alive_serves_several_requests_on_one_connection(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(3):
            body = b'{"n": %d}' % i
            writer.write(
                b"PUT /api/entities/ns1/q%d?api-version=2021-05 HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (i, len(body), body)
            )
            status, headers, raw = await read_response(reader)
            assert status == 200 and "connection" not in headers
            got = json.loads(raw)
            assert got["params"] == {"ns": "ns1", "entity": f"q{i}"}
            assert got["body"] == body.decode() and got["query"] == {"api-version": ["2021-05"]}
            assert got["method"] == "PUT" and got["type"] == "application/json"
    finally:
        writer.close()


async def test_route_precedence_and_prefix_rest(port: int) -> None:
    status, got = await get(port, "/api/entities/ns1/special")
    assert status == 200 and got["params"] == {"ns": "ns1"}
    status, got = await get(port, "/my%20topic/Subscriptions/s1")
    assert got["path"] == "/my topic/Subscriptions/s1"
    assert got["params"] == {"rest": "my topic/Subscriptions/s1"}


async def test_body_over_cap_is_413(port: int) -> None:
    status, _, _ = await exchange(
        port, b"PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"a" * 5000
    )
    assert status == 413
    chunked = (
        b"PUT /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"200\r\n" + b"a" * 512 + b"\r\n") * 3
        + b"0\r\n\r\n"
    )
    status, _, _ = await exchange(port, chunked)
    assert status == 413


async def test_stream_is_chunked(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"data: 0" in body and b"data: 2" in body and body.endswith(b"0\r\n\r\n")


@contextlib.asynccontextmanager
async def tls_admin(tmp_path: Path) -> AsyncIterator[tuple[int, ssl.SSLContext]]:
    """An admin server with TLS (certificates under ``tmp_path``) on an ephemeral port, and a
    client context that trusts its CA."""
    server = await start_admin(
        "127.0.0.1", 0, make_routes(), ssl_context=server_ssl_context(tmp_path)
    )
    try:
        port = server.sockets[0].getsockname()[1]
        yield port, ssl.create_default_context(cafile=str(ca_path(tmp_path)))
    finally:
        server.close()
        await server.wait_closed()


async def test_tls_and_plain_on_the_same_port(tmp_path: Path) -> None:
    async with tls_admin(tmp_path) as (port, client):
        for host in ("localhost", "127.0.0.1"):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname=host
            )
            for _ in range(2):  # keep-alive over TLS
                writer.write(b"GET /api/entities/a/b HTTP/1.1\r\nHost: x\r\n\r\n")
                status, _, raw = await read_response(reader)
                assert status == 200 and json.loads(raw)["secure"] is True
            writer.close()
        assert (await get(port, "/health"))[0] == 200  # plain HTTP still served
        untrusting = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection(
                "127.0.0.1", port, ssl=untrusting, server_hostname="localhost"
            )


def test_certificates_are_created_once_and_reused(tmp_path: Path) -> None:
    ca, cert, key = ensure_certificates(tmp_path)
    before = ca.read_bytes(), cert.read_bytes()
    assert ca == ca_path(tmp_path) and ca.name == "rootCA.pem"
    assert ensure_certificates(tmp_path) == (ca, cert, key)
    assert (ca.read_bytes(), cert.read_bytes()) == before
    assert key.stat().st_mode & 0o077 == 0
    cert.unlink()
    ensure_certificates(tmp_path)
    assert ca.read_bytes() == before[0] and cert.read_bytes() != before[1]


async def test_the_certificate_names_azure_host_names(tmp_path: Path) -> None:
    """Code that builds <namespace>.servicebus.windows.net itself, with a hosts-file line
    mapping it to loopback, verifies the certificate under that name; other names fail."""
    async with tls_admin(tmp_path) as (port, client):
        for host in ("sbemulatorns.servicebus.windows.net", "other.servicebus.chinacloudapi.cn"):
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname=host
            )
            writer.close()
        for host in ("servicebus.windows.net", "a.b.servicebus.windows.net", "evil.example"):
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=host)


def test_a_certificate_without_the_azure_names_is_reissued(tmp_path: Path) -> None:
    """A server certificate an older sbemu issued (localhost and addresses only) is replaced
    at start by one that names Azure's hosts too; the CA stays (users trusted it)."""
    ca, cert, key = ensure_certificates(tmp_path)
    ca_before = ca.read_bytes()
    old_names = certs.NAMES
    certs.NAMES = ("localhost",)
    try:
        cert.unlink()
        ensure_certificates(tmp_path)  # what an older sbemu left behind
    finally:
        certs.NAMES = old_names
    old = cert.read_bytes()
    ensure_certificates(tmp_path)
    assert cert.read_bytes() != old and ca.read_bytes() == ca_before
    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "*.servicebus.windows.net" in names.value.get_values_for_type(x509.DNSName)


def test_sbemu_cert_prints_the_ca_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sbemu.cli import main

    assert main(["cert", "--data-dir", str(tmp_path)]) == 2  # no server made a CA there yet
    assert not ca_path(tmp_path).exists() and "--data-dir" in capsys.readouterr().err
    ensure_certificates(tmp_path)  # what the server does on its first start
    assert main(["cert", "--data-dir", str(tmp_path)]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == ca_path(tmp_path).resolve() and printed.read_text().startswith(
        "-----BEGIN CERTIFICATE-----"
    )


async def test_expect_100_continue_is_answered(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"PUT /q HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 ")
        writer.write(b"{}")
        status, _, raw = await read_response(reader)
        assert status == 200 and json.loads(raw)["body"] == "{}"
    finally:
        writer.close()


def test_a_tls_stream_whose_socket_failed_closes_without_raising(tmp_path: Path) -> None:
    """Defect seen with the Go SDK over wss on the admin port: a peer that reset the
    connection failed a write, uvloop closed the transport, and the upgraded connection's end
    (close_notify written to the dead transport) raised "the handler is closed" and logged a
    traceback. The server runs on uvloop, which raises there (asyncio only logs)."""
    ensure_certificates(tmp_path)

    async def scenario() -> None:
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        accepted = asyncio.get_running_loop().create_future()
        server = await asyncio.start_server(
            lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0
        )
        trusting = ssl.create_default_context(cafile=str(ca_path(tmp_path)))
        connecting = asyncio.ensure_future(
            asyncio.open_connection(
                "127.0.0.1",
                server.sockets[0].getsockname()[1],
                ssl=trusting,
                server_hostname="localhost",
            )
        )
        reader, writer = await accepted
        tls = TlsStream(server_ssl_context(tmp_path), reader, writer, b"")
        await tls.handshake()
        client_reader, client = await connecting
        writer.transport.abort()  # what a failed write leaves: a closed transport
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await client_reader.read()  # the peer saw it go: the handle is closed by now
        tls.write_nowait(b"after the failure")
        tls.close()
        assert writer.is_closing()
        client.close()
        server.close()
        await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


def test_a_plain_response_to_a_client_that_went_away_ends_quietly() -> None:
    """Found by make test: an admin client closed its connection while its response was being
    written; uvloop had closed the transport, so writing the response's end raised "the handler
    is closed" and the server logged a traceback. A closed plain transport now ends the response
    as a dropped peer (ConnectionError, which the connection handler logs at debug level)."""

    async def scenario() -> None:
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        accepted = asyncio.get_running_loop().create_future()
        server = await asyncio.start_server(
            lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0
        )
        client_reader, client = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        reader, writer = await accepted
        plain = PlainStream(reader, writer, b"")
        await plain.send(b"HTTP/1.1 200 OK\r\n")
        writer.transport.abort()  # the client went away: uvloop closed the handle
        with contextlib.suppress(ConnectionError):
            await client_reader.read()
        plain.write_nowait(b"an event for a stream nobody reads")
        with pytest.raises(ConnectionError):
            await plain.send(b"0\r\n\r\n")
        client.close()
        server.close()
        await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
