"""What the app hands every handler at construction: the data directory, the config store,
the current runtime, statistics and metrics. No module globals; handlers reach nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.runtime import Runtime
from gateway.store import ConfigStore

if TYPE_CHECKING:
    from gateway.metrics import Metrics
    from gateway.stats import ToolStats
    from handlers.base import ToolHandler


@dataclass
class Services:
    data_dir: Path
    store: ConfigStore
    runtime: Runtime
    stats: ToolStats
    metrics: Metrics
    workers: int = 1
    port: int = 0
    started_at: float = field(default_factory=time.time)
    handlers: dict[str, ToolHandler] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)  # components one handler offers others (e.g. "pools")
