"""Connection pools per query target: the one place the gateway opens backend connections.

One BoundedPool per target, of its engine's connections (backends/engines: opened read-only
with the target's statement timeout, pinged, checked for a broken link or an open transaction
by the engine).

Health: a connection idle longer than mcp-query_pool_idle_check_ms, or returned before the
pool last saw a connection die, is pinged before it is handed out; a dead one is discarded
and replaced, which is how pools recover after a backend restart. `connection()` rolls back
when a transaction may be open (the engine's needs_rollback: a free check, so an autocommit
MariaDB session costs no ROLLBACK round trip) and returns the connection; one that broke
during the call is discarded and the call gets UNAVAILABLE. Pools are created on first use
and rebuilt only for targets whose definition changed (`update`).

Recovery: a connection is opened by the call that needs one, when it needs it, so a target
answers as soon as its server accepts connections again, whatever the outage length. (psycopg_pool
reconnected in the background with a doubling backoff, 1, 2, 4, 8 s ...: a PostgreSQL target
stayed dark seconds after its server was back, tests/test_backend_recovery.py.) While the
server is down each call fails fast with UNAVAILABLE: a refused connection costs one round trip,
an unreachable host at most the pool timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from backends.targets import Target, identity_variants, targets_from_runtime
from gateway.call import Caller
from gateway.errors import GatewayError, NotFound, Unavailable
from gateway.loop_io import WouldBlock
from gateway.runtime import Runtime

log = logging.getLogger("mcp_gateway.pools")

__all__ = ["TargetPools", "BoundedPool"]


class PoolTimeout(Exception):
    pass


class PoolClosed(Exception):
    pass


class Health:
    """Counters and the 'suspect before' mark shared by both pool kinds of one target."""

    def __init__(self, idle_check_s: float) -> None:
        self.idle_check_s = idle_check_s
        self.suspect_before = 0.0  # monotonic: connections returned before this get pinged
        self.errors = 0
        self.reconnects = 0
        self.timeouts = 0  # calls that gave up waiting for a connection (mcp_gateway_pool_timeouts_total)
        self.lock = threading.Lock()

    def needs_ping(self, returned_at: float) -> bool:
        return returned_at <= self.suspect_before or time.monotonic() - returned_at >= self.idle_check_s

    def connection_died(self) -> None:
        with self.lock:
            self.reconnects += 1
            self.suspect_before = time.monotonic()

    def error(self) -> None:
        with self.lock:
            self.errors += 1

    def timed_out(self) -> None:
        with self.lock:
            self.errors += 1
            self.timeouts += 1


class BoundedPool:
    """At most max_size connections; LIFO reuse; waits up to timeout_s for one."""

    def __init__(
        self, connect: Callable[[], Any], ping: Callable[[Any], None], health: Health, *, max_size: int, timeout_s: float
    ) -> None:
        self._connect, self._ping, self.health = connect, ping, health
        self.max_size, self.timeout_s = max_size, timeout_s
        self._idle: deque[tuple[Any, float]] = deque()
        self._size = 0
        self._waiting = 0
        self._closed = False
        self._cond = threading.Condition()

    def getconn(self, *, block: bool = True) -> Any:
        """A connection: an idle one (pinged if it idled too long), else a new one, waiting up to
        timeout_s for a free slot. With block=False only an idle one that needs no ping, else
        WouldBlock (a call on the event loop then takes a thread: gateway/loop_io.py)."""
        if not block:
            with self._cond:
                if self._closed:
                    raise PoolClosed()
                if not self._idle or self.health.needs_ping(self._idle[-1][1]):
                    raise WouldBlock()
                return self._idle.pop()[0]
        deadline = time.monotonic() + self.timeout_s
        while True:
            conn, returned_at = self._reserve(deadline)
            if conn is None:
                try:
                    return self._connect()
                except BaseException:
                    self._release_slot()
                    raise
            if not self.health.needs_ping(returned_at):
                return conn
            try:
                self._ping(conn)
                return conn
            except Exception:
                log.info("discarding a dead pooled connection")
                self.health.connection_died()
                self.discard(conn)

    def _reserve(self, deadline: float) -> tuple[Any, float]:
        """An idle connection, or (None, 0) meaning a slot was reserved for a new one."""
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    if self._closed:
                        raise PoolClosed()
                    if self._idle:
                        return self._idle.pop()
                    if self._size < self.max_size:
                        self._size += 1
                        return None, 0.0
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise PoolTimeout()
                    self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    def _release_slot(self) -> None:
        with self._cond:
            self._size -= 1
            self._cond.notify()

    def putconn(self, conn: Any) -> None:
        with self._cond:
            if not self._closed:
                self._idle.append((conn, time.monotonic()))
                self._cond.notify()
                return
        self.discard(conn)

    def discard(self, conn: Any) -> None:
        _quiet_close(conn)
        self._release_slot()

    def stats(self) -> dict[str, int]:
        with self._cond:
            idle = len(self._idle)
            return {"size": self._size, "in_use": self._size - idle, "idle": idle, "waiting": self._waiting}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = list(self._idle), deque()
            self._size -= len(idle)
            self._cond.notify_all()
        for conn, _ in idle:
            _quiet_close(conn)


def _quiet_close(conn: Any) -> None:
    with contextlib.suppress(Exception):  # closing a dead connection may fail; it is gone either way
        conn.close()


# -- the pools of all targets ---------------------------------------------------------------


class _TargetPool:
    """One target's pool, whatever its kind, with a uniform get/put/stats/close."""

    def __init__(self, target: Target, *, max_size: int, timeout_s: float, idle_check_s: float, io_timeout_s: float) -> None:
        self.target = target
        self.health = Health(idle_check_s)
        self.max_size = max_size
        self.engine = engine = target.engine
        connect: Callable[[], Any] = lambda: engine.connect(target, timeout_s=timeout_s, io_timeout_s=io_timeout_s)  # noqa: E731
        ping: Callable[[Any], None] = lambda conn: engine.ping(conn, target, timeout_s=timeout_s)  # noqa: E731
        self.pool = BoundedPool(connect, ping, self.health, max_size=max_size, timeout_s=timeout_s)

    def getconn(self, *, block: bool = True) -> Any:
        conn = self.pool.getconn(block=block)
        self.engine.borrowed(conn, self.target)
        return conn

    def putconn(self, conn: Any) -> None:
        """Roll back when a transaction may be open, and return. A connection that cannot roll
        back is discarded as dead; one still outside autocommit after it (a borrower turned
        autocommit off) is discarded too, so the next borrower never inherits that."""
        engine = self.engine
        broken = engine.broken(conn)
        keep = not broken
        if keep:
            try:
                engine.returned(conn)
                if engine.needs_rollback(conn):
                    conn.rollback()
                    keep = not engine.needs_rollback(conn)
            except Exception:  # noqa: BLE001 - it died while we were using it
                broken, keep = True, False
        if broken:
            self.health.connection_died()
        if keep:
            self.pool.putconn(conn)
        else:
            self.pool.discard(conn)

    def stats(self) -> dict[str, Any]:
        return {
            "target_id": self.target.target_id,
            "protocol": self.target.protocol,
            **self.pool.stats(),
            "max_size": self.max_size,
            "errors": self.health.errors,
            "reconnects": self.health.reconnects,
            "timeouts": self.health.timeouts,
        }

    def close(self) -> None:
        self.pool.close()


def _pool_settings(runtime: Runtime) -> tuple[int, float, float, float]:
    def var(name: str, default: int) -> int:
        return int(runtime.variables.get(name, default))

    timeout_s = var("mcp-query_pool_timeout_ms", 2000) / 1000
    io_timeout_s = var("mcp-timeout_ms", 30000) / 1000 + 5  # socket guard above the call deadline
    return var("mcp-query_pool_max", 8), timeout_s, var("mcp-query_pool_idle_check_ms", 5000) / 1000, io_timeout_s


class TargetPools:
    """All targets of the current runtime and their pools; shared as services.targets (built by gateway.assembly)."""

    def __init__(self, runtime: Runtime) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, Target] = {}
        self._skipped: dict[str, str] = {}
        self._pools: dict[str, _TargetPool] = {}
        # per-user accounts (mcp_identity_profiles): rules, and targets keyed "<target_id>\x00<auth_profile_id>"
        self._identity_rules: list[tuple[str, str, str]] = []
        self._variants: dict[str, Target] = {}
        self._settings: tuple[int, float, float, float] = (0, 0.0, 0.0, 0.0)
        self._default = ""
        self._loop_gates: dict[str, asyncio.Semaphore] = {}
        self.update(runtime)

    def update(self, runtime: Runtime) -> None:
        """Adopt a new runtime; close pools only of targets that changed or went away."""
        targets, skipped = targets_from_runtime(runtime)
        rules, variants = identity_variants(runtime, targets)
        keyed = {f"{tid}\x00{auth}": target for (tid, auth), target in variants.items()}
        settings = _pool_settings(runtime)
        with self._lock:
            current = {**targets, **keyed}
            stale = [tid for tid, pool in self._pools.items() if settings != self._settings or current.get(tid) != pool.target]
            old = [self._pools.pop(tid) for tid in stale]
            self._targets, self._skipped, self._settings = targets, skipped, settings
            self._identity_rules, self._variants = rules, keyed
            self._default = str(runtime.variables.get("mcp-query_default_target", "") or "")
            if old:  # new pools, new sizes: the calls queued on the old gates still get their turn
                self._loop_gates = {}
        for pool in old:
            pool.close()

    def targets(self) -> list[Target]:
        with self._lock:
            return [self._targets[tid] for tid in sorted(self._targets)]

    def default_target_id(self) -> str | None:
        """The configured default, else the first effective target by target_id."""
        with self._lock:
            if self._default:
                return self._default
            return min(self._targets) if self._targets else None

    def resolve(self, target_id: str | None) -> Target:
        if target_id is None or target_id == "":
            target_id = self.default_target_id()
            if target_id is None:
                raise NotFound("no query target is configured (see mcp_target_profiles)")
        with self._lock:
            target = self._targets.get(target_id)
            reason = self._skipped.get(target_id)
        if target is not None:
            return target
        if reason is not None:
            raise NotFound(f"target {target_id!r} is not available: {reason}")
        raise NotFound(f"unknown target {target_id!r}; list_targets shows the available ones")

    def resolve_for(self, target_id: str | None, caller: Caller | None) -> Target:
        """`resolve`, then the account an mcp_identity_profiles rule gives this caller, if one matches."""
        target = self.resolve(target_id)
        if caller is None or caller.admitted != "oauth" or not self._identity_rules:
            return target
        with self._lock:
            rules, variants = self._identity_rules, self._variants
        for rule_target, wanted, auth_id in rules:
            if rule_target == target.target_id and caller.matches(wanted):
                variant = variants.get(f"{rule_target}\x00{auth_id}")
                if variant is None:  # its account could not be built: refuse rather than use the shared one
                    raise Unavailable(f"target {target.target_id}: the account for this caller is unavailable")
                return variant
        return target

    def loop_gate(self, target: Target) -> asyncio.Semaphore:
        """For statements run on the event loop (gateway/loop_io.py): at most the pool's size of
        them hold a connection of this target at once; the others wait on the loop, not in a
        thread. Called on the loop's thread only (a worker has one loop)."""
        key = self._key(target)
        gate = self._loop_gates.get(key)
        if gate is None:
            gate = self._loop_gates[key] = asyncio.Semaphore(max(1, self._settings[0]))
        return gate

    def _key(self, target: Target) -> str:
        """The pool of a target: its id, or for a per-user account "<target_id>\x00<auth_profile_id>"."""
        if self._targets.get(target.target_id) is target:
            return target.target_id
        for key, variant in self._variants.items():
            if variant is target:
                return key
        return target.target_id

    def _pool(self, target: Target) -> _TargetPool:
        with self._lock:
            key = self._key(target)
            if (self._variants.get(key) if "\x00" in key else self._targets.get(key)) != target:
                raise PoolClosed()  # resolved from a runtime that was replaced meanwhile
            pool = self._pools.get(key)  # update() keeps only pools of current targets
            if pool is None:
                max_size, timeout_s, idle_check_s, io_timeout_s = self._settings
                pool = _TargetPool(
                    target, max_size=max_size, timeout_s=timeout_s, idle_check_s=idle_check_s, io_timeout_s=io_timeout_s
                )
                self._pools[key] = pool
            return pool

    @contextmanager
    def connection(
        self, target_id: str | None, caller: Caller | None = None, *, block: bool = True
    ) -> Iterator[tuple[Target, Any]]:
        """Borrow a connection of the target (None: the default) for one call; with a `caller`,
        of the account mcp_identity_profiles gives it (resolve_for). block=False: an idle one
        ready for use or WouldBlock (BoundedPool.getconn)."""
        target, pool, conn = self._borrow(target_id, caller, block)
        try:
            yield target, conn
        except GatewayError:
            raise
        except Exception as exc:
            if target.engine.broken(conn):
                pool.health.error()
                raise Unavailable(f"target {target.target_id} is unreachable (connection lost)") from exc
            raise
        finally:
            pool.putconn(conn)

    def _borrow(self, target_id: str | None, caller: Caller | None, block: bool) -> tuple[Target, _TargetPool, Any]:
        for _attempt in range(2):  # a LOAD may close the pool we picked: then take the new one
            target = self.resolve_for(target_id, caller)
            try:
                pool = self._pool(target)
                return target, pool, self._getconn(target, pool, block)
            except PoolClosed:
                continue
        raise Unavailable(f"target {target.target_id} is being reconfigured; retry")

    @staticmethod
    def _getconn(target: Target, pool: _TargetPool, block: bool) -> Any:
        try:
            return pool.getconn(block=block)
        except (PoolClosed, WouldBlock):
            raise
        except PoolTimeout:
            pool.health.timed_out()
            raise Unavailable(f"target {target.target_id} is unreachable (no connection within the pool timeout)") from None
        except Exception as exc:  # a driver's connect error: its text may name the host or user
            pool.health.error()
            code = getattr(exc, "sqlstate", None) or (exc.args[0] if exc.args and isinstance(exc.args[0], int) else "")
            log.warning("connecting to target %s failed: %s %s", target.target_id, type(exc).__name__, code)
            raise Unavailable(f"target {target.target_id} is unreachable") from exc

    def stats(self) -> list[dict[str, Any]]:
        """One entry per effective target (zeros until its first use); no host or credentials."""
        with self._lock:
            entries = [(self._targets[tid], self._pools.get(tid)) for tid in sorted(self._targets)]
            max_size = self._settings[0]
        idle = {
            "size": 0,
            "in_use": 0,
            "idle": 0,
            "waiting": 0,
            "max_size": max_size,
            "errors": 0,
            "reconnects": 0,
            "timeouts": 0,
        }
        return [pool.stats() if pool else {"target_id": t.target_id, "protocol": t.protocol, **idle} for t, pool in entries]

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
