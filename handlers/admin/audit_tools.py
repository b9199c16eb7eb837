"""Reading the audit trail, and flushing caches (ProxySQL's admin_flush_cache)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from gateway import audit, workers
from gateway.errors import InvalidArgument, Unavailable
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.admin.shared import AuditTrail

FLUSH_WAIT_S = 2.0


class AuditIn(ToolInput):
    since: Annotated[float, Field(ge=0, le=1e11)] | str = Field(
        default=0, description="Rows at or after this time: unix seconds, or ISO 8601 (2026-11-25T10:00:00Z)."
    )
    limit: int = Field(default=100, ge=1, le=1000, description="Most rows, newest first.")
    action: str = Field(default="", max_length=128, description="Only this tool, e.g. admin.rotate_token or admin.sql.")


class AuditRow(ToolOutput):
    id: int
    at: float
    endpoint: str
    token_fingerprint: str
    client: str
    action: str
    arguments: Any
    before: Any
    after: Any
    outcome: str = Field(description="ok, or the error code the change failed with.")
    message: str
    subject: str = Field(default="", description="Who an OAuth access token named ('' for a static token).")


class AuditOut(ToolOutput):
    rows: list[AuditRow]
    truncated: bool


class FlushCacheIn(ToolInput):
    cache_type: Literal["readonly_shapes", "query_results", "all"] = Field(
        description="readonly_shapes: the read-only checker's statement caches; query_results: the query result cache; all: both."
    )
    target_id: str | None = Field(default=None, description="query_results only: flush one target's entries.")


class FlushCacheOut(ToolOutput):
    flushed: dict[str, int] = Field(description="Entries dropped per cache, over all workers.")
    workers_flushed: int = Field(description="Workers that flushed before the call answered (at most 2 s).")
    workers: int = Field(description="Workers alive.")


def _since(value: float | str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InvalidArgument(f"since must be unix seconds or ISO 8601, got {value!r}") from None


class AuditTools:
    def __init__(self, store: ConfigStore, trail: AuditTrail, cache_flushers: Mapping[str, Callable[[str | None], int]]) -> None:
        self.store = store
        self.trail = trail
        self.cache_flushers = cache_flushers  # this process's caches by kind (Services.cache_flushers)

    @tool("admin.audit", title="Read the audit trail", read_only=True)
    def audit(self, args: AuditIn, ctx: CallContext) -> AuditOut:
        """Read the audit trail of administrative changes, newest first: when, endpoint, token fingerprint, OAuth subject, client, tool and arguments, before/after (secrets masked), outcome."""
        found, truncated = audit.read(self.store, since=_since(args.since), limit=args.limit, action=args.action)
        return AuditOut(rows=[AuditRow(**row) for row in found], truncated=truncated)

    @tool("admin_flush_cache", title="Flush caches", read_only=False, destructive=True, idempotent=True)
    def flush_cache(self, args: FlushCacheIn, ctx: CallContext) -> FlushCacheOut:
        """Flush the query result cache and/or the read-only checker's statement-shape caches in every worker; entries are rebuilt on demand."""
        flushers = self.cache_flushers
        with self.trail.audited(ctx, args.model_dump()) as entry:
            wanted = sorted(flushers) if args.cache_type == "all" else [args.cache_type]
            missing = [kind for kind in wanted if kind not in flushers]
            if missing:
                raise Unavailable(f"{missing[0]}: this gateway has no such cache")
            request_id = workers.request_flush(self.store, wanted, args.target_id)
            if not workers.serving(self.store):  # no worker follows requests (the tools run in-process): here
                workers.carry_out_flushes(self.store, flushers, after=request_id - 1)
            done, alive, dropped = workers.wait_flushed(self.store, request_id, timeout_s=FLUSH_WAIT_S)
            entry.after = {"flushed": dropped, "workers_flushed": done, "workers": alive}
        return FlushCacheOut(flushed={kind: dropped.get(kind, 0) for kind in wanted}, workers_flushed=done, workers=alive)
