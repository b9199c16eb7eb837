"""gateway/loop_io.py: a plain function run on the event loop, its socket waits awaited by the
loop (other tasks run meanwhile), its deadline thrown in at the wait, its rare blocking step
taken in a thread. Real sockets (socketpair), a real loop."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from gateway import loop_io


async def _ticking(ticks: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.005)


def _read_when_ready(sock: socket.socket, timeout_s: float) -> bytes | None:
    """What a driver does: wait for the socket, then read it without blocking."""
    assert loop_io.on_loop()
    if not loop_io.wait_socket(sock.fileno(), write=False, timeout_s=timeout_s):
        return None
    return sock.recv(100)


def test_a_wait_lets_the_loop_run_other_tasks() -> None:
    async def scenario() -> tuple[bytes | None, list[float]]:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        ticks: list[float] = []
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticking(ticks, stop))
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, theirs.send, b"answer")
        try:
            got = await loop_io.run_on_loop(_read_when_ready, ours, 5.0)
        finally:
            stop.set()
            await ticker
            ours.close()
            theirs.close()
        return got, ticks

    got, ticks = asyncio.run(scenario())
    assert got == b"answer"
    assert len(ticks) >= 10  # the loop ticked every 5 ms while the function waited 200 ms


def test_the_wait_ends_at_its_timeout_unready() -> None:
    async def scenario() -> tuple[bytes | None, float]:
        ours, theirs = socket.socketpair()
        started = time.monotonic()
        try:
            return await loop_io.run_on_loop(_read_when_ready, ours, 0.1), time.monotonic() - started
        finally:
            ours.close()
            theirs.close()

    got, took = asyncio.run(scenario())
    assert got is None
    assert 0.08 <= took < 2.0


def test_the_deadline_reaches_the_function_at_its_wait_and_its_cleanup_runs() -> None:
    cleaned: list[str] = []

    def statement(sock: socket.socket) -> bytes | None:
        try:
            return _read_when_ready(sock, 30.0)
        except BaseException as exc:  # as _pg_pipeline: close what is in an unknown state
            cleaned.append(type(exc).__name__)
            raise

    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(0.1):
                await loop_io.run_on_loop(statement, ours)
        finally:
            # the reader was removed before the function saw the cancellation
            assert not loop.remove_reader(ours.fileno())
            ours.close()
            theirs.close()

    with pytest.raises(TimeoutError):
        asyncio.run(scenario())
    assert cleaned == ["CancelledError"]


def test_an_error_in_the_function_is_raised_to_the_caller() -> None:
    def fails(sock: socket.socket) -> None:
        _read_when_ready(sock, 5.0)
        raise ValueError("after the wait")

    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.send(b"x")
        try:
            await loop_io.run_on_loop(fails, ours)
        finally:
            ours.close()
            theirs.close()

    with pytest.raises(ValueError, match="after the wait"):
        asyncio.run(scenario())


def test_a_blocking_step_runs_in_a_thread_while_the_loop_goes_on() -> None:
    def step() -> int:
        time.sleep(0.2)
        return threading.get_ident()

    async def scenario() -> tuple[int, int, list[float]]:
        ticks: list[float] = []
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticking(ticks, stop))
        ran_in = await loop_io.run_on_loop(loop_io.blocking, step)
        stop.set()
        await ticker
        return ran_in, threading.get_ident(), ticks

    ran_in, loop_thread, ticks = asyncio.run(scenario())
    assert ran_in != loop_thread
    assert len(ticks) >= 10


def test_outside_run_on_loop_nothing_is_handed_to_a_loop() -> None:
    assert not loop_io.on_loop()
    assert loop_io.blocking(threading.get_ident) == threading.get_ident()  # called directly
    with pytest.raises(RuntimeError, match="run_on_loop"):
        loop_io.wait_socket(0, write=False, timeout_s=0.1)
