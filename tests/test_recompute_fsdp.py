"""The recompute keys under FSDP2, on two gloo ranks (CPU): the norm outputs and rotated q/k recomputed
in backward give every full gradient bit for bit as keeping them, on each rank, and the hooks take their
notes under sharding (a key that silently did nothing there would pass the first check alone)."""

from __future__ import annotations

import json
import socket

import torch.multiprocessing as mp

import ranks_recompute
from ligerkit.train.memory import norm_recompute as N


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_norm_outputs_recomputed_under_fsdp2_on_two_ranks_change_no_gradient(tmp_path):
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    port = _free_port()
    mp.spawn(_rank, args=(2, port, [str(o) for o in outs]), nprocs=2, join=True)
    for out in outs:
        found = json.loads(out.read_text())
        kept, lean = found["kept"], found["recomputed"]
        assert lean["notes"].get(N.NORM_NODE, 0) >= 2 * 5 and lean["notes"].get(N.ROPE_NODE, 0) >= 2 * 2, lean["notes"]
        assert lean["loss"] == kept["loss"]
        assert kept["grads"] and lean["grads"] == kept["grads"]
    first, second = (json.loads(o.read_text()) for o in outs)
    assert first["kept"]["grads"] == second["kept"]["grads"]  # FSDP2 reduced them: one gradient on both ranks


def _rank(rank: int, world: int, port: int, outs: list[str]) -> None:
    ranks_recompute.run(rank, world, port, outs[rank])
