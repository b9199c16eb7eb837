"""Every tool of every endpoint, called over a real server with hostile arguments: never INTERNAL, never a 5xx.

The tools are not named here: each endpoint's `tools/list` says what it serves, so a tool added
later by any branch is covered without touching this file. Two kinds of calls:

- arguments Hypothesis derives (tests/schema_strategies.py) from the tool's published inputSchema (valid by the
  schema, so the tool itself runs: a bound missing from the model shows up as INTERNAL);
- boundary values put, one at a time, at every leaf of a minimal valid argument object:
  2^63, -2^63-1, 2^64, 1e308, numbers in strings ("9223372036854775808", "NaN", "Infinity"),
  a 1 MB string, a NUL byte, deep nesting, and values of the wrong type.

The server has a MariaDB and a PostgreSQL target with one small table each, so the query tools
reach their databases. Every answer must be a 2xx/4xx with a JSON-RPC result or error whose
code is not INTERNAL (-32603). `MAX_EXAMPLES` bounds the hypothesis part (about 30 s in all).

A static check beside it: every integer and number in every input schema has both bounds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import psycopg
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from schema_strategies import from_schema
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

MAX_EXAMPLES = 10  # per tool; ~40 tools x 10 calls, plus ~40 x ~4 leaves x ~16 boundary values
ONE_MB = "x" * 1_000_000  # below mcp-max_request_bytes (1 MiB) with the envelope, so it reaches the tool


def _nested_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _nested_object(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


BOUNDARY_VALUES: tuple[Any, ...] = (
    2**63,
    -(2**63) - 1,
    2**64,
    -1,
    0,
    1e308,
    -1e308,
    "9223372036854775808",
    "NaN",
    "Infinity",
    "-inf",
    "1e309",
    ONE_MB,
    "a\x00b",
    "\U0001f600",  # outside the BMP: MariaDB's catalog (utf8mb3) cannot compare it
    "",
    _nested_list(200),
    _nested_object(200),
    None,
    True,
)


OUT_OF_INT64: tuple[Any, ...] = (2**63, -(2**63) - 1, 2**64, "9223372036854775808")
NOT_FINITE: tuple[Any, ...] = ("NaN", "Infinity", "-inf", "1e309")


# -- the schema, walked ----------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _branches(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    schema = _resolve(schema, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [b for s in schema[key] for b in _branches(s, defs)]
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _branches(schema["allOf"][0], defs)
    return [schema]


def minimal_instance(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A small value the schema accepts: required properties only, lower bounds, first choices."""
    options = [b for b in _branches(schema, defs) if b.get("type") != "null"] or _branches(schema, defs)
    branch = options[0]
    if "const" in branch:
        return branch["const"]
    if "enum" in branch:
        return branch["enum"][0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    kind = branch.get("type")
    if kind == "object":
        props = branch.get("properties", {})
        return {name: minimal_instance(props[name], defs) for name in branch.get("required", [])}
    if kind == "array":
        return [minimal_instance(branch["items"], defs)] * branch.get("minItems", 0) if "items" in branch else []
    if kind in ("integer", "number"):
        return branch.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x" * max(1, branch.get("minLength", 1))


def leaf_paths(
    schema: dict[str, Any], defs: dict[str, Any], prefix: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], set[str]]]:
    """(path, the JSON types allowed there) for every property and array item (index 0), depth first."""
    for branch in _branches(schema, defs):
        if branch.get("type") == "object":
            for name, sub in branch.get("properties", {}).items():
                yield (*prefix, name), {b.get("type", "") for b in _branches(sub, defs)}
                yield from leaf_paths(sub, defs, (*prefix, name))
        elif branch.get("type") == "array" and isinstance(branch.get("items"), dict):
            yield (*prefix, 0), {b.get("type", "") for b in _branches(branch["items"], defs)}
            yield from leaf_paths(branch["items"], defs, (*prefix, 0))


def with_value(base: Any, schema: dict[str, Any], defs: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    """`base` with `value` at `path`, building the containers on the way from the schema."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    branch = next((b for b in _branches(schema, defs) if b.get("type") == ("array" if isinstance(head, int) else "object")), {})
    if isinstance(head, int):
        return [with_value(None, branch.get("items", {}), defs, rest, value)]
    container = dict(base) if isinstance(base, dict) else minimal_instance(branch, defs)
    container[head] = with_value(container.get(head), branch.get("properties", {}).get(head, {}), defs, rest, value)
    return container


def numeric_fields(schema: dict[str, Any], defs: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for branch in _branches(schema, defs):
        if branch.get("type") in ("integer", "number"):
            yield path, branch
        for name, sub in branch.get("properties", {}).items():
            yield from numeric_fields(sub, defs, f"{path}.{name}")
        if isinstance(branch.get("items"), dict):
            yield from numeric_fields(branch["items"], defs, f"{path}[]")
        if isinstance(branch.get("additionalProperties"), dict):
            yield from numeric_fields(branch["additionalProperties"], defs, f"{path}{{}}")


# -- the server and its targets --------------------------------------------------------------------


def _admin(gateway: GatewayProcess, http: httpx.Client, statement: str) -> None:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, result


@pytest.fixture(scope="module")
def gateway(mariadb_db: dict, postgres_db: dict) -> Iterator[GatewayProcess]:
    with pymysql.connect(**mariadb_db, autocommit=True) as my, my.cursor() as cur:
        cur.execute("CREATE TABLE parts (id BIGINT PRIMARY KEY, name VARCHAR(40), weight DOUBLE)")
        cur.execute("INSERT INTO parts VALUES (1, 'bolt', 2.5), (9223372036854775807, 'max', 1e300)")
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute("CREATE TABLE parts (id bigint PRIMARY KEY, name text, weight double precision)")
        pg.execute("INSERT INTO parts VALUES (1, 'bolt', 2.5), (9223372036854775807, 'max', 1e300)")
    # A short tool deadline: a value that makes a tool slow ends as DEADLINE_EXCEEDED, soon.
    with start_gateway(variables={"mcp-timeout_ms": 5000}) as process, process.client(timeout=30.0) as http:
        if "admin" in registered_endpoints() and "query" in registered_endpoints():
            statements = [
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('my', 'root', '')",
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'trust')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
                f"VALUES ('maria', 'mysql', '127.0.0.1', {mariadb_db['port']}, '{mariadb_db['database']}', 'my')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
                f"VALUES ('pg', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg')",
                "LOAD MCP PROFILES TO RUNTIME",
                # A custom SQL tool (MCP TOOLS): its generated inputSchema is checked like every other.
                "INSERT INTO mcp_tools (tool_name, endpoint, target_id, description, statement, parameters) VALUES "
                "('parts_by_weight', 'query', 'maria', 'Parts of a name heavier than a weight, among some ids.', "
                "'SELECT id, name FROM parts WHERE name LIKE :name AND weight >= :weight AND id IN (:ids) AND :on', "
                '\'[{"name": "name", "type": "string", "max_length": 40}, {"name": "weight", "type": "number"}, '
                '{"name": "ids", "type": "array", "items": "integer"}, {"name": "on", "type": "boolean", "default": true}]\')',
                "LOAD MCP TOOLS TO RUNTIME",
            ]
            for statement in statements:
                _admin(process, http, statement)
            deadline = time.monotonic() + 10  # the worker follows the runtime within a second
            while time.monotonic() < deadline:
                listed = _post(process, http, "query", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}').json()
                custom = any(t["name"] == "parts_by_weight" for t in listed["result"]["tools"])
                if custom and len(call_tool(http, process, "query", "list_targets", {})["structuredContent"]["targets"]) == 2:
                    break
                time.sleep(0.2)
        yield process


def published_tools(gateway: GatewayProcess, http: httpx.Client) -> list[tuple[str, dict[str, Any]]]:
    """(endpoint, tool) for every tool every endpoint lists, following cursors."""
    found = []
    for endpoint in registered_endpoints():
        cursor = None
        while True:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": cursor} if cursor else {}}
            answer = _post(gateway, http, endpoint, orjson.dumps(body)).json()
            found += [(endpoint, tool) for tool in answer["result"]["tools"]]
            cursor = answer["result"].get("nextCursor")
            if not cursor:
                break
    return found


def _post(gateway: GatewayProcess, http: httpx.Client, endpoint: str, body: bytes) -> httpx.Response:
    headers = {**gateway.auth(endpoint), "Content-Type": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    return http.post(f"/mcp/{endpoint}", content=body, headers=headers)


def call_and_check(gateway: GatewayProcess, http: httpx.Client, endpoint: str, tool: str, arguments: Any) -> str:
    """Call the tool; fail on a 5xx or INTERNAL; return the outcome ("ok" or the error code)."""
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    body = json.dumps(message, allow_nan=False).encode()  # the stdlib: orjson stops at 64-bit integers
    response = _post(gateway, http, endpoint, body)
    assert response.status_code < 500, (endpoint, tool, repr(arguments)[:300], response.status_code, response.text[:500])
    answer = response.json()
    if "error" in answer:  # a protocol-level refusal (unparseable, too large ...) is fine, if not INTERNAL
        assert answer["error"]["code"] != -32603, (endpoint, tool, repr(arguments)[:300], answer, gateway.log_tail())
        return answer["error"].get("data", {}).get("code", str(answer["error"]["code"]))
    result = answer["result"]
    if not result["isError"]:
        return "ok"
    code = result["structuredContent"]["error"]["code"]
    assert code != "INTERNAL", (endpoint, tool, repr(arguments)[:300], result["structuredContent"], gateway.log_tail())
    return code


# -- the tests -------------------------------------------------------------------------------------


def test_every_numeric_argument_has_bounds(gateway: GatewayProcess) -> None:
    with gateway.client() as http:
        tools = published_tools(gateway, http)
    assert len(tools) >= 30, tools
    assert ("query", "parts_by_weight") in [(e, t["name"]) for e, t in tools], "the custom tool is covered too"
    unbounded = []
    for endpoint, tool in tools:
        schema = tool["inputSchema"]
        for path, field in numeric_fields(schema, schema.get("$defs", {})):
            lower = "minimum" in field or "exclusiveMinimum" in field
            upper = "maximum" in field or "exclusiveMaximum" in field
            if not (lower and upper):
                unbounded.append(f"/mcp/{endpoint} {tool['name']}{path}")
    assert not unbounded, "numeric arguments without both bounds:\n" + "\n".join(unbounded)


@pytest.mark.slow
def test_boundary_values_at_every_argument_of_every_tool(gateway: GatewayProcess) -> None:
    outcomes: dict[str, int] = {}
    failures: list[str] = []
    cases: list[Any] = []
    with gateway.client(timeout=30.0) as http:
        tools = published_tools(gateway, http)
        for endpoint, tool in tools:
            schema = tool["inputSchema"]
            defs = schema.get("$defs", {})
            base = minimal_instance(schema, defs)
            # A tool that takes a target runs on the default one (MariaDB) and on PostgreSQL.
            bases = [base, {**base, "target_id": "pg"}] if "target_id" in schema.get("properties", {}) else [base]
            for path, kinds in leaf_paths(schema, defs):
                # Out of range for every integer field; not a finite number for every number field.
                # (A field that also takes strings, as a metadata filter's value, takes "NaN" as text.)
                must_refuse = OUT_OF_INT64 if "integer" in kinds else NOT_FINITE if kinds & {"number"} == kinds - {"null"} else ()
                for start in bases if path != ("target_id",) else [base]:
                    cases += [(with_value(start, schema, defs, path, v), v in must_refuse) for v in BOUNDARY_VALUES]
            cases += [([1], True), ("x", True), ({**base, "no_such_argument": 1}, True)]  # not an object; an unknown key
            for arguments, refused in cases:
                try:
                    outcome = call_and_check(gateway, http, endpoint, tool["name"], arguments)
                    assert not refused or outcome == "INVALID_ARGUMENT", (endpoint, tool["name"], repr(arguments)[:200], outcome)
                except AssertionError as failure:  # collected: one run names every tool that fails
                    failures.append(str(failure)[:600])
                    continue
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            cases.clear()
    assert not failures, f"{len(failures)} calls failed:\n" + "\n".join(failures[:30])
    assert outcomes.get("INVALID_ARGUMENT", 0) > 100, outcomes  # the values were refused, not ignored


def _property_run(gateway: GatewayProcess, http: httpx.Client, endpoint: str, tool: dict[str, Any], seen: dict) -> None:
    name = tool["name"]

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same calls every run: a failure reproduces
        suppress_health_check=list(HealthCheck),
    )
    @given(arguments=from_schema(tool["inputSchema"]))
    def call(arguments: dict[str, Any]) -> None:
        seen.setdefault(f"{endpoint} {name}", set()).add(call_and_check(gateway, http, endpoint, name, arguments))

    call()


@pytest.mark.slow
def test_arguments_derived_from_each_published_schema(gateway: GatewayProcess) -> None:
    seen: dict[str, set[str]] = {}
    with gateway.client(timeout=30.0) as http:
        for endpoint, tool in published_tools(gateway, http):
            _property_run(gateway, http, endpoint, tool, seen)
    assert len(seen) >= 30, seen
