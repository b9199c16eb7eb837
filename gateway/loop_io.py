"""Blocking-style code run on the event loop, its socket waits awaited instead of blocked on.

A statement run in a worker thread pays a thread hop: the loop wakes a thread, the thread takes
the GIL from the loop, reads the database's answer, and wakes the loop again. At 16 clients
that hop cost more CPU than the driver itself (issue 30: a bare Python server's PostgreSQL
point query, 0.46 ms with the hop, 0.21-0.28 ms without). `run_on_loop` runs a plain function
in a greenlet on the loop thread instead; where the function would wait on a socket it calls
`wait_socket`, which hands the wait to the loop (add_reader/add_writer) and resumes the
greenlet when the socket is ready, so other calls run meanwhile. Code that waits by any other
means would block the loop: only functions whose every wait goes through `wait_socket` may be
run here (an engine says so with `loop_io`), and what might wait otherwise (a new connection, a
ping) raises `WouldBlock` first, so the caller takes the thread instead.

This is SQLAlchemy's asyncio bridge (`greenlet_spawn` / `await_only`) reduced to one kind of
wait. Cancellation (the call's deadline) is thrown into the greenlet at its wait: the function
sees CancelledError where the socket wait was, and its cleanup runs as for any exception.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")


class WouldBlock(Exception):
    """Raised inside `run_on_loop` by a step that would block the loop (no idle connection,
    one that needs a ping): nothing has been sent yet; run the whole call in a thread instead."""


class _LoopGreenlet(greenlet.greenlet):
    """The greenlet of one `run_on_loop`: its parent is the task that awaits for it."""


def on_loop() -> bool:
    """Whether the current code runs inside `run_on_loop` (its waits must go to the loop)."""
    return isinstance(greenlet.getcurrent(), _LoopGreenlet)


async def run_on_loop(func: Callable[..., T], *args: Any) -> T:
    """Run `func(*args)` on the event loop's thread, its `wait_socket` calls awaited."""
    child = _LoopGreenlet(func, greenlet.getcurrent())
    pending = child.switch(*args)
    while not child.dead:
        try:
            ready = await pending
        except BaseException:  # the deadline's CancelledError, or the wait's own error
            pending = child.throw(*sys.exc_info())
        else:
            pending = child.switch(ready)
    return pending


def wait_socket(fd: int, *, write: bool, timeout_s: float) -> bool:
    """From inside `run_on_loop`: wait until `fd` is readable (or also writable, if `write`),
    at most `timeout_s`. Whether it is readable; False and not writable means the time is up.
    The loop's reader, writer and timer are set here (this is the loop's thread) and removed
    whatever ends the wait: the task awaits only the future (no coroutine, no timeout scope)."""
    current = greenlet.getcurrent()
    if not isinstance(current, _LoopGreenlet):
        raise RuntimeError("wait_socket is for code run by run_on_loop")
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[bool] = loop.create_future()

    def wake(value: bool) -> None:
        if not readable.done():
            readable.set_result(value)

    loop.add_reader(fd, wake, True)
    if write:
        loop.add_writer(fd, wake, False)
    timer = loop.call_later(timeout_s, wake, False)
    try:
        return current.parent.switch(readable)
    finally:
        timer.cancel()
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)


def blocking(func: Callable[..., T], *args: Any) -> T:
    """Call `func(*args)`, which may block by its own means: inside `run_on_loop`, in a worker
    thread while the loop goes on (for the rare steps, such as a cancel request, that do not
    wait through `wait_socket`); elsewhere, directly."""
    current = greenlet.getcurrent()
    if not isinstance(current, _LoopGreenlet):
        return func(*args)
    return current.parent.switch(asyncio.to_thread(func, *args))
