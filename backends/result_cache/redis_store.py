"""The Redis result-cache store (`cache-redis_url`): entries, LRU order, expiry and counters in
one Redis database, so every worker of every gateway instance shares entries and sees an
invalidation as soon as the call that made it returns.

Each operation that reads and changes bookkeeping is one Lua script, so it is one round trip
and atomic across instances; time is Redis's own clock (TIME), so instances with skewed clocks
agree on ages. Keys, under PREFIX:

    e:<key>  hash: p payload, t target, s schema, d digest, x digest text, tb tables, z size,
             c created ms, ex expires ms, h hits, u last used ms
    lru      sorted set key -> last use (microseconds)
    exp      sorted set key -> expiry (ms)
    tot      hash: n entries, b bytes; "<target>|n", "<target>|b" per target
    cnt      hash: "<target>|<counter>" -> count (hits, misses, eviction reasons)

Redis's own expiry is not used: an entry leaves through our scripts only, so the totals and
the counters stay exact. Redis being down, restarting or slow never fails a query: every
error becomes `StoreUnavailable` (the call is served uncached), and after one the store is
not tried again for RETRY_AFTER_S, so an outage does not add a timeout to every call.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from backends.result_cache.store import COUNTERS, ORDERS, EntryMeta, Evictions, Hit, Limits, Selector, StoreUnavailable

PREFIX = "mcpgw:rc:"
TIMEOUT_S = 0.25  # connect and each command: a local Redis answers in well under a millisecond
RETRY_AFTER_S = 1.0
META_FIELDS = ("t", "s", "d", "x", "tb", "z", "c", "ex", "h", "u")

_LUA_COMMON = """
local P = ARGV[1]
local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = math.floor(now_us / 1000)
local out = {}
local function drop(key, reason)
  local e = P .. 'e:' .. key
  local v = redis.call('HMGET', e, 't', 'z')
  redis.call('ZREM', P .. 'lru', key)
  redis.call('ZREM', P .. 'exp', key)
  if not v[1] then return end
  local size = tonumber(v[2])
  redis.call('DEL', e)
  redis.call('HINCRBY', P .. 'tot', 'n', -1)
  redis.call('HINCRBY', P .. 'tot', 'b', -size)
  redis.call('HINCRBY', P .. 'tot', v[1] .. '|n', -1)
  redis.call('HINCRBY', P .. 'tot', v[1] .. '|b', -size)
  if reason ~= '' then
    redis.call('HINCRBY', P .. 'cnt', v[1] .. '|' .. reason, 1)
    table.insert(out, v[1])
    table.insert(out, reason)
  end
end
local function drop_expired()
  local gone = redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', now_ms, 'LIMIT', 0, 1000)
  for _, key in ipairs(gone) do drop(key, 'expired') end
end
"""

# ARGV: prefix, key, target, max_age_ms -> {payload, age_ms} or nil
_GET = (
    _LUA_COMMON
    + """
local key, target, max_age = ARGV[2], ARGV[3], tonumber(ARGV[4])
local e = P .. 'e:' .. key
local v = redis.call('HMGET', e, 'p', 'c', 'ex')
if v[1] and now_ms >= tonumber(v[3]) then
  drop(key, 'expired')
  v[1] = false
end
if (not v[1]) or now_ms - tonumber(v[2]) >= max_age then
  redis.call('HINCRBY', P .. 'cnt', target .. '|misses', 1)
  return false
end
redis.call('ZADD', P .. 'lru', now_us, key)
redis.call('HINCRBY', e, 'h', 1)
redis.call('HSET', e, 'u', now_ms)
redis.call('HINCRBY', P .. 'cnt', target .. '|hits', 1)
return {v[1], now_ms - tonumber(v[2])}
"""
)

# ARGV: prefix, key, target, schema, digest, digest_text, tables, payload, ttl_ms, max_entries,
# max_bytes -> flat {target, reason, ...} of evictions
_PUT = (
    _LUA_COMMON
    + """
local key, target = ARGV[2], ARGV[3]
local size, ttl = string.len(ARGV[8]), tonumber(ARGV[9])
local max_n, max_b = tonumber(ARGV[10]), tonumber(ARGV[11])
drop_expired()
drop(key, '')
redis.call('HSET', P .. 'e:' .. key, 'p', ARGV[8], 't', target, 's', ARGV[4], 'd', ARGV[5], 'x', ARGV[6],
  'tb', ARGV[7], 'z', size, 'c', now_ms, 'ex', now_ms + ttl, 'h', 0, 'u', now_ms)
redis.call('ZADD', P .. 'lru', now_us, key)
redis.call('ZADD', P .. 'exp', now_ms + ttl, key)
local n = redis.call('HINCRBY', P .. 'tot', 'n', 1)
local b = redis.call('HINCRBY', P .. 'tot', 'b', size)
redis.call('HINCRBY', P .. 'tot', target .. '|n', 1)
redis.call('HINCRBY', P .. 'tot', target .. '|b', size)
while n > max_n or b > max_b do
  local oldest = redis.call('ZRANGE', P .. 'lru', 0, 1)
  local victim = oldest[1]
  if victim == key then victim = oldest[2] end
  if not victim then break end
  local vsize = tonumber(redis.call('HGET', P .. 'e:' .. victim, 'z') or 0)
  drop(victim, n > max_n and 'max_entries' or 'max_bytes')
  n = n - 1
  b = b - vsize
end
return out
"""
)

# ARGV: prefix, reason, key... -> flat {target, reason, ...}
_DROP = (
    _LUA_COMMON
    + """
for i = 3, #ARGV do drop(ARGV[i], ARGV[2]) end
return out
"""
)

_MAINTAIN = _LUA_COMMON + "drop_expired()\nreturn out\n"


class RedisStore:
    kind = "redis"

    def __init__(self, url: str) -> None:
        try:
            self.client = redis.Redis.from_url(
                url,
                socket_connect_timeout=TIMEOUT_S,
                socket_timeout=TIMEOUT_S,
                retry=Retry(NoBackoff(), 1),  # one retry: a connection broken by a restart is replaced once
                health_check_interval=30,
            )
        except ValueError as exc:  # a malformed URL; the message may quote it, so it is not repeated
            raise StoreUnavailable(f"cache-redis_url is not a valid Redis URL ({type(exc).__name__})") from None
        self._get = self.client.register_script(_GET)
        self._put = self.client.register_script(_PUT)
        self._drop = self.client.register_script(_DROP)
        self._maintain = self.client.register_script(_MAINTAIN)
        self._down_until = 0.0
        self._lock = threading.Lock()

    def _call(self, operation: Any, *args: Any) -> Any:
        if time.monotonic() < self._down_until:
            raise StoreUnavailable("the Redis cache store is unreachable; retrying shortly")
        try:
            return operation(*args)
        except redis.RedisError as exc:
            with self._lock:
                self._down_until = time.monotonic() + RETRY_AFTER_S
            raise StoreUnavailable(f"the Redis cache store is unreachable ({type(exc).__name__})") from None

    # -- the request path --------------------------------------------------------------------
    def get(self, key: str, target_id: str, max_age_ms: int) -> Hit | None:
        found = self._call(lambda: self._get(args=[PREFIX, key, target_id, max_age_ms]))
        if not found:
            return None
        return Hit(payload=found[0], age_ms=int(found[1]))

    def put(self, meta: EntryMeta, payload: bytes, ttl_ms: int, limits: Limits) -> Evictions:
        args = [PREFIX, meta.key, meta.target_id, meta.schema, meta.digest, meta.digest_text, meta.tables_field(), payload,
                ttl_ms, limits.max_entries, limits.max_bytes]  # fmt: skip
        return _evictions(self._call(lambda: self._put(args=args)))

    # -- everything else ---------------------------------------------------------------------
    def drop(self, selector: Selector, reason: str) -> Evictions:
        doomed = [
            m["key"]
            for m in self._metas()
            if selector.matches(m["t"], m["tb"], m["d"], m["x"])
        ]  # fmt: skip
        evicted: Evictions = {}
        for start in range(0, len(doomed), 500):
            batch = doomed[start : start + 500]
            for pair, n in _evictions(self._call(lambda b=batch: self._drop(args=[PREFIX, reason, *b]))).items():
                evicted[pair] = evicted.get(pair, 0) + n
        return evicted

    def entries(self, target_id: str | None, limit: int, order_by: str) -> list[dict[str, Any]]:
        if order_by not in ORDERS:
            raise ValueError(order_by)
        now_ms = self._now_ms()
        rows = [
            {
                "target_id": m["t"],
                "schema": m["s"],
                "digest": m["d"],
                "digest_text": m["x"],
                "tables": [t for t in m["tb"].split(",") if t],
                "size": int(m["z"]),
                "age_ms": max(0, now_ms - int(m["c"])),
                "ttl_left_ms": max(0, int(m["ex"]) - now_ms),
                "idle_ms": max(0, now_ms - int(m["u"])),
                "hits": int(m["h"]),
            }
            for m in reversed(self._metas())  # most recently used first
            if target_id is None or m["t"] == target_id
        ]
        if order_by != "recent":
            field = {"hits": "hits", "age": "age_ms", "size": "size"}[order_by]
            rows.sort(key=lambda r: -r[field])
        return rows[:limit]

    def stats(self) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
        def read() -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(PREFIX + "cnt")
            pipe.hgetall(PREFIX + "tot")
            counters, totals = pipe.execute()
            return counters, totals

        counters, totals = self._call(read)
        per_target: dict[str, dict[str, int]] = {}
        for source, names in ((counters, COUNTERS), (totals, ("n", "b"))):
            for field, value in source.items():
                target_id, _, name = field.decode().rpartition("|")
                if target_id and name in names:
                    row = per_target.setdefault(target_id, {"entries": 0, "bytes": 0, **dict.fromkeys(COUNTERS, 0)})
                    row[{"n": "entries", "b": "bytes"}.get(name, name)] = int(value)
        per_target = {t: row for t, row in per_target.items() if any(row.values())}
        return per_target, {"entries": int(totals.get(b"n", 0)), "bytes": int(totals.get(b"b", 0))}

    def totals(self) -> dict[str, int]:
        n, b = self._call(lambda: self.client.hmget(PREFIX + "tot", "n", "b"))
        return {"entries": int(n or 0), "bytes": int(b or 0)}

    def maintain(self) -> Evictions:
        return _evictions(self._call(lambda: self._maintain(args=[PREFIX])))

    def close(self) -> None:
        self.client.close()

    # -- helpers -------------------------------------------------------------------------------
    def _now_ms(self) -> int:
        seconds, micros = self._call(self.client.time)
        return seconds * 1000 + micros // 1000

    def _metas(self) -> list[dict[str, str]]:
        """Every entry's metadata (never its payload), read in pipelined batches."""

        def read() -> list[dict[str, str]]:
            keys = [k.decode() for k in self.client.zrange(PREFIX + "lru", 0, -1)]
            metas = []
            for start in range(0, len(keys), 500):
                pipe = self.client.pipeline(transaction=False)
                for key in keys[start : start + 500]:
                    pipe.hmget(PREFIX + "e:" + key, *META_FIELDS)
                for key, values in zip(keys[start : start + 500], pipe.execute()):
                    if values[0] is not None:  # gone since the key list was read
                        metas.append({"key": key, **{f: v.decode() for f, v in zip(META_FIELDS, values)}})
            return metas

        return self._call(read)


def _evictions(flat: list[bytes] | None) -> Evictions:
    evicted: Evictions = {}
    items = [item.decode() if isinstance(item, bytes) else str(item) for item in flat or []]
    for target_id, reason in zip(items[0::2], items[1::2]):
        evicted[(target_id, reason)] = evicted.get((target_id, reason), 0) + 1
    return evicted
