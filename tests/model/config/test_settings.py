"""Presets, env and --set resolve into one frozen Scenario; bad input names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualpath.model.config.presets import ConfigError, parse_set, preset_names, resolve


def test_presets_shipped() -> None:
    assert {"smoke", "paper-ds660b-2p4d", "paper-ds27b-1p1d", "paper-qwen32b-1p2d"} <= set(
        preset_names()
    )


def test_precedence_preset_env_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = resolve("paper-ds660b-2p4d", {}, [])
    assert (sc.topology.prefill_nodes, sc.topology.decode_nodes) == (2, 4)
    monkeypatch.setenv("DP_HARDWARE__SNIC_GBPS", "200")
    sc = resolve("paper-ds660b-2p4d", {"topology": {"decode_nodes": 2}}, ["engine.layer_group=4"])
    assert sc.hardware.snic_gbps == 200  # env beats the preset
    assert sc.topology.decode_nodes == 2  # flags beat the preset
    assert sc.topology.prefill_nodes == 2  # untouched fields keep the preset value
    assert sc.engine.layer_group == 4


def test_set_parses_typed_values() -> None:
    assert parse_set(["a.b=3", "a.c=true", "d=x"]) == {"a": {"b": 3, "c": True}, "d": "x"}


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["topology.prefill_nodes=0"], "topology.prefill_nodes"),
        (["hardware.snic_gbps=0"], "hardware.snic_gbps"),
        (["hardware.bogus=1"], "hardware.bogus"),
        (["nonsense"], "path.to.key=value"),
    ],
)
def test_bad_input_names_the_field(sets: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        resolve("smoke", {}, sets)


def test_bad_preset_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("topology: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        resolve(str(bad), {}, [])
    with pytest.raises(ConfigError, match=r"accepted: .*smoke"):
        resolve("no-such-preset", {}, [])
