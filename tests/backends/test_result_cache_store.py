"""The result-cache stores on their own, the embedded SQLite file and a real Redis 7 (a
test-owned database, flushed): every behaviour the cache relies on, for both, and the key
material. Two store objects on one file or one Redis database are two workers (or instances)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.result_cache.embedded import EmbeddedStore
from backends.result_cache.keys import cache_key, profile_fingerprint, tables_of
from backends.result_cache.redis_store import RedisStore
from backends.result_cache.store import EntryMeta, Limits, Selector, StoreUnavailable

REDIS_TEST_URL = "redis://127.0.0.1:6379/12"  # test-owned database number, flushed by the tests (the e2e tests own 13)
ROOMY = Limits(max_entries=100, max_bytes=1 << 20)


def flush_redis() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=1).flushdb()
    except redis.RedisError as exc:
        from conftest import _unavailable

        _unavailable("Redis at 127.0.0.1:6379", exc)


@pytest.fixture(params=["embedded", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple]:
    """Two handles on one store, as two workers (or two instances) have."""
    if request.param == "embedded":
        pair = (EmbeddedStore(tmp_path), EmbeddedStore(tmp_path))
    else:
        flush_redis()
        pair = (RedisStore(REDIS_TEST_URL), RedisStore(REDIS_TEST_URL))
    yield pair
    for store in pair:
        store.close()
    if request.param == "redis":
        flush_redis()


def meta(key: str, target: str = "t1", tables: tuple[str, ...] = ("orders", "shop.orders"), text: str = "") -> EntryMeta:
    return EntryMeta(
        key, target, "", "0x" + key.upper().ljust(16, "0"), text or f"SELECT * FROM orders WHERE k = ? -- {key}", tables
    )


def counters(store) -> dict[str, dict[str, int]]:
    return store.stats()[0]


def test_miss_then_hit_with_its_age_and_counters(stores) -> None:
    store, _ = stores
    assert store.get("a", "t1", 60_000) is None
    assert store.put(meta("a"), b"payload-a", 60_000, ROOMY) == {}
    time.sleep(0.02)
    hit = store.get("a", "t1", 60_000)
    assert hit is not None and hit.payload == b"payload-a" and hit.age_ms >= 15
    stats, totals = store.stats()
    assert stats["t1"]["hits"] == 1 and stats["t1"]["misses"] == 1
    assert stats["t1"]["entries"] == 1 and stats["t1"]["bytes"] == len(b"payload-a")
    assert totals == {"entries": 1, "bytes": len(b"payload-a")}
    (entry,) = store.entries(None, 10, "hits")
    assert entry["hits"] == 1 and entry["digest_text"].startswith("SELECT * FROM orders") and "payload" not in str(entry)
    assert entry["tables"] == ["orders", "shop.orders"] and 55_000 < entry["ttl_left_ms"] <= 60_000


def test_expiry_and_a_lowered_ttl(stores) -> None:
    store, _ = stores
    store.put(meta("a"), b"x", 60, ROOMY)
    store.put(meta("b"), b"y", 60_000, ROOMY)
    time.sleep(0.1)
    assert store.get("a", "t1", 60_000) is None  # its own TTL ran out
    assert store.get("b", "t1", 50) is None  # older than the TTL in force now
    assert store.get("b", "t1", 60_000) is not None
    store.maintain()
    stats, totals = store.stats()
    assert stats["t1"]["expired"] == 1 and totals["entries"] == 1


def test_lru_eviction_by_entries_keeps_the_recently_used(stores) -> None:
    store, _ = stores
    two = Limits(max_entries=2, max_bytes=1 << 20)
    store.put(meta("a"), b"1", 60_000, two)
    store.put(meta("b"), b"2", 60_000, two)
    assert store.get("a", "t1", 60_000) is not None  # a is now more recent than b
    assert store.put(meta("c"), b"3", 60_000, two) == {("t1", "max_entries"): 1}
    assert store.get("b", "t1", 60_000) is None
    assert store.get("a", "t1", 60_000) is not None and store.get("c", "t1", 60_000) is not None


def test_lru_eviction_by_bytes(stores) -> None:
    store, _ = stores
    small = Limits(max_entries=100, max_bytes=250)
    for key in ("a", "b", "c"):
        store.put(meta(key, target="t2"), key.encode() * 100, 60_000, small)
    stats, totals = store.stats()
    assert totals == {"entries": 2, "bytes": 200}
    assert stats["t2"]["max_bytes"] == 1 and store.get("a", "t2", 60_000) is None


def test_invalidation_by_table_pattern_and_target(stores) -> None:
    store, _ = stores
    store.put(meta("a", tables=("orders",)), b"1", 60_000, ROOMY)
    store.put(meta("b", tables=("customers", "crm.customers")), b"2", 60_000, ROOMY)
    store.put(meta("c", target="t2", tables=("orders",), text="SELECT count(*) FROM orders"), b"3", 60_000, ROOMY)
    store.put(meta("d", target="t2", tables=("lines",), text="SELECT sum(qty) FROM lines"), b"4", 60_000, ROOMY)
    assert store.drop(Selector(table="crm.customers"), "invalidated") == {("t1", "invalidated"): 1}
    assert store.drop(Selector(table="customers"), "invalidated") == {}
    assert store.drop(Selector(target_id="t1", table="orders"), "invalidated") == {("t1", "invalidated"): 1}
    assert store.get("c", "t2", 60_000) is not None
    pattern = re.compile(r"sum\(qty\)", re.IGNORECASE)
    assert store.drop(Selector(pattern=pattern), "invalidated") == {("t2", "invalidated"): 1}
    by_id = re.compile(re.escape(meta("c").digest))
    assert store.drop(Selector(pattern=by_id), "invalidated") == {("t2", "invalidated"): 1}
    assert store.stats()[1] == {"entries": 0, "bytes": 0}
    assert counters(store)["t2"]["invalidated"] == 2


def test_two_workers_share_entries_and_invalidations(stores) -> None:
    one, two = stores
    one.put(meta("a"), b"shared", 60_000, ROOMY)
    assert two.get("a", "t1", 60_000).payload == b"shared"  # filled by one, served by the other
    assert two.drop(Selector(target_id="t1"), "cleared") == {("t1", "cleared"): 1}
    assert one.get("a", "t1", 60_000) is None  # the other's invalidation, seen at once
    one.maintain()
    two.maintain()
    assert counters(one)["t1"]["hits"] == 1 and counters(one)["t1"]["misses"] == 1


def test_redis_outage_is_unavailable_fast_not_a_hang() -> None:
    store = RedisStore("redis://127.0.0.1:1/13")  # nothing listens on port 1
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.get("a", "t1", 60_000)
    with pytest.raises(StoreUnavailable, match="retrying shortly"):
        store.put(meta("a"), b"x", 60_000, ROOMY)  # not even tried: the store was just down
    assert time.monotonic() - started < 2
    with pytest.raises(StoreUnavailable, match="not a valid Redis URL"):
        RedisStore("http://secret-password@nowhere")


def test_tables_of_a_statement() -> None:
    sql = "WITH recent AS (SELECT * FROM shop.Orders) SELECT * FROM recent JOIN customers c ON c.id = recent.cid"
    assert tables_of(sql, "postgres") == ("customers", "orders", "shop.orders")
    assert tables_of("SELECT 1", "mysql") == ()
    assert tables_of("SHOW search_path", "postgres") == ()


def test_key_and_fingerprint_material() -> None:
    base = {"target_id": "t", "host": "a", "port": 1, "cache_ttl_ms": 0, "comment": ""}
    auth = {"auth_profile_id": "p", "db_username": "u", "db_password": "x"}
    same = profile_fingerprint({**base, "cache_ttl_ms": 5000, "comment": "new"}, auth)
    assert same == profile_fingerprint(base, auth)  # a TTL or a comment changes no result
    assert profile_fingerprint({**base, "host": "b"}, auth) != same
    assert profile_fingerprint(base, {**auth, "db_username": "v"}) != same
    parts = {"target_id": "t", "fingerprint": same, "schema": "", "sql": "SELECT 1", "max_rows": 10, "max_bytes": 100}
    assert cache_key(**parts) == cache_key(**parts)
    for field, other in (("target_id", "u"), ("schema", "s"), ("sql", "SELECT 2"), ("max_rows", 11), ("max_bytes", 99)):
        assert cache_key(**{**parts, field: other}) != cache_key(**parts)
