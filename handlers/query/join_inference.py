"""Which column probably references which key: the name and type evidence, and the score.

A candidate needs a name signal: a child column named after the parent table and its key
(`customer_id`, `customerid`, `customers_id` -> customers.id), a role prefix before that
(`billing_address_id`), an abbreviation of the table name (`cust_id`), or the key's own name
when that name is specific (`customer_id` -> customers.customer_id, never plain `id`). Two
columns that only share a type are never proposed. The parent column must be a key (primary
or unique), or, in a table that declares none, a column named like one.

find_reference_candidates, asked about one column, also measures it against every key-like column
of a compatible type when no name tells (`orders.buyer_ref` -> customers.id): such a candidate
(signal name:none) is proposed only when its sampled values are contained in the key.

confidence = min(0.95, base * (0.4 + 0.6 r) + 0.15 r) where base = name + type + key scores
and r the share of sampled child values found in the parent column (value containment); an
unmeasured r scores base * 0.85. Declared foreign keys are 1.0; only they reach it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.engines.profiling import Profiling

NAME_SCORES = {
    "table_and_key_name": 0.6,  # customer_id -> customers.id
    "key_name": 0.55,  # customer_id -> customers.customer_id
    "role_prefix": 0.5,  # billing_address_id -> addresses.id
    "abbreviation": 0.45,  # cust_id -> customers.id
}
TYPE_SAME, TYPE_COMPATIBLE = 0.1, 0.05
KEY_DECLARED, KEY_ASSUMED = 0.1, 0.0
INFERRED_MAX = 0.95
UNMEASURED_FACTOR = 0.85
GENERIC_NAMES = frozenset({"id", "key", "code", "name", "type", "value", "uuid", "pk"})
COMPATIBLE = {frozenset({"integer", "decimal"}), frozenset({"string", "uuid"})}


def singular(word: str) -> str:
    w = word.lower()
    for plural, single in (("ies", "y"), ("sses", "ss"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"), ("uses", "us")):
        if w.endswith(plural) and len(w) > len(plural) + 1:
            return w[: -len(plural)] + single
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 2:
        return w[:-1]
    return w


def table_stems(table: str) -> set[str]:
    t = table.lower()
    for prefix in ("tbl_", "tb_", "t_"):
        if t.startswith(prefix) and len(t) > len(prefix) + 2:
            t = t[len(prefix) :]
    return {t, singular(t)}


def _abbreviates(short: str, stem: str) -> bool:
    """cust -> customer, prod -> product; also consonant skeletons (cstmr -> customer)."""
    if len(short) < 3 or short == stem:
        return False
    if stem.startswith(short):
        return True
    it = iter(stem)
    return short[0] == stem[0] and all(ch in it for ch in short)


def name_signal(child_column: str, parent_table: str, parent_column: str) -> str | None:
    c, p = child_column.lower(), parent_column.lower()
    stems = table_stems(parent_table)
    if any(c in (f"{s}_{p}", f"{s}{p}") for s in stems):
        return "table_and_key_name"
    if c == p and p not in GENERIC_NAMES and any(s in p for s in stems):
        return "key_name"
    suffix = f"_{p}"
    if c.endswith(suffix):
        head = c[: -len(suffix)]
        if any(head.endswith(f"_{s}") for s in stems):
            return "role_prefix"
        if any(_abbreviates(head, s) and not s.startswith(f"{head}_") for s in stems):
            return "abbreviation"  # but order_id is not an abbreviation of order_items: it names orders
    return None


def type_score(child_type: str, parent_type: str, facts: Profiling) -> tuple[float, bool]:
    a, b = facts.type_family(child_type), facts.type_family(parent_type)
    if a == b and a not in ("binary", "json", "other"):
        return TYPE_SAME, True
    if frozenset({a, b}) in COMPATIBLE:
        return TYPE_COMPATIBLE, True
    if facts.untyped_columns and "other" in (a, b):  # a column declared without a type (SQLite)
        return TYPE_COMPATIBLE, True
    return 0.0, False


def confidence(base: float, overlap: float | None) -> float:
    if overlap is None:
        return round(min(INFERRED_MAX, base * UNMEASURED_FACTOR), 3)
    return round(min(INFERRED_MAX, base * (0.4 + 0.6 * overlap) + 0.15 * overlap), 3)


@dataclass
class Candidate:
    from_schema: str
    from_table: str
    from_columns: list[str]
    to_schema: str
    to_table: str
    to_columns: list[str]
    kind: str  # declared | inferred | agent
    confidence: float
    evidence: dict[str, Any] = field(default_factory=dict)
    base: float = 0.0  # inferred: the score before containment

    def key(self) -> tuple[Any, ...]:
        return (
            self.from_schema,
            self.from_table,
            tuple(self.from_columns),
            self.to_schema,
            self.to_table,
            tuple(self.to_columns),
        )


def keys_of(table: dict[str, Any]) -> tuple[set[str], bool]:
    """Single-column keys of a harvested table, and whether any key is declared at all."""
    single = {k[0] for k in [table["primary_key"], *table["unique"]] if len(k) == 1}
    declared = bool(table["primary_key"] or table["unique"])
    return single, declared


def declared_candidates(schema: str, tables: dict[str, Any], involved: set[str]) -> list[Candidate]:
    out = []
    for table in tables.values():
        for fk in table["foreign_keys"]:
            ref_schema = fk["referenced_schema"] or schema
            if table["name"] not in involved and not (ref_schema == schema and fk["referenced_table"] in involved):
                continue
            out.append(
                Candidate(
                    schema, table["name"], list(fk["columns"]), ref_schema, fk["referenced_table"], list(fk["referenced_columns"]),
                    "declared", 1.0, {"signals": ["declared_fk"], "constraint": fk["name"]},
                )
            )  # fmt: skip
    return out


def inferred_candidates(
    schema: str, child: dict[str, Any], parents: list[dict[str, Any]], facts: Profiling, *, only_column: str | None = None
) -> list[Candidate]:
    """Name + type + key evidence for child's columns against each parent's keys (no data read)."""
    out = []
    for column in child["columns"]:
        if only_column is not None and column["name"] != only_column:
            continue
        for parent in parents:
            keys, declared = keys_of(parent)
            for target in parent["columns"]:
                if parent["name"] == child["name"] and target["name"] == column["name"]:
                    continue
                is_key = target["name"] in keys
                if not is_key and (
                    declared or target["name"].lower() not in ("id", *(f"{s}_id" for s in table_stems(parent["name"])))
                ):
                    continue
                signal = name_signal(column["name"], parent["name"], target["name"])
                if signal is None:
                    continue
                t_score, compatible = type_score(column["type"] or "", target["type"] or "", facts)
                if not compatible:
                    continue
                base = NAME_SCORES[signal] + t_score + (KEY_DECLARED if is_key else KEY_ASSUMED)
                evidence = {
                    "signals": [
                        f"name:{signal}",
                        "type_compatible",
                        "references_key" if is_key else "references_key_like_column",
                    ],
                    "from_type": column["type"],
                    "to_type": target["type"],
                }
                out.append(
                    Candidate(
                        schema, child["name"], [column["name"]], schema, parent["name"], [target["name"]], "inferred",
                        confidence(base, None), evidence, base,
                    )
                )  # fmt: skip
    return out


VALUE_ONLY_BASE = 0.35  # no name signal: the evidence is the values (find_reference_candidates)
VALUE_ONLY_MIN_OVERLAP = 0.9  # what a value-only candidate must show to be proposed
KEY_LIKE_NAMES = frozenset({"id", "uuid", "key", "code", "pk"})


def key_like_columns(parent: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The columns of a table another column could reference, with whether each is a declared
    key: its single-column keys, or, in a table that declares none, columns named like one
    (id, uuid, code ..., <table>_id, <table>id, <table>_code)."""
    keys, declared = keys_of(parent)
    if declared:
        return [(c, True) for c in parent["columns"] if c["name"] in keys]
    stems = table_stems(parent["name"])
    named = KEY_LIKE_NAMES | {f"{s}{sep}{k}" for s in stems for sep in ("_", "") for k in ("id", "code", "key", "uuid")}
    return [(c, False) for c in parent["columns"] if c["name"].lower() in named]


def value_candidates(
    schema: str, child: dict[str, Any], column_name: str, parents: list[dict[str, Any]], facts: Profiling, *, skip: set[Any]
) -> list[Candidate]:
    """When names do not tell: one column against every key-like column of a compatible type in
    the schema, to be measured by value containment (apply_overlap) and kept only if contained
    (keep_value_candidate). Those of the same type family come first (the probe budget is finite)."""
    column = next(c for c in child["columns"] if c["name"] == column_name)
    out = []
    for parent in parents:
        for target, is_key in key_like_columns(parent):
            if parent["name"] == child["name"] and target["name"] == column_name:
                continue
            t_score, compatible = type_score(column["type"] or "", target["type"] or "", facts)
            if not compatible:
                continue
            candidate = Candidate(
                schema, child["name"], [column_name], schema, parent["name"], [target["name"]], "inferred", 0.0,
                {"signals": ["name:none", "type_compatible", "references_key" if is_key else "references_key_like_column"],
                 "from_type": column["type"], "to_type": target["type"]},
                VALUE_ONLY_BASE + t_score + (KEY_DECLARED if is_key else KEY_ASSUMED),
            )  # fmt: skip
            if candidate.key() not in skip:
                candidate.confidence = confidence(candidate.base, None)
                out.append(candidate)
    return sorted(out, key=lambda c: -c.base)


def keep_value_candidate(candidate: Candidate) -> bool:
    """A value-only candidate stays only when its values were measured and found in the key."""
    overlap = candidate.evidence.get("overlap_ratio")
    return overlap is not None and overlap >= VALUE_ONLY_MIN_OVERLAP


def strongest_per_column(candidates: list[Candidate]) -> list[Candidate]:
    """Per child column, only the candidates of its strongest name signal: order_items.order_id
    names orders; that it also abbreviates order_items is not evidence."""
    rank = {f"name:{name}": i for i, name in enumerate(NAME_SCORES)}
    best: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for c in candidates:
        key = (c.from_schema, c.from_table, tuple(c.from_columns))
        best[key] = min(best.get(key, 99), rank.get(c.evidence["signals"][0], 99))
    return [
        c
        for c in candidates
        if rank.get(c.evidence["signals"][0], 99) == best[(c.from_schema, c.from_table, tuple(c.from_columns))]
    ]


def apply_overlap(candidate: Candidate, values_checked: int, found: int) -> None:
    """Fold a containment measurement into an inferred candidate."""
    if values_checked == 0:
        candidate.evidence["overlap_ratio"] = None
        candidate.evidence["values_checked"] = 0
        candidate.evidence["signals"].append("no_values_to_check")
        return
    overlap = found / values_checked
    candidate.evidence.update(overlap_ratio=round(overlap, 4), values_checked=values_checked, values_found=found)
    candidate.evidence["signals"].append(
        "values_contained" if overlap >= 0.9 else "values_partly_contained" if overlap >= 0.5 else "values_not_contained"
    )
    candidate.confidence = confidence(candidate.base, overlap)
