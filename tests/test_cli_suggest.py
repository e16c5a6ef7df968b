"""``ligerkit suggest``: the official helper named where one patches the module, JSON configs filled into
the module's own config class, unknown and missing keys as errors, and nothing to probe as an error."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.suggest import SuggestError, suggest
from ligerkit.suggest.official import official_helper

runner = CliRunner()
VENDORED = "recipes/vendored_llm/model/modeling_vendored_llama.py"
SIZES = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}

# A modeling module whose classes take a config that no class describes (a JSON file fills it).
FREE_MODULE = '''
"""Classes that read a config no class describes."""
import torch
import torch.nn.functional as F
from torch import nn


class FreeRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * y.to(x.dtype)


class FreeMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
'''


def _write(tmp_path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _fail(args: list[str]) -> str:
    result = runner.invoke(app, ["suggest", *args])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return " ".join(result.stderr.split())


def test_a_module_with_an_official_helper_says_so_in_the_table():
    result = runner.invoke(app, ["suggest", "transformers.models.olmo2.modeling_olmo2"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "olmo2 has an official Liger helper, apply_liger_kernel_to_olmo2" in text
    assert 'kit.apply(model_family="olmo2")' in text and "vendored copy" in text
    assert text.index("official helper") < text.index("custom_patches = {")


def test_a_module_with_an_official_helper_says_so_in_json():
    result = runner.invoke(app, ["suggest", "transformers.models.olmo2.modeling_olmo2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["official_helper"] == {
        "family": "olmo2", "helper": "apply_liger_kernel_to_olmo2", "families": ["olmo2"],
        "route": 'kit.apply(model_family="olmo2")'}


def test_official_helpers_are_found_through_the_registry_modules():
    shared = official_helper("transformers.models.siglip.modeling_siglip")  # patched by vision-language helpers
    assert shared is not None and shared.families == ("gemma3", "paligemma")
    assert "patch this module as part of those models" in shared.advice()
    assert official_helper("transformers.models.qwen3_vl.modeling_qwen3_vl").family == "qwen3_vl"  # not the alias
    assert official_helper("transformers.models.bert.modeling_bert") is None
    assert official_helper("recipes.vendored_llm.model.modeling_vendored_llama") is None


def test_a_json_config_fills_the_module_config_class(tmp_path):
    cfg = _write(tmp_path, "cfg.json", SIZES)
    result = runner.invoke(app, ["suggest", VENDORED, "--config", cfg, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"] == "VendoredLlamaConfig" and data["official_helper"] is None
    found = {c["symbol"]: c for c in data["candidates"]}
    assert found["LlamaMLP"]["verdict"] == "match" and found["LlamaMLP"]["replacement"] == "LigerSwiGLUMLP"
    assert "hidden_act" not in json.dumps(found)  # built from the dataclass, which has hidden_act="silu"


def test_a_set_key_the_config_class_does_not_have_is_an_error(tmp_path):
    cfg = _write(tmp_path, "cfg.json", SIZES)
    assert "VendoredLlamaConfig has no option mlp_bias" in _fail([VENDORED, "--config", cfg, "--set", "mlp_bias=true"])
    assert "did you mean hidden_act?" in _fail([VENDORED, "--config", cfg, "--set", "hiden_act=gelu"])


def test_json_keys_must_be_ones_the_config_class_has_and_needs(tmp_path):
    typo = _write(tmp_path, "typo.json", {**SIZES, "rms_norm_epsilon": 1e-5})
    assert "has no option rms_norm_epsilon (did you mean rms_norm_eps?)" in _fail([VENDORED, "--config", typo])
    short = _write(tmp_path, "short.json", {k: v for k, v in SIZES.items() if k != "head_dim"})
    message = _fail([VENDORED, "--config", short])
    assert "VendoredLlamaConfig needs head_dim" in message and "--set head_dim=VALUE" in message


def test_a_free_form_config_must_set_what_a_candidate_reads(tmp_path):
    module = _write(tmp_path, "modeling_free_form.py", FREE_MODULE)
    sizes = _write(tmp_path, "free.json", {"hidden_size": 64, "intermediate_size": 128})
    message = _fail([module, "--config", sizes])
    assert "does not set hidden_act (read by LigerSwiGLUMLP" in message and "--set hidden_act=VALUE" in message
    result = runner.invoke(app, ["suggest", module, "--config", sizes, "--set", "hidden_act=silu", "--json"])
    assert result.exit_code == 0, result.output
    found = {c["symbol"]: c["replacement"] for c in json.loads(result.stdout)["candidates"]}
    assert found["FreeMLP"] == "LigerSwiGLUMLP"


def test_a_free_form_config_refuses_keys_nothing_reads(tmp_path):
    module = _write(tmp_path, "modeling_free_keys.py", FREE_MODULE)
    typo = _write(tmp_path, "typo.json", {"hidden_size": 64, "intermedate_size": 128, "hidden_act": "silu"})
    assert "never read config.intermedate_size (did you mean intermediate_size?)" in _fail([module, "--config", typo])
    good = _write(tmp_path, "good.json", {"hidden_size": 64, "intermediate_size": 128, "hidden_act": "silu"})
    assert "never read config.mlp_bias" in _fail([module, "--config", good, "--set", "mlp_bias=true"])


def test_a_module_with_nothing_to_probe_exits_1(tmp_path):
    module = _write(tmp_path, "modeling_nothing_here.py", textwrap.dedent('''
        """No norm, MLP or rotary here."""
        from torch import nn


        class Head(nn.Linear):
            pass
    '''))
    assert "nothing to probe in modeling_nothing_here" in _fail([module])
    with pytest.raises(SuggestError, match="nothing to probe"):
        suggest(module)


def test_an_unknown_set_key_on_a_transformers_module_is_an_error():
    assert "Olmo2Config has no option rms_norm_epsilon (did you mean rms_norm_eps?)" in _fail(
        ["transformers.models.olmo2.modeling_olmo2", "--set", "rms_norm_epsilon=1e-5"])
