"""One Triton kernel: an RMSNorm output made again from its input, its weight and the inverse RMS
Liger's kernel stored (CUDA only; ``norm_recompute.rms_norm_output`` calls it on CUDA tensors).

The PyTorch form takes two elementwise launches that mix bf16 and float32 operands, which PyTorch runs
through its slower casting loop (14.6 ms a step for the 4B shape's 288 launches on the H200). Here one
launch reads each input row once and writes the output once, with the operations and roundings of
Liger's ``llama`` and ``gemma`` casting modes: ``x * rstd`` in float32, rounded to ``x``'s dtype before
the weight in ``llama`` mode, then ``* (offset + w)`` in float32 and one rounding as it is stored. Both
forms are checked against the forward's tensors bit for bit on the trainer's first forward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_output_kernel(Y, X, W, RSTD, n_rows, n_cols, stride_y, stride_x, offset, GEMMA: tl.constexpr,
                        HAS_W: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    ok = row_ok[:, None] & (cols < n_cols)[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0)
    r = tl.load(RSTD + rows, mask=row_ok, other=0).to(tl.float32)
    y = x.to(tl.float32) * r[:, None]
    if HAS_W:
        w = tl.load(W + cols, mask=cols < n_cols, other=0).to(tl.float32)
        if not GEMMA:
            y = y.to(x.dtype).to(tl.float32)
        y = y * (offset + w)[None, :]
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=ok)


def norm_output(x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, offset: float,
                gemma: bool) -> torch.Tensor:
    """``rms_norm_output`` for a (rows, width) CUDA ``x`` with unit column stride, in one launch."""
    rows, width = x.shape
    block = triton.next_power_of_2(width)
    block_rows = max(1, min(32, 4096 // block))
    y = torch.empty((rows, width), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(rows, block_rows),)
    _norm_output_kernel[grid](y, x, weight if weight is not None else x, rstd.reshape(-1), rows, width, y.stride(0),
                              x.stride(0), float(offset), GEMMA=gemma, HAS_W=weight is not None,
                              BLOCK_ROWS=block_rows, BLOCK=block, num_warps=8 if block * block_rows >= 4096 else 4)
    return y
