"""One rank of the two-rank gloo check of the recompute keys under FSDP2 (``test_recompute_fsdp.py``).

Each rank builds the same tiny Qwen3 whose norms and rotary call the stand-ins of Liger's functions
(``test_norm_recompute``), shards its decoder layers and the root with FSDP2 as the trainer does
(``ligerkit.train.distributed.shard``), and runs one micro-batch of its own twice: outputs kept, then
recomputed (``train.memory.recompute_norm_output``, every note checked bit for bit in the forward). It
writes its losses, the notes taken and the hash of every full gradient to ``out``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def run(rank: int, world: int, port: int, out: str) -> None:
    """The rank's part (``torch.multiprocessing.spawn`` calls it)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        import test_norm_recompute as T
        from transformers import Qwen3Config, Qwen3ForCausalLM
        from transformers.models.qwen3 import modeling_qwen3

        from ligerkit.train.distributed import shard
        from ligerkit.train.memory import norm_recompute as N
        from ligerkit.train.memory.saved_recompute import recomputed

        def norm_forward(self, hidden):  # noqa: ANN001, ANN202
            return T.LigerRMSNormFunction.apply(hidden, self.weight, self.variance_epsilon, 0.0, "llama")

        modeling_qwen3.Qwen3RMSNorm.forward = norm_forward  # a process of its own: nothing to put back
        modeling_qwen3.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: T.LigerRopeFunction.apply(
            q, k, cos, sin)
        N._rope_kernel = lambda: T.stand_in_rope_forward
        torch.manual_seed(0)
        config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=4, head_dim=8, max_position_embeddings=64,
                             use_cache=False, attn_implementation="sdpa")
        model = Qwen3ForCausalLM(config)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.add_(0.1 * torch.randn_like(p))
        shard(model, ("Qwen3DecoderLayer",))
        ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(rank))
        found = {}
        for form in ("kept", "recomputed"):
            model.zero_grad(set_to_none=True)
            if form == "kept":
                loss, notes = model(input_ids=ids, labels=ids).loss, {}
            else:
                with recomputed(N.recompute_table(glu=False, norm=True), verify=True) as hooks:
                    loss = model(input_ids=ids, labels=ids).loss
                notes = dict(hooks.by_node)
            loss.backward()
            grads = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.grad is not None}
            found[form] = {"loss": loss.item(), "notes": notes, "grads": {
                n: hashlib.sha256(g.detach().contiguous().numpy().tobytes()).hexdigest() for n, g in grads.items()}}
        Path(out).write_text(json.dumps(found))
        dist.barrier()  # both ranks' files are written
    except BaseException:
        dist.destroy_process_group()
        raise
    # gloo's teardown can abort a rank whose work is done ("terminate called without an active exception",
    # a race between the ranks' exits, seen under a loaded machine): the files are written, so leave at once
    os._exit(0)
