"""The locustfile's own options: one table (`SPECS`) that registers them with Locust's
parser (shown in the web UI's custom-parameter form), builds `dualpath load`'s Locust
command line and validates what either side received.

Values arrive typed from the command line but as strings from the web UI form (Locust keeps
a `None` default's value as the raw string), so `parse_options` accepts both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dualpath.model.config.settings import Scenario

ARRIVALS = ("poisson", "closed", "scripted")
DIALECTS = ("native", "openai")


class OptionError(ValueError):
    """Bad option value: the message names the flag and what is accepted."""


@dataclass(frozen=True, slots=True)
class Spec:
    flag: str
    default: str | float | int | bool | None
    help: str
    choices: tuple[str, ...] | None = None
    ui: bool = True  # shown in the web UI's form (paths of this machine are not)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


SPECS: tuple[Spec, ...] = (
    Spec("--preset", "smoke", "scenario preset name or FILE.yaml: workload, seed, SLOs"),
    Spec("--set", "", "settings overrides path.to.key=value (comma-separated, repeatable)"),
    Spec(
        "--dialect",
        "native",
        "native: POST /v1/agent/turn; openai: /v1/chat/completions with the message history",
        DIALECTS,
    ),
    Spec(
        "--arrivals",
        "poisson",
        "poisson: sessions arrive at --aps; closed: --concurrency sessions at all times; "
        "scripted: every script once, at its start_s (synthetic agents: all together)",
        ARRIVALS,
    ),
    Spec("--aps", None, "Poisson rate, sessions per emulated second (blank: online.aps)"),
    Spec("--concurrency", 0, "closed loop: sessions kept running (0: one per script)"),
    Spec(
        "--sessions",
        0,
        "sessions to start in all; the test ends when they finished (0: unbounded, scripts "
        "reused under fresh keys; scripted: every script once)",
    ),
    Spec("--duration", 0.0, "stop the test after this many wall seconds (0: no limit)"),
    Spec("--think-time", None, "emulated seconds between turns (blank: the script's)"),
    Spec(
        "--speedup",
        None,
        "cluster's emulated seconds per wall second (blank: HOST/metrics dualpath_dilation)",
    ),
    Spec("--slo-ttft", None, "SLO on mean TTFT, emulated s (blank: online.slo_ttft_s)"),
    Spec("--slo-tpot-ms", None, "SLO on mean TPOT, emulated ms (blank: online.slo_tpot_ms)"),
    Spec("--slo-json", "", "write the SLO verdict (JSON) here when the test stops", ui=False),
    Spec("--progress-file", "", "keep a JSON progress record here", ui=False),
    Spec("--fail-fast", False, "stop the test at the first failed turn", ui=False),
    Spec("--turn-timeout", 3600.0, "wall seconds one HTTP turn may take"),
    Spec("--arrival-seed", None, "seed of the arrival process (blank: the scenario's seed)"),
)
SPEC_BY_DEST = {s.dest: s for s in SPECS}

# `a=1,b.c=2`: split on commas that start a new `key=` (a value may itself hold commas).
_SET_SPLIT = re.compile(r",\s*(?=[\w.-]+=)")


@dataclass(frozen=True, slots=True)
class LoadOptions:
    preset: str = "smoke"
    sets: tuple[str, ...] = ()
    dialect: str = "native"
    arrivals: str = "poisson"
    aps: float | None = None
    concurrency: int = 0
    sessions: int = 0
    duration_s: float = 0.0
    think_time_s: float | None = None
    speedup: float | None = None
    slo_ttft_s: float | None = None
    slo_tpot_ms: float | None = None
    slo_json: str = ""
    progress_file: str = ""
    fail_fast: bool = False
    turn_timeout_s: float = 3600.0
    arrival_seed: int | None = None


def split_sets(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out += [s.strip() for s in _SET_SPLIT.split(item) if s.strip()]
    return tuple(out)


def parse_options(values: Mapping[str, Any]) -> LoadOptions:
    """Validated options from Locust's parsed options (`vars(parsed_options)`); missing
    keys take their defaults. Raises OptionError naming the flag."""

    def get(dest: str) -> Any:
        v = values.get(dest, SPEC_BY_DEST[dest].default)
        return None if isinstance(v, str) and not v.strip() and dest != "set" else v

    return LoadOptions(
        preset=str(get("preset") or "smoke"),
        sets=split_sets(get("set")),
        dialect=_choice("dialect", get("dialect")),
        arrivals=_choice("arrivals", get("arrivals")),
        aps=_float("aps", get("aps"), positive=True),
        concurrency=_count("concurrency", get("concurrency")),
        sessions=_count("sessions", get("sessions")),
        duration_s=_float("duration", get("duration")) or 0.0,
        think_time_s=_float("think_time", get("think_time")),
        speedup=_float("speedup", get("speedup"), positive=True),
        slo_ttft_s=_float("slo_ttft", get("slo_ttft"), positive=True),
        slo_tpot_ms=_float("slo_tpot_ms", get("slo_tpot_ms"), positive=True),
        slo_json=str(get("slo_json") or ""),
        progress_file=str(get("progress_file") or ""),
        fail_fast=_flag(get("fail_fast")),
        turn_timeout_s=_float("turn_timeout", get("turn_timeout"), positive=True) or 3600.0,
        arrival_seed=_int("arrival_seed", get("arrival_seed")),
    )


def _flag_name(dest: str) -> str:
    return SPEC_BY_DEST[dest].flag


def _choice(dest: str, value: Any) -> str:
    choices = SPEC_BY_DEST[dest].choices or ()
    if value not in choices:
        raise OptionError(f"{_flag_name(dest)} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _number(dest: str, value: Any, kind: type[float] | type[int], *, positive: bool = False) -> Any:
    if value is None:
        return None
    what = "an integer" if kind is int else "a number"
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise OptionError(f"{_flag_name(dest)} must be {what}, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise OptionError(f"{_flag_name(dest)} must be {bound}, got {value!r}")
    return number


def _float(dest: str, value: Any, *, positive: bool = False) -> float | None:
    out: float | None = _number(dest, value, float, positive=positive)
    return out


def _int(dest: str, value: Any) -> int | None:
    out: int | None = _number(dest, value, int)
    return out


def _count(dest: str, value: Any) -> int:
    return _int(dest, value) or 0


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


@dataclass(frozen=True, slots=True)
class Plan:
    """What the arrival process does, once the options met the scenario."""

    arrivals: str
    aps: float  # emulated sessions per emulated second
    concurrency: int  # closed loop; 0 = one per script
    sessions: int  # 0 = unbounded (scripted: every script once)
    seed: int
    think_time_s: float | None
    open_loop_turns: bool  # replay: open-loop -> a turn waits for its trace time `at_s` too
    slo_ttft_s: float
    slo_tpot_ms: float

    @property
    def n_agents(self) -> int | None:
        """How many scripts to build (None: the scenario's own count)."""
        return self.sessions or None


def make_plan(opts: LoadOptions, sc: Scenario) -> Plan:
    replay = str(getattr(sc.workload, "replay", "session"))
    arrivals = opts.arrivals
    if replay == "open-loop" and arrivals == "poisson":
        arrivals = "scripted"  # a trace replayed open-loop keeps its own session start times
    return Plan(
        arrivals=arrivals,
        aps=opts.aps if opts.aps is not None else sc.online.aps,
        concurrency=opts.concurrency,
        sessions=opts.sessions,
        seed=opts.arrival_seed if opts.arrival_seed is not None else sc.seed,
        think_time_s=opts.think_time_s,
        open_loop_turns=replay == "open-loop",
        slo_ttft_s=opts.slo_ttft_s if opts.slo_ttft_s is not None else sc.online.slo_ttft_s,
        slo_tpot_ms=opts.slo_tpot_ms if opts.slo_tpot_ms is not None else sc.online.slo_tpot_ms,
    )


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """Locust command-line flags for these option values (by dest; None/False omitted)."""
    argv: list[str] = []
    for dest, value in values.items():
        spec = SPEC_BY_DEST[dest]
        if value is None or value is False:
            continue
        if value is True:
            argv.append(spec.flag)
        elif dest == "set":
            for item in split_sets(value):
                argv += [spec.flag, item]
        else:
            argv += [spec.flag, str(value)]
    return argv
