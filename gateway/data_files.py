"""What an endpoint keeps in the data directory that `mcp-gateway backup` / `restore` must know
(gateway/backup.py), declared on its handler class as `data_files` (gateway.tools.ToolHandler)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import apsw


@dataclass(frozen=True)
class DataFiles:
    # Glob patterns of *.db files never copied: scratch databases a running job makes and removes.
    scratch: tuple[str, ...] = ()
    # Glob patterns of files and directories derived from the databases (rebuilt when missing):
    # never copied, and removed by a forced restore with the databases they were derived from.
    derived: tuple[str, ...] = ()
    # Run on every restored database before `restore` answers (e.g. close the jobs a backup
    # caught running: nothing runs them in the restored directory).
    after_restore: Callable[[apsw.Connection], None] | None = None
