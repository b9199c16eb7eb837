"""Prometheus metrics, correct under `--workers N`.

When `PROMETHEUS_MULTIPROC_DIR` is set (the CLI sets it to a fresh directory under the data
directory before any worker starts), every worker writes its samples to memory-mapped files
there and `/metrics` aggregates them with `MultiProcessCollector`. Without it (tests that build
handlers directly) the metrics live in this object's own registry.

Per-request updates (`count`, `observe`, `inflight_add`, and `tool_call` and `exchange`, one
event each for what a tool call and an HTTP answer record) are appended as events on the event
loop and folded into the shared files by `flush()` — once a second, and before any collection
this worker makes — because ten memory-mapped writes per request were a third of the gateway's
CPU per call, and even a locked dict update per metric cost microseconds on the request path
(bench/gateway_overhead.py). Other workers' numbers are at most a second old.

Names follow OpenTelemetry's MCP conventions where they exist (`mcp.server.operation.duration`
becomes `mcp_server_operation_duration_seconds`). Labels never carry tokens or SQL.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import os
import resource
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from gateway.pids import pid_alive

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZE_BUCKETS = (128, 512, 2048, 8192, 32768, 131072, 524288, 2097152, 8388608)
MAX_CLIENT_LABELS = 256  # per worker; later clients are counted under "other"
MAX_PENDING_EVENTS = 1_000_000  # per-request events between two flushes (a second holds ~20,000)


def _drain(events: deque[Any]) -> Iterator[Any]:
    """Pop what is pending. popleft, not a swap: a flush from a tool thread loses none of the
    event loop's concurrent appends."""
    while True:
        try:
            yield events.popleft()
        except IndexError:
            return


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def reap_dead_workers() -> None:
    """Drop live-gauge files of workers that are gone (uvicorn replaces a worker that misses
    its health ping); counters and histograms keep their samples, as they should."""
    directory = multiprocess_dir()
    if directory is None:
        return
    pids = {name.rsplit("_", 1)[-1].removesuffix(".db") for name in os.listdir(directory) if "_live" in name}
    for pid in pids:
        if pid.isdigit() and not pid_alive(int(pid)):
            mark_process_dead(int(pid), directory)
    return True


def use_shared_files() -> None:
    """Make metrics created from now on write to PROMETHEUS_MULTIPROC_DIR. prometheus_client
    chooses memory or shared files once, when first imported, and `serve` imports it (through
    the handlers, for the command line) before it sets the directory."""
    if multiprocess_dir() and values.ValueClass.__name__ != "MmapedValue":
        values.ValueClass = values.MultiProcessValue()


def multiprocess_registry() -> CollectorRegistry:
    """Reads every worker's files; creates no metrics of its own (safe in the parent process)."""
    reap_dead_workers()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=multiprocess_dir())
    return registry


class SharedStateCollector:
    """What the parent serves on mcp-metrics_port: every worker's files (dead workers' live
    gauges dropped at each scrape) plus the handlers' scrape-time collectors."""

    def __init__(self, collectors: list[Any], declared: list[Any] | None = None) -> None:
        self.collectors = collectors
        self.declared = declared or []  # declared_families(): exported from the start, as on /metrics

    def collect(self) -> Iterator[Any]:
        reap_dead_workers()
        yield from _EveryFamily(self._collect, self.declared).collect()

    def _collect(self) -> Iterator[Any]:
        yield from MultiProcessCollector(None, path=multiprocess_dir()).collect()
        for collector in self.collectors:
            yield from collector.collect()


def declared_families() -> list[Any]:
    """The families every worker's Metrics declares, without samples, for the parent's plain
    metrics port. Call it before PROMETHEUS_MULTIPROC_DIR is set: its metrics live in memory."""
    if multiprocess_dir():
        raise RuntimeError("declared_families() must run before PROMETHEUS_MULTIPROC_DIR is set")
    return Metrics()._declared()


def worker_restarts_counter() -> Counter:
    """The supervisor's count of workers it replaced (created in the parent process, which
    writes it to the shared directory like a worker; exported from 0 on, so increase() sees the
    first restart)."""
    use_shared_files()
    return Counter(
        "mcp_gateway_worker_restarts",
        "Worker processes that died (crash, OOM kill, missed health ping) and were replaced.",
        registry=CollectorRegistry(),
    )


class Metrics:
    def __init__(self) -> None:
        use_shared_files()
        self.registry = CollectorRegistry()
        r = self.registry
        self.operation_duration = Histogram(
            "mcp_server_operation_duration_seconds",
            "Duration of MCP operations (OpenTelemetry mcp.server.operation.duration).",
            ["endpoint", "method", "tool", "outcome", "protocol_version"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "mcp_gateway_requests", "JSON-RPC requests answered, by outcome.", ["endpoint", "method", "outcome"], registry=r
        )
        self.errors = Counter(
            "mcp_gateway_errors",
            "Errors by JSON-RPC code and stable string code (tool errors have jsonrpc_code 0).",
            ["endpoint", "jsonrpc_code", "error_code"],
            registry=r,
        )
        self.http_responses = Counter(
            "mcp_gateway_http_responses", "HTTP responses by status.", ["endpoint", "status"], registry=r
        )
        self.auth_failures = Counter(
            "mcp_gateway_auth_failures", "Refused bearer checks by endpoint and reason.", ["endpoint", "reason"], registry=r
        )
        self.host_origin_refusals = Counter(
            "mcp_gateway_host_origin_refusals",
            "Requests refused for their Host (421) or Origin (403) header: DNS rebinding protection.",
            ["endpoint", "reason"],
            registry=r,
        )
        self.auth_failures_by_client = Counter(
            "mcp_gateway_auth_failures_by_client",
            f"Refused bearer checks by client address (first {MAX_CLIENT_LABELS} clients per worker, then 'other').",
            ["client"],
            registry=r,
        )
        self.inflight = Gauge(
            "mcp_gateway_inflight_requests", "Requests being served.", ["endpoint"], multiprocess_mode="livesum", registry=r
        )
        self.request_bytes = Histogram(
            "mcp_gateway_request_body_bytes", "Request body sizes.", ["endpoint"], buckets=SIZE_BUCKETS, registry=r
        )
        self.response_bytes = Histogram(
            "mcp_gateway_response_body_bytes", "Response body sizes.", ["endpoint"], buckets=SIZE_BUCKETS, registry=r
        )
        self.handler_up = Gauge(
            "mcp_gateway_handler_up",
            "1 when the endpoint's handler initialised.",
            ["endpoint"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.runtime_version = Gauge(
            "mcp_gateway_runtime_version",
            "Runtime configuration version each worker serves.",
            multiprocess_mode="liveall",
            registry=r,
        )
        self.workers = Gauge("mcp_gateway_workers", "Worker processes serving.", multiprocess_mode="livesum", registry=r)
        self.resident_memory = Gauge(
            "mcp_gateway_process_resident_memory_bytes",
            "Resident memory (RSS) of each worker, in bytes (its peak where the current size cannot be read).",
            multiprocess_mode="liveall",
            registry=r,
        )
        self.cpu_seconds = Gauge(
            "mcp_gateway_process_cpu_seconds", "CPU time used by each worker.", multiprocess_mode="liveall", registry=r
        )
        self.start_time = Gauge(
            "mcp_gateway_process_start_time_seconds", "Start time of each worker.", multiprocess_mode="liveall", registry=r
        )
        self.start_time.set(time.time())  # workers.set(1) waits until the worker is serving
        self.tls_not_after = Gauge(
            "mcp_gateway_tls_certificate_not_after_seconds",
            "Expiry (Unix time) of the TLS certificate served; the earliest across workers.",
            # A label, so a worker has no sample until it has read its certificate: an unlabeled
            # gauge starts at 0 in a new worker, and livemin then reported 0 (the shipped
            # "certificate expiring" alerts fire) each time a worker started or was replaced.
            labelnames=("certificate",),
            multiprocess_mode="livemin",
            registry=r,
        )
        # Backend pools, per worker and summed: each worker has its own pool per target.
        self.pool_connections = Gauge(
            "mcp_gateway_pool_connections",
            "Open backend connections by target and state (in_use, idle), summed over workers.",
            ["target_id", "state"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.pool_max = Gauge(
            "mcp_gateway_pool_max_connections",
            "Most backend connections per target (mcp-query_pool_max times the workers).",
            ["target_id"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.pool_waiting = Gauge(
            "mcp_gateway_pool_waiting",
            "Calls waiting for a backend connection, by target.",
            ["target_id"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.pool_timeouts = Counter(
            "mcp_gateway_pool_timeouts",
            "Calls that gave up waiting for a backend connection (UNAVAILABLE after mcp-query_pool_timeout_ms).",
            ["target_id"],
            registry=r,
        )
        self._pool_targets: set[str] = set()
        self._pool_timeouts_seen: dict[str, int] = {}  # target_id -> its pool's timeouts already counted
        self._collectors: list[Any] = []  # scrape-time collectors (backends.retrieval.metrics)
        # The query result cache (backends/result_cache). Names are a contract with deploy/'s dashboard.
        self.cache_hits = Counter(
            "mcp_cache_hits", "Query result cache lookups answered from the cache.", ["target_id"], registry=r
        )
        self.cache_misses = Counter(
            "mcp_cache_misses", "Query result cache lookups that found nothing fresh.", ["target_id"], registry=r
        )
        self.cache_evictions = Counter(
            "mcp_cache_evictions",
            "Cached results dropped, by reason: max_entries, max_bytes, expired, invalidated, cleared, profile_changed.",
            ["target_id", "reason"],
            registry=r,
        )
        # The store is shared (by the workers, or by the instances with Redis): every worker reports
        # the same totals, so the most recent report is the value (several instances: take the max).
        self.cache_entries = Gauge(
            "mcp_cache_entries", "Results in the query result cache.", multiprocess_mode="mostrecent", registry=r
        )
        self.cache_bytes = Gauge(
            "mcp_cache_bytes", "Bytes of results in the query result cache.", multiprocess_mode="mostrecent", registry=r
        )
        self._clients: OrderedDict[str, None] = OrderedDict()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Per-request updates are events appended on the event loop and folded into the metrics
        # by flush(): an append is atomic, so the request path takes no lock and updates no dict.
        self._exchanges: deque[tuple[str, int, int, int]] = deque()
        self._tool_calls: deque[tuple[str, str, str, str, float]] = deque()
        self._others: deque[tuple[Any, tuple[str, ...], float, bool]] = deque()  # count and observe
        self._inflight: dict[str, int] = {}
        self._totals_snapshot: tuple[float, dict[str, float]] | None = None  # refresh_totals

    # -- per-request updates, folded in by flush() ----------------------------------------
    def count(self, metric: Counter, *labels: str, amount: float = 1.0) -> None:
        self._others.append((metric, labels, amount, False))

    def observe(self, metric: Histogram, *labels: str, value: float) -> None:
        self._others.append((metric, labels, value, True))

    def tool_call(self, endpoint: str, tool: str, outcome: str, version: str, seconds: float) -> None:
        """One tools/call answered with a tool result: its request (JSON-RPC outcome ok), its
        duration under the tool's name and outcome, and a tool error (jsonrpc_code 0)."""
        self._tool_calls.append((endpoint, tool, outcome, version, seconds))

    def exchange(self, endpoint: str, status: int, request_bytes: int, response_bytes: int) -> None:
        """One HTTP answer on an MCP endpoint: its status and body sizes (-1: no body read or sent)."""
        exchanges = self._exchanges
        exchanges.append((endpoint, status, request_bytes, response_bytes))
        if len(exchanges) > MAX_PENDING_EVENTS:  # nothing flushes (no running app): bound the memory
            self.flush()

    def inflight_add(self, endpoint: str, delta: int) -> None:
        # Only the event loop changes these: flush() copies the dict in one C call.
        self._inflight[endpoint] = self._inflight.get(endpoint, 0) + delta

    def flush(self) -> None:
        """Fold the pending events into the (shared) metric values: one update per label set."""
        counts: dict[tuple[Any, tuple[str, ...]], float] = {}
        observed: dict[tuple[Any, tuple[str, ...]], list[Any]] = {}  # [bucket counts, sum]

        def add(metric: Any, labels: tuple[str, ...], amount: float) -> None:
            counts[(metric, labels)] = counts.get((metric, labels), 0.0) + amount

        def sample(metric: Any, labels: tuple[str, ...], value: float, n: int = 1) -> None:
            entry = observed.get((metric, labels))
            if entry is None:
                entry = observed[(metric, labels)] = [[0] * len(metric._upper_bounds), 0.0]
            entry[0][bisect.bisect_left(metric._upper_bounds, value)] += n  # first bound >= value, as observe()
            entry[1] += value * n

        # Identical HTTP answers (same status and sizes) are counted in C, then folded once each.
        for (endpoint, status, request_bytes, response_bytes), n in collections.Counter(_drain(self._exchanges)).items():
            add(self.http_responses, (endpoint, str(status)), n)
            if request_bytes >= 0:
                sample(self.request_bytes, (endpoint,), request_bytes, n)
            if response_bytes >= 0:
                sample(self.response_bytes, (endpoint,), response_bytes, n)
        for endpoint, tool, outcome, version, seconds in _drain(self._tool_calls):
            add(self.requests, (endpoint, "tools/call", "ok"), 1.0)
            sample(self.operation_duration, (endpoint, "tools/call", tool, outcome, version), seconds)
            if outcome != "ok":
                add(self.errors, (endpoint, "0", outcome), 1.0)
        for metric, labels, value, is_sample in _drain(self._others):
            if is_sample:
                sample(metric, labels, value)
            else:
                add(metric, labels, value)
        for (metric, labels), amount in counts.items():
            self.child(metric, *labels).inc(amount)
        for (metric, labels), (buckets, total) in observed.items():
            child = self.child(metric, *labels)
            child._sum.inc(total)  # prometheus_client has no public batch observe
            for index, n in enumerate(buckets):
                if n:
                    child._buckets[index].inc(n)
        for endpoint, value in self._inflight.copy().items():
            self.child(self.inflight, endpoint).set(value)

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached: label lookup costs more than the update itself
        on the request path (measured by bench/gateway_overhead.py)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def counter(self, name: str, help: str, labels: list[str]) -> Counter:
        """A counter an endpoint declares for itself (e.g. mcp_ai_anomalies), once per registry.
        Through here, not prometheus_client directly: the multiprocess mode is fixed when
        prometheus_client is first imported, which must happen after the CLI set its directory."""
        found = self.registry._names_to_collectors.get(name)
        return found if found is not None else Counter(name, help, labels, registry=self.registry)

    def auth_failed(self, endpoint: str, reason: str, client: str) -> None:
        self.auth_failures.labels(endpoint, reason).inc()
        if client not in self._clients and len(self._clients) >= MAX_CLIENT_LABELS:
            client = "other"
        self._clients[client] = None
        self.auth_failures_by_client.labels(client).inc()

    # -- the query result cache (backends.result_cache.cache.CacheMetrics) -------------------
    def cache_lookup(self, target_id: str, hit: bool) -> None:
        self.count(self.cache_hits if hit else self.cache_misses, target_id)

    def cache_evicted(self, evicted: dict[tuple[str, str], int]) -> None:
        for (target_id, reason), n in evicted.items():
            self.count(self.cache_evictions, target_id, reason, amount=n)

    def cache_totals(self, entries: int, size: int) -> None:
        self.cache_entries.set(entries)
        self.cache_bytes.set(size)

    def sample_process(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.resident_memory.set(_resident_bytes() or usage.ru_maxrss * 1024)
        self.cpu_seconds.set(usage.ru_utime + usage.ru_stime)

    def sample_pools(self, pools: list[dict[str, Any]]) -> None:
        """Set the pool gauges from `TargetPools.stats()` (once a second); a target that went
        away loses its series."""
        targets = set()
        for entry in pools:
            target = entry["target_id"]
            targets.add(target)
            self.pool_connections.labels(target, "in_use").set(entry["in_use"])
            self.pool_connections.labels(target, "idle").set(entry["idle"])
            self.pool_max.labels(target).set(entry["max_size"])
            self.pool_waiting.labels(target).set(entry["waiting"])
            # The pool counts its timeouts since it was built; a rebuilt pool starts again at 0.
            seen = self._pool_timeouts_seen.get(target, 0)
            new = entry["timeouts"] - seen if entry["timeouts"] >= seen else entry["timeouts"]
            self.pool_timeouts.labels(target).inc(new)
            self._pool_timeouts_seen[target] = entry["timeouts"]
        for gone in self._pool_targets - targets:
            for metric, labels in (
                (self.pool_connections, (gone, "in_use")),
                (self.pool_connections, (gone, "idle")),
                (self.pool_max, (gone,)),
                (self.pool_waiting, (gone,)),
            ):
                with contextlib.suppress(KeyError):
                    metric.remove(*labels)
            self._pool_timeouts_seen.pop(gone, None)
        self._pool_targets = targets

    def add_collector(self, collector: Any) -> None:
        """A collector evaluated when /metrics is scraped, by whichever worker answers: for
        numbers every worker reads alike from shared state (the RAG index in rag.db)."""
        self._collectors.append(collector)
        if not multiprocess_dir():
            self.registry.register(collector)

    def collecting_registry(self) -> CollectorRegistry:
        """The registry whose collection covers every worker."""
        self.flush()
        reap_dead_workers()
        if not multiprocess_dir():
            return self.registry
        registry = multiprocess_registry()
        for collector in self._collectors:
            registry.register(collector)
        return registry

    def exposition(self) -> bytes:
        return generate_latest(_EveryFamily(self.collecting_registry().collect, self._declared()))

    def _declared(self) -> list[Any]:
        """Every family this object declares, without samples (what a fresh worker has not written yet)."""
        return [family for metric in vars(self).values() if isinstance(metric, MetricWrapperBase) for family in metric.describe()]

    def totals(self) -> dict[str, float]:
        """Cross-worker totals for get_status and the stats endpoint."""
        out = {"requests_total": 0.0, "failures_total": 0.0, "inflight": 0.0, "auth_failures_total": 0.0, "workers": 0.0}
        for family in self.collecting_registry().collect():
            for sample in family.samples:
                if sample.name == "mcp_gateway_requests_total":
                    out["requests_total"] += sample.value
                    if sample.labels.get("outcome") != "ok":
                        out["failures_total"] += sample.value
                elif sample.name == "mcp_gateway_inflight_requests":
                    out["inflight"] += sample.value
                elif sample.name == "mcp_gateway_auth_failures_total":
                    out["auth_failures_total"] += sample.value
                elif sample.name == "mcp_gateway_workers":
                    out["workers"] += sample.value
        return out

    def refresh_totals(self) -> None:
        """Take a snapshot of `totals()` for get_status. The app does this once a second in a
        thread: collecting every worker's files costs milliseconds, which get_status (the tool
        health checkers poll) paid on each call, ~15x a get_config."""
        totals = self.totals()
        self._totals_snapshot = (time.time(), totals)

    def totals_snapshot(self) -> tuple[float, dict[str, float]]:
        """(when it was taken, the totals) of the latest snapshot; taken now if there is none yet."""
        if self._totals_snapshot is None:
            self.refresh_totals()
        assert self._totals_snapshot is not None
        return self._totals_snapshot

    def samples(self, prefix: str = "") -> list[dict[str, object]]:
        rows = []
        for family in self.collecting_registry().collect():
            for sample in family.samples:
                if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                    rows.append({"name": sample.name, "labels": dict(sample.labels), "value": sample.value})
        return rows


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int | None:
    """The process's resident set size now (Linux: /proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


# Gauges whose value before their first event is truly 0 (nothing in flight, nothing waiting, an
# empty cache). Others are not: a certificate's expiry or a handler's health at 0 would fire alerts.
ZERO_AT_START = frozenset(
    {
        "mcp_gateway_inflight_requests",
        "mcp_gateway_pool_connections",
        "mcp_gateway_pool_max_connections",
        "mcp_gateway_pool_waiting",
        "mcp_cache_entries",
        "mcp_cache_bytes",
    }
)


class _EveryFamily:
    """/metrics with every family present from the start: a family that has no series yet (no
    event with its labels so far, or a collector with nothing to report) is exported as one
    zero-valued series without labels, so a fresh deployment's dashboard shows 0 rather than
    "No data" and rules over absent series do not misfire."""

    def __init__(self, families: Callable[[], Iterable[Any]], declared: list[Any]) -> None:
        self.families, self.declared = families, declared

    def collect(self) -> Iterator[Any]:
        seen: set[str] = set()
        ours = {family.name for family in self.declared}
        for family in self.families():  # a scrape collector's family yielded empty is 0 by its contract
            seen.add(family.name)
            yield family if family.samples else _zero(family, collected=family.name not in ours)
        for family in self.declared:
            if family.name not in seen:
                seen.add(family.name)
                yield _zero(family)


def _zero(family: Any, *, collected: bool = False) -> Any:
    zero = Metric(family.name, family.documentation, family.type, getattr(family, "unit", ""))
    if family.type == "counter":
        zero.add_sample(family.name + "_total", {}, 0.0)
    elif family.type == "histogram":
        zero.add_sample(family.name + "_bucket", {"le": "+Inf"}, 0.0)
        zero.add_sample(family.name + "_count", {}, 0.0)
        zero.add_sample(family.name + "_sum", {}, 0.0)
    elif family.type == "summary":
        zero.add_sample(family.name + "_count", {}, 0.0)
        zero.add_sample(family.name + "_sum", {}, 0.0)
    elif collected or family.name in ZERO_AT_START:  # a gauge only where 0 is the truth before any event
        zero.add_sample(family.name, {}, 0.0)
    return zero
