"""The runtime layer as one immutable snapshot: what serves requests right now.

A worker holds one `Runtime` at a time and swaps the whole object when a LOAD ... TO RUNTIME
bumps `runtime_state.version`; a request keeps the snapshot it started with, so it never sees
half of an update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.variables import Variable


@dataclass(frozen=True)
class Runtime:
    version: int
    variables: Mapping[str, Any]  # typed values, every declared variable present
    tables: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)  # runtime_* rows
    declarations: Mapping[str, Variable] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)  # per variable: ConfigStore.variable_origins

    def var(self, name: str) -> Any:
        return self.variables[name]

    def table(self, name: str) -> tuple[dict[str, Any], ...]:
        return self.tables.get(name, ())


def build_runtime(
    version: int,
    raw_variables: Mapping[str, str],
    tables: Mapping[str, list[dict[str, Any]]],
    declarations: Mapping[str, Variable],
    *,
    origins: Mapping[str, str] | None = None,
) -> Runtime:
    """Type every variable (validation errors propagate as ConfigError) and freeze the result."""
    typed = {name: decl.parse(raw_variables.get(name)) for name, decl in declarations.items()}
    return Runtime(
        version=version,
        variables=MappingProxyType(typed),
        tables=MappingProxyType({name: tuple(rows) for name, rows in tables.items()}),
        declarations=declarations,
        origins=MappingProxyType(dict(origins or {})),
    )
