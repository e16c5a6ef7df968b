"""GPU: where a recipe's peak memory goes, phase by phase, for one arm (one process per arm).

Builds the recipe's model through the trainer (kit.apply, build, scan; compiled per layer as the trainer
compiles it when ``train.compile`` asks for it), runs one optimizer step so
the AdamW states exist, then measures the first micro-batch of the second step: weights, optimizer states,
the gradients held from earlier micro-batches (only when the step has several: with one, they appear
during the backward, inside the peak), activations saved by the forward (allocated after forward
minus before), and the peak of forward + backward. Prints one JSON line.

With ``--saved``, the measured forward also records each tensor autograd saves for the backward, once
per storage, grouped by the operation that made it (followed back through views) with its width:
``saved_by_producer`` says which tensors the kept bytes are. A recorded forward keeps what it keeps
without ``--saved`` (the hook returns each tensor as it is); it cannot see inside
``train.memory.recompute_glu_product``'s and ``train.memory.recompute_norm_output``'s own hooks, so they are not combined.

    python benchmarks/memory_gpu.py recipes/qwen3/configs/gpu.yaml --set train.loss.path=fused
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from contextlib import nullcontext

import torch

from ligerkit.train import Trainer, load_engine, set_up_model
from ligerkit.train.config.compile_mode import COMPILED
from ligerkit.train.memory.saved_recompute import view_source
from ligerkit.train.step import StepModule, device_batch

GIB = 2**30


def _producer(tensor: torch.Tensor) -> str:
    """The name of the operation that made ``tensor``'s storage, followed back through views."""
    node, _ = view_source(tensor)
    return type(node).__name__ if node is not None else "no grad_fn (made under no_grad or in a function)"


class SavedRecorder:
    """Saved-tensor hooks that record each saved storage once, by producer and last dimension."""

    def __init__(self, skip: set[int]):
        self.skip = skip  # the parameters' storages
        self.seen: dict[int, tuple[str, int]] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        """Record ``tensor``'s storage (not a parameter's) and keep the tensor as it is."""
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.skip and key not in self.seen:
            width = tensor.shape[-1] if tensor.dim() else 1
            self.seen[key] = (f"{_producer(tensor)} {tensor.dtype} width {width}", storage.nbytes())
        return tensor

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The hooks, as a context manager around the forward."""
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def table(self) -> dict[str, dict[str, float]]:
        """Producer -> bytes, GiB and storages, largest first."""
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for label, nbytes in self.seen.values():
            groups[label][0] += nbytes
            groups[label][1] += 1
        return {k: {"bytes": v[0], "gib": round(v[0] / GIB, 4), "tensors": v[1]}
                for k, v in sorted(groups.items(), key=lambda kv: -kv[1][0])}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--saved", action="store_true", help="also break the saved tensors down by producer")
    args = parser.parse_args()
    engine = load_engine(args.config, args.overrides)
    if args.saved and engine.recompute_table:
        parser.error("--saved cannot see inside the recompute keys' hooks (train.memory.recompute_glu_product, "
                     "train.memory.recompute_norm_output); leave them off")
    device = torch.device("cuda")
    try:
        trainer = Trainer(engine)
        model = set_up_model(engine, device)
        if engine.config.train.compile in COMPILED:  # compiling changes what the forward keeps
            trainer.compile_model(model)
        weights = torch.cuda.memory_allocated() / GIB
        module = StepModule(engine, model, engine.loss, engine.config.train.autocast_bf16,
                            engine.recomputes_glu_products, engine.recomputes_norm_outputs)
        optimizer = trainer.optimizer(module)
        vocab = model.get_output_embeddings().weight.shape[0]
        trainer.train_step(module, optimizer, trainer.micro_batches(0, vocab), device)
        torch.cuda.synchronize()
        states = torch.cuda.memory_allocated() / GIB - weights
        first, *rest = trainer.micro_batches(1, vocab)
        batch = device_batch(first, device, engine.config.train.drop_right_padding_mask)
        # with several micro-batches a step, the earlier ones' gradients are held while the next one
        # runs; with one, the gradients appear during the backward (the optimizer left them as None)
        held = bool(rest)
        for p in module.parameters():  # frozen weights (a LoRA base) hold no gradient
            p.grad = torch.zeros_like(p) if held and p.requires_grad else None
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        grads = before / GIB - weights - states
        recorder = SavedRecorder({p.untyped_storage().data_ptr() for p in module.parameters()}) if args.saved else None
        torch.cuda.reset_peak_memory_stats()
        with recorder.hooks() if recorder is not None else nullcontext():
            loss = module(batch)
        torch.cuda.synchronize()
        saved = (torch.cuda.memory_allocated() - before) / GIB
        forward_peak = (torch.cuda.max_memory_allocated() - before) / GIB
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / GIB
    finally:
        engine.liger_kit.revert()
    print(json.dumps({"config": args.config, "overrides": args.overrides, "weights_gib": weights,
                      "optimizer_states_gib": states, "grads_held": held, "grads_gib": grads, "saved_by_forward_gib": saved,
                      "forward_transient_peak_gib": forward_peak, "micro_batch_peak_gib": peak,
                      **({"saved_by_producer": recorder.table()} if recorder is not None else {})}))


if __name__ == "__main__":
    main()
