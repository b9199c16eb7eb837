"""Recommendations from measured evidence, each with its evidence and the exact change to make.

Pure: the handler gathers the figures (tool outcomes and truncation from gateway.evidence, digest
statistics, plans of slow digests, privilege warnings of targets) and these functions judge them.
Thresholds keep advice to what the figures support: a tool needs enough calls before its error
or truncation ratio means anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIN_CALLS = 20
ERROR_RATIO = 0.10
TRUNCATED_RATIO = 0.20
CACHE_MIN_CALLS = 50
CACHE_MIN_MEAN_US = 1_000
SLOW_MEAN_US = 50_000

# What to change when a tool fails with a code, as far as an admin can act on it.
_ERROR_ACTIONS = {
    "DEADLINE_EXCEEDED": "raise the target's timeout_ms (UPDATE mcp_target_profiles SET timeout_ms = ... ; LOAD MCP PROFILES TO RUNTIME) "
    "or mcp-timeout_ms, or make the statements cheaper",
    "LIMIT_EXCEEDED": "the callers ask for more than the caps allow: raise the cap variable named in the errors, or teach the agent the limits",
    "UNAVAILABLE": "a backend or model is failing: check get_health and show_connections on /mcp/stats",
    "INVALID_ARGUMENT": "the callers send arguments the tool refuses: fix the agent's prompts or tool use",
    "NOT_FOUND": "the callers name things that do not exist: check list_targets / list_tables output against their calls",
}
_CAP_ACTIONS = {
    "query": "UPDATE mcp_target_profiles SET max_rows = <larger> WHERE target_id = ...; LOAD MCP PROFILES TO RUNTIME "
    "(or SET mcp-query_max_response_bytes = <larger>; LOAD MCP VARIABLES TO RUNTIME)",
    "rag": "SET rag-response_max_bytes = <larger>; LOAD MCP VARIABLES TO RUNTIME (or ask for fewer results per call)",
}


@dataclass
class Recommendation:
    kind: str
    severity: str  # info | warning | critical
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    action: str = ""
    target_id: str = ""


def tool_outcomes(rows: list[dict[str, Any]]) -> list[Recommendation]:
    """rows: {endpoint, tool, outcome, calls, truncated} summed over the period."""
    per_tool: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        agg = per_tool.setdefault((row["endpoint"], row["tool"]), {"calls": 0, "truncated": 0, "codes": {}})
        agg["calls"] += row["calls"]
        agg["truncated"] += row.get("truncated", 0)
        if row["outcome"] != "ok":
            agg["codes"][row["outcome"]] = agg["codes"].get(row["outcome"], 0) + row["calls"]
    out = []
    for (endpoint, tool), agg in sorted(per_tool.items()):
        calls, errors = agg["calls"], sum(agg["codes"].values())
        if calls < MIN_CALLS:
            continue
        if errors / calls >= ERROR_RATIO:
            top = sorted(agg["codes"].items(), key=lambda kv: -kv[1])[:3]
            out.append(
                Recommendation(
                    kind="tool_errors",
                    severity="critical" if errors / calls >= 0.5 else "warning",
                    title=f"/mcp/{endpoint} {tool} fails {errors / calls:.0%} of its calls (top: {top[0][0]})",
                    evidence={"endpoint": endpoint, "tool": tool, "calls": calls, "errors": errors, "top_error_codes": dict(top)},
                    action=_ERROR_ACTIONS.get(top[0][0], "read the gateway log for these failures"),
                )
            )
        if agg["truncated"] / calls >= TRUNCATED_RATIO:
            out.append(
                Recommendation(
                    kind="caps_hit",
                    severity="info",
                    title=f"/mcp/{endpoint} {tool} cuts {agg['truncated'] / calls:.0%} of its answers (truncated)",
                    evidence={"endpoint": endpoint, "tool": tool, "calls": calls, "truncated": agg["truncated"]},
                    action=_CAP_ACTIONS.get(endpoint, "raise the cap that cuts these answers"),
                )
            )
    return out


def cache_candidates(digests: list[dict[str, Any]], changes: dict[str, int]) -> list[Recommendation]:
    """digests: stats_mcp_query_digest rows (count_star, sum_time in us, target_id, digest, digest_text);
    changes: digest -> how often its result changed over the evidence period (absent: not observed)."""
    out = []
    for d in digests:
        if d["count_star"] < CACHE_MIN_CALLS or d["digest"] not in changes or changes[d["digest"]] > 0:
            continue
        mean_us = d["sum_time"] / d["count_star"]
        if mean_us < CACHE_MIN_MEAN_US:
            continue
        out.append(
            Recommendation(
                kind="cache_candidate",
                severity="info",
                title=f"digest {d['digest']} ran {d['count_star']} times with the same result ({mean_us / 1000:.1f} ms each)",
                evidence={
                    "digest": d["digest"],
                    "digest_text": d["digest_text"],
                    "calls": d["count_star"],
                    "mean_us": round(mean_us),
                },
                action=(
                    "INSERT INTO mcp_query_rules (rule_id, active, target_id, match_pattern, cache_ttl, apply) "
                    f"VALUES (<id>, 1, '{d['target_id']}', '<pattern matching this statement>', 60000, 1); LOAD MCP QUERY RULES TO RUNTIME"
                ),
                target_id=d["target_id"],
            )
        )
    return out


def missing_index(digest: dict[str, Any], scans: list[dict[str, Any]]) -> Recommendation:
    """scans: [{table, rows_estimate, index_statement}] for the digest's full scans with a suggestion."""
    mean_us = digest["sum_time"] / max(1, digest["count_star"])
    statements = [s["index_statement"] for s in scans]
    return Recommendation(
        kind="missing_index",
        severity="warning" if mean_us >= SLOW_MEAN_US else "info",
        title=f"digest {digest['digest']} scans {', '.join(s['table'] for s in scans)} in full ({mean_us / 1000:.1f} ms each)",
        evidence={
            "digest": digest["digest"],
            "digest_text": digest["digest_text"],
            "calls": digest["count_star"],
            "mean_us": round(mean_us),
            "full_scans": [{"table": s["table"], "rows_estimate": s["rows_estimate"]} for s in scans],
        },
        action="; ".join(statements) + " (on the database, by its owner: the gateway never writes)",
        target_id=digest["target_id"],
    )


def privilege_warnings(targets: list[dict[str, Any]]) -> list[Recommendation]:
    """targets: runtime target rows with their privilege warnings."""
    out = []
    for t in targets:
        warnings = t.get("privilege_warnings") or []
        if warnings:
            out.append(
                Recommendation(
                    kind="privileged_target",
                    severity="warning",
                    title=f"target {t['target_id']} connects with an account that can do more than read",
                    evidence={"target_id": t["target_id"], "warnings": list(warnings)},
                    action="give the target's auth profile a read-only account (see README: adding a target), "
                    "or SET mcp-query_refuse_privileged_targets = true; LOAD MCP VARIABLES TO RUNTIME",
                    target_id=t["target_id"],
                )
            )
    return out
