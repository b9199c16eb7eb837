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
import functools
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway import auth, oauth, tls, workers
from gateway.assembly import close_backends, handler_classes, open_store, share_backends
from gateway.cluster import ClusterFollower
from gateway.errors import GatewayError
from gateway.evidence import EvidenceRecorder
from gateway.host_guard import HostGuard
from gateway.metrics import Metrics
from gateway.protocol import Dispatcher, Endpoint
from gateway.services import Services
from gateway.surface import ToolsetHandler, toolset_rows
from gateway.tool_counters import ToolCounters
from gateway.tools import ToolHandler
from gateway.transport import McpTransport, not_found_body, refusal_reply

log = logging.getLogger("mcp_gateway")
RUNTIME_POLL_S = 0.25
STATS_FLUSH_S = 1.0
# Per-call metric events are folded into the shared values this often, on the event loop: a
# second's worth at 12k calls/s held the loop for tens of milliseconds (the p99 at 64 clients);
# a tenth of it is a short pause.
METRICS_FOLD_S = 0.1
# The collector's first generation runs after this many more container allocations than frees.
# Python's 700 is crossed by the rows of a few concurrent 100-row answers alone: 245 young and 23
# middle collections per 3,200 such calls, ~58 us of CPU a call (5 % of it), for garbage that
# reference counting frees anyway. At 7,000 they run about once per 1,600 calls. Request
# garbage with cycles (tracebacks) waits at most 7,000 allocations longer.
GC_YOUNG_THRESHOLD = 7_000


def create_app(data_dir: Path | None = None) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    data_dir = Path(data_dir or os.environ.get("MCP_GATEWAY_DATA_DIR", "mcp-gateway-data")).resolve()
    store = open_store(data_dir)
    metrics = Metrics()
    runtime = store.read_runtime()
    services = Services(
        data_dir=data_dir,
        store=store,
        runtime=runtime,
        stats=ToolCounters(store),
        metrics=metrics,
        workers=int(os.environ.get("MCP_GATEWAY_WORKERS", "1")),
        port=int(os.environ.get("MCP_GATEWAY_PORT", "0")),
        evidence=EvidenceRecorder(store, retention_s=runtime.var("mcp-evidence_retention_s")),
    )
    services.host = os.environ.get("MCP_GATEWAY_HOST") or services.runtime.var("mcp-bind_address")
    share_backends(services)
    for cls in handler_classes():
        for collector in cls.scrape_collectors(data_dir, lambda: services.runtime):
            metrics.add_collector(collector)
    handlers = [cls(services) for cls in handler_classes()]
    services.handlers = {h.endpoint: h for h in handlers}
    endpoints: dict[str, Endpoint] = {h.endpoint: Endpoint(h.endpoint, h) for h in handlers}
    dispatcher = Dispatcher(services)
    transport = McpTransport(services, endpoints, dispatcher, metrics)
    toolsets: dict[str, ToolsetHandler] = {}

    def sync_toolsets() -> None:
        """Route /mcp/<name> for each active toolset (MCP TOOLS) of the current runtime, and no other."""
        rows = toolset_rows(services.runtime)
        for name in [n for n in toolsets if n not in rows]:
            endpoints.pop(name, None)
            gone = toolsets.pop(name)
            if gone._threads is not None:  # its blocking calls' threads; calls in flight finish
                gone._threads.shutdown(wait=False)
        for name, row in rows.items():
            if name in toolsets:
                toolsets[name].update(row)
            elif name not in services.handlers:
                toolsets[name] = ToolsetHandler(services, name, row)
                endpoints[name] = Endpoint(name, toolsets[name])

    sync_toolsets()

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
        _settle_collector()
        await anyio.to_thread.run_sync(_export_certificate, services)
        if services.result_cache is not None:
            services.result_cache.start()  # its upkeep thread: hit bookkeeping, expiry, gauges
        metrics.workers.set(1)  # counted from here: mcp_gateway_workers is how many serve
        await anyio.to_thread.run_sync(metrics.refresh_totals)  # get_status's first snapshot
        await anyio.to_thread.run_sync(workers.applied, store, services.runtime.version)
        follower = _cluster_follower(services)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_follow_runtime, services, handlers, sync_toolsets)
            tasks.start_soon(_flush_stats, services)
            yield
            tasks.cancel_scope.cancel()
        if follower is not None:
            await anyio.to_thread.run_sync(follower.stop)
        metrics.flush()
        await anyio.to_thread.run_sync(_flush_counters, services)
        await anyio.to_thread.run_sync(workers.leave, store)
        for handler in [*handlers, *toolsets.values()]:
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

    async def readyz(request: Request) -> Response:
        """For load balancers and Kubernetes readiness: 503 while any endpoint's handler is down."""
        down = {name: ep.down_reason for name, ep in endpoints.items() if ep.down_reason}
        return JSONResponse({"ready": not down, "down": down}, 503 if down else 200)

    async def not_found(request: Request) -> Response:
        return Response(not_found_body(request.url.path, list(endpoints)), 404, media_type="application/json")

    async def protected_resource(request: Request) -> Response:
        """RFC 9728 Protected Resource Metadata: /.well-known/oauth-protected-resource/mcp/<endpoint>
        and the root form; 404 whenever OAuth is off for it (static-token clients start no OAuth)."""
        runtime = services.runtime
        path = request.url.path[len(oauth.PRM_PREFIX) :]
        name = path[len("/mcp/") :] if path.startswith("/mcp/") else None
        metadata = None
        if runtime.var("mcp-oauth_issuer") and (name is None and path in ("", "/") or name in endpoints):
            host = oauth.trusted_host(request.headers.get("host"), runtime)
            metadata = oauth.protected_resource_metadata(name, list(endpoints), oauth.config(runtime), host)
        if metadata is None:
            return await not_found(request)
        return JSONResponse(metadata, headers={"Access-Control-Allow-Origin": "*", "Cache-Control": "max-age=300"})

    app.add_route(oauth.PRM_PREFIX, protected_resource, methods=["GET"])
    app.add_route(oauth.PRM_PREFIX + "/{path:path}", protected_resource, methods=["GET"])
    app.add_route("/metrics", metrics_route, methods=["GET"])
    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/readyz", readyz, methods=["GET"])
    app.add_route("/{path:path}", not_found, methods=["GET", "POST", "OPTIONS", "PUT", "DELETE", "PATCH", "HEAD"])

    guards: list[tuple[object, HostGuard]] = []  # (runtime, its guard): rebuilt when the runtime changes

    def guard() -> HostGuard:
        runtime = services.runtime
        if not guards or guards[0][0] is not runtime:
            variables = runtime.variables
            guards[:] = [(runtime, HostGuard(services.host, variables["mcp-allowed_hosts"], variables["mcp-allowed_origins"]))]
        return guards[0][1]

    async def gateway_app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")  # `/mcp/<name>`, one non-empty segment: the transport's
        if scope["type"] == "http":
            host = origin = None
            for name, value in scope["headers"]:  # before anything else, on every path (gateway.host_guard)
                if name == b"host":
                    host = value
                elif name == b"origin":
                    origin = value
            refusal = guard().refusal(host, origin)
            if refusal is not None:
                name = path[5:] if path.startswith("/mcp/") and path[5:] in endpoints else "other"
                metrics.count(metrics.host_origin_refusals, name, refusal.reason)
                log.warning("refused a request to %s: %s", path[:100], refusal.message)
                await refusal_reply(refusal.status, refusal.message).send(send)
                return
            if path.startswith("/mcp/") and len(path) > 5 and path.find("/", 5) == -1:
                await transport(scope, receive, send)
                return
        await app(scope, receive, send)

    return gateway_app


def _settle_collector() -> None:
    """Once the worker is built: what startup made (modules, schemas, handlers) lives as long as
    the worker, so it is frozen out of every later collection (an old-generation pass walked all
    of it: half the collector's time per call), and young collections run less often
    (GC_YOUNG_THRESHOLD)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


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


async def _follow_runtime(services: Services, handlers: list[ToolHandler], sync_toolsets: Callable[[], None]) -> None:
    """Poll runtime_state.version; on change swap the snapshot and tell the pools, handlers and TLS.
    Carry out cache flush requests (gateway.workers) on the same poll."""
    store = services.store
    services.metrics.runtime_version.set(services.runtime.version)
    flushed = await anyio.to_thread.run_sync(workers.flushed_upto, store)  # where applied() started this worker
    while True:
        await asyncio.sleep(RUNTIME_POLL_S)
        try:
            if await anyio.to_thread.run_sync(workers.latest_flush, store) > flushed:  # admin_flush_cache
                flushed = await anyio.to_thread.run_sync(
                    functools.partial(workers.carry_out_flushes, store, services.cache_flushers, after=flushed)
                )
            version = await anyio.to_thread.run_sync(store.runtime_version)
            if version == services.runtime.version:
                continue
            new = await anyio.to_thread.run_sync(store.read_runtime)
            old, services.runtime = services.runtime, new
            sync_toolsets()  # on the loop, where requests route
            if services.targets is not None:
                try:  # rebuilds only the pools of targets that changed
                    await anyio.to_thread.run_sync(services.targets.update, new)
                except Exception:
                    log.exception("the target pools could not apply runtime %s", new.version)
            if services.result_cache is not None:
                try:  # new limits or store; drops the entries of targets whose profile changed
                    await anyio.to_thread.run_sync(services.result_cache.on_runtime_change, new)
                except Exception:
                    log.exception("the result cache could not apply runtime %s", new.version)
            for handler in handlers:
                try:
                    await anyio.to_thread.run_sync(handler.on_runtime_change, old, new)
                except Exception:
                    log.exception("/mcp/%s could not apply runtime %s", handler.endpoint, new.version)
            if tls.ACTIVE_CONTEXTS:
                cert, key = tls.resolve_material(services.data_dir, new.var("mcp-ssl_cert"), new.var("mcp-ssl_key"))
                # On the loop, not in a thread: handshakes run on the loop, and load_cert_chain
                # sets the certificate and then the key, so a handshake between the two (from a
                # thread) failed. Two small PEM files: well under a millisecond.
                tls.reload_contexts(cert, key)
                await anyio.to_thread.run_sync(_export_certificate, services)
            await anyio.to_thread.run_sync(workers.applied, store, new.version)  # a waiting LOAD may answer now
            services.metrics.runtime_version.set(new.version)
            log.info("runtime version %s applied", new.version)
        except Exception:
            log.exception("following the runtime failed; retrying")


def _export_certificate(services: Services) -> None:
    """mcp_gateway_tls_certificate_not_after_seconds of the certificate this worker serves."""
    if not tls.ACTIVE_CONTEXTS:
        return
    runtime = services.runtime
    try:
        cert, _ = tls.resolve_material(services.data_dir, runtime.var("mcp-ssl_cert"), runtime.var("mcp-ssl_key"))
        services.metrics.tls_not_after.labels("served").set(tls.certificate_not_after(cert))
    except (OSError, ValueError):
        log.warning("cannot read the certificate's expiry for the metrics", exc_info=True)


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
            await anyio.to_thread.run_sync(_flush_counters, services)
            services.metrics.sample_process()
            if services.targets is not None:
                services.metrics.sample_pools(services.targets.stats())
            await anyio.to_thread.run_sync(services.metrics.refresh_totals)  # get_status reads this snapshot
        except Exception:
            log.exception("flushing tool statistics failed; retrying")


def _flush_counters(services: Services) -> None:
    """The tool counters and the evidence, into config.db (about once a second, and at shutdown)."""
    services.stats.flush()
    services.token_use.flush(services.store)
    if services.sql is not None:  # digests and rule hits, also when every call was a cache hit
        services.sql.flush_due()
    if services.evidence is not None:
        services.evidence.retention_s = services.runtime.var("mcp-evidence_retention_s")
        services.evidence.flush()
