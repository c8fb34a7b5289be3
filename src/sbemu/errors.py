"""Typed errors shared by both sides, each carrying the AMQP condition the SDKs map.

Raised deep (router, broker, store, management) and turned into a disposition,
detach, or management status in exactly one place per scope on the protocol side.
Conditions and status codes follow the contract, section 6.4 and 8.
"""

from __future__ import annotations


class ServiceBusError(Exception):
    """An error the peer should see, with its AMQP condition and management status code."""

    condition = "amqp:internal-error"
    status_code = 500

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class EntityNotFound(ServiceBusError):
    condition = "amqp:not-found"
    status_code = 404


class EntityAlreadyExists(ServiceBusError):
    condition = "com.microsoft:entity-already-exists"
    status_code = 409


class Unauthorized(ServiceBusError):
    condition = "amqp:unauthorized-access"
    status_code = 401


class InvalidOperation(ServiceBusError):
    condition = "amqp:not-allowed"
    status_code = 400


class ArgumentError(ServiceBusError):
    condition = "com.microsoft:argument-error"
    status_code = 400


class ArgumentOutOfRange(ServiceBusError):
    condition = "com.microsoft:argument-out-of-range"
    status_code = 400


class MessageSizeExceeded(ServiceBusError):
    condition = "amqp:link:message-size-exceeded"
    status_code = 400


class MessageLockLost(ServiceBusError):
    condition = "com.microsoft:message-lock-lost"
    status_code = 410


class SessionLockLost(ServiceBusError):
    condition = "com.microsoft:session-lock-lost"
    status_code = 410


class SessionCannotBeLocked(ServiceBusError):
    condition = "com.microsoft:session-cannot-be-locked"
    status_code = 410


class MessageNotFound(ServiceBusError):
    condition = "com.microsoft:message-not-found"
    status_code = 404


class QuotaExceeded(ServiceBusError):
    condition = "amqp:resource-limit-exceeded"
    status_code = 403


class ServerBusy(ServiceBusError):
    condition = "com.microsoft:server-busy"
    status_code = 503


class OperationTimeout(ServiceBusError):
    condition = "com.microsoft:timeout"
    status_code = 408


class NotImplementedOperation(ServiceBusError):
    condition = "amqp:not-implemented"
    status_code = 501


class InternalError(ServiceBusError):
    condition = "amqp:internal-error"
    status_code = 500


class EntityDisabled(ServiceBusError):
    """The entity's Status forbids the operation (MessagingEntityDisabledException)."""

    condition = "com.microsoft:entity-disabled"
    status_code = 400


class MalformedInput(ServiceBusError):
    """The peer sent a value that cannot be decoded (e.g. a string that is not UTF-8)."""

    condition = "amqp:decode-error"
    status_code = 400
