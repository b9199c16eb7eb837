"""The layer verbs as tools: load to runtime, save to disk, load from disk, compare layers.

A LOAD answers once every worker serves the new runtime (at most gateway.workers.LOAD_WAIT_S; the answer
says how many do), so a client told "loaded" can rely on any worker it reaches.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway import workers
from gateway.store import ConfigModule, ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.admin import rows
from handlers.admin.shared import AuditTrail, require_module

MODULE_HELP = "MCP VARIABLES, MCP PROFILES, MCP QUERY RULES or RAG SOURCES (or variables, profiles, rules, sources)."
RELOAD_TARGETS = {"variables": "MCP VARIABLES", "profiles": "MCP PROFILES", "rules": "MCP QUERY RULES", "sources": "RAG SOURCES"}


class ModuleIn(ToolInput):
    module: str = Field(min_length=1, max_length=64, description=MODULE_HELP)


class DiffIn(ModuleIn):
    include_same: bool = Field(default=False, description="Also list rows equal in all three layers.")
    limit: int = Field(default=500, ge=1, le=10_000, description="Most rows listed.")


class ReloadIn(ToolInput):
    target: Literal["variables", "profiles", "rules", "sources", "all"] = Field(
        description="Which module(s) to load from disk into memory and on to runtime."
    )


class LayerOut(ToolOutput):
    module: str
    action: str
    runtime_version: int | None = Field(default=None, description="The runtime version now serving (after a load).")
    workers_applied: int | None = Field(default=None, description="Workers serving that version when the call answered.")
    workers: int | None = Field(default=None, description="Workers alive.")
    changed: list[str] = Field(
        default_factory=list, description="Rows the verb changed in its destination layer: table/key (how)."
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="After a load: what serves but deserves a look (a target whose account can write, a skipped target and why).",
    )


class ReloadOut(ToolOutput):
    modules: list[LayerOut]


class DiffRow(ToolOutput):
    table: str
    key: str
    memory_vs_runtime: str = Field(description="same, added (in memory only), removed (in runtime only) or changed.")
    memory_vs_disk: str = Field(description="same, added (in memory only), removed (on disk only) or changed.")
    changed_columns: list[str]
    memory: dict[str, Any] | None
    runtime: dict[str, Any] | None
    disk: dict[str, Any] | None


class DiffOut(ToolOutput):
    module: str
    memory_equals_runtime: bool
    memory_equals_disk: bool
    rows: list[DiffRow]
    truncated: bool = False


def diff_rows(store: Any, module: ConfigModule) -> list[DiffRow]:
    """Every row of the module's tables, compared memory vs runtime and memory vs disk (masked)."""
    found = []
    for table, by_layer in rows.read_layers(store, module).items():
        over = rows.columns(store, table)
        for key in sorted(set().union(*(set(v) for v in by_layer.values())), key=lambda k: tuple(str(p) for p in k)):
            memory, runtime, disk = (by_layer[layer].get(key) for layer in rows.LAYERS)
            vs_runtime, cols_runtime = rows.compare(memory, runtime, over)
            vs_disk, cols_disk = rows.compare(memory, disk, over)
            found.append(
                DiffRow(
                    table=table,
                    key="/".join(str(p) for p in key),
                    memory_vs_runtime=vs_runtime,
                    memory_vs_disk=vs_disk,
                    changed_columns=sorted(set(cols_runtime) | set(cols_disk)),
                    memory=rows.mask_row(store, module, memory),
                    runtime=rows.mask_row(store, module, runtime),
                    disk=rows.mask_row(store, module, disk),
                )
            )
    return found


def _changes(found: list[DiffRow], attribute: str) -> list[str]:
    return [f"{r.table}/{r.key} ({getattr(r, attribute)})" for r in found if getattr(r, attribute) != "same"][:100]


class LayerTools:
    def __init__(self, store: ConfigStore, trail: AuditTrail) -> None:
        self.store = store
        self.trail = trail

    def _load(self, ctx: CallContext, module: ConfigModule) -> LayerOut:
        store = self.store
        changed = _changes(diff_rows(store, module), "memory_vs_runtime")
        # validates first: a ConfigError changes nothing; the warnings are admin.sql's LOAD ... TO RUNTIME's
        version, warnings = store.load_to_runtime_warning(module.name)
        applied, alive = workers.wait_applied(store, version)
        return LayerOut(
            module=module.name,
            action="load_to_runtime",
            runtime_version=version,
            workers_applied=applied,
            workers=alive,
            changed=changed,
            warnings=warnings,
        )

    def _verb(self, ctx: CallContext, name: str, action: str) -> LayerOut:
        module = require_module(self.store, name)
        with self.trail.audited(ctx, {"module": module.name}) as entry:
            if action == "load_to_runtime":
                out = self._load(ctx, module)
            else:
                found = diff_rows(self.store, module)
                # save: memory -> disk changes what differs between them; load from disk: the same rows
                changed = _changes(found, "memory_vs_disk")
                getattr(self.store, action)(module.name)
                out = LayerOut(module=module.name, action=action, changed=changed)
            entry.after = out.model_dump(exclude_none=True)
            return out

    @tool("admin.load_to_runtime", title="Apply memory to runtime", read_only=False, destructive=True, idempotent=True)
    def load_to_runtime(self, args: ModuleIn, ctx: CallContext) -> LayerOut:
        """LOAD <module> TO RUNTIME: validate the memory layer and serve it on every worker; an invalid module changes nothing.

        Answers once every worker serves the new version (at most 2 s; workers_applied says)."""
        return self._verb(ctx, args.module, "load_to_runtime")

    @tool("admin.save_to_disk", title="Save memory to disk", read_only=False, destructive=True, idempotent=True)
    def save_to_disk(self, args: ModuleIn, ctx: CallContext) -> LayerOut:
        """SAVE <module> TO DISK: copy the memory layer to disk so it survives a restart."""
        return self._verb(ctx, args.module, "save_to_disk")

    @tool("admin.load_from_disk", title="Load disk into memory", read_only=False, destructive=True, idempotent=True)
    def load_from_disk(self, args: ModuleIn, ctx: CallContext) -> LayerOut:
        """LOAD <module> FROM DISK: replace the memory layer with the disk layer (unsaved memory edits are lost; runtime unchanged)."""
        return self._verb(ctx, args.module, "load_from_disk")

    @tool("admin.diff", title="Compare memory, runtime and disk", read_only=True)
    def diff(self, args: DiffIn, ctx: CallContext) -> DiffOut:
        """Compare a module's memory, runtime and disk layers row by row (secrets masked): what a load or a save would change."""
        module = require_module(self.store, args.module)
        found = diff_rows(self.store, module)
        listed = [r for r in found if args.include_same or r.memory_vs_runtime != "same" or r.memory_vs_disk != "same"]
        return DiffOut(
            module=module.name,
            memory_equals_runtime=all(r.memory_vs_runtime == "same" for r in found),
            memory_equals_disk=all(r.memory_vs_disk == "same" for r in found),
            rows=listed[: args.limit],
            truncated=len(listed) > args.limit,
        )

    @tool("admin_reload", title="Reload from disk", read_only=False, destructive=True, idempotent=True)
    def admin_reload(self, args: ReloadIn, ctx: CallContext) -> ReloadOut:
        """Load module(s) from disk into memory and on to runtime (ProxySQL's admin_reload); unsaved memory edits are lost."""
        names = list(RELOAD_TARGETS.values()) if args.target == "all" else [RELOAD_TARGETS[args.target]]
        names = [n for n in names if n in self.store.modules]
        done = []
        with self.trail.audited(ctx, {"target": args.target}) as entry:
            for name in names:
                module = self.store.module(name)
                self.store.load_from_disk(name)
                done.append(self._load(ctx, module))
            entry.after = [d.model_dump(exclude_none=True) for d in done]
        return ReloadOut(modules=done)
