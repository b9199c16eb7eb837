"""The `MCP PROFILES` config module: LOAD MCP PROFILES TO RUNTIME validates the profiles
(backends/targets.py) and checks each effective target's account for write or file privileges
(backends/privileges.py), recording what it finds as `privilege_warnings`.

It sits above both so that targets (the data) never import the code that connects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from backends.privileges import check_target
from backends.targets import _target, _text, _validate_auth, _validate_target, resolve_secret, skip_reason
from gateway.errors import ConfigError
from gateway.store import ConfigModule
from gateway.variables import Variable


def validate_profiles(
    memory: Mapping[str, list[dict[str, Any]]], _variables: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    """ConfigModule.validate for MCP PROFILES: the row checks of a LOAD, without connecting.
    Returns normalised copies of the rows (flags as 0/1); raises ConfigError naming each field."""
    auth_rows = [dict(row) for row in memory["mcp_auth_profiles"]]  # copies: flags are normalised in them
    target_rows = [dict(row) for row in memory["mcp_target_profiles"]]
    errors: list[str] = []
    for row in auth_rows:
        _validate_auth(row, errors)
    for row in target_rows:
        _validate_target(row, errors)
    identity_rows = [dict(row) for row in memory.get("mcp_identity_profiles", [])]
    auth_ids = {_text(row, "auth_profile_id") for row in auth_rows}
    target_ids = {_text(row, "target_id") for row in target_rows}
    for row in identity_rows:
        where = f"mcp_identity_profiles rule {row.get('rule_id')!r}"
        if _text(row, "target_id") not in target_ids:
            errors.append(f"{where}: target_id {row.get('target_id')!r} is not in mcp_target_profiles")
        if _text(row, "auth_profile_id") not in auth_ids:
            errors.append(f"{where}: auth_profile_id {row.get('auth_profile_id')!r} is not in mcp_auth_profiles")
        if not _text(row, "caller").strip():
            errors.append(f"{where}: caller must name a subject or claim=value")
    if errors:
        raise ConfigError("; ".join(errors), details=errors)
    return {"mcp_auth_profiles": auth_rows, "mcp_target_profiles": target_rows, "mcp_identity_profiles": identity_rows}


def build_profiles(
    memory: Mapping[str, list[dict[str, Any]]], variables: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    """ConfigModule.build for MCP PROFILES: validate everything, then derive runtime rows."""
    valid = validate_profiles(memory, variables)
    auth_rows, target_rows = valid["mcp_auth_profiles"], valid["mcp_target_profiles"]
    auth_by_id = {row["auth_profile_id"]: row for row in auth_rows}
    runtime_targets = []
    for row in target_rows:
        reason = skip_reason(row, auth_by_id)
        warnings: list[str] = []
        if not reason:
            auth = auth_by_id.get(_text(row, "auth_profile_id"), {})
            warnings = check_target(_target(row, auth, resolve_secret(_text(auth, "db_password"))))
        runtime_targets.append(
            {**row, "effective": 0 if reason else 1, "skip_reason": reason, "privilege_warnings": json.dumps(warnings)}
        )
    return {
        "runtime_mcp_auth_profiles": auth_rows,
        "runtime_mcp_target_profiles": runtime_targets,
        "runtime_mcp_identity_profiles": valid["mcp_identity_profiles"],
    }


def profile_warnings(runtime: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """What LOAD MCP PROFILES TO RUNTIME tells the admin: each target's privilege warnings, and
    each target that loaded but does not serve, with why."""
    warnings = []
    for row in runtime["runtime_mcp_target_profiles"]:
        target_id = row["target_id"]
        if row["skip_reason"]:
            warnings.append(f"target {target_id}: not served: {row['skip_reason']}")
        warnings += [f"target {target_id}: {warning}" for warning in json.loads(row["privilege_warnings"] or "[]")]
    return warnings


# db_password reads as NULL through admin.sql, a literal password and a reference alike.
PROFILES_MODULE = ConfigModule(
    "MCP PROFILES",
    ("mcp_auth_profiles", "mcp_target_profiles", "mcp_identity_profiles"),
    build_profiles,
    secret_columns=("db_password",),
    warnings=profile_warnings,
    validate=validate_profiles,
)
