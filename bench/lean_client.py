"""A load generator that costs the client little, so the server's cost is what gets measured.

Clients are spread over `procs` forked processes. HTTP clients are asyncio connections
speaking raw HTTP/1.1 keep-alive over TLS (the approach of bench/gateway_overhead.py: httpx
spent about 0.8 ms of client CPU per request, more than a trivial tool costs the gateway);
driver clients (`run_threads`) are threads, one connection each. Every client makes its
warm-up calls, then all start together at one wall-clock instant, so the TLS handshakes and
connects are not in the figures. Every HTTP answer is checked (status 200, a JSON-RPC
result, isError false).

    from lean_client import Endpoint, run_http, run_threads, summary

`run_http(..., server_group=PGID)` also reports the server's CPU per call (user+system time
of its process group from /proc), which other load on a shared machine does not distort. Both
runners report the clients' own CPU per call: what the load generator itself takes from the
machine's cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

PROTOCOL_VERSION = "2025-06-18"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to POST: https://127.0.0.1:<port><path> with a bearer token (plain http
    when ca_path is empty; no Authorization header when token is empty: the peers in
    bench/peers.py)."""

    port: int
    path: str
    token: str
    ca_path: str


def tool_call(name: str, arguments: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}})


def request_bytes(endpoint: Endpoint, body: bytes) -> bytes:
    head = (
        f"POST {endpoint.path} HTTP/1.1\r\nHost: 127.0.0.1:{endpoint.port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\n"
        + (f"Authorization: Bearer {endpoint.token}\r\n" if endpoint.token else "")
        + f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        return status, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return status, b"".join(chunks)
            chunks.append(chunk[:-2])
    raise RuntimeError(f"response without a length: {headers}")


def message_of(body: bytes) -> bytes:
    """The JSON-RPC message of an answer: the body, or the data of its first SSE event (a
    server answering in text/event-stream, as DBHub does)."""
    if body[:1] in (b"{", b"["):
        return body
    for line in body.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].strip()
    return body


def check_answer(status: int, body: bytes) -> None:
    answer = orjson.loads(message_of(body))
    if status != 200 or "result" not in answer or answer["result"].get("isError"):
        raise RuntimeError(f"bad answer {status}: {body[:300]!r}")


async def _http_client(
    endpoint: Endpoint, make_body: Callable[[], bytes], calls: int, warmup: int, start_at: float, out: list[float]
) -> None:
    context = ssl.create_default_context(cafile=endpoint.ca_path) if endpoint.ca_path else None
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port, ssl=context)
    try:
        for _ in range(warmup):
            writer.write(request_bytes(endpoint, make_body()))
            check_answer(*await read_response(reader))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        for _ in range(calls):
            request = request_bytes(endpoint, make_body())  # built before the clock starts
            started = time.perf_counter()
            writer.write(request)
            status, body = await read_response(reader)
            out.append((time.perf_counter() - started) * 1000)
            check_answer(status, body)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def process_group_cpu_s(group: int) -> float:
    """User+system CPU seconds of every live process in a process group (a server's master
    and workers): unaffected by what else shares the machine, unlike latency."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # field 5 of stat: pgrp
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _spread(
    run_share: Callable[[int, float], list[float]], *, clients: int, procs: int, cpu_group: int | None = None
) -> tuple[list[float], float, float | None, float]:
    """Run `clients` clients in min(procs, clients) forked processes; each process runs
    run_share(its client count, start_at) and returns latencies in ms. Returns them all, the
    wall time from the common start to the last client's end, the CPU seconds process group
    `cpu_group` (a server) spent over that time (None without a group), and the CPU seconds
    the client processes spent from the common start to their end."""
    procs = max(1, min(procs, clients))
    ctx = multiprocessing.get_context("fork")  # closures travel to the children without pickling
    queue = ctx.Queue()
    start_at = time.time() + 1.0 + 0.03 * clients  # every client is connected and warm by then

    def child(share: int) -> None:
        random.seed()  # forked children would otherwise draw the same "random" statements
        try:
            cpu_at_start: list[float] = []
            latencies = run_share(share, start_at, cpu_at_start)
            queue.put({"latencies": latencies, "ended": time.time(), "cpu": time.process_time() - cpu_at_start[0]})
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
            queue.put({"error": repr(exc)})

    workers = [ctx.Process(target=child, args=(clients // procs + (1 if i < clients % procs else 0),)) for i in range(procs)]
    for worker in workers:
        worker.start()
    if cpu_group is not None:
        time.sleep(max(0.0, start_at - 0.01 - time.time()))  # warm-ups done: measure from the start
    cpu_before = process_group_cpu_s(cpu_group) if cpu_group is not None else 0.0
    results = [queue.get(timeout=600) for _ in workers]
    cpu = process_group_cpu_s(cpu_group) - cpu_before if cpu_group is not None else None
    for worker in workers:
        worker.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    latencies = [x for r in results for x in r["latencies"]]
    return latencies, max(r["ended"] for r in results) - start_at, cpu, sum(r["cpu"] for r in results)


def run_http(
    endpoint: Endpoint,
    make_body: Callable[[], bytes],
    *,
    clients: int,
    calls_per_client: int,
    procs: int,
    warmup: int = 10,
    server_group: int | None = None,
) -> tuple[list[float], float, float | None, float]:
    """Each client: one keep-alive TLS connection, calls made one after the other. With
    server_group (the server's process group), also the server's CPU seconds meanwhile."""

    def share(count: int, start_at: float, cpu_at_start: list[float]) -> list[float]:
        async def main() -> list[float]:
            out: list[float] = []
            clients = [_http_client(endpoint, make_body, calls_per_client, warmup, start_at, out) for _ in range(count)]
            # The clients' CPU is counted from the common start, after their warm-up calls.
            asyncio.get_running_loop().call_later(
                max(0.0, start_at - time.time()), lambda: cpu_at_start.append(time.process_time())
            )
            await asyncio.gather(*clients)
            return out

        return asyncio.run(main())

    return _spread(share, clients=clients, procs=procs, cpu_group=server_group)


def run_threads(
    make_call: Callable[[], Callable[[], None]], *, clients: int, calls_per_client: int, procs: int, warmup: int = 10
) -> tuple[list[float], float, float | None, float]:
    """Each client: a thread with its own `make_call()` (e.g. its own driver connection)."""

    def share(count: int, start_at: float, cpu_at_start: list[float]) -> list[float]:
        out: list[float] = []
        lock = threading.Lock()

        def client() -> None:
            call = make_call()
            for _ in range(warmup):
                call()
            time.sleep(max(0.0, start_at - time.time()))
            mine = []
            for _ in range(calls_per_client):
                started = time.perf_counter()
                call()
                mine.append((time.perf_counter() - started) * 1000)
            with lock:
                out.extend(mine)

        threads = [threading.Thread(target=client) for _ in range(count)]
        for thread in threads:
            thread.start()
        time.sleep(max(0.0, start_at - time.time()))
        cpu_at_start.append(time.process_time())
        for thread in threads:
            thread.join()
        if len(out) != count * calls_per_client:
            raise RuntimeError("a client thread failed (see its traceback above)")
        return out

    return _spread(share, clients=clients, procs=procs)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(
    latencies_ms: list[float], wall_s: float, server_cpu_s: float | None = None, client_cpu_s: float | None = None
) -> dict[str, float]:
    ordered = sorted(latencies_ms)
    out = {
        "calls": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(percentile(ordered, 0.95), 3),
        "p99_ms": round(percentile(ordered, 0.99), 3),
        "throughput_per_s": round(len(ordered) / wall_s, 1),
    }
    if server_cpu_s is not None:
        out["server_cpu_ms_per_call"] = round(server_cpu_s * 1000 / len(ordered), 3)
    if client_cpu_s is not None:
        out["client_cpu_ms_per_call"] = round(client_cpu_s * 1000 / len(ordered), 3)
    return out
