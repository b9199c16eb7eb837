"""The llm.* rate limit per token fingerprint: a sliding minute, a retry hint, tokens apart."""

from __future__ import annotations

import pytest

from gateway.errors import LimitExceeded
from gateway.tokens import fingerprint
from handlers.ai import chat_models
from handlers.ai.chat_models import RateLimiter


def test_sliding_minute_per_token(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(chat_models.time, "monotonic", lambda: now[0])
    limiter = RateLimiter()
    limiter.admit("fp-a", 2)
    now[0] += 20
    limiter.admit("fp-a", 2)
    with pytest.raises(LimitExceeded) as caught:
        limiter.admit("fp-a", 2)
    assert caught.value.details["retry_after_s"] == 40.0  # the first call leaves the window in 40 s
    limiter.admit("fp-b", 2)  # another token has its own budget
    now[0] += 40.5
    limiter.admit("fp-a", 2)  # the first call has left the minute
    limiter.admit("fp-a", 0)  # 0: no limit


def test_token_fingerprint_is_short_stable_and_reveals_nothing() -> None:
    token = "tok-query-0123456789abcdef"
    fp = fingerprint(token)
    assert fp == fingerprint(token) and len(fp) == 12 and int(fp, 16) >= 0
    assert fp not in token and fingerprint(token + "x") != fp
