"""One Locust user = one agent session (gevent side; imported by the locustfile only).

The user replays its script turn by turn (each turn extends the context and generates),
pausing between turns for the script's think time (or `--think-time`), or until the turn's
trace time in open-loop replay. When the script ends the user reports the session done and
stops for good (`StopUser`): Locust's dispatcher is held at 0 users by `SessionShape`, so
nothing respawns it. Times in scripts are emulated seconds; pauses divide them by the
cluster's dilation to get wall seconds.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent  # type: ignore[import-untyped]
from locust import FastHttpUser, constant, task
from locust.env import Environment
from locust.exception import StopUser
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from dualpath.loadgen.bodies import Conversation, native_body
from dualpath.loadgen.locust_driver import Assignment, Loadgen
from dualpath.loadgen.locust_report import fire_emulated
from dualpath.loadgen.options import Plan
from dualpath.loadgen.scripts import ScriptTurn

log = logging.getLogger("dualpath.loadgen")

NATIVE_PATH = "/v1/agent/turn"
CHAT_PATH = "/v1/chat/completions"
RETRIES = 5  # 429/503 answers retried (after Retry-After) before the session gives up
MAX_RETRY_AFTER_S = 10.0


class TurnFailed(Exception):  # noqa: N818 -- a session outcome, not a bug
    """A turn was refused or failed for good: the message is the session's error."""


class Refused(TurnFailed):
    """The front door refused the turn for now (429/503): try again after `wait_s`."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class AgentSession(FastHttpUser):
    """Replays one agent script against the front door (native or OpenAI dialect)."""

    wait_time = constant(0)
    network_timeout = 3600.0  # a turn's wall time grows with load; --turn-timeout sets it
    connection_timeout = 30.0
    assignment: Assignment | None = None

    def __init__(self, environment: Environment) -> None:
        lg = Loadgen.current
        if lg is not None:
            self.network_timeout = lg.opts.turn_timeout_s
        if self.host is None and environment.host:
            self.host = environment.host
        super().__init__(environment)

    @task
    def replay(self) -> None:
        lg, a = Loadgen.current, self.assignment
        if lg is None or a is None:
            log.error("AgentSession started without a session: sessions come from --arrivals")
            raise StopUser()
        try:
            error = self._replay(lg, a)
        except Exception as exc:  # a bug must end this session, not make Locust rerun it
            log.exception("session %s failed", a.key)
            error = f"{a.key}: {exc!r}"
        lg.session_done(a, error)
        raise StopUser()

    def _replay(self, lg: Loadgen, a: Assignment) -> str | None:
        workload, plan = lg.workload, lg.plan
        assert workload is not None and plan is not None
        script = workload.scripts[a.index]
        bt = workload.block_tokens
        chat = Conversation(a.key, bt) if lg.opts.dialect == "openai" else None
        for i, turn in enumerate(script.turns):
            _pause(plan, a, i, turn)
            body = chat.body(i, turn) if chat else native_body(a.key, i, turn, bt)
            try:
                text = self._turn(a, i, CHAT_PATH if chat else NATIVE_PATH, body)
            except TurnFailed as exc:
                return str(exc)
            if chat is not None:
                chat.reply(turn, text)
        return None

    def _turn(self, a: Assignment, i: int, path: str, body: dict[str, Any]) -> str:
        """Send one turn (retrying refusals) and fire its EMU rows; returns the answer's
        text. Raises TurnFailed (the last refusal's, once RETRIES retries are spent)."""
        retrying = Retrying(
            stop=stop_after_attempt(RETRIES + 1),
            retry=retry_if_exception_type(Refused),
            wait=_wait_retry_after,
            sleep=gevent.sleep,  # a greenlet sleep: the other users run meanwhile
            reraise=True,
        )
        return retrying(self._post_turn, a, i, path, body)

    def _post_turn(self, a: Assignment, i: int, path: str, body: dict[str, Any]) -> str:
        """One try of `_turn`: every answer but a 200 is a failed request in Locust's stats."""
        with self.client.post(path, json=body, catch_response=True) as resp:
            status = resp.status_code
            if status == 200:
                try:
                    return self._answered(resp.json())
                except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                    message = f"unreadable answer ({exc!r})"
            else:
                message = _error_text(resp)
            resp.failure(f"HTTP {status}: {message}")
            wait_s = _retry_after(resp)
        error = f"session {a.key} turn {i}: HTTP {status}: {message}"
        if status in (429, 503):
            raise Refused(error, wait_s)
        raise TurnFailed(error)

    def _answered(self, data: dict[str, Any]) -> str:
        if "choices" in data:  # OpenAI: timings under `dualpath`, tokens under `usage`
            usage = data["usage"]
            timings, generated = data["dualpath"], int(usage["completion_tokens"])
            prompt = int(usage["prompt_tokens"])
            cached = int(usage["prompt_tokens_details"]["cached_tokens"])
            text = str(data["choices"][0]["message"]["content"])
        else:
            timings, generated, text = data, int(data["generated_tokens"]), ""
            prompt, cached = int(data["prompt_tokens"]), int(data["cached_tokens"])
        fire_emulated(self.environment, timings, generated)
        if Loadgen.current is not None:
            Loadgen.current.count_tokens(prompt, cached)
        return text


def _pause(plan: Plan, a: Assignment, i: int, turn: ScriptTurn) -> None:
    if plan.open_loop_turns:  # not before the turn's trace time (and never overlapping)
        delay = a.t0 + (turn.at_s - a.origin_s) / a.dilation - time.time()
    elif i > 0:
        think = plan.think_time_s if plan.think_time_s is not None else turn.think_s
        delay = think / a.dilation
    else:
        delay = 0.0
    if delay > 0:
        gevent.sleep(delay)


def _error_text(resp: Any) -> str:
    if resp.status_code == 0:
        return f"no answer ({resp.error!r})"
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return (resp.text or "")[:200]


def _wait_retry_after(state: RetryCallState) -> float:
    """Tenacity's wait: what the refusal's Retry-After asked for."""
    exc = state.outcome.exception() if state.outcome is not None else None
    return exc.wait_s if isinstance(exc, Refused) else 1.0


def _retry_after(resp: Any) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.05, float(resp.headers.get("Retry-After", 1))))
    except (TypeError, ValueError, AttributeError):
        return 1.0
