"""Compile mode on the CPU.

- The kit's rebinding: recorded, reported, kept out of the scan, shared between kits, reverted,
  atomic; the Inductor table; the engine and config wiring.
- Every recipe's model, Liger on through the kit with ``compile=True`` and its layers compiled (the
  compile-mode operators' CPU implementations run): exactly the graph breaks of the unpatched model
  compiled the same way (none from Liger; ``fullgraph=True`` where the unpatched layers allow it), and
  the loss and gradients of the same model uncompiled and of the unpatched model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from helpers import failing_helper, helper_failure, recipe_family
from ligerkit.compile import routes, table
from ligerkit.kit import LigerKernelKit, LigerPatch
from ligerkit.loss import valid_tokens
from ligerkit.train import load_engine
from ligerkit.compile.layers import compile_layers, reset_compiled
from ligerkit.train.step import device_batch

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.parent for p in ROOT.glob("recipes/*/configs"))
CPU = torch.device("cpu")


def _grads(engine, model) -> tuple[float, dict[str, torch.Tensor]]:
    vocab = model.get_output_embeddings().weight.shape[0]
    batch = device_batch(engine.make_batch(0, 2, vocab), CPU, engine.config.train.drop_right_padding_mask)
    model.zero_grad(set_to_none=True)
    loss = engine.loss(engine, model, batch, 1.0 / max(valid_tokens(batch["labels"]), 1))
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def _breaks() -> int:
    return sum(counters["graph_break"].values())


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_recipe_layers_compile_over_liger_without_graph_breaks_and_match(recipe, monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")  # every swap through the operators, none left to Inductor
    config = recipe / "configs" / "cpu.yaml"
    sizes = ["model.dtype=float32"]
    if helper_failure(recipe_family(recipe, "cpu.yaml")):  # Liger's helper fails on this stack: nothing to compile
        with failing_helper(recipe_family(recipe, "cpu.yaml")):
            load_engine(config, [*sizes, "model.liger_kernel.enabled=true", "train.compile=ops"]).prepare_model(CPU)
        return
    plain = load_engine(config, [*sizes, "model.liger_kernel.enabled=false"])
    torch.manual_seed(0)
    reference = plain.prepare_model(CPU)
    ref_loss, ref_grads = _grads(plain, reference)
    unpatched = plain.prepare_model(CPU)
    unpatched.load_state_dict(reference.state_dict())
    counters.clear()
    try:
        compile_layers(unpatched, plain.fsdp_units(unpatched))
        _grads(plain, unpatched)
        breaks_off = _breaks()
    finally:
        reset_compiled()

    engine = load_engine(config, [*sizes, "model.liger_kernel.enabled=true", "train.compile=ops"])
    assert engine.compile_mode
    try:
        model = engine.prepare_model(CPU)  # the kit applied with compile=True, then built
        model.load_state_dict(reference.state_dict())
        report = engine.liger_kit.report
        assert report.patched and report.compile_routes, str(report)
        liger_loss, liger_grads = _grads(engine, model)
        counters.clear()
        # fullgraph=True wherever the unpatched layers compile whole (qwen3_vl's vision attention
        # splits its batch by data-dependent lengths: a break of transformers', not Liger's)
        compiled = compile_layers(model, engine.fsdp_units(model), fullgraph=breaks_off == 0)
        assert compiled and compiled != ["<model>"]
        loss, grads = _grads(engine, model)
        assert _breaks() == breaks_off
    finally:
        engine.liger_kit.revert()
        reset_compiled()
    assert abs(loss - liger_loss) <= 1e-5 and abs(loss - ref_loss) <= 1e-4
    assert set(grads) == set(ref_grads)
    assert max(_rel(grads[k], liger_grads[k]) for k in grads) <= 1e-3  # float32 reduction order only
    assert max(_rel(grads[k], ref_grads[k]) for k in grads) <= 1e-3


# ----- the kit in compile mode ----------------------------------------------------------------------
from ligerkit.compile import routes, table
from ligerkit.kit import LigerKernelKit, LigerPatch


def _bound(route: routes.Route) -> object:
    import importlib

    return getattr(importlib.import_module(route.module), route.attr)


def test_compile_mode_rebinds_liger_names_reports_them_and_reverts(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    originals = {r.kernel: _bound(r) for r in routes.ROUTES}
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3", compile=True)
    try:
        routed = {s.name for s in report.compile_routes}
        assert routed == {"rms_norm", "swiglu", "rope"}
        assert all(s.scope == "compile" for s in report.compile_routes)
        assert {s.name for s in report.patched} == {"rms_norm", "swiglu", "rope"}  # the model's swaps, unchanged
        by_kernel = {r.kernel: r for r in routes.ROUTES}
        for name in routed:
            assert _bound(by_kernel[name]) is by_kernel[name].replacement
        assert _bound(by_kernel["geglu"]) is originals["geglu"]  # not needed by qwen3: left alone
        data = report.to_dict()
        assert data["compile"] is True and len(data["compile_routes"]) == 3
        assert "Compile mode: Liger's kernels run as ligerkit.compile operators" in str(report)
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

        cfg = Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=16, vocab_size=64)
        scan = kit.scan(Qwen3ForCausalLM(cfg))
        assert not scan.unused and not scan.stale  # the rebinding is not a model swap
        assert all("liger_kernel.transformers.rms_norm.LigerRMSNormFunction" != f for f in scan.function_swaps)
    finally:
        kit.revert()
    assert {r.kernel: _bound(r) for r in routes.ROUTES} == originals


def test_without_compile_nothing_is_rebound(monkeypatch):
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3")
    try:
        assert not report.compile_routes and report.to_dict()["compile"] is False
        assert "Compile mode" not in str(report)
        assert all(_bound(r) is not r.replacement for r in routes.ROUTES)
    finally:
        kit.revert()


def test_two_kits_share_a_route_and_either_may_revert_first(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    original = _bound(routes.ROUTES[0])
    first, second = LigerKernelKit(), LigerKernelKit()
    first.apply(model_family="qwen3", compile=True)
    second.apply(model_family="llama", compile=True)
    assert any(s.shared for s in second.report.compile_routes)
    first.revert()
    assert _bound(routes.ROUTES[0]) is routes.ROUTES[0].replacement  # still held by the second kit
    second.revert()
    assert _bound(routes.ROUTES[0]) is original


def test_a_failed_compile_apply_leaves_nothing(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    before = {r.kernel: _bound(r) for r in routes.ROUTES}

    def broken(app, ledger):
        raise RuntimeError("routing failed")

    monkeypatch.setattr("ligerkit.kit.core.route_kernels", broken)
    kit = LigerKernelKit()
    with pytest.raises(RuntimeError, match="routing failed"):
        kit.apply(model_family="qwen3", compile=True)
    assert not kit.active and {r.kernel: _bound(r) for r in routes.ROUTES} == before
    import transformers.models.qwen3.modeling_qwen3 as modeling

    assert modeling.Qwen3RMSNorm.__module__ == "transformers.models.qwen3.modeling_qwen3"


def test_compile_must_be_a_bool():
    from ligerkit.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="compile must be True or False"):
        LigerKernelKit().apply(model_family="qwen3", compile="yes")


def test_the_table_leaves_kernels_inductor_wins_to_inductor_unless_asked_for(monkeypatch, tmp_path):
    path = tmp_path / "table.json"
    path.write_text('{"device": "H200", "measured": "2026-12-01", "margin": 0.02, "kernels": {'
                    '"rms_norm": {"liger_ms": 10.0, "inductor_ms": 8.0, "model": "m"},'
                    '"swiglu": {"liger_ms": 10.0, "inductor_ms": 9.9, "model": "m"},'
                    '"rope": {"liger_ms": 8.0, "inductor_ms": 9.0, "model": "m"}}}')
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", str(path))
    assert set(table.left_to_inductor()) == {"rms_norm"}  # swiglu's 1% is inside the margin
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3", compile=True)
    try:
        assert "rms_norm" in report.applications[0].left_off
        assert "8.00 ms vs 10.00 ms" in report.applications[0].left_off["rms_norm"]
        assert report.modules["rms_norm"] is False and {s.name for s in report.patched} == {"swiglu", "rope"}
    finally:
        kit.revert()
    report = kit.apply(model_family="qwen3", modules={"rms_norm": True}, compile=True)  # asked for by name
    try:
        assert {s.name for s in report.patched} == {"rms_norm"} and not report.applications[0].left_off
    finally:
        kit.revert()
    report = kit.apply(model_family="qwen3")  # not compiled: the table does not apply
    try:
        assert "rms_norm" in {s.name for s in report.patched}
    finally:
        kit.revert()


def test_the_table_applies_to_a_custom_map_by_kernel(monkeypatch, tmp_path):
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    path = tmp_path / "table.json"
    path.write_text('{"kernels": {"rms_norm": {"liger_ms": 10.0, "inductor_ms": 5.0}}}')
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", str(path))
    import transformers.models.llama.modeling_llama as llama

    patches = {"norm": LigerPatch(llama.__name__, "LlamaRMSNorm", LigerRMSNorm),
               "mlp": LigerPatch(llama.__name__, "LlamaMLP", LigerSwiGLUMLP)}
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                      num_hidden_layers=1, vocab_size=64)
    kit = LigerKernelKit()
    report = kit.apply(model_family="mine", custom_patches=patches, config=cfg, compile=True)
    try:
        app = report.applications[0]
        assert set(app.left_off) == {"norm"} and app.modules == {"mlp": True, "norm": False}
        assert {s.name for s in report.patched} == {"mlp"}
        assert {s.name for s in report.compile_routes} == {"swiglu"}
    finally:
        kit.revert()
    only = {"norm": patches["norm"]}
    report = kit.apply(model_family="mine", custom_patches=only, config=cfg, compile=True)  # all left off
    try:
        assert not kit.active and set(report.applications[0].left_off) == {"norm"}
    finally:
        kit.revert()


def test_a_liger_kernel_without_an_operator_is_named(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    kit = LigerKernelKit()
    with failing_helper("qwen2_vl"):  # no other family's helper swaps in a kernel without an operator
        report = kit.apply(model_family="qwen2_vl", compile=True)
        try:
            inline = report.compile_inline
            assert any("qwen2vl_mrope" in line for line in inline), inline
            assert "no compile-mode operator for" in str(report)
        finally:
            kit.revert()


def test_a_kernel_that_lives_beside_a_routed_one_but_runs_another_is_named(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3_moe", compile=True)
    try:
        assert any("LigerExperts" in line and "LigerFusedMoEFunction" in line for line in report.compile_inline), \
            report.compile_inline
        assert "swiglu" not in {s.name for s in report.compile_routes}  # nothing in qwen3_moe calls SiLU-mul
    finally:
        kit.revert()


def test_a_liger_subclass_defined_inside_a_helper_is_routed_and_compiles_whole(monkeypatch):
    # Liger's exaone4 helper swaps in a RMSNorm subclass defined inside the helper function
    from transformers import Exaone4Config
    from transformers.models.exaone4 import modeling_exaone4 as M

    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    cfg = Exaone4Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, vocab_size=256)
    torch.manual_seed(0)
    plain = M.Exaone4ForCausalLM(cfg)
    ids = torch.randint(0, 256, (2, 16))
    kit = LigerKernelKit()
    report = kit.apply(model_family="exaone4", compile=True)
    try:
        assert report.compile_inline == () and {s.name for s in report.compile_routes} == {"rms_norm", "swiglu", "rope"}
        patched = M.Exaone4ForCausalLM(cfg)
        patched.load_state_dict(plain.state_dict())
        assert type(patched.model.norm).__module__.startswith("liger_kernel")
        for model in (plain, patched):
            compile_layers(model, ("Exaone4DecoderLayer",), fullgraph=True)
            model(input_ids=ids, labels=ids).loss.backward()
        for (name, a), (_, b) in zip(plain.named_parameters(), patched.named_parameters(), strict=True):
            assert _rel(b.grad, a.grad) < 1e-4, name
    finally:
        kit.revert()
        reset_compiled()


def test_the_recipe_engine_applies_in_compile_mode_only_with_train_compile(monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    config = ROOT / "recipes" / "custom_lm" / "configs" / "gpu.yaml"
    for overrides, expected in (([], False), (["train.compile=ops"], True), (["train.compile=trace"], False)):
        engine = load_engine(config, overrides)
        try:
            engine.prepare_model(torch.device("meta"))
            report = engine.liger_kit.report
            assert bool(report.compile_routes) is expected
            assert {s.name for s in report.compile_routes} <= {"rms_norm", "geglu", "rope"}
        finally:
            engine.liger_kit.revert()


def test_compile_mode_is_named_never_a_boolean():
    from ligerkit.train.config import ConfigError

    config = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"
    with pytest.raises(ConfigError, match=r"train\.compile: Value error, true names no compile mode; write ops"):
        load_engine(config, ["train.compile=true"])


def test_compile_mode_refuses_a_liger_without_the_names_it_rebinds(monkeypatch):
    import liger_kernel.transformers.rms_norm as liger_rms

    from ligerkit.errors import CompileModeError

    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    monkeypatch.delattr(liger_rms, "LigerRMSNormFunction")
    kit = LigerKernelKit()
    with pytest.raises(CompileModeError, match="LigerRMSNormFunction"):
        kit.apply(model_family="qwen3", compile=True)
    assert not kit.active


TWO_WIDTHS = {"device": "H200", "measured": "2026-12-02", "margin": 0.02, "kernels": {
    "rms_norm": [{"width": 1024, "liger_ms": 10.0, "inductor_ms": 8.0, "model": "0.6B"},
                 {"width": 2560, "liger_ms": 10.0, "inductor_ms": 11.0, "model": "4B"}],
    "swiglu": [{"width": 1024, "liger_ms": 10.0, "inductor_ms": 8.0, "model": "0.6B"},
               {"width": 2560, "liger_ms": 10.0, "inductor_ms": 9.0, "model": "4B"}],
    "rope": {"liger_ms": 8.0, "inductor_ms": 9.0, "model": "one row, every width"}}}


@pytest.mark.parametrize("width, left", [(1024, {"rms_norm", "swiglu"}), (896, {"rms_norm", "swiglu"}),
                                         (2560, {"swiglu"}), (4096, {"swiglu"}), (None, {"swiglu"})])
def test_the_row_measured_nearest_to_the_models_width_decides(width, left):
    found = table.left_to_inductor(TWO_WIDTHS, width)
    assert set(found) == left  # without a width, only what Inductor wins at every measured width
    if width is not None:
        assert f"the nearest to this model's {width}" in found["swiglu"]


def test_the_set_up_and_load_model_tell_compile_mode_the_models_width(monkeypatch, tmp_path):
    import json

    from ligerkit.integrations import load_model
    from ligerkit.train import load_engine, set_up_model

    path = tmp_path / "table.json"
    path.write_text(json.dumps(TWO_WIDTHS))
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", str(path))
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs"
    for config, width in (("gpu.yaml", 1024), ("gpu_4b.yaml", 2560)):
        engine = load_engine(recipe / config, ["train.compile=ops"])
        set_up_model(engine, torch.device("meta"))
        try:
            left = engine.liger_kit.report.applications[0].left_off
            assert set(left) == ({"rms_norm", "swiglu"} if width == 1024 else {"swiglu"}), left
            assert f"this model's {width}" in left["swiglu"]
        finally:
            engine.liger_kit.revert()
    from transformers import Qwen3Config

    config = Qwen3Config(hidden_size=2560, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=64)
    model = load_model(config=config, compile=True, device="meta")
    try:
        assert set(model.ligerkit.report.applications[0].left_off) == {"swiglu"}
    finally:
        model.ligerkit.kit.revert()
