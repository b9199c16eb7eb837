"""How a /mcp/rag tool fits its answer into its caps: rag-response_max_bytes (results beyond it
are cut and `truncated` is set) and rag-k_max for the ids a rag.get_* call looks up. A search's
own caps and deadline are the engine's (backends/retrieval/call.py `Call`).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import NotFound

MAX_MISSING_LISTED = 100  # ids a NOT_FOUND lists in details.missing
ENVELOPE_BYTES = 512  # room for `truncated`, `stats` and the keys around a tool's result list


def json_size(value: Any) -> int:
    return len(orjson.dumps(value))


def fit_to_bytes(
    items: list[dict[str, Any]], budget_bytes: int, *, text_field: str | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The longest prefix of `items` whose JSON fits `budget_bytes`; with `text_field`, the first
    item that does not fit is kept with that field cut (so one huge document still returns)."""
    kept: list[dict[str, Any]] = []
    used = 2  # the list's brackets
    for item in items:
        size = json_size(item) + 1  # and its comma
        if used + size <= budget_bytes:
            kept.append(item)
            used += size
            continue
        if text_field and isinstance(item.get(text_field), str):
            room = budget_bytes - used - (size - json_size(item[text_field])) - 16
            if room > 0:
                text = item[text_field].encode("utf-8")[:room].decode("utf-8", errors="ignore")
                # JSON escaping can make the cut text longer than `room`; shrink until it fits.
                while text and used + json_size({**item, text_field: text}) + 1 > budget_bytes:
                    text = text[: int(len(text) * 0.9)]
                if text:
                    kept.append({**item, text_field: text, f"{text_field}_truncated": True})
        return kept, True
    return kept, False


def ids_not_found(kind: str, sent: list[str], distinct: list[str], looked_up: list[str]) -> NotFound:
    """NOT_FOUND for a rag.get_* call none of whose ids is indexed, saying what was sent and
    what rag-k_max left out (before, 1,000 unknown ids read as "none of the 50 ... is in the index")."""
    left_out = len(distinct) - len(looked_up)
    message = f"none of the {len(looked_up)} {kind} looked up is in the index"
    if left_out:
        message += (
            f" ({len(sent)} sent, {len(distinct)} distinct; rag-k_max looks up the first {len(looked_up)}, "
            f"the other {left_out} were not looked up)"
        )
    elif len(sent) != len(distinct):
        message += f" ({len(sent)} sent, {len(distinct)} distinct)"
    details = {
        "missing": looked_up[:MAX_MISSING_LISTED],  # the field a partial answer lists them in
        "sent": len(sent),
        "distinct": len(distinct),
        "looked_up": len(looked_up),
        "not_looked_up": left_out,
        "cap": "rag-k_max",
    }
    return NotFound(message, details=details)
