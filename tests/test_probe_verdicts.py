"""The decision table as code: probes accept the right replacement and reject the wrong one,
the kit probes custom maps before swapping, and suggest agrees with hand-read transformers files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from liger_kernel.transformers.geglu import LigerGEGLUMLP
from liger_kernel.transformers.rms_norm import LigerRMSNorm, LigerRMSNormForGemma2
from typer.testing import CliRunner

from ligerkit import LigerPatch
from ligerkit.cli import app
from ligerkit.errors import ProbeMismatchError
from ligerkit.probe.catalog import CATALOG, by_kind, render_table
from ligerkit.probe.probe import probe
from ligerkit.suggest import suggest
from toy_models import modeling_table as T
from probe_expectations import FAMILIES

CFG = T.TableConfig()
NAMED = {r.name: r for r in CATALOG}


def verdict(source, name, config=CFG):
    return probe(source, NAMED[name], config, T)


@pytest.mark.parametrize("source, right", [
    (T.StandardRMSNorm, "LigerRMSNorm"),
    (T.GemmaStyleRMSNorm, "LigerRMSNormForGemma2"),
    (T.WeightInFloat32RMSNorm, "LigerRMSNormForGemma4"),
    (T.AffineLayerNorm, "LigerLayerNorm"),
    (T.GatedSiluMLP, "LigerSwiGLUMLP"),
    (T.GatedTanhGeluMLP, "LigerGEGLUMLP"),
    (T.FusedGateUpMLP, "LigerPhi3SwiGLUMLP"),
    (T.standard_rotary, "liger_rotary_pos_emb"),
    (T.partial_rotary, "liger_rotary_pos_emb"),
    (T.multimodal_rotary, "liger_multimodal_rotary_pos_emb"),
])
def test_each_table_row_matches_exactly_one_replacement(source, right):
    kind = NAMED[right].kind
    results = {r.name: probe(source, r, T.TableConfig(hidden_act="gelu_pytorch_tanh") if right == "LigerGEGLUMLP"
                             else CFG, T) for r in by_kind(kind)}
    assert results[right].ok, results[right].reasons
    assert [n for n, r in results.items() if r.ok] == [right]


def test_gemma_norm_swapped_for_the_standard_one_fails():
    result = verdict(T.GemmaStyleRMSNorm, "LigerRMSNorm")
    assert not result.ok and any("forward differs" in r for r in result.reasons)


def test_casting_order_is_caught_in_bfloat16_only():
    result = verdict(T.WeightInFloat32RMSNorm, "LigerRMSNorm")
    assert not result.ok
    assert all(r.startswith("bfloat16") for r in result.reasons), result.reasons


@pytest.mark.parametrize("source, reason", [
    (T.GatedErfGeluMLP, "differs"),
    (T.BiasedSiluMLP, "drops parameters"),
    (T.DropoutSiluMLP, "dropout"),
    (T.ReluSquaredMLP, "parameters"),
])
def test_no_gated_mlp_replacement_for_these(source, reason):
    config = T.TableConfig(hidden_act="gelu_pytorch_tanh") if source is T.GatedErfGeluMLP else CFG
    results = [probe(source, r, config, T) for r in by_kind("mlp")]
    assert not any(r.ok for r in results)
    assert any(reason in text for r in results for text in r.reasons)


def test_exact_erf_gelu_does_not_map_to_geglu():
    result = verdict(T.GatedErfGeluMLP, "LigerGEGLUMLP", T.TableConfig(hidden_act="gelu"))
    assert not result.ok


def test_mrope_does_not_map_to_standard_rope():
    result = verdict(T.multimodal_rotary, "liger_rotary_pos_emb")
    assert not result.ok and "mrope_section" in result.reasons[0]


@pytest.mark.parametrize("source", [T.interleaved_rotary, T.other_sign_rotary])
def test_other_rotary_conventions_are_left_off(source):
    assert not any(probe(source, r, CFG, T).ok for r in by_kind("rope"))


def test_bias_free_layer_norm_does_not_gain_a_trainable_bias():
    result = verdict(T.BiasFreeLayerNorm, "LigerLayerNorm")
    assert not result.ok and "adds parameters ['bias']" in result.reasons[0]


def test_kit_refuses_a_wrong_replacement_and_names_the_right_one(kit):
    with pytest.raises(ProbeMismatchError, match="Use LigerRMSNormForGemma2 instead"):
        kit.apply(custom_patches={"rms_norm": LigerPatch("toy_models.modeling_table", "GemmaStyleRMSNorm",
                                                         LigerRMSNorm)})
    assert not kit.active
    with pytest.raises(ProbeMismatchError, match="leave it off"):
        kit.apply(config=T.TableConfig(hidden_act="gelu"), custom_patches={
            "geglu": LigerPatch("toy_models.modeling_table", "GatedErfGeluMLP", LigerGEGLUMLP)})


def test_kit_probes_and_reports_a_right_map(kit):
    report = kit.apply(custom_patches={"rms_norm": LigerPatch("toy_models.modeling_table", "GemmaStyleRMSNorm",
                                                              LigerRMSNormForGemma2)})
    assert report.applications[0].probed == (
        "rms_norm: toy_models.modeling_table.GemmaStyleRMSNorm -> "
        "liger_kernel.transformers.rms_norm.LigerRMSNormForGemma2: match",)
    assert report.unprobed == ()


def test_without_a_config_config_built_modules_are_listed_unprobed(kit):
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    report = kit.apply(custom_patches={"swiglu": LigerPatch("toy_models.modeling_table", "GatedSiluMLP",
                                                            LigerSwiGLUMLP)})
    assert len(report.unprobed) == 1 and "pass config=" in report.unprobed[0]


def test_kit_reads_the_probe_config_from_model_name_or_path(kit, tmp_path):
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=1,
                hidden_act="gelu").save_pretrained(tmp_path)
    with pytest.raises(ProbeMismatchError, match="not supported"):
        kit.apply(tmp_path, custom_patches={"swiglu": LigerPatch("transformers.models.llama.modeling_llama",
                                                                 "LlamaMLP", LigerSwiGLUMLP)})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_suggest_agrees_with_the_hand_read_verdicts(family):
    spec = FAMILIES[family]
    found = {c.symbol: (c.replacement if c.verdict == "match" else "leave_off")
             for c in suggest(spec["module"], spec["config_class"]).candidates}
    assert {s: found.get(s) for s in spec["expect"]} == {s: v for s, (v, _) in spec["expect"].items()}
    for symbol, flip in spec.get("flips", {}).items():
        overrides = {k: v for k, v in flip.items() if k != "verdict"}
        flipped = {c.symbol: (c.replacement if c.verdict == "match" else "leave_off")
                   for c in suggest(spec["module"], spec["config_class"], overrides).candidates}
        assert flipped[symbol] == flip["verdict"], (symbol, overrides)


def test_expectations_cover_the_required_cases():
    verdicts = [v for spec in FAMILIES.values() for v, _ in spec["expect"].values()]
    assert len(FAMILIES) >= 15
    assert "LigerRMSNormForGemma2" in verdicts  # a Gemma-style norm family
    assert any("bias" in k for spec in FAMILIES.values() for f in spec.get("flips", {}).values() for k in f)
    reasons = " ".join(r for spec in FAMILIES.values() for _, r in spec["expect"].values())
    assert "non-gated" in reasons or "no gate" in reasons
    assert "partial" in json.dumps(FAMILIES)


def test_suggest_cli_prints_a_map_that_the_kit_accepts(kit):
    result = CliRunner().invoke(app, ["suggest", "transformers.models.olmo.modeling_olmo"])
    assert result.exit_code == 0, result.output
    code = result.stdout[result.stdout.index("from liger_kernel"):]
    namespace: dict = {}
    exec(code, namespace)  # the printed map is valid Python
    from transformers import OlmoConfig

    report = kit.apply(model_family="olmo", custom_patches=namespace["custom_patches"],
                       config=OlmoConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                         num_key_value_heads=2, num_hidden_layers=1))
    assert {s.attr for s in report.patched} == {"OlmoMLP", "apply_rotary_pos_emb"}
    assert report.unprobed == ()


def test_suggest_cli_json_and_a_vendored_file():
    result = CliRunner().invoke(app, ["suggest", "recipes/custom_lm/model/modeling_custom_lm.py", "--config",
                                      "recipes.custom_lm.model.modeling_custom_lm:CustomLMConfig", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {c["symbol"]: c["replacement"] for c in data["candidates"]} == {
        "CustomRMSNorm": "LigerRMSNormForGemma2", "CustomMLP": "LigerGEGLUMLP",
        "apply_rotary_pos_emb": "liger_rotary_pos_emb"}


def test_guide_renders_the_decision_table_from_the_catalog():
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    assert render_table() in guide


def test_a_class_built_two_ways_in_one_model_is_left_off():
    """esmc builds EsmcLayerNorm with a bias in some places and without in others: one probe
    cannot stand for both, and LigerLayerNorm would give the bias-free ones a trainable bias."""
    found = {c.symbol: c for c in suggest("transformers.models.esmc.modeling_esmc", "transformers.EsmcConfig").candidates}
    assert found["EsmcLayerNorm"].verdict == "leave_off"
    assert "different parameters in different places" in found["EsmcLayerNorm"].reason


def test_a_class_the_model_never_builds_is_left_off_and_the_config_decides():
    module = "transformers.models.qwen3_moe.modeling_qwen3_moe"
    sparse = {c.symbol: c for c in suggest(module).candidates}
    assert sparse["Qwen3MoeMLP"].verdict == "leave_off" and "never instantiates" in sparse["Qwen3MoeMLP"].reason
    dense_first = {c.symbol: c for c in suggest(module, None, {"mlp_only_layers": [0]}).candidates}
    assert dense_first["Qwen3MoeMLP"].replacement == "LigerSwiGLUMLP"
