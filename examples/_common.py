"""What the examples share: a small local checkpoint, data from the shipped corpus, step timing.

Nothing is downloaded. ``checkpoint`` writes a randomly initialized Qwen3 (safetensors) to a local
folder the examples load like any pretrained checkpoint; ``samples`` cuts byte-level token windows
of the corpus ligerkit ships, every fourth one right-padded (labels -100 there), so the
token-normalized loss has padding to get right.
"""

from __future__ import annotations

import json
import statistics
import time
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, TrainerCallback

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=384, max_position_embeddings=4096)
# The Qwen3-0.6B shape (the qwen3 recipe's GPU config), for the GPU benchmark.
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                 tie_word_embeddings=True)


def byte_tokenizer() -> Any:
    """A byte-level tokenizer for the ids ``samples`` makes: 0 pad, 1 end of sequence, byte b is b + 2."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, **{f"<{b}>": b + 2 for b in range(256)}, "<unk>": 258}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def checkpoint(folder: str | Path, shape: dict[str, Any] | None = None, seed: int = 0,
               dtype: torch.dtype = torch.float32) -> Path:
    """A randomly initialized Qwen3 saved as a local checkpoint (config.json, safetensors, tokenizer)."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        return folder
    torch.manual_seed(seed)
    config = Qwen3Config(**(shape or TINY), use_cache=False, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    Qwen3ForCausalLM(config).to(dtype).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def samples(count: int, seq_len: int, pad_every: int = 4) -> list[dict[str, torch.Tensor]]:
    """``count`` windows of ``seq_len`` byte-level tokens (ids 2..257) of the shipped corpus."""
    text = resources.files("ligerkit.train.data").joinpath("corpus.txt").read_bytes()
    ids = torch.tensor(list(text), dtype=torch.long) + 2
    out = []
    for i in range(count):
        start = (i * 7919 * seq_len) % (len(ids) - seq_len)
        input_ids = ids[start:start + seq_len].clone()
        mask = torch.ones(seq_len, dtype=torch.long)
        if pad_every and i % pad_every == pad_every - 1:
            mask[seq_len * 3 // 4:] = 0
            input_ids[seq_len * 3 // 4:] = 0
        labels = input_ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": input_ids, "attention_mask": mask, "labels": labels})
    return out


def collate(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack samples of one length."""
    return {key: torch.stack([b[key] for b in batch]) for key in batch[0]}


class StepClock(TrainerCallback):
    """Wall time of every optimizer step (synchronized on a GPU) and the peak memory."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.began = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _sync()
        self.began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _sync()
        self.seconds.append(time.perf_counter() - self.began)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def summary(losses: list[float], seconds: list[float], tokens_per_step: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Per-step losses, median tokens/s after the first step, peak GPU memory, and ``extra``."""
    timed = seconds[1:] or seconds
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    return {"losses": losses, "tokens_per_s": tokens_per_step / statistics.median(timed) if timed else None,
            "peak_mem_gib": peak, "tokens_per_step": tokens_per_step, "step_seconds": seconds, **extra}


def write(result: dict[str, Any], path: str | None) -> None:
    """Print ``result`` as JSON, and write it to ``path`` if given."""
    text = json.dumps(result, indent=2)
    if path:
        Path(path).write_text(text + "\n")
    print(text)


def close_distributed() -> None:
    """Under torchrun: wait for every rank, then take the process group down before the interpreter
    exits (left to exit, gloo's threads can abort a rank after training has finished)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
