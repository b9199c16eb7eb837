"""/mcp/config: read and change runtime variables, reload layers, report server status."""

from __future__ import annotations

import fnmatch
import time
from typing import Any, Literal

import anyio
from pydantic import Field

from gateway import __version__, audit, workers
from gateway.errors import GatewayError, NotFound
from gateway.resource_tools import ResourceTools
from gateway.resources import ResourceTemplate, resource, unknown
from gateway.tools import CallContext, ToolHandler, ToolInput, ToolOutput, tool

# get_status waits at most this long on the cluster database (its connect timeout is 2 s, its
# statement timeout 2 s), then answers with what this process last knew of the cluster.
CLUSTER_STATUS_WAIT_S = 3.0


class GetConfigIn(ToolInput):
    variable_name: str = Field(description="Variable name, e.g. mcp-timeout_ms.")


class VariableView(ToolOutput):
    variable_name: str
    value: str = Field(description="The runtime value (masked for secrets).")
    type: str
    default: str
    description: str
    secret: bool
    restart_required: bool
    origin: str = Field(
        description="Where the runtime value comes from: default, disk, environment (MCP_GATEWAY_*), command line (--port, --host), or memory (loaded by an admin, not saved)."
    )


class SetConfigIn(ToolInput):
    variable_name: str
    value: str = Field(description="New value as text; validated against the variable's type.")
    save: bool = Field(default=False, description="Also SAVE MCP VARIABLES TO DISK so the value survives a restart.")


class SetConfigOut(ToolOutput):
    variable_name: str
    value: str
    applied: bool = Field(description="True: the runtime serves the new value (unless restart_required).")
    saved: bool = Field(description="True: written to disk as well.")
    restart_required: bool
    runtime_version: int
    workers_applied: int = Field(
        description="Workers serving runtime_version when the call answered (it waits up to 2 s for all)."
    )
    workers: int = Field(description="Workers alive.")


class ListVariablesIn(ToolInput):
    filter: str = Field(default="", description="Substring or glob (mcp-*_auth) on variable names; empty lists all.")


class ListedVariable(VariableView):
    pending_value: str | None = Field(description="The memory-layer value when it differs from runtime (edited, not yet loaded).")


class ListVariablesOut(ToolOutput):
    variables: list[ListedVariable]


class ReloadIn(ToolInput):
    scope: Literal["disk", "memory", "runtime"] = Field(
        description="disk: disk -> memory -> runtime for every module; memory: memory -> runtime; runtime: re-apply the runtime (re-reads TLS files)."
    )


class ReloadOut(ToolOutput):
    scope: str
    modules: list[str]
    runtime_version: int


class StatusIn(ToolInput):
    pass


class EndpointStatus(ToolOutput):
    endpoint: str
    has_token: bool
    up: bool
    tools: int


class StatusOut(ToolOutput):
    version: str
    uptime_s: float
    port: int
    workers: int
    use_ssl: bool
    runtime_version: int
    endpoints: list[EndpointStatus]
    requests_total: float
    failures_total: float
    active_requests: float
    totals_as_of: float = Field(description="Unix time of the totals: a snapshot taken once a second across workers.")
    totals_age_s: float = Field(description="How old the totals are, in seconds.")
    cluster: dict[str, Any] | None = Field(
        None,
        description="With mcp-cluster_dsn: reachable, this member_id, the published version of each module "
        "(versions, as of versions_as_of), every member (versions it serves, seconds since it was last seen, "
        "modules it is behind on), the laggards, and `serving`: the versions this instance serves. While the "
        "cluster database is unreachable (reachable=false, error): the versions last seen and when, members "
        "and laggards null (unknown); this instance keeps serving its last runtime meanwhile.",
    )


STATUS = ResourceTemplate(
    "gateway://status",
    "status",
    "Gateway status",
    "What get_status answers: version, uptime, workers, endpoints, request and failure totals, the cluster.",
)


class StatusResources:
    """/mcp/config's MCP resources: the gateway's status (get_status) at gateway://status."""

    templates = (STATUS,)

    def __init__(self, status: Any) -> None:
        self.status = status  # ConfigHandler.get_status, bound

    async def listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        return [resource(STATUS.uri_template, STATUS.name, STATUS.title, STATUS.description)], False

    async def read(self, uri: str, ctx: CallContext) -> Any:
        if uri != STATUS.uri_template:
            raise unknown(uri, self.templates)
        out = await self.status(StatusIn(), ctx)
        return out.model_dump(mode="json")


class ConfigHandler(ToolHandler):
    endpoint = "config"
    title = "Gateway configuration"
    instructions = (
        "Read and change MCP Gateway runtime variables. set_config applies at once; pass save=true to keep it across restarts."
    )

    tool_groups = (ResourceTools,)

    def make_groups(self) -> list[object]:
        return [ResourceTools(self.resources())]

    def resources(self) -> StatusResources:
        return StatusResources(self.get_status)

    def _view(self, ctx: CallContext, name: str) -> VariableView:
        decl = ctx.runtime.declarations.get(name)
        if decl is None:
            raise NotFound(f"unknown variable {name!r}; list_variables shows them all")
        return VariableView(
            variable_name=name,
            value=decl.display(self._runtime_raw(ctx, name)),
            type=decl.kind,
            default=decl.display(decl.default),
            description=decl.help,
            secret=decl.secret,
            restart_required=decl.restart_required,
            origin=ctx.runtime.origins.get(name, "default"),
        )

    def _audited(self, ctx: CallContext, arguments: dict[str, Any], *, secret: str = "") -> Any:
        """The audit trail entry of a change made through this endpoint (gateway.audit)."""
        return audit.audited_call(self.services.store, ctx, arguments, secrets=[secret])

    @staticmethod
    def _runtime_raw(ctx: CallContext, name: str) -> str:
        value: Any = ctx.runtime.var(name)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)

    @tool("get_config", title="Get a variable", read_only=True)
    async def get_config(self, args: GetConfigIn, ctx: CallContext) -> VariableView:
        """Return one runtime variable: its value (secrets masked), type, default and help."""
        return self._view(ctx, args.variable_name)  # runtime snapshot only: no I/O, runs inline

    @tool("set_config", title="Set a variable", read_only=False, idempotent=True)
    def set_config(self, args: SetConfigIn, ctx: CallContext) -> SetConfigOut:
        """Set a variable in memory and load MCP VARIABLES to runtime (all workers within a second).

        With save=true it is also saved to disk. Invalid values are refused and nothing changes."""
        store = self.services.store
        decl = ctx.runtime.declarations.get(args.variable_name)
        shown = decl.display(args.value) if decl else "********"
        with self._audited(
            ctx, {**args.model_dump(), "value": shown}, secret=args.value if not decl or decl.secret else ""
        ) as entry:
            if decl is None:
                raise NotFound(f"unknown variable {args.variable_name!r}")
            entry.before = {"value": decl.display(self._runtime_raw(ctx, args.variable_name))}
            store.set_variable(args.variable_name, args.value)
            version = store.load_to_runtime("MCP VARIABLES")
            if args.save:
                store.save_to_disk("MCP VARIABLES")
            entry.after = {"value": shown, "runtime_version": version, "saved": args.save}
        # Answer once every worker serves it (as the admin endpoint's LOAD does), so the caller's next
        # call, on whichever worker, sees the new value.
        applied, alive = workers.wait_applied(store, version)
        return SetConfigOut(
            variable_name=args.variable_name,
            value=decl.display(args.value),
            applied=not decl.restart_required,
            saved=args.save,
            restart_required=decl.restart_required,
            runtime_version=version,
            workers_applied=applied,
            workers=alive,
        )

    @tool("list_variables", title="List variables", read_only=True)
    def list_variables(self, args: ListVariablesIn, ctx: CallContext) -> ListVariablesOut:
        """List variables whose name matches the filter (substring or glob), with runtime values (secrets masked)
        and any pending memory-layer edit not yet loaded to runtime."""
        memory = self.services.store.memory_variables()
        pattern = args.filter
        names = [
            n
            for n in ctx.runtime.declarations
            if not pattern or (fnmatch.fnmatch(n, pattern) if any(c in pattern for c in "*?[") else pattern in n)
        ]
        listed = []
        for name in names:
            view = self._view(ctx, name)
            decl = ctx.runtime.declarations[name]
            pending = memory.get(name)
            differs = pending is not None and pending != self._runtime_raw(ctx, name)
            listed.append(ListedVariable(**view.model_dump(), pending_value=decl.display(pending) if differs else None))
        return ListVariablesOut(variables=listed)

    @tool("reload_config", title="Reload configuration", read_only=False, idempotent=True)
    def reload_config(self, args: ReloadIn, ctx: CallContext) -> ReloadOut:
        """Reload configuration layers for every module (variables, profiles, rules, sources) and apply them to runtime."""
        store = self.services.store
        modules = list(store.modules)
        with self._audited(ctx, args.model_dump()) as entry:
            if args.scope == "disk":
                for module in modules:
                    store.load_from_disk(module)
            if args.scope in ("disk", "memory"):
                for module in modules:
                    version = store.load_to_runtime(module)
            else:
                version = store.load_to_runtime("MCP VARIABLES")  # same content, new version: workers re-apply it
            entry.after = {"runtime_version": version, "modules": modules}
        return ReloadOut(scope=args.scope, modules=modules, runtime_version=version)

    @tool("get_status", title="Server status", read_only=True)
    async def get_status(self, args: StatusIn, ctx: CallContext) -> StatusOut:
        """Report the version, uptime, port, workers, endpoints (token configured? handler up?) and request and failure totals across workers.

        Cheap enough for health checkers: the totals are a snapshot taken once a second (totals_age_s says how old).
        With a cluster (mcp-cluster_dsn): its members, their configuration versions and any that lag."""
        services = self.services
        taken_at, totals = services.metrics.totals_snapshot()  # no I/O: runs inline, like get_config
        endpoints = [
            EndpointStatus(
                endpoint=name,
                has_token=bool(ctx.runtime.var(f"mcp-{name}_endpoint_auth")),
                up=name in services.handlers and not getattr(services.handlers[name], "down_reason", ""),
                tools=len(services.handlers[name].tools) if name in services.handlers else 0,
            )
            for name in services.handlers
        ]
        return StatusOut(
            version=__version__,
            uptime_s=round(time.time() - services.started_at, 3),
            port=services.port,
            workers=services.workers,
            use_ssl=ctx.runtime.var("mcp-use_ssl"),
            runtime_version=ctx.runtime.version,
            endpoints=endpoints,
            requests_total=totals["requests_total"],
            failures_total=totals["failures_total"],
            active_requests=totals["inflight"],
            totals_as_of=round(taken_at, 3),
            totals_age_s=round(max(0.0, time.time() - taken_at), 3),
            cluster=await self._cluster_status(),
        )

    async def _cluster_status(self) -> dict[str, Any] | None:
        """The cluster's view, never waiting more than CLUSTER_STATUS_WAIT_S on its database."""
        store = self.services.store
        link = store.cluster
        if link is None:
            return None
        if link.contact.lost:  # this worker's follower cannot reach it now: no attempt to wait on
            view = link.unreachable_status(link.contact.error)
        else:
            view = None
            with anyio.move_on_after(CLUSTER_STATUS_WAIT_S):
                # Abandoned, not waited for, past the bound (its own timeouts end it soon after).
                view = await anyio.to_thread.run_sync(self._cluster_view, link, abandon_on_cancel=True)
            if view is None:
                view = link.unreachable_status(f"the cluster database did not answer within {CLUSTER_STATUS_WAIT_S:g} s")
        view["serving"] = await anyio.to_thread.run_sync(store.cluster_versions)  # config.db: always at hand
        return view

    @staticmethod
    def _cluster_view(link: Any) -> dict[str, Any]:
        try:
            return link.status()
        except GatewayError as exc:  # the cluster database is down: say so, the rest of the status stands
            return link.unreachable_status(exc.message)
