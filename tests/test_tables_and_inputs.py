"""Tables are namespaces, scopes are measured, and every bad input gets a named error."""

from __future__ import annotations

import json

import pytest
import torch
from liger_kernel.transformers.layer_norm import LigerLayerNorm
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from typer.testing import CliRunner

from ligerkit import LigerPatch
from ligerkit.cli import app
from ligerkit.errors import (
    FamilyResolutionError,
    InvalidOptionError,
    UncataloguedReplacementError,
    UnreachableSwapError,
)
from toy_models import modeling_encoder as enc

ENC = "toy_models.modeling_encoder"
runner = CliRunner()


def test_nemotron_table_swap_is_reported_process_wide_and_reverted(kit):
    from transformers import activations
    from transformers.models.nemotron import modeling_nemotron

    before = dict.__getitem__(activations.ACT2FN, "relu2")
    report = kit.apply(model_family="nemotron")
    swap = next(s for s in report.patched if s.name == "relu_squared")
    assert (swap.attr, swap.scope) == ("ACT2FN['relu2']", "process")
    assert "relu_squared" not in {n.split(":")[1] for n in report.noop_flags}
    assert dict.__getitem__(modeling_nemotron.ACT2FN, "relu2").__name__ == "LigerReLUSquared"
    kit.revert()
    assert dict.__getitem__(activations.ACT2FN, "relu2") is before


def test_internvl_auto_leaves_unreachable_modules_off_with_the_reason_and_plans_clean():
    result = runner.invoke(app, ["plan", "--family", "internvl", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    left_off = data["report"]["left_off"]
    assert "NORM2FN['layer_norm'] still holds" in left_off["internvl:layer_norm"]
    assert data["report"]["modules"]["layer_norm"] is False
    assert data["scan"]["leftovers"] == {}


def test_internvl_explicit_layer_norm_that_cannot_reach_is_an_error(kit):
    import torch.nn

    original = torch.nn.LayerNorm
    with pytest.raises(UnreachableSwapError, match="NORM2FN"):
        kit.apply(model_family="internvl", modules={"layer_norm": True})
    assert torch.nn.LayerNorm is original and not kit.active


def test_scope_is_measured_for_a_custom_patch_that_reaches_torch_nn(kit):
    import torch.nn

    report = kit.apply(custom_patches={"layer_norm": LigerPatch("transformers.models.llama.modeling_llama",
                                                                "nn.LayerNorm", LigerLayerNorm)})
    assert torch.nn.LayerNorm is LigerLayerNorm
    assert [(s.module, s.scope) for s in report.patched] == [("torch.nn", "process")]
    assert any("process-wide" in note for note in report.applications[0].notes)


def test_uncatalogued_replacement_is_an_error_unless_the_probe_is_turned_off(kit):
    with pytest.raises(UncataloguedReplacementError, match="skip_probe"):
        kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", torch.nn.LayerNorm)})
    assert enc.EncoderRMSNorm.__module__ == ENC and not kit.active
    report = kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", torch.nn.LayerNorm)},
                       skip_probe=["rms_norm"])
    assert report.unprobed and "turned off by the caller" in report.unprobed[0]


@pytest.mark.parametrize("kwargs, message", [
    ({"model_family": 123}, "non-empty string"),
    ({"model_family": ""}, "non-empty string"),
    ({"model_family": "qwen3", "modules": {}}, "empty mapping"),
    ({"model_family": "qwen3", "modules": {"rope": "yes"}}, "mapping"),
    ({"model_family": "qwen3", "excluded_modules": "cross_entropy"}, "list of module names"),
    ({"model_family": "qwen3", "excluded_modules": ["rope", "rope"]}, "more than once"),
    ({"model_family": "qwen3", "excluded_modules": [""]}, "module name"),
    ({"model_name_or_path": 3.5}, "local path"),
])
def test_bad_apply_arguments_are_named_errors(kit, kwargs, message):
    with pytest.raises(InvalidOptionError, match=message):
        kit.apply(**kwargs)
    assert not kit.active


@pytest.mark.parametrize("content", ["[1, 2]", "null", '"qwen3"', "{}", '{"model_type": 3}'])
def test_config_json_that_is_not_an_object_with_a_model_type(kit, tmp_path, content):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(FamilyResolutionError, match="model_type"):
        kit.apply(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["plan", "--family", "qwen3", "--exclude", ""], "empty name"),
    (["plan", "--family", "qwen3", "--exclude", "rope,,swiglu"], "empty name"),
    (["plan", "--family", "qwen3", "--exclude", "rope,rope"], "twice"),
    (["plan", "--family", ""], "--family is empty"),
    (["plan", "--modules", "rope=on,rope=off"], "twice"),
    (["plan", "--modules", ""], "cannot read"),
    (["plan", "--modules", "rope=on,"], "cannot read"),
])
def test_empty_and_duplicate_cli_values_are_errors(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("kwargs, message", [
    ({"strict": "no"}, "True or False"),
    ({"trust_remote_code": "x"}, "True or False"),
    ({"config": object()}, "official route"),
    ({"probe": False}, "official route"),
    ({"skip_probe": ["rope"]}, "official route"),
])
def test_official_route_refuses_options_it_would_ignore(kit, kwargs, message):
    with pytest.raises(InvalidOptionError, match=message):
        kit.apply(model_family="qwen3", **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"skip_probe": "rms_norm"}, "skip_probe"),
    ({"skip_probe": None}, "skip_probe"),
    ({"config": 5}, "config object"),
    ({"probe": None}, "True or False"),
])
def test_custom_route_checks_its_options(kit, kwargs, message):
    with pytest.raises(InvalidOptionError, match=message):
        kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)}, **kwargs)
    assert not kit.active


def test_a_plain_class_cannot_replace_an_nn_module(kit):
    from ligerkit.errors import KindMismatchError

    with pytest.raises(KindMismatchError, match="nn.Module"):
        kit.apply(custom_patches={"x": LigerPatch(ENC, "EncoderRMSNorm", int)}, probe=False)


def test_scan_refuses_a_scripted_model(kit):
    with pytest.raises(InvalidOptionError, match="eager"):
        kit.scan(torch.jit.script(torch.nn.Linear(2, 2)))
