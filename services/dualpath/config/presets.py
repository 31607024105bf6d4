"""Scenario presets (packaged YAML files) and `--set path.to.key=value` overrides."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dualpath.config.settings import Scenario, build_scenario


class ConfigError(ValueError):
    """Bad user input: the message names the field and what is accepted."""


def preset_names() -> list[str]:
    root = resources.files("dualpath") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_preset(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        if not path.is_file():
            raise ConfigError(f"--preset: file {name_or_path!r} does not exist")
        text = path.read_text()
        where = str(path)
    else:
        res = resources.files("dualpath") / "presets" / f"{name_or_path}.yaml"
        if not res.is_file():
            raise ConfigError(
                f"--preset: unknown preset {name_or_path!r}; accepted: "
                + ", ".join(preset_names())
                + " or a FILE.yaml"
            )
        text = res.read_text()
        where = f"preset {name_or_path}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({exc})".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of settings, got {type(data).__name__}")
    return data


def set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"--set {dotted}: empty key; use --set section.key=value")
    node = target
    for key in keys[:-1]:
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {key!r} is not a section")
        node = nxt
    node[keys[-1]] = value


def parse_set(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected path.to.key=value")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        set_path(out, key.strip(), value)
    return out


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown setting; see `dualpath sim --help` and docs/settings.md"
    given = first.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    return f"invalid setting {loc!r}: {msg}{shown}"


def resolve(preset: str, overrides: dict[str, Any], sets: list[str]) -> Scenario:
    """Preset < environment (DP_*) < flags < --set."""
    merged = _deep_merge(overrides, parse_set(sets))
    try:
        return build_scenario(load_preset(preset), merged)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None
