"""Run blocking-style code with gateway.loop_io.run_on_loop beside a task that ticks every 5 ms:
how many ticks happened while it ran shows whether its waits let the loop go on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from gateway import loop_io

T = TypeVar("T")


def run_ticking(call: Callable[[], T], *, deadline_s: float | None = None) -> tuple[T, int]:
    """`call()` run by run_on_loop (under `deadline_s`, if given): its result and the ticks."""

    async def scenario() -> tuple[T, int]:
        ticks = 0
        stop = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        ticker = asyncio.create_task(tick())
        try:
            async with asyncio.timeout(deadline_s):
                return await loop_io.run_on_loop(call), ticks
        finally:
            stop.set()
            await ticker

    return asyncio.run(scenario())
