"""`ResultCache`: the query result cache every caller of the read-only SQL path shares.

It picks the store (embedded SQLite in the data directory, or Redis when `cache-redis_url` is
set), enforces the size limits, keys results (keys.py), keeps the Prometheus metrics, and runs
one upkeep thread per process (pending hit bookkeeping, expired entries, the entry and byte
gauges, twice a second). A store that cannot be reached makes a lookup or a save answer
"unavailable": the caller then runs the statement uncached, it never fails because of the
cache. The tools of /mcp/cache and admin_flush_cache reach it through `services.result_cache`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from backends.result_cache.embedded import FILE_NAME, EmbeddedStore
from backends.result_cache.keys import fingerprints
from backends.result_cache.store import (
    CLEARED,
    COUNTERS,
    INVALIDATED,
    PROFILE_CHANGED,
    EntryMeta,
    Evictions,
    Hit,
    Limits,
    ResultStore,
    Selector,
    StoreUnavailable,
)
from gateway.runtime import Runtime
from gateway.variables import Variable

log = logging.getLogger("mcp_gateway.cache")
UPKEEP_S = 0.5
WARN_EVERY_S = 30.0


class CacheMetrics(Protocol):
    """What the cache reports to Prometheus (gateway.metrics.Metrics implements it)."""

    def cache_lookup(self, target_id: str, hit: bool) -> None: ...
    def cache_evicted(self, evicted: Evictions) -> None: ...
    def cache_totals(self, entries: int, size: int) -> None: ...


MAX_ENTRIES = Variable(
    "cache-max_entries", "int", "10000", "Most results the query result cache holds; the least recently used go first.",
    minimum=1, maximum=10_000_000,
)  # fmt: skip
MAX_BYTES = Variable(
    "cache-max_bytes", "int", str(64 * 1024 * 1024),
    "Most bytes of results (as JSON) the query result cache holds, over all workers (and instances, with Redis).",
    minimum=1024, maximum=64 * 1024**3,
)  # fmt: skip
MAX_ENTRY_BYTES = Variable(
    "cache-max_entry_bytes", "int", str(1024 * 1024),
    "A result larger than this (as JSON) is not cached (stats.cache_store: too_large).",
    minimum=256, maximum=1024**3,
)  # fmt: skip
REDIS_URL = Variable(
    "cache-redis_url", "url", "",
    "Keep the query result cache in Redis (redis://[:password@]host:port/db) so gateway instances share it; "
    "empty: an embedded store in the data directory, shared by this server's workers. The password is masked.",
    secret=True, choices=("redis", "rediss", "unix"),
)  # fmt: skip
CACHE_VARIABLES: tuple[Variable, ...] = (MAX_ENTRIES, MAX_BYTES, MAX_ENTRY_BYTES, REDIS_URL)


@dataclass(frozen=True)
class Settings:
    max_entries: int
    max_bytes: int
    max_entry_bytes: int
    redis_url: str

    @classmethod
    def of(cls, runtime: Runtime) -> Settings:
        def value(declaration: Variable) -> Any:  # a runtime older than the declaration: the default
            return runtime.variables[declaration.name] if declaration.name in runtime.variables else declaration.parse(None)

        return cls(
            max_entries=int(value(MAX_ENTRIES)),
            max_bytes=int(value(MAX_BYTES)),
            max_entry_bytes=min(int(value(MAX_ENTRY_BYTES)), int(value(MAX_BYTES))),
            redis_url=str(value(REDIS_URL)),
        )


class ResultCache:
    def __init__(self, data_dir: Path, runtime: Runtime, metrics: CacheMetrics | None) -> None:
        self.data_dir = Path(data_dir)
        self.metrics = metrics
        self.settings = Settings.of(runtime)
        self.store: ResultStore = self._open(self.settings.redis_url)
        self._fingerprints: tuple[Any, Any, dict[str, str]] = ((), (), {})
        self._known = dict(self._fingerprints_of(runtime))  # what on_runtime_change compares against
        self._last_warning = 0.0
        self._stop = threading.Event()
        self._upkeep: threading.Thread | None = None

    def _open(self, redis_url: str) -> ResultStore:
        if redis_url:
            # Imported here, not at the top: redis (and the opentelemetry it pulls in) is ~6 MiB
            # RSS in every process, and only a gateway configured with cache-redis_url uses it.
            from backends.result_cache.redis_store import RedisStore

            try:
                return RedisStore(redis_url)
            except StoreUnavailable as exc:  # a malformed URL: serve uncached rather than not at all
                log.error("%s; the result cache stays embedded", exc)
        return EmbeddedStore(self.data_dir)

    @property
    def limits(self) -> Limits:
        return Limits(self.settings.max_entries, self.settings.max_bytes)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the upkeep thread (a server worker; tests that build handlers may skip it)."""
        if self._upkeep is None:
            self._upkeep = threading.Thread(target=self._upkeep_loop, name="mcp-cache-upkeep", daemon=True)
            self._upkeep.start()

    def close(self) -> None:
        self._stop.set()
        if self._upkeep is not None:
            self._upkeep.join(timeout=2)
        with contextlib.suppress(StoreUnavailable):
            self.store.close()

    def on_runtime_change(self, runtime: Runtime) -> None:
        """A LOAD reached this worker: new limits, maybe a new store, and the entries of every
        target whose profile changed (or that is gone) dropped. Keys carry the profile's
        fingerprint, so those entries were already unreachable; dropping them frees the room."""
        settings = Settings.of(runtime)
        if settings.redis_url != self.settings.redis_url:
            old, self.store = self.store, self._open(settings.redis_url)
            old.close()
        self.settings = settings
        new = self._fingerprints_of(runtime)
        changed = [target for target, fingerprint in self._known.items() if new.get(target) != fingerprint]
        self._known = dict(new)
        for target_id in changed:
            try:
                self._drop(Selector(target_id=target_id), PROFILE_CHANGED)
            except StoreUnavailable as exc:
                self._warn(exc)

    @property
    def local(self) -> bool:
        """True when a lookup is a local file read (cheap enough for the event loop)."""
        return self.store.kind == "embedded"

    def fingerprint(self, runtime: Runtime, target_id: str) -> str:
        return self._fingerprints_of(runtime).get(target_id, "")

    def _fingerprints_of(self, runtime: Runtime) -> dict[str, str]:
        """target_id -> profile fingerprint, computed once per runtime snapshot."""
        targets, auth = runtime.table("runtime_mcp_target_profiles"), runtime.table("runtime_mcp_auth_profiles")
        seen_targets, seen_auth, found = self._fingerprints
        if targets is not seen_targets or auth is not seen_auth:
            found = fingerprints(targets, auth)
            self._fingerprints = (targets, auth, found)
        return found

    # -- the request path ----------------------------------------------------------------------
    def lookup(self, key: str, target_id: str, ttl_ms: int) -> tuple[str, Hit | None]:
        """("hit", hit) | ("miss", None) | ("unavailable", None)."""
        try:
            hit = self.store.get(key, target_id, ttl_ms)
        except StoreUnavailable as exc:
            self._warn(exc)
            return "unavailable", None
        if self.metrics is not None:
            self.metrics.cache_lookup(target_id, hit is not None)
        return ("hit", hit) if hit is not None else ("miss", None)

    def save(self, meta: EntryMeta, result: Mapping[str, Any], ttl_ms: int) -> str:
        """Keep a result: "stored", "too_large" (above cache-max_entry_bytes) or "unavailable"."""
        payload = orjson.dumps(result)
        if len(payload) > self.settings.max_entry_bytes:
            return "too_large"
        try:
            evicted = self.store.put(meta, payload, ttl_ms, self.limits)
        except StoreUnavailable as exc:
            self._warn(exc)
            return "unavailable"
        self._report(evicted)
        return "stored"

    @staticmethod
    def decode(hit: Hit) -> dict[str, Any]:
        return orjson.loads(hit.payload)

    # -- administration (raise StoreUnavailable: the caller answers UNAVAILABLE) -------------------
    def clear(self, target_id: str | None = None) -> int:
        """Drop every entry (of one target, when given); returns how many were dropped."""
        return self._drop(Selector(target_id=target_id), CLEARED)

    def invalidate(self, *, target_id: str | None = None, table: str | None = None, digest_pattern: str | None = None) -> int:
        """Drop the entries matching all the conditions given; `digest_pattern` is a regular
        expression searched in the digest text (case-insensitive), or a digest id."""
        pattern = re.compile(digest_pattern, re.IGNORECASE) if digest_pattern else None  # re.error: the caller's
        return self._drop(Selector(target_id=target_id, table=table.lower() if table else None, pattern=pattern), INVALIDATED)

    def stats(self, target_id: str | None = None) -> dict[str, Any]:
        per_target, totals = self.store.stats()
        if target_id is not None:
            per_target = {target_id: per_target.get(target_id, {"entries": 0, "bytes": 0, **dict.fromkeys(COUNTERS, 0)})}
        return {
            "store": self.store.kind,
            "entries": totals["entries"],
            "bytes": totals["bytes"],
            "max_entries": self.settings.max_entries,
            "max_bytes": self.settings.max_bytes,
            "max_entry_bytes": self.settings.max_entry_bytes,
            "targets": per_target,
        }

    def entries(self, target_id: str | None, limit: int, order_by: str) -> list[dict[str, Any]]:
        return self.store.entries(target_id, limit, order_by)

    def store_bytes(self) -> int | None:
        """Embedded: the cache file's size on disk (with its WAL); Redis: None (its server's own)."""
        if not self.local:
            return None
        path = self.data_dir / FILE_NAME
        return sum(p.stat().st_size for p in (path, path.with_name(FILE_NAME + "-wal")) if p.exists())

    # -- internals -----------------------------------------------------------------------------
    def _drop(self, selector: Selector, reason: str) -> int:
        evicted = self.store.drop(selector, reason)
        self._report(evicted)
        return sum(evicted.values())

    def _report(self, evicted: Evictions) -> None:
        if evicted and self.metrics is not None:
            self.metrics.cache_evicted(evicted)

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("result cache: %s; calls are served uncached meanwhile", exc)

    def _upkeep_loop(self) -> None:
        while not self._stop.wait(UPKEEP_S):
            try:
                self._report(self.store.maintain())
                if self.metrics is not None:
                    totals = self.store.totals()
                    self.metrics.cache_totals(totals["entries"], totals["bytes"])
            except StoreUnavailable as exc:
                self._warn(exc)
            except Exception:  # noqa: BLE001 - upkeep must outlive a bad moment
                log.exception("result cache upkeep failed; retrying")
