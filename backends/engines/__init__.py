"""The database engines a target can name, one module each; a target's `engine` is chosen
here once, from its protocol (backends.targets.Target.engine).

Adding an engine: its module in this package (one `ENGINE` object satisfying
backends.engines.base.Engine) and one line in `ENGINES` below.
"""

from __future__ import annotations

from backends.engines import duckdb, mysql, postgresql, sqlite
from backends.engines.base import Engine
from gateway.errors import GatewayError, InvalidArgument

ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        mysql.ENGINE,
        postgresql.ENGINE,
        sqlite.ENGINE,
        duckdb.ENGINE,
    )
}
PROTOCOLS = tuple(ENGINES)


def driver_errors() -> tuple[type[Exception], ...]:
    """What any engine's driver raises: for code that does not know which engine it called.
    Asked when it is needed (an `except driver_errors():` evaluates it as an exception passes):
    drivers are imported at their first use (backends/drivers.py), and only those can have raised."""
    return tuple(error for engine in ENGINES.values() for error in engine.errors)


def engine_for(protocol: str) -> Engine:
    """The engine of a protocol; INVALID_ARGUMENT naming the known ones for any other."""
    engine = ENGINES.get(protocol)
    if engine is None:
        raise InvalidArgument(f"unknown protocol {protocol!r} (expected {', '.join(PROTOCOLS)})")
    return engine


def translate(exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
    """The gateway error for a driver exception of whichever engine raised it."""
    for engine in ENGINES.values():
        if isinstance(exc, engine.errors):
            return engine.translate(exc, timeout_ms=timeout_ms)
    return GatewayError(f"the database call failed ({type(exc).__name__})")
