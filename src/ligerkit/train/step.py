"""One micro-batch through the model and the run's loss, as one module (the FSDP2 root when sharded)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.loss import LossPath
from ligerkit.naming import IGNORE_INDEX
from ligerkit.train.memory import glu_recompute, norm_recompute
from ligerkit.train.memory.saved_recompute import recomputed

Batch = dict[str, torch.Tensor]
log = logging.getLogger("ligerkit.train")


class StepModule(nn.Module):
    """The model plus the run's loss, so the output head's parameters are gathered for the fused loss
    exactly as for the model's own forward."""

    def __init__(self, engine: Any, model: nn.Module, loss: LossPath, autocast_bf16: bool = False,
                 recompute_glu_product: bool = False, recompute_norm_output: bool = False):
        super().__init__()
        self.engine = engine  # plain attributes: neither is an nn.Module
        self.loss = loss
        self.autocast_bf16 = autocast_bf16
        self.inner = model
        self.recompute_glu_product = recompute_glu_product
        self.recompute_norm_output = recompute_norm_output
        self.recompute_table = norm_recompute.recompute_table(recompute_glu_product, recompute_norm_output)
        self._recompute_checked = False
        # a block around each forward, inside the recompute keys' hooks (a census of what it saves)
        self.within: Callable[[], AbstractContextManager[object]] = nullcontext

    def forward(self, batch: Batch, scale: float = 1.0) -> torch.Tensor:
        """The sum of this micro-batch's token losses times ``scale``.

        The trainer passes ``scale = world size / valid tokens of the optimizer step``, so the fused
        path can divide inside its kernel, before the logits' gradient is rounded, as the standard
        path's float32 cross entropy does. With ``recompute_glu_product`` Liger's gated-activation
        products, with ``recompute_norm_output`` its RMSNorm outputs (and the rotary over them), are
        recomputed in backward (``saved_recompute.py``). The first forward checks every recomputed tensor
        against the forward's bit for bit, and raises when a key found nothing to recompute.
        """
        if not (self.recompute_table and torch.is_grad_enabled()):
            with self.within():
                return self._loss(batch, scale)
        first = not self._recompute_checked
        with recomputed(self.recompute_table, verify=first) as hooks, self.within():
            out = self._loss(batch, scale)
        if first:
            if self.recompute_glu_product:
                glu_recompute.check_first_forward(hooks)
            if self.recompute_norm_output:
                norm_recompute.check_first_forward(hooks)
            log.info("recomputed in backward instead of kept, checked bit for bit: %s saved uses a micro-batch",
                     ", ".join(f"{n} {name.removesuffix('FunctionBackward').removesuffix('Backward')}"
                               for name, n in sorted(hooks.by_node.items())))
            self._recompute_checked = True
        return out

    def _loss(self, batch: Batch, scale: float) -> torch.Tensor:
        if self.autocast_bf16:
            with torch.autocast(device_type=batch["input_ids"].device.type, dtype=torch.bfloat16):
                return self.loss(self.engine, self.inner, batch, scale)
        return self.loss(self.engine, self.inner, batch, scale)


def drop_right_padding_mask(batch: Batch) -> Batch:
    """``batch`` without its ``attention_mask``, after checking the mask is redundant for the loss.

    Under causal attention a right-padded sample's real positions never see its padding (it lies in
    their future), so when every padded position's label is ignored, no counted logit depends on the
    mask. Without it, SDPA runs its causal flash kernel (grouped-query heads included) instead of the
    masked kernel with repeated key/value heads. Raises for left padding, holes, or padding that
    carries a counted label. ``labels`` may be longer than the mask by a prefix (image positions).
    """
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    if bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise LigerKitError(
            "train.drop_right_padding_mask is on, but a sample's attention_mask has a 0 before a 1 (left "
            "padding, packing or holes), so the mask matters; set train.drop_right_padding_mask=false"
        )
    labels = batch["labels"][:, -mask.shape[1]:]
    if bool((labels[mask == 0] != IGNORE_INDEX).any()):
        raise LigerKitError(
            "train.drop_right_padding_mask is on, but a padded position has a counted label, so the mask "
            f"changes the loss; ignore padded labels ({IGNORE_INDEX}) or set train.drop_right_padding_mask=false"
        )
    return {k: v for k, v in batch.items() if k != "attention_mask"}


def device_batch(batch: Batch, device: torch.device, drop_mask: bool = False) -> Batch:
    """A micro-batch as the model gets it: without its padding mask when ``drop_mask`` (checked
    first), every tensor on ``device``."""
    if drop_mask:
        batch = drop_right_padding_mask(batch)
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    # from page-locked memory the copy is queued like a kernel; from ordinary memory it makes the host wait
    return {k: v.pin_memory().to(device, non_blocking=True) if v.device.type == "cpu" else v.to(device)
            for k, v in batch.items()}


def dropout_seed(seed: int, sample_index: int) -> int:
    """The random seed of the micro-batch starting at global sample ``sample_index``: dropout masks
    depend on the data only, so a run resumed at any step, on any number of ranks, draws the same."""
    return (seed * 2_654_435_761 + sample_index * 40_503 + 12_345) % (2**63 - 1)


def total_norm(model: nn.Module) -> torch.Tensor | None:
    """The total gradient norm, taken in float32 (``None`` without gradients).

    ``clip_grad_norm_`` takes the norm in the gradients' dtype: for bf16 gradients the clip factor then
    moves in steps of 0.4-0.8%, and two runs whose gradients differ in the last bit can be clipped by
    factors that far apart.
    """
    groups = grads_by_device_and_dtype(model)
    if not groups:
        return None
    first = next(iter(groups))[0]
    norms = [n.to(first) for group in groups.values() for n in torch._foreach_norm(group, 2.0, dtype=torch.float32)]
    return torch.linalg.vector_norm(torch.stack(norms), 2.0)


def grads_by_device_and_dtype(model: nn.Module) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    """The model's gradients grouped by (device, dtype), in parameter order: one multi-tensor launch per
    group, as ``clip_grad_norm_`` groups them (empty without gradients)."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for p in model.parameters():
        if p.grad is not None:
            groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    return groups


def gathered(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` whole: a sharded (DTensor) one gathered from every rank, any other as it is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def on_host(loss: torch.Tensor, norm: torch.Tensor | None) -> tuple[float, float]:
    """``(loss, norm)`` as Python floats, read from the device in one copy (one wait for the GPU, not
    two); a ``None`` norm (no gradients) is 0. A sharded norm is gathered first."""
    if norm is None:
        return float(loss), 0.0
    norm = gathered(norm)
    values = torch.stack([loss.detach().float().reshape(()), norm.detach().float().reshape(()).to(loss.device)])
    first, second = values.tolist()
    return first, second


def as_float(norm: torch.Tensor) -> float:
    """A (possibly sharded) scalar tensor as a Python float."""
    return float(gathered(norm))
