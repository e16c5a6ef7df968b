"""Liger's RMSNorm outputs, and a rotary applied in place over two of them, recomputed in backward.

Liger's ``LigerRMSNormFunction`` keeps its input ``X``, its weight and the inverse RMS its kernel
computed (one float per row) for its own backward. The layers after it keep its output ``Y`` too: the
q, k, v projections and the gate and up projections keep their input for their weight gradients (and
their LoRA adapters the same tensor). ``Y`` is elementwise in ``X``: per element ``x * rstd`` and a
multiply by the weight, in the kernel's casting mode. With ``train.memory.recompute_norm_output`` the
saved-tensor hooks of ``saved_recompute`` keep a note in its place and the backward makes ``Y`` again
from what the norm kept, with the kernel's order of operations and roundings (two multiplies and a
cast, no sum, so nothing for a compiler to reorder): one Triton launch on CUDA (``norm_kernel``), two
PyTorch multiplies elsewhere. The trainer's first forward checks
every note against the tensor it stands for, bit for bit, and refuses the key on a machine where they
differ.

Qwen3-style attention normalizes q and k per head and Liger's rotary then rotates them in place, inside
the norms' output buffers; the attention keeps the rotated q and k. When both of the rotary's inputs
are (views of) RMSNorm outputs, the rotated q and k are made again too: both norms' outputs, then
Liger's own rotary kernel over them (it needs the GPU). A rotary over anything else (a projection's
output) is kept as it is.
"""

from __future__ import annotations

from typing import Any

import torch

from ligerkit.errors import LigerKitError
from ligerkit.train.memory.glu_recompute import RECOMPUTABLE as GLU_RECOMPUTABLE
from ligerkit.train.memory.saved_recompute import Recomputable, SavedRecompute, node_source

KEY = "train.memory.recompute_norm_output"
NORM_NODE = "LigerRMSNormFunctionBackward"
ROPE_NODE = "LigerRopeFunctionBackward"
_CASTING = {"llama": 0, "gemma": 1, "none": -1}
"""Liger's casting modes as its function stores them (it keeps the number)."""


def rms_norm_output(x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, offset: float,
                    casting_mode: int | str) -> torch.Tensor:
    """Liger's RMSNorm output from its (rows, width) input ``x``, its weight and the per-row inverse RMS
    its kernel stored, rounded as the kernel rounds: ``llama`` multiplies by ``rstd`` in float32, rounds
    to ``x``'s dtype, then multiplies by ``offset + weight`` in float32; ``gemma`` does both multiplies
    in float32; ``none`` works in ``x``'s dtype throughout. Returns a new (rows, width) tensor."""
    mode = _CASTING.get(casting_mode, casting_mode) if isinstance(casting_mode, str) else casting_mode
    r = rstd.reshape(-1, 1)
    if mode == _CASTING["none"]:
        y = x * r.to(x.dtype)
        return y if weight is None else y * (weight.to(x.dtype) + torch.tensor(offset, dtype=x.dtype))
    if mode not in (_CASTING["llama"], _CASTING["gemma"]):
        raise ValueError(f"unknown Liger RMSNorm casting mode {casting_mode!r}")
    if x.is_cuda and x.dim() == 2 and x.stride(1) == 1 and rstd.is_contiguous():
        from ligerkit.train.memory.norm_kernel import norm_output

        return norm_output(x, weight, rstd, offset, gemma=mode == _CASTING["gemma"])
    # A multiply into a tensor of x's dtype computes in float32 (the promoted type) and rounds once as it
    # stores: one kernel per multiply, no float32 copy of x.
    if weight is None:
        return torch.mul(x, r.float(), out=torch.empty_like(x))
    scale = weight.float() + offset
    if mode == _CASTING["llama"]:
        y = torch.mul(x, r.float(), out=torch.empty_like(x))  # x * rstd, rounded to x's dtype
        return torch.mul(y, scale, out=y)
    return torch.mul(x, r.float()).mul_(scale).to(x.dtype)


def _norm(node: Any, shape: torch.Size | None = None) -> torch.Tensor:
    """A ``LigerRMSNormFunction`` node's output made again from its saved tensors."""
    saved = node.saved_tensors
    x, weight, rstd = saved if len(saved) == 3 else (saved[0], None, saved[1])
    return rms_norm_output(x, weight, rstd, float(getattr(node, "offset", 0.0)), node.casting_mode)


def _norm_inputs(node: Any) -> list[Any] | None:
    """The RMSNorm nodes whose outputs a rotary node rotated (q's, then k's), reached through views
    only; ``None`` when either input is something else."""
    edges = [edge for edge in node.next_functions[:2]]
    found = [node_source(*edge) if edge[0] is not None else (None, 0) for edge in edges]
    if len(found) != 2 or any(n is None or type(n).__name__ != NORM_NODE or out != 0 for n, out in found):
        return None
    return [n for n, _ in found]


def _rope_kernel() -> Any:
    """Liger's rotary forward, ``rope_forward(q, k, cos, sin, rotary_dim=...)`` (GPU only)."""
    from liger_kernel.ops.rope import rope_forward

    return rope_forward


def _rope(node: Any, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``LigerRopeFunction`` node's rotated q and k made again: both norms' outputs, laid out as the
    attention's (batch, heads, seq, head_dim) views of (batch, seq, heads, head_dim) rows, then Liger's
    rotary kernel over them in place. ``shape`` is the saved q's or k's (batch, heads, seq, head_dim)."""
    rope_forward = _rope_kernel()
    q_node, k_node = _norm_inputs(node)
    cos, sin = node.saved_tensors
    batch, _, seq, width = shape
    q = _norm(q_node).view(batch, seq, -1, width).transpose(1, 2)
    k = _norm(k_node).view(batch, seq, -1, width).transpose(1, 2)
    q, k, _, _ = rope_forward(q, k, cos, sin, rotary_dim=getattr(node, "rotary_dim", None))
    return q, k


RECOMPUTABLE: dict[str, Recomputable] = {
    NORM_NODE: Recomputable(_norm, KEY),
    ROPE_NODE: Recomputable(_rope, KEY, outputs=2, applies=lambda node: _norm_inputs(node) is not None),
}
"""Backward-node class name -> how its output is made again (no autograd)."""


def recompute_table(glu: bool, norm: bool) -> dict[str, Recomputable]:
    """The outputs a run recomputes in backward: Liger's gated products with ``glu``
    (``train.memory.recompute_glu_product``), its RMSNorm outputs and the rotary over them with ``norm``
    (``train.memory.recompute_norm_output``); empty with neither."""
    return {**(GLU_RECOMPUTABLE if glu else {}), **(RECOMPUTABLE if norm else {})}


def check_first_forward(hooks: SavedRecompute) -> None:
    """Raise when the key is on and the first forward left no RMSNorm output to recompute (the key
    would do nothing: Liger off, its RMSNorm not swapped in, or no layer keeping a norm's output)."""
    if not hooks.by_node.get(NORM_NODE):
        raise LigerKitError(
            f"{KEY} is on, but the first forward kept no output of Liger's RMSNorm for the backward: the model "
            "runs none (Liger off, or model.liger_kernel.modules turns rms_norm off), or nothing after its norms "
            f"keeps their outputs, so nothing would be recomputed. Set {KEY}: false")
