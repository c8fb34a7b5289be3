"""Wiring: configuration -> router and partition stores, AMQP listener, admin HTTP, timers.

This is where the event loop meets the core: the commit turns run on it (sbemu.runtime.commitloop: one
durable LMDB commit per dirty partition per turn, on worker threads, completions back on the
loop in order), the timer sweeps locks, TTLs and schedules every TIMER_INTERVAL (at once when a
TestClock moves), and the admin port (sbemu.admin.site), log retention (sbemu.logs.retention)
and AutoDeleteOnIdle (sbemu.admin.idledeletion) are started and stopped with the server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import errno
import functools
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..clock import SYSTEM_CLOCK, Clock, TestClock
from ..config import Config
from ..logs.retention import RETENTION_INTERVAL_MS, trim_logs
from ..offloop import OffLoopJob
from ..partitions import (
    PartitionBroker,
    Router,
    RuleDefinitionError,
    StorageLayoutError,
    StoreError,
    load_idle_times,
    lock_data_dir,
    sweep_lock_files,
)
from ..protocol.limits import Limits
from ..protocol.listener import AmqpProtocol, Flusher
from ..protocol.messages import view_of_record
from ..protocol.services import Services, namespace_info
from ..protocol.views import encode_property, encode_symbol
from ..protocol.wirecodec import WIRE_CODEC
from . import endpoints
from .commitloop import CommitLoop
from .endpoints import LISTEN_BACKLOG, EndpointError, ListenPort
from .heap import HeapTrimmer, libc_free_bytes, libc_malloc_trim, map_large_blocks

if TYPE_CHECKING:
    import ssl

    from ..admin.dashboard import Dashboard
    from ..admin.idledeletion import IdleDeletion

log = logging.getLogger("sbemu.server")

TIMER_INTERVAL = 0.1  # seconds between lock / TTL / schedule sweeps
# How long the event loop may keep the GIL from a commit thread that finished its fsync and
# wants to hand the result back (Python's default is 5 ms: up to 5 ms more per acknowledgement).
GIL_SWITCH_INTERVAL = 0.001
STOP_COMMIT_WAIT = 5.0  # seconds stop() keeps trying to commit what a failing store holds


def listen_hint(exc: OSError, flag: str | None) -> str:
    """What to do next when a port cannot be bound, as one sentence (empty when nothing
    better than the reason can be said); ``flag`` names the option that moves it (None: the
    namespace's AmqpPort in the configuration)."""
    if exc.errno != errno.EADDRINUSE:
        return ""
    if flag is None:
        return (
            "; another process holds the port: stop it, or give the namespace another "
            "AmqpPort in the configuration (0 = any free port)"
        )
    return (
        f"; another process (an sbemu already running?) holds the port: stop it, or pick "
        f'another with {flag} N (with make: make run ARGS="{flag} N")'
    )


class StartupError(Exception):
    """The server cannot start: unusable port, data directory or stored layout."""


class Server:
    """The running emulator: listeners, stores, commit pipeline and timers."""

    def __init__(
        self,
        config: Config,
        *,
        data_dir: Path,
        host: str,
        port: int,
        admin_port: int,
        log_retention_records: int = 0,
        log_bodies: bool = False,
        keep_logs: bool = False,
        durable: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        tls_port: ListenPort | None = None,
        ws_port: ListenPort | None = None,
    ) -> None:
        # The one time source of the server (sbemu.clock); a TestClock lets tests advance it.
        self.clock = clock
        if isinstance(clock, TestClock):
            clock.on_advance(self._clock_advanced)
        self.log_bodies = log_bodies
        self.keep_logs = keep_logs
        self.durable = durable  # False: stores open without fsync (--ephemeral)
        self.config = config
        self.log_retention_records = max(0, log_retention_records)
        # log retention passes and AutoDeleteOnIdle saves: off the loop, one at a time (start)
        self._retention: OffLoopJob | None = None
        self._retention_due_ms = 0
        self._idle_deletion: IdleDeletion | None = None  # AutoDeleteOnIdle (admin/)
        self.data_dir = Path(data_dir)
        self.host = host
        self.amqp_port = port
        self.admin_port = admin_port
        self.router: Router | None = None
        self.management: Any = None  # sbemu.admin.management.Management, set by start()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._amqp_server: asyncio.Server | None = None
        self.namespace_servers: dict[str, asyncio.Server] = {}
        self._admin_server: Any = None  # sbemu.admin.http.AdminServer
        self.routes: Any = None  # sbemu.admin.routes.HttpRoutes, set by start()
        self._connections: set[AmqpProtocol] = set()
        self.commit_loop: CommitLoop | None = None  # the commit turns, set by start()
        self._timer: asyncio.TimerHandle | None = None
        self._lock_fd: int | None = None
        self.started_at = 0.0
        self.services: Services | None = None  # what AMQP connections share (stats included)
        self.dashboard: Dashboard | None = None
        self._closed = False  # stores closed: no more sweeps (a TestClock may still move)
        # freed connection buffers go back to the system after a burst of closes (heap.py)
        map_large_blocks()  # large message buffers go back to the system when freed
        self._heap = HeapTrimmer(libc_malloc_trim(), free_bytes=libc_free_bytes())
        # AMQPS and the WebSocket port (sbemu.runtime.endpoints): None = not asked; the bound port
        # numbers once started (None when a default port could not be bound: see `unserved`)
        self._tls_listen, self._ws_listen = tls_port, ws_port
        self.tls_port: int | None = None
        self.ws_port: int | None = None
        self.unserved: list[str] = []  # why a default port is not served (for the ready lines)
        self._extra_servers: list[Any] = []
        self._websocket_handler: Any = None
        self._azure_http: Any = None  # sbemu.admin.http.HttpService: Azure's 443, set by start()
        self._sniffing: Any = None  # a FirstByte for each AMQP port's socket, set by start()

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Open stores, bind the AMQP and admin listeners; raises StartupError."""
        self._loop = asyncio.get_running_loop()
        flusher = Flusher(self._loop)  # the output of a turn, written at its end
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        self._take_data_dir()
        self._load_entities()
        self._start_workers(flusher)
        services = self._share_services()
        ssl_context = self._build_http(services, flusher)
        await self._listen_amqp(services, flusher)
        await self._listen_admin(ssl_context)
        await self._start_endpoints()
        self.started_at = self.clock()
        self._timer = self._loop.call_later(TIMER_INTERVAL, self._on_timer)
        if self.dashboard is not None:
            self.dashboard.start()
        log.info("sbemu %s started, data dir %s", __version__, self.data_dir)

    def _take_data_dir(self) -> None:
        """Lock the data directory against a second server on it."""
        try:
            self._lock_fd = lock_data_dir(self.data_dir)
        except StorageLayoutError as exc:
            raise StartupError(str(exc)) from exc
        # LMDB reader tables that crashed processes left on tmpfs (partitions/lockfile.py)
        sweep_lock_files(self.clock())

    def _load_entities(self) -> None:
        """The router with the configured entities, the runtime catalog (admin API changes)
        laid over them, forwarding markers checked and idle times restored."""
        from ..admin.management import Management

        self.router = Router(
            self.data_dir, self._wake, encode_property, encode_symbol, view_of_record
        )
        self.router.log_bodies = self.log_bodies
        self.router.durable = self.durable
        try:
            self.management = Management(
                self.router, self.config.namespaces, self.data_dir, self.settle, clock=self.clock
            )
            self.management.seed()
        except ValueError as exc:
            raise StartupError(f"data dir {self.data_dir}: {exc}") from exc
        except (StorageLayoutError, StoreError) as exc:
            raise StartupError(str(exc)) from exc
        except RuleDefinitionError as exc:
            raise StartupError(f"{self.config.source}: {exc.description}") from exc
        except OSError as exc:
            raise StartupError(f"data dir {self.data_dir}: {exc.strerror or exc}") from exc
        self.router.removal_listeners.append(self._entity_removed)
        self.router.forwarder.clean_stale_markers()
        self.router.idle.restore(*load_idle_times(self.data_dir))

    def _start_workers(self, flusher: Flusher) -> None:
        """The threads off the loop: log retention passes and idle-time saves on an executor
        of their own, the commit turns on theirs (sbemu.runtime.commitloop)."""
        from ..admin.idledeletion import IdleDeletion

        assert self._loop is not None and self.router is not None
        self._executor = executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="sbemu-offloop"
        )
        self._retention = OffLoopJob(self._loop, executor, self._retention_failed)
        self._idle_deletion = IdleDeletion(self.management, self.data_dir, self._loop, executor)
        self.commit_loop = CommitLoop(
            self._loop, self.router, self.clock, flusher, inline=not self.durable
        )
        self.commit_loop.wake()  # for what the start-up staged

    def _share_services(self) -> Services:
        """What every AMQP connection shares: the router, the namespaces, the limits."""
        assert self.router is not None
        infos = {ns.name.lower(): namespace_info(ns) for ns in self.config.namespaces}
        try:
            limits = Limits.from_env()
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        self.services = Services(
            self.router, infos, self.config.namespaces[0].name.lower(), limits=limits
        )
        self.services.trim_heap = self._trim_heap_asked
        return self.services

    def _trim_heap_asked(self) -> None:
        """A connection produced a large answer (Services.trim_heap): trim off the event loop,
        after this pass (its temporaries freed by then), at most once per heap.ASK_INTERVAL."""
        loop, executor = self._loop, self._executor
        if loop is None or executor is None:
            return
        delay = self._heap.ask(loop.time())
        if delay is not None:
            loop.call_later(delay, self._run_asked_trim)

    def _run_asked_trim(self) -> None:
        """The trim asked for above, unless the server stopped meanwhile (its executor shut)."""
        if not self._closed and self._loop is not None and self._executor is not None:
            self._loop.run_in_executor(self._executor, self._heap.run_asked)

    def _build_http(self, services: Services, flusher: Flusher) -> ssl.SSLContext:
        """The admin site and Azure's 443 (the management API, AMQP over WebSockets), and the
        first-byte sniffer the AMQP ports hand HTTP to; returns the TLS context they share."""
        from ..admin.certs import server_ssl_context
        from ..admin.http import HttpService
        from ..admin.site import admin_site

        def new_protocol() -> AmqpProtocol:
            return AmqpProtocol(services, self._connections, flusher, self.clock)

        self._new_protocol: Any = new_protocol
        self._websocket_handler = endpoints.websocket_handler(new_protocol)
        try:
            ssl_context = server_ssl_context(self.data_dir, hosts=(self.host,))
        except (OSError, ValueError) as exc:
            raise StartupError(f"data dir {self.data_dir}: TLS certificate: {exc}") from exc
        # every route with its rule (listed by tests and the docs: docs/security.md)
        site = admin_site(
            self, self.management, WIRE_CODEC, (endpoints.PATH, self._websocket_handler)
        )
        self.routes, self.dashboard = site.routes, site.dashboard
        # the AMQP ports hand a first byte that is not AMQP's to it (endpoints.FirstByte)
        self._azure_http = HttpService(
            site.management,
            ssl_context=ssl_context,
            amqp=endpoints.amqp_stream_handler(new_protocol),
        )
        self._sniffing = functools.partial(
            endpoints.FirstByte, new_protocol, self._azure_http, services.limits.handshake_timeout
        )
        return ssl_context

    async def _listen_amqp(self, services: Services, flusher: Flusher) -> None:
        """Bind the AMQP port, then each namespace's own."""
        assert self._loop is not None
        try:
            self._amqp_server = await self._loop.create_server(
                self._sniffing,
                self.host,
                self.amqp_port,
                reuse_address=True,
                backlog=LISTEN_BACKLOG,
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {self.host}:{self.amqp_port} (AMQP): {exc.strerror or exc}"
                + listen_hint(exc, "--port")
            ) from exc
        self.amqp_port = self._amqp_server.sockets[0].getsockname()[1]
        await self._listen_namespace_ports(services, flusher)

    async def _listen_admin(self, ssl_context: ssl.SSLContext) -> None:
        """Bind the admin port."""
        from ..admin.http import start_admin

        assert self._amqp_server is not None
        try:
            self._admin_server = await start_admin(
                self.host, self.admin_port, self.routes, ssl_context=ssl_context
            )
        except OSError as exc:
            self._amqp_server.close()
            raise StartupError(
                f"cannot listen on {self.host}:{self.admin_port} (admin): {exc.strerror or exc}"
                + listen_hint(exc, "--admin-port")
            ) from exc
        self.admin_port = self._admin_server.sockets[0].getsockname()[1]

    async def _start_endpoints(self) -> None:
        """AMQPS on the TLS port and AMQP over WebSockets on the WebSocket port, when asked."""
        from ..admin.certs import server_ssl_context

        assert self.services is not None
        host, tls, ws = self.host, self._tls_listen, self._ws_listen
        try:
            if tls is not None:
                context = server_ssl_context(self.data_dir, alpn=(), hosts=(host,))
                timeout = self.services.limits.handshake_timeout
                served = await endpoints.start_amqps(host, tls, self._sniffing, context, timeout)
                self.tls_port = self._served(*served, "amqps")
            if ws is not None:
                port = await endpoints.start_websocket_port(host, ws, self._azure_http)
                self.ws_port = self._served(*port, "websocket port")
        except EndpointError as exc:
            for server in self._extra_servers:
                server.close()
            raise StartupError(str(exc)) from exc
        except (OSError, ValueError) as exc:
            raise StartupError(f"data dir {self.data_dir}: TLS certificate: {exc}") from exc

    def _served(self, server: Any, why: str | None, what: str) -> int | None:
        """The port an extra listener was bound to; None (and why, for the ready lines) when a
        default port could not be bound."""
        if server is None:
            self.unserved.append(f"{what} not served: {why}")
            return None
        self._extra_servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _listen_namespace_ports(self, shared: Services, flusher: Flusher) -> None:
        """A listener per namespace with its own AmqpPort: there the namespace is the default,
        whatever host name the client connects with (no DNS entry needed)."""
        assert self.router is not None and self._loop is not None
        for ns in self.config.namespaces:
            if ns.amqp_port is None:
                continue
            # the same router, keys, limits and counters; only the default namespace differs
            services = dataclasses.replace(shared, default_namespace=ns.name.lower())
            sniffing = functools.partial(
                endpoints.FirstByte,
                functools.partial(AmqpProtocol, services, self._connections, flusher, self.clock),
                self._azure_http,
                shared.limits.handshake_timeout,
            )
            try:
                server = await self._loop.create_server(
                    sniffing,
                    self.host,
                    ns.amqp_port,
                    reuse_address=True,
                    backlog=LISTEN_BACKLOG,
                )
            except OSError as exc:
                for other in (self._amqp_server, *self.namespace_servers.values()):
                    if other is not None:
                        other.close()
                raise StartupError(
                    f"cannot listen on {self.host}:{ns.amqp_port} (AMQP for namespace "
                    f"{ns.name}): {exc.strerror or exc}" + listen_hint(exc, None)
                ) from exc
            self.namespace_servers[ns.name] = server

    @property
    def namespace_ports(self) -> dict[str, int]:
        """namespace name -> the port of its own listener (AmqpPort)."""
        return {n: s.sockets[0].getsockname()[1] for n, s in self.namespace_servers.items()}

    async def stop(self) -> None:
        """Stop accepting, finish pending commits, close connections and stores."""
        if self._timer is not None:
            self._timer.cancel()
        if self.dashboard is not None:
            self.dashboard.stop()
        for server in (
            self._amqp_server,
            self._admin_server,
            *self.namespace_servers.values(),
            *self._extra_servers,
        ):
            if server is not None:
                server.close()
        for proto in list(self._connections):
            proto.close()
        if self._azure_http is not None:
            self._azure_http.close()  # HTTP the AMQP ports handed over
        if self._retention is not None:  # the pass uses the stores: let it finish first
            await self._retention.wait()
        if self.router is not None:
            self.router.flush_lazy()  # everything in memory is committed before the stores close
            if self.commit_loop is not None:
                await self.commit_loop.drain(STOP_COMMIT_WAIT)
            if self._timer is not None and self._idle_deletion is not None:
                await self._idle_deletion.stop()  # started: the tracker holds every time
            # a turn scheduled by the last commit must not run into closed stores
            self._closed = True
            if self.commit_loop is not None:
                self.commit_loop.closed = True
            self.router.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self.commit_loop is not None:
            self.commit_loop.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ dashboard view
    @property
    def connections(self) -> set[AmqpProtocol]:
        """The open AMQP connections (read by the dashboard: admin.serverstatus.ServerStatus)."""
        return self._connections

    def wake(self) -> None:
        """Ask for a turn soon (the dashboard, after a partition was taken on or offline)."""
        self._wake()

    # ------------------------------------------------------------------ turn work
    def _wake(self) -> None:
        """The router asks for a commit turn."""
        if self.commit_loop is not None:
            self.commit_loop.wake()

    def _on_timer(self) -> None:
        assert self._loop is not None and self.router is not None
        now_ms = int(self.clock() * 1000)
        self.router.on_timer(now_ms)
        self.router.tick_lazy()  # lazy writes (see partitions/staging.py) wait two ticks at most
        if self._idle_deletion is not None:
            self._idle_deletion.on_timer(now_ms)
        if self._heap.due(len(self._connections), self._loop.time()) and self._executor:
            self._loop.run_in_executor(self._executor, self._heap.run)
        self._wake()
        retention = self._retention
        if not self.keep_logs and now_ms >= self._retention_due_ms and retention is not None:
            if retention.start(trim_logs, self._partitions(), self.log_retention_records):
                self._retention_due_ms = now_ms + RETENTION_INTERVAL_MS
        self._timer = self._loop.call_later(TIMER_INTERVAL, self._on_timer)

    # ------------------------------------------------------------------ test clock
    def _clock_advanced(self) -> None:
        """A TestClock moved forward: sweep locks, TTLs, schedules and idle entities now rather
        than at the next tick, so what came due is released before the advance returns."""
        loop = self._loop
        if loop is None or self._closed:
            return

        def sweep() -> None:
            if self._timer is not None and not self._closed:
                self._timer.cancel()
                self._on_timer()

        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            sweep()
        else:
            loop.call_soon_threadsafe(sweep)

    # ------------------------------------------------------------------ log retention
    def _partitions(self) -> list[PartitionBroker]:
        """Every partition of every entity now (a retention pass walks this list)."""
        assert self.router is not None
        return [b for entity in self.router.entities.values() for b in entity.partitions]

    @staticmethod
    def _retention_failed(error: BaseException) -> None:
        log.error("log retention failed: %s", error)

    # ------------------------------------------------------------------ runtime entities
    async def settle(self, brokers: list[PartitionBroker]) -> None:
        """Wait until the given partitions have nothing pending or in flight (and no log
        retention pass runs), so their stores can be closed."""
        assert self.router is not None and self.commit_loop is not None
        self.router.flush_lazy()
        await self.commit_loop.settle(brokers)
        if self._retention is not None:
            await self._retention.wait()

    def _entity_removed(self, entity: Any, queue_prefix: str | None) -> None:
        """An entity or subscription was deleted: every client's links on it detach."""
        for proto in list(self._connections):
            proto.entity_removed(entity, queue_prefix)
