"""What a result-cache store is: the entry it keeps, what it answers, and the small interface
the embedded (SQLite) and Redis stores both implement.

A store keeps opaque payloads (the encoded result of one statement) under a key the caller
derived from target, profile, schema, canonical statement and caps. It owns everything that
must be shared by every worker and instance: the entries, their LRU order and expiry, the
entry and byte totals, and the per-target counters (hits, misses, evictions by reason). Any
method may raise `StoreUnavailable` (Redis down); the caller then serves the call uncached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

# Why entries leave the cache; also the `reason` label of mcp_cache_evictions_total.
LRU_ENTRIES = "max_entries"  # least recently used, to stay within cache-max_entries
LRU_BYTES = "max_bytes"  # least recently used, to stay within cache-max_bytes
EXPIRED = "expired"  # its TTL ran out
INVALIDATED = "invalidated"  # invalidate_cache (by table, digest pattern or target)
CLEARED = "cleared"  # clear_cache / admin_flush_cache
PROFILE_CHANGED = "profile_changed"  # LOAD MCP PROFILES TO RUNTIME changed its target
REASONS = (LRU_ENTRIES, LRU_BYTES, EXPIRED, INVALIDATED, CLEARED, PROFILE_CHANGED)
COUNTERS = ("hits", "misses", *REASONS)
ORDERS = ("hits", "age", "size", "recent")

# (target_id, reason) -> entries that left for that reason
Evictions = dict[tuple[str, str], int]


class StoreUnavailable(Exception):
    """The store cannot be reached; the message names no credentials."""


@dataclass(frozen=True)
class EntryMeta:
    """Everything kept beside the payload: what get_cache_entries and invalidation read."""

    key: str
    target_id: str
    schema: str
    digest: str
    digest_text: str
    tables: tuple[str, ...]  # lower case; qualified (s.t) and bare (t) forms both present

    def tables_field(self) -> str:
        """ ",a,b," so a table matches with one substring search in SQL, Lua or Python."""
        return "," + ",".join(self.tables) + "," if self.tables else ","


@dataclass(frozen=True)
class Hit:
    payload: bytes
    age_ms: int


@dataclass(frozen=True)
class Limits:
    max_entries: int
    max_bytes: int


@dataclass(frozen=True)
class Selector:
    """Which entries an invalidation drops: all conditions given must hold (none: all)."""

    target_id: str | None = None
    table: str | None = None  # lower case; "s.t" matches only that schema's t, "t" any t
    pattern: re.Pattern[str] | None = None  # searched in the digest text; equal digest ids match too

    def matches(self, target_id: str, tables_field: str, digest: str, digest_text: str) -> bool:
        if self.target_id is not None and target_id != self.target_id:
            return False
        if self.table is not None and f",{self.table}," not in tables_field:
            return False
        return self.pattern is None or digest.lower() == self.pattern.pattern.lower() or bool(self.pattern.search(digest_text))


class ResultStore(Protocol):
    kind: str  # "embedded" | "redis"

    def get(self, key: str, target_id: str, max_age_ms: int) -> Hit | None:
        """The payload if present, unexpired and younger than max_age_ms (the TTL in force
        now, which an admin may have lowered). Counts a hit or a miss for the target."""

    def put(self, meta: EntryMeta, payload: bytes, ttl_ms: int, limits: Limits) -> Evictions:
        """Store (or replace) an entry, then evict least recently used entries until within limits."""

    def drop(self, selector: Selector, reason: str) -> Evictions:
        """Remove the entries the selector matches, counted under reason."""

    def entries(self, target_id: str | None, limit: int, order_by: str) -> list[dict]:
        """Metadata of entries (never payloads): key, target_id, schema, digest, digest_text,
        tables, size, age_ms, ttl_left_ms, hits, idle_ms."""

    def stats(self) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
        """(per target: entries, bytes and every COUNTERS value; totals: entries, bytes)."""

    def totals(self) -> dict[str, int]:
        """entries and bytes of the whole store."""

    def maintain(self) -> Evictions:
        """Periodic upkeep (write pending hit bookkeeping, drop expired entries)."""

    def close(self) -> None: ...
