"""GPU: where a recipe's peak memory goes, phase by phase, for one arm (one process per arm).

Builds the recipe's model through the trainer (kit.apply, build, scan; compiled per layer as the trainer
compiles it when ``train.compile`` asks for it), runs one optimizer step so
the AdamW states exist (with ``--first-step-tokens N``, on micro-batches of N tokens: the states' size does
not depend on the length, and at a long one this halves the run), then measures the first micro-batch of
the second step, at ``data.seq_len``: cuBLAS's workspaces (given back once the model is built, this thread's
made again, ``workspace_gib``), weights, optimizer states,
the gradients held from earlier micro-batches (only when the step has several: with one, they appear
during the backward, inside the peak), activations saved by the forward (allocated after forward
minus before), and the peak of forward + backward. Prints one JSON line.

With ``--saved``, the measured forward also counts each tensor autograd saves for the backward, once per
storage (``ligerkit.proof.saved_census``): ``saved_by_kind`` by the kind of module that keeps it
(attention, MLP, norm, output head, checkpointed layer inputs, the loss, ...), ``saved_by_producer`` by
the operation that made it (followed back through views) with its width; tensors custom autograd
functions keep as attributes of their contexts (a fused loss's input gradient) count under their own
kind and by function and attribute. The census passes every tensor on to the hooks below it (the
recompute keys', offload's), so the forward keeps what it keeps without ``--saved``; what those hooks
keep in a tensor's place is counted as replaced. With ``train.activation_checkpointing: offload``,
``host_offloaded_gib`` is what the measured forward put in host memory and
``offload_kept_on_device_gib`` the inputs past ``train.memory.offload_budget_gib`` it kept on the device
(offload's hooks are above the census's: those inputs are in the allocator's figure, not in
``saved_by_kind``).

    python benchmarks/memory_gpu.py recipes/qwen3/configs/gpu.yaml --set train.loss.path=fused
"""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext

import torch

from ligerkit.train import Trainer, load_engine, set_up_model
from ligerkit.train.config.compile_mode import COMPILED
from ligerkit.proof.arm_runs import clear_cublas_workspaces
from ligerkit.proof.saved_census import SavedCensus
from ligerkit.train.step import StepModule, device_batch

GIB = 2**30


def library_workspaces(device: torch.device) -> tuple[float, float]:
    """What is allocated without cuBLAS's workspaces, then those of this thread's stream (GiB).

    PyTorch's allocator hands cuBLAS a workspace per handle (one a thread) and stream at its first matrix
    product there; whatever ran one in the set-up (the kit's in-place checks, when its verdict cache is
    cold) leaves theirs.
    They are given back, then made again by small products in the step's dtypes, so they are counted apart
    from the weights, the same whatever ran before (the backward's thread makes its own in the first step,
    among the optimizer states)."""
    clear_cublas_workspaces()
    without = torch.cuda.memory_allocated()
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.ones(64, 64, device=device, dtype=dtype)
        a @ a
        torch.nn.functional.linear(a, a, a[0])  # with a bias: cublasLt's workspace
        del a
    torch.cuda.synchronize()
    return without / GIB, (torch.cuda.memory_allocated() - without) / GIB


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--saved", action="store_true", help="also break what the forward keeps down by kind of module and by producer")
    parser.add_argument("--first-step-tokens", type=int, metavar="N",
                        help="run the step that creates the optimizer states on micro-batches of N tokens "
                             "(default: data.seq_len, the measured length)")
    args = parser.parse_args()
    if args.first_step_tokens is not None and args.first_step_tokens <= 0:
        parser.error(f"--first-step-tokens takes a length above 0 (got {args.first_step_tokens})")
    engine = load_engine(args.config, args.overrides)
    # the first step's micro-batches, from the same config at that length (the model is built once, below)
    first_step = (engine if args.first_step_tokens is None else
                  load_engine(args.config, [*args.overrides, f"data.seq_len={args.first_step_tokens}"]))
    device = torch.device("cuda")
    try:
        trainer = Trainer(engine)
        model = set_up_model(engine, device)
        if engine.config.train.compile in COMPILED:  # compiling changes what the forward keeps
            trainer.compile_model(model)
        weights, workspace = library_workspaces(device)
        module = StepModule(engine, model, engine.loss, engine.config.train.autocast_bf16,
                            engine.recomputes_glu_products, engine.recomputes_norm_outputs)
        optimizer = trainer.optimizer(module)
        vocab = model.get_output_embeddings().weight.shape[0]
        trainer.train_step(module, optimizer, Trainer(first_step).micro_batches(0, vocab), device)
        torch.cuda.synchronize()
        states = torch.cuda.memory_allocated() / GIB - workspace - weights
        first, *rest = trainer.micro_batches(1, vocab)
        batch = device_batch(first, device, engine.config.train.drop_right_padding_mask)
        # with several micro-batches a step, the earlier ones' gradients are held while the next one
        # runs; with one, the gradients appear during the backward (the optimizer left them as None)
        held = bool(rest)
        for p in module.parameters():  # frozen weights (a LoRA base) hold no gradient
            p.grad = torch.zeros_like(p) if held and p.requires_grad else None
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        grads = before / GIB - workspace - weights - states
        census = SavedCensus(model) if args.saved else None
        if census is not None:
            module.within = lambda: census  # entered inside the recompute keys' hooks
        offloaded, kept_before = (engine.offload.bytes_offloaded, engine.offload.bytes_kept) if engine.offload else (0, 0)
        torch.cuda.reset_peak_memory_stats()
        loss = module(batch)
        module.within = nullcontext
        if census is not None:
            census.count_contexts(loss)  # what custom functions keep on their contexts (a fused loss's gradient)
        torch.cuda.synchronize()
        saved = (torch.cuda.memory_allocated() - before) / GIB
        forward_peak = (torch.cuda.max_memory_allocated() - before) / GIB
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / GIB
    finally:
        engine.liger_kit.revert()
    print(json.dumps({"config": args.config, "overrides": args.overrides,
                      "first_step_tokens": first_step.config.data.seq_len, "workspace_gib": workspace,
                      "weights_gib": weights, "optimizer_states_gib": states, "grads_held": held,
                      "grads_gib": grads, "saved_by_forward_gib": saved,
                      "forward_transient_peak_gib": forward_peak, "micro_batch_peak_gib": peak,
                      "host_offloaded_gib": ((engine.offload.bytes_offloaded - offloaded) / GIB
                                             if engine.offload is not None else 0.0),
                      "offload_kept_on_device_gib": ((engine.offload.bytes_kept - kept_before) / GIB
                                                     if engine.offload is not None else 0.0),
                      **({"saved_gib": census.kept_bytes / GIB, "saved_replaced": census.replaced,
                          "saved_by_kind": census.table("kind"), "saved_by_producer": census.table("producer")}
                         if census is not None else {})}))


if __name__ == "__main__":
    main()
