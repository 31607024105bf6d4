"""The plug-in loader with fake entry points: what loads, what is skipped, what every message
names (distribution, entry point, fix), and that built-ins survive a broken plug-in."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import pytest

from dualpath.experiments.base import Experiment, Results, RunSpec, Summary
from dualpath.experiments.registry import experiment_catalog
from dualpath.model.config.workload_sources import WORKLOAD_SOURCES, WorkloadSource, source_catalog
from dualpath.model.entities.request import NodeState, ReadPath, Request
from dualpath.model.policies.base import Limits
from dualpath.model.policies.dualpath import DualPath
from dualpath.model.policies.registry import (
    UnknownPolicyError,
    build_registry,
    builtin_policies,
    default_registry,
    policy_catalog,
)
from dualpath.model.roofline import profile_files
from dualpath.model.roofline.profile_files import build_shelf, plugin_folders
from dualpath.model.roofline.profiles import ProfileError, gpu_names, load_gpu
from dualpath.plugins import EXPERIMENTS, GROUPS, POLICIES, PROFILES, Catalog
from dualpath.plugins import WORKLOAD_SOURCES as SOURCES
from tests.paths import REPO

LIMITS = Limits(alpha=100, beta=100, compute_quota_s=0.3, kv_bytes_per_token=10)
BUILTINS = [cls.name for cls in builtin_policies()]


@dataclass(frozen=True)
class FakeDist:
    name: str
    version: str = "0.1"


@dataclass
class FakeEntryPoint:
    """An entry point whose `load()` returns `obj`, or raises `error` when given."""

    name: str
    group: str
    obj: object = None
    error: Exception | None = None
    dist: FakeDist | None = field(default_factory=lambda: FakeDist("my-research"))
    value: str = "my_research.policies:Thing"

    def load(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.obj


class AlwaysDe(DualPath):
    name = "always-de"
    description = "DualPath assignment, every read on the DE side"

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        return ReadPath.DE


def _policy(obj: object, name: str = "always-de", **kw: Any) -> FakeEntryPoint:
    return FakeEntryPoint(name, POLICIES, obj, **kw)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dualpath.plugins"]


# --- policies --------------------------------------------------------------------------------


def test_a_plugin_policy_joins_the_builtins_and_runs() -> None:
    found = policy_catalog([_policy(AlwaysDe)])
    reg = build_registry(found)
    assert reg.names() == [*BUILTINS, "always-de"]
    assert reg.describe()["always-de"] == AlwaysDe.description
    policy = reg.create("always-de", LIMITS, 0)
    assert isinstance(policy, AlwaysDe)
    assert found.origins["always-de"] == (
        "plug-in entry point 'always-de' (group dualpath.policies) of my-research 0.1"
    )


def test_a_plugin_that_fails_to_import_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ep = _policy(None, error=ModuleNotFoundError("No module named 'my_research'"))
    reg = build_registry(policy_catalog([ep]))
    assert reg.names() == BUILTINS  # the built-ins are untouched
    (line,) = _warnings(caplog)
    assert line.startswith("warning: plug-in entry point 'always-de' (group dualpath.policies)")
    assert "of my-research 0.1: cannot load 'my_research.policies:Thing'" in line
    assert "ModuleNotFoundError: No module named 'my_research'" in line
    assert "fix or uninstall my-research" in line
    with pytest.raises(UnknownPolicyError, match=r"policy 'always-de' .*cannot load"):
        reg.get("always-de")


def test_any_exception_at_import_is_a_problem_not_a_crash() -> None:
    found = policy_catalog([_policy(None, error=ZeroDivisionError("division by zero"))])
    assert "ZeroDivisionError: division by zero" in found.refused["always-de"]


class _Abstract(DualPath):
    name = "abstract-one"


_Abstract.__abstractmethods__ = frozenset({"assign_prefill"})


class _Misnamed(AlwaysDe):
    name = "something-else"


@pytest.mark.parametrize(
    ("obj", "ep_name", "needle"),
    [
        (lambda: None, "always-de", "is a function; expected a SchedulingPolicy subclass"),
        (int, "always-de", "is the class builtins.int; expected a SchedulingPolicy subclass"),
        (_Abstract, "abstract-one", "leaves assign_prefill abstract; implement them"),
        (_Misnamed, "always-de", "has name 'something-else'; set the policy's name to"),
    ],
)
def test_a_wrong_object_is_refused_with_what_was_expected(
    obj: object, ep_name: str, needle: str
) -> None:
    reg = build_registry(policy_catalog([_policy(obj, name=ep_name)]))
    with pytest.raises(UnknownPolicyError) as err:
        reg.get(ep_name)
    assert needle in str(err.value)
    assert "of my-research 0.1" in str(err.value)


def test_a_plugin_with_a_builtin_name_is_skipped_and_the_builtin_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reg = build_registry(policy_catalog([_policy(AlwaysDe, name="dualpath")]))
    assert reg.get("dualpath") is DualPath
    (line,) = _warnings(caplog)
    assert "'dualpath' is a built-in policy name; rename the entry point in my-research" in line
    assert '[project.entry-points."dualpath.policies"]' in line


def test_a_name_two_plugins_claim_is_refused_naming_both() -> None:
    eps = [_policy(AlwaysDe), _policy(AlwaysDe, dist=FakeDist("other-lab", "2.0"))]
    reg = build_registry(policy_catalog(eps))
    assert "always-de" not in reg.names()
    with pytest.raises(UnknownPolicyError, match=r"my-research 0\.1 and by .*other-lab 2\.0"):
        reg.get("always-de")


def test_a_real_entry_point_object_is_accepted() -> None:
    # An EntryPoint made by hand has no distribution: the message says so instead.
    ep = metadata.EntryPoint("always-de", f"{__name__}:AlwaysDe", POLICIES)
    assert build_registry(policy_catalog([ep])).get("always-de") is AlwaysDe
    bad = metadata.EntryPoint("always-de", f"{__name__}:Nope", POLICIES)
    assert "of an unnamed distribution: cannot load" in policy_catalog([bad]).refused["always-de"]


@pytest.fixture
def fresh_default() -> Iterator[None]:
    default_registry.cache_clear()
    yield
    default_registry.cache_clear()  # the next test sees the installed policies only


@pytest.mark.usefixtures("fresh_default")
def test_register_on_the_default_registry_is_seen_by_later_callers() -> None:
    default_registry().register(AlwaysDe)
    assert default_registry().get("always-de") is AlwaysDe


# --- workload sources, experiments -----------------------------------------------------------


def _source(name: str) -> WorkloadSource:
    return WorkloadSource(name, False, WORKLOAD_SOURCES["synthetic"].build, "a test source")


def test_a_plugin_workload_source_joins_the_builtins() -> None:
    found = source_catalog([FakeEntryPoint("lab-trace", SOURCES, _source("lab-trace"))])
    assert list(found.items) == [*WORKLOAD_SOURCES, "lab-trace"]


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ("not a source", "is a str; expected a WorkloadSource"),
        (_source("other"), "has name 'other'; set the workload source's name to"),
    ],
)
def test_a_wrong_workload_source_is_refused(obj: object, needle: str) -> None:
    found = source_catalog([FakeEntryPoint("lab-trace", SOURCES, obj)])
    assert needle in (found.problem("lab-trace") or "")


class LabExperiment(Experiment):
    name = "lab-sweep"
    title = "a lab's own sweep"

    def plan(self, quick: bool) -> list[RunSpec]:
        return []

    def summarize(self, quick: bool, results: Results) -> Summary:
        return Summary()


class NeedsArgs(LabExperiment):
    name = "lab-sweep2"

    def __init__(self, grid: list[int]) -> None:
        self.grid = grid


def test_plugin_experiments_join_and_list_stays_a_command() -> None:
    eps = [
        FakeEntryPoint("lab-sweep", EXPERIMENTS, LabExperiment),
        FakeEntryPoint("list", EXPERIMENTS, LabExperiment),
        FakeEntryPoint("lab-sweep2", EXPERIMENTS, NeedsArgs),
    ]
    found = experiment_catalog(eps)
    assert list(found.items)[-1] == "lab-sweep"
    assert "'list' is a built-in experiment name" in found.refused["list"]
    assert "cannot be created without arguments (TypeError" in found.refused["lab-sweep2"]


# --- profiles --------------------------------------------------------------------------------


def _profile_folder(root: Path, *gpus: str) -> Path:
    shipped = resources.files("dualpath").joinpath("profiles", "gpus", "h800.yaml")
    (root / "gpus").mkdir(parents=True)
    for name in gpus:
        text = shipped.read_text(encoding="utf-8").replace("name: h800", f"name: {name}", 1)
        (root / "gpus" / f"{name}.yaml").write_text(text, encoding="utf-8")
    return root


def test_a_plugin_profile_folder_adds_gpus_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _profile_folder(tmp_path / "lab", "lab-gpu")
    folders = plugin_folders([FakeEntryPoint("lab", PROFILES, str(folder))])
    shelf = build_shelf("gpus", folders)
    monkeypatch.setattr(profile_files, "_shelves", lambda: {"gpus": shelf})
    assert gpu_names()[-1] == "lab-gpu"
    assert load_gpu("lab-gpu").name == "lab-gpu"
    assert load_gpu("h800").name == "h800"
    label = shelf.files["lab-gpu"][0]
    assert label == (
        "gpus/lab-gpu.yaml of plug-in entry point 'lab' (group dualpath.profiles)"
        " of my-research 0.1"
    )


def test_a_package_is_a_profile_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (_profile_folder(tmp_path / "lab_profiles", "lab-gpu") / "__init__.py").touch()
    (tmp_path / "lab_module.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    package = importlib.import_module("lab_profiles")
    module = importlib.import_module("lab_module")
    folders = plugin_folders(
        [FakeEntryPoint("pkg", PROFILES, package), FakeEntryPoint("mod", PROFILES, module)]
    )
    assert "lab-gpu" in build_shelf("gpus", folders).files
    assert "is the module lab_module, not a package; name a package" in folders.refused["mod"]


def test_profile_clashes_skip_or_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    a = _profile_folder(tmp_path / "a", "h800", "lab-gpu")
    b = _profile_folder(tmp_path / "b", "lab-gpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    eps = [
        FakeEntryPoint("a", PROFILES, a),
        FakeEntryPoint("b", PROFILES, b, dist=FakeDist("other-lab")),
        FakeEntryPoint("c", PROFILES, empty),
    ]
    folders = plugin_folders(eps)
    assert "which has neither gpus/ nor models/" in folders.refused["c"]
    shelf = build_shelf("gpus", folders)
    assert shelf.files["h800"][0] == "profiles/gpus/h800.yaml"  # the shipped one stays
    assert any("'h800' is a shipped gpu profile; rename the file" in w for w in _warnings(caplog))
    monkeypatch.setattr(profile_files, "_shelves", lambda: {"gpus": shelf})
    with pytest.raises(ProfileError, match=r"gpu 'lab-gpu': .*my-research.*other-lab"):
        load_gpu("lab-gpu")


def test_catalog_problem_is_none_for_a_working_name() -> None:
    found: Catalog[int] = Catalog({"a": 1}, {"a": "stale", "b": "broken"})
    assert found.problem("a") is None
    assert found.problem("b") == "broken"
    assert found.problem("c") is None


def test_the_groups_are_the_documented_ones() -> None:
    documented = REPO.joinpath("docs", "plugins.md").read_text()
    assert GROUPS == (
        "dualpath.policies",
        "dualpath.profiles",
        "dualpath.workload_sources",
        "dualpath.experiments",
    )
    for group in GROUPS:
        assert f"`{group}`" in documented
