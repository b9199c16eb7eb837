"""`mcp-gateway`: a thin skin over the library. It parses arguments and calls functions.

mcp-gateway serve [--config FILE] [--data-dir DIR] [--workers N] [--port P] [--host H]
mcp-gateway admin "<statement>" [--data-dir DIR]
mcp-gateway backup DEST [--data-dir DIR] | restore BACKUP [--data-dir DIR] [--force]
mcp-gateway healthcheck [--data-dir DIR] [--ready]
mcp-gateway variables | tools | docs
and what each handler adds (ToolHandler.add_cli), e.g. mcp-gateway rag sync [--source NAME]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from gateway.logs import setup_logging
from gateway.run_files import DEFAULT_DATA_DIR
from gateway.supervisor import EXIT_GRACE_S, WORKER_MALLOC_ARENAS, become_supervisor, exit_within, supervisor

log = logging.getLogger("mcp_gateway")


def _banner(prepared: Any, *, scheme: str, host: str, port: int, cert: Path | None) -> str:
    from gateway.assembly import handler_classes

    shown_host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    base = f"{scheme}://{shown_host}:{port}"
    lines = [f"MCP Gateway listening on {base}/mcp/<endpoint>  (metrics: {base}/metrics)"]
    if prepared.generated_tokens:
        lines.append("Generated bearer tokens (shown once; stored in the data directory, readable only by you):")
        lines += [f"  {endpoint:<7} {token}" for endpoint, token in prepared.generated_tokens.items()]
        for cls in handler_classes():  # the first endpoint that offers an example call and got a token
            token = prepared.generated_tokens.get(cls.endpoint)
            if cls.example_call is None or not token:
                continue
            tool, arguments = cls.example_call
            cacert = f"--cacert {cert} " if cert else ""
            body = json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
            )
            lines.append("Try it:")
            lines.append(
                f"  curl -s {cacert}-H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' -d '{body}' {base}/mcp/{cls.endpoint}"
            )
            break
    return "\n".join(lines)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway import tls
    from gateway.errors import ConfigError
    from gateway.run_files import write_run_file
    from gateway.startup import UNSHOWN_TOKENS_FILE, prepare, tokens_shown, unshown_tokens

    data_dir = Path(args.data_dir).resolve()
    try:
        prepared = prepare(data_dir, config_file=Path(args.config) if args.config else None, reload_config=args.reload_config)
    except (ConfigError, OSError) as exc:
        print(f"mcp-gateway: cannot start: {exc}", file=sys.stderr)
        return 2
    runtime = prepared.store.read_runtime()
    port = runtime.var("mcp-port") if args.port is None else args.port
    host = args.host or runtime.var("mcp-bind_address")
    use_ssl = runtime.var("mcp-use_ssl")
    cert = key = None
    if use_ssl:
        cert, key = tls.resolve_material(data_dir, runtime.var("mcp-ssl_cert"), runtime.var("mcp-ssl_key"))
    else:
        log.warning("!" * 72)
        log.warning("mcp-use_ssl=false: serving PLAIN HTTP. Bearer tokens cross the network in clear text.")
        log.warning("!" * 72)

    declared = None
    if runtime.var("mcp-metrics_port"):  # the plain metrics port exports every family from the start, as /metrics does
        from gateway.metrics import declared_families

        declared = declared_families()  # before PROMETHEUS_MULTIPROC_DIR is set (below)
    environ = dict(os.environ)  # as prepare() saw it: a SIGHUP applies the same overrides again
    # Metrics of every worker go to files here; a fresh directory per run drops dead workers' samples.
    metrics_dir = data_dir / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    os.environ.update(
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        MCP_GATEWAY_DATA_DIR=str(data_dir),
        MCP_GATEWAY_WORKERS=str(args.workers),
    )
    uvicorn_options = {
        "host": host,
        "port": port,
        "workers": args.workers,
        "ssl_certfile": str(cert) if cert else None,
        "ssl_keyfile": str(key) if key else None,
        "log_level": args.log_level,
        "access_log": False,  # an access log would record ?token= query strings
        "server_header": False,
        "timeout_graceful_shutdown": 5,
    }
    config = tls.ReloadableTLSConfig("gateway.app:create_app", factory=True, **uvicorn_options)
    busy = _cannot_listen(host, port)
    if busy:
        print(
            f"mcp-gateway: cannot start: cannot listen on {host}:{port} ({busy}). Pass --port N (0 picks a free port) "
            f"or set mcp-port (MCP_GATEWAY_MCP_PORT=N) to serve elsewhere.",
            file=sys.stderr,
        )
        if (data_dir / UNSHOWN_TOKENS_FILE).exists():
            print("mcp-gateway: the generated tokens are kept: the next start that serves shows them.", file=sys.stderr)
        return 3
    sock = config.bind_socket()
    bound_port = sock.getsockname()[1]
    served = {"mcp-port": (str(bound_port), args.port), "mcp-bind_address": (host, args.host)}
    overrides = {name: (value, "command line") for name, (value, given) in served.items() if given is not None}
    if overrides:  # the runtime shows what is served, and why (global_variables' origin column)
        prepared.store.set_overrides(overrides)
        prepared.store.load_to_runtime("MCP VARIABLES")
    os.environ.update(MCP_GATEWAY_PORT=str(bound_port), MCP_GATEWAY_HOST=host)
    state_file = data_dir / "gateway.json"
    state_file.write_text(json.dumps({"pid": os.getpid(), "port": bound_port, "host": host, "use_ssl": use_ssl}))
    run_file = write_run_file(data_dir=data_dir, port=bound_port, host=host, use_ssl=use_ssl)  # found from anywhere
    if not prepared.generated_tokens:  # a first start that failed before serving: its tokens now
        prepared.generated_tokens = unshown_tokens(data_dir, prepared.store)
    print(_banner(prepared, scheme="https" if use_ssl else "http", host=host, port=bound_port, cert=cert), flush=True)
    tokens_shown(data_dir)
    from gateway.assembly import handler_classes

    if runtime.var("mcp-metrics_port"):
        from prometheus_client import CollectorRegistry, start_http_server

        from gateway.metrics import SharedStateCollector

        collectors = [c for cls in handler_classes() for c in cls.scrape_collectors(data_dir, prepared.store.read_runtime)]
        registry = CollectorRegistry()
        registry.register(SharedStateCollector(collectors, declared))
        start_http_server(runtime.var("mcp-metrics_port"), addr=host, registry=registry)
    from gateway.assembly import prepare_backends

    prepare_backends(data_dir)  # before any worker opens them
    jobs = [  # what the parent runs beside the workers (the model they share, the demo corpus's sync)
        job
        for cls in handler_classes()
        for job in cls.before_serve(args, data_dir=data_dir, store=prepared.store, first_start=prepared.fresh)
    ]

    from gateway.reload import certificate_identity, reload_from_disk

    certificate = {"served": certificate_identity(data_dir, runtime)}
    if args.workers > 1 and not runtime.var("mcp-metrics_port"):
        # The supervisor needs none of the app this process imported to get here: it becomes
        # a lean one (gateway/supervisor.py; same pid). The metrics port serves the app's
        # collectors, so with it this process supervises as it is.
        spec = {
            "data_dir": str(data_dir),
            "log_level": args.log_level,
            "uvicorn": {**uvicorn_options, "port": bound_port},
            "state_files": [str(state_file), str(run_file)],
            "certificate": certificate["served"],
            "environ": environ,
        }
        become_supervisor(spec, listening=sock, jobs=jobs)
    for job in jobs:
        job.run()

    def reload() -> None:  # SIGHUP: gateway/reload.py
        try:
            report = reload_from_disk(prepared.store, environ, certificate_before=certificate["served"])
            certificate["served"] = report.certificate_now
        except Exception:  # a reload must never take the gateway down
            log.exception("SIGHUP: reloading from disk failed; the runtime is unchanged")

    # uvicorn re-raises the SIGTERM it handled once it has shut down; the default action would end
    # the process before the `finally` below removes the state and run files. Exit normally instead.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        if args.workers > 1:
            from gateway.metrics import worker_restarts_counter

            # Read by glibc as each worker starts (the parent's own heap is set up already).
            os.environ.setdefault("MALLOC_ARENA_MAX", WORKER_MALLOC_ARENAS)

            supervisor(config, [sock], on_hup=reload, restarts=worker_restarts_counter()).run()
        else:
            # One process serves: reload in a thread (the event loop keeps serving). Without a
            # handler, SIGHUP's default action would end the process.
            signal.signal(signal.SIGHUP, lambda signum, frame: threading.Thread(target=reload, name="sighup").start())
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        state_file.unlink(missing_ok=True)
        run_file.unlink(missing_ok=True)
        exit_within(EXIT_GRACE_S)
    return 0


def _cannot_listen(host: str, port: int) -> str | None:
    """Why the gateway could not listen on host:port (a busy port), else None: asked before
    serving, so the answer names the port and what to do instead of uvicorn's bare errno."""
    if not port:
        return None
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family=family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def cmd_backup(args: argparse.Namespace) -> int:
    from gateway.backup import backup
    from gateway.errors import GatewayError

    try:
        manifest = backup(Path(args.data_dir).resolve(), Path(args.destination))
    except (GatewayError, OSError) as exc:
        print(f"mcp-gateway backup: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=2))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from gateway.backup import restore
    from gateway.errors import GatewayError

    try:
        result = restore(Path(args.backup), Path(args.data_dir).resolve(), force=args.force)
    except (GatewayError, OSError) as exc:
        print(f"mcp-gateway restore: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    from gateway.healthcheck import main as healthcheck

    return healthcheck(["--data-dir", str(Path(args.data_dir).resolve()), *(["--ready"] if args.ready else [])])


def cmd_admin(args: argparse.Namespace) -> int:
    from gateway.admin_client import run_admin_statement
    from gateway.run_files import locate_data_dir

    try:
        result = run_admin_statement(locate_data_dir(args.data_dir), args.statement)
    except Exception as exc:  # noqa: BLE001 - the CLI prints the error and exits non-zero
        print(f"mcp-gateway admin: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, default=str))
    return 0 if not result.get("error") else 1


def cmd_stdio(args: argparse.Namespace) -> int:
    from gateway.errors import GatewayError
    from gateway.run_files import locate_data_dir
    from gateway.stdio_bridge import BridgeError, serve_stdio

    try:
        return serve_stdio(args.endpoint, locate_data_dir(args.data_dir))
    except (BridgeError, GatewayError, OSError) as exc:  # GatewayError: NoDataDir, which says what to pass
        print(f"mcp-gateway stdio: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1


def variables_table() -> str:
    from gateway.assembly import declared_variables

    lines = ["| variable | type | default | description |", "|---|---|---|---|"]
    for v in declared_variables().values():
        kind = v.kind if v.kind != "enum" else " \\| ".join(v.choices)
        notes = (
            (" (secret)" if v.secret else "")
            + (" (takes effect at restart)" if v.restart_required else "")
            + (" (per instance: not shared by a cluster)" if v.local else "")
        )
        lines.append(f"| `{v.name}` | {kind} | `{v.default}` | {v.help}{notes} |")
    return "\n".join(lines)


def tools_table() -> str:
    from gateway.assembly import handler_classes
    from gateway.tools import first_sentence

    lines = ["| endpoint | tool | read-only | what it does |", "|---|---|---|---|"]
    for cls in handler_classes():
        if not cls.tools:
            lines.append(f"| `/mcp/{cls.endpoint}` | (none yet) | | {cls.title} |")
        for spec in cls.tools.values():
            summary = first_sentence(spec.description)
            lines.append(
                f"| `/mcp/{cls.endpoint}` | `{spec.name}` | {'yes' if spec.annotations['readOnlyHint'] else 'no'} | {summary} |"
            )
    return "\n".join(lines)


def render_readme(text: str) -> str:
    """The README with its generated sections (tools, variables) brought up to date."""
    for name, table in (("tools", tools_table()), ("variables", variables_table())):
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text


def cmd_variables(args: argparse.Namespace) -> int:
    print(variables_table())
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    print(tools_table())
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    path = Path(args.readme)
    path.write_text(render_readme(path.read_text()))
    return 0


def build_parser(*, with_handlers: bool = True) -> argparse.ArgumentParser:
    """The command line. Without handlers (`--help`, `admin`, `healthcheck`: commands that need
    none) their sub-commands are listed by name only (gateway.assembly.handler_commands) and
    nothing of the handlers is imported; choosing one builds the whole parser (main)."""
    from gateway.assembly import handler_classes, handler_commands, open_store

    parser = argparse.ArgumentParser(
        prog="mcp-gateway", description="MCP Gateway: safe, bounded, observable MCP access to databases."
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTPS server")
    serve.add_argument(
        "--config",
        default=os.environ.get("MCP_GATEWAY_CONFIG") or None,
        help="bootstrap TOML file: seeds the disk layer on first start (default: $MCP_GATEWAY_CONFIG)",
    )
    serve.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    serve.add_argument("--reload-config", action="store_true", help="re-seed the disk layer from --config")
    serve.add_argument(
        "--workers", type=int, default=int(os.environ.get("MCP_GATEWAY_WORKERS") or 1), help="default: $MCP_GATEWAY_WORKERS or 1"
    )
    serve.add_argument("--port", type=int, help="override mcp-port (0 picks a free port)")
    serve.add_argument("--host", help="override mcp-bind_address")
    for cls in handler_classes() if with_handlers else ():
        cls.add_serve_options(serve)
    serve.set_defaults(func=cmd_serve)

    backup = sub.add_parser("backup", help="copy the data directory's databases and TLS files, online (SQLite backup API)")
    backup.add_argument("destination", help="a new or empty directory")
    backup.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    backup.set_defaults(func=cmd_backup)

    restore = sub.add_parser("restore", help="put a backup into a data directory no gateway is serving")
    restore.add_argument("backup", help="a directory made by mcp-gateway backup")
    restore.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    restore.add_argument("--force", action="store_true", help="replace the databases and TLS files of a non-empty data directory")
    restore.set_defaults(func=cmd_restore)

    health = sub.add_parser("healthcheck", help="exit 0 when the gateway serving the data directory answers /healthz")
    health.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    health.add_argument("--ready", action="store_true", help="ask /readyz: fails while a handler is down")
    health.set_defaults(func=cmd_healthcheck)

    admin = sub.add_parser("admin", help="run an admin statement (running gateway, else the data directory)")
    admin.add_argument("statement")
    admin.add_argument(
        "--data-dir", help=f"default: ./{DEFAULT_DATA_DIR} if it exists, else the running gateway's (found by its run file)"
    )
    admin.set_defaults(func=cmd_admin)

    stdio = sub.add_parser(
        "stdio",
        help="serve one endpoint over stdio, for MCP clients that launch a command (the running gateway, else one of its own)",
    )
    stdio.add_argument("endpoint", help="the endpoint: /mcp/<endpoint> (query, rag, config, ...)")
    stdio.add_argument(
        "--data-dir", help=f"default: ./{DEFAULT_DATA_DIR} if it exists, else the running gateway's (found by its run file)"
    )
    stdio.set_defaults(func=cmd_stdio)

    variables = sub.add_parser("variables", help="the declared variables as a Markdown table")
    variables.set_defaults(func=cmd_variables)

    docs = sub.add_parser("docs", help="regenerate the README's tool and variable tables")
    docs.add_argument("--readme", default="README.md")
    docs.set_defaults(func=cmd_docs)

    tools = sub.add_parser("tools", help="list every endpoint's tools as a Markdown table")
    tools.set_defaults(func=cmd_tools)

    def open_existing_store(given: str | None) -> Any:
        """The config store of an existing data directory (gateway.run_files.locate_data_dir): never creates one."""
        from gateway.run_files import locate_data_dir

        return open_store(locate_data_dir(given))

    if not with_handlers:
        for name, summary in handler_commands().items():
            sub.add_parser(name, help=summary, add_help=False)
        return parser
    for cls in handler_classes():
        cls.add_cli(sub, open_store=open_existing_store)
    return parser


LIGHT_COMMANDS = frozenset({"admin", "healthcheck", "stdio"})  # they import no handler (gateway/admin_client.py)


def _command(argv: list[str]) -> str | None:
    """The sub-command argv names (the first word that is not an option or an option's value)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command(argv)
    args = build_parser(with_handlers=command is not None and command not in LIGHT_COMMANDS).parse_args(argv)
    setup_logging(args.log_level)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
