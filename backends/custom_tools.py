"""Admin-defined tools and endpoints: the `MCP TOOLS` config module.

`mcp_tools` holds parameterised SQL tools: a read-only statement with `:named` placeholders, a
JSON parameter spec, the target it runs on and the endpoint that serves it. `mcp_endpoints`
holds toolsets: endpoints beyond the seven, each at `/mcp/<endpoint>` with its own bearer
token(s), serving the custom tools that name it and the built-in tools it lists
(`query/run_sql_readonly@support_db`: a built-in tool pinned to one target).

LOAD MCP TOOLS TO RUNTIME validates every row against what serves (the runtime targets): the
statement parses in the target's dialect and passes the read-only check of run_sql_readonly,
every placeholder is declared and every declared parameter used, each parameter spec is
well-formed. One bad row fails the LOAD, naming the tool and the field; nothing changes.

A parameter is one of string, integer, number, boolean, date, array (of one of the first five;
`items`), or identifier. Values are bound by the driver (backends/binding.py), never spliced. An
identifier (a column or table name) cannot be bound: it must list its allowed names in `enum`,
and the chosen one is quoted by the dialect into the text, which then takes the read-only
check like any other.

A call takes the one read-only path (`ReadOnlySql.run` with a `Statement` carrying the bound
values): query rules see the custom tool's name, the target's caps and timeouts apply, results
are cached by statement and values, digests record the statement with its placeholders.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import sqlglot
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, create_model
from sqlglot import exp

from backends.binding import MARKER_PREFIX, marker
from backends.engines import ENGINES
from backends.engines.base import Engine
from backends.readonly import check_readonly
from backends.sql import ReadOnlySql, Statement
from gateway.call import CallContext
from gateway.errors import ConfigError
from gateway.store import ConfigModule
from gateway.tools import INT64_MAX, INT64_MIN, ToolInput, ToolOutput, ToolSpec

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ENDPOINT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
PARAM_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}$")
IDENT_PREFIX = "__mcp_ident_"
SCALARS = ("string", "integer", "number", "boolean", "date")
TYPES = (*SCALARS, "array", "identifier")
SPEC_KEYS = frozenset(
    {"name", "type", "items", "required", "default", "description", "minimum", "maximum", "min_length", "max_length",
     "enum", "pattern", "max_items"}
)  # fmt: skip
MAX_DESCRIPTION = 2000
MAX_STRING = 65_536
DEFAULT_MAX_STRING = 1000
MAX_ITEMS = 1000
DEFAULT_MAX_ITEMS = 100
MAX_PARAMS = 32
RESERVED_ENDPOINTS = frozenset({"metrics", "healthz", "readyz", ".well-known"})


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    items: str | None
    required: bool
    default: Any
    description: str
    bounds: Mapping[str, Any]  # minimum, maximum, min_length, max_length, enum, pattern, max_items


@dataclass(frozen=True)
class CustomTool:
    """One validated runtime row: what serving it needs."""

    name: str
    endpoint: str
    target_id: str
    description: str
    compiled_sql: str  # placeholders as markers; identifier parameters as IDENT_PREFIX names
    params: tuple[Param, ...]
    max_rows: int | None
    timeout_ms: int | None
    cache_ttl_ms: int | None
    dialect: str


# -- the parameter spec ------------------------------------------------------------------------


def _iso_date(value: Any) -> Any:
    """Dates come as 'YYYY-MM-DD' text (a number is not a date: lax parsing would read it as a timestamp)."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("a date is written YYYY-MM-DD")
    return value


def _scalar_type(kind: str, bounds: Mapping[str, Any], *, for_items: bool = False) -> Any:
    enum = bounds.get("enum")
    if kind == "string":
        if enum is not None:
            return Literal[tuple(enum)]  # type: ignore[valid-type]
        return Annotated[
            str,
            Field(
                min_length=bounds.get("min_length"),
                max_length=bounds.get("max_length", DEFAULT_MAX_STRING),
                pattern=bounds.get("pattern"),
            ),
        ]
    if kind == "integer":
        if enum is not None:
            return Literal[tuple(enum)]  # type: ignore[valid-type]
        return Annotated[int, Field(strict=True, ge=bounds.get("minimum", INT64_MIN), le=bounds.get("maximum", INT64_MAX))]
    if kind == "number":
        return Annotated[float, Field(ge=bounds.get("minimum", -1e308), le=bounds.get("maximum", 1e308), allow_inf_nan=False)]
    if kind == "boolean":
        return Annotated[bool, Field(strict=True)]
    if kind == "date":
        lo, hi = bounds.get("minimum"), bounds.get("maximum")
        return Annotated[
            datetime.date,
            BeforeValidator(_iso_date),
            Field(
                ge=datetime.date.fromisoformat(lo) if lo else None,
                le=datetime.date.fromisoformat(hi) if hi else None,
                json_schema_extra={"format": "date"},
            ),
        ]
    raise AssertionError(kind)


def _param_type(param: Param) -> Any:
    if param.type == "identifier":
        return Literal[tuple(param.bounds["enum"])]  # type: ignore[valid-type]
    if param.type == "array":
        assert param.items is not None
        item = _scalar_type(param.items, param.bounds, for_items=True)
        return Annotated[list[item], Field(max_length=param.bounds.get("max_items", DEFAULT_MAX_ITEMS))]  # type: ignore[valid-type]
    return _scalar_type(param.type, param.bounds)


def input_model(tool_name: str, params: tuple[Param, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for param in params:
        annotation = _param_type(param)
        description = param.description or None
        if param.required:
            fields[param.name] = (annotation, Field(description=description))
        elif param.default is not None:
            fields[param.name] = (annotation, Field(default=param.default, description=description))
        else:
            fields[param.name] = (annotation | None, Field(default=None, description=description))
    return create_model(f"{tool_name}_arguments", __base__=ToolInput, **fields)


def _number(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX
    return isinstance(value, (int, float)) and math.isfinite(value)


def _parse_param(spec: Any, where: str, errors: list[str]) -> Param | None:
    if not isinstance(spec, dict):
        errors.append(f"{where}: each parameter is a JSON object")
        return None
    name = spec.get("name")
    if not isinstance(name, str) or not PARAM_NAME.match(name):
        errors.append(f"{where}: name must match {PARAM_NAME.pattern}")
        return None
    where = f"{where} {name!r}"
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        errors.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(SPEC_KEYS))})")
    kind = spec.get("type")
    if kind not in TYPES:
        errors.append(f"{where}: type must be one of {', '.join(TYPES)}, got {kind!r}")
        return None
    items = spec.get("items")
    if kind == "array":
        if items not in SCALARS:
            errors.append(f"{where}: items must be one of {', '.join(SCALARS)}, got {items!r}")
            return None
    elif items is not None:
        errors.append(f"{where}: items is for arrays only")
    description = spec.get("description", "")
    if not isinstance(description, str) or len(description) > 500:
        errors.append(f"{where}: description must be text of at most 500 characters")
        description = ""
    required = spec.get("required", "default" not in spec)
    if not isinstance(required, bool):
        errors.append(f"{where}: required must be true or false")
        required = True
    if required and spec.get("default") is not None:
        errors.append(f"{where}: a required parameter has no default")
    bounds = {k: spec[k] for k in ("minimum", "maximum", "min_length", "max_length", "enum", "pattern", "max_items") if k in spec}
    value_kind = items if kind == "array" else kind
    for key in ("minimum", "maximum"):
        if key in bounds:
            if value_kind == "date":
                try:
                    datetime.date.fromisoformat(str(bounds[key]))
                except ValueError:
                    errors.append(f"{where}: {key} must be a date YYYY-MM-DD")
            elif value_kind in ("integer", "number"):
                if not _number(bounds[key], value_kind):
                    errors.append(f"{where}: {key} must be a finite {value_kind}")
            else:
                errors.append(f"{where}: {key} applies to integer, number and date parameters")
    for key in ("min_length", "max_length"):
        if key in bounds:
            if value_kind != "string":
                errors.append(f"{where}: {key} applies to string parameters")
            elif not isinstance(bounds[key], int) or isinstance(bounds[key], bool) or not 0 <= bounds[key] <= MAX_STRING:
                errors.append(f"{where}: {key} must be an integer from 0 to {MAX_STRING}")
    if "max_items" in bounds:
        if kind != "array":
            errors.append(f"{where}: max_items applies to arrays")
        elif not isinstance(bounds["max_items"], int) or not 1 <= bounds["max_items"] <= MAX_ITEMS:
            errors.append(f"{where}: max_items must be an integer from 1 to {MAX_ITEMS}")
    if "pattern" in bounds:
        if value_kind != "string" or not isinstance(bounds["pattern"], str):
            errors.append(f"{where}: pattern applies to string parameters")
        else:
            try:
                re.compile(bounds["pattern"])
            except re.error as exc:
                errors.append(f"{where}: pattern does not compile: {exc}")
    if "enum" in bounds:
        enum = bounds["enum"]
        good = isinstance(enum, list) and 0 < len(enum) <= 1000
        if good and kind == "identifier":
            good = all(isinstance(v, str) and IDENTIFIER.match(v) for v in enum)
        elif good and value_kind == "string":
            good = all(isinstance(v, str) and len(v) <= MAX_STRING for v in enum)
        elif good and value_kind == "integer":
            good = all(_number(v, "integer") for v in enum)
        elif good:
            good = False
        if not good:
            errors.append(
                f"{where}: enum must be a non-empty list of "
                + ("identifiers" if kind == "identifier" else "values of its type (string or integer parameters)")
            )
    elif kind == "identifier":
        errors.append(f"{where}: an identifier parameter must list its allowed names in enum (names cannot be bound)")
    param = Param(name, kind, items, required, spec.get("default"), description, bounds)
    if not errors:
        try:  # the bounds make a model, and the default satisfies it
            model = input_model("check", (param,))
            if param.default is not None:
                model.model_validate({name: param.default})
        except (ValidationError, TypeError, ValueError) as exc:
            errors.append(f"{where}: the spec or its default is not valid: {str(exc).splitlines()[0][:200]}")
    return param


def parse_params(text: Any, where: str, errors: list[str]) -> tuple[Param, ...]:
    try:
        specs = json.loads(text or "[]")
    except ValueError as exc:
        errors.append(f"{where}: not valid JSON ({exc})")
        return ()
    if not isinstance(specs, list):
        errors.append(f"{where}: must be a JSON list of parameter objects")
        return ()
    if len(specs) > MAX_PARAMS:
        errors.append(f"{where}: at most {MAX_PARAMS} parameters")
        return ()
    params, seen = [], set()
    for spec in specs:
        count = len(errors)
        param = _parse_param(spec, where, errors)
        if param is None or len(errors) > count:
            continue
        if param.name in seen:
            errors.append(f"{where}: parameter {param.name!r} declared twice")
        seen.add(param.name)
        params.append(param)
    return tuple(params)


# -- the statement -----------------------------------------------------------------------------


def placeholders(sql: str, dialect: str) -> list[tuple[int, int, str]]:
    """The `:name` placeholders of a statement as (start, end, name), outside strings and comments:
    a colon token directly followed by a name (PostgreSQL's `::type` is another token)."""
    tokens = sqlglot.tokenize(sql, read=dialect)
    found = []
    for colon, name in zip(tokens, tokens[1:]):
        if colon.token_type.name == "COLON" and name.start == colon.end + 1 and re.fullmatch(r"[A-Za-z_]\w*", name.text):
            found.append((colon.start, name.end + 1, name.text))
    return found


def quoted_identifier(name: str, dialect: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=dialect)


def render(compiled: str, identifiers: Mapping[str, str], dialect: str) -> str:
    """The compiled statement with each identifier parameter's chosen name, quoted by the dialect."""
    for name, value in identifiers.items():
        compiled = compiled.replace(f"{IDENT_PREFIX}{name}__", quoted_identifier(value, dialect))
    return compiled


def compile_statement(
    statement: str, params: tuple[Param, ...], engine: Engine, max_rows: int, where: str, errors: list[str]
) -> str:
    """Check the statement as a LOAD does and return it compiled (markers for placeholders)."""
    if not statement.strip():
        errors.append(f"{where}: statement is required")
        return ""
    if MARKER_PREFIX in statement or IDENT_PREFIX in statement:
        errors.append(f"{where}: statement must not contain {MARKER_PREFIX} or {IDENT_PREFIX}")
        return ""
    try:
        found = placeholders(statement, engine.dialect)
    except Exception as exc:  # sqlglot's tokenizer on odd input
        errors.append(f"{where}: statement does not parse: {str(exc)[:200]}")
        return ""
    declared = {p.name: p for p in params}
    used = {name for _, _, name in found}
    for name in sorted(used - set(declared)):
        errors.append(f"{where}: statement uses :{name}, which parameters does not declare")
    for name in sorted(set(declared) - used):
        errors.append(f"{where}: parameter {name!r} is declared but the statement never uses :{name}")
    if used != set(declared):
        return ""
    compiled = statement
    for start, end, name in reversed(found):
        token = f"{IDENT_PREFIX}{name}__" if declared[name].type == "identifier" else marker(name)
        compiled = compiled[:start] + token + compiled[end:]
    identifier_params = [p for p in params if p.type == "identifier"]
    variants = [{p.name: p.bounds["enum"][0] for p in identifier_params}]
    for p in identifier_params:  # each allowed name once
        variants += [{**variants[0], p.name: v} for v in p.bounds["enum"][1:]]
    for chosen in variants:
        try:
            checked = check_readonly(render(compiled, chosen, engine.dialect), engine, row_cap=max_rows + 1)
        except Exception as exc:
            message = getattr(exc, "message", str(exc))
            errors.append(f"{where}: {message}")
            return ""
        kept = {m for m in re.findall(r"'__mcp_param_(\w+?)__'", checked.sql)}
        lost = {p.name for p in params if p.type != "identifier"} - kept
        if lost:
            errors.append(
                f"{where}: :{sorted(lost)[0]} must stand where a value goes; the read-only check removed it "
                "(a LIMIT takes no parameter: max_rows caps the rows)"
            )
            return ""
    return compiled


# -- the module --------------------------------------------------------------------------------


def _int_or_none(row: Mapping[str, Any], column: str, where: str, errors: list[str], lo: int, hi: int) -> int | None:
    value = row.get(column)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        errors.append(f"{where}: {column} must be an integer from {lo} to {hi} (or NULL)")
        return None
    return value


def _words(value: Any) -> list[str]:
    return [w for w in re.split(r"[\s,]+", str(value or "")) if w]


def _tool_ref(ref: str) -> tuple[str, str, str | None] | None:
    """'query/run_sql_readonly@support_db' -> ('query', 'run_sql_readonly', 'support_db')."""
    match = re.fullmatch(r"([a-z][a-z0-9_-]*)/([A-Za-z][\w.]*)(?:@([\w.-]+))?", ref)
    return (match.group(1), match.group(2), match.group(3)) if match else None


def builtin_refs(row: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    return [ref for ref in (_tool_ref(w) for w in _words(row.get("builtin_tools"))) if ref is not None]


def tokens_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(t for t in (w.strip() for w in str(row.get("auth_tokens") or "").split(",")) if t)


def tools_module(builtin: Mapping[str, Mapping[str, bool]]) -> ConfigModule:
    """The MCP TOOLS module, knowing the built-in endpoints and their tools
    (`builtin[endpoint][tool name]`: whether the tool takes a target_id argument)."""

    def build(memory: Mapping[str, list[dict[str, Any]]], _variables: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
        errors: list[str] = []
        # Every loaded target with a known engine: one that does not serve now (a missing file, an
        # unset password variable) still has a dialect to check against; its calls answer why not.
        targets = {r["target_id"]: r for r in memory.get("runtime_mcp_target_profiles", ()) if r.get("protocol") in ENGINES}
        endpoint_rows = [dict(r) for r in memory["mcp_endpoints"]]
        toolsets: set[str] = set()
        lent: dict[str, set[str]] = {}  # the built-in tool names each toolset serves
        for row in endpoint_rows:
            name = str(row.get("endpoint") or "")
            where = f"mcp_endpoints {name!r}"
            if not ENDPOINT_NAME.match(name):
                errors.append(f"{where}: endpoint must match {ENDPOINT_NAME.pattern}")
            elif name in builtin or name in RESERVED_ENDPOINTS:
                errors.append(f"{where}: endpoint {name!r} is a built-in endpoint's name")
            row["active"] = 1 if row.get("active") else 0
            if row["active"]:
                toolsets.add(name)
            tokens = tokens_of(row)
            if row["active"] and not tokens:
                errors.append(f"{where}: auth_tokens is required (comma separated bearer tokens)")
            if any(len(t) < 16 for t in tokens):
                errors.append(f"{where}: auth_tokens: each token must be at least 16 characters")
            for word in _words(row.get("builtin_tools")):
                ref = _tool_ref(word)
                if ref is None:
                    errors.append(f"{where}: builtin_tools: {word!r} is not endpoint/tool or endpoint/tool@target")
                    continue
                source, tool_name, pin = ref
                lent.setdefault(name, set()).add(tool_name)
                if tool_name not in builtin.get(source, {}):
                    errors.append(f"{where}: builtin_tools: no built-in tool {tool_name!r} on /mcp/{source}")
                elif pin is not None and not builtin[source][tool_name]:
                    errors.append(f"{where}: builtin_tools: {source}/{tool_name} takes no target_id to pin")
                elif pin is not None and pin not in targets:
                    errors.append(f"{where}: builtin_tools: unknown target {pin!r} (not a served MCP PROFILES target)")
            for pattern in _words(row.get("tools_disabled")):
                if len(pattern) > 128:
                    errors.append(f"{where}: tools_disabled: a pattern is at most 128 characters")
        tool_rows = []
        for memory_row in memory["mcp_tools"]:
            row = dict(memory_row)
            name = str(row.get("tool_name") or "")
            where = f"mcp_tools {name!r}"
            if not TOOL_NAME.match(name):
                errors.append(f"{where}: tool_name must match {TOOL_NAME.pattern}")
                continue
            row["active"] = 1 if row.get("active") else 0
            endpoint = str(row.get("endpoint") or "")
            if endpoint not in builtin and endpoint not in toolsets:
                errors.append(
                    f"{where}: endpoint {endpoint!r} is neither a built-in endpoint nor an active mcp_endpoints toolset"
                )
            elif name in builtin.get(endpoint, {}) or name in lent.get(endpoint, set()):
                errors.append(f"{where}: tool_name {name!r} is a built-in tool /mcp/{endpoint} serves")
            description = str(row.get("description") or "").strip()
            if not description or len(description) > MAX_DESCRIPTION:
                errors.append(f"{where}: description is required (at most {MAX_DESCRIPTION} characters): the model reads it")
            max_rows = _int_or_none(row, "max_rows", where, errors, 1, 1_000_000)
            _int_or_none(row, "timeout_ms", where, errors, 1, 3_600_000)
            _int_or_none(row, "cache_ttl_ms", where, errors, 0, 86_400_000)
            params = parse_params(row.get("parameters"), f"{where}: parameters", errors)
            target = targets.get(str(row.get("target_id") or ""))
            if target is None:
                errors.append(
                    f"{where}: target_id: unknown target {row.get('target_id')!r} (LOAD MCP PROFILES TO RUNTIME serves the targets)"
                )
                continue
            engine = ENGINES[target["protocol"]]
            cap = min(max_rows or int(target.get("max_rows") or 1000), int(target.get("max_rows") or 1000))
            compiled = compile_statement(str(row.get("statement") or ""), params, engine, cap, f"{where}: statement", errors)
            row["compiled_sql"] = compiled
            tool_rows.append(row)
        if errors:
            raise ConfigError("; ".join(errors[:20]), details=errors)
        return {"runtime_mcp_tools": tool_rows, "runtime_mcp_endpoints": endpoint_rows}

    return ConfigModule(
        "MCP TOOLS",
        ("mcp_tools", "mcp_endpoints"),
        build,
        secret_columns=("auth_tokens",),
        warnings=_warnings,
        reads=("runtime_mcp_target_profiles",),
    )


def _warnings(runtime: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """What LOAD MCP TOOLS TO RUNTIME tells the admin besides: inactive tools and toolsets."""
    found = [f"tool {r['tool_name']}: inactive (not served)" for r in runtime["runtime_mcp_tools"] if not r["active"]]
    found += [f"endpoint {r['endpoint']}: inactive (not served)" for r in runtime["runtime_mcp_endpoints"] if not r["active"]]
    return found


# -- serving -----------------------------------------------------------------------------------


class CustomToolResult(ToolOutput):
    target_id: str
    columns: list[dict[str, str]]
    rows: list[list[Any]] = Field(description="Values are JSON: decimals as strings, dates ISO 8601.")
    row_count: int
    truncated: bool
    truncated_reason: str | None = None
    message: str | None = Field(default=None, description="Set when a query rule answered instead of running the statement.")
    stats: dict[str, Any]


def _tool_of(row: Mapping[str, Any], dialect: str) -> CustomTool:
    errors: list[str] = []
    params = parse_params(row.get("parameters"), "", errors)
    return CustomTool(
        name=row["tool_name"],
        endpoint=row["endpoint"],
        target_id=row["target_id"],
        description=str(row["description"]).strip(),
        compiled_sql=row["compiled_sql"],
        params=params,
        max_rows=row.get("max_rows"),
        timeout_ms=row.get("timeout_ms"),
        cache_ttl_ms=row.get("cache_ttl_ms"),
        dialect=dialect,
    )


def tool_spec(tool: CustomTool, sql: ReadOnlySql) -> ToolSpec:
    """A ToolSpec like any `@tool`'s: its input model (and so its inputSchema) from the parameter
    spec; its function binds the values and takes the one read-only path."""
    model = input_model(tool.name, tool.params)
    identifier_names = [p.name for p in tool.params if p.type == "identifier"]
    plain_text = tool.compiled_sql if not identifier_names else None

    def run(_owner: object, args: BaseModel, ctx: CallContext) -> dict[str, Any]:
        values = dict(args)
        text = plain_text
        if text is None:
            text = render(tool.compiled_sql, {n: values.pop(n) for n in identifier_names}, tool.dialect)
        statement = Statement(
            sql=text, target_id=tool.target_id, max_rows=tool.max_rows, timeout_ms=tool.timeout_ms,
            tool_name=tool.name, params=values, cache_ttl_ms=tool.cache_ttl_ms,
        )  # fmt: skip
        return sql.run(ctx, statement)

    schema = model.model_json_schema(by_alias=True)
    schema.setdefault("properties", {})
    return ToolSpec(
        name=tool.name,
        title=tool.name.replace("_", " "),
        description=tool.description,
        input_model=model,
        output_model=CustomToolResult,
        annotations={"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
        func=run,
        is_async=False,
        input_schema=schema,
        output_schema=CustomToolResult.model_json_schema(by_alias=True),
    )


class CustomTools:
    """The custom tools of the current runtime as ToolSpecs, by endpoint (rebuilt when
    runtime_mcp_tools changes)."""

    def __init__(self, sql: ReadOnlySql) -> None:
        self.sql = sql
        self._built: tuple[Any, dict[str, tuple[ToolSpec, ...]]] = (None, {})

    def by_endpoint(self, runtime: Any) -> dict[str, tuple[ToolSpec, ...]]:
        rows = runtime.table("runtime_mcp_tools")
        built_from, specs = self._built
        if rows is built_from:
            return specs
        protocols = {r["target_id"]: r["protocol"] for r in runtime.table("runtime_mcp_target_profiles")}
        grouped: dict[str, list[ToolSpec]] = {}
        for row in rows:
            if not row.get("active") or row["target_id"] not in protocols:
                continue
            tool = _tool_of(row, ENGINES[protocols[row["target_id"]]].dialect)
            grouped.setdefault(tool.endpoint, []).append(tool_spec(tool, self.sql))
        specs = {endpoint: tuple(tools) for endpoint, tools in grouped.items()}
        self._built = (rows, specs)
        return specs


BuiltinCatalog = Callable[[], Mapping[str, Mapping[str, bool]]]
