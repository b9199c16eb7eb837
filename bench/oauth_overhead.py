"""OAuth access tokens vs static tokens: server CPU per call, side by side in one run.

One gateway (`--workers N`, OAuth on, issuer = a real `oidc-provider` on loopback started by
tests/oauth/oidc.py) answers config `get_config` to the same load twice per round: once with the
endpoint's static token, once with a JWT access token the provider issued by the authorization
code grant (audience = /mcp/config). Rounds interleave the two; the median round is reported.
Reported per mode: requests/s, p50/p99 ms, server CPU ms per call; and the ratio jwt/static
(goal: within 1.10 at 16 clients). Also the cost of validating a token the first time a worker
sees it (signature, claims: `Verifier._validate`, in process, microseconds), which the
per-worker memo then saves on every later call with the same token.

    PYTHONPATH=. python bench/oauth_overhead.py --json bench/out/oauth_overhead.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))
sys.path.insert(0, str(REPO_ROOT))

from lean_client import Endpoint, run_http, tool_call  # noqa: E402
from oauth.oidc import start_oidc_provider  # noqa: E402
from report import emit  # noqa: E402
from server_process import start_gateway  # noqa: E402


def _validation_us(provider: Any, resource: str, issuer: str, n: int = 2000) -> float:
    """Microseconds to validate a never-seen token (RS256 signature + claims), in process."""
    from gateway import oauth

    cfg = oauth.OAuthConfig(
        issuer=issuer, jwks_url="", endpoints=frozenset({"*"}), algorithms=("RS256",), leeway_s=30,
        resource_url="", endpoint_scopes={}, tool_scopes={}, subject_claim="sub", carried_claims=(),
        jwks_cache_s=600, http_timeout_s=3.0, max_token_bytes=8192, use_ssl=True,
    )  # fmt: skip
    verifier = oauth.Verifier()
    verifier.keys.refresh(cfg)
    tokens = [provider.mint({"aud": resource, "scope": "mcp:config", "n": i}) for i in range(n)]
    started = time.perf_counter()
    for token in tokens:
        verifier._validate(token, resource, cfg)
    return (time.perf_counter() - started) / n * 1e6


def run(args: argparse.Namespace) -> dict[str, Any]:
    body = tool_call("get_config", {"variable_name": "mcp-timeout_ms"})
    rows: dict[str, list[dict[str, Any]]] = {"static": [], "jwt": []}
    with start_oidc_provider() as provider:
        variables = {"mcp-oauth_issuer": provider.issuer}
        with start_gateway(workers=args.workers, variables=variables) as gateway:
            resource = gateway.url("config")
            tokens = {"static": gateway.tokens["config"], "jwt": provider.token("alice", resource, "mcp:config")}
            group = os.getpgid(gateway.process.pid)
            port = int(gateway.base_url.rsplit(":", 1)[1])
            for _ in range(args.rounds):
                for mode in ("static", "jwt"):
                    endpoint = Endpoint(port, "/mcp/config", tokens[mode], str(gateway.ca_path))
                    latencies, wall, cpu, _ = run_http(
                        endpoint, lambda: body, clients=args.clients, calls_per_client=args.calls,
                        procs=args.client_procs, server_group=group,
                    )  # fmt: skip
                    latencies.sort()
                    rows[mode].append(
                        {
                            "rps": round(len(latencies) / wall, 1),
                            "p50_ms": round(latencies[len(latencies) // 2], 3),
                            "p99_ms": round(latencies[int(len(latencies) * 0.99)], 3),
                            "server_cpu_ms_per_call": round((cpu or 0.0) * 1000 / len(latencies), 4),
                        }
                    )
        first_sight_us = _validation_us(provider, resource, provider.issuer)

    def median(mode: str) -> dict[str, Any]:
        ordered = sorted(rows[mode], key=lambda r: r["server_cpu_ms_per_call"])
        return ordered[len(ordered) // 2]

    static, jwt = median("static"), median("jwt")
    return {
        "bench": "oauth_overhead",
        "workers": args.workers,
        "clients": args.clients,
        "calls_per_client": args.calls,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "static_token": static,
        "jwt_access_token": jwt,
        "ratio_cpu_jwt_vs_static": round(jwt["server_cpu_ms_per_call"] / static["server_cpu_ms_per_call"], 3),
        "ratio_rps_jwt_vs_static": round(jwt["rps"] / static["rps"], 3),
        "all_rounds": rows,
        "first_sight_validation_us": round(first_sight_us, 1),
        "cpu_spread_static": round(statistics.pstdev(r["server_cpu_ms_per_call"] for r in rows["static"]), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--calls", type=int, default=300, help="calls per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
