"""The Service Bus side: entities, their partition brokers and the on-disk store.

This is the front door: the rest of sbemu imports these names from ``sbemu.partitions`` and
nothing from its modules (an import-linter contract in pyproject.toml says so; tests may reach
inside). What a room outside uses, by who uses it:

- the running process (server, commit loop): the ``Router`` over every entity, the partition
  brokers it commits (``PartitionBroker``, ``CommitThreads``/``GroupCommit``), start-up helpers
  (``lock_data_dir``, ``sweep_lock_files``, ``load_idle_times``);
- every side: ``Done``, the completion an operation calls once its group commit landed, and
  ``join_completions`` (one completion for several operations);
- the AMQP side: ``Entity`` (send, settle, sessions), ``EntityView`` and ``SessionHandle``
  (receive), ``Delivered``/``Taken`` (what a receiver is handed), the message values
  (``IncomingMessage``, ``MessageRecord``, ``MessageState``), ``token_of``;
- the admin side: the entity's sub-queue names (``MAIN``, ``DLQ_SUFFIX``, ``SCHEDULED_QUEUE``,
  ``TRANSFER_DLQ_SUFFIX``), entity specs, statistics, and the operator's operations on an
  entity (``locked_until``, ``purge_state``, ``message_counts``);
- the log readers (sbemu.logs, sparkjobs): the partition log's format (records, the log and
  meta databases' names and keys).
"""

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
from .records import (
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

__all__ = [
    "COMMITS_PER_ENTITY",
    "DLQ_SUFFIX",
    "LOG_DB",
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
