"""The Service Bus side: entities, their partition brokers and the on-disk store.

This is the front door: the rest of sbemu imports these names from ``sbemu.partitions`` and
nothing from its modules (an import-linter contract in pyproject.toml says so; tests may reach
inside). What a room outside uses, by who uses it:

- the running process (server, commit loop): the ``Router`` over every entity, the partition
  brokers it commits (``PartitionBroker``, ``CommitThreads``/``GroupCommit``), start-up helpers
  (``lock_data_dir``, ``sweep_lock_files``, ``load_idle_times``);
- every side: ``Done``, the completion an operation calls once its group commit landed, and
  ``join_completions`` (one completion for several operations);
- the AMQP side: ``Entity`` (send, settle with an ``Outcome``, sessions), ``EntityView`` and ``SessionHandle``
  (receive), ``Delivered``/``Taken`` (what a receiver is handed), the message values
  (``IncomingMessage``, ``MessageRecord``, ``MessageState``), ``token_of``;
- the admin side: the entity's sub-queue names (``MAIN``, ``DLQ_SUFFIX``, ``SCHEDULED_QUEUE``,
  ``TRANSFER_DLQ_SUFFIX``), entity specs, statistics, and the operator's operations on an
  entity (``locked_until``, ``purge_state``, ``message_counts``, a ``PurgeJob`` to step);
- the log readers (sbemu.logs, sparkjobs): the partition log's format (records and their keys,
  ``LOG_FIELDS``; the log and meta databases' names and keys).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .broker import DLQ_SUFFIX, SEQUENCE_BITS, PartitionBroker
    from .commits import COMMITS_PER_ENTITY, CommitJob, CommitThreads, GroupCommit
    from .completions import Done, join_completions
    from .dispatch import Delivered, EntityView, SessionHandle, Taken
    from .entity import Entity
    from .forwarding import TRANSFER_DLQ_SUFFIX, forward_target
    from .idle import SAVE_INTERVAL_MS, load_idle_times, save_idle_times
    from .layout import StorageLayoutError, entity_dir, lock_data_dir
    from .lockfile import sweep_lock_files
    from .logdb import NEXT_OFFSET_META, TRIM_LIMIT, TRIMMED_BELOW_META, read_log_events
    from .outcomes import COMPLETE, Outcome, OutcomeKind
    from .purging import PurgeJob
    from .records import (
        LOG_FIELDS,
        LOG_SCHEMA_VERSION,
        IncomingMessage,
        LogEvent,
        MessageRecord,
        MessageState,
        decode_log,
        encode_log,
        log_extent,
    )
    from .registry import locked_until, message_counts, purge_state
    from .router import Router, resolve_view_name
    from .specs import MAIN, EntitySpec, entity_settings, queue_spec, topic_spec
    from .stats import ServerStats, totals
    from .store import LOG_DB, META_DB, PartitionStore, StoreError
    from .subscriptions import RuleDefinitionError, RuleSource, subscription_queue
    from .tokens import token_of
    from .transitions import SCHEDULED_QUEUE
    from .writebatch import WriteBatch

# Where each name lives. The names are loaded on first use (PEP 562), so a room that needs one
# module (the log readers: records, logdb, store) does not load the whole Service Bus side:
# a Spark worker importing sbemu.logs pays for the log format, not for the broker.
_HOME = {
    "DLQ_SUFFIX": "broker",
    "PartitionBroker": "broker",
    "SEQUENCE_BITS": "broker",
    "COMMITS_PER_ENTITY": "commits",
    "CommitJob": "commits",
    "CommitThreads": "commits",
    "GroupCommit": "commits",
    "Done": "completions",
    "join_completions": "completions",
    "Delivered": "dispatch",
    "EntityView": "dispatch",
    "SessionHandle": "dispatch",
    "Taken": "dispatch",
    "Entity": "entity",
    "COMPLETE": "outcomes",
    "Outcome": "outcomes",
    "OutcomeKind": "outcomes",
    "TRANSFER_DLQ_SUFFIX": "forwarding",
    "forward_target": "forwarding",
    "SAVE_INTERVAL_MS": "idle",
    "load_idle_times": "idle",
    "save_idle_times": "idle",
    "StorageLayoutError": "layout",
    "entity_dir": "layout",
    "lock_data_dir": "layout",
    "sweep_lock_files": "lockfile",
    "NEXT_OFFSET_META": "logdb",
    "TRIMMED_BELOW_META": "logdb",
    "TRIM_LIMIT": "logdb",
    "read_log_events": "logdb",
    "IncomingMessage": "records",
    "LOG_FIELDS": "records",
    "LOG_SCHEMA_VERSION": "records",
    "LogEvent": "records",
    "MessageRecord": "records",
    "MessageState": "records",
    "decode_log": "records",
    "encode_log": "records",
    "log_extent": "records",
    "PurgeJob": "purging",
    "locked_until": "registry",
    "message_counts": "registry",
    "purge_state": "registry",
    "Router": "router",
    "resolve_view_name": "router",
    "EntitySpec": "specs",
    "MAIN": "specs",
    "entity_settings": "specs",
    "queue_spec": "specs",
    "topic_spec": "specs",
    "ServerStats": "stats",
    "totals": "stats",
    "LOG_DB": "store",
    "META_DB": "store",
    "PartitionStore": "store",
    "StoreError": "store",
    "RuleDefinitionError": "subscriptions",
    "RuleSource": "subscriptions",
    "subscription_queue": "subscriptions",
    "token_of": "tokens",
    "SCHEDULED_QUEUE": "transitions",
    "WriteBatch": "writebatch",
}


def __getattr__(name: str) -> Any:
    """A front-door name, imported from its module the first time it is asked for."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "COMMITS_PER_ENTITY",
    "COMPLETE",
    "DLQ_SUFFIX",
    "LOG_DB",
    "LOG_FIELDS",
    "LOG_SCHEMA_VERSION",
    "MAIN",
    "META_DB",
    "NEXT_OFFSET_META",
    "SAVE_INTERVAL_MS",
    "SCHEDULED_QUEUE",
    "SEQUENCE_BITS",
    "TRANSFER_DLQ_SUFFIX",
    "TRIMMED_BELOW_META",
    "TRIM_LIMIT",
    "CommitJob",
    "CommitThreads",
    "Delivered",
    "Done",
    "Entity",
    "EntitySpec",
    "EntityView",
    "GroupCommit",
    "IncomingMessage",
    "LogEvent",
    "MessageRecord",
    "MessageState",
    "Outcome",
    "OutcomeKind",
    "PartitionBroker",
    "PartitionStore",
    "Router",
    "RuleDefinitionError",
    "RuleSource",
    "ServerStats",
    "SessionHandle",
    "StorageLayoutError",
    "StoreError",
    "Taken",
    "WriteBatch",
    "decode_log",
    "encode_log",
    "entity_dir",
    "entity_settings",
    "forward_target",
    "join_completions",
    "load_idle_times",
    "lock_data_dir",
    "locked_until",
    "log_extent",
    "message_counts",
    "purge_state",
    "PurgeJob",
    "queue_spec",
    "read_log_events",
    "resolve_view_name",
    "save_idle_times",
    "sweep_lock_files",
    "subscription_queue",
    "token_of",
    "topic_spec",
    "totals",
]
