"""The gateway side by side with its peers on the same tables: MCP Toolbox for Databases (Go)
and DBHub (Node), both installed from npm at pinned versions into bench/out/peers/.

    python bench/peers.py --json bench/out/peers.json [--rounds 3] [--calls 200]
        [--baseline-tree /tmp/base]    # also a gateway running another checkout, same rounds
        [--floor]                     # also bench/python_floor.py (threads; asyncio drivers): the least a Python server does
        [--plain-http]                # also the gateway without TLS, as the peers are served

One MariaDB and one PostgreSQL database with a ROWS-row table `items` (id, name, email, amount
DECIMAL, created DATE), read by a read-only account made for this run (SELECT only) that every
server uses: the gateway (`run_sql_readonly`, one worker), Toolbox (`mysql-execute-sql` /
`postgres-execute-sql` tools), DBHub (`execute_sql`, readonly = true, max_rows 200). The direct
driver (pymysql / psycopg, autocommit) is the floor. Three statements: `SELECT 1`, a point
query by id, a 100-row id range.

For each engine and statement, --rounds interleaved rounds (every side in rotated order, so a
burst of load on the shared machine hits all sides alike) measure
  c1    one client: p50/p95 latency
  c16   16 clients (lean keep-alive asyncio clients of bench/lean_client.py, over
        --client-procs processes): calls/s and the server's CPU per call (user+system of the
        server's whole process group, from /proc)
and the round with the median value is reported. Per statement and server, one answer also
gives: bytes of the JSON-RPC answer, bytes and tokens of the text block the model reads
(the tokenizer the gateway ships: backends/retrieval/embeddings/model_assets/tokenizer.json,
WordPiece, one tokenizer for all servers), tokens of the whole answer. RSS of every server's
process group is read at the end. Ratios: to Toolbox and to the direct driver.

Not part of the test suite: it installs packages, runs for ~10 minutes, and prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests"), str(REPO_ROOT / "bench")]

import orjson  # noqa: E402
import psycopg  # noqa: E402
import pymysql  # noqa: E402
from lean_client import Endpoint, message_of, read_response, request_bytes, run_http, run_threads, summary, tool_call  # noqa: E402
from report import emit  # noqa: E402

TOOLBOX_PACKAGE = "@toolbox-sdk/server-linux-x64@1.12.0"
DBHUB_PACKAGE = "@bytebase/dbhub@1.4.0"
PEERS_DIR = REPO_ROOT / "bench" / "out" / "peers"
TOOLBOX_BIN = PEERS_DIR / "node_modules" / "@toolbox-sdk" / "server-linux-x64" / "bin" / "toolbox"
DBHUB_BIN = PEERS_DIR / "node_modules" / "@bytebase" / "dbhub" / "dist" / "index.js"
TOKENIZER = REPO_ROOT / "backends" / "retrieval" / "embeddings" / "model_assets" / "tokenizer.json"

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
ROWS = 100_000
STATEMENTS = ("select1", "point", "range100")
ENGINES = ("maria", "pg")


def statement(kind: str) -> str:
    if kind == "select1":
        return "SELECT 1"
    start = random.randint(1, ROWS - 100)
    if kind == "point":
        return f"SELECT id, name, email, amount, created FROM items WHERE id = {start}"
    return f"SELECT id, name, email, amount, created FROM items WHERE id BETWEEN {start} AND {start + 99} ORDER BY id"


# -- install -------------------------------------------------------------------------------------


def install_peers() -> None:
    if TOOLBOX_BIN.exists() and DBHUB_BIN.exists():
        return
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    if not (PEERS_DIR / "package.json").exists():
        (PEERS_DIR / "package.json").write_text('{"private": true}\n')
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--save-exact", TOOLBOX_PACKAGE, DBHUB_PACKAGE],
        cwd=PEERS_DIR, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def versions() -> dict[str, str]:
    toolbox = subprocess.run([str(TOOLBOX_BIN), "--version"], capture_output=True, text=True).stdout.strip()
    dbhub = orjson.loads((DBHUB_BIN.parents[1] / "package.json").read_bytes())["version"]
    return {"toolbox": toolbox, "dbhub": dbhub}


# -- databases and read-only accounts ------------------------------------------------------------


def create_databases(name: str, password: str) -> None:
    rng = random.Random(7)
    rows = [
        (
            i,
            f"customer {i}",
            f"user{i}@example.com",
            f"{rng.randint(0, 99999) / 100:.2f}",
            f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        )
        for i in range(1, ROWS + 1)
    ]
    admin = pymysql.connect(**MARIADB, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(
            f"CREATE TABLE `{name}`.items (id INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(60), amount DECIMAL(10,2), created DATE)"
        )
        for i in range(0, ROWS, 5000):
            cur.executemany(f"INSERT INTO `{name}`.items VALUES (%s, %s, %s, %s, %s)", rows[i : i + 5000])
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT SELECT ON `{name}`.* TO '{name}'@'%'")
    admin.close()
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as pg:
        pg.execute(f'CREATE DATABASE "{name}"')
        pg.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
    with psycopg.connect(**POSTGRES, dbname=name, autocommit=True) as pg:
        pg.execute("CREATE TABLE items (id int PRIMARY KEY, name text, email text, amount numeric(10,2), created date)")
        with pg.cursor() as cur, cur.copy("COPY items FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        pg.execute("ANALYZE items")
        pg.execute(f'GRANT SELECT ON items TO "{name}"')


def drop_databases(name: str) -> None:
    admin = pymysql.connect(**MARIADB, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")
    admin.close()
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        pg.execute(f'DROP ROLE IF EXISTS "{name}"')


def direct_caller(engine: str, name: str, password: str, kind: str) -> Any:
    def make() -> Any:
        if engine == "maria":
            conn = pymysql.connect(host="127.0.0.1", port=3306, user=name, password=password, database=name, autocommit=True)

            def call() -> None:
                with conn.cursor() as cur:
                    cur.execute(statement(kind))
                    cur.fetchall()

            return call
        pg = psycopg.connect(host="127.0.0.1", port=5432, user=name, password=password, dbname=name, autocommit=True)
        return lambda: pg.execute(statement(kind)).fetchall()

    return make


# -- the servers ----------------------------------------------------------------------------------


class Server:
    """One server under test: its process (group leader), endpoint and how to call a statement."""

    def __init__(self, label: str, process: subprocess.Popen, endpoint: Endpoint, tools: dict[str, tuple[str, dict]]) -> None:
        self.label, self.process, self.endpoint, self.tools = label, process, endpoint, tools

    def body(self, engine: str, kind: str) -> bytes:
        name, extra = self.tools[engine]
        return tool_call(name, {**extra, "sql": statement(kind)})

    def stop(self) -> None:
        import signal

        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)


def free_port() -> int:
    from server_process import free_port as pick

    return pick()


def wait_port(port: int, process: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited {process.returncode}: {log.read_text()[-3000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"not listening on {port}: {log.read_text()[-3000:]}")


def wait_healthz(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"not healthy at {url}: {log.read_text()[-3000:]}")


def start_gateway(label: str, tmp: Path, name: str, password: str, tree: Path, *, tls: bool = True) -> Server:
    from server_process import GatewayProcess, _wait_healthy, default_tokens, gateway_command

    tmp.mkdir()
    data_dir, config_path, log_path = tmp / "data", tmp / "gateway.toml", tmp / "gateway.log"
    data_dir.mkdir()
    port = free_port()
    tokens = default_tokens()
    lines = ["[variables]", f'"mcp-port" = {port}', f'"mcp-use_ssl" = {"true" if tls else "false"}']
    lines += [f'"mcp-{endpoint}_endpoint_auth" = "{token}"' for endpoint, token in tokens.items()]
    lines += ["", "[[mcp_auth_profiles]]", 'auth_profile_id = "ro"', f'db_username = "{name}"', f'db_password = "{password}"']
    for target_id, protocol, db_port in (("maria", "mysql", 3306), ("pg", "pgsql", 5432)):
        lines += ["", "[[mcp_target_profiles]]", f'target_id = "{target_id}"', f'protocol = "{protocol}"']
        lines += ['host = "127.0.0.1"', f"port = {db_port}", f'database = "{name}"', 'auth_profile_id = "ro"']
    config_path.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            gateway_command(data_dir, config_path, port, workers=1), cwd=tmp, env=env, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    gateway = GatewayProcess(
        base_url=f"{'https' if tls else 'http'}://127.0.0.1:{port}", tokens=tokens, ca_path=data_dir / "tls" / "cert.pem",
        data_dir=data_dir, config_path=config_path, log_path=log_path, process=process,
    )  # fmt: skip
    if tls:
        _wait_healthy(gateway, 90)
    else:  # plain HTTP, as the peers are served (behind a proxy that ends TLS)
        wait_healthz(f"http://127.0.0.1:{port}/healthz", process, log_path)
    endpoint = Endpoint(port=port, path="/mcp/query", token=tokens["query"], ca_path=str(gateway.ca_path) if tls else "")
    tools = {engine: ("run_sql_readonly", {"target_id": engine}) for engine in ENGINES}
    return Server(label, process, endpoint, tools)


def start_toolbox(tmp: Path, name: str, password: str) -> Server:
    tmp.mkdir()
    config = tmp / "tools.yaml"
    docs = []
    for source, kind, port in (("maria", "mysql", 3306), ("pg", "postgres", 5432)):
        docs.append(
            f"kind: source\nname: {source}\ntype: {kind}\nhost: 127.0.0.1\nport: {port}\ndatabase: {name}\n"
            f"user: {name}\npassword: {password}\n"
        )
        docs.append(f"kind: tool\nname: {source}_sql\ntype: {kind}-execute-sql\nsource: {source}\ndescription: Run SQL.\n")
    config.write_text("---\n".join(docs))
    port = free_port()
    log = tmp / "toolbox.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(TOOLBOX_BIN), "--config", str(config), "--address", "127.0.0.1", "--port", str(port), "--disable-reload",
             "--disable-version-check", "--log-level", "ERROR"],
            cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    wait_port(port, process, log)
    tools = {engine: (f"{engine}_sql", {}) for engine in ENGINES}
    return Server("toolbox", process, Endpoint(port=port, path="/mcp", token="", ca_path=""), tools)


def start_python_floor(tmp: Path, name: str, password: str, io: str = "thread") -> Server:
    tmp.mkdir()
    port = free_port()
    log = tmp / "floor.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "bench" / "python_floor.py"), "--port", str(port), "--database", name,
             "--user", name, "--password", password, "--io", io],
            cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    wait_port(port, process, log)
    tools = {engine: ("sql", {"target_id": engine}) for engine in ENGINES}
    label = "python_floor" if io == "thread" else f"python_floor_{io}"
    return Server(label, process, Endpoint(port=port, path="/mcp", token="", ca_path=""), tools)


def start_dbhub(tmp: Path, name: str, password: str) -> Server:
    tmp.mkdir()
    config = tmp / "dbhub.toml"
    lines = []
    for source, scheme, port in (("maria", "mariadb", 3306), ("pg", "postgres", 5432)):
        lines += [
            "[[sources]]",
            f'id = "{source}"',
            f'dsn = "{scheme}://{name}:{password}@127.0.0.1:{port}/{name}?sslmode=disable"',
            "",
        ]
        lines += ["[[tools]]", 'name = "execute_sql"', f'source = "{source}"', "readonly = true", "max_rows = 200", ""]
    config.write_text("\n".join(lines))
    port = free_port()
    log = tmp / "dbhub.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["node", str(DBHUB_BIN), "--config", str(config), "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    wait_port(port, process, log)
    endpoint = Endpoint(port=port, path="/mcp", token="", ca_path="")
    listed = orjson.loads(
        message_of(asyncio.run(one_answer(endpoint, orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))))
    )
    names = [tool["name"] for tool in listed["result"]["tools"] if "execute_sql" in tool["name"]]
    tools = {engine: (next((n for n in names if n.endswith(engine)), names[0]), {}) for engine in ENGINES}
    return Server("dbhub", process, endpoint, tools)


async def one_answer(endpoint: Endpoint, body: bytes) -> bytes:
    context = ssl.create_default_context(cafile=endpoint.ca_path) if endpoint.ca_path else None
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port, ssl=context)
    try:
        writer.write(request_bytes(endpoint, body))
        status, answer = await read_response(reader)
        if status != 200:
            raise RuntimeError(f"{status}: {answer[:300]!r}")
        return answer
    finally:
        writer.close()


def settle(servers: dict[str, Server], *, idle_cpu_ms_per_s: float = 20.0, timeout_s: float = 90.0) -> dict[str, float]:
    """Wait until every server has finished starting (loading a model, warming an index): its
    process group uses under idle_cpu_ms_per_s of CPU over a second. Returns the seconds waited each."""
    from lean_client import process_group_cpu_s

    waited = {}
    for label, server in servers.items():
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            before = process_group_cpu_s(server.process.pid)
            time.sleep(1.0)
            if (process_group_cpu_s(server.process.pid) - before) * 1000 < idle_cpu_ms_per_s:
                break
        waited[label] = round(time.monotonic() - started, 1)
    return waited


def group_rss_mib(pgid: int) -> float:
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) != pgid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


# -- answers: bytes and tokens ----------------------------------------------------------------------


def answer_sizes(servers: dict[str, Server]) -> dict[str, Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    out: dict[str, Any] = {}
    for engine in ENGINES:
        for kind in STATEMENTS:
            random.seed(11)  # the same row(s) for every server
            sql = statement(kind)
            row: dict[str, Any] = {}
            for label, server in servers.items():
                name, extra = server.tools[engine]
                raw = asyncio.run(one_answer(server.endpoint, tool_call(name, {**extra, "sql": sql})))
                message = message_of(raw)
                result = orjson.loads(message)["result"]
                text = "".join(block.get("text", "") for block in result.get("content", []))
                whole = orjson.dumps(result).decode()
                row[label] = {
                    "answer_bytes": len(message), "text_bytes": len(text.encode()), "text_tokens": tokens(text),
                    "answer_tokens": tokens(whole), "has_structured": "structuredContent" in result,
                }  # fmt: skip
            if "toolbox" in row:
                for label in servers:
                    row[label]["text_tokens_to_toolbox"] = round(row[label]["text_tokens"] / row["toolbox"]["text_tokens"], 2)
                    row[label]["answer_bytes_to_toolbox"] = round(row[label]["answer_bytes"] / row["toolbox"]["answer_bytes"], 2)
            out[f"{engine}_{kind}"] = row
    return out


def samples(servers: dict[str, Server], engine: str = "maria") -> dict[str, str]:
    """The text block of each server's point-row answer, as the model reads it."""
    random.seed(11)
    sql = statement("point")
    shown = {}
    for label, server in servers.items():
        name, extra = server.tools[engine]
        result = orjson.loads(message_of(asyncio.run(one_answer(server.endpoint, tool_call(name, {**extra, "sql": sql})))))[
            "result"
        ]
        shown[label] = "".join(block.get("text", "") for block in result.get("content", []))
    return shown


# -- load ---------------------------------------------------------------------------------------------


def rotated(sides: list[str], index: int) -> list[str]:
    shift = index % len(sides)
    return sides[shift:] + sides[:shift]


def median_by(rounds: list[dict[str, float]], key: str) -> dict[str, Any]:
    chosen = sorted(rounds, key=lambda r: r.get(key, 0))[len(rounds) // 2]
    return {**chosen, f"{key}_rounds": [r.get(key) for r in rounds]}


def measure(args: argparse.Namespace, servers: dict[str, Server], name: str, password: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    sides = ["direct", *servers]
    for engine in ENGINES:
        for kind in STATEMENTS:
            cell: dict[str, Any] = {}
            for clients in (1, 16):
                per_client = args.calls if clients == 1 else max(20, args.calls // 8)
                spread = {"clients": clients, "calls_per_client": per_client, "procs": args.client_procs}
                rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
                for index in range(args.rounds):
                    for side in rotated(sides, index):
                        if side == "direct":
                            measured = run_threads(direct_caller(engine, name, password, kind), **spread)
                        else:
                            server = servers[side]
                            measured = run_http(
                                server.endpoint,
                                lambda s=server, e=engine, k=kind: s.body(e, k),
                                **spread,
                                server_group=server.process.pid,
                            )
                        rounds[side].append(summary(*measured))
                key = "p50_ms" if clients == 1 else "server_cpu_ms_per_call"
                level = {side: median_by(r, key if side != "direct" or clients == 1 else "p50_ms") for side, r in rounds.items()}
                cell[f"c{clients}"] = level
            c1, c16 = cell["c1"], cell["c16"]
            cell["ratios"] = {
                label: {
                    "p50_to_direct": round(c1[label]["p50_ms"] / c1["direct"]["p50_ms"], 2),
                    "p50_to_toolbox": round(c1[label]["p50_ms"] / c1["toolbox"]["p50_ms"], 2) if "toolbox" in c1 else None,
                    "calls_per_s_to_toolbox": round(c16[label]["throughput_per_s"] / c16["toolbox"]["throughput_per_s"], 2)
                    if "toolbox" in c16 else None,
                    "cpu_per_call_to_toolbox": round(c16[label]["server_cpu_ms_per_call"] / c16["toolbox"]["server_cpu_ms_per_call"], 2)
                    if "toolbox" in c16 else None,
                    "cpu_per_call_to_dbhub": round(c16[label]["server_cpu_ms_per_call"] / c16["dbhub"]["server_cpu_ms_per_call"], 2)
                    if "dbhub" in c16 else None,
                    "cpu_per_call_to_python_floor": round(
                        c16[label]["server_cpu_ms_per_call"] / c16["python_floor"]["server_cpu_ms_per_call"], 2
                    ) if "python_floor" in c16 else None,
                }
                for label in servers
            }  # fmt: skip
            results[f"{engine}_{kind}"] = cell
            shown = {label: c16[label].get("server_cpu_ms_per_call") for label in servers}
            print(f"{engine} {kind}: cpu/call c16 {shown}", file=sys.stderr, flush=True)
    return results


def table(results: dict[str, Any], sizes: dict[str, Any], labels: list[str]) -> list[str]:
    """One line per cell: CPU per call at 16 clients, p50 at 1 client, text tokens, per server."""
    lines = []
    for cell, row in results.items():
        cpu = " / ".join(f"{row['c16'][label]['server_cpu_ms_per_call']:.2f}" for label in labels)
        p50 = " / ".join(f"{row['c1'][label]['p50_ms']:.2f}" for label in labels)
        tok = " / ".join(str(sizes[cell][label]["text_tokens"]) for label in labels)
        lines.append(f"{cell}: cpu/call ms [{cpu}]  p50 ms [{p50}]  text tokens [{tok}]  ({' / '.join(labels)})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls for 1 client; 16 clients make calls/8 each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--baseline-tree", type=Path, help="also a gateway running this checkout (before/after in one run)")
    parser.add_argument(
        "--plain-http", action="store_true", help="also the gateway over plain HTTP, as Toolbox and DBHub are served here"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also bench/python_floor.py, with threads and with asyncio drivers: HTTP, JSON and the driver in Python, nothing else",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    install_peers()
    random.seed(1)
    name = f"mcpgw_peers_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    tmp = Path(tempfile.mkdtemp(prefix="mcpgw-peers-"))
    load_before = list(os.getloadavg())
    create_databases(name, password)
    servers: dict[str, Server] = {}
    try:
        servers["gateway"] = start_gateway("gateway", tmp / "gateway", name, password, REPO_ROOT)
        if args.baseline_tree:
            servers["baseline"] = start_gateway("baseline", tmp / "baseline", name, password, args.baseline_tree.resolve())
        if args.plain_http:
            servers["gateway_http"] = start_gateway("gateway_http", tmp / "gateway_http", name, password, REPO_ROOT, tls=False)
        if args.floor:
            servers["python_floor"] = start_python_floor(tmp / "python_floor", name, password)
            servers["python_floor_async"] = start_python_floor(tmp / "python_floor_async", name, password, io="async")
        servers["toolbox"] = start_toolbox(tmp / "toolbox", name, password)
        servers["dbhub"] = start_dbhub(tmp / "dbhub", name, password)
        settled_s = settle(servers)
        sizes = answer_sizes(servers)
        shown = samples(servers)
        results = measure(args, servers, name, password)
        rss = {label: group_rss_mib(server.process.pid) for label, server in servers.items()}
        output = {
            "bench": "peers",
            "versions": versions(),
            "python": platform.python_version(),
            "rows": ROWS,
            "rounds": args.rounds,
            "client_procs": args.client_procs,
            "baseline_tree": str(args.baseline_tree) if args.baseline_tree else None,
            "load_average_before_after": [load_before, list(os.getloadavg())],
            "cpus": os.cpu_count(),
            "settled_s": settled_s,
            "summary": table(results, sizes, list(servers)),
            "results": results,
            "answers": sizes,
            "point_row_text": shown,
            "rss_mib": rss,
        }
    finally:
        for server in servers.values():
            server.stop()
        drop_databases(name)
        shutil.rmtree(tmp, ignore_errors=True)
    emit(output, args.json)


if __name__ == "__main__":
    main()
