"""A match is about the calls the model makes: every call of a judged symbol in the whole model is
recorded and replayed, and a replacement that differs at any call site is left off (``suggest``),
refused (the custom route) or reported (the official route), naming the call site and the argument."""

from __future__ import annotations

import json

import pytest
import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
from toy_models import modeling_call_sites as M
from toy_models import modeling_indexer as I
from typer.testing import CliRunner

from ligerkit import LigerPatch
from ligerkit.cli import app
from ligerkit.errors import ProbeMismatchError, ReplacementMismatchError
from ligerkit.kit.official_probe import probe_official
from ligerkit.kit.snapshot import Change
from ligerkit.probe import reference as R
from ligerkit.probe import call_sites, replay
from ligerkit.probe.catalog import by_name
from ligerkit.suggest import suggest

SITES = "toy_models.modeling_call_sites"
CONFIG = "toy_models.modeling_call_sites:CallSitesConfig"


def _suggest(**settings):
    found = suggest(SITES, CONFIG, settings or None)
    return {c.symbol: c for c in found.candidates}


def test_a_rotary_called_with_a_layout_keyword_at_one_site_is_left_off_naming_it():
    found = _suggest(rope_layout="bshd")["apply_rotary_pos_emb"]
    assert found.verdict == "leave_off" and found.replacement is None
    assert "modeling_call_sites.py:" in found.reason and "unsqueeze_dim=2 (default 1)" in found.reason
    differs = found.differs_at_call_sites["liger_rotary_pos_emb"]
    assert differs["verdict"] == "differs" and differs["sites"] == 2 and differs["signatures"] == 2
    (difference,) = differs["differences"]  # the other site, called the standard way, matches
    assert difference["argument"] == "unsqueeze_dim=2 (default 1)"
    assert all("SitesAttention.forward" in site for site in difference["sites"])


def test_the_same_rotary_called_the_standard_way_everywhere_matches_with_its_call_sites_counted():
    found = _suggest()["apply_rotary_pos_emb"]
    assert found.verdict == "match" and found.replacement == "liger_rotary_pos_emb"
    calls = found.call_sites
    assert calls["verdict"] == "match" and calls["compared"] == calls["signatures"] == 1
    assert calls["calls"] == 4 and calls["sites"] == 1  # two attentions a layer, two layers, one line
    assert "on every call the whole model makes" in found.reason


def test_the_custom_route_refuses_that_rotary_naming_the_call_site_and_changes_nothing(kit):
    patch = {"rope": LigerPatch(SITES, "apply_rotary_pos_emb", liger_rotary_pos_emb)}
    with pytest.raises(ReplacementMismatchError, match=r"modeling_call_sites\.py:\d+.*unsqueeze_dim=2") as caught:
        kit.apply(model_family="sites", custom_patches=patch, config=M.CallSitesConfig(rope_layout="bshd"))
    assert isinstance(caught.value, ProbeMismatchError) and "skip_probe=['rope']" in str(caught.value)
    assert M.apply_rotary_pos_emb is not liger_rotary_pos_emb and not kit.report.patched


def test_a_user_who_proved_it_opts_in_and_the_report_says_unprobed(kit):
    patch = {"rope": LigerPatch(SITES, "apply_rotary_pos_emb", liger_rotary_pos_emb)}
    report = kit.apply(model_family="sites", custom_patches=patch, config=M.CallSitesConfig(rope_layout="bshd"),
                       skip_probe=["rope"])
    assert M.apply_rotary_pos_emb is liger_rotary_pos_emb
    assert any("turned off by the caller" in line for line in report.unprobed)


def test_the_custom_route_reports_every_call_it_compared(kit):
    patch = {"rms_norm": LigerPatch(SITES, "SitesRMSNorm", LigerRMSNorm)}
    report = kit.apply(model_family="sites", custom_patches=patch, config=M.CallSitesConfig())
    (line,) = report.applications[0].probed
    assert "on every call the whole model makes (7 call(s) from 4 call site(s), 2 of 2 signature(s)" in line


def test_a_norm_whose_eps_is_set_after_construction_at_one_site_differs_there():
    found = _suggest(late_eps=0.01)["SitesRMSNorm"]
    differs = found.differs_at_call_sites["LigerRMSNorm"]
    (difference,) = differs["differences"]
    assert difference["argument"] == "eps=0.01 (set after construction)"
    assert difference["sites"] == [s for s in difference["sites"] if "SitesForCausalLM.forward" in s]
    assert found.verdict == "leave_off"


def test_norms_built_with_another_eps_per_layer_are_one_signature_each_and_all_match():
    found = _suggest(eps_per_layer=True)["SitesRMSNorm"]
    assert found.verdict == "match"
    # layer 0 and layer 1 of the whole model as run (their own eps), and the final norm (another constructor call)
    assert found.call_sites["signatures"] == 3 and found.call_sites["compared"] == 3


def test_the_custom_route_refuses_a_norm_the_model_retunes_after_construction(kit):
    patch = {"rms_norm": LigerPatch(SITES, "SitesRMSNorm", LigerRMSNorm)}
    with pytest.raises(ReplacementMismatchError, match=r"eps=0\.01 \(set after construction\)"):
        kit.apply(model_family="sites", custom_patches=patch, config=M.CallSitesConfig(late_eps=0.01))


def test_layers_made_as_copies_of_a_built_one_are_judged_with_its_constructor_arguments():
    found = _suggest(copy_layers=True)
    for symbol in ("SitesRMSNorm", "SitesScaledMLP"):
        calls = found[symbol].call_sites
        assert found[symbol].verdict == "match" and calls["verdict"] == "match", calls
        assert calls["compared"] == calls["signatures"]


def test_an_mlp_subclass_whose_own_forward_takes_an_argument_the_model_passes_is_left_off():
    found = _suggest(mlp_scale=0.5)["SitesScaledMLP"]
    assert found.verdict == "leave_off"
    (difference,) = found.differs_at_call_sites["LigerSwiGLUMLP"]["differences"]
    assert difference["argument"] == "scale=0.5" and "does not fit LigerSwiGLUMLP.forward" in difference["detail"]
    assert _suggest()["SitesScaledMLP"].replacement == "LigerSwiGLUMLP"  # called without the scale: a match


def test_the_custom_route_refuses_that_mlp(kit):
    patch = {"swiglu": LigerPatch(SITES, "SitesScaledMLP", LigerSwiGLUMLP)}
    with pytest.raises(ReplacementMismatchError, match="scale=0.5"):
        kit.apply(model_family="sites", custom_patches=patch, config=M.CallSitesConfig(mlp_scale=0.5))


def test_a_symbol_the_forward_never_calls_is_left_off_saying_so():
    found = _suggest(inline_rope=True)
    rope, mlp = found["apply_rotary_pos_emb"], found["SitesMLP"]  # the model builds only the scaled subclass
    for candidate in (rope, mlp):
        assert candidate.verdict == "leave_off" and candidate.call_sites["verdict"] == "never called"
        assert "never calls it" in candidate.reason


def test_28_identical_layers_cost_one_comparison(monkeypatch):
    replayed = []
    real = replay._replay_function
    monkeypatch.setattr(replay, "_replay_function", lambda *a: replayed.append(a) or real(*a))
    found = _suggest(num_hidden_layers=28)["apply_rotary_pos_emb"]
    calls = found.call_sites
    assert calls["verdict"] == "match" and calls["signatures"] == 1 and calls["calls"] >= 4
    assert len(replayed) == 1
    assert "layers)" in calls["model"]  # the verdict says how much of the depth ran


def test_the_verdict_json_carries_call_sites_and_signatures():
    result = CliRunner().invoke(app, ["suggest", SITES, "--config", CONFIG, "--set", "rope_layout=bshd", "--json",
                                      "--no-gpu"])
    assert result.exit_code == 0, result.output
    data = {c["symbol"]: c for c in json.loads(result.stdout)["candidates"]}
    norm = data["SitesRMSNorm"]["call_sites"]
    assert set(norm) >= {"verdict", "model", "calls", "sites", "signatures", "compared", "call_sites", "differences"}
    assert sum(norm["call_sites"].values()) == norm["calls"] == 7
    rope = data["apply_rotary_pos_emb"]["differs_at_call_sites"]["liger_rotary_pos_emb"]
    assert rope["differences"][0]["sites"] and rope["differences"][0]["argument"].startswith("unsqueeze_dim=2")


def test_the_official_route_reports_a_call_site_difference():
    change = Change(I, "apply_rotary_pos_emb", I.apply_rotary_pos_emb, liger_rotary_pos_emb)
    found = probe_official("rope", [change], {})
    (line,) = found.differences
    assert "on the calls the whole model makes" in line and "modeling_indexer.py:" in line
    assert "IndexerAttention.forward" in line and "unsqueeze_dim=2" in line and not found.probed


def test_calls_are_recorded_on_a_cpu_with_another_swap_already_made_in_the_module(monkeypatch):
    """An earlier module of an official route binds Liger's rotary (a Triton kernel, which a CPU cannot
    run): the norm's calls are still recorded, the rotary running as its reference, and the binding
    is Liger's again after the run."""
    monkeypatch.setattr(M, "apply_rotary_pos_emb", liger_rotary_pos_emb)
    result = call_sites.call_sites(M.SitesRMSNorm, by_name("LigerRMSNorm"), M, M.CallSitesConfig())
    assert result.verdict == "match" and result.calls == 7, result.summary()
    assert M.apply_rotary_pos_emb is liger_rotary_pos_emb


def test_the_stand_ins_put_every_binding_back_whatever_is_raised():
    from ligerkit.probe.stand_ins import liger_stand_ins

    namespace = {"rope": liger_rotary_pos_emb, "other": len}
    module = type(M)("stand_in_test")
    vars(module).update(namespace)
    with pytest.raises(RuntimeError), liger_stand_ins(module):
        assert module.rope is by_name("liger_rotary_pos_emb").reference and module.other is len
        raise RuntimeError("mid-way")
    assert module.rope is liger_rotary_pos_emb
    with liger_stand_ins(module, active=False):
        assert module.rope is liger_rotary_pos_emb


def test_a_whole_model_that_cannot_run_leaves_the_calls_unproven():
    from toy_models import modeling_no_top as N

    result = call_sites.call_sites(N.apply_rotary_pos_emb, by_name("liger_rotary_pos_emb"), N, N.NoTopConfig())
    assert result.verdict == "unproven" and "could not be run" in result.reason and not result.ok


def test_the_rotary_reference_reads_q_and_k_as_liger_s_kernel_does():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 4, 16, generator=g)  # (batch, seq, heads, dim) as a model with unsqueeze_dim=2 holds it
    angles = torch.rand(2, 8, 8, generator=g)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    # the kernel ignores unsqueeze_dim: it reads dimension 2 as the sequence whatever the caller says
    misread = R.rotary(q, q, cos, sin, unsqueeze_dim=2)
    assert all(torch.equal(a, b) for a, b in zip(misread, R.rotary(q, q, cos, sin)))
    meant = M.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=2)
    assert not torch.allclose(misread[0], meant[0])
    with pytest.raises(ValueError, match="past their end"):  # rows the kernel would read past cos's end
        R.rotary(q.transpose(1, 2), q.transpose(1, 2), cos[:1, :4], sin[:1, :4])


def test_suggest_runs_the_gradient_proof_by_default_where_a_gpu_is_and_no_gpu_skips_it(monkeypatch):
    from ligerkit import suggest as suggest_module
    from ligerkit.cli import kit_commands
    from ligerkit.proof import grads as grads_module
    from ligerkit.proof.grads import GradParity, TensorError

    proved = []

    def verdict(result):
        proved.append(result.module)
        return GradParity([TensorError("w", 0.01, 0.01, 0.03)], {}, coverage=grads_module.Coverage("M", 1, 1, 4, 4))

    real = suggest_module.suggest
    devices = []
    monkeypatch.setattr(kit_commands, "_no_gpu", lambda: None)  # a CUDA GPU is here
    monkeypatch.setattr(suggest_module, "suggest", lambda *a, **k: devices.append(k["device"]) or
                        real(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(kit_commands, "_suggest_gradients", verdict)
    args = ["suggest", SITES, "--config", CONFIG, "--json"]
    found = CliRunner().invoke(app, args)
    assert found.exit_code == 0 and json.loads(found.stdout)["gradients"]["verdict"] == "PASS"
    assert proved == [SITES] and devices == ["cuda"]
    skipped = CliRunner().invoke(app, [*args, "--no-gpu"])
    assert skipped.exit_code == 0 and json.loads(skipped.stdout)["gradients"] is None
    assert proved == [SITES] and devices == ["cuda", "cpu"]
    # by default a module with no map has nothing to prove: no error (with --gpu it is one)
    nothing = CliRunner().invoke(app, [*args, "--set", "inline_rope=true", "--set", "mlp_scale=0.5",
                                       "--set", "late_eps=0.01"])
    assert nothing.exit_code == 0 and json.loads(nothing.stdout)["gradients"] is None and len(proved) == 1


def test_without_a_gpu_the_default_is_the_cpu_map_and_exit_0():
    found = CliRunner().invoke(app, ["suggest", SITES, "--config", CONFIG, "--json"])
    assert found.exit_code == 0 and json.loads(found.stdout)["gradients"] is None
