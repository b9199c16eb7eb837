"""The tool declaration and execution contract every handler inherits."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import Field

from gateway.assembly import open_store
from gateway.errors import NotFound
from gateway.tools import CallContext, ToolHandler, ToolInput, ToolOutput, tool


class EchoIn(ToolInput):
    text: str = Field(max_length=10)
    delay_s: float = 0.0


class EchoOut(ToolOutput):
    text: str


class SampleHandler(ToolHandler):
    endpoint = "sample"

    @tool("sample.echo", title="Echo", read_only=True)
    def echo(self, args: EchoIn, ctx: CallContext) -> EchoOut:
        """Echo the text back after an optional delay (runs in a worker thread)."""
        time.sleep(args.delay_s)
        if args.text == "missing":
            raise NotFound("no such thing")
        if args.text == "boom":
            raise RuntimeError("driver said: password=hunter2")
        return EchoOut(text=args.text)

    @tool("sample.async_echo", title="Async echo", read_only=False, destructive=True)
    async def async_echo(self, args: EchoIn, ctx: CallContext) -> EchoOut:
        """Echo the text back after an optional delay (on the event loop)."""
        await asyncio.sleep(args.delay_s)
        return EchoOut(text=args.text)


@pytest.fixture
def handler(tmp_path):
    store = open_store(tmp_path / "data")
    store.initialize()
    return SampleHandler(services=None), store.read_runtime()  # type: ignore[arg-type]


def _ctx(runtime, *, timeout_s: float = 5.0) -> CallContext:
    return CallContext(endpoint="sample", tool_name="x", runtime=runtime, deadline=time.monotonic() + timeout_s)


def test_schemas_and_annotations_come_from_the_declaration():
    listed = {t["name"]: t for t in SampleHandler(services=None).get_tool_list()}  # type: ignore[arg-type]
    echo = listed["sample.echo"]
    assert echo["inputSchema"]["required"] == ["text"] and echo["inputSchema"]["additionalProperties"] is False
    assert echo["outputSchema"]["properties"]["text"]["type"] == "string"
    assert echo["annotations"] == {
        "title": "Echo",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert listed["sample.async_echo"]["annotations"]["destructiveHint"] is True
    assert echo["description"].startswith("Echo the text back")
    portable = [t["name"] for t in SampleHandler(services=None).get_tool_list(style="portable")]  # type: ignore[arg-type]
    assert portable == ["sample_echo", "sample_async_echo"]


def test_both_spellings_resolve():
    h = SampleHandler(services=None)  # type: ignore[arg-type]
    assert h.find_tool("sample.echo") is h.find_tool("sample_echo") is not None
    assert h.find_tool("sample-echo") is None


def test_result_shape_and_errors(handler):
    h, runtime = handler
    spec = h.find_tool("sample.echo")
    ok = asyncio.run(h.execute_tool(spec, {"text": "hi"}, _ctx(runtime)))
    assert ok["isError"] is False and ok["structuredContent"] == {"text": "hi"} and ok["content"][0]["text"] == "text: hi"
    bad = asyncio.run(h.execute_tool(spec, {"text": "far too long text", "extra": 1}, _ctx(runtime)))
    assert bad["isError"] and bad["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"
    assert {d["loc"] for d in bad["structuredContent"]["error"]["details"]} == {"text", "extra"}
    missing = asyncio.run(h.execute_tool(spec, {"text": "missing"}, _ctx(runtime)))
    assert missing["structuredContent"]["error"] == {"code": "NOT_FOUND", "message": "no such thing"}
    boom = asyncio.run(h.execute_tool(spec, {"text": "boom"}, _ctx(runtime)))
    assert boom["structuredContent"]["error"]["code"] == "INTERNAL" and "hunter2" not in boom["content"][0]["text"]


@pytest.mark.parametrize("name", ["sample.echo", "sample.async_echo"])
def test_deadline_is_enforced_and_does_not_block_other_calls(handler, name):
    h, runtime = handler
    spec = h.find_tool(name)

    async def both():
        slow = asyncio.create_task(h.execute_tool(spec, {"text": "slow", "delay_s": 2.0}, _ctx(runtime, timeout_s=0.3)))
        started = time.monotonic()
        fast = await h.execute_tool(spec, {"text": "fast"}, _ctx(runtime))
        fast_s = time.monotonic() - started
        return await slow, fast, fast_s

    slow, fast, fast_s = asyncio.run(both())
    assert slow["structuredContent"]["error"]["code"] == "DEADLINE_EXCEEDED"
    assert fast["structuredContent"] == {"text": "fast"} and fast_s < 1.0


def test_declaration_mistakes_fail_at_class_creation():
    with pytest.raises(TypeError, match="description"):

        class NoDoc(ToolHandler):
            @tool("x", title="X", read_only=True)
            def x(self, args: EchoIn, ctx: CallContext) -> EchoOut:
                return EchoOut(text="")

    with pytest.raises(TypeError, match="declared twice"):

        class Twice(ToolHandler):
            @tool("x", title="X", read_only=True)
            def a(self, args: EchoIn, ctx: CallContext) -> EchoOut:
                """A."""

            @tool("x", title="X", read_only=True)
            def b(self, args: EchoIn, ctx: CallContext) -> EchoOut:
                """B."""
