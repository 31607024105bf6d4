"""Profile loading: names, paths, error messages, sources."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from dualpath.model.roofline import ProfileError, gpu_names, load_gpu, load_model, model_names


def test_shipped_names() -> None:
    assert model_names() == ["deepseek-v3", "deepseek-v3.2", "ds-27b", "qwen2.5-32b"]
    assert gpu_names() == ["b200", "h100", "h200", "h800", "h800-mha"]


@pytest.mark.parametrize("name", model_names())
def test_every_model_cites_a_source(name: str) -> None:
    m = load_model(name)
    assert m.name == name and "docs/sources.md" in m.source


@pytest.mark.parametrize("name", gpu_names())
def test_every_gpu_cites_sources_for_each_efficiency_block(name: str) -> None:
    g = load_gpu(name)
    assert g.name == name and "docs/sources.md" in g.source
    assert "S3" in g.kernel.source and "S4" in g.kernel.source
    assert "S5" in g.end_to_end.source or "H800 fit" in g.end_to_end.source


def test_gpu_peaks() -> None:
    b200 = load_gpu("b200")
    assert (b200.bf16_tflops, b200.fp8_tflops, b200.hbm_gb, b200.hbm_tb_s) == (
        2250,
        4500,
        180,
        7.7,
    )
    assert load_gpu("h800").peak_flops("fp8") == 1979e12


def test_unknown_model_lists_accepted_values() -> None:
    with pytest.raises(ProfileError) as exc:
        load_model("foo")
    msg = str(exc.value)
    assert "unknown model 'foo'" in msg
    assert "accepted: deepseek-v3, deepseek-v3.2, ds-27b, qwen2.5-32b" in msg


def test_unknown_gpu_lists_accepted_values() -> None:
    accepted = "b200, h100, h200, h800, h800-mha"
    with pytest.raises(ProfileError, match=rf"unknown gpu 'a100'; accepted: {accepted}"):
        load_gpu("a100")


def test_profile_error_is_a_value_error() -> None:
    assert issubclass(ProfileError, ValueError)


def _shipped(kind: str, name: str) -> dict[str, object]:
    loader = load_model if kind == "models" else load_gpu
    return loader(name).model_dump()


def test_load_by_path(tmp_path: Path) -> None:
    data = _shipped("models", "qwen2.5-32b")
    data["name"] = "my-qwen"
    path = tmp_path / "my-qwen.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    assert load_model(str(path)).name == "my-qwen"


def test_missing_file_path(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="gpu profile file not found"):
        load_gpu(str(tmp_path / "nope.yaml"))


def test_malformed_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match=r"bad\.yaml: malformed YAML"):
        load_model(str(path))


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    data = _shipped("gpus", "h800")
    del data["hbm_tb_s"]
    kernel = data["kernel"]
    assert isinstance(kernel, dict)
    del kernel["gemm_max"]
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    with pytest.raises(ProfileError) as exc:
        load_gpu(str(path))
    msg = str(exc.value)
    assert "gpu.yaml" in msg and "field 'hbm_tb_s'" in msg and "field 'kernel.gemm_max'" in msg


def test_attention_kind_requires_its_fields(tmp_path: Path) -> None:
    data = _shipped("models", "deepseek-v3.2")
    attention = data["attention"]
    assert isinstance(attention, dict)
    attention["index_topk"] = 0
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    with pytest.raises(ProfileError, match="index_topk"):
        load_model(str(path))


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ProfileError, match="mapping"):
        load_gpu(str(path))


def test_profiles_are_frozen() -> None:
    m = load_model("deepseek-v3.2")
    with pytest.raises(ValidationError):
        m.layers = 3  # type: ignore[misc]
