"""LoRA adapters in the trainer (PEFT): injected into the built model in place, the rest frozen.

``peft.inject_adapter_in_model`` replaces each targeted ``nn.Linear`` with PEFT's LoRA layer and
leaves the model's class and every other module as they are, so the kit's scan and its first-forward
guard, the recipe's hooks (``forward_hidden``, ``fsdp_units``) and the fused loss see the same model
they would without adapters. Frozen weights are never saved: a checkpoint holds the trainable ones and
:func:`frozen_fingerprint`, and loading it into a model whose frozen weights hash otherwise is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ligerkit.errors import LigerKitError, MissingExtraError
from ligerkit.train.config import ConfigError, LoraConfig, TrainConfig

ADAPTER_MARKS = ("lora_A", "lora_B")
"""Submodule names PEFT's LoRA layers hold their two factors under."""


def linear_names(model: nn.Module) -> list[str]:
    """The last part of the module path of every ``nn.Linear`` in ``model`` (what ``target_modules`` names)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear) and name})


def _head_name(model: nn.Module) -> str | None:
    """The module path of the model's output head, when it declares one."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return next((name for name, m in model.named_modules() if head is not None and m is head), None)


def resolve_targets(model: nn.Module, lora: LoraConfig) -> list[str]:
    """The module paths that get adapters: every linear layer whose last path part is named in
    ``target_modules`` (``all-linear``: every linear layer but the output head). A name that matches no
    linear layer is a :class:`ConfigError` listing the model's linear layer names."""
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear) and name]
    if lora.target_modules == "all-linear":
        head = _head_name(model)
        return [name for name in linears if name != head]
    known = set(linear_names(model))
    unknown = [t for t in lora.target_modules if t not in known]
    if unknown:
        raise ConfigError(f"train.lora.target_modules names {', '.join(map(repr, unknown))}, which no linear layer of "
                          f"{type(model).__name__} is called; its linear layers are: {', '.join(sorted(known))} "
                          "(or use all-linear)")
    wanted = set(lora.target_modules)
    return [name for name in linears if name.rsplit(".", 1)[-1] in wanted]


def adapted_layers(model: nn.Module) -> list[str]:
    """The module paths of the layers that carry LoRA adapters (``lora_A`` and ``lora_B``)."""
    return [name for name, m in model.named_modules() if all(hasattr(m, a) for a in ADAPTER_MARKS)]


def add_lora(model: nn.Module, lora: LoraConfig, seed: int | None = None) -> list[str]:
    """Inject LoRA adapters into ``model`` in place (the kit applied, the model built); freeze every
    other weight; return the adapted module paths.

    With ``seed``, the adapters' random starting values (PEFT's ``A`` factors) come from a generator
    seeded with it, whatever drew random numbers since the model was built (the fused loss's head
    check, compile mode's set-up, the kit's checks), so every arm of a run starts from the same adapters;
    the global generators are left as they were.
    """
    try:
        import peft
    except ImportError as exc:
        raise MissingExtraError("train.lora needs PEFT, which is not installed: pip install -e '.[lora]' (or pip "
                                "install peft), or remove train.lora to train every weight", "lora", "train.lora") from exc
    targets = resolve_targets(model, lora)
    if not targets:
        raise ConfigError(f"train.lora: {type(model).__name__} has no linear layer to adapt besides its output head")
    # a string is a pattern PEFT matches against each full module path: exactly the resolved layers
    pattern = "(?:" + "|".join(re.escape(name) for name in targets) + ")"
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, bias="none",
                             target_modules=pattern)
    if seed is None:
        peft.inject_adapter_in_model(config, model)
    else:
        devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            peft.inject_adapter_in_model(config, model)
    adapted = adapted_layers(model)
    if sorted(adapted) != sorted(targets):
        raise LigerKitError(f"PEFT adapted {len(adapted)} layers of the {len(targets)} asked for; report this as a "
                            "bug with your model and train.lora")
    return adapted


def adapter_summary(model: nn.Module, lora: LoraConfig) -> str:
    """One line: how many layers carry adapters and what share of the parameters trains."""
    layers = len(adapted_layers(model))
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return (f"rank {lora.rank}, alpha {lora.alpha:g}, dropout {lora.dropout:g} on {layers} linear layers; "
            f"{trained:,} of {total:,} parameters train ({trained / max(total, 1):.2%})")


def training_line(model: nn.Module, train: TrainConfig) -> str:
    """What trains and how, in words (``check``, ``train``): LoRA or every weight, and whether each
    layer's activations are recomputed."""
    what = f"LoRA: {adapter_summary(model, train.lora)}" if train.lora is not None else "every weight"
    checkpointing = {True: "on", False: "off", "offload": "on, kept inputs offloaded to host memory"}
    return f"{what}; activation checkpointing {checkpointing[train.activation_checkpointing]}"


def frozen_fingerprint(model: nn.Module) -> str | None:
    """A SHA-256 of every frozen parameter (name, dtype, shape and bytes, by name), or ``None`` when every
    parameter trains. A few seconds for 8B parameters (the tensors hashed in parallel threads); call it
    before the model is sharded (:func:`fingerprint_when_needed` computes it once, when first needed)."""
    frozen = sorted((name, p) for name, p in model.named_parameters() if not p.requires_grad)
    if not frozen:
        return None

    def digest(item: tuple[str, torch.Tensor]) -> str:
        name, p = item
        data = p.detach().contiguous().cpu().view(torch.uint8).numpy() if p.numel() else b""
        h = hashlib.sha256(f"{name}|{p.dtype}|{tuple(p.shape)}|".encode())
        h.update(data)
        return h.hexdigest()

    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(digest, frozen))
    return hashlib.sha256("".join(parts).encode()).hexdigest()


def fingerprint_when_needed(model: nn.Module, now: bool = False) -> Callable[[], str | None]:
    """A function returning :func:`frozen_fingerprint` of ``model``, computed at its first call and kept
    (hashing an 8B base takes seconds, and most runs never save or load a checkpoint). ``now=True``
    computes it at once: under torchrun, where the weights are sharded after this point."""
    found: list[str | None] = []

    def fingerprint() -> str | None:
        if not found:
            found.append(frozen_fingerprint(model))
        return found[0]

    if now:
        fingerprint()
    return fingerprint


def perturb_zero_adapters(model: nn.Module, seed: int = 0, std: float = 0.02) -> int:
    """Fill every all-zero LoRA ``B`` factor with small random values (a fixed generator); returns how
    many. PEFT starts ``B`` at zero, which makes every ``A`` gradient exactly zero at step 1: a gradient
    proof compares adapters only once ``B`` is not zero."""
    g = torch.Generator().manual_seed(seed)
    done = 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_B." in name and not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=g) * std)
                done += 1
    return done
