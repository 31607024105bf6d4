"""Scenario presets (packaged YAML files) and `--set path.to.key=value` overrides."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import SettingsError

from dualpath.model.config.settings import Scenario, build_scenario


class ConfigError(ValueError):
    """Bad user input: the message names the field and what is accepted."""


def preset_names() -> list[str]:
    root = resources.files("dualpath") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_preset(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        if not path.is_file():
            what = "is a folder, not a FILE.yaml" if path.is_dir() else "does not exist"
            raise ConfigError(f"--preset: file {name_or_path!r} {what}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"--preset: cannot read {name_or_path!r} as UTF-8 text ({exc})"
            ) from None
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


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings section at `loc` (() = the whole scenario), or None."""
    model: Any = Scenario
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return None
        model = fields[part].annotation
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _bounds(leaf: str, info: FieldInfo) -> str:
    """'1 <= snic_gbps <= 100,000' from the field's ge/gt/le/lt constraints ('' if none)."""
    lower = upper = ""
    for meta in info.metadata:
        for attr, op in (("ge", "<="), ("gt", "<")):
            if (v := getattr(meta, attr, None)) is not None:
                lower = f"{v:,} {op} "
        for attr, op in (("le", "<="), ("lt", "<")):
            if (v := getattr(meta, attr, None)) is not None:
                upper = f" {op} {v:,}"
    return f"{lower}{leaf}{upper}" if lower or upper else ""


def _describe(err: ValidationError) -> str:
    """One line: the setting's dotted path, what is wrong, what was given, what is accepted."""
    first = err.errors()[0]
    loc = tuple(first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if not loc:  # a rule across sections (e.g. limits): its message names the settings
        return f"invalid settings: {msg}"
    path = ".".join(str(p) for p in loc)
    parent = _model_at(loc[:-1])
    if first["type"] == "extra_forbidden":
        known = ", ".join(parent.model_fields) if parent is not None else ""
        return (
            f"invalid setting {path!r}: unknown setting; accepted here: {known} (docs/settings.md)"
        )
    given = first.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    info = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    accepted = ""
    if info is not None and (bounds := _bounds(str(loc[-1]), info)):
        accepted = f"; accepted: {bounds}" + (f" ({info.description})" if info.description else "")
    return f"invalid setting {path!r}: {msg}{shown}{accepted}"


def _env_error(err: SettingsError) -> str:
    """pydantic-settings could not parse a DP_* variable (a section's value must be JSON)."""
    m = re.search(r'field "(\w+)"', str(err))
    var = f"DP_{m.group(1).upper()}" if m else "a DP_* variable"
    why = err.__cause__ or err
    return (
        f"environment {var}: cannot parse it ({why}); a section is JSON, e.g. "
        f"{var}='{{\"key\": 1}}', or set one key with {var}__KEY=1"
    )


def with_sets(sc: Scenario, sets: list[str]) -> Scenario:
    """`sc` with `--set path.to.key=value` items applied on top (a resolved scenario as the
    base: what every run of an experiment gets from `dualpath experiment --set`)."""
    if not sets:
        return sc
    try:
        return build_scenario(sc.model_dump(mode="json"), parse_set(sets))
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None
    except SettingsError as err:
        raise ConfigError(_env_error(err)) from None


def resolve(preset: str, overrides: dict[str, Any], sets: list[str]) -> Scenario:
    """Preset < environment (DP_*) < flags < --set."""
    merged = _deep_merge(overrides, parse_set(sets))
    try:
        return build_scenario(load_preset(preset), merged)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None
    except SettingsError as err:
        raise ConfigError(_env_error(err)) from None
