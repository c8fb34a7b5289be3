"""Wiring: configuration -> router and partition stores, AMQP listener, admin HTTP, timers.

This is where the event loop meets the core. Once per loop turn (`_turn`) the commit turn
(sbemu.partitions.commits.GroupCommit) runs the router's pending dispatch and gives every
partition with pending writes one durable LMDB commit on a worker thread (group commit: one
transaction per partition per turn, at most one in flight per partition; py-lmdb releases the
GIL while it syncs, so partitions' fsyncs overlap). Completions run back on the loop, in order,
after their commit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import fcntl
import functools
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, endpoints
from .clock import Clock, TestClock
from .config import Config, NamespaceConfig, QueueConfig, TopicConfig
from .endpoints import EndpointError, ListenPort
from .heap import HeapTrimmer, libc_malloc_trim
from .logs.retention import plan_trim, registered_readers
from .partitions.broker import PartitionBroker
from .partitions.commits import COMMITS_PER_ENTITY, CommitJob, CommitThreads, GroupCommit
from .partitions.idle import SAVE_INTERVAL_MS as IDLE_SAVE_INTERVAL_MS
from .partitions.idle import load_idle_times, save_idle_times
from .partitions.layout import StorageLayoutError
from .partitions.lockfile import sweep_lock_files
from .partitions.records import IncomingMessage, MessageRecord
from .partitions.router import Router
from .partitions.specs import entity_settings, queue_spec, topic_spec
from .partitions.store import TRIM_LIMIT, StoreError
from .partitions.subscriptions import RuleDefinitionError
from .protocol import sections
from .protocol.connection import NamespaceInfo, Services
from .protocol.limits import Limits
from .protocol.listener import AmqpProtocol, Flusher
from .protocol.messages import encode_delivery, encode_record, to_incoming, view_of_record
from .protocol.views import encode_property, encode_symbol

if TYPE_CHECKING:
    from .admin.dashboard import Dashboard

log = logging.getLogger("sbemu.server")

TIMER_INTERVAL = 0.1  # seconds between lock / TTL / schedule sweeps
# How long the event loop may keep the GIL from a commit thread that finished its fsync and
# wants to hand the result back (Python's default is 5 ms: up to 5 ms more per acknowledgement).
GIL_SWITCH_INTERVAL = 0.001
STOP_COMMIT_WAIT = 5.0  # seconds stop() keeps trying to commit what a failing store holds
# Commits in flight at once across partitions (at most one per partition; see
# sbemu.partitions.commits). The threads mostly wait in fsync with the GIL released, and
# concurrent fsyncs share the file system's journal commits. A dirty partition beyond the bound
# waits for a slot and takes its batch only then, so batches grow where commits would queue:
# on the 16-partition bench queue 8 cut server CPU per message by a fifth to a third against
# 16 (fewer, larger commits; half the context switches) at equal or better rates.
COMMIT_THREADS = 8
RETENTION_INTERVAL_MS = 10_000  # between log retention passes
RETENTION_CALLS_PER_PASS = 20  # trim_log() calls (each up to TRIM_LIMIT records) per partition


class WireCodec:
    """The AMQP wire format the dashboard's message explorer shows and sends messages in
    (sbemu.admin.explorer.WireCodec): handed to it from here, above both admin/ and protocol/,
    so that admin/ needs no import of protocol/."""

    def encode_peeked(self, rec: MessageRecord, partition_id: int | None) -> bytes:
        return encode_delivery(rec, partition_id, None, with_state=True)

    def encode_record(self, rec: MessageRecord) -> bytes:
        return encode_record(rec, [])

    def read_properties(self, data: bytes) -> dict[str, object]:
        return sections.read_properties(data)

    def to_incoming(self, data: bytes, for_topic: bool) -> IncomingMessage:
        # sections.SectionError (a ValueError) when the bytes are not a well-formed message
        return to_incoming(sections.scan_message(data), for_topic)


WIRE_CODEC = WireCodec()


class StartupError(Exception):
    """The server cannot start: unusable port, data directory or stored layout."""


def namespace_info(ns: NamespaceConfig) -> NamespaceInfo:
    """Keys, rights and limits of a namespace for the protocol side."""
    return NamespaceInfo(
        name=ns.name,
        keys={p.key_name: p.key for p in ns.sas_policies},
        rights={p.key_name: frozenset(p.rights) for p in ns.sas_policies},
        max_message_size=ns.max_message_size_bytes,
    )


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
        clock: Clock = time.time,
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
        self._retention: asyncio.Future[None] | None = None
        self._retention_due_ms = 0
        self._idle_save: asyncio.Future[None] | None = None  # AutoDeleteOnIdle times being saved
        self._idle_saved_ms = 0
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
        self._turn_scheduled = False
        self._commits: GroupCommit | None = None  # the commit turn, set by start()
        self._commit_threads: CommitThreads | None = None
        self._flusher: Flusher | None = None  # output of a turn, written at its end
        self._idle = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._lock_fd: int | None = None
        self.started_at = 0.0
        self.services: Services | None = None  # what AMQP connections share (stats included)
        self.dashboard: Dashboard | None = None
        self._closed = False  # stores closed and commit pool shut down: turns do nothing
        # freed connection buffers go back to the system after a burst of closes (heap.py)
        self._heap = HeapTrimmer(libc_malloc_trim())
        # AMQPS and the WebSocket port (sbemu.endpoints): None = not asked; the bound port
        # numbers once started (None when a default port could not be bound: see `unserved`)
        self._tls_listen, self._ws_listen = tls_port, ws_port
        self.tls_port: int | None = None
        self.ws_port: int | None = None
        self.unserved: list[str] = []  # why a default port is not served (for the ready lines)
        self._extra_servers: list[Any] = []
        self._websocket_handler: Any = None

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Open stores, bind the AMQP and admin listeners; raises StartupError."""
        self._loop = asyncio.get_running_loop()
        self._flusher = flusher = Flusher(self._loop)
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        self._lock_data_dir()
        # LMDB reader tables that crashed processes left on tmpfs (partitions/lockfile.py)
        sweep_lock_files(time.time())
        self.router = Router(
            self.data_dir, self._wake, encode_property, encode_symbol, view_of_record
        )
        self.router.log_bodies = self.log_bodies
        self.router.durable = self.durable
        from .admin.management import Management, SpecBuilders

        try:
            # configured entities, with the runtime catalog (admin API changes) laid over them
            self.management = Management(
                self.router,
                self.config.namespaces,
                self.data_dir,
                SpecBuilders(queue_spec, topic_spec),
                self.settle,
                apply=self.apply_entity_config,
                clock=self.clock,
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
        # log retention passes and idle-time saves run here, off the loop (commits have their
        # own threads, see _start_commits)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="sbemu-offloop"
        )
        self._start_commits()
        infos = {ns.name.lower(): namespace_info(ns) for ns in self.config.namespaces}
        try:
            limits = Limits.from_env()
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        services = Services(
            self.router, infos, self.config.namespaces[0].name.lower(), limits=limits
        )
        try:
            self._amqp_server = await self._loop.create_server(
                lambda: AmqpProtocol(services, self._connections, flusher, self.clock),
                self.host,
                self.amqp_port,
                reuse_address=True,
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {self.host}:{self.amqp_port} (AMQP): {exc.strerror or exc}"
            ) from exc
        self.amqp_port = self._amqp_server.sockets[0].getsockname()[1]
        await self._listen_namespace_ports(services, flusher)
        from .admin.certs import server_ssl_context
        from .admin.http import start_admin

        self.services = services

        def new_protocol() -> AmqpProtocol:
            return AmqpProtocol(services, self._connections, flusher, self.clock)

        self._new_protocol: Any = new_protocol
        self._websocket_handler = endpoints.websocket_handler(new_protocol)
        try:
            ssl_context = server_ssl_context(self.data_dir)
        except (OSError, ValueError) as exc:
            raise StartupError(f"data dir {self.data_dir}: TLS certificate: {exc}") from exc
        try:
            self.routes = self.admin_routes()  # listed by tests and the docs (docs/security.md)
            self._admin_server = await start_admin(
                self.host, self.admin_port, self.routes, ssl_context=ssl_context
            )
        except OSError as exc:
            self._amqp_server.close()
            raise StartupError(
                f"cannot listen on {self.host}:{self.admin_port} (admin): {exc.strerror or exc}"
            ) from exc
        self.admin_port = self._admin_server.sockets[0].getsockname()[1]
        await self._start_endpoints()
        self.started_at = time.time()
        self._timer = self._loop.call_later(TIMER_INTERVAL, self._on_timer)
        if self.dashboard is not None:
            self.dashboard.start()
        log.info("sbemu %s started, data dir %s", __version__, self.data_dir)

    async def _start_endpoints(self) -> None:
        """AMQPS on the TLS port and AMQP over WebSockets on the WebSocket port, when asked."""
        from .admin.certs import server_ssl_context

        try:
            for listen, start in (
                (self._tls_listen, self._start_amqps),
                (self._ws_listen, self._start_ws_port),
            ):
                if listen is not None:
                    await start(listen, server_ssl_context)
        except EndpointError as exc:
            for server in self._extra_servers:
                server.close()
            raise StartupError(str(exc)) from exc
        except (OSError, ValueError) as exc:
            raise StartupError(f"data dir {self.data_dir}: TLS certificate: {exc}") from exc

    async def _start_amqps(self, listen: ListenPort, make_context: Any) -> None:
        assert self.services is not None
        server, why = await endpoints.start_amqps(
            self.host,
            listen,
            self._new_protocol,
            make_context(self.data_dir, alpn=()),
            self.services.limits.handshake_timeout,
        )
        if server is None:
            self.unserved.append(f"amqps not served: {why}")
            return
        self._extra_servers.append(server)
        self.tls_port = server.sockets[0].getsockname()[1]

    async def _start_ws_port(self, listen: ListenPort, make_context: Any) -> None:
        server, why = await endpoints.start_websocket_port(
            self.host, listen, self._websocket_handler, make_context(self.data_dir)
        )
        if server is None:
            self.unserved.append(f"websocket port not served: {why}")
            return
        self._extra_servers.append(server)
        self.ws_port = server.sockets[0].getsockname()[1]

    async def _listen_namespace_ports(self, shared: Services, flusher: Flusher) -> None:
        """A listener per namespace with its own AmqpPort: there the namespace is the default,
        whatever host name the client connects with (no DNS entry needed)."""
        assert self.router is not None and self._loop is not None
        for ns in self.config.namespaces:
            if ns.amqp_port is None:
                continue
            # the same router, keys, limits and counters; only the default namespace differs
            services = dataclasses.replace(shared, default_namespace=ns.name.lower())
            try:
                server = await self._loop.create_server(
                    functools.partial(
                        AmqpProtocol, services, self._connections, flusher, self.clock
                    ),
                    self.host,
                    ns.amqp_port,
                    reuse_address=True,
                )
            except OSError as exc:
                for other in (self._amqp_server, *self.namespace_servers.values()):
                    if other is not None:
                        other.close()
                raise StartupError(
                    f"cannot listen on {self.host}:{ns.amqp_port} (AMQP for namespace "
                    f"{ns.name}): {exc.strerror or exc}"
                ) from exc
            self.namespace_servers[ns.name] = server

    @property
    def namespace_ports(self) -> dict[str, int]:
        """namespace name -> the port of its own listener (AmqpPort)."""
        return {n: s.sockets[0].getsockname()[1] for n, s in self.namespace_servers.items()}

    def _lock_data_dir(self) -> None:
        """One server per data directory: LMDB would allow two, our in-memory state would not."""
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise StartupError(f"data dir {self.data_dir}: not a directory")
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StartupError(f"data dir {self.data_dir}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StartupError(
                f"data dir {self.data_dir} is in use by another sbemu process"
            ) from exc
        self._lock_fd = fd

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
        if self._retention is not None:  # the pass uses the stores: let it finish first
            await asyncio.wait([self._retention])
        if self.router is not None:
            commits = self._commits
            self.router.flush_lazy()  # everything in memory is committed before the stores close
            self._turn()
            assert self._loop is not None
            give_up = self._loop.time() + STOP_COMMIT_WAIT
            while commits is not None and commits.busy():
                self._idle.clear()
                if not commits.inflight:
                    if self._loop.time() >= give_up:
                        # A partition whose store keeps failing (a disk gone read-only) cannot
                        # commit what it holds; none of it was acknowledged, so stop anyway.
                        log.error(
                            "stopping with writes a failing store could not commit "
                            "(none of them was acknowledged)"
                        )
                        break
                    self._turn()
                    if commits.busy() and not commits.inflight:  # nothing could start: retry
                        await asyncio.sleep(0.01)
                    continue
                await self._idle.wait()
            if self._idle_save is not None:
                await asyncio.wait([self._idle_save])
            if self._timer is not None:  # started: the tracker holds every entity's time
                self._save_idle_times_now()
            # A turn scheduled by the last commit must not dispatch or commit into closed
            # stores and a shut-down pool (found by make crash-test --sigterm: a traceback).
            self._closed = True
            self.router.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._commit_threads is not None:
            self._commit_threads.shutdown()
            self._commit_threads = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ dashboard view
    @property
    def connections(self) -> set[AmqpProtocol]:
        """The open AMQP connections (read by the dashboard: admin.dashboard.ServerStatus)."""
        return self._connections

    def wake(self) -> None:
        """Ask for a turn soon (the dashboard, after a partition was taken on or offline)."""
        self._wake()

    # ------------------------------------------------------------------ turn work
    def _wake(self) -> None:
        if not self._turn_scheduled and self._loop is not None:
            self._turn_scheduled = True
            self._loop.call_soon(self._turn)

    def _start_commits(self) -> None:
        """The commit turn, with its worker threads handing finished commits to the loop."""
        assert self.router is not None and self._loop is not None
        commits = GroupCommit(
            self.router, max_inflight=COMMIT_THREADS, max_inflight_per_entity=COMMITS_PER_ENTITY
        )
        threads = CommitThreads(COMMIT_THREADS, self._loop.call_soon_threadsafe, self._committed)
        commits.runner = threads
        commits.on_error = self._commit_failed
        commits.on_idle = self._idle.set
        self._commits, self._commit_threads = commits, threads

    def _turn(self) -> None:
        self._turn_scheduled = False
        if self._closed or self._commits is None:
            return
        self._commits.turn(int(self.clock() * 1000))
        if self._flusher is not None:  # what the turn delivered goes out now, not a pass later
            self._flusher.run()

    def _committed(self, jobs: list[CommitJob]) -> None:
        """Finished commits, back on the loop: completions and re-commits, then at once a turn
        for what the completions made ready (the messages a send commit landed go to waiting
        receivers in this same callback, with the acknowledgements)."""
        assert self._commits is not None
        self._commits.finished(jobs)
        self._turn()

    @staticmethod
    def _commit_failed(broker: PartitionBroker, error: Exception) -> None:
        log.error("partition %s/%d: commit failed: %s", broker.entity, broker.partition_id, error)

    def _on_timer(self) -> None:
        assert self._loop is not None and self.router is not None
        now_ms = int(self.clock() * 1000)
        self.router.on_timer(now_ms)
        self.router.tick_lazy()  # lazy writes (see partitions/staging.py) wait two ticks at most
        for entity, sub_queue in self.router.idle_entities(now_ms):
            self._delete_idle(entity, sub_queue)
        self._save_idle_times(now_ms)
        if self._heap.due(len(self._connections), self._loop.time()) and self._executor:
            self._loop.run_in_executor(self._executor, self._heap.run)
        self._wake()
        if not self.keep_logs and now_ms >= self._retention_due_ms and self._retention is None:
            self._retention_due_ms = now_ms + RETENTION_INTERVAL_MS
            self._start_retention()
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
    def _start_retention(self) -> None:
        """Trim the partition logs in a worker thread (one pass at a time)."""
        assert self._loop is not None and self._executor is not None and self.router is not None
        brokers = [b for e in self.router.entities.values() for b in e.partitions]
        future = self._loop.run_in_executor(self._executor, self.trim_logs, brokers)
        self._retention = future

        def done(f: asyncio.Future[None]) -> None:
            self._retention = None
            if not f.cancelled() and f.exception() is not None:
                log.error("log retention failed: %s", f.exception())

        future.add_done_callback(done)

    def trim_logs(self, brokers: list[PartitionBroker]) -> None:
        """One retention pass (see sbemu.logs.retention); runs off the event loop."""
        cap = self.log_retention_records
        for broker in brokers:
            store = broker.store
            readers = registered_readers(store.path)
            if not readers and cap <= 0:
                continue
            try:
                for _ in range(RETENTION_CALLS_PER_PASS):
                    first, end = store.log_bounds()
                    plan = plan_trim(first, end, readers, cap)
                    if plan is None:
                        break
                    for name, offset in sorted(plan.overrun.items()):
                        if offset < first:  # passed in an earlier pass: warned then
                            continue
                        log.warning(
                            "partition %s/%d: log retention (--log-retention-records %d) "
                            "trims below offset %d, past reader %s at offset %d: that reader "
                            "will fail",
                            broker.entity,
                            broker.partition_id,
                            cap,
                            plan.below,
                            name,
                            offset,
                        )
                    if store.trim_log(plan.below) < TRIM_LIMIT:
                        break
            except StoreError as exc:
                log.error(
                    "partition %s/%d: log retention failed: %s",
                    broker.entity,
                    broker.partition_id,
                    exc,
                )

    # ------------------------------------------------------------------ admin routes
    def admin_routes(self) -> Any:
        """The admin port's route table (sbemu.admin.routes.HttpRoutes): every route with its
        rule, decided by one access policy (sbemu.admin.policy)."""
        from .admin.access import Access
        from .admin.atom import add_atom_routes
        from .admin.dashboard import Dashboard
        from .admin.operator import add_operator_routes
        from .admin.policy import AMQP, AccessPolicy, NamespaceKeys
        from .admin.routes import HttpRoutes

        namespaces = self.config.namespaces
        manage = [
            (p.key_name, p.key)
            for ns in namespaces
            for p in ns.sas_policies
            if "Manage" in p.rights
        ]
        access = Access(self.host, manage)
        keys = [
            NamespaceKeys(
                ns.name,
                {p.key_name: p.key for p in ns.sas_policies},
                {p.key_name: frozenset(p.rights) for p in ns.sas_policies},
            )
            for ns in namespaces
        ]
        routes = HttpRoutes(AccessPolicy(self.host, keys, access, self.clock))
        add_operator_routes(routes, self)
        if self._websocket_handler is not None:  # AMQP over WebSockets (sbemu.endpoints)
            routes.add("GET", endpoints.PATH, self._websocket_handler, rule=AMQP)
        self.dashboard = Dashboard(self, access, WIRE_CODEC)
        self.dashboard.register(routes)
        add_atom_routes(routes, self.management)
        return routes

    # ------------------------------------------------------------------ runtime entities
    async def settle(self, brokers: list[PartitionBroker]) -> None:
        """Wait until the given partitions have nothing pending or in flight (and no log
        retention pass runs), so their stores can be closed."""
        wanted = set(brokers)
        assert self.router is not None
        self.router.flush_lazy()
        while True:
            assert self._commits is not None
            self._turn()
            if not self._commits.busy(wanted):
                break
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
        if self._retention is not None:
            await asyncio.wait([self._retention])

    def _entity_removed(self, entity: Any, queue_prefix: str | None) -> None:
        """An entity or subscription was deleted: every client's links on it detach."""
        for proto in list(self._connections):
            proto.entity_removed(entity, queue_prefix)

    # ------------------------------------------------------------------ entity settings
    def apply_entity_config(self, namespace: str, cfg: QueueConfig | TopicConfig) -> None:
        """(Re)apply a queue's or topic's runtime settings (Status, ForwardTo,
        ForwardDeadLetteredMessagesTo, AutoDeleteOnIdle, and its subscriptions'): takes effect
        at once, for open links too. The admin API calls this after a create or update."""
        assert self.router is not None
        self.router.apply_settings(namespace, cfg.name, entity_settings(cfg))

    # ------------------------------------------------------------------ AutoDeleteOnIdle
    def _delete_idle(self, entity: Any, sub_queue: str | None) -> None:
        """AutoDeleteOnIdle: delete an idle queue, topic or subscription and its data, as the
        admin API's DELETE does (links detached with not-found, catalog updated, stores closed
        after their last commit)."""
        assert self.management is not None
        ns = entity.spec.namespace
        if sub_queue is None:
            window = entity.settings.auto_delete_on_idle_ms
            what = f"{entity.spec.kind} {ns}/{entity.name}"
            job = self.management.delete_entity(ns, entity.name)
        else:
            window = entity.settings.subscriptions[sub_queue].auto_delete_on_idle_ms
            name = sub_queue.split("/", 1)[1]
            desc = self.management.subscription(entity, name) or {"name": name}
            what = f"subscription {ns}/{entity.name}/{desc['name']}"
            job = self.management.delete_subscription(ns, entity.name, name)
        task = asyncio.ensure_future(job)
        task.add_done_callback(
            functools.partial(self._idle_deleted, (entity, sub_queue), what, window)
        )

    def _idle_deleted(
        self, key: Any, what: str, window: int | None, task: asyncio.Future[None]
    ) -> None:
        from .errors import EntityNotFound

        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            log.warning("%s deleted: idle for its AutoDeleteOnIdle window (%s ms)", what, window)
        elif not isinstance(error, EntityNotFound):  # gone already: nothing to do
            log.warning(
                "idle deletion of %s failed (tried again after another window): %s", what, error
            )
            assert self.router is not None
            self.router.idle.failed(key, int(self.clock() * 1000))

    def _save_idle_times(self, now_ms: int) -> None:
        """At most every SAVE_INTERVAL_MS, save the changed AutoDeleteOnIdle last-activity
        times in a worker thread, so that the idle clocks survive a restart."""
        if self._idle_save is not None or now_ms - self._idle_saved_ms < IDLE_SAVE_INTERVAL_MS:
            return
        assert self.router is not None and self._loop is not None
        times = self.router.idle.snapshot()
        if times is None:
            return
        self._idle_saved_ms = now_ms
        tracker = self.router.idle
        future = self._loop.run_in_executor(
            self._executor, save_idle_times, self.data_dir, times, False
        )
        self._idle_save = future

        def done(f: asyncio.Future[None]) -> None:
            self._idle_save = None
            if not f.cancelled() and f.exception() is not None:
                tracker.changed = True  # try again at the next save
                log.warning("cannot save the AutoDeleteOnIdle times: %s", f.exception())

        future.add_done_callback(done)

    def _save_idle_times_now(self) -> None:
        """At a clean stop: the exact last-activity times (a restart takes them as they are)."""
        assert self.router is not None
        times = self.router.idle.snapshot(force=True)
        assert times is not None
        try:
            save_idle_times(self.data_dir, times, True)
        except OSError as exc:
            log.warning("cannot save the AutoDeleteOnIdle times: %s", exc)
