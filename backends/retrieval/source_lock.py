"""One sync per source at a time, for rag.db: an exclusive, non-blocking, crash-safe file lock.

`fcntl.flock` on <data_dir>/locks/rag-sync-<source_id>.lock excludes other workers, the CLI and
other jobs of this process alike, and the kernel releases it when its holder dies (kill -9).
(The PostgreSQL index has the same interface as an advisory lock: pg_index.PgSourceLock.)
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gateway.errors import Unavailable


class SourceLock:
    """An exclusive, non-blocking, crash-safe lock on one source."""

    def __init__(self, data_dir: Path, source_id: int) -> None:
        self.path = Path(data_dir) / "locks" / f"rag-sync-{source_id}.lock"
        self.fd: int | None = None

    def acquire(self, holder: str) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, holder.encode())
        self.fd = fd
        return True

    def confirm(self) -> None:
        """Raises Unavailable unless the lock is held (a flock lasts as long as its descriptor)."""
        if self.fd is None:
            raise Unavailable("the sync lock of this source is not held; run the sync again")

    def holder(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
