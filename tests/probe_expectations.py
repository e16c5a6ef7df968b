"""Expected Liger verdicts for transformers families Liger has no helper for, read by hand from transformers 5.22.2."""

# Read by hand against liger-kernel 0.8.5 (liger_kernel/transformers/{rms_norm,swiglu,geglu,layer_norm,rope}.py
# and liger_kernel/ops/rope.py). None of the model_types below is a key of
# liger_kernel.transformers.monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN.
#
# Verdict strings: "LigerRMSNorm", "LigerRMSNormForGemma2", "LigerRMSNormForGemma4", "LigerLayerNorm",
# "LigerSwiGLUMLP", "LigerGEGLUMLP", "LigerPhi3SwiGLUMLP", "liger_rotary_pos_emb", "leave_off".
#
# "expect" gives the verdict at the config class's DEFAULTS. "flips" gives one config override per symbol and the
# verdict that override produces. Symbols whose verdict is genuinely ambiguous are left out of "expect" and
# described in "notes".

FAMILIES = {
    "olmo": {
        "module": "transformers.models.olmo.modeling_olmo",
        "config_class": "transformers.OlmoConfig",
        "expect": {
            "OlmoLayerNorm": ("leave_off", "no weight/bias parameters (F.layer_norm with None, None)"),
            "OlmoMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"OlmoMLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "OlmoRotaryEmbedding returns fp32 cos/sin (no cast) and apply_rotary_pos_emb casts the result back "
        "to q.dtype; Liger's kernel also computes in the cos/sin dtype and stores in q's dtype, so still a match.",
    },
    "cohere": {
        "module": "transformers.models.cohere.modeling_cohere",
        "config_class": "transformers.CohereConfig",
        "expect": {
            "CohereLayerNorm": ("leave_off", "weight only, no bias (bias arg ignored)"),
            "CohereMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("leave_off", "interleaved rotate_half (x[..., ::2], x[..., 1::2])"),
        },
        "flips": {"CohereMLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "CohereLayerNorm is a real mean-centred LayerNorm (fp32, weight applied in fp32) but has no bias "
        "parameter even when called with bias=True. Rotary embedding uses repeat_interleave(freqs, 2).",
    },
    "cohere2": {
        "module": "transformers.models.cohere2.modeling_cohere2",
        "config_class": "transformers.Cohere2Config",
        "expect": {
            "Cohere2LayerNorm": ("leave_off", "weight only, no bias (bias arg ignored)"),
            "Cohere2MLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("leave_off", "interleaved rotate_half (x[..., ::2], x[..., 1::2])"),
        },
        "flips": {"Cohere2MLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "Same norm/rope as cohere.",
    },
    "helium": {
        "module": "transformers.models.helium.modeling_helium",
        "config_class": "transformers.HeliumConfig",
        "expect": {
            "HeliumRMSNorm": ("LigerRMSNormForGemma4", "weight multiplied in fp32 before the cast back, init ones"),
            "HeliumMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("leave_off", "interleaved rotary (stack/flatten rotate_half, repeat_interleave cos)"),
        },
        "flips": {"HeliumMLP": {"mlp_bias": True, "verdict": "leave_off"}},
        "notes": "HeliumRMSNorm returns (weight.float() * normed).to(dtype), NOT weight * normed.to(dtype): plain "
        "LigerRMSNorm (llama casting) would be subtly wrong in bf16/fp16; no (1 + w) offset so not Gemma2 either.",
    },
    "diffllama": {
        "module": "transformers.models.diffllama.modeling_diffllama",
        "config_class": "transformers.DiffLlamaConfig",
        "expect": {
            "DiffLlamaRMSNorm": ("LigerRMSNorm", ""),
            "DiffLlamaMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"DiffLlamaMLP": {"hidden_act": "gelu_pytorch_tanh", "verdict": "LigerGEGLUMLP"}},
        "notes": "The attention's groupnorm is a plain nn.RMSNorm(elementwise_affine=False), not a class defined in "
        "the file.",
    },
    "arcee": {
        "module": "transformers.models.arcee.modeling_arcee",
        "config_class": "transformers.ArceeConfig",
        "expect": {
            "ArceeRMSNorm": ("LigerRMSNorm", ""),
            "ArceeMLP": ("leave_off", "non-gated up_proj/down_proj with relu2"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "ArceeMLP has bias=config.mlp_bias (default False) but is non-gated whatever the config.",
    },
    "seed_oss": {
        "module": "transformers.models.seed_oss.modeling_seed_oss",
        "config_class": "transformers.SeedOssConfig",
        "expect": {
            "SeedOssRMSNorm": ("LigerRMSNorm", ""),
            "SeedOssMLP": ("leave_off", "dropout inside the module (residual_dropout, default 0.1)"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "SeedOssMLP is otherwise a SwiGLU with bias=config.mlp_bias (default False); it applies "
        "F.dropout(p=config.residual_dropout) to its output. With residual_dropout=0.0 it is numerically SwiGLU; "
        "whether that counts as a match is ambiguous, so no flip is listed.",
    },
    "ernie4_5": {
        "module": "transformers.models.ernie4_5.modeling_ernie4_5",
        "config_class": "transformers.Ernie4_5Config",
        "expect": {
            "Ernie4_5RMSNorm": ("LigerRMSNorm", ""),
            "Ernie4_5MLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("leave_off", "interleaved rotary (GLM style, full dim, fp32)"),
        },
        "flips": {"Ernie4_5MLP": {"use_bias": True, "verdict": "leave_off"}},
        "notes": "MLP bias flag is named use_bias (not mlp_bias) and also affects the attention projections.",
    },
    "glm": {
        "module": "transformers.models.glm.modeling_glm",
        "config_class": "transformers.GlmConfig",
        "expect": {
            "GlmRMSNorm": ("LigerRMSNorm", ""),
            "GlmMLP": ("LigerPhi3SwiGLUMLP", "fused gate_up_proj, chunk(2) gate first, silu, no bias"),
            "apply_rotary_pos_emb": ("leave_off", "interleaved rotate_half on a partial (factor 0.5) rotary"),
        },
        "flips": {"GlmMLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "Partial rotary (partial_rotary_factor defaults to 0.5) AND interleaved; the partial part alone "
        "would be fine for Liger, the interleaving is what disqualifies it. GlmMLP computes up * act(gate).",
    },
    "apertus": {
        "module": "transformers.models.apertus.modeling_apertus",
        "config_class": "transformers.ApertusConfig",
        "expect": {
            "ApertusRMSNorm": ("LigerRMSNorm", ""),
            "ApertusMLP": ("leave_off", "non-gated up_proj/down_proj with xielu"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "xielu is a learned-parameter activation (ACT2CLS['xielu']); MLP stays non-gated for any hidden_act.",
    },
    "dots1": {
        "module": "transformers.models.dots1.modeling_dots1",
        "config_class": "transformers.Dots1Config",
        "expect": {
            "Dots1RMSNorm": ("LigerRMSNorm", ""),
            "Dots1MLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"Dots1MLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "Dots1MLP takes an optional intermediate_size (used for shared experts); Dots1Experts/Dots1MoE are "
        "not candidate symbols.",
    },
    "bitnet": {
        "module": "transformers.models.bitnet.modeling_bitnet",
        "config_class": "transformers.BitNetConfig",
        "expect": {
            "BitNetRMSNorm": ("LigerRMSNorm", ""),
            "BitNetMLP": ("leave_off", "relu2 activation and an ffn_sub_norm RMSNorm inside the MLP"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "BitNetMLP has gate/up/down with no bias, but ffn_sub_norm sits between act*up and down_proj, so "
        "it stays leave_off even with hidden_act='silu'.",
    },
    "doge": {
        "module": "transformers.models.doge.modeling_doge",
        "config_class": "transformers.DogeConfig",
        "expect": {
            "DogeRMSNorm": ("LigerRMSNorm", ""),
            "DogeMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"DogeMLP": {"mlp_bias": True, "verdict": "leave_off"}},
        "notes": "DogeCDMoE (used when is_moe=True) is not a candidate symbol.",
    },
    "minimax": {
        "module": "transformers.models.minimax.modeling_minimax",
        "config_class": "transformers.MiniMaxConfig",
        "expect": {
            "MiniMaxRMSNorm": ("LigerRMSNorm", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "No MLP class: FFN is MiniMaxSparseMoeBlock/MiniMaxExperts (fused 3D gate_up_proj parameters).",
    },
    "vaultgemma": {
        "module": "transformers.models.vaultgemma.modeling_vaultgemma",
        "config_class": "transformers.VaultGemmaConfig",
        "expect": {
            "VaultGemmaRMSNorm": ("LigerRMSNormForGemma2", "fp32, output * (1 + weight), weight init zeros"),
            "VaultGemmaMLP": ("LigerGEGLUMLP", "gelu_pytorch_tanh gate/up/down, no bias"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"VaultGemmaMLP": {"hidden_activation": "gelu", "verdict": "leave_off"}},
        "notes": "Activation field is hidden_activation (Gemma naming), not hidden_act; 'gelu' is exact erf GELU.",
    },
    "t5gemma": {
        "module": "transformers.models.t5gemma.modeling_t5gemma",
        "config_class": "transformers.T5GemmaConfig",
        "expect": {
            "T5GemmaRMSNorm": ("LigerRMSNormForGemma2", "fp32, output * (1 + weight), weight init zeros"),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {},
        "notes": "Encoder-decoder; modules are built from the T5GemmaModuleConfig sub-configs (encoder/decoder). "
        "T5GemmaMLP is gelu_pytorch_tanh gate/up/down without bias but holds nn.Dropout(config.dropout_rate) "
        "between act*up and down_proj; dropout_rate defaults to 0.0, so structurally 'dropout inside' (leave_off) "
        "vs numerically GEGLU (LigerGEGLUMLP) is ambiguous -> left out of expect.",
    },
    "chameleon": {
        "module": "transformers.models.chameleon.modeling_chameleon",
        "config_class": "transformers.ChameleonConfig",
        "expect": {
            # its whole model does not build from the default config (no vocabulary_map), so both
            # in-place writes are unproven: the norm takes its out-of-place twin, the rotary is left off
            "ChameleonRMSNorm": ("LigerRMSNormForOlmo2", "in-place write unproven: out-of-place twin"),
            "ChameleonLayerNorm": ("leave_off", "stats over last dim only, 2D per-head weight/bias applied manually"),
            "ChameleonMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("leave_off", "in-place write unproven: the whole model does not build"),
        },
        "flips": {"ChameleonMLP": {"mlp_bias": True, "verdict": "leave_off"}},
        "notes": "ChameleonLayerNorm subclasses nn.LayerNorm (has weight AND bias) but is built with a "
        "(num_heads, head_dim) shape and normalises only over head_dim with a hard-coded eps=1e-5.",
    },
    "glm4_moe": {
        "module": "transformers.models.glm4_moe.modeling_glm4_moe",
        "config_class": "transformers.Glm4MoeConfig",
        "expect": {
            "Glm4MoeRMSNorm": ("LigerRMSNorm", ""),
            "Glm4MoeMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", "partial rotary, standard rotate_half"),
        },
        "flips": {"Glm4MoeMLP": {"hidden_act": "gelu", "verdict": "leave_off"}},
        "notes": "Partial rotary (partial_rotary_factor defaults to 0.5): rotates the first cos.shape[-1] dims with "
        "the standard half-split rotate_half and passes the rest through; cos/sin are cat(freqs, freqs), so Liger "
        "infers rotary_dim from cos width. Unlike glm (interleaved). glm4 is in Liger's registry, glm4_moe is not.",
    },
    "nanochat": {
        "module": "transformers.models.nanochat.modeling_nanochat",
        "config_class": "transformers.NanoChatConfig",
        "expect": {
            "NanoChatRMSNorm": ("leave_off", "no weight parameter (constructor takes only eps)"),
            "NanoChatMLP": ("leave_off", "non-gated fc1/fc2 with relu2"),
            "apply_rotary_pos_emb": ("leave_off", "rotate_half is cat((x2, -x1)): opposite sign convention"),
        },
        "flips": {},
        "notes": "apply_rotary_pos_emb's body is byte-identical to Llama's; only the module-level rotate_half "
        "(defined AFTER apply_rotary_pos_emb in the file) flips the sign, i.e. rotation by -theta.",
    },
    "esmc": {
        "module": "transformers.models.esmc.modeling_esmc",
        "config_class": "transformers.EsmcConfig",
        "expect": {
            "EsmcMLP": ("LigerSwiGLUMLP", ""),
            "apply_rotary_pos_emb": ("liger_rotary_pos_emb", ""),
        },
        "flips": {"EsmcMLP": {"mlp_bias": True, "verdict": "leave_off"}},
        "notes": "EsmcLayerNorm (nn.LayerNorm subclass that casts back to input dtype) is left out: bias depends on "
        "the instance - input/post_attention layernorms use the default bias=True (would be LigerLayerNorm), "
        "while q_norm, k_norm and the final norm pass bias=False (leave_off). Bidirectional encoder.",
    },
}
