"""Messages out on receive links for AmqpConnection: a run of deliveries written on proton's
C layer (peek-locked ones tagged with their lock tokens, their bytes from outgoing.py;
receive-and-delete ones pre-settled), and large ones handed to the engine a slice per pass
(largedelivery.py). The client's outcomes on them are messageevents.py's. A mixin of
AmqpConnection (connection.py keeps the state machine and the event loop).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from operator import length_hint
from typing import TYPE_CHECKING, Any

from cproton_ffi import ffi as _ffi  # the binding's C layer, for raw delivery tags
from cproton_ffi import lib as _lib
from proton import Condition, Delivery

from ..errors import ServiceBusError
from ..partitions import Delivered, Taken
from .backpressure import OutputGate
from .detaching import DetachHold
from .largedelivery import LARGE_DELIVERY, SEND_SLICE, LargeSend, Pieces
from .links import LinkPhase, ReceiveLink, ReplyLink
from .messages import encode_delivery, encode_delivery_parts
from .outgoing import locked_deliveries
from .transactions import TransactionCoordinator

_NULL = _ffi.NULL
# The delivery tag passed to pn_delivery (by value): 16 bytes that send_deliveries fills for
# each peek-locked delivery (proton copies them), no cdata made per delivery.
_TAG_BYTES = _ffi.new("char[16]")
_TAG_STRUCT = _ffi.new("pn_delivery_tag_t *")
_TAG_STRUCT.size = 16
_TAG_STRUCT.start = _TAG_BYTES
_TAG = _TAG_STRUCT[0]
_pn_link_advance = _lib.pn_link_advance  # bound once (`lib.name` is a lookup at every call)


class OutgoingDeliveries:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _detach_hold: DetachHold
        gate: OutputGate

        def condition_for(self, exc: ServiceBusError) -> Condition: ...

        @property
        def now_ms(self) -> int: ...

        on_output: Callable[[], None]
        closed: bool
        defer: Callable[[Callable[[], None]], object] | None
        transactions: TransactionCoordinator

    def send_delivery(self, state: ReceiveLink, delivered: Delivered) -> None:
        self.send_deliveries(state, [(delivered.record, delivered.lock)], delivered.partition_id)

    def send_deliveries(self, state: ReceiveLink, taken: Taken, partition_id: int | None) -> None:
        link = state.link._impl  # on proton's C layer: no wrapper per delivery
        lib = _lib
        size = 0  # the run's bytes, for the output bound (backpressure.py)
        large = LARGE_DELIVERY  # a larger one goes a slice per loop pass (largedelivery.py)
        if state.peek_lock:  # every message has its lock: the run's tags and bytes at once,
            # each tag the lock token in .NET Guid byte order (UUID.bytes_le) [contract 4.6]
            unsettled = state.unsettled
            tag_bytes, tag, memmove = _TAG_BYTES, _TAG, _ffi.memmove
            delivery, send, advance = lib.pn_delivery, lib.pn_link_send, _pn_link_advance
            items = iter(locked_deliveries(taken, partition_id))
            for tag_value, data, key in items:
                # proton copies the tag (pn_delivery): the one buffer serves every delivery
                memmove(tag_bytes, tag_value, 16)
                d = delivery(link, tag)
                unsettled[tag_value] = key
                n = len(data)
                if n > large:  # the rest of the run once it is complete
                    rest = taken[len(taken) - length_hint(items) :]
                    then = partial(self.send_deliveries, state, rest, partition_id)
                    self._start_large(state, d, data, False, then)
                    break
                send(link, data, n)  # bytes: below LARGE_DELIVERY
                advance(link)
                size += n
            self.gate.produced(size)
            self.on_output()
            return
        runs = iter(taken)
        for rec, _lock in runs:  # receive-and-delete: no locks
            # The delivery-annotations the service sends are the sender's or {}, and the
            # delivery tag is empty (a settled delivery needs no unique tag [AMQP 2.6.12]; the
            # SDK suite's backcompat tests expect delivery_tag None). proton writes it as null;
            # frames.py sends it as an empty binary, which go-amqp requires on a first
            # transfer.
            delivery = lib.pn_delivery(link, (0, _NULL))
            if len(rec.tail) > large:  # its parts, not joined (largedelivery.py)
                parts = encode_delivery_parts(rec, partition_id, None, delivery_stamps=[])
                then = partial(self.send_deliveries, state, list(runs), partition_id)
                self._start_large(state, delivery, Pieces(parts), True, then)
                break
            data = encode_delivery(rec, partition_id, None, delivery_stamps=[])
            lib.pn_link_send(link, data, len(data))
            lib.pn_link_advance(link)
            lib.pn_delivery_settle(delivery)  # receive-and-delete: pre-settled [contract 4.2]
            size += len(data)
        self.gate.produced(size)
        # Dispatch may run from another connection's commit: ask the adapter to flush us.
        self.on_output()

    def _start_large(
        self,
        state: ReceiveLink | ReplyLink,
        delivery: Any,
        data: Pieces | bytes,
        settle: bool,
        then: Callable[[], None],
    ) -> None:
        """Send `delivery` (the link's current) a slice per loop pass (largedelivery.py);
        `then` once it is complete."""
        job = LargeSend(state.link._impl, delivery, data, settle, then)
        state.sending = job
        self.gate.begin_send()
        self._large_step(state, job)

    def _large_step(self, state: ReceiveLink | ReplyLink, job: LargeSend) -> None:
        if state.sending is not job:
            return
        gate = self.gate
        if self.closed or state.phase is LinkPhase.DETACHED:  # the rest is dropped
            state.sending = None
            gate.end_send()
            return
        defer = self.defer
        if defer is not None and not gate.room:  # the peer has not taken the last slice yet
            gate.wait_for_room(partial(defer, partial(self._large_step, state, job)))
            return
        gate.produced(job.step(SEND_SLICE if defer is not None else job.size))
        self.on_output()
        if not job.done:
            assert defer is not None
            defer(partial(self._large_step, state, job))
            return
        state.sending = None
        if gate.end_send():
            self.on_output()  # what waited behind it is served at the next flush
        job.then()


def raw_tag(delivery: Delivery) -> bytes:
    """A delivery tag as bytes: the binding's `tag` decodes it as UTF-8, which lock tokens are not."""
    tag = _lib.pn_delivery_tag(delivery._impl)
    if tag.size == 0:  # an empty tag has no buffer at all (start is NULL)
        return b""
    return bytes(_ffi.unpack(tag.start, tag.size))
