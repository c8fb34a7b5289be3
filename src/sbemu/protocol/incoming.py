"""Flow and incoming transfers for AmqpConnection: sender credit, transfers read into messages
(batches, transactions), and the settlement of what the client sent once it committed. A mixin
of AmqpConnection (connection.py keeps the state machine and the event loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from proton import (
    Condition,
    Delivery,
    Link,
    Message,
)

from ..errors import (
    InvalidOperation,
    MessageSizeExceeded,
    ServiceBusError,
)
from .links import (
    CoordinatorLink,
    LinkPhase,
    LinkState,
    ReceiveLink,
    ReplyLink,
    RequestLink,
    SendLink,
)
from .messages import scan_transfer
from .services import NamespaceInfo
from .settlement import storage_error
from .sizes import batch_limit, message_limit
from .transactions import (
    TRANSACTIONAL_STATE,
    TransactionCoordinator,
    transactional_outcome,
)

SENDER_CREDIT = 1000  # credit a sender link is topped up to
_WAITING = LinkPhase.WAITING


class IncomingTransfers:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection

        def _flush_replies(self, reply: ReplyLink) -> None: ...

        _links: dict[Link, LinkState]

        def _on_disposition(self, state: ReceiveLink, delivery: Delivery) -> None: ...
        def _on_request(self, state: RequestLink, delivery: Delivery, data: bytes) -> None: ...
        def close_link(self, link: Link, exc: ServiceBusError) -> None: ...
        def condition_for(self, exc: ServiceBusError) -> Condition: ...

        namespace: NamespaceInfo

        @property
        def now_ms(self) -> int: ...

        on_output: Callable[[], None]
        transactions: TransactionCoordinator

    def _on_link_flow(self, link: Link) -> None:
        # (a receive link's or a send link's flow never gets here: messageevents takes them on
        # the C layer, a receive link's served after the read's dispositions)
        state = self._links.get(link)
        if isinstance(state, ReplyLink):
            self._flush_replies(state)
        elif isinstance(state, SendLink | RequestLink):
            self._top_up_credit(link)

    @staticmethod
    def _top_up_credit(link: Link) -> None:
        if link.credit < SENDER_CREDIT // 2:
            link.flow(SENDER_CREDIT - link.credit)

    # ------------------------------------------------------------------ deliveries in
    def _on_delivery(self, link: Link, delivery: Delivery) -> None:
        state = self._links.get(link)
        if state is None:
            if link.is_receiver and delivery.readable and not delivery.partial:
                link.recv(delivery.pending)
                link.advance()
            delivery.settle()
            return
        if isinstance(state, ReceiveLink):
            self._on_disposition(state, delivery)
            return
        if isinstance(state, ReplyLink):
            if delivery.settled:
                delivery.settle()
            return
        if delivery.aborted:
            delivery.settle()
            return
        if delivery.partial:
            limit = message_limit(getattr(state, "entity", None), self.namespace)
            if isinstance(state, SendLink) and delivery.pending > limit + 64 * 1024:
                # A message far beyond the limit: do not buffer it; close the link.
                self.close_link(
                    link,
                    MessageSizeExceeded(
                        f"The received message exceeds the maximum message size of {limit} bytes."
                    ),
                )
            return
        data = link.recv(delivery.pending) or b""  # an empty transfer payload comes back as None
        link.advance()
        self._top_up_credit(link)
        if isinstance(state, CoordinatorLink):
            control = Message()
            try:
                control.decode(data)
            except Exception:
                control.body = None
            self.transactions.on_control(delivery, control.body)
            return
        if isinstance(state, SendLink):
            self._on_message(state, delivery, data)
        else:
            self._on_request(state, delivery, data)

    def _on_message(self, state: SendLink, delivery: Delivery, data: bytes) -> None:
        if delivery.remote_state == TRANSACTIONAL_STATE:
            self._on_transactional_message(state, delivery, data)
            return
        try:
            messages = scan_transfer(
                data,
                message_limit(state.entity, self.namespace),
                state.entity.subscriptions is not None,
                batch_limit(self.namespace),
            )
            state.entity.send(
                messages, self.now_ms, lambda error: self._settle_incoming(delivery, error)
            )
        except ServiceBusError as exc:
            self._settle_incoming(delivery, exc)

    def _on_transactional_message(self, state: SendLink, delivery: Delivery, data: bytes) -> None:
        """A send inside a transaction: staged, answered transactional-state{accepted}."""
        data_fields = list(delivery.remote.data or []) + [None]
        txn = None
        try:
            txn = self.transactions.transaction(data_fields[0])
            messages = scan_transfer(
                data,
                message_limit(state.entity, self.namespace),
                state.entity.subscriptions is not None,
                batch_limit(self.namespace),
            )
            if state.entity.spec.requires_session:
                for msg in messages:
                    if msg.session_id is None:
                        raise InvalidOperation(
                            "A transactional message to a session-enabled entity must have a "
                            "SessionId [P16]."
                        )
            self.transactions.stage_send(txn, state.entity, messages)
        except ServiceBusError as exc:
            if txn is not None:
                self.transactions.fail(txn, exc.description)
            self._settle_incoming(delivery, exc)
            return
        delivery.local.data = transactional_outcome(txn.txn_id, Delivery.ACCEPTED)
        delivery.update(TRANSACTIONAL_STATE)
        delivery.settle()
        self.on_output()

    def _settle_incoming(self, delivery: Delivery, error: Exception | None) -> None:
        if error is None:
            delivery.update(Delivery.ACCEPTED)
        else:
            if not isinstance(error, ServiceBusError):
                error = storage_error(error)
            delivery.local.condition = self.condition_for(error)
            delivery.update(Delivery.REJECTED)
        delivery.settle()
        self.on_output()
