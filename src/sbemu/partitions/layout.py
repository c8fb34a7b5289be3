"""How an entity lies on disk: its directory, its manifest, its partition stores.

    <data dir>/.lock                                    held (flock) by the one server using it
    <data dir>/<namespace>/<entity>/entity.json        partition count and partitioning [P4]
    <data dir>/<namespace>/<entity>/partition-NN/       one LMDB store per partition
    <data dir>/<namespace>/<entity>/rules.json          a topic's runtime subscription rules
    <data dir>/.retired/<namespace>/<entity>.<stamp>/   an entity no longer named, moved aside

Names are lower-cased and percent-quoted. Partitioning can never change on an existing entity
[SB partitioning P4]: a data directory that holds it otherwise is refused.

A new entity is empty, as on Azure (a deleted entity's messages are gone): at start the
directories of entities that neither the configuration nor the admin API's catalog names are
moved aside under ``.retired/`` (kept for the operator to inspect or delete, never loaded
again), and an entity created at runtime retires whatever lies where its directory goes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..atomicfile import atomic_write
from .broker import PartitionBroker
from .specs import MIB, EntitySpec
from .store import PartitionStore, map_size_for


class StorageLayoutError(Exception):
    """The data directory does not match the configuration (e.g. a changed partition count)."""


def lock_data_dir(data_dir: Path) -> int:
    """One server per data directory (LMDB would allow two, the in-memory state would not):
    create it if needed and hold an exclusive flock on its .lock; returns the descriptor to
    close at the end. Raises StorageLayoutError when it is not usable or in use."""
    if data_dir.exists() and not data_dir.is_dir():
        raise StorageLayoutError(f"data dir {data_dir}: not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorageLayoutError(f"data dir {data_dir}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StorageLayoutError(f"data dir {data_dir} is in use by another sbemu process") from exc
    return fd


def entity_dir(data_dir: Path, namespace: str, name: str) -> Path:
    """Where an entity's partitions, manifest and rules live."""
    return data_dir / quote(namespace.lower(), safe="") / quote(name.lower(), safe="")


RETIRED_DIR = ".retired"  # a dot: no namespace name starts with one, the log reader skips it


def retire_entity_dir(data_dir: Path, base: Path, stamp: str) -> Path:
    """Move an entity's directory ``base`` aside under ``.retired/<namespace>/``, named
    ``<entity>.<stamp>`` (a number added when taken); returns where it went."""
    folder = data_dir / RETIRED_DIR / base.parent.name
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{base.name}.{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = folder / f"{base.name}.{stamp}-{n}"
    os.replace(base, target)
    return target


def stale_entity_dirs(data_dir: Path, live: Iterable[Path]) -> list[Path]:
    """The entity directories under ``data_dir`` that are not in ``live`` (dot and underscore
    names skipped: .retired, .lock; files such as catalog.json are not directories)."""
    keep = {Path(p) for p in live}
    found: list[Path] = []
    for ns in sorted(_subdirs(data_dir)):
        for ent in sorted(_subdirs(ns)):
            if ent not in keep and _holds_entity(ent):
                found.append(ent)
    return found


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))]
    except FileNotFoundError:
        return []


def _holds_entity(path: Path) -> bool:
    """An entity's directory: its manifest, or a partition store (a manifest lost in a crash)."""
    return (path / "entity.json").exists() or any(path.glob("partition-*"))


def open_partitions(
    spec: EntitySpec,
    base: Path,
    open_broker: Callable[[int, PartitionStore], PartitionBroker],
    durable: bool = True,
) -> list[PartitionBroker]:
    """Check the manifest, then open each partition's store (`durable` False: without fsync,
    sbemu serve --ephemeral) and hand it to `open_broker` (which makes and loads its
    broker); a disk that fails half-way: what was opened is closed and the error raised."""
    check_layout(base, spec)
    partitions: list[PartitionBroker] = []
    try:
        for pid in range(spec.partition_count):
            store = PartitionStore(
                str(base / f"partition-{pid:02d}"),
                map_size=map_size_for(spec.max_size_mb * MIB),
                durable=durable,
            )
            try:
                partitions.append(open_broker(pid, store))
            except BaseException:
                store.close()
                raise
    except BaseException:
        for broker in partitions:  # a disk that fails half-way: close what was opened
            with contextlib.suppress(Exception):
                broker.close()
        raise
    return partitions


def check_layout(base: Path, spec: EntitySpec) -> None:
    """[SB partitioning P4] partitioning can never change on an existing entity."""
    manifest = base / "entity.json"
    wanted = {"partition_count": spec.partition_count, "partitioned": spec.partitioned}
    if manifest.exists():
        try:
            have = json.loads(manifest.read_text())
        except ValueError:
            have = _torn_manifest(base, spec, wanted)
        if have != wanted:
            raise StorageLayoutError(
                f"{spec.namespace}/{spec.name}: the data directory holds this entity with "
                f"{have['partition_count']} partition(s) (partitioned={have['partitioned']}); "
                f"the configuration asks for {spec.partition_count}. Partitioning cannot be "
                "changed on an existing entity; use a new data directory or entity name."
            )
        return
    os.makedirs(base, exist_ok=True)
    # atomically and durably: a plain write can leave an empty file behind a crash or a
    # disk error (the create is journaled before the data), and then the entity's data
    # dir would not open again
    atomic_write(manifest, json.dumps(wanted).encode())


def _torn_manifest(base: Path, spec: EntitySpec, wanted: dict[str, Any]) -> dict[str, Any]:
    """An entity.json left empty or torn (by an older sbemu's plain write, cut by a crash
    or a disk error): the partition directories on disk tell the layout. When they match
    the configuration (or there are none yet) the manifest is written again; otherwise the data dir is refused."""
    found = {p.name for p in base.glob("partition-*") if p.is_dir()}
    if not found or found == {f"partition-{pid:02d}" for pid in range(spec.partition_count)}:
        atomic_write(base / "entity.json", json.dumps(wanted).encode())
        return wanted
    raise StorageLayoutError(
        f"{spec.namespace}/{spec.name}: {base / 'entity.json'} is unreadable and the data "
        f"directory holds {len(found)} partition directories where the configuration asks "
        f"for {spec.partition_count}; restore the file or use a new data directory."
    )
