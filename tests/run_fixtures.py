"""A user's own model and data, built on the fly: a tiny tokenizer, a tiny checkpoint, a JSONL file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

WORDS = ("the cat sat on a mat while the dog ran past an old red barn near green hills and quiet water "
         "under bright stars every night before morning light").split()


def documents(n: int = 48, seed: int = 0) -> list[str]:
    """``n`` short documents of words drawn from :data:`WORDS`."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))) for _ in range(n)]


def tokenizer_folder(path: Path) -> int:
    """A word-level tokenizer trained on :func:`documents`, saved as a transformers tokenizer; its size."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(documents(), trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="</s>")
    fast.save_pretrained(path)
    return len(fast)


def jsonl_file(path: Path, field: str = "text") -> Path:
    """:func:`documents` as a JSONL file, one ``{field: text}`` per line."""
    path.write_text("".join(json.dumps({field: text, "id": i}) + "\n" for i, text in enumerate(documents())))
    return path


def pretrained_folder(path: Path) -> Path:
    """A tiny Qwen3 checkpoint (safetensors) with its tokenizer, in one folder."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = tokenizer_folder(path)
    torch.manual_seed(0)
    config = Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, vocab_size=vocab, tie_word_embeddings=True)
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path
