"""The chat providers against a real HTTP server on loopback: both wire formats, retries, errors."""

from __future__ import annotations

import time

import pytest

from gateway.errors import DeadlineExceeded, Unavailable
from handlers.ai.chat.ollama import OllamaChat
from handlers.ai.chat.openai import OpenAiChat
from tests.ai.llm_server import LlmServer, Reply

SECRET_KEY = "sk-test-secret-0123456789"


def _provider(kind: str, server: LlmServer, **kw):
    cls = OpenAiChat if kind == "openai" else OllamaChat
    return cls(
        api_base=server.url,
        model="m1",
        api_key=SECRET_KEY,
        timeout_ms=kw.get("timeout_ms", 2000),
        max_retries=kw.get("max_retries", 2),
    )


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_round_trip_sends_model_messages_and_key(llm: LlmServer, kind: str) -> None:
    llm.script(Reply(text="SELECT 1"))
    provider = _provider(kind, llm)
    reply = provider.chat([{"role": "user", "content": "hi"}], max_tokens=50, deadline=time.monotonic() + 5)
    assert reply.text == "SELECT 1"
    assert reply.prompt_tokens == 11 and reply.completion_tokens == 7
    seen = llm.requests[-1]
    assert seen.path == ("/v1/chat/completions" if kind == "openai" else "/api/chat")
    assert seen.body["messages"] == [{"role": "user", "content": "hi"}]
    assert seen.body["model"] == "m1"
    assert seen.headers["authorization"] == f"Bearer {SECRET_KEY}"
    if kind == "openai":
        assert seen.body["max_tokens"] == 50
    else:
        assert seen.body["options"]["num_predict"] == 50 and seen.body["stream"] is False


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_429_is_retried_after_retry_after(llm: LlmServer, kind: str) -> None:
    llm.script(Reply(status=429, headers={"Retry-After": "0.3"}), Reply(text="fine"))
    started = time.monotonic()
    reply = _provider(kind, llm).chat([{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 5)
    assert reply.text == "fine"
    assert len(llm.requests) == 2
    assert time.monotonic() - started >= 0.3


def test_retries_are_bounded_and_errors_carry_no_secret(llm: LlmServer) -> None:
    llm.script(*[Reply(status=503) for _ in range(5)])
    with pytest.raises(Unavailable) as failure:
        _provider("openai", llm, max_retries=2).chat(
            [{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 10
        )
    assert len(llm.requests) == 3
    assert "HTTP 503" in failure.value.message and SECRET_KEY not in failure.value.message


def test_retry_that_would_pass_the_deadline_is_not_waited_for(llm: LlmServer) -> None:
    llm.script(Reply(status=429, headers={"Retry-After": "5"}), Reply(text="late"))
    with pytest.raises(DeadlineExceeded):
        _provider("openai", llm).chat([{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 1)
    assert len(llm.requests) == 1


def test_slow_model_is_a_timeout_not_a_hang(llm: LlmServer) -> None:
    llm.script(Reply(text="slow", delay_s=1.5))
    started = time.monotonic()
    with pytest.raises(Unavailable, match="did not answer"):
        _provider("ollama", llm, timeout_ms=300).chat(
            [{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 5
        )
    assert time.monotonic() - started < 1.4


@pytest.mark.parametrize("raw", [b"not json", b'{"choices": []}', b'{"choices": [{"message": {"content": 5}}]}'])
def test_malformed_output_is_unavailable(llm: LlmServer, raw: bytes) -> None:
    llm.script(Reply(raw_body=raw))
    with pytest.raises(Unavailable):
        _provider("openai", llm).chat([{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 5)


def test_rejected_credentials_are_not_retried(llm: LlmServer) -> None:
    llm.script(Reply(status=401), Reply(text="never"))
    with pytest.raises(Unavailable, match="credentials"):
        _provider("openai", llm).chat([{"role": "user", "content": "q"}], max_tokens=10, deadline=time.monotonic() + 5)
    assert len(llm.requests) == 1
