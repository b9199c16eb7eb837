"""Every registered engine is a whole `Engine` (backends/engines/base.py): the protocol's attributes
and its methods, called the way the protocol declares them. The members are read from the protocol,
so a new engine, or a member added to the protocol, fails here naming what is missing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from backends.engines import ENGINES
from backends.engines.base import Engine
from gateway.errors import Unavailable

ATTRIBUTES = sorted(Engine.__annotations__)
METHODS = sorted(name for name, member in vars(Engine).items() if callable(member) and not name.startswith("_"))


def parameters(method: Callable[..., Any]) -> list[tuple[str, Any]]:
    """(name, kind) of each parameter but self: what a caller may pass, and how."""
    return [(p.name, p.kind) for p in inspect.signature(method).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("engine", ENGINES.values(), ids=list(ENGINES))
def test_engine_has_every_member_of_the_protocol(engine: Engine) -> None:
    missing = [name for name in ATTRIBUTES + METHODS if not hasattr(engine, name)]
    assert missing == [], f"{type(engine).__name__} lacks {', '.join(missing)} (backends.engines.base.Engine)"
    for name in METHODS:
        method = getattr(engine, name)
        assert callable(method), f"{type(engine).__name__}.{name} is not a method"
        assert parameters(method) == parameters(getattr(Engine, name)), (
            f"{type(engine).__name__}.{name} takes {inspect.signature(method)}; Engine.{name} declares "
            f"{inspect.signature(getattr(Engine, name))}"
        )


@pytest.mark.parametrize("engine", [e for e in ENGINES.values() if not e.local_settings], ids=lambda e: e.name)
def test_an_engine_without_local_settings_refuses_them_instead_of_dropping_them(engine: Engine) -> None:
    # Settings carry a caller's identity to row-level security: silently running without them
    # would widen what the caller sees. The refusal comes before the connection is touched.
    with pytest.raises(Unavailable, match="no transaction-local settings"):
        engine.execute(None, "SELECT 1", timeout_ms=1000, max_rows=1, max_bytes=1000, settings={"app.user_id": "u1"})
    with pytest.raises(Unavailable, match="no transaction-local settings"), engine.settings_scope(None, {"app.user_id": "u1"}):
        pass
    with engine.settings_scope(None, {}):  # none asked: nothing to hold
        pass


def test_similarity_search_is_offered_or_refused_with_a_reason_by_every_engine() -> None:
    for engine in ENGINES.values():
        assert (engine.vector_search is None) == bool(engine.vector_search_refusal), engine.name
