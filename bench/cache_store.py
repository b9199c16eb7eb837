"""Which embedded store the query result cache should use: measured, not guessed.

Candidates, each with the operations the cache needs on its request path:

    memory       an OrderedDict LRU per worker process (the lower bound: no sharing at all)
    memory+gen   the same, plus what makes it correct across workers: before every lookup,
                 read a shared invalidation generation (a memory-mapped counter in the data
                 directory) and, when it moved, drop what the log says (not counted here)
    sqlite       backends.result_cache.embedded.EmbeddedStore: one WAL file shared by all
                 workers (the lookup is one indexed read; hits are written twice a second)
    redis        backends.result_cache.redis_store.RedisStore on 127.0.0.1:6379 (db 15,
                 flushed before and after): one Lua round trip per lookup

Reported per candidate and payload size: hit and put cost in microseconds (wall and CPU of
the calling process), with 1 process and with 2 processes doing lookups at once (the
gateway's default worker layout on this machine), and the resident memory one worker adds
per 10,000 cached results. What sharing buys is in `sharing`: with W workers a per-worker
cache stores each result W times and answers the first W lookups of a statement from the
database instead of once.

    python bench/cache_store.py --json bench/out/cache_store.json [--ops 4000]
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import orjson  # noqa: E402
from report import emit  # noqa: E402

from backends.result_cache.embedded import EmbeddedStore  # noqa: E402
from backends.result_cache.redis_store import RedisStore  # noqa: E402
from backends.result_cache.store import EntryMeta, Limits  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/15"
KEYS = 1000
LIMITS = Limits(max_entries=100_000, max_bytes=1 << 30)


def payload_of(size: int, i: int) -> bytes:
    rows = [[i, "x" * 40, i * 7] for _ in range(max(1, size // 60))]
    return orjson.dumps({"columns": [{"name": "id", "type": "int"}], "rows": rows, "truncated": False})


def meta(i: int) -> EntryMeta:
    return EntryMeta(f"k{i:08d}", "bench", "", "0x1", "SELECT id FROM points WHERE id = ?", ("points",))


class MemoryStore:
    """The per-worker candidate, with the cross-worker generation check when `gen` is set."""

    def __init__(self, directory: Path | None) -> None:
        self.entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self.gen_map = self.seen = None
        if directory is not None:
            path = directory / "generation"
            if not path.exists():
                path.write_bytes(b"\0" * 8)
            with open(path, "r+b") as fh:
                self.gen_map = mmap.mmap(fh.fileno(), 8)
            self.seen = bytes(self.gen_map[:8])

    def get(self, key: str, target_id: str, max_age_ms: int) -> Any:
        if self.gen_map is not None and self.gen_map[:8] != self.seen:
            self.entries.clear()
            self.seen = bytes(self.gen_map[:8])
        found = self.entries.get(key)
        if found is None or (time.time() - found[1]) * 1000 >= max_age_ms:
            return None
        self.entries.move_to_end(key)
        return found[0]

    def put(self, m: EntryMeta, payload: bytes, ttl_ms: int, limits: Limits) -> dict:
        self.entries[m.key] = (payload, time.time())
        while len(self.entries) > limits.max_entries:
            self.entries.popitem(last=False)
        return {}

    def maintain(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def open_store(kind: str, directory: Path) -> Any:
    if kind == "memory":
        return MemoryStore(None)
    if kind == "memory+gen":
        return MemoryStore(directory)
    if kind == "sqlite":
        return EmbeddedStore(directory)
    return RedisStore(REDIS_URL)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lookups(kind: str, directory: str, size: int, ops: int, queue: Any) -> None:
    """One process: fill KEYS entries (timing the puts), then `ops` lookups that all hit."""
    store = open_store(kind, Path(directory))
    payloads = [payload_of(size, i) for i in range(KEYS)]
    wall, used = time.perf_counter(), cpu()
    for i in range(KEYS):
        store.put(meta(i), payloads[i], 600_000, LIMITS)
    put = ((time.perf_counter() - wall) / KEYS * 1e6, (cpu() - used) / KEYS * 1e6)
    wall, used = time.perf_counter(), cpu()
    for i in range(ops):
        hit = store.get(f"k{(i * 7919) % KEYS:08d}", "bench", 600_000)
        if hit is None:
            raise RuntimeError(f"{kind}: expected a hit")
        if i % 1000 == 999:
            store.maintain()  # the upkeep thread's work, twice a second in the server
    get = ((time.perf_counter() - wall) / ops * 1e6, (cpu() - used) / ops * 1e6)
    store.close()
    queue.put(
        {"put_us": round(put[0], 1), "put_cpu_us": round(put[1], 1), "hit_us": round(get[0], 1), "hit_cpu_us": round(get[1], 1)}
    )


def run(kind: str, size: int, ops: int, procs: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="mcpgw-cachebench-"))
    if kind == "redis":
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
    try:
        queue: Any = multiprocessing.get_context("fork").Queue()
        workers = [
            multiprocessing.get_context("fork").Process(target=lookups, args=(kind, str(directory), size, ops, queue))
            for _ in range(procs)
        ]
        for worker in workers:
            worker.start()
        results = [queue.get(timeout=300) for _ in workers]
        for worker in workers:
            worker.join()
        return {key: round(sum(r[key] for r in results) / len(results), 1) for key in results[0]}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def memory_per_10k(kind: str, size: int) -> float:
    """MB of resident memory a worker grows by when it caches 10,000 results of `size` bytes."""
    directory = Path(tempfile.mkdtemp(prefix="mcpgw-cachemem-"))
    queue: Any = multiprocessing.get_context("fork").Queue()

    def child() -> None:
        store = open_store(kind, directory)
        before = _rss_kb()
        for i in range(10_000):
            store.put(meta(i), payload_of(size, i), 600_000, LIMITS)
        for i in range(10_000):
            store.get(f"k{i:08d}", "bench", 600_000)
        queue.put((_rss_kb() - before) / 1024)
        store.close()

    if kind == "redis":
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    grown = queue.get(timeout=300)
    process.join()
    shutil.rmtree(directory, ignore_errors=True)
    return round(grown, 1)


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=4000, help="lookups per process and case")
    parser.add_argument("--kinds", default="memory,memory+gen,sqlite,redis", help="comma-separated candidates")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    kinds = tuple(args.kinds.split(","))
    load_before = list(os.getloadavg())
    results: dict[str, Any] = {}
    for size in (200, 10_000):
        for kind in kinds:
            row = {f"p{procs}": run(kind, size, args.ops, procs) for procs in (1, 2)}
            row["worker_rss_mb_per_10k"] = memory_per_10k(kind, size)
            results[f"{kind}_{size}B"] = row
            print(f"{kind} {size}B: {json.dumps(row)}", file=sys.stderr, flush=True)
    output = {
        "bench": "cache_store",
        "ops_per_process": args.ops,
        "keys": KEYS,
        "load_average_before_after": [load_before, list(os.getloadavg())],
        "cpus": os.cpu_count(),
        "results": results,
        "sharing": {
            "note": "per worker: each result stored W times and fetched from the database W times; shared: once",
            "copies_per_result": {"memory (W workers)": "W", "sqlite": 1, "redis": 1},
        },
    }
    emit(output, args.json)


if __name__ == "__main__":
    main()
