"""``train.activation_checkpointing: offload``: checkpointed layers' kept inputs in host memory.

On a CPU the hooks copy within host memory, which is what these tests run: the same loss and gradients
bit for bit as checkpointing alone and as no checkpointing (every weight, LoRA, the fused loss, dropout),
one input per layer and forward offloaded, a layer given its hidden states by keyword offloaded too, a
step that offloads nothing refused; the trainer refuses the key on a CPU before building anything, a
compiled config refuses it, and a resume may change it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.errors import ConfigError, LigerKitError
from ligerkit.proof.arm_grads import recipe_loss
from ligerkit.train import Trainer, load_engine, set_up_model
from ligerkit.train.recipe.adapters import perturb_zero_adapters, training_line
from ligerkit.train.memory.checkpointing import recompute_layers
from ligerkit.train.memory.offload import HostOffload
from ligerkit.train.run.resume import SAFE_TO_CHANGE

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.steps=2", "train.run.progress=false",
        "train.global_batch_size=4", "train.micro_batch_size=2"]
LORA = ["train.lora={rank: 4, alpha: 8}"]
DROPOUT = ["model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, "
           "num_key_value_heads: 2, head_dim: 16, vocab_size: 320, attention_dropout: 0.3}"]


def _loss_and_grads(sets: list[str], form: str, budget: int | None = None,
                    ) -> tuple[float, dict[str, torch.Tensor], HostOffload | None]:
    engine = load_engine(QWEN3_CPU, [*SETS, *sets])
    torch.manual_seed(0)
    model = set_up_model(engine, torch.device("cpu"))
    perturb_zero_adapters(model)
    offload = HostOffload(budget=budget) if form == "offload" else None
    if form != "plain":
        assert recompute_layers(model, engine.fsdp_units(model), offload) == ["model.layers.0", "model.layers.1"]
    torch.manual_seed(1)  # the same dropout stream for every form
    model.train()
    loss = recipe_loss(engine, torch.device("cpu"), 0, 2)(model)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, offload


@pytest.mark.parametrize("sets", [[], LORA, ["train.loss.path=fused"], DROPOUT], ids=["full", "lora", "fused", "dropout"])
def test_offload_gives_the_loss_and_gradients_of_checkpointing_and_of_neither_bit_for_bit(sets):
    plain, plain_grads, _ = _loss_and_grads(sets, "plain")
    kept, kept_grads, _ = _loss_and_grads(sets, "checkpointed")
    moved, moved_grads, offload = _loss_and_grads(sets, "offload")
    assert moved == kept == plain
    assert plain_grads and plain_grads.keys() == kept_grads.keys() == moved_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(moved_grads[name], grad, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(kept_grads[name], grad, rtol=0, atol=0, msg=name)
    # one input per layer: each layer's hidden states (batch 2 x 16 tokens x 64 wide, float32), nothing else
    assert offload is not None and offload.packed == 2
    assert offload.bytes_offloaded == 2 * 2 * 16 * 64 * 4 or sets == DROPOUT and offload.bytes_offloaded > 0


def test_past_the_budget_the_inputs_stay_on_the_device_with_the_same_loss_and_gradients():
    import gc

    one = 2 * 16 * 64 * 4  # one layer's input: batch 2 x 16 tokens x 64 wide, float32
    kept, kept_grads, _ = _loss_and_grads([], "checkpointed")
    moved, moved_grads, offload = _loss_and_grads([], "offload", budget=one + one // 2)
    assert moved == kept and moved_grads.keys() == kept_grads.keys()
    for name, grad in kept_grads.items():
        torch.testing.assert_close(moved_grads[name], grad, rtol=0, atol=0, msg=name)
    assert (offload.packed, offload.bytes_offloaded, offload.kept, offload.bytes_kept) == (1, one, 1, one)
    assert "1 more, 0.000 GiB, kept on the device (the budget" in offload.first_step()
    gc.collect()
    assert offload.held == 0  # the graph is gone: nothing counts against the next step's budget


def test_a_budget_that_holds_no_input_is_an_error_naming_the_key():
    offload = HostOffload(budget=10)
    t = torch.zeros(4, 4)
    assert offload.pack(t) is t and offload.unpack(t) is t  # past the budget: kept as it is
    with pytest.raises(LigerKitError, match=r"train.memory.offload_budget_gib.*holds none of the layers. inputs"):
        offload.first_step()


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, hidden_states: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.tanh(self.linear(hidden_states)) * scale


class _Stack(nn.Module):
    def __init__(self, by_keyword: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(), _Layer()])
        self.by_keyword = by_keyword

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(hidden_states=x, scale=0.5) if self.by_keyword else layer(x, scale=0.5)
        return x.square().sum()


@pytest.mark.parametrize("by_keyword", [False, True], ids=["positional", "keyword"])
def test_a_layer_given_its_hidden_states_by_keyword_is_offloaded_too(by_keyword):
    torch.manual_seed(0)
    reference, model = _Stack(by_keyword), _Stack(by_keyword)
    model.load_state_dict(reference.state_dict())
    offload = HostOffload()
    recompute_layers(model, ["_Layer"], offload)
    x = torch.randn(3, 4, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    reference(x).backward()
    model(x2).backward()
    assert offload.packed == 2 and offload.bytes_offloaded == 2 * 3 * 4 * 4
    torch.testing.assert_close(x2.grad, x.grad, rtol=0, atol=0)
    for (name, p), q in zip(reference.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)
    assert "2 checkpointed layer input(s)" in offload.first_step()


def test_a_host_copy_is_made_at_pack_and_a_tensor_of_its_own_comes_back():
    offload = HostOffload()
    t = torch.arange(6.0).reshape(2, 3)
    handle = offload.pack(t)
    t.add_(100)  # the forward may reuse the memory once packed: the copy holds the packed values
    back = offload.unpack(handle)
    assert torch.equal(back, torch.arange(6.0).reshape(2, 3)) and back.data_ptr() != handle.host[0].data_ptr()
    assert torch.equal(offload.unpack(handle), back)  # a second backward unpacks it again


def test_a_step_that_offloads_nothing_is_an_error_naming_the_key():
    with pytest.raises(LigerKitError, match="offload moved nothing to host memory"):
        HostOffload().first_step()


def test_the_trainer_refuses_offload_on_a_cpu_before_anything_is_built(tmp_path):
    engine = load_engine(QWEN3_CPU, [*SETS, f"train.run.output_dir={tmp_path / 'run'}",
                                     "train.activation_checkpointing=offload"])
    with pytest.raises(ConfigError, match="offloading saves nothing") as caught:
        Trainer(engine).train(torch.device("cpu"))
    assert "train.activation_checkpointing: true" in str(caught.value)
    assert engine.model is None and not (tmp_path / "run").exists()


def test_offload_is_refused_with_compile_and_a_misspelt_value_names_the_choices():
    with pytest.raises(ConfigError, match="offload runs uncompiled"):
        load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload", "train.compile=ops"])
    with pytest.raises(ConfigError, match="offload"):
        load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offlaod"])


def test_a_resume_may_change_it_and_the_training_line_says_it():
    assert "offloaded" in SAFE_TO_CHANGE["train.activation_checkpointing"]
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload"])
    line = training_line(nn.Linear(2, 2), engine.config.train)
    assert line == "every weight; activation checkpointing on, kept inputs offloaded to host memory"


def test_the_bench_recommendation_keeps_the_offload_form():
    from ligerkit.proof.recommend import training_lines
    from ligerkit.train.config import load_recipe_config

    for value in ("offload", "true"):
        config = load_recipe_config(QWEN3_CPU, [f"train.activation_checkpointing={value}"])
        assert f"train.activation_checkpointing: {value}" in training_lines(config.train)


def test_ligerkit_check_plans_an_offload_config_on_the_meta_device():
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload"])
    model = set_up_model(engine, torch.device("meta"))
    assert isinstance(engine.offload, HostOffload) and engine.offload.packed == 0
    assert training_line(model, engine.config.train).endswith("on, kept inputs offloaded to host memory")


def test_nothing_of_a_forward_stays_in_host_memory_once_its_graph_is_gone():
    import gc
    import weakref

    offload = HostOffload()
    x = torch.randn(3, 4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
        y = (x * 2).sin()  # sin saves its input: one handle
    handle = weakref.ref(offload._last())
    assert handle() is not None
    y.sum().backward()
    del y
    gc.collect()
    assert handle() is None and offload.packed == 1


def test_the_footprint_moves_the_layers_inputs_to_host_memory_and_refuses_what_the_host_cannot_hold(monkeypatch):
    from ligerkit.train.recipe import footprint as F

    budget = ["train.memory.offload_budget_gib=1"]

    def at(form: str) -> F.Footprint:
        sets = [*SETS, f"train.activation_checkpointing={form}", "data.seq_len=4096", *(budget if form == "offload" else [])]
        engine = load_engine(QWEN3_CPU, sets)
        return F.estimate(engine.config, engine.model_config(), torch.device("cuda"))

    kept, offloaded = at("true"), at("offload")
    inputs = 2 * 2 * 4096 * 64 * 4  # micro-batch 2 x 4096 tokens x width 64, 2 layers, float32
    assert offloaded.offloaded == inputs and kept.offloaded == 0
    assert kept.activations - offloaded.activations == inputs
    assert offloaded.host_bytes - kept.host_bytes == inputs
    assert "offloaded inputs" in offloaded.describe()
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload", "data.seq_len=4096", *budget])
    monkeypatch.setattr(F, "device_memory", lambda device: 2**40)
    monkeypatch.setattr(F, "host_memory", lambda: offloaded.host_bytes - 1)
    with pytest.raises(ConfigError, match="of host memory.*Lower train.memory.offload_budget_gib"):
        F.check_footprint(engine.config, engine.model_config(), torch.device("cuda"))
    monkeypatch.setattr(F, "host_memory", lambda: offloaded.host_bytes)
    F.check_footprint(engine.config, engine.model_config(), torch.device("cuda"))


def test_the_footprint_counts_pinned_blocks_splits_at_the_budget_and_refuses_a_budget_that_holds_no_input(monkeypatch):
    from ligerkit.train.memory.offload import pinned_size
    from ligerkit.train.recipe import footprint as F

    assert [pinned_size(n) for n in (0, 1, 3, 1024, 1025)] == [0, 1, 4, 1024, 2048]
    one = 2 * 3000 * 64 * 4  # micro-batch 2 x 3000 tokens x width 64, float32: 1,536,000 bytes
    block = pinned_size(one)  # 2 MiB on CUDA
    sets = [*SETS, "data.seq_len=3000", "train.activation_checkpointing=offload"]
    engine = load_engine(QWEN3_CPU, [*sets, f"train.memory.offload_budget_gib={1.5 * block / 2**30!r}"])
    found = F.estimate(engine.config, engine.model_config(), torch.device("cuda"))
    assert (found.offloaded, found.offload_block) == (block, block)  # one layer of two: the other on the device
    kept = F.estimate(load_engine(QWEN3_CPU, [*SETS, "data.seq_len=3000", "train.activation_checkpointing=true"])
                      .config, engine.model_config(), torch.device("cuda"))
    assert kept.activations - found.activations == one
    monkeypatch.setattr(F, "device_memory", lambda device: 2**40)
    small = load_engine(QWEN3_CPU, [*sets, f"train.memory.offload_budget_gib={0.9 * block / 2**30!r}"])
    with pytest.raises(ConfigError, match=r"holds no layer's input at data.seq_len=3,000 \(one takes 0.002 GiB"):
        F.check_footprint(small.config, small.model_config(), torch.device("cuda"))


def test_an_input_kept_past_the_budget_starts_bringing_back_the_last_one_in_host_memory():
    offload = HostOffload(budget=64)
    first, second, third = torch.ones(4, 4), torch.full((4, 4), 2.0), torch.full((4, 4), 3.0)  # 64 bytes each
    handle = offload.pack(first)
    assert offload.pack(second) is second and offload.pack(third) is third
    assert offload.unpack(third) is third and handle.back is None  # not yet: two layers before it is needed
    assert offload.unpack(second) is second and handle.back is not None  # the next one backward needs
    assert torch.equal(offload.unpack(handle), first)


@pytest.mark.parametrize("value", ["true", "0", "-1", "abc", ".nan"])
def test_a_budget_that_is_not_auto_or_a_positive_number_is_refused(value):
    with pytest.raises(ConfigError, match=f"offload_budget_gib: .*write auto or a number of GiB above 0"):
        load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload", f"train.memory.offload_budget_gib={value}"])


def test_a_budget_written_as_yaml_reads_it_and_one_without_offload_names_the_line_that_set_it(tmp_path):
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=offload", "train.memory.offload_budget_gib=2e3"])
    assert engine.config.train.memory.offload_budget_gib == 2000.0
    with pytest.raises(ConfigError, match=r"the file itself is fine[^\n]*\n  --set train.memory.offload_budget_gib=8.0: "
                                          r".*train.activation_checkpointing=false; set it to offload"):
        load_engine(QWEN3_CPU, [*SETS, "train.memory.offload_budget_gib=8.0"])
    config = tmp_path / "offload.yaml"
    config.write_text(QWEN3_CPU.read_text().replace("train: {", "train: {activation_checkpointing: offload, "
                                                    "memory: {offload_budget_gib: 4}, "))
    with pytest.raises(ConfigError, match=r"--set train.activation_checkpointing=true: .*offload_budget_gib"):
        load_engine(config, [*SETS, "train.activation_checkpointing=true"])


def test_a_large_input_is_held_in_pieces_that_waste_little_pinned_memory_and_comes_back_exactly():
    from ligerkit.train.memory.offload import SPLIT_FROM, host_pieces, pinned_size

    gib = 2**30
    assert host_pieces(10) == [10] and host_pieces(0) == []
    assert host_pieces(int(2.5 * gib)) == [2 * gib, gib // 2] and pinned_size(int(2.5 * gib)) == int(2.5 * gib)
    odd = 2 * gib + gib // 2 + 3 * 2**20  # two powers of two, then 3 MiB in a 4 MiB block
    assert host_pieces(odd) == [2 * gib, gib // 2, 3 * 2**20] and pinned_size(odd) == odd + 2**20
    for n in (SPLIT_FROM, 3 * SPLIT_FROM + 12345 * 4, int(7.3 * gib) // 4 * 4):
        assert sum(host_pieces(n)) == n and pinned_size(n) <= n * 8 / 7 + 1, n
    offload = HostOffload()
    elements = (SPLIT_FROM + SPLIT_FROM // 2 + 4096) // 4  # float32: 64 MiB + 32 MiB + 16 KiB
    t = torch.arange(elements, dtype=torch.float32).reshape(-1, 1024)
    handle = offload.pack(t)
    assert [p.numel() * 4 for p in handle.host] == host_pieces(elements * 4) and handle.shape == t.shape
    back = offload.unpack(handle)
    assert torch.equal(back, t) and back.shape == t.shape and back.is_contiguous()
    strided = t.t()  # not contiguous: one piece with its strides
    one = offload.pack(strided)
    assert len(one.host) == 1 and one.host[0].stride() == strided.stride()
    assert torch.equal(offload.unpack(one), strided)


def test_an_empty_saved_tensor_stays_where_it_is_and_is_not_counted():
    # torch < 2.13's checkpoint saves an empty marker beside each layer's input: nothing to move or count
    offload = HostOffload()
    marker = torch.empty(0)
    assert offload.pack(marker) is marker and offload.unpack(marker) is marker
    assert (offload.packed, offload.kept, offload.held) == (0, 0, 0)
