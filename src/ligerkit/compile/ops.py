"""Liger's kernels as operators the compiler understands (``torch.library.custom_op``).

``torch.compile`` traces straight into Liger's autograd functions and hands their Triton kernels to
Inductor, which must then work out from the kernel source what each kernel reads and writes. For
Liger's RMSNorm kernels that analysis fails (the kernel calls ``.to`` on a scalar Inductor passes as a
Python float), so Inductor assumes every tensor argument is written, the norm weight included; and
Liger's MLP backward kernels write their gradients into their saved inputs. Measured on an H200
(``benchmarks/compile_drift_gpu.py``, docs/benchmarks.md): with both in one compiled layer, one
backward changes the norm weights beside the MLP, so every later micro-batch trains on other weights.

Here each kernel is an opaque operator with a declared contract instead:

- **nothing is written in place.** Forward and backward take their inputs read-only and return new
  tensors (a kernel that writes into its input is given a private copy), so ``mutates_args=()`` is
  the truth and the compiler has no aliasing to guess;
- **fake implementations** give every output's shape, dtype and strides without running anything,
  so a decoder layer holding these operators compiles with ``fullgraph=True``;
- **autograd formulas** (``register_autograd``) call the backward operator, itself opaque;
- **on CUDA** the implementation is Liger's own Triton launcher (``liger_kernel.ops``), the kernels
  Liger's module classes run uncompiled; **elsewhere** (CPU) it is reference math in PyTorch, written
  from the formulas in Liger's kernels, so the operators can be checked (``torch.library.opcheck``)
  and compiled on a machine without a GPU.

``ligerkit.compile.routes`` points Liger's module classes at these operators; the classes themselves
stay Liger's.
"""

from __future__ import annotations

from ligerkit.compile.activations import (
             gelu_mul,
             gelu_mul_backward,
             silu_mul,
             silu_mul_backward,
)
from ligerkit.compile.norms import (
             layer_norm,
             layer_norm_backward,
             rms_norm,
             rms_norm_backward,
)
from ligerkit.compile.rotary import rope, rope_backward

OPERATORS = (rms_norm, rms_norm_backward, layer_norm, layer_norm_backward, silu_mul, silu_mul_backward, gelu_mul,
             gelu_mul_backward, rope, rope_backward)

__all__ = ["OPERATORS", "gelu_mul", "gelu_mul_backward", "layer_norm", "layer_norm_backward", "rms_norm",
           "rms_norm_backward", "rope", "rope_backward", "silu_mul", "silu_mul_backward"]
