"""Model FLOPs per token for MFU: matmul parameters plus attention, forward and backward.

Matmul parameters are counted from the model's ``nn.Linear`` layers (embedding lookups cost no
matmul; a tied output head is counted through its ``lm_head`` Linear): 6 FLOPs per trained weight (2
forward, 2 for the input's gradient, 2 for the weight's), 4 per frozen one (LoRA's base layers: no
weight gradient is computed), counting every frozen layer's input gradient. Attention adds
``12 x layers x heads x head_dim x seq_len`` per token (QK^T and AV, forward and backward), the
PaLM convention, counted over the full (not causal-halved) score matrix.
"""

from __future__ import annotations


import torch

from ligerkit.hf import text_config

# bf16 dense peak per device, TFLOP/s (vendor figures), by a substring of the device name.
PEAK_TFLOPS = {"H200": 989.5, "H100": 989.5, "A100": 312.0, "L40S": 362.0}


def flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward; a frozen weight's gradient is not computed)."""
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    matmul = sum(w.numel() * (6.0 if w.requires_grad else 4.0) for w in linears) / 6.0
    config = text_config(getattr(model, "config", None))
    layers = getattr(config, "num_hidden_layers", 0) or 0
    heads = getattr(config, "num_attention_heads", 0) or 0
    head_dim = getattr(config, "head_dim", None) or (
        (getattr(config, "hidden_size", 0) or 0) // heads if heads else 0
    )
    return 6.0 * matmul + 12.0 * layers * heads * head_dim * seq_len


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    """Per-device bf16 peak in FLOP/s, or ``None`` when unknown (MFU is then not reported)."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None
