"""The import contract (dualpath/layers.py, docs/architecture.md): no package cycle, every
import points down the declared layers, and the model never imports a runtime. Counted on
the real tree, so a new cycle or a model -> runtime import fails CI; the synthetic graphs
below show each kind of violation is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

import dualpath
from dualpath.layers import (
    LAYERS,
    MODEL,
    cycles,
    import_graph,
    is_runtime,
    main,
    private_reach_ins,
    shortest_cycle,
    violations,
)

ROOT = Path(dualpath.__file__).resolve().parent


def test_the_package_keeps_its_contract() -> None:
    graph = import_graph(ROOT)
    assert cycles(graph) == []
    assert violations(graph) == []
    assert private_reach_ins(ROOT) == []  # runtimes use only public names of the model


def test_the_command_prints_the_graph_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert "  model.engines -> " in out
    assert "no cycle" in out
    assert out.rstrip().endswith("contract: ok")


def test_each_node_is_declared_once_and_the_model_sits_below_every_runtime() -> None:
    declared = [node for layer in LAYERS for node in layer]
    assert len(declared) == len(set(declared))
    assert set(import_graph(ROOT)) <= set(declared)
    level = {node: i for i, layer in enumerate(LAYERS) for node in layer}
    top_of_model = max(level[m] for m in MODEL)
    assert all(level[r] > top_of_model for r in declared if is_runtime(r))


@pytest.mark.parametrize(
    ("graph", "needle"),
    [
        (
            {"model.engines": {"model.policies"}, "model.policies": {"model.engines"}},
            "cycle among model.engines, model.policies",
        ),
        (
            {"model.engines": {"runtimes.process.serving"}, "runtimes.process.serving": set()},
            "model.engines -> runtimes.process.serving: the model imports",
        ),
        (
            {"model.config": {"cli.serve"}, "cli.serve": set()},
            "model.config -> cli.serve: the model",
        ),
        (
            {"model.core": {"model.blocks"}, "model.blocks": set()},
            "model.core -> model.blocks: imports from a higher layer",
        ),
        (
            {"model.blocks": {"model.links"}, "model.links": set()},
            "model.blocks -> model.links: imports from the same layer",
        ),
        ({"model.newpkg": set()}, "model.newpkg: in no layer"),
    ],
)
def test_a_violation_is_reported(graph: dict[str, set[str]], needle: str) -> None:
    frozen = {k: frozenset(v) for k, v in graph.items()}
    assert any(needle in line for line in violations(frozen)), violations(frozen)


def test_a_cycle_is_shown_by_its_shortest_loop() -> None:
    graph = {k: frozenset(v) for k, v in {"a": "bd", "b": "c", "c": "a", "d": "b"}.items()}
    assert cycles(graph) == [["a", "b", "c", "d"]]
    assert shortest_cycle(graph, ["a", "b", "c", "d"]) == "a -> b -> c -> a"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_kind_of_import_counts(tmp_path: Path) -> None:
    """Type-only, function-local, relative and `from dualpath import x` imports are edges."""
    root = tmp_path / "dualpath"
    _write(root, "__init__.py", "")
    _write(root, "model/core/__init__.py", "")
    _write(root, "model/core/clock.py", "from . import ticks\nfrom .ticks import tick\n")
    _write(root, "model/core/ticks.py", "def tick() -> None: ...\n")
    type_only = (
        "import typing\nif typing.TYPE_CHECKING:\n    from dualpath.model.engines.unit import U\n"
    )
    _write(root, "model/entities/__init__.py", type_only)
    _write(root, "model/engines/__init__.py", "")
    _write(root, "model/engines/unit.py", "from ..core.clock import tick\nclass U: ...\n")
    _write(root, "model/engines/late.py", "def f() -> None:\n    import dualpath.report.build\n")
    _write(root, "report/__init__.py", "")
    _write(
        root,
        "report/build.py",
        "from dualpath.model import engines\nfrom dualpath import plugins\n",
    )
    _write(root, "plugins.py", "import json\nimport dualpath\n")
    graph = import_graph(root)
    assert graph == {
        "__init__": frozenset(),
        "model.core": frozenset(),
        "model.entities": {"model.engines"},
        "model.engines": {"model.core", "report"},
        "report": {"model.engines", "plugins"},
        "plugins": {"__init__"},
    }
    assert cycles(graph) == [["model.engines", "report"]]
    assert "model.entities -> model.engines: imports from a higher layer (1 -> 7)" in violations(
        graph
    )
    assert main([str(root)]) == 1


def test_a_runtime_reaching_a_private_name_is_a_violation(tmp_path: Path) -> None:
    """Each kind of reach-in from a runtime module is reported with its place; the same code
    in the model, a runtime's own private names, dunders and the allowlist are not."""
    root = tmp_path / "dualpath"
    _write(root, "__init__.py", "")
    model = "class S:\n    __slots__ = ('_n',)\n    def _live(self) -> None: ...\n"
    _write(root, "model/engines/sched.py", model + "def _helper() -> None: ...\n")
    _write(
        root, "model/links/use.py", "def f(s: object) -> None:\n    s._n\n"
    )  # model: not checked
    runtime = (
        "from dualpath.model.engines.sched import S, _helper\n"  # line 1: a private import
        "class R(S):\n"
        "    def _own(self) -> None: ...\n"
        "    def go(self, other: S) -> None:\n"
        "        self._live()\n"  # line 5: inherited from the model
        "        other._n\n"  # line 6: another object's
        "        self._own(); self.__class__; other._replace()\n"  # own, dunder, allowed
    )
    _write(root, "runtimes/process/serving/run.py", runtime)
    found = private_reach_ins(root)
    assert found == [
        "runtimes/process/serving/run.py:1: imports _helper from dualpath.model.engines.sched",
        "runtimes/process/serving/run.py:5: self._live: a private name of the model, inherited",
        "runtimes/process/serving/run.py:6: other._n: a private attribute of another object",
    ]
    assert main([str(root)]) == 1
    (root / "runtimes/process/serving/run.py").write_text(
        "class R:\n    def _live(self) -> None:\n        self._live()\n"
    )
    assert private_reach_ins(root) == []  # a runtime's own private method is its own
    assert main([str(root)]) == 0


def test_a_module_of_a_role_folder_is_a_node_and_a_split_module_is_its_own() -> None:
    from dualpath.layers import node_of

    assert node_of("model.engines.prefill") == "model.engines"
    assert node_of("runtimes.process.serving.node") == "runtimes.process.serving"
    assert node_of("runtimes.virtual.sim") == "runtimes.virtual"
    assert node_of("runtimes.cluster") == "runtimes.cluster"
    assert node_of("cli.serve") == "cli.serve"
    assert node_of("loadgen.drive") == "loadgen.drive"
    assert node_of("loadgen.locust_user") == "loadgen"
    assert node_of("report.build") == "report"
