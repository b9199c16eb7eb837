"""`mcp-gateway backup` / `restore`: a consistent copy of a data directory, taken while it serves.

Every SQLite database of the data directory (config.db, disk.db, rag.db, ...) is copied with
SQLite's online backup API: one step under one read transaction, so each copy is the database
as of one commit — a sync writing batches at that moment is either in the copy up to a batch
boundary or not at all, and its cursor (stored in the same rag.db) matches what was copied;
the next sync after a restore resumes from there. Writers are not blocked (WAL mode). The TLS
material (tls/) is copied too. Not copied, because they are derived or per process: metrics/,
locks/, gateway.json, -wal/-shm files, and what the endpoints declare derived or scratch (their
handlers' `data_files`, collected by gateway.assembly: e.g. the RAG index's ANN snapshot
rag.db.ann/, rebuilt from rag.db).

`restore` puts a backup into a data directory that no gateway is using, checks each database
(PRAGMA quick_check), and runs the endpoints' `after_restore` on it (the RAG index marks sync
jobs that were running when the backup was taken as failed: nothing runs them there).
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

from gateway import sqlite
from gateway.data_files import DataFiles
from gateway.errors import InvalidArgument
from gateway.pids import pid_alive

MANIFEST = "mcp-gateway-backup.json"
FORMAT = 1
DERIVED = ("metrics", "locks", "gateway.json")  # never copied; removed by a forced restore


def declared_files() -> list[DataFiles]:
    """What the endpoints declare of their files (their handlers' `data_files`)."""
    from gateway.assembly import data_files

    return data_files()


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def database_files(data_dir: Path, files: Sequence[DataFiles]) -> list[Path]:
    """The data directory's SQLite databases (the endpoints' scratch databases excluded)."""
    scratch = [pattern for declared in files for pattern in declared.scratch]
    return sorted(p for p in Path(data_dir).glob("*.db") if p.is_file() and not _matches(p.name, scratch))


def running_gateway(data_dir: Path) -> int | None:
    """The pid of a gateway serving this data directory, if one runs."""
    try:
        state = json.loads((Path(data_dir) / "gateway.json").read_text())
    except (OSError, ValueError):
        return None
    pid = int(state.get("pid") or 0)
    return pid if pid and pid_alive(pid) else None


def backup(data_dir: Path, destination: Path, files: Sequence[DataFiles] | None = None) -> dict[str, Any]:
    """Copy the data directory's databases and TLS material into `destination` (new or empty).
    `files`: what the endpoints declare (default: every handler's, declared_files())."""
    data_dir, destination = Path(data_dir), Path(destination)
    files = declared_files() if files is None else files
    if not (data_dir / "config.db").exists():
        raise InvalidArgument(f"{data_dir} is not a gateway data directory (no config.db)")
    if destination.exists() and any(destination.iterdir()):
        raise InvalidArgument(f"{destination} exists and is not empty")
    destination.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(destination, 0o700)
    copied = []
    for source in database_files(data_dir, files):
        target = destination / source.name
        _online_copy(source, target)
        copied.append(_describe(target))
    tls_dir = data_dir / "tls"
    if tls_dir.is_dir():
        shutil.copytree(tls_dir, destination / "tls")
        copied += [_describe(p, relative_to=destination) for p in sorted((destination / "tls").iterdir())]
    manifest = {
        "format": FORMAT,
        "created_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": str(data_dir.resolve()),
        "files": copied,
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _online_copy(source: Path, target: Path) -> None:
    src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    src.set_busy_timeout(sqlite.BUSY_TIMEOUT_MS)
    dst = apsw.Connection(str(target))
    try:
        with dst.backup("main", src, "main") as job:
            job.step(-1)  # all pages in one step: one read transaction, one consistent snapshot
        dst.execute("PRAGMA journal_mode=DELETE")  # a self-contained file: no -wal beside it
    finally:
        dst.close()
        src.close()
    os.chmod(target, 0o600)


def _describe(path: Path, relative_to: Path | None = None) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    name = str(path.relative_to(relative_to)) if relative_to else path.name
    return {"name": name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def restore(backup_dir: Path, data_dir: Path, *, force: bool = False, files: Sequence[DataFiles] | None = None) -> dict[str, Any]:
    """Put a backup into `data_dir`. Refuses while a gateway serves it, and a non-empty data
    directory unless `force` (which replaces its databases and TLS material). `files` as in backup."""
    backup_dir, data_dir = Path(backup_dir), Path(data_dir)
    files = declared_files() if files is None else files
    manifest = _read_manifest(backup_dir)
    pid = running_gateway(data_dir)
    if pid is not None:
        raise InvalidArgument(f"a gateway (pid {pid}) serves {data_dir}: stop it before restoring")
    if data_dir.exists() and any(data_dir.iterdir()) and not force:
        raise InvalidArgument(f"{data_dir} is not empty; --force replaces its databases and TLS material")
    _check_files(backup_dir, manifest)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(data_dir, 0o700)
    _remove_current(data_dir, [pattern for declared in files for pattern in declared.derived])
    for entry in manifest["files"]:
        source, target = backup_dir / entry["name"], data_dir / entry["name"]
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = target.with_name(target.name + ".restoring")
        shutil.copyfile(source, staging)
        os.chmod(staging, 0o600)
        os.replace(staging, target)
    checked = {}
    for path in database_files(data_dir, files):
        conn = apsw.Connection(str(path))
        try:
            checked[path.name] = sqlite.scalar(conn, "PRAGMA quick_check")
            if checked[path.name] != "ok":
                raise InvalidArgument(f"{path.name} fails its check after the restore: {checked[path.name]}")
            for declared in files:
                if declared.after_restore is not None:
                    declared.after_restore(conn)
        finally:
            conn.close()
    return {"restored_from": str(backup_dir), "created_at": manifest["created_at"], "checked": checked}


def _read_manifest(backup_dir: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((backup_dir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"{backup_dir} is not a gateway backup ({MANIFEST}: {exc})") from None
    if manifest.get("format") != FORMAT:
        raise InvalidArgument(f"backup format {manifest.get('format')!r} is not {FORMAT}")
    return manifest


def _check_files(backup_dir: Path, manifest: dict[str, Any]) -> None:
    for entry in manifest["files"]:
        path = backup_dir / entry["name"]
        if not path.is_file() or _describe(path)["sha256"] != entry["sha256"]:
            raise InvalidArgument(f"backup file {entry['name']} is missing or differs from the manifest")


def _remove_current(data_dir: Path, derived_patterns: Sequence[str]) -> None:
    for path in data_dir.iterdir():
        derived = path.name in DERIVED or path.name.endswith((".db", "-wal", "-shm")) or _matches(path.name, derived_patterns)
        if path.name == "tls" or derived:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
