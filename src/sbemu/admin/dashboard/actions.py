"""What an operator does from the dashboard: partitions on and offline, a test send, resubmitting
dead letters, purges, creating and deleting entities, closing a connection; each a POST guarded
by admin/access.py, each over the same code paths as AMQP and the admin API."""

from __future__ import annotations

import logging
from typing import Any

from ...errors import ArgumentError, EntityNotFound
from ...partitions import Entity
from .. import explorer
from ..access import Principal
from ..bounded import INT64_MAX, bool_field, int_field, json_object, str_field
from ..http import Request
from .data import DashboardData

log = logging.getLogger("sbemu.dashboard")

MAX_BODY = 1024 * 1024  # bytes of a dashboard POST body
MAX_NAME = 260  # characters of a namespace or entity path in a POST
MAX_PARTITION = 65_535  # partition ids are the top 16 bits of a sequence number
MAX_RESUBMIT = 1000  # dead letters resubmitted in one POST


class DashboardActions:
    """The POST handlers; each drops the cached snapshot after a change."""

    def __init__(self, data: DashboardData, codec: explorer.WireCodec) -> None:
        self.data = data
        self.server = data.server
        self.codec = codec

    def routes(self) -> list[tuple[str, Any]]:
        """(path, handler) of every action."""
        return [
            ("/api/partition", self.partition),
            ("/api/send", self.send),
            ("/api/resubmit", self.resubmit),
            ("/api/purge", self.purge),
            ("/api/entity/create", self.create_entity),
            ("/api/entity/delete", self.delete_entity),
            ("/api/connections/close", self.close),
        ]

    def partition(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        router = self.server.router
        assert router is not None
        status = router.set_partition_online(
            str_field(body, "ns", MAX_NAME),
            str_field(body, "entity", MAX_NAME),
            int_field(body, "partition", 0, MAX_PARTITION),
            bool_field(body, "online"),
        )
        log.info(
            "dashboard: partition %s of %s/%s is now %s",
            body["partition"],
            body["ns"],
            body["entity"],
            "online" if body["online"] else "offline",
        )
        self.data.invalidate()
        self.server.wake()
        return status

    async def send(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.data.entity(
            str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME)
        )
        now_ms = self.data.now_ms()
        data = explorer.build_test_message(body, now_ms)
        done, committed = explorer.completion()
        numbers = explorer.send_bytes(
            self.codec, entity, data, self.data.max_size(entity.spec.namespace), now_ms, done
        )
        await committed
        self.data.invalidate()
        return {"ok": True, "sequence_numbers": numbers}

    async def resubmit(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.data.entity(
            str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME)
        )
        given = body.get("sequence_numbers") or []
        if not isinstance(given, list) or len(given) > MAX_RESUBMIT:
            raise ArgumentError(f"sequence_numbers: a list of at most {MAX_RESUBMIT} numbers.")
        numbers = [int_field({"n": n}, "n", 0, INT64_MAX) for n in given]
        if not numbers:
            raise ArgumentError("sequence_numbers: pick at least one dead-lettered message.")
        results = await explorer.resubmit(
            self.codec,
            entity,
            body.get("subscription") or None,
            numbers,
            self.data.max_size(entity.spec.namespace),
            self.data.now_ms,
        )
        self.data.invalidate()
        return {"results": results}

    async def purge(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.data.entity(
            str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME)
        )
        if body.get("state") == "all":
            return await self._purge_entity(entity)
        result = await explorer.purge(
            entity,
            body.get("subscription") or None,
            str(body.get("state") or "active"),
            self.data.now_ms,
        )
        log.info(
            "dashboard: purged %s (%s): %d messages",
            result["path"],
            body.get("state"),
            result["removed"],
        )
        self.data.invalidate()
        return result

    def create_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        """A queue or topic created as the admin API creates it (same checks, same catalog)."""
        body = _json_body(request)
        kind = str_field(body, "kind", 10)
        if kind not in ("queue", "topic"):
            raise ArgumentError(f"kind must be 'queue' or 'topic', not {kind!r}")
        given: dict[str, Any] = {"enable_partitioning": bool_field(body, "partitioned", False)}
        if kind == "queue":
            given["requires_session"] = bool_field(body, "requires_session", False)
        entity = self.server.management.create_entity(
            str_field(body, "ns", MAX_NAME), kind, str_field(body, "name", MAX_NAME), given
        )
        log.info("dashboard: created %s %s/%s", kind, entity.spec.namespace, entity.name)
        self.data.invalidate()
        return {"namespace": entity.spec.namespace, "entity": entity.name, "kind": kind}

    async def delete_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        """A queue or topic deleted as the admin API deletes it (its messages are gone)."""
        body = _json_body(request)
        entity = self.data.entity(
            str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME)
        )
        await self.server.management.delete_entity(entity.spec.namespace, entity.name)
        log.info(
            "dashboard: deleted %s %s/%s", entity.spec.kind, entity.spec.namespace, entity.name
        )
        self.data.invalidate()
        return {"namespace": entity.spec.namespace, "entity": entity.name, "deleted": True}

    async def _purge_entity(self, entity: Entity) -> dict[str, Any]:
        """Every message of the entity, all sub-queues and states: the admin API's purge."""
        router = self.server.router
        assert router is not None
        job = router.start_purge(entity.spec.namespace, entity.name)
        await explorer.step_through(job, self.data.now_ms)
        done, committed = explorer.completion()
        job.finish(done)
        counts = job.counts
        await committed
        log.info("dashboard: purged every message of %s/%s", entity.spec.namespace, entity.name)
        self.data.invalidate()
        return {"path": entity.name, "removed": sum(counts.values()), "locked_kept": 0}

    def close(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        wanted = int_field(body, "id", 0, INT64_MAX)
        for proto in list(self.server.connections):
            if proto.connection_id == wanted:
                proto.close_by_operator("Closed from the sbemu dashboard.")
                log.info("dashboard: closed connection %d", wanted)
                return {"ok": True, "id": wanted}
        raise EntityNotFound(f"No open connection with id {wanted}.")


def _json_body(request: Request) -> dict[str, Any]:
    """The POST's JSON object, bounded (depth, numbers: sbemu.admin.bounded)."""
    return json_object(request.body, MAX_BODY)
