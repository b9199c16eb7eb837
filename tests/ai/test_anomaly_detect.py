"""The detectors on constructed evidence: each fires on its pattern and stays quiet on steady traffic."""

from __future__ import annotations

from handlers.ai.anomaly.detect import BUCKET_S, DigestBucket, Event, Evidence, TrafficBucket, detect, injection_signatures

NOW = 1_000_000.0  # a multiple of BUCKET_S
WINDOW, BASELINE = 60, 600


def steady(calls_per_bucket: int, *, errors: int = 0, tool: str = "run_sql_readonly", until: float = NOW) -> list[TrafficBucket]:
    start = int(NOW - WINDOW - BASELINE)
    return [TrafficBucket(s, "query", tool, calls_per_bucket, errors) for s in range(start, int(until), BUCKET_S)]


def kinds(found) -> list[str]:
    return sorted(a.kind for a in found)


def run(ev: Evidence):
    return detect(ev, now=NOW, window_s=WINDOW, baseline_s=BASELINE)


def test_steady_workload_of_any_size_raises_nothing() -> None:
    for size in (1, 50, 5000):
        digests = [DigestBucket(s, "0xAB", size, size * 900, 1500) for s in range(int(NOW - 660), int(NOW), BUCKET_S)]
        found, notes = run(Evidence(steady(size, errors=size // 100), [], digests, traffic_since=NOW - 3600))
        assert found == [] and notes == []


def test_rate_spike_against_the_baseline() -> None:
    buckets = steady(20, until=NOW - WINDOW) + [
        TrafficBucket(s, "query", "run_sql_readonly", 400, 0) for s in range(int(NOW - WINDOW), int(NOW), BUCKET_S)
    ]
    found, _ = run(Evidence(buckets, [], [], traffic_since=NOW - 3600))
    assert kinds(found) == ["request_rate_spike"]
    assert found[0].evidence["rate_per_s"] == 40.0 and found[0].evidence["baseline_rate_per_s"] == 2.0


def test_no_rate_judgement_without_history() -> None:
    buckets = [TrafficBucket(s, "query", "run_sql_readonly", 400, 0) for s in range(int(NOW - WINDOW), int(NOW), BUCKET_S)]
    found, notes = run(Evidence(buckets, [], [], traffic_since=NOW - WINDOW))
    assert found == [] and "not judged" in notes[0]


def test_error_spike() -> None:
    buckets = steady(30, until=NOW - WINDOW) + [
        TrafficBucket(s, "query", "run_sql_readonly", 30, 20) for s in range(int(NOW - WINDOW), int(NOW), BUCKET_S)
    ]
    found, _ = run(Evidence(buckets, [], [], traffic_since=NOW - 3600))
    assert kinds(found) == ["error_rate_spike"]
    assert found[0].evidence["window_errors"] == 120 and found[0].severity == "high"


def test_injection_attempts_and_refusal_burst_per_token() -> None:
    texts = [
        "SELECT * FROM users WHERE id = ? OR ? = ?",
        "SELECT name FROM t UNION SELECT password FROM mysql.user",
        "SELECT ?; DROP TABLE users",
        "SELECT SLEEP(?)",
    ]
    events = [
        Event(NOW - 30 + i, "sql_refused", "query", "run_sql_readonly", "127.0.0.1", "fp1", f"0x{i % 4}", texts[i % 4])
        for i in range(12)
    ]
    events += [Event(NOW - 20, "sql_refused", "query", "run_sql_readonly", "127.0.0.1", "fp2", "0x9", "UPDATE t SET a = ?")]
    found, _ = run(Evidence([], events, []))
    assert kinds(found) == ["refusal_burst", "sql_injection_attempts"]
    injection = next(a for a in found if a.kind == "sql_injection_attempts")
    assert injection.subject == {"token_fingerprint": "fp1"} and injection.severity == "high"
    assert {"union_select", "tautology", "stacked_statement", "time_delay"} <= set(injection.evidence["signatures"])


def test_auth_failure_burst_per_client_but_not_a_steady_trickle() -> None:
    burst = [Event(NOW - 40 + i * 0.1, "auth_failure", "rag", client="10.0.0.9") for i in range(30)]
    trickle = [Event(NOW - 650 + i * 6, "auth_failure", "rag", client="10.0.0.7") for i in range(110)]  # ~1 per 6 s all along
    found, _ = run(Evidence([], burst + trickle, []))
    assert [(a.kind, a.subject) for a in found] == [("auth_failure_burst", {"client": "10.0.0.9"})]


def test_latency_outlier_per_digest() -> None:
    digests = [DigestBucket(s, "0xSLOW", 5, 5 * 1000, 1200) for s in range(int(NOW - 660), int(NOW - WINDOW), BUCKET_S)]
    digests += [DigestBucket(int(NOW - 30), "0xSLOW", 4, 4 * 80_000, 120_000)]
    found, _ = run(Evidence([], [], digests, {"0xSLOW": "SELECT * FROM t WHERE a = ?"}))
    assert kinds(found) == ["latency_outlier"]
    assert found[0].evidence["window_mean_us"] == 80_000 and found[0].evidence["baseline_mean_us"] == 1000


def test_signatures_do_not_fire_on_ordinary_queries() -> None:
    for sql in [
        "SELECT id, name FROM customers WHERE region = ? ORDER BY id LIMIT ?",
        "SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer_id",
    ]:
        assert injection_signatures(sql) == []
