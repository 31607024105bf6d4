"""The import graph between dualpath's packages, and the layer contract it must keep.

`python -m dualpath.layers` prints every edge between packages (and top-level modules such
as `cli/main.py`), then "no cycle" or each cycle, then the declared layers, and exits 1 on a
violation: a cycle, an import of a node in the same or a higher layer, a node no layer
declares, the model importing a runtime, or a runtime using a private name of the model
(`private_reach_ins`). Every import counts, the ones under
`if TYPE_CHECKING:` and inside functions included: a type-only import is still a dependency
a reader has to follow. docs/architecture.md explains the layers; tests/test_layers.py
runs the contract in CI.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

PACKAGE = "dualpath"
ROOT_NODE = "__init__"  # the package's own __init__.py

# Packages whose children are nodes of their own: the layout by role groups the model, the
# runtimes and the commands in folders, but the contract is kept between their parts.
CONTAINERS = ("model", "runtimes", "runtimes.process", "cli")
# Single modules that are nodes of their own inside a node's folder: load generation has one
# home (`loadgen/`), but `drive` starts a local cluster, so it stands above the launcher.
SPLIT = ("loadgen.drive",)

# Bottom first. A node may import only nodes of the layers below its own: siblings in one
# layer stay independent, so moving one never drags another along.
LAYERS: tuple[tuple[str, ...], ...] = (
    # The optional compiled build's loader (the package's __init__ installs it first) and the
    # no-op mypyc decorator the compiled classes carry: standard library only.
    ("native", "compiled", "moved"),
    # records, plug-in loader, logging, stubs; the role folders' own (docstring-only) __init__
    (
        "model.entities",
        "plugins",
        "logs",
        "rpc",
        ROOT_NODE,
        "model",
        "runtimes",
        "runtimes.process",
        "cli",
    ),
    ("model.core",),  # clocks
    # KV blocks, the link fabric, the fault schedule grammar
    ("model.blocks", "model.links", "model.faults"),
    ("model.roofline", "model.workload"),  # compute model, agent scripts and traces
    ("model.config",),  # the scenario, checked against the profile and workload names below it
    ("model.policies",),  # scheduling decisions (pure)
    ("model.engines",),  # prefill/decode units, the global scheduler, the wired Cluster
    ("report",),  # the report from a finished Cluster
    ("runtimes.cluster",),  # the composition root both runtimes use
    ("runtimes.virtual",),  # the virtual-time runtime
    # Redis control plane, HTTP front door, manifests and container control
    ("runtimes.process.control", "runtimes.process.frontdoor", "deploy"),
    ("runtimes.process.serving",),  # the process runtime's services
    ("loadgen",),  # Locust load generation (the client side)
    ("runtimes.process.launcher",),  # local clusters of processes: up, run
    ("loadgen.drive",),  # `dualpath load`: a local cluster driven by Locust
    ("cli.common",),  # what every command shares: one-line errors, output paths, validate
    ("cli.serve_checks",),  # `serve | up | run`: flags and the machine, checked up front
    ("experiments", "cli.progress"),
    (
        "cli.calibrate",
        "cli.catalog",
        "cli.sim",
        "cli.serve",
        "cli.cluster",
        "cli.deploy",
        "cli.experiment",
        "cli.plan",
        "bench",
        "probe",
        "layers",
    ),
    ("api",),  # the public surface for plug-ins: re-exports, above all it names
    ("cli.load",),  # starts a local cluster as `up` does (cli.serve)
    ("cli.main",),
    ("__main__",),
)

# The emulated system itself: what both runtimes share. It never imports a runtime, so the
# same objects run on virtual time and as processes.
MODEL_PREFIX = "model."
MODEL = frozenset(n for layer in LAYERS for n in layer if n.startswith(MODEL_PREFIX))
RUNTIMES = frozenset(
    {"runtimes.cluster", "runtimes.virtual", "loadgen", "loadgen.drive", "experiments"}
    | {n for layer in LAYERS for n in layer if n.startswith("runtimes.process.")}
    | {"deploy", "bench", "api", "__main__"}
)

# Runtimes use only public names of the model (docs/architecture.md, "Seams"). In a runtime
# module the check reports `x._name` on anything but self/cls, `self._name` where the module
# does not define `_name` but a model module does (a private name inherited from the
# model), and `from dualpath.x import _name`. Allowed here, by attribute name (modules move),
# each with its reason:
PRIVATE_ALLOWED: Mapping[str, str] = {
    "_replace": "a namedtuple's public method "
    "(urllib.parse.SplitResult, runtimes/process/control/resilience.py)",
}
SELF = frozenset({"self", "cls"})

Graph = Mapping[str, frozenset[str]]


def is_runtime(node: str) -> bool:
    return node in RUNTIMES or node.startswith("cli.")


def node_of(module: str) -> str:
    """The node of a module path below the package (`model.engines.prefill` -> `model.engines`)."""
    for split in SPLIT:
        if module == split or module.startswith(split + "."):
            return split
    parts = module.split(".")
    depth = 1
    while depth < len(parts) and ".".join(parts[:depth]) in CONTAINERS:
        depth += 1
    return ".".join(parts[:depth])


def nodes_of(root: Path) -> dict[str, list[Path]]:
    """Each node (a subpackage, or a top-level module) and its Python files."""
    out: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        module = ".".join(rel[:-1] if rel[-1] == "__init__" and len(rel) > 1 else rel)
        out.setdefault(node_of(module), []).append(path)
    return out


def _module_name(root: Path, path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(stmt: ast.stmt, module: str, is_package: bool, nodes: Iterable[str]) -> set[str]:
    """The nodes one import statement names, relative imports resolved against `module`."""
    if isinstance(stmt, ast.Import):
        found = {_target(alias.name, nodes) for alias in stmt.names}
    elif isinstance(stmt, ast.ImportFrom):
        base = stmt.module or ""
        if stmt.level:
            anchor = module.split(".")
            anchor = anchor[: len(anchor) - stmt.level + (1 if is_package else 0)]
            base = ".".join([*anchor, base] if base else anchor)
        # `from dualpath import cli` names the node cli; `from dualpath.x import y`, x
        found = {_target(f"{base}.{a.name}", nodes) or _target(base, nodes) for a in stmt.names}
    else:
        return set()
    return {t for t in found if t is not None}


def _target(name: str, nodes: Iterable[str]) -> str | None:
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return ROOT_NODE
    node = node_of(".".join(parts[1:]))
    return node if node in nodes else None


def import_graph(root: Path) -> dict[str, frozenset[str]]:
    """node -> the other nodes it imports, for the package whose folder is `root`."""
    nodes = nodes_of(root)
    graph: dict[str, frozenset[str]] = {}
    for node, files in nodes.items():
        found: set[str] = set()
        for path in files:
            module = _module_name(root, path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    found |= _targets(stmt, module, path.name == "__init__.py", nodes)
        graph[node] = frozenset(found - {node})
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members: list[str] = []
            while not members or members[-1] != v:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_cycle(graph: Graph, members: Sequence[str]) -> str:
    """The shortest import cycle through any of `members`, as `a -> b -> a`."""
    found: list[list[str]] = [p for p in (_path_back(graph, members, v) for v in members) if p]
    shortest: list[str] = min(found, key=len) if found else []
    return " -> ".join(shortest)


def _path_back(graph: Graph, members: Sequence[str], start: str) -> list[str]:
    """The shortest path start -> ... -> start inside `members` (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    return [*paths[v], start]
                if w in members and w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    return []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, names and attributes it
    assigns (`self._x = ...`, `_x: T` in a class body), `__slots__` entries."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Attribute | ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.attr if isinstance(n, ast.Attribute) else n.id)
        elif isinstance(n, ast.Assign) and any(_slots(t) for t in n.targets):
            out.update(str(c.value) for c in ast.walk(n.value) if isinstance(c, ast.Constant))
    return {name for name in out if _private(name)}


def _slots(target: ast.expr) -> bool:
    return isinstance(target, ast.Name) and target.id == "__slots__"


def _reach_in(n: ast.AST, model: set[str], own: set[str]) -> str | None:
    """What in node `n` reaches a private name it should not, or None."""
    if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == PACKAGE:
        names = [a.name for a in n.names if _private(a.name)]
        return f"imports {', '.join(names)} from {n.module}" if names else None
    if not isinstance(n, ast.Attribute) or not _private(n.attr) or n.attr in PRIVATE_ALLOWED:
        return None
    if not (isinstance(n.value, ast.Name) and n.value.id in SELF):
        return f"{ast.unparse(n)}: a private attribute of another object"
    if n.attr in model and n.attr not in own:
        return f"{ast.unparse(n)}: a private name of the model, inherited"
    return None


def private_reach_ins(root: Path) -> list[str]:
    """Every place a runtime module uses a private name it does not own, one line each."""
    nodes = nodes_of(root)
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for f in nodes.values() for p in f}
    model: set[str] = set()
    for node in MODEL & nodes.keys():
        model.update(*(_defined(trees[p]) for p in nodes[node]))
    out: list[tuple[str, int, str]] = []
    for node in sorted(n for n in nodes if is_runtime(n)):
        for path in nodes[node]:
            own = _defined(trees[path])
            for n in ast.walk(trees[path]):
                what = _reach_in(n, model, own)
                if what is not None:
                    out.append((str(path.relative_to(root)), getattr(n, "lineno", 0), what))
    return [f"{path}:{line}: {what}" for path, line, what in sorted(out)]


def violations(graph: Graph, layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """Every way `graph` breaks the contract, one line each (empty: it keeps it)."""
    level = {node: i for i, layer in enumerate(layers) for node in layer}
    out = [f"cycle among {', '.join(c)}: e.g. {shortest_cycle(graph, c)}" for c in cycles(graph)]
    for node in sorted(set(graph) - set(level)):
        out.append(f"{node}: in no layer; add it to LAYERS in dualpath/layers.py")
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            if src in MODEL and is_runtime(dst):
                out.append(f"{src} -> {dst}: the model imports a runtime")
            elif src in level and dst in level and level[dst] >= level[src]:
                where = "the same layer" if level[dst] == level[src] else "a higher layer"
                out.append(f"{src} -> {dst}: imports from {where} ({level[src]} -> {level[dst]})")
    return out


def render(
    graph: Graph, layers: Sequence[Sequence[str]] = LAYERS, reach_ins: Sequence[str] = ()
) -> str:
    edges = sum(len(v) for v in graph.values())
    lines = [f"import graph of {PACKAGE}: {len(graph)} nodes, {edges} edges (every import)"]
    lines += [f"  {src} -> {', '.join(sorted(graph[src]))}" for src in sorted(graph) if graph[src]]
    found = cycles(graph)
    lines.append("no cycle" if not found else f"{len(found)} cycle(s):")
    lines += [f"  among {', '.join(c)}: e.g. {shortest_cycle(graph, c)}" for c in found]
    lines.append("layers, bottom first (a node imports only from the layers below it):")
    lines += [f"  {i:2d}  {', '.join(layer)}" for i, layer in enumerate(layers)]
    problems = [*violations(graph, layers), *reach_ins]
    lines.append("contract: ok" if not problems else f"contract: {len(problems)} violation(s)")
    lines += [f"  {p}" for p in problems]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    root = Path(args[0]) if args else Path(__file__).resolve().parent
    graph = import_graph(root)
    reach_ins = private_reach_ins(root)
    print(render(graph, reach_ins=reach_ins))
    return 1 if violations(graph) or reach_ins else 0


if __name__ == "__main__":
    sys.exit(main())
