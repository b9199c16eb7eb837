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
