"""The hot filter fields of a document's metadata, denormalised into columns so filters run in SQL.

The blueprint's filters name Stack Overflow-style metadata keys (Score, PostTypeId, Tags,
CreationDate); these spellings and a few common aliases are recognised case-insensitively, so a
doc_map that renames them still filters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_SCORE_KEYS = ("score",)
_POST_TYPE_KEYS = ("posttypeid", "post_type_id", "post_type")
_CREATED_KEYS = ("creationdate", "created_at", "created", "creation_date")
_TAG_KEYS = ("tags",)


def _pick(lowered: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if lowered.get(key) not in (None, ""):
            return lowered[key]
    return None


def _number(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def normalise_timestamp(value: Any) -> str | None:
    """ISO 8601 text, a datetime or epoch seconds -> 'YYYY-MM-DDTHH:MM:SSZ' (UTC), else None.

    One canonical text form makes created_after/created_before plain string comparisons in SQL.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        moment = datetime.fromtimestamp(value, tz=UTC)
    elif isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    if type(moment) is datetime and moment.year >= 1000:  # %Y does not zero-pad earlier years
        return moment.isoformat(timespec="seconds") + "Z"  # one per document: ~5x cheaper than strftime
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_tags(value: Any) -> list[str]:
    """'<mysql><json>' (Stack Overflow), '|a|b|', 'a,b', 'a b' or a list -> lower-cased tags."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        text = str(value)
        if "<" in text:
            items = re.findall(r"<([^<>]+)>", text)
        elif "|" in text:
            items = text.split("|")
        else:
            items = re.split(r"[,\s]+", text)
    return sorted({item.strip().lower() for item in items if item.strip()})


@dataclass(frozen=True)
class HotFields:
    doc_score: float | None
    post_type_id: int | None
    created_at: str | None
    tags: list[str]

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> HotFields:
        lowered = {str(k).lower(): v for k, v in metadata.items()}  # once, not once per field
        post_type = _number(_pick(lowered, _POST_TYPE_KEYS))
        return cls(
            doc_score=_number(_pick(lowered, _SCORE_KEYS)),
            post_type_id=int(post_type) if post_type is not None else None,
            created_at=normalise_timestamp(_pick(lowered, _CREATED_KEYS)),
            tags=parse_tags(_pick(lowered, _TAG_KEYS)),
        )
