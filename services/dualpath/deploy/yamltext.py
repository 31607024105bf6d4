"""YAML text for generated files: a comment header, keys in the order written, and multi-line
strings (kustomize's inline patches) as literal blocks so that a reviewer reads them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key (as kubectl and people write them)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a dict used twice (labels) is written twice, not as &id001 / *id001


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def comment(lines: Iterable[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)
