"""Checkpoints are data, not code; a damaged one is named or skipped, never a raw traceback.

Crafted pickles (a ``__reduce__`` that creates a marker file) in ``.metadata``, in a non-tensor entry of a
``.distcp`` file and in ``rng_rank0.pt`` are shown live against the unrestricted loader, then refused by
ours with the marker never written. Every kind of damage to the newest checkpoint makes a resume fall
back to the previous one with a warning naming the file and why; with none intact it is a
``CheckpointError`` naming the file, and the run folder is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import torchrun_train
from torch.distributed.checkpoint.state_dict import get_state_dict

from ligerkit.train import Trainer, load_engine

from ligerkit.train.run import checkpoint, rng, safe_load
from ligerkit.errors import CheckpointError, CheckpointFileError
from ligerkit.train.distributed import DistEnv
from ligerkit.train.run.folder import RunDirError, keep_metrics_through
from ligerkit.train.stopping import TrainingStopped

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.steps=6", "train.run.checkpoint_every=2", "train.run.progress=false",
        "train.global_batch_size=4", "train.micro_batch_size=2", "train.run.keep_checkpoints=3"]
STOP = "train.run.stop_after_steps=4"  # a run that did not finish: a resume continues only such a run


class Payload:
    """Unpickling this creates ``marker``: the code a crafted checkpoint file would run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def train(run: Path, resume: Path | None = None, *more: str):
    sets = [*SETS, f"train.run.output_dir={run}", *more]
    return Trainer(load_engine(QWEN3_CPU, sets), resume).train(torch.device("cpu"))


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def snapshot(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The uninterrupted 6-step run: the curve a resumed one must follow."""
    run = tmp_path_factory.mktemp("trained") / "run"
    train(run)
    return run


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """The same run stopped after step 4 of 6, with checkpoints after steps 2 and 4."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.raises(TrainingStopped):
        train(run, None, STOP)
    assert [p.name for p in checkpoint.complete(run)] == ["step_0000002", "step_0000004"]
    return run


@pytest.fixture
def run(stopped, tmp_path) -> Path:
    """A copy of the stopped run to damage."""
    return Path(shutil.copytree(stopped, tmp_path / "run"))


def step(run: Path, n: int) -> Path:
    return run / "checkpoints" / f"step_{n:07d}"


def rewrite_manifest(folder: Path) -> None:
    """What someone who may write the folder does too: make the manifest match the crafted files."""
    meta = json.loads((folder / "meta.json").read_text())
    for name in meta["files"]:
        data = (folder / name).read_bytes()
        meta["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "meta.json").write_text(json.dumps(meta))


def make_legacy(folder: Path, rng_content: object = None) -> None:
    """Turn a checkpoint into one the code before manifests wrote: no format or files, its random streams
    as a ``torch.save``d dict (or ``rng_content`` in their place)."""
    if rng_content is None:
        rng_content = rng.read_rng(folder / "rng_rank0.json")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({k: meta[k] for k in ("step", "world_size", "save_seconds")}))
    (folder / "rng_rank0.json").unlink()
    torch.save(rng_content, folder / "rng_rank0.pt")


def tiny_state() -> tuple[torch.nn.Module, torch.optim.Optimizer, dict]:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    model_state, optim_state = get_state_dict(model, optimizer)
    return model, optimizer, {"model": model_state, "optim": optim_state}


def test_a_crafted_metadata_pickle_is_refused_and_never_run(tmp_path):
    _, _, state = tiny_state()
    dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    with pytest.raises(CheckpointFileError, match=r"\.metadata: is not DCP metadata .*io\.open") as refused:
        safe_load.read_metadata(tmp_path / "ckpt" / ".metadata")
    assert refused.value.file == tmp_path / "ckpt" / ".metadata"
    with pytest.raises(CheckpointError, match=r"\.metadata: is not DCP metadata"):
        safe_load.load_state(tmp_path / "ckpt", tiny_state()[2])
    assert not (tmp_path / "ran").exists()
    pickle.loads((tmp_path / "ckpt" / ".metadata").read_bytes()).close()  # the same file, unrestricted, runs the code
    assert (tmp_path / "ran").exists()


def test_a_crafted_non_tensor_entry_in_a_distcp_file_is_refused_and_never_run(tmp_path):
    _, _, state = tiny_state()
    state["optim"]["param_groups"][0]["lr"] = Payload(tmp_path / "ran")
    dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    metadata = safe_load.read_metadata(tmp_path / "ckpt" / ".metadata")  # the metadata itself is honest
    with pytest.raises(CheckpointFileError, match=r"__0_0\.distcp: entry optim\.param_groups\.0\.lr is not plain"):
        safe_load.check_storage(tmp_path / "ckpt", metadata)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp: entry optim\.param_groups\.0\.lr is not plain"):
        safe_load.load_state(tmp_path / "ckpt", tiny_state()[2])  # the planner itself refuses it too
    assert not (tmp_path / "ran").exists()
    dcp.load(tiny_state()[2], checkpoint_id=str(tmp_path / "ckpt"))  # DCP's default planner runs it
    assert (tmp_path / "ran").exists()


def test_a_crafted_rng_pickle_is_refused_and_never_run(tmp_path):
    torch.save(Payload(tmp_path / "ran"), tmp_path / "rng_rank0.pt")
    with pytest.raises(CheckpointFileError, match=r"rng_rank0\.pt: is not plain data"):
        rng.read_rng(tmp_path / "rng_rank0.pt")
    assert not (tmp_path / "ran").exists()
    torch.load(tmp_path / "rng_rank0.pt", weights_only=False).close()  # the old loader runs it
    assert (tmp_path / "ran").exists()


def test_the_restricted_loaders_read_a_clean_checkpoint_exactly(tmp_path):
    model, optimizer, state = tiny_state()
    dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.5)
    model_state, optim_state = get_state_dict(fresh, fresh_opt)
    loaded = {"model": model_state, "optim": optim_state}
    safe_load.load_state(tmp_path / "ckpt", loaded)
    assert torch.equal(loaded["model"]["weight"], model.weight.detach())
    group = loaded["optim"]["param_groups"][0]
    assert group["lr"] == 1e-3 and group["betas"] == (0.9, 0.999) and group["params"] == ["weight", "bias"]
    assert torch.equal(loaded["optim"]["state"]["weight"]["exp_avg"], optimizer.state[model.weight]["exp_avg"])


@pytest.mark.parametrize("legacy", [False, True], ids=["json", "legacy-pt"])
def test_random_streams_come_back_from_json_and_from_an_old_pickled_dict(tmp_path, legacy):
    path = tmp_path / rng.file_name(0, legacy)
    if legacy:
        torch.save(rng.rng_state(), path)  # what the code before JSON wrote
    else:
        rng.write_rng(path)
    assert legacy or path.read_text().startswith('{"format": 1')
    expected = (torch.rand(3), random.random())
    rng.set_rng_state(rng.read_rng(path))
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"torch": "AAAA", "python": [3, [1, 2], null]}'],
                         ids=["empty", "garbage", "wrong-sizes"])
def test_a_damaged_rng_file_is_named(tmp_path, content):
    (tmp_path / "rng_rank0.json").write_bytes(content)
    with pytest.raises(CheckpointFileError, match=r"rng_rank0\.json: is not a random-stream state"):
        rng.read_rng(tmp_path / "rng_rank0.json")


def _flip_a_byte(folder: Path) -> None:
    data = bytearray((folder / "__0_0.distcp").read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / "__0_0.distcp").write_bytes(bytes(data))


def _crafted_metadata(folder: Path) -> None:
    (folder / ".metadata").write_bytes(pickle.dumps(Payload(folder.parents[2] / "ran")))
    rewrite_manifest(folder)


DAMAGE = {  # what is done to the newest checkpoint -> (the file the warning names, the reason it gives)
    "truncated-distcp": (lambda f: (f / "__0_0.distcp").write_bytes((f / "__0_0.distcp").read_bytes()[:1000]),
                         "__0_0.distcp", "cut short"),
    "bit-flipped-distcp": (_flip_a_byte, "__0_0.distcp", "does not match its SHA-256"),
    "missing-metadata": (lambda f: (f / ".metadata").unlink(), ".metadata", "is missing"),
    "garbage-metadata": (lambda f: ((f / ".metadata").write_bytes(b"\x80\x04garbage"), rewrite_manifest(f)),
                         ".metadata", "is not DCP metadata"),
    "crafted-metadata": (_crafted_metadata, ".metadata", "asks for io.open"),
    "garbage-meta-json": (lambda f: (f / "meta.json").write_text("{oops"), "meta.json", "is not JSON"),
    "meta-json-names-another-step": (
        lambda f: (f / "meta.json").write_text(json.dumps({**json.loads((f / "meta.json").read_text()), "step": 3})),
        "meta.json", "says step 3, but its folder is step_0000004"),
    "garbage-rng": (lambda f: ((f / "rng_rank0.json").write_text("garbage"), rewrite_manifest(f)),
                    "rng_rank0.json", "is not a random-stream state"),
    "emptied-folder": (lambda f: [p.unlink() for p in f.iterdir()], "meta.json", "is missing"),
    "crafted-rng-in-an-old-checkpoint": (lambda f: make_legacy(f, Payload(f.parents[2] / "ran")),
                                         "rng_rank0.pt", "is not plain data"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_newest_checkpoint_is_skipped_for_the_previous_one_saying_so(run, damage, caplog):
    hurt, file, reason = DAMAGE[damage]
    hurt(step(run, 4))
    before = snapshot(run)
    with caplog.at_level(logging.WARNING, logger="ligerkit.train"):
        assert checkpoint.usable(run, DistEnv()) == step(run, 2)
    warning = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warning) == 1 and f"{step(run, 4) / file}: " in warning[0] and reason in warning[0], warning
    assert snapshot(run) == before and not (run.parent / "ran").exists()


def test_with_no_intact_checkpoint_the_resume_stops_naming_the_file_and_changes_nothing(run):
    _flip_a_byte(step(run, 4))
    (step(run, 2) / "meta.json").write_text("[]")
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + '{"step": 4, "lo')  # torn, too
    before = snapshot(run)
    with pytest.raises(CheckpointError, match=r"step_0000004/__0_0\.distcp: does not match its SHA-256.*"
                                              r"step_0000002/meta\.json: is not a JSON object.*start a new run") as err:
        train(run, resume=run)
    assert err.value.file == step(run, 4) / "__0_0.distcp" and snapshot(run) == before


def test_a_resume_past_a_damaged_checkpoint_gives_the_uninterrupted_curve(run, trained, caplog):
    _flip_a_byte(step(run, 4))
    with caplog.at_level(logging.WARNING, logger="ligerkit.train"):
        assert train(run, resume=run).first_step == 2
    assert "step_0000004 is damaged and skipped" in caplog.text and losses(run) == losses(trained)


def test_a_crafted_entry_saved_into_a_run_is_never_run_on_resume(tmp_path, monkeypatch, caplog):
    real, saves = dcp.save, []

    def second_save_crafted(state, checkpoint_id):
        saves.append(checkpoint_id)
        if len(saves) == 2:
            state["optim"]["param_groups"][0]["lr"] = Payload(tmp_path / "ran")
        return real(state, checkpoint_id=checkpoint_id)

    monkeypatch.setattr(dcp, "save", second_save_crafted)
    with pytest.raises(TrainingStopped):
        train(tmp_path / "run", None, STOP)
    monkeypatch.setattr(dcp, "save", real)
    with caplog.at_level(logging.WARNING, logger="ligerkit.train"):
        assert train(tmp_path / "run", resume=tmp_path / "run").first_step == 2
    assert "entry optim.param_groups.0.lr is not plain data" in caplog.text and not (tmp_path / "ran").exists()


def test_a_crafted_rng_pickle_beside_a_new_checkpoint_is_never_read(run):
    torch.save(Payload(run / "ran"), step(run, 4) / "rng_rank0.pt")
    assert train(run, run, "train.steps=5").first_step == 4 and not (run / "ran").exists()


def test_an_old_run_folder_resumes_safely_to_the_same_curve(run, trained, caplog):
    shutil.rmtree(step(run, 4))
    make_legacy(step(run, 2))
    with caplog.at_level(logging.WARNING, logger="ligerkit.train"):
        assert train(run, resume=run).first_step == 2
    assert "written before checkpoints carried a manifest" in caplog.text
    assert losses(run) == losses(trained)  # the old pickled random streams came back: bit for bit


def test_a_torn_last_metrics_line_is_repaired_and_its_step_rewritten(run, trained, caplog):
    shutil.rmtree(step(run, 4))  # killed while writing step 4's row, after the checkpoint at step 2
    rows = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("".join(r + "\n" for r in rows[:3]) + rows[3][:20])
    with caplog.at_level(logging.WARNING, logger="ligerkit.train"):
        assert train(run, resume=run).first_step == 2
    assert "its last line is torn" in caplog.text and losses(run) == losses(trained)


def test_a_damaged_metrics_row_before_the_end_is_named(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl:2 is not a metrics row"):
        keep_metrics_through(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0}\nnot json\n{"step": 2}\n'
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert keep_metrics_through(tmp_path, 2) == 2
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'


def test_two_ranks_skip_a_checkpoint_damaged_in_one_rank_shard(tmp_path):
    def run_torchrun(port: int, out: Path, resume: Path | None = None, *more: str) -> subprocess.CompletedProcess:
        return torchrun_train(QWEN3_CPU, [*SETS, f"train.run.output_dir={out}", *more], tmp_path, port, resume=resume)

    first = run_torchrun(29561, tmp_path / "run", None, STOP)
    assert first.stderr.count("stopped after step 4") == 2, first.stderr[-3000:]  # each rank says so
    whole = losses(tmp_path / "run")
    meta = json.loads((step(tmp_path / "run", 4) / "meta.json").read_text())
    assert {"__0_0.distcp", "__1_0.distcp", "rng_rank0.json", "rng_rank1.json", ".metadata"} == set(meta["files"])
    shard = step(tmp_path / "run", 4) / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0x10
    shard.write_bytes(bytes(data))
    resumed = run_torchrun(29562, tmp_path / "run", resume=tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step_0000004 is damaged and skipped" in resumed.stderr and "__1_0.distcp" in resumed.stderr
    assert losses(tmp_path / "run")[:4] == whole and [s for s, _ in losses(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]
