"""The tool machinery: `ToolHandler` (the Python spelling of ProxySQL's `MCP_Tool_Handler`), the
`@tool` declaration, `CallContext` and the result builders. Infrastructure: every endpoint's
handler builds on it, and it knows no endpoint.

A tool is declared once, beside its function:

    class ConfigHandler(ToolHandler):
        endpoint = "config"

        @tool("get_config", title="Read a variable", read_only=True, idempotent=True)
        def get_config(self, args: GetConfigIn, ctx: CallContext) -> GetConfigOut:
            '''The docstring is the description the model reads: make it good.'''

The input and output pydantic models come from the type hints; the base derives the JSON
Schemas (once, at class creation), validates arguments, runs the function (sync functions in
a worker thread, never on the event loop; async ones on the loop) under the call's deadline,
and shapes the MCP result: `structuredContent` plus a text block for the model (gateway/rendering.py), or
`isError: true` with `{"error": {code, message, details}}`. Duplicate names or missing
descriptions fail at import.

Deadlines are set in one place, `ToolHandler.context`: now + the handler's `timeout_variable`
(never above mcp-timeout_ms). execute_tool enforces it; long tools call ctx.check_deadline().

A handler also contributes, beside its tools: `variables`, `config_modules`, CLI sub-commands
(`add_cli`), serve-time options and jobs (`add_serve_options`, `before_serve`) and the example
call the first-start banner prints (`example_call`), scrape-time metric collectors
(`scrape_collectors`), what backup/restore must know of its files (`data_files`), and its MCP
resources and prompts (`resources`, `prompts`).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import time
import types
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.call import CallContext, Caller
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument
from gateway.rendering import text_of
from gateway.store import ConfigModule
from gateway.variables import Variable

if TYPE_CHECKING:
    from pathlib import Path

    from gateway.data_files import DataFiles
    from gateway.prompts import Prompt
    from gateway.resources import ResourceSource
    from gateway.runtime import Runtime
    from gateway.services import Services
    from gateway.store import ConfigStore
    from gateway.supervisor import SupervisorJob

log = logging.getLogger("mcp_gateway.tools")


# Every integer argument has bounds in its model (tests/test_tool_arguments.py checks each tool's
# published schema); an id or count that reaches SQLite or a database driver fits in 64 bits.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ToolInput(BaseModel):
    """Base for tool arguments: unknown keys are an error, not silently ignored; numbers are finite
    ("NaN" and "Infinity" are refused, not parsed into floats no comparison can bound)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ToolOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    annotations: dict[str, bool]
    func: Callable[..., Any]
    is_async: bool
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] = field(default_factory=dict)
    group: type | None = None  # the tool group class that declares it; None: the handler itself
    # Whether the arguments carry `format` (the text block's, gateway/rendering.py): known once
    # here, since getattr on a pydantic model lacking the field raises and catches, ~3 us a call.
    takes_format: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "takes_format", "format" in self.input_model.model_fields)

    @property
    def portable_name(self) -> str:
        return self.name.replace(".", "_")

    def describe(self, *, style: str = "dotted") -> dict[str, Any]:
        return {
            "name": self.portable_name if style == "portable" else self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {"title": self.title, **self.annotations},
        }


def tool(
    name: str,
    *,
    title: str,
    read_only: bool,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a handler method as an MCP tool. The annotations must tell the truth."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__mcp_tool__ = {  # type: ignore[attr-defined]
            "name": name,
            "title": title,
            "annotations": {
                "readOnlyHint": read_only,
                "destructiveHint": destructive and not read_only,
                "idempotentHint": idempotent or read_only,
                "openWorldHint": open_world,
            },
        }
        return func

    return mark


ABBREVIATIONS = frozenset({"e.g.", "i.e.", "vs.", "etc.", "cf.", "approx.", "incl.", "esp."})


def first_sentence(text: str) -> str:
    """The first sentence of a description's first paragraph, whole: what tables show of a tool.

    A sentence ends at '.', '!' or '?' followed by a space or the end, outside parentheses,
    brackets and quotes, and not in an ellipsis ("WITH ... SELECT") or after an abbreviation
    ("vs.", "e.g."); a period inside a word (2.5, rag.get_chunks) ends nothing."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    depth, quote = 0, ""
    for index, char in enumerate(paragraph):
        if quote:
            quote = "" if char == quote else quote
        elif char in '"`':
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char in ".!?" and depth == 0 and paragraph[index + 1 : index + 2] in ("", " "):
            if char == "." and paragraph[index - 1 : index] == ".":
                continue  # the end of an ellipsis
            if paragraph[: index + 1].rsplit(" ", 1)[-1].lower() in ABBREVIATIONS:
                continue
            return paragraph[: index + 1]
    return paragraph if paragraph.endswith((".", "!", "?")) else paragraph + "."


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


Model = TypeVar("Model", bound=BaseModel)


class Shaped(dict, Generic[Model]):  # type: ignore[type-arg]
    """A tool's answer already in the JSON form of its output model (`-> Shaped[SqlResult]`), built
    directly by a hot path whose values are JSON already: execute_tool sends it as it is, instead
    of validating it into the model and serialising it back (which cost more than the rest of a
    small SQL call's shaping). Its tests check it equals the model's own serialisation."""


def _build_spec(func: Callable[..., Any], meta: dict[str, Any], group: type | None) -> ToolSpec:
    hints = get_type_hints(func)
    params = [p for p in inspect.signature(func).parameters if p != "self"]
    if len(params) != 2 or "return" not in hints:
        raise TypeError(f"tool {meta['name']}: signature must be (self, args: Model, ctx: CallContext) -> Model")
    input_model, output_model = hints[params[0]], hints["return"]
    if get_origin(output_model) is Shaped:
        (output_model,) = get_args(output_model)
    description = inspect.cleandoc(func.__doc__ or "")
    if not description:
        raise TypeError(f"tool {meta['name']} has no description (docstring)")
    return ToolSpec(
        name=meta["name"],
        title=meta["title"],
        description=description,
        input_model=input_model,
        output_model=output_model,
        annotations=meta["annotations"],
        func=func,
        is_async=inspect.iscoroutinefunction(func),
        input_schema=_schema(input_model),
        output_schema=_schema(output_model),
        group=group,
    )


def declared_tools(owner: type) -> list[tuple[Callable[..., Any], dict[str, Any]]]:
    """The `@tool` methods a class declares itself, in source order (not those it inherits)."""
    return [(attr, meta) for attr in vars(owner).values() if (meta := getattr(attr, "__mcp_tool__", None)) is not None]


def tool_result(
    payload: dict[str, Any], *, is_error: bool = False, text_format: str | None = "json", protocol_version: str = ""
) -> dict[str, Any]:
    """The MCP result: structuredContent, and the text block the model reads (gateway/rendering.py)."""
    text = text_of(payload, is_error=is_error, text_format=text_format, protocol_version=protocol_version)
    return {"content": [{"type": "text", "text": text}], "structuredContent": payload, "isError": is_error}


def error_result(error: GatewayError) -> dict[str, Any]:
    return tool_result({"error": error.to_dict()}, is_error=True)


class ToolHandler:
    """Base of every endpoint's handler: tool discovery, execution and lifecycle.

    Subclasses set `endpoint`, declare tools with `@tool`, may declare `variables`, and may
    override `init` (open pools, load an index; raising leaves the endpoint UNAVAILABLE while
    the others serve), `close`, and `on_runtime_change` (called in every worker when a LOAD
    ... TO RUNTIME lands).
    """

    endpoint: ClassVar[str] = ""
    title: ClassVar[str] = ""
    instructions: ClassVar[str] = ""
    variables: ClassVar[tuple[Variable, ...]] = ()
    config_modules: ClassVar[tuple[ConfigModule, ...]] = ()  # admin tables with LOAD/SAVE verbs
    tools: ClassVar[dict[str, ToolSpec]] = {}
    thread_limit: ClassVar[int] = 32  # concurrent blocking calls per endpoint
    timeout_variable: ClassVar[str] = "mcp-timeout_ms"  # the deadline of one call (mcp-timeout_ms caps it)
    example_call: ClassVar[tuple[str, dict[str, Any]] | None] = None  # (tool, arguments) for the first-start banner
    data_files: ClassVar[DataFiles | None] = None  # its scratch and derived files in the data directory (gateway/backup.py)

    # The tool groups this endpoint serves, in the order tools/list shows them. A tool group is a
    # plain class (no base) whose constructor takes what its tools use; `make_groups` builds one
    # of each, explicitly, once the handler is up. A handler may also declare tools itself.
    tool_groups: ClassVar[tuple[type, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        owners: list[tuple[type, type | None]] = [
            (klass, None) for klass in reversed(cls.__mro__) if issubclass(klass, ToolHandler)
        ]
        owners += [(group, group) for group in cls.tool_groups]
        for owner, group in owners:
            for func, meta in declared_tools(owner):
                if meta["name"] in specs:
                    raise TypeError(f"{cls.__name__}: tool {meta['name']} declared twice")
                specs[meta["name"]] = _build_spec(func, meta, group)
        cls.tools = specs
        cls._lookup = {**{s.portable_name: s for s in specs.values()}, **specs}

    def __init__(self, services: Services) -> None:
        self.services = services
        self.down_reason = ""  # set by the app when init() fails: tools answer UNAVAILABLE
        self._threads: ThreadPoolExecutor | None = None  # for the blocking tools, made on first use
        self._groups: dict[type, object] | None = None  # tool group instances, built on the first call

    def make_groups(self) -> list[object]:
        """One instance of each class in `tool_groups`, given what its tools use. Called once, on
        the event loop, at the first tool call (after init): what init opened is there to pass."""
        return []

    def group(self, group: type) -> object:
        """The instance of one of this handler's tool groups."""
        if self._groups is None:
            built = {type(instance): instance for instance in self.make_groups()}
            if set(built) != set(self.tool_groups):
                raise TypeError(
                    f"{type(self).__name__}.make_groups built {sorted(c.__name__ for c in built)}, not its tool_groups"
                )
            self._groups = built
        return self._groups[group]

    # -- lifecycle -------------------------------------------------------------------------
    async def init(self) -> None:
        """Acquire what the tools need. Raise to mark the endpoint UNAVAILABLE."""

    async def close(self) -> None:
        """Release what init acquired. Subclasses end with `await super().close()`."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def in_thread(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run blocking work on this handler's threads: every sync tool, and the blocking part
        of an async tool that answers on the event loop when it can (a cache hit). The executor
        costs half of anyio.to_thread's ~65 us per call; it does not copy context variables
        into the thread, and no tool reads any."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.thread_limit, thread_name_prefix=f"mcp-{self.endpoint}")
        return await asyncio.get_running_loop().run_in_executor(self._threads, func, *args)

    def on_runtime_change(self, old: Runtime | None, new: Runtime) -> None:
        """React to a new runtime (apply changed sources, ...)."""

    # -- MCP resources and prompts (gateway/mcp_methods.py) ---------------------------------
    def resources(self) -> ResourceSource | None:
        """What resources/* serve on this endpoint (gateway/resources.py), or None: no resources
        capability, and its methods are -32601. Compose `ResourceTools(source)` to offer the
        same as the read_resource tool."""
        return None

    def prompts(self, runtime: Runtime) -> list[Prompt]:
        """The built-in prompts of this endpoint (gateway/prompts.py); admin-defined ones
        (MCP PROMPTS) are added by the protocol layer and shadow these by name."""
        return []

    # -- what a handler adds to the command line -------------------------------------------
    @classmethod
    def add_cli(cls, commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
        """Add this endpoint's sub-commands (`mcp-gateway <command> ...`). Each sets `func`
        (args -> exit status) as gateway.cli's own do. `open_store(args.data_dir)` opens the
        config store of an existing data directory (--data-dir, default None: ./mcp-gateway-data
        or the running gateway's) or raises ConfigError saying which --data-dir to pass; a
        command other than `serve` never creates a data directory."""

    @classmethod
    def add_serve_options(cls, serve: argparse.ArgumentParser) -> None:
        """Add options of `mcp-gateway serve` that concern this endpoint."""

    @classmethod
    def before_serve(
        cls, args: argparse.Namespace, *, data_dir: Path, store: ConfigStore, first_start: bool
    ) -> list[SupervisorJob]:
        """What the serving parent process runs beside the workers (e.g. a first-start job). With
        --workers 1 start it here and return []; with more, return it as jobs: the parent then
        becomes a lean supervisor (exec: a thread started here would not survive) that imports
        each job's module and runs it (gateway/supervisor.py)."""
        return []

    @classmethod
    def scrape_collectors(cls, data_dir: Path, runtime: Callable[[], Runtime]) -> list[Any]:
        """Prometheus collectors evaluated when /metrics is scraped (by whichever worker answers,
        or by the parent on mcp-metrics_port): for numbers read from state every process shares,
        such as the RAG index in rag.db. `runtime` returns the current runtime snapshot."""
        return []

    # -- discovery -------------------------------------------------------------------------
    def get_tool_list(self, *, style: str = "dotted") -> list[dict[str, Any]]:
        return [spec.describe(style=style) for spec in self.tools.values()]

    def find_tool(self, name: str) -> ToolSpec | None:
        """Both spellings resolve: `rag.search_fts` and `rag_search_fts`."""
        return self._lookup.get(name)

    def get_tool_description(self, name: str, *, style: str = "dotted") -> dict[str, Any] | None:
        spec = self.find_tool(name)
        return spec.describe(style=style) if spec else None

    # -- execution -------------------------------------------------------------------------
    def context(
        self,
        spec: ToolSpec,
        runtime: Runtime,
        *,
        protocol_version: str = "",
        client: str = "",
        token_fingerprint: str = "",
        caller: Caller | None = None,
    ) -> CallContext:
        """The context of one call, with its deadline: the one place a deadline is set."""
        variables = runtime.variables
        timeout_ms = variables["mcp-timeout_ms"]
        if self.timeout_variable != "mcp-timeout_ms":
            timeout_ms = min(timeout_ms, variables[self.timeout_variable])
        return CallContext(
            endpoint=self.endpoint,
            tool_name=spec.name,
            runtime=runtime,
            deadline=time.monotonic() + timeout_ms / 1000,
            protocol_version=protocol_version,
            client=client,
            token_fingerprint=token_fingerprint,
            caller=caller or Caller(token_fingerprint=token_fingerprint),
        )

    async def execute_tool(self, spec: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        """Validate, run under the deadline, and shape the MCP result. Never raises GatewayError."""
        try:
            args = spec.input_model.__pydantic_validator__.validate_python(arguments)  # model_validate, minus a layer
        except ValidationError as exc:
            details = [
                {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_input=False)
            ]
            # The message names the fields (bounded: a deeply nested input has long locations); the
            # details list them all. pydantic's messages never quote the input here (include_input).
            named = "; ".join(f"{(d['loc'] or '(arguments)')[:100]}: {d['msg']}" for d in details[:3])
            more = f" (+{len(details) - 3} more)" if len(details) > 3 else ""
            return error_result(InvalidArgument(f"invalid arguments for {spec.name}: {named}{more}", details=details))
        try:
            owner = self if spec.group is None else self.group(spec.group)
            if spec.is_async:
                # The first step runs at once: a tool that finishes without suspending (a runtime
                # read) needs no deadline timer, which cost more than such a tool (~4 of ~30 us per
                # call). One that suspends continues under asyncio.timeout, as if it had run inside
                # it all along: a timer cannot fire during a step that never yields to the loop.
                coro = spec.func(owner, args, ctx)
                try:
                    pending = coro.send(None)
                except StopIteration as done:
                    output = done.value
                else:
                    async with asyncio.timeout(ctx.remaining_s()):
                        output = await _resume(coro, pending)
            else:
                async with asyncio.timeout(ctx.remaining_s()):
                    # At the deadline the caller gets its answer; the thread runs on (holding its
                    # slot of thread_limit) and long tools call ctx.check_deadline() to stop early.
                    output = await self.in_thread(spec.func, owner, args, ctx)
        except TimeoutError:
            return error_result(DeadlineExceeded(f"{spec.name} did not finish within its deadline"))
        except GatewayError as exc:
            return error_result(exc)
        except OverflowError:  # a number past what SQLite or a driver holds: a model lacks a bound
            log.warning("tool %s on /mcp/%s: a number overflowed (a missing bound in its input model?)", spec.name, self.endpoint)
            return error_result(InvalidArgument(f"a number in the arguments of {spec.name} is out of range"))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug or an untranslated driver error: log it, answer safely
            log.exception("tool %s on /mcp/%s failed", spec.name, self.endpoint)
            return error_result(GatewayError(f"{spec.name} failed unexpectedly; see the gateway log"))
        if output.__class__ is Shaped:
            payload = output
        else:
            if isinstance(output, dict):
                output = spec.output_model.model_validate(output)
            payload = output.__pydantic_serializer__.to_python(output, mode="json", by_alias=True)  # model_dump
        text_format = (spec.takes_format and args.format) or ctx.runtime.variables.get("mcp-text_format")
        return tool_result(payload, text_format=text_format, protocol_version=ctx.protocol_version)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], pending: Any) -> Generator[Any, Any, Any]:
    """Continue `coro`, which has already yielded `pending` to the event loop, as `await coro`
    would have: what the task sends or throws goes to `coro`, its return value is ours."""
    while True:
        try:
            sent = yield pending
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # CancelledError at the deadline, or anything thrown into the task
            try:
                pending = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as done:
                return done.value
