"""The recipe's gradient check in a process of its own (``ligerkit.proof.grads_apart``), on the CPU: the
same result as in this process, a ligerkit error back as its own class, any other end said."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ligerkit.errors import ConfigError, LigerKitError, LigerNeedsAcceleratorError
from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof import grads_apart
from ligerkit.proof.grads import Coverage, GradParity, TensorError
from ligerkit.proof.grads_apart import parity_from_record, parity_record, recipe_grad_parity_apart
from ligerkit.proof.recipe_grads import recipe_grad_parity
from ligerkit.proof.routes import Routing

CONFIG = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
OFF = ("model.liger_kernel.enabled=false",)  # Liger's kernels do not run on a CPU: the patched arm is Liger off


def test_the_check_in_its_own_process_gives_what_it_gives_in_this_one():
    tolerance = GradTolerance(3.0, 0.02)
    apart = recipe_grad_parity_apart(CONFIG, ["model.dtype=bfloat16"], torch.device("cpu"), tolerance, OFF)
    here = recipe_grad_parity(CONFIG, ["model.dtype=bfloat16"], torch.device("cpu"), tolerance, OFF)
    assert apart == here and apart.tolerance == tolerance
    assert apart.coverage.compared == apart.coverage.total > 10 and apart.verdict == "PASS"


def test_a_parity_record_reads_back_field_for_field():
    parity = GradParity([TensorError("w", 0.01, math.nan, 0.03), TensorError("b", 0.0, 0.0, 0.01)],
                        {"float32": 1.5, "eager": 1.25}, GradTolerance(2.5, 0.0),
                        Coverage("M", 2, 3, 10, 12, ("c",)), Routing(64, 1, None), ("w",))
    back = parity_from_record(parity_record(parity))
    assert back.coverage == parity.coverage and back.routing == parity.routing and back.resampled == ("w",)
    assert [t.name for t in back.tensors] == ["w", "b"] and math.isnan(back.tensors[0].patched)
    assert back.losses == parity.losses and back.tolerance == parity.tolerance and back.verdict == "FAIL"


def test_a_ligerkit_error_in_the_check_comes_back_as_its_class_with_its_message():
    with pytest.raises(ConfigError, match="train.nonsense: unknown key") as raised:
        recipe_grad_parity_apart(CONFIG, ["train.nonsense=1"], torch.device("cpu"), None, OFF)
    assert any("train.nonsense" in p for p in raised.value.problems)
    with pytest.raises(LigerNeedsAcceleratorError, match="need a CUDA GPU"):
        recipe_grad_parity_apart(CONFIG, [], torch.device("cpu"))  # Liger on, on a CPU


def test_a_process_that_ends_without_an_answer_is_an_error_with_its_code(monkeypatch):
    monkeypatch.setattr(grads_apart.sys, "executable", "false")
    with pytest.raises(LigerKitError, match="ended with code 1 and no answer"):
        recipe_grad_parity_apart(CONFIG, [], torch.device("cpu"), None, OFF)


def test_any_other_failure_in_the_check_is_a_ligerkit_error_naming_it_with_the_process_output():
    with pytest.raises(LigerKitError, match="failed in its process: RuntimeError: .*meta") as raised:
        recipe_grad_parity_apart(CONFIG, [], torch.device("meta"), None, OFF)
    assert "Traceback" in str(raised.value)  # the end of what the process wrote
