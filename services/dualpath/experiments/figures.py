"""The paper's figures as data (`paper_figures.yaml`), and `Row`s built from them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from dualpath.experiments.base import Row
from dualpath.experiments.scenarios import QUICK_NOTE

FILE = "paper_figures.yaml"


@dataclass(frozen=True, slots=True)
class PaperFigure:
    figure: str
    what: str
    value: float
    unit: str
    source: str


@functools.cache
def paper_figures() -> dict[str, dict[str, PaperFigure]]:
    """experiment name -> figure id -> PaperFigure (parsed once, checked field by field)."""
    text = (resources.files("dualpath.experiments") / FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{FILE}: expected a mapping of experiments")
    out: dict[str, dict[str, PaperFigure]] = {}
    for exp, entries in data.items():
        if not isinstance(entries, dict):
            raise ValueError(f"{FILE}: {exp}: expected a mapping of figures")
        out[str(exp)] = {}
        for key, e in entries.items():
            try:
                out[str(exp)][str(key)] = PaperFigure(
                    figure=str(e["figure"]),
                    what=str(e["what"]),
                    value=float(e["value"]),
                    unit=str(e.get("unit", "")),
                    source=str(e["source"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{FILE}: {exp}.{key}: bad entry ({exc})") from None
    return out


def paper_figure(experiment: str, key: str) -> PaperFigure:
    try:
        return paper_figures()[experiment][key]
    except KeyError:
        raise KeyError(f"{FILE} has no figure {experiment}.{key}") from None


def paper_row(
    experiment: str,
    key: str,
    ours: float | None,
    note: str = "",
    *,
    quick: bool = False,
    what: str | None = None,
) -> Row:
    """The row comparing `ours` with paper figure `experiment.key`."""
    pf = paper_figure(experiment, key)
    notes = [QUICK_NOTE] if quick else []
    if note:
        notes.append(note)
    return Row(
        figure=pf.figure,
        what=what or pf.what,
        ours=ours,
        paper=pf.value,
        unit=pf.unit,
        note="; ".join(notes),
        source=pf.source,
    )
