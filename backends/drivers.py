"""Database drivers imported at their first use (issue 30).

Every engine module is imported in every process (the read-only check needs all their rules),
but a gateway with no target of an engine never calls its driver: duckdb (~12 MiB RSS),
psycopg (~9 MiB), psycopg_pool, pgvector and pymysql stay out of each worker until a target
(or a PostgreSQL index) uses them. A module writes `duckdb = LazyDriver("duckdb")` (the real
import under TYPE_CHECKING, for the type checkers) and uses it as the module. Only the engines'
room and the retrieval storages may name a driver (tests/test_architecture.py counts a
LazyDriver as an import).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any


class LazyDriver:
    """A driver module, imported at its first attribute access (thread-safe: the import lock)."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<LazyDriver {self._name}{'' if driver_loaded(self._name) else ' (not imported yet)'}>"


def driver_loaded(name: str) -> bool:
    """Whether a driver module has been imported in this process. Its exceptions exist only
    then, so an engine's `errors` lists them only then: an `except engine.errors` or
    `isinstance(exc, engine.errors)` catches the same exceptions, without importing the driver."""
    return name in sys.modules
