"""A client written against the official MCP Python SDK 1.x, run under its own interpreter.

tests/test_sdk_v1.py runs this script with the Python of a second virtualenv holding `mcp<2`
(the 1.x series many deployed agents still use), because the 1.x and 2.x SDKs cannot share
one environment. For each `--endpoint NAME=TOKEN` it connects over HTTPS (trusting `--ca`),
initializes, lists every tool page, and calls `--call NAME=TOOL:JSON_ARGS` if given; then it
prints one JSON document on stdout for the test to check. A failure of any step is recorded
(as its exception type and message), not raised, so the test can name the step that failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from importlib.metadata import version
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


def _leaves(error: BaseException) -> list[BaseException]:
    """The real errors inside the SDK's task-group exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _client_factory(ca_path: str):  # the SDK calls it with headers/timeout/auth keywords
    def factory(
        headers: dict[str, str] | None = None, timeout: httpx.Timeout | None = None, auth: httpx.Auth | None = None
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(headers=headers, timeout=timeout or httpx.Timeout(30.0), auth=auth, verify=ca_path)

    return factory


async def exercise(url: str, token: str, ca_path: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    report: dict[str, Any] = {"url": url}
    try:
        async with (
            streamablehttp_client(
                url, headers={"Authorization": f"Bearer {token}"}, httpx_client_factory=_client_factory(ca_path)
            ) as (
                read,
                write,
                _session_id,
            ),
            ClientSession(read, write) as session,
        ):
            init = await asyncio.wait_for(session.initialize(), 20)
            report["protocol_version"] = init.protocolVersion
            report["server_name"] = init.serverInfo.name
            names: list[str] = []
            cursor: str | None = None
            while True:
                page = await asyncio.wait_for(session.list_tools(cursor=cursor), 20)
                names.extend(tool.name for tool in page.tools)
                cursor = page.nextCursor
                if not cursor:
                    break
            report["tools"] = names
            report["calls"] = []
            for tool, arguments in calls:
                result = await asyncio.wait_for(session.call_tool(tool, arguments), 20)
                report["calls"].append({"tool": tool, "is_error": result.isError, "structured": result.structuredContent})
            await asyncio.wait_for(session.send_ping(), 20)
            report["ping"] = "ok"
    except BaseException as exc:  # noqa: BLE001 - report every failure, including ExceptionGroup
        report["error"] = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(exc))
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--endpoint", action="append", default=[], help="NAME=TOKEN")
    parser.add_argument("--call", action="append", default=[], help='NAME=TOOL:{"json": "args"}')
    args = parser.parse_args()
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for spec in args.call:
        endpoint, _, rest = spec.partition("=")
        tool, _, raw = rest.partition(":")
        calls.setdefault(endpoint, []).append((tool, json.loads(raw or "{}")))

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec in args.endpoint:
            endpoint, _, token = spec.partition("=")
            out[endpoint] = await exercise(f"{args.base_url}/mcp/{endpoint}", token, args.ca, calls.get(endpoint, []))
        return out

    report = {"sdk_version": version("mcp"), "python": sys.version.split()[0], "endpoints": asyncio.run(run())}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
