"""The least a Python MCP server can do for one SQL tools/call: the floor bench/peers.py sets
beside the gateway, Toolbox and DBHub.

A bare ASGI app (no framework) under uvicorn with the gateway's own loop and HTTP parser
(uvloop, httptools), plain HTTP as the peers speak it. For POST /mcp it parses the JSON-RPC
body, runs `arguments.sql` on `arguments.target_id` ("maria" or "pg") with the gateway's
drivers (pymysql, psycopg), one autocommit connection per thread in a thread pool (the thread
hop every blocking Python driver needs under asyncio), and answers the rows as the gateway's
compact text plus structuredContent. No auth, no read-only check, no caps, no deadline, no
metrics: what is left is HTTP, JSON and the driver, so the gateway's cost above it is what the
gateway itself adds.

With --io async there is no thread hop: psycopg's AsyncConnection and asyncmy (a compiled
asyncio MySQL driver, `pip install '.[bench]'`), a connection per concurrent call. That is the
least any Python server could spend per call; at 16 clients it is about Toolbox's on
PostgreSQL `SELECT 1` and a point query (issue 30), so a server that adds anything (TLS, auth,
a read-only check, a read-only transaction, caps) costs more than Toolbox there.

    python bench/python_floor.py --port P --database NAME --user NAME --password PW [--io async]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import psycopg
import pymysql
import uvicorn

_local = threading.local()


def _connection(target: str, settings: dict[str, Any]) -> Any:
    conn = getattr(_local, target, None)
    if conn is None:
        if target == "maria":
            conn = pymysql.connect(host="127.0.0.1", port=3306, autocommit=True, **settings["maria"])
        else:
            conn = psycopg.connect(host="127.0.0.1", port=5432, autocommit=True, **settings["pg"])
        setattr(_local, target, conn)
    return conn


def _run(target: str, sql: str, settings: dict[str, Any]) -> dict[str, Any]:
    conn = _connection(target, settings)
    with conn.cursor() as cur:
        cur.execute(sql)
        columns = [d[0] for d in cur.description]
        rows = [[v if isinstance(v, (int, str)) or v is None else str(v) for v in row] for row in cur.fetchall()]
    return {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": False}


def app_for(settings: dict[str, Any]) -> Any:
    threads = ThreadPoolExecutor(32)

    def answer(arguments: dict[str, Any]) -> Any:
        return asyncio.get_running_loop().run_in_executor(threads, _run, arguments["target_id"], arguments["sql"], settings)

    return _app(answer)


def async_app_for(settings: dict[str, Any], connections: int = 16) -> Any:
    """The same answers with asyncio drivers on the event loop: no thread hop."""
    idle: dict[str, asyncio.Queue] = {}
    opening = asyncio.Lock()

    async def connect(target: str) -> Any:
        if target == "pg":
            return await psycopg.AsyncConnection.connect(host="127.0.0.1", port=5432, autocommit=True, **settings["pg"])
        import asyncmy  # the bench extra

        maria = settings["maria"]
        return await asyncmy.connect(
            host="127.0.0.1", port=3306, autocommit=True, user=maria["user"], password=maria["password"], db=maria["database"]
        )

    async def run(target: str, sql: str) -> dict[str, Any]:
        async with opening:
            if target not in idle:
                idle[target] = asyncio.Queue()
                for _ in range(connections):
                    idle[target].put_nowait(await connect(target))
        conn = await idle[target].get()
        try:
            cursor = conn.cursor()
            await cursor.execute(sql)
            columns = [d[0] for d in cursor.description]
            fetched = await cursor.fetchall()
            await cursor.close()
        finally:
            idle[target].put_nowait(conn)
        rows = [[v if isinstance(v, (int, str)) or v is None else str(v) for v in row] for row in fetched]
        return {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": False}

    return _app(lambda arguments: run(arguments["target_id"], arguments["sql"]))


def _app(answer: Any) -> Any:
    """The ASGI app around `answer(arguments) -> awaitable payload`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = orjson.loads(body)
        payload = await answer(request["params"]["arguments"])
        lines = ["\t".join(payload["columns"]), *("\t".join(map(str, row)) for row in payload["rows"])]
        lines.append(f"{payload['row_count']} rows; truncated: false")
        result = {"content": [{"type": "text", "text": "\n".join(lines)}], "structuredContent": payload, "isError": False}
        answer_bytes = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer_bytes})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument(
        "--io", choices=("thread", "async"), default="thread", help="blocking drivers in threads, or asyncio drivers"
    )
    args = parser.parse_args()
    settings = {
        "maria": {"user": args.user, "password": args.password, "database": args.database},
        "pg": {"user": args.user, "password": args.password, "dbname": args.database},
    }
    app = app_for(settings) if args.io == "thread" else async_app_for(settings)
    uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False, log_level="warning", server_header=False)


if __name__ == "__main__":
    main()
