"""Settlement: what a client's outcome on a delivered message does [contract 5], and how an
error travels back to the client as an AMQP error.

The outcome mapping (apply_settlement) is shared by the connection's dispositions and the
transaction coordinator's commit; it names no connection. The connection keeps the raw
(cproton) settle paths of the hot loop and calls these for the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol

from proton import Condition, Delivery, symbol

from ..errors import InvalidOperation, MessageLockLost, ServerBusy, ServiceBusError, SessionLockLost
from ..partitions import COMPLETE, Entity, Outcome, SessionHandle
from . import codec
from .messages import plain_value

DEAD_LETTER_CONDITION = "com.microsoft:dead-letter"


class SettlementHost(Protocol):
    """What settling a delivery needs of its connection: the time, a way to flush output, and
    errors turned into AMQP conditions (counted for /metrics)."""

    on_output: Callable[[], None]

    @property
    def now_ms(self) -> int:
        """The current time in Unix milliseconds."""

    def condition_for(self, exc: ServiceBusError) -> Condition:
        """The AMQP error a client sees for `exc`."""


def error_condition(error: ServiceBusError) -> Condition:
    """An AMQP error with its info map always present.

    pyamqp reads `error[2]` (info) of a rejected outcome without checking its length, and proton
    drops a trailing null field, so an error without info crashes the SDK's send callback. The
    service puts a tracking id there; so do we.
    """
    return Condition(
        error.condition,
        error.description,
        {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex},
    )


def storage_error(error: Exception) -> ServiceBusError:
    """A store fault seen by a client: transient, retried by the SDKs."""
    return ServerBusy(f"The partition store is unavailable: {error}")


def settle_delivery(
    host: SettlementHost,
    entity: Entity,
    token: uuid.UUID,
    delivery: Delivery,
    outcome: Any,
    session: SessionHandle | None = None,
    answered: Callable[[], None] | None = None,
) -> None:
    """A client's outcome on a delivered (peek-locked) message, outside a transaction: apply
    it, then answer an unsettled disposition with the same outcome, or rejected with the
    error [contract 5.2]. (The plain accept is settled on the connection's raw fast path.)

    `session`: the link is a session receiver's. Its messages are locked by the session's
    lock, so once that is gone a lost message lock is the session's: session-lock-lost, as
    Azure answers (SDKs: SessionLockLost), not message-lock-lost.

    `answered`: called once the outcome is answered (a held detach may then go out)."""
    needs_reply = not delivery.settled

    def done(error: Exception | None) -> None:
        if answered is not None:
            answered()
        if needs_reply:
            if error is None:
                # [contract 5.2] echo the requested outcome type with no error.
                delivery.update(outcome)
            else:
                err = error if isinstance(error, ServiceBusError) else storage_error(error)
                if (
                    session is not None
                    and isinstance(err, MessageLockLost)
                    and not session.held(host.now_ms)
                ):
                    err = session_lock_lost(session.session_id)
                delivery.local.condition = host.condition_for(err)
                delivery.update(Delivery.REJECTED)
        delivery.settle()
        host.on_output()

    try:
        if outcome == Delivery.MODIFIED:
            details: Any = (delivery.remote.undeliverable, delivery.remote.annotations)
        elif outcome == Delivery.REJECTED:
            details = delivery.remote.condition
        else:
            details = None
        apply_settlement(entity, token, int(outcome), details, host.now_ms, done)
    except ServiceBusError as exc:
        done(exc)


def session_lock_lost(session_id: str) -> SessionLockLost:
    """The error for settling a message of a session whose lock this receiver no longer holds."""
    return SessionLockLost(
        f"The session lock for session '{session_id}' has expired or was lost. "
        "Accept the session again."
    )


def apply_settlement(
    entity: Entity,
    token: uuid.UUID,
    outcome: int,
    details: Any,
    now_ms: int,
    done: Callable[[Exception | None], None],
) -> None:
    """Apply an outcome [contract 5.1]: accepted completes, released unlocks, modified
    abandons (or defers when undeliverable-here), rejected dead-letters."""
    key = token.int  # inside partitions/ a lock is its token's int
    if outcome == Delivery.RELEASED:
        entity.release(key, now_ms)
        done(None)
        return
    if outcome == Delivery.ACCEPTED:
        settled = COMPLETE
    elif outcome == Delivery.MODIFIED:
        undeliverable, annotations = details or (False, None)
        overrides = encode_overrides(annotations)
        settled = Outcome.defer(overrides) if undeliverable else Outcome.abandon(overrides)
    elif outcome == Delivery.REJECTED:
        settled = Outcome.dead_letter(*dead_letter_details(details))
    else:
        done(InvalidOperation(f"Unsupported delivery outcome {outcome}."))
        return
    entity.settle(key, settled, now_ms, done)


def encode_overrides(annotations: object) -> dict[str, bytes] | None:
    """properties-to-modify (modified.message-annotations) as encoded application properties."""
    if not annotations or not isinstance(annotations, dict):
        return None
    return {str(k): codec.encode(plain_value(v)) for k, v in annotations.items()}


def condition_from_fields(error: Any) -> Condition | None:
    """An AMQP error (described list: condition, description, info) as a proton Condition."""
    if isinstance(error, Condition) or error is None:
        return error
    value = getattr(error, "value", error)
    if isinstance(value, list | tuple) and value:
        fields = list(value) + [None, None]
        info = fields[2] if isinstance(fields[2], dict) else None
        return Condition(str(fields[0]), fields[1], info)
    return None


def dead_letter_details(
    condition: Condition | None,
) -> tuple[str | None, str | None, dict[str, bytes] | None]:
    """Reason, description and other property updates from a rejected outcome's error."""
    if condition is None:
        return None, None, None
    info: dict[Any, Any] = dict(condition.info or {}) if isinstance(condition.info, dict) else {}
    info = {str(k): v for k, v in info.items()}
    reason = info.pop("DeadLetterReason", None)
    description = info.pop("DeadLetterErrorDescription", None)
    if description is None and condition.name == DEAD_LETTER_CONDITION:
        description = condition.description
    overrides = {k: codec.encode(plain_value(v)) for k, v in info.items()} or None
    return (
        str(reason) if reason is not None else None,
        str(description) if description is not None else None,
        overrides,
    )
