"""Whether one partition serves: its state, and the one owner of what decides it.

A partition is in one of four states (PartitionHealth):

- ONLINE: sends and receives go on.
- FULL: receives go on, new messages are refused: the stored bytes reached the entity's
  MaxSizeInMegabytes (Azure's quota error, until messages are removed), or the store's disk
  is low on room (server-busy, which the SDKs retry, until there is room again).
- OFFLINE: taken out of service by the operator (no sends, no receives: its messages wait,
  neither lost nor delivered).
- FAULTED: a store I/O fault; the partition reopens its store by itself (the broker's
  recover(now_ms), from the router's timer), waiting twice as long after each failed try.

The router, the forwarder and the admin API ask this object (`serving`, `accepting`,
`state`); only the broker changes it, as commits fail and land and as the operator asks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from ..errors import QuotaExceeded, ServerBusy, ServiceBusError
from .store import PartitionStore, StoreError, StoreFull

FAULT_RETRY_MS = 1_000  # first wait before reopening a store after an I/O fault (then doubled)
FAULT_RETRY_MAX_MS = 30_000  # longest wait between two reopen attempts
ROOM_RECHECK_MS = 1_000  # how often a partition whose disk is low on room measures it again


class PartitionHealth(enum.Enum):
    """The service state of one partition (see the module comment)."""

    ONLINE = "online"
    FULL = "full"
    OFFLINE = "offline"
    FAULTED = "faulted"


class Health:
    """Quota, disk room, store faults and their back-off, and operator holds of one partition."""

    __slots__ = (
        "store",
        "entity",
        "partition_id",
        "partitioned",
        "max_bytes",
        "stored_bytes",
        "full_at",
        "faulted",
        "held_offline",
        "reason",
        "fault_retry_at_ms",
        "backoff_ms",
        "room_checked_ms",
    )

    def __init__(
        self, store: PartitionStore, entity: str, partition_id: int, partitioned: bool
    ) -> None:
        self.store = store
        self.entity = entity
        self.partition_id = partition_id
        self.partitioned = partitioned
        # MaxSizeInMegabytes of this partition in bytes (0: no quota), enforced on the stored
        # byte counts (stored_bytes: every sub-queue, DLQ and scheduled included, uncommitted
        # sends too) before anything is stored, so the store's map never fills at the quota.
        self.max_bytes = 0
        self.stored_bytes = 0
        # stored_bytes when a send was last refused for the quota: the partition counts as full
        # (not accepting) until messages are removed, then sends are tried again
        self.full_at: int | None = None
        self.faulted = False  # a store I/O fault: recover() reopens the store
        self.held_offline = False  # taken offline by the operator: recover() waits for online
        self.reason: str | None = None  # why the partition is out of service
        self.fault_retry_at_ms: int | None = None  # when recover() tries the store next
        self.backoff_ms = FAULT_RETRY_MS
        self.room_checked_ms = 0  # when check_room() last measured the disk

    # ---------------------------------------------------------------- reading
    @property
    def serving(self) -> bool:
        """Whether the partition is in service (ONLINE or FULL): sends may be tried, receivers
        served, its timers run."""
        return not (self.faulted or self.held_offline)

    @property
    def accepting(self) -> bool:
        """Whether new messages may fit: the stored bytes are below MaxSizeInMegabytes and no
        send was refused for the quota since messages were last removed, and the store's disk
        has room beyond its reserve (diskroom.py)."""
        return not self.store.room.low and (
            self.max_bytes <= 0 or (self.stored_bytes < self.max_bytes and self.full_at is None)
        )

    @property
    def state(self) -> PartitionHealth:
        """The partition's state (an operator hold is reported before a fault)."""
        if self.held_offline:
            return PartitionHealth.OFFLINE
        if self.faulted:
            return PartitionHealth.FAULTED
        return PartitionHealth.ONLINE if self.accepting else PartitionHealth.FULL

    @property
    def describe(self) -> str | None:
        """Why the partition is not ONLINE, for the dashboard (None: it is)."""
        if self.reason is not None:
            return self.reason
        return "disk almost full" if self.store.room.low else None

    # ---------------------------------------------------------------- quota and room
    def add_stored(self, nbytes: int) -> None:
        """Messages were stored (or removed: negative) or will be with the staged batch."""
        self.stored_bytes += nbytes
        if self.full_at is not None and self.stored_bytes < self.full_at:
            self.full_at = None  # messages were removed: there may be room again

    def reloaded(self, stored_bytes: int) -> None:
        """The byte counts were read from the store again: the quota is checked afresh."""
        self.stored_bytes = stored_bytes
        self.full_at = None

    def disk_full_error(self) -> ServerBusy:
        """What a send gets while the store's disk is low on room (server-busy: the SDKs
        retry it; receives and completions go on and make room)."""
        where = f"partition {self.partition_id} of '{self.entity}'"
        return ServerBusy(
            f"The disk under {where} is almost full (what is left is kept for completions): "
            "no new messages until there is room again. "
            "Receive or delete messages, or give the disk room; the send can be retried."
        )

    @property
    def room_low(self) -> bool:
        """Whether the store's disk is low on room (what is left is kept for completions)."""
        return self.store.room.low

    def check_room(self, now_ms: int) -> None:
        """While the store's disk is low on room: measure it again (at most every
        ROOM_RECHECK_MS), so sends are taken again once there is room (messages removed, the
        disk grown) even when nothing commits meanwhile."""
        if self.store.room.low and now_ms - self.room_checked_ms >= ROOM_RECHECK_MS:
            self.room_checked_ms = now_ms
            self.store.room.measure()

    def quota_error(self, incoming: int) -> ServiceBusError | None:
        """Azure's quota error if `incoming` more bytes do not fit (None: they fit); the
        disk_full_error() while the disk is low on room."""
        room = self.store.room
        if room.low or (room.bytes is not None and 2 * incoming > room.bytes):
            return self.disk_full_error()  # (twice the bytes: LMDB's pages, a commit's copies)
        if self.max_bytes <= 0 or self.stored_bytes + incoming <= self.max_bytes:
            return None
        where = f"'{self.entity}'" + (f" partition {self.partition_id}" if self.partitioned else "")
        return QuotaExceeded(
            f"The maximum entity size has been reached or exceeded for {where}. Size of entity "
            f"in bytes:{self.stored_bytes}, Max entity size in bytes:{self.max_bytes}. "
            "Receive or delete messages to make room; sends are accepted again as soon as "
            "they fit."
        )

    def refuse_over_quota(self, incoming: int) -> ServiceBusError | None:
        """quota_error(), and if there is no room the partition counts as full (accepting is
        False) until messages are removed."""
        error = self.quota_error(incoming)
        if isinstance(error, QuotaExceeded):
            self.full_at = self.stored_bytes
        return error

    def send_error(self) -> ServiceBusError | None:
        """What a send pinned to this partition gets now (None: it may go) [P7]; a full
        partition answers server-busy here (the entity decides whether all are full)."""
        if not self.serving:
            return ServerBusy(
                f"Partition {self.partition_id} of '{self.entity}' is unavailable "
                f"({self.reason or 'offline'}); the send can be retried."
            )
        if not self.accepting:
            if self.store.room.low:
                return self.disk_full_error()
            return ServerBusy(
                f"Partition {self.partition_id} of '{self.entity}' is full; the send can be "
                "retried."
            )
        return None

    # ---------------------------------------------------------------- faults
    def commit_landed(self) -> None:
        """A commit landed: the store works, the next fault waits the first back-off again."""
        self.backoff_ms = FAULT_RETRY_MS  # (recover() alone does not reset it)

    def store_failed(
        self, error: BaseException, in_flight: bool, reload: Callable[[], None]
    ) -> ServiceBusError:
        """Record a store fault (`in_flight`: a commit is still on its way); returns the error
        to report. A full map grows and the partition reloads from its store (`reload`); any
        other fault (or a map that cannot grow) takes the partition out of service."""
        where = f"partition {self.partition_id} of '{self.entity}'"
        if isinstance(error, StoreFull) and not in_flight and self.store.grow():
            try:
                reload()
            except StoreError as exc:
                error = exc
            else:
                return ServerBusy(
                    f"The store of {where} was full and has grown to {self.store.map_size} "
                    "bytes; the operation can be retried."
                )
        self.faulted = True
        self.fault_retry_at_ms = None  # the next recover(now_ms) schedules the first retry
        self.reason = f"store fault: {error}"
        return ServerBusy(f"The store of {where} is unavailable: {error}")

    def recover(self, now_ms: int, in_flight: bool, reload: Callable[[], None]) -> bool:
        """After a store fault: reopen the store and reload the partition (`reload`) once the
        retry time has come, backing off while the fault lasts (the first call after a fault
        only schedules the first retry). Nothing happens while a commit is in flight or the
        operator holds the partition. True: the store works again (the caller brings the
        partition back online)."""
        if in_flight or not self.faulted or self.held_offline:
            return False  # (a batch still in flight must land before the store is reopened)
        if self.fault_retry_at_ms is None:
            self.fault_retry_at_ms = now_ms + self.backoff_ms
            return False
        if now_ms < self.fault_retry_at_ms:
            return False
        try:
            self.store.reopen()
            reload()
        except StoreError as exc:
            self.backoff_ms = min(self.backoff_ms * 2, FAULT_RETRY_MAX_MS)
            self.fault_retry_at_ms = now_ms + self.backoff_ms
            self.reason = f"store fault: {exc}"
            return False
        # The next wait is longer until a commit lands (commit_landed resets it): a store that
        # opens but fails every commit (a full disk) is retried less and less often, not
        # reopened every second for good.
        self.backoff_ms = min(self.backoff_ms * 2, FAULT_RETRY_MAX_MS)
        self.faulted = False
        self.fault_retry_at_ms = None
        return True

    def hold(self, online: bool, reason: str | None = None) -> None:
        """The operator takes the partition out of service (or lets it back: for a faulted
        store the caller retries at once, see PartitionBroker.set_online)."""
        self.held_offline = not online
        if online and self.faulted:
            self.fault_retry_at_ms = -1  # at once
            return
        self.reason = None if online else (reason or "taken offline")
        if online:
            self.full_at = None  # sends are tried against the quota again
