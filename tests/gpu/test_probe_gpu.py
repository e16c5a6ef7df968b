"""GPU: the probe also runs Liger's real kernels; right pairs still match, wrong ones still do not."""

from __future__ import annotations

import pytest
from toy_models import modeling_table as T

from ligerkit.probe.catalog import CATALOG
from ligerkit.probe.probe import kernel_available, probe

NAMED = {r.name: r for r in CATALOG}


@pytest.mark.gpu
@pytest.mark.parametrize("source, name, config", [
    (T.StandardRMSNorm, "LigerRMSNorm", T.TableConfig()),
    (T.GemmaStyleRMSNorm, "LigerRMSNormForGemma2", T.TableConfig()),
    (T.WeightInFloat32RMSNorm, "LigerRMSNormForGemma4", T.TableConfig()),
    (T.AffineLayerNorm, "LigerLayerNorm", T.TableConfig()),
    (T.GatedSiluMLP, "LigerSwiGLUMLP", T.TableConfig()),
    (T.GatedTanhGeluMLP, "LigerGEGLUMLP", T.TableConfig(hidden_act="gelu_pytorch_tanh")),
    (T.FusedGateUpMLP, "LigerPhi3SwiGLUMLP", T.TableConfig()),
    (T.standard_rotary, "liger_rotary_pos_emb", T.TableConfig()),
    (T.partial_rotary, "liger_rotary_pos_emb", T.TableConfig()),
])
def test_right_pairs_match_liger_s_real_kernel(source, name, config):
    assert kernel_available()
    result = probe(source, NAMED[name], config, T)
    assert result.ok, result.reasons
    assert any(key.startswith("kernel") for key in result.errors), "the real kernel did not run"


@pytest.mark.gpu
def test_wrong_pair_still_fails_with_the_real_kernel():
    assert not probe(T.GemmaStyleRMSNorm, NAMED["LigerRMSNorm"], T.TableConfig(), T).ok
