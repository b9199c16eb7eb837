"""What the app hands every handler at construction: the data directory, the config store,
the current runtime, statistics and metrics, and the components endpoints share. No module
globals, no untyped bag: a shared component is a typed field here.

gateway.assembly builds the database side (`targets`, `sql`) before any handler. What one
endpoint keeps to itself (the RAG index, its embedder and sync jobs) is that handler's, not
a field here; what the rest of the house needs of it comes through declared hooks on the
handler class (gateway.tools.ToolHandler).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.runtime import Runtime
from gateway.store import ConfigStore
from gateway.tokens import TokenUse

if TYPE_CHECKING:
    from backends.pools import TargetPools
    from backends.result_cache import ResultCache
    from backends.sql import ReadOnlySql
    from gateway.evidence import EvidenceRecorder
    from gateway.metrics import Metrics
    from gateway.tool_counters import ToolCounters


class EndpointState(Protocol):
    """A handler as the status tools see it (gateway.tools ToolHandler)."""

    down_reason: str  # why init failed, "" while it serves
    tools: Mapping[str, Any]


@dataclass
class Services:
    data_dir: Path
    store: ConfigStore
    runtime: Runtime
    stats: ToolCounters
    metrics: Metrics
    workers: int = 1
    port: int = 0
    host: str = ""  # the address the listener is bound to (mcp-bind_address or --host)
    started_at: float = field(default_factory=time.time)
    handlers: dict[str, EndpointState] = field(default_factory=dict)  # every endpoint, by name
    targets: TargetPools | None = None  # the database targets' pools (backends.pools)
    sql: ReadOnlySql | None = None  # the one read-only SQL path (backends.sql)
    result_cache: ResultCache | None = None  # the query result cache inside that path (backends.result_cache)
    evidence: EvidenceRecorder | None = None  # what the gateway saw, for /mcp/ai (gateway.evidence)
    token_use: TokenUse = field(default_factory=TokenUse)  # last use of each token, until the next flush
    # admin_flush_cache{cache_type}: what each kind of cache clears in this process, given a
    # target_id or None, returning the entries dropped (gateway.workers runs them in every worker).
    cache_flushers: dict[str, Callable[[str | None], int]] = field(default_factory=dict)
    # The admin-defined SQL tools of a runtime, as ToolSpecs by endpoint (backends.custom_tools; gateway.surface).
    custom_tools: Callable[[Runtime], Mapping[str, tuple[Any, ...]]] | None = None
