"""GPU proof by gradients: recipes, ``suggest`` maps of transformers families, and a known-bad map.

For each target, one process builds the same model three times (float32 unpatched = truth, bfloat16
unpatched = eager, bfloat16 with Liger's swaps) from the same weights and batch, and compares every
parameter tensor's gradient against float32 (``ligerkit.proof.grads``): a tensor fails when its
relative error exceeds 2 x eager's + 0.01.

- recipes: each recipe's ``configs/gpu.yaml`` (the recipe's model at its GPU shape, one sample),
  through ``recipe_grad_parity`` (what ``ligerkit smoke`` runs first);
- families: the ``custom_patches`` map ``ligerkit suggest`` prints for each module, on a small model
  of it (``ligerkit suggest MODULE --gpu``);
- olmo2 with plain ``LigerRMSNorm`` (in-place backward under a residual add), forced past the kit's
  refusal with ``probe=False``: it must fail the check.

- loss path: each recipe's standard loss (Liger off) against the fused loss (Liger off too),
  so only the loss path differs;
- training modes: each recipe with LoRA (r=16, every linear layer but the head), with activation
  checkpointing, and with both: every trainable tensor, Liger on vs off against float32;
- in-place forms: each recipe set up with Liger on as built and in each training mode, with the kit's
  in-place verdicts (left off, unproven, the note naming the form the checks ran in);
- ``--ablate FAMILY``: the family's suggested map one key at a time (which kernel moves a failing
  tensor).

    python benchmarks/grad_parity_gpu.py --out grads.json [--only recipes|families|olmo2|loss_path|training_modes|inplace_forms] [--ablate FAMILY]
    python benchmarks/grad_parity_gpu.py --markdown grads.json      # the tables of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RECIPES = ("qwen3", "qwen3_vl", "custom_lm", "vendored_llm", "composite_vlm", "diffllama")
# Liger registry families, mapped by suggest as if they had no helper, beside the hand-labelled ones.
REGISTRY_MODULES = ("llama", "mistral", "qwen2", "qwen3", "olmo2", "olmo3", "gemma", "gemma2", "glm4", "phi3",
                    "granite", "exaone4", "smollm3", "ministral", "qwen3_moe", "mixtral")


def family_modules() -> dict[str, str]:
    """Family name -> modeling module: the 20 hand-labelled families and the registry ones."""
    from probe_expectations import FAMILIES

    modules = {name: spec["module"] for name, spec in FAMILIES.items()}
    modules.update({name: f"transformers.models.{name}.modeling_{name}" for name in REGISTRY_MODULES})
    return modules


def _row(target: str, run) -> dict:  # noqa: ANN001
    start = time.perf_counter()
    try:
        row = run()
    except Exception as exc:  # one failing target must not hide the others
        row = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
    row.update(target=target, seconds=round(time.perf_counter() - start, 1))
    print(json.dumps({k: v for k, v in row.items() if k not in ("tensors", "trace")}), flush=True)
    return row


def _parity(result) -> dict:  # noqa: ANN001
    data = result.to_dict()
    data["worst"] = [t.__dict__ for t in result.worst(5)]
    data["tensors"] = len(result.tensors)
    return data


def recipes() -> list[dict]:
    from ligerkit.proof.recipe_grads import recipe_grad_parity

    device = torch.device("cuda")
    return [_row(name, lambda name=name: _parity(recipe_grad_parity(ROOT / "recipes" / name / "configs" / "gpu.yaml",
                                                                    [], device)))
            for name in RECIPES]


def loss_path() -> list[dict]:
    from ligerkit.proof.recipe_grads import recipe_grad_parity

    fused = ("model.liger_kernel.enabled=false", "train.loss.path=fused")
    return [_row(f"{name}: fused loss", lambda name=name: _parity(recipe_grad_parity(
        ROOT / "recipes" / name / "configs" / "gpu.yaml", [], torch.device("cuda"), patched_overrides=fused)))
        for name in ("qwen3", "custom_lm", "composite_vlm")]


TRAINING_MODES = {"lora": ("train.lora={rank: 16, alpha: 32}",),
                  "recompute": ("train.activation_checkpointing=true",),
                  "lora + recompute": ("train.lora={rank: 16, alpha: 32}", "train.activation_checkpointing=true")}
"""The trainer's options whose gradients are proven on every recipe: every arm (float32, eager, Liger)
trains the same way; LoRA's B factors start non-zero in the proof, so every adapter gets a gradient."""


def training_modes() -> list[dict]:
    from ligerkit.proof.recipe_grads import LIGER_ON, recipe_grad_parity

    rows = []
    for mode, lines in TRAINING_MODES.items():
        for name in RECIPES:
            config = ROOT / "recipes" / name / "configs" / "gpu.yaml"
            rows.append(_row(f"{name}: {mode}", lambda config=config, lines=lines: _parity(recipe_grad_parity(
                config, list(lines), torch.device("cuda")))))
            if mode == "lora" and name == "qwen3":  # the fused loss with adapters: Liger's swaps + fused
                rows.append(_row(f"{name}: {mode}, Liger + fused loss", lambda config=config, lines=lines: _parity(
                    recipe_grad_parity(config, list(lines), torch.device("cuda"),
                                       patched_overrides=(*LIGER_ON, "train.loss.path=fused")))))
    return rows


def inplace_forms() -> list[dict]:
    """Each recipe set up with Liger on as it trains (as built, LoRA, checkpointing, both): the kit's
    in-place verdicts from that set-up, which ran the checks' whole model in the same form."""
    from ligerkit.train.recipe.loading import load_engine
    from ligerkit.train.recipe.setup import set_up_model

    def one(config: Path, lines: tuple[str, ...]) -> dict:
        engine = load_engine(config, [*lines, "model.liger_kernel.enabled=true"])
        try:
            set_up_model(engine, torch.device("cuda"))
            report = engine.liger_kit.report
            return {"swaps": len(report.patched), "left_off": report.left_off, "unproven": list(report.unproven),
                    "notes": [n for a in report.applications for n in a.notes if "in-place" in n]}
        finally:
            engine.liger_kit.revert()
            engine.model = None
            torch.cuda.empty_cache()

    return [_row(f"{name}: {mode}", lambda config=ROOT / "recipes" / name / "configs" / "gpu.yaml", lines=lines:
                 one(config, lines))
            for mode, lines in {"as built": (), **TRAINING_MODES}.items() for name in RECIPES]


def ablate(family: str) -> list[dict]:
    from ligerkit.proof.recipe_grads import map_grad_parity, suggested_patches
    from ligerkit.suggest import suggest

    found = suggest(family_modules()[family])
    patches = suggested_patches(found)
    return [_row(f"{family}: {key} only", lambda key=key: _parity(map_grad_parity(
        found.module_object, found.config_object, {key: patches[key]}, torch.device("cuda")))) for key in patches]


def families() -> list[dict]:
    from ligerkit.proof.recipe_grads import map_grad_parity, suggested_patches
    from ligerkit.suggest import suggest

    def one(module: str) -> dict:
        found = suggest(module)
        patches = suggested_patches(found)
        if not patches:
            return {"map": {}, "passed": None, "note": "suggest matched nothing"}
        result = map_grad_parity(found.module_object, found.config_object, patches, torch.device("cuda"))
        return {"map": {k: [f"{p.attr} -> {getattr(p.replacement, '__name__', p.replacement)}" for p in v]
                        for k, v in patches.items()}, **_parity(result)}

    return [_row(name, lambda module=module: one(module)) for name, module in family_modules().items()]


def olmo2_plain_norm() -> list[dict]:
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from transformers.models.olmo2 import modeling_olmo2

    from ligerkit import LigerPatch
    from ligerkit.proof.recipe_grads import map_grad_parity
    from ligerkit.probe.runnable import module_config

    patches = {"rms_norm": LigerPatch(modeling_olmo2.__name__, "Olmo2RMSNorm", LigerRMSNorm)}
    config = module_config(modeling_olmo2, None)
    return [_row("olmo2 + plain LigerRMSNorm (probe=False)",
                 lambda: _parity(map_grad_parity(modeling_olmo2, config, patches, torch.device("cuda"), probe=False)))]


def markdown(path: str) -> str:
    """The result file as markdown tables, one per part."""
    data = json.loads(Path(path).read_text())
    lines = []
    for part, rows in data.items():
        if not isinstance(rows, list):
            continue
        if part == "inplace_forms":
            lines += [f"**{part}**", "", "| target | swaps | in-place checks ran in | left off | unproven |",
                      "| --- | ---: | --- | --- | --- |"]
            for row in rows:
                if "error" in row:
                    lines.append(f"| {row['target']} | **refused** ({row['error'].split(':')[0]}) | - | - | - |")
                    continue
                form = sorted({n.split("as it trains: ", 1)[-1] for n in row["notes"]}) or ["as built"]
                unproven = [u.split(":")[0] for u in row["unproven"]]
                lines.append(f"| {row['target']} | {row['swaps']} | {'; '.join(form)} | "
                             f"{', '.join(row['left_off']) or '-'} | {', '.join(unproven) or '-'} |")
            lines.append("")
            continue
        lines += [f"**{part}**", "", "| target | verdict | tensors | max r, eager bf16 | max r, patched | "
                  "worst tensor (r patched / bound) |", "| --- | --- | ---: | ---: | ---: | --- |"]
        for row in rows:
            if "error" in row or row.get("passed") is None:
                why = row.get("error", row.get("note", "no map")).split(":")[0]
                lines.append(f"| {row['target']} | not run ({why}) | - | - | - | - |")
                continue
            worst = row["worst"][0]
            verdict = "PASS" if row["passed"] else f"**FAIL** ({len(row['failures'])} tensors)"
            lines.append(f"| {row['target']} | {verdict} | {row['tensors']} | {row['max_eager']:.3g} | "
                         f"{row['max_patched']:.3g} | {worst['name']} ({worst['patched']:.3g} / {worst['bound']:.3g}) |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", metavar="JSON", help="print the tables of a result file and exit")
    parser.add_argument("--out")
    parser.add_argument("--only", choices=("recipes", "families", "olmo2", "loss_path", "training_modes",
                                                      "inplace_forms"))
    parser.add_argument("--ablate", metavar="FAMILY")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(args.markdown))
        return
    if not args.out:
        parser.error("--out is required to measure")
    parts = {"recipes": recipes, "families": families, "olmo2": olmo2_plain_norm, "loss_path": loss_path,
             "training_modes": training_modes, "inplace_forms": inplace_forms}
    chosen = [args.only] if args.only else list(parts)
    if args.ablate:
        parts["ablate"] = lambda: ablate(args.ablate)
        chosen.append("ablate")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              **{name: parts[name]() for name in chosen}}
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
