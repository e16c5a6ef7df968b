"""Liger's fused linear cross entropy with the token normalization inside the kernel (GPU only).

The algorithm is Liger's FLCE: the rows are taken a chunk at a time; each chunk's logits come from
one matmul, Liger's cross-entropy Triton kernel turns them in place into the logits' gradient (and
writes each row's loss), and two more matmuls turn that gradient into the gradients of the hidden
states and of the output projection. The gradients are computed in the forward and only scaled
in the backward, so the logits never exist for more than one chunk.

What differs from calling ``LigerFusedLinearCrossEntropyFunction`` with ``reduction="sum"`` is
where the division by the recipe's token count ``N`` happens. That function stores
``softmax - onehot`` in bf16, sums it into the weight gradient, rounds that to bf16 and only then
multiplies by ``1/N``: two roundings. The standard loss (full logits, float32 cross entropy,
``loss / N``) rounds ``(softmax - onehot) / N`` once. Here the kernel divides by the caller's
``N`` in float32 before it stores the gradient (its ``mean`` reduction with ``n_non_ignore = N``),
and the weight gradient is accumulated over the chunks in float32 and rounded once, so each bf16
gradient the fused loss produces is rounded the way the standard loss rounds it. Training then follows
the standard loss's trajectory instead of drifting from it (docs/history.md, "Loss-compatibility
path", the fused loss's name then).

Memory: besides one chunk of logits, the fused loss holds the float32 weight-gradient accumulator (4
bytes per output-projection weight). It is rounded to the weight's 16-bit dtype inside its own
storage, so the accumulator and a 16-bit copy never coexist; that copy is what Liger's function
adds at the end of its forward, which is when the decoder's saved activations peak.
"""

from __future__ import annotations

import torch

from ligerkit.naming import IGNORE_INDEX

# Rows of logits that exist at once, on the GPU and the CPU path alike. The weight gradient's update per
# chunk, ``grad_w += dlogits.T @ x``, reads and writes the float32 (vocab x width) accumulator
# whatever the chunk's rows, and does 2 x rows FLOPs per element of it: about 4 bytes per 2 x rows FLOPs,
# so below about 800 rows it runs at the H200's memory speed, not its matmul speed. On the H200 at the
# Qwen3-0.6B shape (4 x 4096 tokens, width 1024, vocab 151936), the loss head's forward + backward
# took 35.7 ms at 512 rows, 30.1 at 1024, 28.6 at 2048, 27.4 at 4096 and 29.3 at 8192, holding 0.76,
# 0.90, 1.19, 1.77 and 2.93 GiB (``benchmarks/flce_chunks_gpu.py``, docs/benchmarks.md "Fused-loss
# chunks"): 2048 rows is within 5% of the fastest at two thirds of its memory.
CHUNK_TOKENS = 2048
# Elements converted per step when the float32 weight-gradient accumulator is rounded down.
_DOWNCAST_BLOCK = 1 << 24


def _downcast_in_place(acc: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``acc`` (contiguous float32) rounded to the 16-bit ``dtype``, written into ``acc``'s own storage.

    Block ``i`` of the result occupies bytes that only blocks ``<= i`` of the source occupied, so
    walking the blocks in order never overwrites a value before it is read; each block goes through
    a small temporary because the first block's source and destination overlap. The float32
    accumulator and a full-size 16-bit copy never exist at the same time; the result keeps the
    accumulator's storage until the gradient is consumed.
    """
    if dtype == torch.float32:
        return acc
    flat = acc.view(-1)
    out = flat.view(dtype)[: flat.numel()]
    for start in range(0, flat.numel(), _DOWNCAST_BLOCK):
        block = slice(start, start + _DOWNCAST_BLOCK)
        out[block].copy_(flat[block].to(dtype))
    return out.view(acc.shape)


class _TokenNormalizedFLCE(torch.autograd.Function):
    """Sum over rows of ``cross_entropy(hidden @ weight.T + bias, labels) / normalizer``."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # noqa: D102
                labels: torch.Tensor, normalizer: float, ignore_index: int, label_smoothing: float,
                softcap: float | None, chunk_tokens: int) -> torch.Tensor:
        import triton
        from liger_kernel.ops.cross_entropy import liger_cross_entropy_kernel

        rows, width = hidden.shape
        vocab = weight.shape[0]
        # Under autocast the matmuls run in the autocast dtype, as the model's own head would.
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else hidden.dtype
        x_all = hidden.to(dtype)
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        want_x, want_w, want_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        device = hidden.device
        grad_x = torch.empty((rows, width), dtype=dtype, device=device) if want_x else None
        grad_w = torch.zeros((vocab, width), dtype=torch.float32, device=device) if want_w else None
        grad_b = torch.zeros(vocab, dtype=torch.float32, device=device) if want_b else None
        losses = torch.zeros(rows, dtype=torch.float32, device=device)
        step = max(1, min(chunk_tokens, rows))
        logits_buffer = torch.empty((step, vocab), dtype=dtype, device=device)
        block_size = min(32768, triton.next_power_of_2(vocab))
        logits = x = target = None
        for start in range(0, rows, step):
            end = min(start + step, rows)
            x = x_all[start:end]
            logits = logits_buffer[: end - start]
            torch.mm(x, w.t(), out=logits)
            if b is not None:
                logits.add_(b)
            target = labels[start:end].contiguous()
            liger_cross_entropy_kernel[(end - start,)](
                X_ptr=logits, X_stride=logits.stride(-2), Y_ptr=target, Y_stride=target.stride(-1),
                weight_ptr=None, loss_ptr=losses[start:end], z_loss_ptr=None, loss_stride=1,
                token_accuracy_ptr=None, token_accuracy_stride=0, predicted_tokens_ptr=None,
                predicted_tokens_stride=0, n_cols=vocab, n_non_ignore=float(normalizer),
                sum_non_ignore_weight=float(normalizer), weight_sum=0.0, ignore_index=ignore_index,
                lse_square_scale=0.0, label_smoothing=label_smoothing, reduction="mean",
                softcap=softcap, RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False,
                RETURN_PREDICTED_TOKENS=False, HAS_WEIGHT=False, HAS_SOFTCAPPING=softcap is not None,
                HAS_GRADIENTS=True, BLOCK_SIZE=block_size, num_warps=32,
            )
            # ``logits`` now holds d(loss)/d(logits), already divided by the normalizer.
            if grad_x is not None:
                torch.mm(logits, w, out=grad_x[start:end])
            if grad_w is not None:
                torch.addmm(grad_w, logits.t(), x, out_dtype=torch.float32, out=grad_w)
            if grad_b is not None:
                grad_b += logits.sum(dim=0, dtype=torch.float32)
        # The last chunk's views would keep the buffer alive past this point.
        del logits_buffer, logits, x, target
        ctx.grad_x = grad_x.to(hidden.dtype) if grad_x is not None else None
        ctx.grad_w = _downcast_in_place(grad_w, weight.dtype) if grad_w is not None else None
        ctx.grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return losses.sum()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):  # noqa: D102
        grads = [ctx.grad_x, ctx.grad_w, ctx.grad_b]
        if getattr(ctx, "consumed", False):
            raise RuntimeError(
                "the fused loss computes its gradients in the forward and hands them out once; run the "
                "forward again instead of calling backward twice on it (retain_graph)"
            )
        ctx.consumed = True
        ctx.grad_x = ctx.grad_w = ctx.grad_b = None
        # The loss is normally the last op (grad_output is exactly 1, and x * 1 == x in any dtype);
        # a caller that scales it further gets its factor applied here, in place.
        for g in grads:
            if g is not None:
                g.mul_(grad_output)
        return grads[0], grads[1], grads[2], None, None, None, None, None, None


def liger_token_normalized_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                normalizer: float, bias: torch.Tensor | None = None, *,
                                ignore_index: int = IGNORE_INDEX, label_smoothing: float = 0.0,
                                softcap: float | None = None, chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """``sum(cross_entropy(hidden @ weight.T + bias, labels)) / normalizer`` on a CUDA GPU.

    ``hidden`` is (rows, width) and contiguous, ``labels`` (rows,) already shifted; ignored rows
    count nothing. The weight gradient is accumulated in float32 and rounded once.
    """
    if not hidden.is_cuda:
        raise ValueError("liger_token_normalized_loss runs Liger's Triton kernel and needs CUDA tensors")
    if normalizer <= 0:
        raise ValueError(f"normalizer must be positive, got {normalizer}")
    return _TokenNormalizedFLCE.apply(hidden, weight, bias, labels, float(normalizer), ignore_index,
                                      float(label_smoothing), softcap, int(chunk_tokens))
