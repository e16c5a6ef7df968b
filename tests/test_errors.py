"""Strict errors: every case raises its own LigerKitError subclass with an actionable message."""

from __future__ import annotations

import pytest
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

from ligerkit import LigerKitError, LigerPatch
from ligerkit import errors as E

ENC = "toy_models.modeling_encoder"


def test_all_errors_share_one_base():
    subclasses = [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert all(issubclass(c, LigerKitError) for c in subclasses)


INTERNAL_SIGNALS = {"YamlBoundError", "Unprobeable", "Uncacheable", "Unrunnable"}  # caught inside, never raised to a caller


def test_every_error_class_is_defined_in_errors_py():
    import ast
    from pathlib import Path

    src = Path(E.__file__).parent
    ours = {n for n, c in vars(E).items() if isinstance(c, type) and issubclass(c, Exception)}
    elsewhere = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "errors.py" and path.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name not in INTERNAL_SIGNALS:
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & ours or any(b.endswith(("Error", "Exception")) for b in bases):
                    elsewhere.append(f"{path.relative_to(src)}:{node.name}")
    assert not elsewhere, elsewhere


def test_the_readme_error_table_lists_every_error():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("## Errors", 1)[1].split("\n## ", 1)[0]
    names = {n for n, c in vars(E).items() if isinstance(c, type) and issubclass(c, Exception)}
    assert not {n for n in names if f"| `{n}`" not in table}


def test_smoke_without_an_accelerator_says_so():
    from ligerkit.proof import arm_runs

    with pytest.raises(E.LigerNeedsAcceleratorError, match="ligerkit smoke"):
        arm_runs.require_accelerator("smoke") if arm_runs.accelerator() is None else pytest.skip("an accelerator is here")


def test_unknown_family_gives_close_matches_and_points_to_custom_patches(kit):
    with pytest.raises(E.UnknownFamilyError) as info:
        kit.apply(model_family="qwen_3")
    assert "qwen3" in info.value.close_matches
    assert "custom_patches" in str(info.value)


def test_unknown_module_name_on_official_route(kit):
    with pytest.raises(E.UnknownModuleError, match="rms_nrom.*did you mean 'rms_norm'"):
        kit.apply(model_family="qwen3", modules={"rms_nrom": True})


def test_unknown_excluded_module_name(kit):
    with pytest.raises(E.UnknownModuleError):
        kit.apply(model_family="qwen3", excluded_modules=("crossentropy",))


def test_module_the_helper_does_not_accept(kit):
    with pytest.raises(E.UnsupportedModuleError, match="does not accept geglu"):
        kit.apply(model_family="qwen3", modules={"geglu": True})


def test_non_strict_drops_unaccepted_module_but_says_so(kit):
    report = kit.apply(model_family="qwen3", modules={"geglu": True}, strict=False)
    assert "qwen3:geglu" in report.noop_flags
    assert any("dropped geglu" in n for a in report.applications for n in a.notes)


def test_module_both_enabled_and_excluded(kit):
    with pytest.raises(E.ModuleConflictError, match="both enabled and"):
        kit.apply(model_family="qwen3", modules={"fused_linear_cross_entropy": True})


def test_both_loss_kernels_on(kit):
    with pytest.raises(E.LossKernelConflictError):
        kit.apply(model_family="qwen3", modules={"cross_entropy": True, "fused_linear_cross_entropy": True},
                  excluded_modules=())


def test_enabled_module_that_swaps_nothing(kit):
    from transformers.models.gpt_oss import modeling_gpt_oss  # its helper accepts swiglu, which swaps nothing

    norm = modeling_gpt_oss.GptOssRMSNorm
    with pytest.raises(E.NoEffectError, match="swiglu"):
        kit.apply(model_family="gpt_oss", modules={"swiglu": True})
    assert modeling_gpt_oss.GptOssRMSNorm is norm, "a failed apply must leave nothing patched"
    assert not kit.active


def test_bad_modules_value(kit):
    with pytest.raises(E.InvalidOptionError, match="'auto' or a mapping"):
        kit.apply(model_family="qwen3", modules="all")
    with pytest.raises(E.InvalidOptionError):
        kit.apply(model_family="qwen3", modules={"rope": "yes"})


def test_custom_module_that_does_not_import(kit):
    with pytest.raises(E.PatchImportError, match="a_package_that_is_not_installed"):
        kit.apply(custom_patches={"rms_norm": LigerPatch("toy_models.broken_import", "X", LigerRMSNorm)})


def test_custom_missing_symbol_suggests_renamed_upstream(kit):
    with pytest.raises(E.MissingSymbolError, match="renamed upstream.*EncoderRMSNorm"):
        kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRmsNorm", LigerRMSNorm)})


def test_kind_mismatch_class_for_function(kit):
    with pytest.raises(E.KindMismatchError, match="is a function.*is a class"):
        kit.apply(custom_patches={"act": LigerPatch(ENC, "encoder_activation", LigerRMSNorm)})
    with pytest.raises(E.KindMismatchError):
        kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", liger_rotary_pos_emb)})


def test_conflicting_replacement_for_one_symbol(kit):
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    with pytest.raises(E.ConflictingPatchError, match="already patched"):
        kit.apply(custom_patches={"mlp": LigerPatch(ENC, "EncoderRMSNorm", LigerSwiGLUMLP)})


def test_conflict_within_one_map(kit):
    with pytest.raises(E.ConflictingPatchError):
        kit.apply(custom_patches={
            "a": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
            "b": LigerPatch(ENC, "EncoderRMSNorm", LigerSwiGLUMLP),
        })
    assert not kit.active


def test_official_route_overwriting_a_custom_patch_is_a_conflict(kit):
    from transformers.models.qwen3 import modeling_qwen3

    original = modeling_qwen3.Qwen3RMSNorm
    kit.apply(custom_patches={"norm": LigerPatch("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm",
                                                 LigerSwiGLUMLP)}, probe=False)
    with pytest.raises(E.ConflictingPatchError):
        kit.apply(model_family="qwen3")
    kit.revert()
    assert modeling_qwen3.Qwen3RMSNorm is original


def test_custom_key_in_excluded_modules(kit):
    with pytest.raises(E.ModuleConflictError):
        kit.apply(custom_patches={"cross_entropy": LigerPatch(ENC, "encoder_activation", liger_rotary_pos_emb)})


def test_modules_with_custom_patches_is_refused(kit):
    with pytest.raises(E.InvalidPatchError, match="no meaning with custom_patches"):
        kit.apply(modules={"rope": True},
                  custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})


def test_malformed_maps(kit):
    with pytest.raises(E.InvalidPatchError):
        kit.apply(custom_patches={})
    with pytest.raises(E.InvalidPatchError):
        kit.apply(custom_patches={"rms_norm": (ENC, "EncoderRMSNorm", LigerRMSNorm)})
    with pytest.raises(E.InvalidPatchError):
        LigerPatch(ENC, "EncoderRMSNorm", 3)


def test_no_family_no_path_no_map(kit):
    with pytest.raises(E.FamilyResolutionError, match="model_family"):
        kit.apply()


def test_missing_local_path_never_downloads(kit, tmp_path):
    with pytest.raises(E.FamilyResolutionError, match="never downloads"):
        kit.apply(str(tmp_path / "nope"))
