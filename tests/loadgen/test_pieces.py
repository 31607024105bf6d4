"""The load generator's pure pieces: options (CLI and web-form values), request bodies
(token counts as the front door counts them), the SLO verdict."""

from __future__ import annotations

import pytest

from dualpath.loadgen.bodies import Conversation, block_text, native_body, words
from dualpath.loadgen.options import (
    OptionError,
    make_plan,
    parse_options,
    split_sets,
    to_argv,
)
from dualpath.loadgen.scripts import ScriptTurn, total_turns
from dualpath.loadgen.slo import Summary, describe, share_within, verdict
from dualpath.model.config.presets import resolve
from dualpath.runtimes.process.frontdoor.tokenizer import encode


def test_web_form_strings_and_cli_values_parse_alike() -> None:
    form = parse_options({"aps": "0.5", "concurrency": "3", "fail_fast": "true", "set": ""})
    cli = parse_options({"aps": 0.5, "concurrency": 3, "fail_fast": True, "set": None})
    assert form == cli and form.aps == 0.5 and form.fail_fast
    assert parse_options({"aps": "", "speedup": " "}).aps is None  # blank = the preset's


@pytest.mark.parametrize(
    ("values", "flag"),
    [({"aps": "-1"}, "--aps"), ({"aps": "inf"}, "--aps"), ({"concurrency": "x"}, "--concurrency"),
     ({"dialect": "grpc"}, "--dialect"), ({"arrivals": "burst"}, "--arrivals")],
)  # fmt: skip
def test_bad_option_values_name_their_flag(values: dict[str, str], flag: str) -> None:
    with pytest.raises(OptionError, match=flag):
        parse_options(values)


def test_sets_split_only_where_a_new_key_starts() -> None:
    assert split_sets("a.b=1, c=x,y,d.e=2") == ("a.b=1", "c=x,y", "d.e=2")
    assert split_sets(["a=1", "b=2,c=3"]) == ("a=1", "b=2", "c=3")
    argv = to_argv({"aps": 2.0, "set": "a=1,b=2", "fail_fast": True, "speedup": None})
    assert argv == ["--aps", "2.0", "--set", "a=1", "--set", "b=2", "--fail-fast"]


def test_plan_takes_blank_options_from_the_scenario() -> None:
    sc = resolve("smoke", {}, ["online.aps=0.25", "online.slo_tpot_ms=40"])
    plan = make_plan(parse_options({}), sc)
    assert (plan.arrivals, plan.aps, plan.slo_tpot_ms, plan.seed) == ("poisson", 0.25, 40.0, 1)
    assert make_plan(parse_options({"aps": 3}), sc).aps == 3.0


def test_words_are_one_token_each_and_blocks_depend_on_their_id_only() -> None:
    assert len(encode(words(42, 500))) == 500
    assert block_text(7, 64) == block_text(7, 64) != block_text(8, 64)
    assert len(encode(block_text(7, 64))) == 64


def test_chat_history_grows_and_keeps_the_replies() -> None:
    t0, t1 = ScriptTurn(100, 5, 0.0, 0.0, 1, 100), ScriptTurn(120, 5, 0.0, 0.0, 1, 15)
    chat = Conversation("s", 64)
    first = chat.body(0, t0)
    assert first["max_tokens"] == 5 and first["user"] == "s"
    assert len(encode(first["messages"][0]["content"])) == 100
    chat.reply(t0, " tok1 tok2")
    second = chat.body(1, t1)
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "user"]


def test_trace_turns_name_their_blocks() -> None:
    t = ScriptTurn(150, 4, 0.0, 0.0, 3, 150, (11, 12, 13))
    body = native_body("k", 2, t, 64)
    assert body["block_ids"] == [11, 12, 13] and body["prompt_tokens"] == 150
    assert body["block_tokens"] == 64 and "append_tokens" not in body
    text = Conversation("k", 64).body(2, t)["messages"][0]["content"]
    assert text.startswith(block_text(11, 64) + block_text(12, 64))
    assert len(encode(text)) == 150
    assert native_body("k", 0, ScriptTurn(9, 2, 0, 0, 1, 9), 0)["append_tokens"] == 9


def test_total_turns_cycles_scripts() -> None:
    from dualpath.loadgen.scripts import load_workload

    w = load_workload(resolve("smoke", {}, []), 2)
    a, b = (len(s.turns) for s in w.scripts)
    assert total_turns(w, 0) == a + b and total_turns(w, 3) == 2 * a + b


def test_slo_verdict_on_means() -> None:
    def summary(mean: float) -> Summary:
        return Summary(10, mean, mean, mean, mean, mean, 1.0)

    met = verdict({"TTFT": summary(3900), "TPOT": summary(49)}, 4.0, 50.0)
    missed = verdict({"TTFT": summary(4100), "TPOT": summary(10)}, 4.0, 50.0)
    assert met["met"] and not missed["met"] and missed["verdict"] == "MISSED"
    assert verdict({}, 4.0, 50.0)["verdict"] == "no data"
    assert "met" in describe(met) and share_within({100.0: 3, 5000.0: 1}, 4000) == 0.75
