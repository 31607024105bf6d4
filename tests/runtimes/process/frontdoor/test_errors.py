"""Bad input and overload: a 4xx/5xx with an OpenAI error body naming the field."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import ClientSession

from dualpath.runtimes.process.frontdoor import RUNNER_KEY, BackendBusy, BackendUnavailable, BadTurn
from tests.polling import wait_until_async
from tests.runtimes.process.frontdoor.conftest import MAX_GEN, MAX_PROMPT, MODEL, Server, start

pytestmark = pytest.mark.asyncio

OK_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


async def _error(http: ClientSession, status: int, method: str, path: str, **kw: Any) -> Any:
    async with http.request(method, path, **kw) as r:
        assert r.status == status, await r.text()
        assert r.content_type == "application/json"
        body = await r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    return err


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": MAX_GEN + 1}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"prompt": [["a"]]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": [1, -1]}, "prompt"),
        ({"prompt": [True]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"n": 2}, "n"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"user": 7}, "user"),
    ],
)
async def test_completion_validation(http: ClientSession, extra: Any, param: str) -> None:
    body = {"model": MODEL, "prompt": "hello", **extra}
    err = await _error(http, 400, "POST", "/v1/completions", json=body)
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"


async def test_prompt_too_long_names_the_limit(http: ClientSession) -> None:
    body = {"model": MODEL, "prompt": "word " * (MAX_PROMPT + 5)}
    err = await _error(http, 400, "POST", "/v1/completions", json=body)
    assert err["param"] == "prompt" and str(MAX_PROMPT) in err["message"]
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "w " * MAX_PROMPT}]}
    err = await _error(http, 400, "POST", "/v1/chat/completions", json=chat)
    assert err["param"] == "messages" and str(MAX_PROMPT) in err["message"]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        ("hi", "messages"),
        ([5], "messages[0]"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": ["user"], "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": None}], "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "messages[0].content[0]",
        ),
    ],
)
async def test_chat_validation(http: ClientSession, messages: Any, param: str) -> None:
    body = {"model": MODEL, "messages": messages}
    err = await _error(http, 400, "POST", "/v1/chat/completions", json=body)
    assert err["param"] == param


async def test_max_completion_tokens_is_checked(http: ClientSession) -> None:
    body = {**OK_CHAT, "max_completion_tokens": -1}
    err = await _error(http, 400, "POST", "/v1/chat/completions", json=body)
    assert err["param"] == "max_completion_tokens"


async def test_malformed_json_and_non_object(http: ClientSession) -> None:
    err = await _error(http, 400, "POST", "/v1/completions", data=b"{nope")
    assert err["param"] is None and err["type"] == "invalid_request_error"
    await _error(http, 400, "POST", "/v1/chat/completions", data=b"[1, 2]")
    await _error(http, 400, "POST", "/v1/completions", data=b"\xff\xfe")
    await _error(http, 400, "POST", "/v1/completions", data=b"[" * 100_000)


async def test_wrong_model_is_404_model_not_found(http: ClientSession) -> None:
    err = await _error(http, 404, "POST", "/v1/chat/completions", json={**OK_CHAT, "model": "x"})
    assert err["code"] == "model_not_found" and err["param"] == "model"


async def test_routing_errors_are_json(http: ClientSession) -> None:
    err = await _error(http, 404, "GET", "/v1/nothing")
    assert err["code"] == "not_found"
    err = await _error(http, 405, "GET", "/v1/completions")
    assert "POST" in err["message"]


async def test_oversized_body_is_413(http: ClientSession) -> None:
    big = b'{"prompt": "' + b"a" * (8 * 1024 * 1024) + b'"}'
    err = await _error(http, 413, "POST", "/v1/completions", data=big)
    assert "8 MiB" in err["message"]


@pytest.mark.parametrize(
    ("exc", "status", "param"),
    [
        (BackendBusy("full"), 429, None),
        (BackendUnavailable("down"), 503, None),
        (BadTurn("prompt too long for the cluster", param="prompt"), 400, "prompt"),
    ],
)
async def test_backend_errors(
    http: ClientSession, server: Server, exc: Exception, status: int, param: str | None
) -> None:
    server.backend.fail = exc
    for stream in (False, True):
        body = {**OK_CHAT, "stream": stream}
        async with http.post("/v1/chat/completions", json=body) as r:
            assert r.status == status
            err = (await r.json())["error"]
            if status == 429:
                assert r.headers["Retry-After"] == "1"
        assert err["param"] == param
    assert server.app[RUNNER_KEY].inflight == 0


async def test_front_door_inflight_bound_is_429() -> None:
    srv, runner = await start(max_inflight=1)
    srv.backend.gate = asyncio.Event()
    try:
        async with ClientSession(base_url=srv.base) as http:
            held = asyncio.create_task(http.post("/v1/chat/completions", json=OK_CHAT))
            await wait_until_async(lambda: srv.backend.specs, 5, 0.001, what="the held turn")
            async with http.post("/v1/chat/completions", json=OK_CHAT) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "1"
            srv.backend.gate.set()
            async with await held as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


async def test_client_disconnect_mid_stream(server: Server, http: ClientSession) -> None:
    server.backend.gate = asyncio.Event()
    body = {**OK_CHAT, "stream": True, "max_tokens": 50}
    async with ClientSession(base_url=server.base) as doomed:
        r = await doomed.post("/v1/chat/completions", json=body)
        assert r.status == 200
        assert (await r.content.readline()).startswith(b"data: ")
        r.close()  # hang up after the first token
    server.backend.gate.set()
    await wait_until_async(
        lambda: server.backend.completed >= 1, 5, 0.001, what="the abandoned turn to complete"
    )
    async with http.post("/v1/chat/completions", json=OK_CHAT) as ok:
        assert ok.status == 200
        assert (await ok.json())["usage"]["completion_tokens"] == 16
    assert server.backend.completed == 2  # the abandoned turn ran to completion
    assert server.app[RUNNER_KEY].inflight == 0
