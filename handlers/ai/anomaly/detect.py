"""The detectors: each compares the window just ended with a rolling baseline before it.

Every detector needs both an absolute floor and a ratio to its baseline, so a steady workload of
any size raises nothing and a quiet gateway's first few calls are not a "spike". Request-rate
spikes need a baseline (the gateway must have seen traffic for at least half of the baseline
period); without one they are not judged and the result says so.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

BUCKET_S = 10  # width of a traffic bucket (gateway.evidence writes them)


@dataclass(frozen=True)
class TrafficBucket:
    start: int  # unix seconds, a multiple of BUCKET_S
    endpoint: str
    tool: str
    calls: int
    errors: int


@dataclass(frozen=True)
class Event:
    ts: float
    kind: str  # "auth_failure" | "sql_refused"
    endpoint: str = ""
    tool: str = ""
    client: str = ""
    token_fp: str = ""
    digest: str = ""
    text: str = ""  # sql_refused: the normalised statement (literals replaced by ?), bounded


@dataclass(frozen=True)
class DigestBucket:
    start: int
    digest: str
    calls: int
    sum_us: int
    max_us: int


@dataclass(frozen=True)
class Thresholds:
    min_rate_per_s: float = 5.0  # a request-rate spike must reach this rate...
    rate_ratio: float = 3.0  # ...and this multiple of the baseline rate...
    rate_z: float = 4.0  # ...and this many standard deviations above it
    min_errors: int = 20  # an error-rate spike needs this many errors in the window...
    error_ratio_jump: float = 0.25  # ...and an error ratio this much above the baseline's
    min_refusals: int = 10  # refusal burst per token
    min_injections: int = 3  # refused statements with injection signatures per token
    min_auth_failures: int = 10  # per client address
    burst_ratio: float = 5.0  # bursts must also be this multiple of the baseline's count per window
    latency_ratio: float = 5.0  # a digest's window mean vs its baseline mean
    min_latency_calls: int = 3
    min_baseline_latency_calls: int = 10


@dataclass
class Anomaly:
    kind: str
    severity: str  # "low" | "medium" | "high"
    subject: dict[str, str]
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)


# Signatures of SQL injection attempts, matched on refused statements only (a refusal is already
# suspicious; a signature says what it looked like). Names are what the evidence reports.
INJECTION_SIGNATURES: dict[str, re.Pattern[str]] = {
    "union_select": re.compile(r"\bunion\b(\s+all)?\s+select\b", re.I),
    "tautology": re.compile(r"\bor\b\s+(\?|'[^']*'|\d+)\s*=\s*(\?|'[^']*'|\d+)", re.I),
    "stacked_statement": re.compile(r";\s*(drop|delete|insert|update|alter|create|grant|truncate|shutdown)\b", re.I),
    "time_delay": re.compile(r"\b(sleep|pg_sleep|benchmark|waitfor\s+delay)\s*\(?", re.I),
    "file_access": re.compile(r"\b(load_file|into\s+(out|dump)file|pg_read_file|pg_ls_dir|lo_export|copy\b.*\bprogram)\b", re.I),
    "comment_truncation": re.compile(r"(--|#|/\*)\s*$", re.M),
    "catalog_probe": re.compile(r"\b(information_schema|pg_catalog|mysql\.user|pg_shadow|pg_authid)\b", re.I),
    "encoded_payload": re.compile(r"\b(char|chr)\s*\(\s*\?(\s*,\s*\?)+\s*\)|0x[0-9a-f]{8,}", re.I),
}


def injection_signatures(text: str) -> list[str]:
    return [name for name, pattern in INJECTION_SIGNATURES.items() if pattern.search(text)]


@dataclass
class Evidence:
    buckets: list[TrafficBucket]
    events: list[Event]
    digests: list[DigestBucket]
    digest_texts: dict[str, str] = field(default_factory=dict)
    traffic_since: float | None = None  # when the gateway first recorded traffic


def detect(
    ev: Evidence, *, now: float, window_s: int, baseline_s: int, t: Thresholds | None = None
) -> tuple[list[Anomaly], list[str]]:
    """Anomalies in [now - window_s, now) against [now - window_s - baseline_s, now - window_s); notes."""
    t = t or Thresholds()
    window_start = now - window_s
    baseline_start = window_start - baseline_s
    notes: list[str] = []
    found: list[Anomaly] = []
    has_baseline = ev.traffic_since is not None and ev.traffic_since <= window_start - baseline_s / 2
    if has_baseline:
        found += _rate_spikes(ev.buckets, window_start, baseline_start, window_s, t)
    else:
        notes.append("request-rate spikes not judged: less traffic history than half the baseline period")
    found += _error_spikes(ev.buckets, window_start, baseline_start, t)
    found += _event_bursts(ev.events, window_start, baseline_start, window_s, baseline_s, t)
    found += _latency_outliers(ev.digests, ev.digest_texts, window_start, baseline_start, t)
    return found, notes


def _in(start: float, lo: float, hi: float) -> bool:
    return lo <= start < hi


def _rate_spikes(
    buckets: list[TrafficBucket], window_start: float, baseline_start: float, window_s: int, t: Thresholds
) -> list[Anomaly]:
    per_key: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    for b in buckets:
        per_key[(b.endpoint, b.tool)][b.start] = per_key[(b.endpoint, b.tool)].get(b.start, 0) + b.calls
    out = []
    first_baseline_bucket = int(baseline_start // BUCKET_S) * BUCKET_S
    baseline_slots = range(first_baseline_bucket, int(window_start), BUCKET_S)
    for (endpoint, tool), counts in per_key.items():
        window_calls = sum(c for start, c in counts.items() if start >= window_start)
        rate = window_calls / window_s
        baseline_rates = [counts.get(start, 0) / BUCKET_S for start in baseline_slots]  # empty buckets count as 0
        if not baseline_rates:
            continue
        mean = statistics.fmean(baseline_rates)
        spread = statistics.pstdev(baseline_rates) if len(baseline_rates) > 1 else 0.0
        threshold = max(t.min_rate_per_s, mean * t.rate_ratio, mean + t.rate_z * max(spread, 0.5))
        if rate >= threshold:
            out.append(
                Anomaly(
                    kind="request_rate_spike",
                    severity="high" if rate >= 3 * threshold else "medium",
                    subject={"endpoint": endpoint, "tool": tool},
                    summary=f"/mcp/{endpoint} {tool}: {rate:.1f} calls/s against a baseline of {mean:.2f}",
                    evidence={
                        "window_calls": window_calls,
                        "rate_per_s": round(rate, 3),
                        "baseline_rate_per_s": round(mean, 3),
                        "baseline_stdev": round(spread, 3),
                        "threshold_per_s": round(threshold, 3),
                    },
                )
            )
    return out


def _error_spikes(buckets: list[TrafficBucket], window_start: float, baseline_start: float, t: Thresholds) -> list[Anomaly]:
    window: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    baseline: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for b in buckets:
        side = window if b.start >= window_start else baseline if b.start >= baseline_start else None
        if side is not None:
            side[(b.endpoint, b.tool)][0] += b.calls
            side[(b.endpoint, b.tool)][1] += b.errors
    out = []
    for key, (calls, errors) in window.items():
        if errors < t.min_errors or calls == 0:
            continue
        ratio = errors / calls
        base_calls, base_errors = baseline.get(key, (0, 0))
        base_ratio = base_errors / base_calls if base_calls else 0.0
        if ratio - base_ratio >= t.error_ratio_jump:
            out.append(
                Anomaly(
                    kind="error_rate_spike",
                    severity="high" if ratio >= 0.5 else "medium",
                    subject={"endpoint": key[0], "tool": key[1]},
                    summary=f"/mcp/{key[0]} {key[1]}: {errors} of {calls} calls failed ({ratio:.0%}; baseline {base_ratio:.0%})",
                    evidence={
                        "window_calls": calls,
                        "window_errors": errors,
                        "error_ratio": round(ratio, 4),
                        "baseline_calls": base_calls,
                        "baseline_error_ratio": round(base_ratio, 4),
                    },
                )
            )
    return out


def _event_bursts(
    events: list[Event], window_start: float, baseline_start: float, window_s: int, baseline_s: int, t: Thresholds
) -> list[Anomaly]:
    windows_in_baseline = max(1.0, baseline_s / window_s)
    refused: dict[str, list[Event]] = defaultdict(list)
    refused_before: dict[str, int] = defaultdict(int)
    auth: dict[str, list[Event]] = defaultdict(list)
    auth_before: dict[str, int] = defaultdict(int)
    for e in events:
        in_window = e.ts >= window_start
        if not in_window and e.ts < baseline_start:
            continue
        if e.kind == "sql_refused":
            if in_window:
                refused[e.token_fp].append(e)
            else:
                refused_before[e.token_fp] += 1
        elif e.kind == "auth_failure":
            if in_window:
                auth[e.client].append(e)
            else:
                auth_before[e.client] += 1
    out = []
    for token_fp, items in refused.items():
        baseline_per_window = refused_before[token_fp] / windows_in_baseline
        signatures: dict[str, int] = defaultdict(int)
        digests: dict[str, int] = defaultdict(int)
        injected = 0
        for e in items:
            names = injection_signatures(e.text)
            if names:
                injected += 1
                digests[e.digest] += 1
                for name in names:
                    signatures[name] += 1
        subject = {"token_fingerprint": token_fp or "(none)"}
        if injected >= t.min_injections:
            out.append(
                Anomaly(
                    kind="sql_injection_attempts",
                    severity="high" if injected >= 3 * t.min_injections else "medium",
                    subject=subject,
                    summary=f"{injected} refused statements with injection signatures from token {token_fp or '(none)'}",
                    evidence={
                        "refused_with_signatures": injected,
                        "signatures": dict(signatures),
                        "digests": sorted(digests, key=digests.get, reverse=True)[:10],
                    },
                )
            )
        if len(items) >= t.min_refusals and len(items) >= t.burst_ratio * baseline_per_window:
            out.append(
                Anomaly(
                    kind="refusal_burst",
                    severity="medium",
                    subject=subject,
                    summary=f"{len(items)} refused statements from token {token_fp or '(none)'} (baseline {baseline_per_window:.1f} per window)",
                    evidence={
                        "refused": len(items),
                        "baseline_per_window": round(baseline_per_window, 2),
                        "tools": sorted({e.tool for e in items}),
                    },
                )
            )
    for client, items in auth.items():
        baseline_per_window = auth_before[client] / windows_in_baseline
        if len(items) >= t.min_auth_failures and len(items) >= t.burst_ratio * baseline_per_window:
            out.append(
                Anomaly(
                    kind="auth_failure_burst",
                    severity="high" if len(items) >= 5 * t.min_auth_failures else "medium",
                    subject={"client": client},
                    summary=f"{len(items)} failed authentications from {client} (baseline {baseline_per_window:.1f} per window)",
                    evidence={
                        "failures": len(items),
                        "baseline_per_window": round(baseline_per_window, 2),
                        "endpoints": sorted({e.endpoint for e in items}),
                    },
                )
            )
    return out


def _latency_outliers(
    digests: list[DigestBucket], texts: dict[str, str], window_start: float, baseline_start: float, t: Thresholds
) -> list[Anomaly]:
    window: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    baseline: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for d in digests:
        if d.start >= window_start:
            agg = window[d.digest]
            agg[0] += d.calls
            agg[1] += d.sum_us
            agg[2] = max(agg[2], d.max_us)
        elif d.start >= baseline_start:
            baseline[d.digest][0] += d.calls
            baseline[d.digest][1] += d.sum_us
    out = []
    for digest, (calls, sum_us, max_us) in window.items():
        base_calls, base_sum = baseline.get(digest, (0, 0))
        if calls < t.min_latency_calls or base_calls < t.min_baseline_latency_calls or base_sum == 0:
            continue
        mean, base_mean = sum_us / calls, base_sum / base_calls
        if mean >= t.latency_ratio * base_mean:
            out.append(
                Anomaly(
                    kind="latency_outlier",
                    severity="high" if mean >= 4 * t.latency_ratio * base_mean else "medium",
                    subject={"digest": digest},
                    summary=f"digest {digest} ran at {mean / 1000:.1f} ms on average against {base_mean / 1000:.1f} ms before",
                    evidence={
                        "digest_text": texts.get(digest, ""),
                        "window_calls": calls,
                        "window_mean_us": round(mean),
                        "window_max_us": max_us,
                        "baseline_calls": base_calls,
                        "baseline_mean_us": round(base_mean),
                    },
                )
            )
    return out
