"""The front door driven by the official `openai` client over real TCP."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.runtimes.process.frontdoor.conftest import MODEL, Server

pytestmark = pytest.mark.asyncio

PROMPT = "The quick brown fox jumps over the lazy dog, twice."


def _extra(obj: Any, name: str) -> Any:
    extra = obj.model_extra or {}
    return extra[name]


async def test_models_list(client: openai.AsyncOpenAI) -> None:
    models = [m async for m in client.models.list()]
    assert [m.id for m in models] == [MODEL]
    assert models[0].owned_by == "dualpath-testbed"


async def test_completion(client: openai.AsyncOpenAI) -> None:
    r = await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length"
    assert len(r.choices[0].text.split()) == 5  # one word per token
    assert r.usage is not None
    assert r.usage.completion_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5
    dp = _extra(r, "dualpath")
    assert dp["ttft_s"] == pytest.approx(0.25)
    assert dp["ttst_s"] == pytest.approx(0.02)
    assert dp["tpot_s"] == pytest.approx(0.02)
    assert dp["latency_s"] == pytest.approx(0.25 + 0.02 + 0.02 * 3)
    assert dp["read_path"] in {"pe", "de"}


async def test_stream_matches_non_stream(client: openai.AsyncOpenAI) -> None:
    full = await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=100)
    stream = await client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=100,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert len(chunks) >= 3  # first token, the rest, usage
    first = chunks[0].choices[0].text
    assert len(first.split()) == 1 and full.choices[0].text.startswith(first)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens == 100
    assert _extra(last, "dualpath")["turn"] == 1  # same prompt, same chain, next turn
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


async def test_chat_stream(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hello!"}],
        max_completion_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert "dualpath" in (chunks[-1].model_extra or {})


async def test_chat_stream_without_usage_puts_timings_on_the_finish_chunk(
    client: openai.AsyncOpenAI,
) -> None:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, stream=True
    )
    chunks = [c async for c in stream]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is None
    assert _extra(chunks[-1], "dualpath")["cached_tokens"] == 0


async def test_second_chat_turn_hits_the_cache_on_the_same_session(
    client: openai.AsyncOpenAI,
) -> None:
    history: list[Any] = [
        {"role": "system", "content": "You are a terse assistant for testing."},
        {"role": "user", "content": [{"type": "text", "text": "Summarise the fox story."}]},
    ]
    first = await client.chat.completions.create(model=MODEL, messages=history, max_tokens=8)
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And now in one word?"},
    ]
    second = await client.chat.completions.create(model=MODEL, messages=history, max_tokens=8)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens_details.cached_tokens or 0) > 0
    dp1, dp2 = _extra(first, "dualpath"), _extra(second, "dualpath")
    assert dp2["session"] == dp1["session"]
    assert (dp1["turn"], dp2["turn"]) == (0, 1)


async def test_content_decides_the_chain_and_users_share_a_prompt(
    client: openai.AsyncOpenAI, server: Server
) -> None:
    """Affinity (`user`) is only a hint: two users sending the same system prompt share its
    blocks; a user's next turn extends the chain its prompt ends on."""
    system = "you are a careful coding agent " * 4  # 24 tokens: six 4-token blocks
    task_a = system + "fix the bug in one two three four"  # 8 more tokens: 2 own blocks
    a = await client.completions.create(model=MODEL, prompt=task_a, user="alice")
    b = await client.completions.create(model=MODEL, prompt=system + "add a test " * 3, user="bob")
    a2 = await client.completions.create(model=MODEL, prompt=task_a + " and more", user="alice")
    s = [_extra(r, "dualpath")["session"] for r in (a, b, a2)]
    assert s[1] != s[0]  # bob's prompt diverges after the shared blocks: a fork
    lineage = server.backend.specs[1].lineage
    assert [(f.session, f.parent, f.at) for f in lineage] == [(s[1], s[0], 6)]
    assert s[2] == s[0] and _extra(a2, "dualpath")["turn"] == 1


async def test_token_id_prompt(client: openai.AsyncOpenAI) -> None:
    r = await client.completions.create(model=MODEL, prompt=[1, 2, 3, 4, 5], max_tokens=1)
    assert r.usage is not None and r.usage.prompt_tokens == 5
    assert _extra(r, "dualpath")["tpot_s"] == 0.0


async def test_busy_and_unavailable_surface_as_sdk_errors(
    client: openai.AsyncOpenAI, server: Server
) -> None:
    from dualpath.runtimes.process.frontdoor import BackendBusy, BackendUnavailable

    server.backend.fail = BackendBusy("queue full")
    with pytest.raises(openai.RateLimitError):
        await client.completions.create(model=MODEL, prompt=PROMPT)
    with pytest.raises(openai.RateLimitError):
        await client.completions.create(model=MODEL, prompt=PROMPT, stream=True)
    server.backend.fail = BackendUnavailable("no decode engine")
    with pytest.raises(openai.InternalServerError):
        await client.completions.create(model=MODEL, prompt=PROMPT)
    with pytest.raises(openai.NotFoundError):
        await client.completions.create(model="gpt-4", prompt=PROMPT)
