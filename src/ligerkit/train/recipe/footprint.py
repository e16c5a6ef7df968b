"""What a config will need in memory, estimated before anything is allocated, and refused when it cannot fit.

A model config with a typo'd dimension (``hidden_size: 100000000``) or a batch with a few zeros too many
(``global_batch_size: 1e9``) otherwise fails late and badly: an allocator traceback after minutes, the
machine swapping, or data preparation looping for hours before the first step. The estimate here is a
*lower bound* that takes microseconds whatever the sizes (no model is built):

- parameters: each text or vision tower's embedding (vocab x hidden) plus, per layer, the attention
  projections (q, k, v, o) and two MLP matrices (hidden x intermediate); norms, biases, a third MLP
  matrix and experts are left out;
- per rank on the device: weights, gradients and AdamW's two states (each in the parameters' dtype,
  sharded over the ranks under FSDP), plus one micro-batch's activations: one saved hidden state per
  layer and the logits (all of them on the standard loss path, ``chunk_tokens`` rows on the fused one);
- in host memory: one step's micro-batches for every rank on the host (three int64 tensors each); with
  ``train.activation_checkpointing: offload`` the saved hidden states, layer by layer up to the offload
  budget (:func:`offload_budget`), there instead of on the device (pinned host memory the system cannot
  page out, in the power-of-two blocks PyTorch's host allocator makes); and on a CPU run everything above
  as well. A budget that holds no layer's input is refused (offload would move nothing).

Because every term is at most what training really holds, a refused config cannot fit; a config that
passes may still run out of memory (that is the allocator's to say).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from ligerkit.loss.liger_chunks import CHUNK_TOKENS
from ligerkit.train.config import ConfigError, RecipeConfig
from ligerkit.train.memory.offload import pinned_size
from ligerkit.train.models import resolve_dtype

MAX_SAMPLES_PER_STEP = 1 << 20  # per rank: data preparation beyond this runs for many minutes per step
_NAMES = {
    "hidden": ("hidden_size", "d_model", "n_embd", "embed_dim", "dim"),
    "layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth"),
    "vocab": ("vocab_size", "n_vocab"),
    "intermediate": ("intermediate_size", "ffn_dim", "d_ff", "n_inner"),
    "heads": ("num_attention_heads", "num_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
}


def _get(config: Any, key: str) -> int:
    """The first positive integer ``config`` holds under one of ``key``'s names (0 when none)."""
    for name in _NAMES[key]:
        value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _children(config: Any) -> list[Any]:
    values = config.values() if isinstance(config, dict) else vars(config).values() if hasattr(config, "__dict__") \
        else ()
    return [v for v in values if isinstance(v, dict) or (hasattr(v, "__dict__") and not isinstance(v, type)
                                                          and not callable(v))]


def towers(config: Any, depth: int = 0) -> list[Any]:
    """The parts of a model config that each describe a stack of layers (a config with sub-configs that
    do, e.g. ``text_config`` and ``vision_config``, counts only those: never the same tower twice)."""
    if config is None or depth > 3:
        return []
    found = [t for child in _children(config) for t in towers(child, depth + 1)]
    if found:
        return found
    return [config] if _get(config, "hidden") else []


def tower_parameters(config: Any) -> int:
    """A lower bound on one tower's parameter count (see the module docstring)."""
    hidden, layers = _get(config, "hidden"), _get(config, "layers")
    heads = _get(config, "heads")
    head_dim = _get(config, "head_dim") or (hidden // heads if heads else hidden)
    kv = _get(config, "kv_heads") or heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim if heads else 0
    return _get(config, "vocab") * hidden + layers * (attention + 2 * hidden * _get(config, "intermediate"))


@dataclass(frozen=True)
class Footprint:
    """A config's memory needs in bytes (lower bounds), per rank on its device and per host."""

    parameters: int
    dtype: torch.dtype
    weights: int
    gradients: int
    optimizer: int
    activations: int
    batches: int  # host: one step's micro-batches, every rank on this host
    samples_per_step: int  # per rank
    device_type: str
    ranks_on_host: int = 1
    offloaded: int = 0  # host, pinned: the layers' saved inputs under activation_checkpointing: offload
    offload_block: int = 0  # the pinned block of the smallest layer input (offload only)

    @property
    def device_bytes(self) -> int:
        """Weights, gradients, AdamW states and one micro-batch's activations, per rank."""
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def host_bytes(self) -> int:
        """What host memory holds: the step's batches, the offloaded layer inputs of every local rank, and on
        a CPU run every local rank's model state too."""
        return self.batches + self.offloaded * self.ranks_on_host + (
            self.device_bytes * self.ranks_on_host if self.device_type == "cpu" else 0)

    def describe(self) -> str:
        """The sizes, one line."""
        return (f"{self.parameters / 1e9:.3g}B parameters in {str(self.dtype).removeprefix('torch.')}: weights "
                f"{gib(self.weights)}, gradients {gib(self.gradients)}, AdamW states {gib(self.optimizer)}, one "
                f"micro-batch's activations {gib(self.activations)} per rank; one step's batches {gib(self.batches)} "
                "in host memory" + (f", and the layers' offloaded inputs {gib(self.offloaded)} per rank"
                                    if self.offloaded else ""))


def gib(size: int) -> str:
    """Bytes as GiB, readable at any size."""
    value = size / 2**30
    return f"{value:,.1f} GiB" if value >= 1 else f"{value:.2g} GiB"


def estimate(config: RecipeConfig, model_config: Any, device: torch.device, world_size: int = 1,
             ranks_on_host: int = 1) -> Footprint:
    """The footprint of training ``config`` (its model from ``model_config``) on ``device`` x ``world_size``."""
    t, seq = config.train, config.data.seq_len
    dtype = resolve_dtype(config.model.dtype, device)
    size = torch.finfo(dtype).bits // 8
    parts = towers(model_config)
    params = sum(tower_parameters(p) for p in parts)
    text = [p for p in parts if _get(p, "vocab")]
    saved = sum(t.micro_batch_size * seq * _get(p, "hidden") * max(_get(p, "layers"), 1) for p in text)
    rows = t.micro_batch_size * seq if t.loss.path == "standard" else min(t.micro_batch_size * seq,
                                                                           t.loss.chunk_tokens or CHUNK_TOKENS)
    logits = sum(rows * _get(p, "vocab") for p in text)
    shard = -(-params * size // world_size)
    per_rank = t.global_batch_size // max(world_size, 1)
    trained = 0 if t.lora is not None else shard  # adapters: a lower bound leaves their few weights out
    moved, offloaded, blocks = 0, 0, []
    if t.activation_checkpointing == "offload":  # layer by layer, in forward order, until the budget is held
        budget, cuda = offload_budget(t.memory.offload_budget_gib), device.type == "cuda"
        for p in text:
            one = t.micro_batch_size * seq * _get(p, "hidden") * size
            blocks.append(block := pinned_size(one) if cuda else one)
            layers = min(max(_get(p, "layers"), 1), (budget - offloaded) // block if block else 0)
            moved, offloaded = moved + layers * one, offloaded + layers * block
    return Footprint(params, dtype, shard, trained, 2 * trained, (saved + logits) * size - moved,
                     per_rank * ranks_on_host * seq * 8 * 3, per_rank, device.type, ranks_on_host, offloaded,
                     min(blocks, default=0))


def host_memory() -> int:
    """This machine's memory in bytes: physical RAM, or a container's (cgroup) limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as fh:
                value = fh.read().strip()
        except OSError:
            continue
        if value.isdigit():
            total = min(total, int(value))
    return total


OFFLOAD_RESERVE = 16 * 2**30
"""Host memory ``offload_budget_gib: auto`` leaves free at least (and a quarter of the machine's, if more)."""


def offload_budget(value: float | str) -> int:
    """``train.memory.offload_budget_gib`` in bytes: ``auto`` is this machine's memory less a quarter of it
    (at least :data:`OFFLOAD_RESERVE` left free; 0 on a machine that small)."""
    if value == "auto":
        total = host_memory()
        return max(total - max(OFFLOAD_RESERVE, total // 4), 0)
    return int(float(value) * 2**30)


def device_memory(device: torch.device) -> int | None:
    """Bytes free for this process on an accelerator (``None`` where unknown: the CPU, meta)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device)


_FIX = ("Lower model.config's dimensions (hidden size, layers, vocabulary), train.micro_batch_size or data.seq_len, "
        "use train.loss.path: fused for a large vocabulary, or train on more GPUs (torchrun) or a larger machine")


def check_footprint(config: RecipeConfig, model_config: Any, device: torch.device, world_size: int = 1,
                    ranks_on_host: int = 1) -> Footprint:
    """Refuse (:class:`ConfigError`, with the sizes) a config that cannot fit or would prepare data for hours."""
    found = estimate(config, model_config, device, world_size, ranks_on_host)
    if found.samples_per_step > MAX_SAMPLES_PER_STEP:
        raise ConfigError(
            f"train.global_batch_size={config.train.global_batch_size:,} makes {found.samples_per_step:,} samples "
            f"per rank for every step (at most {MAX_SAMPLES_PER_STEP:,}: more would prepare data for many minutes "
            f"before each step; {found.describe()}). Lower train.global_batch_size, or spread it over more ranks")
    if config.train.activation_checkpointing == "offload" and device.type == "cuda" and not found.offloaded:
        budget = offload_budget(config.train.memory.offload_budget_gib)
        raise ConfigError(
            f"train.memory.offload_budget_gib ({config.train.memory.offload_budget_gib}: {gib(budget)} on this "
            f"machine) holds no layer's input at data.seq_len={config.data.seq_len:,} (one takes "
            f"{gib(found.offload_block)} of pinned memory), so offload would move nothing. Raise the budget, or set "
            "train.activation_checkpointing: true")
    on_device = device_memory(device)
    if on_device is not None and found.device_bytes > on_device:
        raise ConfigError(f"this config needs at least {gib(found.device_bytes)} per GPU, and {device} has "
                          f"{gib(on_device)} free ({found.describe()}). {_FIX}")
    if device.type != "meta" and found.host_bytes > host_memory():
        fix = ("Lower train.memory.offload_budget_gib (the inputs past it stay on the device; auto fits this "
               "machine), set train.activation_checkpointing: true, or lower data.seq_len or train.micro_batch_size"
               ) if found.offloaded else _FIX
        raise ConfigError(f"this config needs at least {gib(found.host_bytes)} of host memory, and this machine has "
                          f"{gib(host_memory())} ({found.describe()}). {fix}")
    return found
