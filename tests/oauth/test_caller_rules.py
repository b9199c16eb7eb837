"""Query rules matching the caller (the `caller` column): a subject, or claim=value."""

from __future__ import annotations

from backends.rules import RuleSet, build_query_rules
from gateway.call import Caller

ALICE = Caller(subject="alice", claims={"groups": "analysts,admins", "tenant": "north"}, admitted="oauth")
BOB = Caller(subject="bob", claims={"groups": "interns"}, admitted="oauth")
STATIC = Caller(token_fingerprint="abc123")


def _rules(*rows: dict) -> RuleSet:
    full = [{"active": 1, "apply": 1, "flagIN": 0, "negate_match_pattern": 0, "re_modifiers": "CASELESS", **r} for r in rows]
    return RuleSet.from_rows(build_query_rules({"mcp_query_rules": full}, {})["runtime_mcp_query_rules"])


def _blocked(rules: RuleSet, caller: Caller | None) -> bool:
    outcome = rules.evaluate(
        sql="SELECT salary FROM staff", username="u", target_id="t", schemaname="s", tool_name="x", caller=caller
    )
    return outcome.error_msg is not None


def test_a_rule_for_a_group_blocks_only_its_members() -> None:
    rules = _rules({"rule_id": 1, "caller": "groups=interns", "match_pattern": "salary", "error_msg": "no"})
    assert _blocked(rules, BOB) and not _blocked(rules, ALICE) and not _blocked(rules, STATIC) and not _blocked(rules, None)


def test_a_rule_for_a_subject_and_a_list_claim_value() -> None:
    assert _blocked(_rules({"rule_id": 1, "caller": "alice", "error_msg": "no"}), ALICE)
    assert not _blocked(_rules({"rule_id": 1, "caller": "alice", "error_msg": "no"}), BOB)
    assert _blocked(_rules({"rule_id": 1, "caller": "groups=admins", "error_msg": "no"}), ALICE)
    assert not _blocked(_rules({"rule_id": 1, "caller": "tenant=south", "error_msg": "no"}), ALICE)
    assert not _blocked(
        _rules({"rule_id": 1, "caller": "sub=abc123", "error_msg": "no"}), STATIC
    )  # static tokens have no subject


def test_rules_without_caller_still_match_everyone() -> None:
    rules = _rules({"rule_id": 1, "match_pattern": "salary", "error_msg": "no"})
    assert all(_blocked(rules, c) for c in (ALICE, BOB, STATIC, None))
