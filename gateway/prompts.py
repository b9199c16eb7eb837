"""MCP prompts: built-in ones a handler offers (its `prompts(runtime)` hook) and admin-defined ones
in `mcp_prompts` (the `MCP PROMPTS` module: LOAD/SAVE like every admin table).

A prompt is a user message with `{argument}` placeholders. `prompts/get` fills them with the
client's values (only declared names are replaced: other braces stay as written); a required
argument missing, an unknown one, or a value over MAX_VALUE characters is INVALID_PARAMS.
An admin-defined prompt shadows a built-in one of the same name on its endpoint.

LOAD MCP PROMPTS TO RUNTIME validates every row (names, the arguments' JSON, each placeholder
declared and each declared argument used) or changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ConfigError
from gateway.store import ConfigModule
from gateway.variables import Variable

PROMPT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
ENDPOINT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
ARGUMENT_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,62})\}")
MAX_ARGUMENTS = 16
MAX_DESCRIPTION = 2000
MAX_TEMPLATE = 20_000
MAX_VALUE = 10_000  # characters of one argument value in prompts/get
PROMPTS_TABLE = "runtime_mcp_prompts"
COLUMNS = ("endpoint", "prompt_name", "title", "description", "arguments", "template", "active", "comment")


@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str = ""
    required: bool = False

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "required": self.required}


@dataclass(frozen=True)
class Prompt:
    name: str
    title: str
    description: str
    template: str  # the user message, {argument} placeholders
    arguments: tuple[PromptArgument, ...] = ()
    # Applied to each value before it is put in the text (a question template quotes values as
    # SQL literals); None: the value as given.
    quote: Callable[[str], str] | None = field(default=None, compare=False)
    origin: str = "builtin"  # builtin | admin | question_template

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": [a.describe() for a in self.arguments],
        }

    def render(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The prompts/get result; raises ValueError naming what is wrong with `values`."""
        declared = {a.name: a for a in self.arguments}
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise ValueError(
                f"prompt {self.name} has no argument(s) {', '.join(unknown)[:300]}; it takes {', '.join(declared) or 'none'}"
            )
        problems = [f"{name} must be a string" for name, value in values.items() if not isinstance(value, str)]
        problems += [
            f"{name} is over {MAX_VALUE} characters"
            for name, value in values.items()
            if isinstance(value, str) and len(value) > MAX_VALUE
        ]
        missing = [a.name for a in self.arguments if a.required and not values.get(a.name)]
        problems += [f"{name} is required" for name in missing]
        if problems:
            raise ValueError(f"prompt {self.name}: " + "; ".join(problems))

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in declared:
                return match.group(0)
            value = str(values.get(name) or "")
            return self.quote(value) if self.quote is not None and value else value

        text = PLACEHOLDER.sub(fill, self.template)
        return {"description": self.description, "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}


# -- the admin table ------------------------------------------------------------------------


def _arguments(raw: Any, where: str, errors: list[str]) -> tuple[PromptArgument, ...]:
    try:
        parsed = json.loads(raw or "[]")
    except ValueError as exc:
        errors.append(f"{where}: arguments is not JSON ({exc})")
        return ()
    if not isinstance(parsed, list) or len(parsed) > MAX_ARGUMENTS:
        errors.append(f"{where}: arguments must be a JSON list of at most {MAX_ARGUMENTS} objects")
        return ()
    found: list[PromptArgument] = []
    for item in parsed:
        if not isinstance(item, dict) or set(item) - {"name", "description", "required"}:
            errors.append(f"{where}: each argument is an object with name, description, required")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not ARGUMENT_NAME.match(name):
            errors.append(f"{where}: argument name {name!r} must match {ARGUMENT_NAME.pattern}")
            continue
        if name in {a.name for a in found}:
            errors.append(f"{where}: argument {name} declared twice")
        description, required = item.get("description", ""), item.get("required", False)
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION or not isinstance(required, bool):
            errors.append(f"{where}: argument {name}: description is a string (at most {MAX_DESCRIPTION}), required a boolean")
            continue
        found.append(PromptArgument(name, description, required))
    return tuple(found)


def compile_prompt(row: Mapping[str, Any], errors: list[str]) -> Prompt | None:
    where = f"mcp_prompts {row.get('endpoint')!r}/{row.get('prompt_name')!r}"
    before = len(errors)
    name, endpoint = row.get("prompt_name"), row.get("endpoint")
    if not isinstance(name, str) or not PROMPT_NAME.match(name):
        errors.append(f"{where}: prompt_name must match {PROMPT_NAME.pattern}")
    if not isinstance(endpoint, str) or not ENDPOINT_NAME.match(endpoint):
        errors.append(f"{where}: endpoint must match {ENDPOINT_NAME.pattern}")
    description, template = str(row.get("description") or ""), str(row.get("template") or "")
    if not description.strip() or len(description) > MAX_DESCRIPTION:
        errors.append(f"{where}: description is required, at most {MAX_DESCRIPTION} characters")
    if not template.strip() or len(template) > MAX_TEMPLATE:
        errors.append(f"{where}: template is required, at most {MAX_TEMPLATE} characters")
    if row.get("active") not in (0, 1):
        errors.append(f"{where}: active must be 0 or 1")
    arguments = _arguments(row.get("arguments"), where, errors)
    declared = {a.name for a in arguments}
    used = set(PLACEHOLDER.findall(template))
    if used - declared:
        errors.append(f"{where}: template uses undeclared argument(s) {', '.join(sorted(used - declared))}")
    if declared - used:
        errors.append(f"{where}: argument(s) {', '.join(sorted(declared - used))} never used in the template")
    if len(errors) > before:
        return None
    return Prompt(
        name=str(name), title=str(row.get("title") or name), description=description, template=template,
        arguments=arguments, origin="admin",
    )  # fmt: skip


def build_prompts(
    memory: Mapping[str, list[dict[str, Any]]], _variables: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    """ConfigModule.build for MCP PROMPTS: every row must compile, else nothing changes."""
    errors: list[str] = []
    rows = memory["mcp_prompts"]
    for row in rows:
        compile_prompt(row, errors)
    if errors:
        raise ConfigError("; ".join(errors), details=errors)
    return {PROMPTS_TABLE: [{c: row.get(c) for c in COLUMNS} for row in rows]}


PROMPTS_MODULE = ConfigModule("MCP PROMPTS", ("mcp_prompts",), build_prompts)


def admin_prompts(rows: tuple[dict[str, Any], ...], endpoint: str) -> list[Prompt]:
    """The active admin-defined prompts of one endpoint (runtime rows were validated at LOAD)."""
    errors: list[str] = []
    found = [compile_prompt(row, errors) for row in rows if row.get("active") and row.get("endpoint") == endpoint]
    return [p for p in found if p is not None]
