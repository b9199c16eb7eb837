"""Assembles one worker's application from the explicit list of handler classes.

`create_app()` is the uvicorn factory every worker calls. The parent process (`mcp-gateway
serve`) has already prepared the data directory and loaded the runtime (gateway.startup); a
worker opens the same store, reads the runtime, builds its handlers and serves. Background
tasks keep it in step: the runtime version is polled every 250 ms (a LOAD in any worker
reaches all within a second), tool counters are flushed every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway import auth, tls
from gateway.assembly import close_backends, handler_classes, open_store, share_backends
from gateway.cluster import ClusterFollower
from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.protocol import Dispatcher, Endpoint
from gateway.services import Services
from gateway.tool_counters import ToolCounters
from gateway.tools import ToolHandler
from gateway.transport import McpTransport, not_found_body

log = logging.getLogger("mcp_gateway")
RUNTIME_POLL_S = 0.25
STATS_FLUSH_S = 1.0
# Per-call metric events are folded into the shared values this often, on the event loop: a
# second's worth at 12k calls/s held the loop for tens of milliseconds (the p99 at 64 clients);
# a tenth of it is a short pause.
METRICS_FOLD_S = 0.1


def create_app(data_dir: Path | None = None) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    data_dir = Path(data_dir or os.environ.get("MCP_GATEWAY_DATA_DIR", "mcp-gateway-data")).resolve()
    store = open_store(data_dir)
    metrics = Metrics()
    services = Services(
        data_dir=data_dir,
        store=store,
        runtime=store.read_runtime(),
        stats=ToolCounters(store),
        metrics=metrics,
        workers=int(os.environ.get("MCP_GATEWAY_WORKERS", "1")),
        port=int(os.environ.get("MCP_GATEWAY_PORT", "0")),
    )
    share_backends(services)
    handlers = [cls(services) for cls in handler_classes()]
    services.handlers = {h.endpoint: h for h in handlers}
    endpoints: dict[str, Endpoint] = {h.endpoint: Endpoint(h.endpoint, h) for h in handlers}
    dispatcher = Dispatcher(services)
    transport = McpTransport(services, endpoints, dispatcher, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for handler in handlers:
            try:
                await handler.init()
                metrics.handler_up.labels(handler.endpoint).set(1)
            except Exception as exc:  # the endpoint answers UNAVAILABLE; the others serve
                log.exception("handler for /mcp/%s failed to initialise", handler.endpoint)
                handler.down_reason = _safe_reason(exc)
                endpoints[handler.endpoint] = Endpoint(handler.endpoint, handler, down_reason=handler.down_reason)
                metrics.handler_up.labels(handler.endpoint).set(0)
        app.state.down = {name: ep.down_reason for name, ep in endpoints.items() if ep.down_reason}
        metrics.workers.set(1)  # counted from here: mcp_gateway_workers is how many serve
        follower = _cluster_follower(services)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_follow_runtime, services, handlers)
            tasks.start_soon(_flush_stats, services)
            yield
            tasks.cancel_scope.cancel()
        if follower is not None:
            await anyio.to_thread.run_sync(follower.stop)
        metrics.flush()
        await anyio.to_thread.run_sync(services.stats.flush)
        for handler in handlers:
            with contextlib.suppress(Exception):
                await handler.close()
        await anyio.to_thread.run_sync(close_backends, services)

    # Starlette serves the lifespan, /metrics, /healthz and the 404s; `/mcp/<name>` goes to the
    # transport, a bare ASGI app (see gateway.transport for why).
    app = Starlette(lifespan=lifespan)
    app.state.services = services

    async def metrics_route(request: Request) -> Response:
        if not auth.check_metrics(request.headers.get("authorization"), services.runtime):
            return JSONResponse(
                {"error": "metrics need a bearer token (mcp-metrics_auth)"},
                401,
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        metrics.sample_process()
        metrics.flush()  # on the loop, before the collection thread reads the files
        body = await anyio.to_thread.run_sync(metrics.exposition)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def healthz(request: Request) -> Response:
        down = {name: ep.down_reason for name, ep in endpoints.items() if ep.down_reason}
        return JSONResponse(
            {"status": "ok" if not down else "degraded", "down": down, "runtime_version": services.runtime.version}
        )

    async def not_found(request: Request) -> Response:
        return Response(not_found_body(request.url.path, list(endpoints)), 404, media_type="application/json")

    app.add_route("/metrics", metrics_route, methods=["GET"])
    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/{path:path}", not_found, methods=["GET", "POST", "OPTIONS", "PUT", "DELETE", "PATCH", "HEAD"])

    async def gateway_app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")  # `/mcp/<name>`, one non-empty segment: the transport's
        if path.startswith("/mcp/") and len(path) > 5 and path.find("/", 5) == -1 and scope["type"] == "http":
            await transport(scope, receive, send)
        else:
            await app(scope, receive, send)

    return gateway_app


def _safe_reason(exc: Exception) -> str:
    # GatewayError messages are written to be shown; anything else may carry a driver's text.
    return exc.message if isinstance(exc, GatewayError) else f"{type(exc).__name__} during start (see the gateway log)"


def _cluster_follower(services: Services) -> ClusterFollower | None:
    """With mcp-cluster_dsn: this worker follows the cluster's published configuration."""
    store = services.store
    if store.cluster is None:
        return None
    follower = ClusterFollower(store.cluster, applied=store.cluster_versions, apply=store.apply_cluster, port=services.port)
    follower.start()
    return follower


async def _follow_runtime(services: Services, handlers: list[ToolHandler]) -> None:
    """Poll runtime_state.version; on change swap the snapshot and tell the pools, handlers and TLS."""
    store = services.store
    services.metrics.runtime_version.set(services.runtime.version)
    while True:
        await asyncio.sleep(RUNTIME_POLL_S)
        try:
            version = await anyio.to_thread.run_sync(store.runtime_version)
            if version == services.runtime.version:
                continue
            new = await anyio.to_thread.run_sync(store.read_runtime)
            old, services.runtime = services.runtime, new
            if services.targets is not None:
                try:  # rebuilds only the pools of targets that changed
                    await anyio.to_thread.run_sync(services.targets.update, new)
                except Exception:
                    log.exception("the target pools could not apply runtime %s", new.version)
            for handler in handlers:
                try:
                    await anyio.to_thread.run_sync(handler.on_runtime_change, old, new)
                except Exception:
                    log.exception("/mcp/%s could not apply runtime %s", handler.endpoint, new.version)
            if tls.ACTIVE_CONTEXTS:
                cert, key = tls.resolve_material(services.data_dir, new.var("mcp-ssl_cert"), new.var("mcp-ssl_key"))
                await anyio.to_thread.run_sync(tls.reload_contexts, cert, key)
            services.metrics.runtime_version.set(new.version)
            log.info("runtime version %s applied", new.version)
        except Exception:
            log.exception("following the runtime failed; retrying")


async def _flush_stats(services: Services) -> None:
    folds_per_flush = max(1, round(STATS_FLUSH_S / METRICS_FOLD_S))
    while True:
        for _ in range(folds_per_flush):
            await asyncio.sleep(METRICS_FOLD_S)
            try:
                services.metrics.flush()  # on the loop: the aggregates are only touched here
            except Exception:
                log.exception("folding metrics failed; retrying")
        try:
            await anyio.to_thread.run_sync(services.stats.flush)
            services.metrics.sample_process()
        except Exception:
            log.exception("flushing tool statistics failed; retrying")
