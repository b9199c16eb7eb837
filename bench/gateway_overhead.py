"""Gateway core overhead: tools/call throughput and latency against a floor and a peer.

Three HTTPS servers run side by side in one run, all with the same self-signed certificate
(the one the gateway generates) and the same number of uvicorn workers:

  gateway  `mcp-gateway serve --workers N`, tools/call config `get_config {"variable_name":
           "mcp-timeout_ms"}` (auth, protocol checks, argument validation, the async tool
           reading the runtime snapshot, output shaping, metrics and tool statistics: the
           whole real path)
  floor    a bare Starlette app sending the same response body (bench/overhead_peers.py)
  fastmcp  the official SDK's MCPServer (ex-FastMCP) with an equivalent tool, streamable
           HTTP, stateless JSON-response mode

plus a `gateway_ping` row (the same gateway answering `ping`: HTTP, auth, protocol and
metrics without a tool), which shows how the gateway's cost splits, a `gateway_get_status` row
(the same gateway answering config `get_status {}`, the tool health checkers poll; ratios
get_status_vs_get_config and get_status_vs_floor), and with `--baseline DIR`
a `gateway_baseline` row: the gateway of another checkout (e.g. `git worktree add /tmp/gw-before
HEAD`), measured in the same interleaved rounds, so a change is judged side by side.

For each concurrency level the servers are measured one after the other, in `--rounds`
interleaved rounds (the median round is reported), with the same load: a bounded number of
requests over keep-alive HTTP/1.1 TLS connections, spread over `--client-procs` load-generator
processes (a lean asyncio client, so it is not the bottleneck). Every answer is checked (HTTP
200, a JSON-RPC result, isError false).

Reported per server and level: requests/s, p50/p99 latency in ms, and server CPU ms per
request (user+system time of the server's processes; unaffected by the load generator
sharing the cores), plus ratios gateway/floor and gateway/fastmcp.

    python bench/gateway_overhead.py --json bench/out/gateway_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import multiprocessing
import os
import platform
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

from lean_client import PROTOCOL_VERSION, Endpoint, check_answer, process_group_cpu_s, read_response, request_bytes  # noqa: E402
from report import emit  # noqa: E402
from server_process import free_port, start_gateway  # noqa: E402

TOOL_VARIABLE = "mcp-timeout_ms"


@dataclass(frozen=True)
class Target:
    name: str
    port: int
    tool: str
    token: str
    pids_group: int  # process group of the server (its master and workers)
    method: str = "tools/call"  # "ping": the gateway's HTTP + auth + protocol path without a tool
    arguments: tuple[tuple[str, str], ...] = (("variable_name", TOOL_VARIABLE),)


# -- load generator --------------------------------------------------------------------------


def _request_bytes(target: Target) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": target.method}
    if target.method == "tools/call":
        message["params"] = {"name": target.tool, "arguments": dict(target.arguments)}
    return request_bytes(Endpoint(target.port, "/mcp/config", target.token, ca_path=""), orjson.dumps(message))


async def _connection(target: Target, ca_path: str, count: int, latencies: list[float], start_at: float) -> None:
    context = ssl.create_default_context(cafile=ca_path)
    reader, writer = await asyncio.open_connection("127.0.0.1", target.port, ssl=context)
    request = _request_bytes(target)
    # one request before the clock starts, so the TLS handshake is not in the figures
    writer.write(request)
    check_answer(*await read_response(reader))
    await asyncio.sleep(max(0.0, start_at - time.time()))
    for _ in range(count):
        started = time.perf_counter()
        writer.write(request)
        status, body = await read_response(reader)
        latencies.append(time.perf_counter() - started)
        check_answer(status, body)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def _client_process(target: Target, ca_path: str, connections: int, requests: int, start_at: float, out: Any) -> None:
    async def run() -> dict[str, Any]:
        latencies: list[float] = []
        share = [requests // connections + (1 if i < requests % connections else 0) for i in range(connections)]
        tasks = [_connection(target, ca_path, n, latencies, start_at) for n in share if n]
        await asyncio.gather(*tasks)
        return {"latencies": latencies, "ended": time.time()}

    try:
        out.put(asyncio.run(run()))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        out.put({"error": repr(exc)})


def measure(target: Target, ca_path: str, *, concurrency: int, requests: int, client_procs: int) -> dict[str, Any]:
    procs = min(client_procs, concurrency)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    start_at = time.time() + 0.5 + 0.02 * concurrency  # lets every connection finish its handshake first
    workers = []
    for index in range(procs):
        connections = concurrency // procs + (1 if index < concurrency % procs else 0)
        share = requests // procs + (1 if index < requests % procs else 0)
        workers.append(ctx.Process(target=_client_process, args=(target, ca_path, connections, share, start_at, queue)))
    for worker in workers:
        worker.start()
    while time.time() < start_at - 0.05:
        time.sleep(0.01)
    cpu_before = process_group_cpu_s(target.pids_group)
    results = [queue.get(timeout=300) for _ in workers]
    cpu_after = process_group_cpu_s(target.pids_group)
    for worker in workers:
        worker.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"{target.name} at concurrency {concurrency}: {errors[0]}")
    latencies = sorted(x for r in results for x in r["latencies"])
    elapsed = max(r["ended"] for r in results) - start_at
    return {
        "requests": len(latencies),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 3),
        "server_cpu_ms_per_request": round((cpu_after - cpu_before) * 1000 / len(latencies), 3),
    }


# -- the servers -----------------------------------------------------------------------------


@contextlib.contextmanager
def peer_server(factory: str, *, workers: int, cert: Path, key: Path) -> Iterator[tuple[int, int]]:
    """Run bench/overhead_peers.py:<factory> under uvicorn; yields (port, process group)."""
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", f"overhead_peers:{factory}", "--factory", "--app-dir", str(REPO_ROOT / "bench"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    process = subprocess.Popen(command, start_new_session=True)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 30
        while True:
            try:
                import http.client

                conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{factory} server did not start") from None
                time.sleep(0.1)
        yield port, process.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _baseline_start_gateway(root: Path) -> Any:
    """`start_gateway` of the checkout at `root`: its server_process puts that tree first on PYTHONPATH."""
    spec = importlib.util.spec_from_file_location("baseline_server_process", root / "tests" / "server_process.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline {root}: no tests/server_process.py there")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.start_gateway


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(x) for x in args.concurrency.split(",")]
    load_before = list(os.getloadavg())
    with contextlib.ExitStack() as stack:
        gateway = stack.enter_context(start_gateway(workers=args.workers))
        cert, key = gateway.ca_path, gateway.ca_path.with_name("key.pem")
        floor_port, floor_group = stack.enter_context(peer_server("floor_app", workers=args.workers, cert=cert, key=key))
        peer_port, peer_group = stack.enter_context(peer_server("fastmcp_app", workers=args.workers, cert=cert, key=key))
        gateway_port = int(gateway.base_url.rsplit(":", 1)[1])
        targets = [
            Target("gateway", gateway_port, "get_config", gateway.tokens["config"], gateway.process.pid),
            Target("floor", floor_port, "get_config", "unused-by-the-floor", floor_group),
            Target("fastmcp", peer_port, "get_config", "unused-by-fastmcp", peer_group),
        ]
        if args.baseline:
            start_baseline = _baseline_start_gateway(args.baseline.resolve())
            tls = {"mcp-ssl_cert": str(cert), "mcp-ssl_key": str(key)}  # the same certificate as the others
            baseline = stack.enter_context(start_baseline(workers=args.workers, variables=tls, ca_path=cert))
            port = int(baseline.base_url.rsplit(":", 1)[1])
            targets.insert(1, Target("gateway_baseline", port, "get_config", baseline.tokens["config"], baseline.process.pid))
            if args.status_row:
                token, pid = baseline.tokens["config"], baseline.process.pid
                targets.append(Target("gateway_baseline_get_status", port, "get_status", token, pid, arguments=()))
        if args.ping_row:  # where the gateway's time goes: everything but the tool call
            targets.append(Target("gateway_ping", gateway_port, "", gateway.tokens["config"], gateway.process.pid, method="ping"))
        if args.status_row:  # the tool health checkers poll: should cost what get_config costs
            status = Target(
                "gateway_get_status", gateway_port, "get_status", gateway.tokens["config"], gateway.process.pid, arguments=()
            )
            targets.append(status)
        for target in targets:  # warm-up: imports, caches, thread pools
            measure(target, str(cert), concurrency=4, requests=args.warmup, client_procs=1)
        results: dict[str, dict[str, Any]] = {t.name: {} for t in targets}
        for level in levels:
            # Rounds interleave the servers, so a burst of other load on the machine hits all alike;
            # the round with the median rps is reported, every round's rps is kept.
            rounds: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
            for _ in range(args.rounds):
                for target in targets:
                    figures = measure(
                        target, str(cert), concurrency=level, requests=args.requests, client_procs=args.client_procs
                    )
                    rounds[target.name].append(figures)
                    print(f"c={level:<3} {target.name:<8} {json.dumps(figures)}", file=sys.stderr, flush=True)
            for name, measured in rounds.items():
                median = sorted(measured, key=lambda f: f["rps"])[len(measured) // 2]
                results[name][str(level)] = {**median, "rps_rounds": [f["rps"] for f in measured]}
    ratios = {
        str(level): {
            "gateway_vs_floor_rps": _ratio(results["gateway"][str(level)]["rps"], results["floor"][str(level)]["rps"]),
            "gateway_vs_fastmcp_rps": _ratio(results["gateway"][str(level)]["rps"], results["fastmcp"][str(level)]["rps"]),
            "gateway_vs_floor_cpu_per_request": _ratio(
                results["gateway"][str(level)]["server_cpu_ms_per_request"],
                results["floor"][str(level)]["server_cpu_ms_per_request"],
            ),
            "gateway_vs_fastmcp_cpu_per_request": _ratio(
                results["gateway"][str(level)]["server_cpu_ms_per_request"],
                results["fastmcp"][str(level)]["server_cpu_ms_per_request"],
            ),
        }
        for level in levels
    }
    if "gateway_get_status" in results:
        for level in levels:
            status, config = results["gateway_get_status"][str(level)], results["gateway"][str(level)]
            ratios[str(level)]["get_status_vs_get_config_rps"] = _ratio(status["rps"], config["rps"])
            ratios[str(level)]["get_status_vs_floor_rps"] = _ratio(status["rps"], results["floor"][str(level)]["rps"])
            ratios[str(level)]["get_status_vs_get_config_cpu_per_request"] = _ratio(
                status["server_cpu_ms_per_request"], config["server_cpu_ms_per_request"]
            )
    if "gateway_baseline" in results:
        for level in levels:
            base = results["gateway_baseline"][str(level)]
            ratios[str(level)]["gateway_baseline_vs_floor_rps"] = _ratio(base["rps"], results["floor"][str(level)]["rps"])
            ratios[str(level)]["gateway_vs_baseline_cpu_per_request"] = _ratio(
                results["gateway"][str(level)]["server_cpu_ms_per_request"], base["server_cpu_ms_per_request"]
            )
    return {
        "benchmark": "gateway_overhead",
        "tool": f'tools/call get_config {{"variable_name": "{TOOL_VARIABLE}"}} on /mcp/config',
        "protocol_version": PROTOCOL_VERSION,
        "transport": "HTTPS (same self-signed cert for all), HTTP/1.1 keep-alive, one connection per concurrent client",
        "server_workers": args.workers,
        "requests_per_server_level_round": args.requests,
        "client_processes": args.client_procs,
        "rounds": args.rounds,
        "load_average_before_after": [load_before, list(os.getloadavg())],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "note": (
            f"{os.cpu_count()} CPUs shared by the server workers and {args.client_procs} load-generator processes: "
            "rps is a lower bound for every server alike; server_cpu_ms_per_request is independent of that sharing. "
            "A load average well above the CPU count means other work shared the machine: trust the ratios and CPU per request, not absolute rps."
        ),
        "results": results,
        "ratios": ratios,
        "goals": {"gateway_vs_floor_rps_min": 0.7, "gateway_vs_fastmcp_rps_min": 2.0},
        "goals_met": {
            level: {"floor": r["gateway_vs_floor_rps"] >= 0.7, "fastmcp": r["gateway_vs_fastmcp_rps"] >= 2.0}
            for level, r in ratios.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of every server")
    parser.add_argument("--requests", type=int, default=2000, help="requests per server, concurrency level and round")
    parser.add_argument("--warmup", type=int, default=300, help="requests per server before measuring")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated concurrency levels")
    parser.add_argument("--client-procs", type=int, default=2, help="load-generator processes")
    parser.add_argument("--no-ping-row", dest="ping_row", action="store_false", help="skip the gateway `ping` row")
    parser.add_argument(
        "--no-status-row", dest="status_row", action="store_false", help="skip the gateway `get_status` row (same gateway)"
    )
    parser.add_argument("--baseline", type=Path, help="also measure the gateway of this checkout (gateway_baseline)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level; the median is reported")
    args = parser.parse_args()
    report = run(args)
    emit(report, args.json)


if __name__ == "__main__":
    main()
