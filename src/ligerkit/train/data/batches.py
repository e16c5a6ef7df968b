"""Deterministic token batches: synthetic motifs, windows of a shipped text corpus, or a user's file.

Every sample is a pure function of ``(seed, global sample index)``, so one GPU with gradient
accumulation and N GPUs with FSDP2 see exactly the same global batch at every step. Some samples
are right-padded (``pad_every``), so padding and ignored label positions are always exercised.
The corpus is tokenized with a byte-level tokenizer that needs no download; a user's JSONL or text
file with the model's own tokenizer (``files.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch

from ligerkit.train.config import DataConfig
from ligerkit.train.data.files import DataError, tokenized
from ligerkit.naming import IGNORE_INDEX

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_OFFSET = 3
BYTE_VOCAB = 256 + BYTE_OFFSET
MOTIF_LEN = 16
DEFAULT_CORPUS = Path(__file__).with_name("corpus.txt")


class ByteTokenizer:
    """UTF-8 bytes shifted past three special ids (pad 0, bos 1, eos 2); vocab 259."""

    vocab_size = BYTE_VOCAB

    def encode(self, text: str) -> list[int]:
        """Text to ids."""
        return [b + BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        """Ids to text (specials dropped)."""
        return bytes(i - BYTE_OFFSET for i in ids if i >= BYTE_OFFSET).decode("utf-8", errors="replace")


@cache
def corpus_ids(path: str) -> torch.Tensor:
    """The whole corpus as byte-token ids."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"data.corpus_path {path!r} is not a readable UTF-8 text file ({exc}); point it at a "
                        "text file, or leave it out for the shipped corpus") from exc
    return torch.tensor(ByteTokenizer().encode(text), dtype=torch.long)


def sample_generator(seed: int, index: int) -> torch.Generator:
    """The random stream of sample ``index`` under ``seed`` (the same on every rank and run)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def tokenizer_key(cfg: DataConfig) -> str:
    """The config key that names the tokenizer folder of a ``jsonl``/``text`` dataset (for messages)."""
    return "data.tokenizer" if cfg.tokenizer else "model.pretrained_path (the tokenizer's folder: data.tokenizer unset)"


def sample(cfg: DataConfig, vocab_size: int, seed: int, index: int,
           tokenizer: str | None = None) -> tuple[torch.Tensor, int]:
    """One sample's token ids (length ``seq_len``) and its number of real (unpadded) tokens."""
    if cfg.kind in ("jsonl", "text"):
        data = tokenized(str(cfg.path), cfg.kind, cfg.text_field, str(cfg.tokenizer or tokenizer), cfg.seq_len,
                         cfg.packing, tokenizer_key(cfg))
        if data.vocab_size > vocab_size:
            raise DataError(f"the tokenizer has {data.vocab_size} tokens but the model's vocabulary {vocab_size}; "
                            "use the model's own tokenizer (data.tokenizer), or raise model.config.vocab_size")
        return data.sample(seed, index, cfg.shuffle)
    g = sample_generator(seed, index)
    n = cfg.seq_len
    if cfg.kind == "corpus":
        ids = corpus_ids(str(cfg.corpus_path or DEFAULT_CORPUS))
        if vocab_size < BYTE_VOCAB:
            raise DataError(f"the corpus needs a vocabulary of at least {BYTE_VOCAB}, the model has {vocab_size}; "
                            "raise model.config.vocab_size or use data.kind: synthetic")
        if len(ids) <= n:
            raise DataError(f"the corpus has {len(ids)} tokens, fewer than data.seq_len={n}; lower data.seq_len "
                            "below that or give a longer data.corpus_path")
        start = int(torch.randint(0, len(ids) - n, (1,), generator=g))
        tokens = torch.cat([torch.tensor([BOS_ID]), ids[start : start + n - 1]])
    else:
        if vocab_size <= BYTE_OFFSET:
            raise DataError(f"synthetic data needs a vocabulary above {BYTE_OFFSET} tokens, the model has {vocab_size}; "
                            "raise model.config.vocab_size")
        motif = torch.randint(BYTE_OFFSET, vocab_size, (MOTIF_LEN,), generator=g)
        tokens = motif.repeat(n // MOTIF_LEN + 1)[:n]
    real = n
    if cfg.pad_every and index % cfg.pad_every == cfg.pad_every - 1:
        real = n - int(torch.randint(1, max(2, n // 4), (1,), generator=g))
        tokens = tokens.clone()
        tokens[real:] = PAD_ID
    return tokens, real


def text_batch(cfg: DataConfig, vocab_size: int, seed: int, start: int, size: int,
               tokenizer: str | None = None) -> dict[str, torch.Tensor]:
    """Samples ``start .. start+size-1`` as ``input_ids``, ``attention_mask`` and ``labels`` (``tokenizer``:
    the folder a jsonl/text dataset is tokenized with when ``data.tokenizer`` is not set)."""
    rows, reals = zip(*(sample(cfg, vocab_size, seed, i, tokenizer) for i in range(start, start + size)), strict=True)
    input_ids = torch.stack(rows)
    positions = torch.arange(cfg.seq_len)
    attention_mask = (positions[None, :] < torch.tensor(reals)[:, None]).long()
    labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def corpus_text(cfg: DataConfig, seed: int, index: int, length: int) -> torch.Tensor:
    """``length`` consecutive corpus tokens for sample ``index`` (deterministic)."""
    ids = corpus_ids(str(cfg.corpus_path or DEFAULT_CORPUS))
    g = sample_generator(seed, index)
    start = int(torch.randint(0, len(ids) - length, (1,), generator=g))
    return ids[start : start + length]


def fill_text_from_corpus(batch: dict[str, torch.Tensor], cfg: DataConfig, seed: int, start: int) -> None:
    """Replace the text of a multimodal batch with corpus text, in place.

    Text positions are those whose label counts (``labels != IGNORE_INDEX``); ``labels`` may be
    longer than ``input_ids`` by a prefix of image positions (prepended features), which is
    skipped. Image placeholders, special tokens and padding are left as they are.
    """
    input_ids, labels = batch["input_ids"], batch["labels"]
    offset = labels.shape[1] - input_ids.shape[1]
    for row in range(input_ids.shape[0]):
        text = labels[row, offset:] != IGNORE_INDEX
        tokens = corpus_text(cfg, seed, start + row, int(text.sum()))
        input_ids[row, text] = tokens
        labels[row, offset:][text] = tokens


def multimodal_batch(make: Callable[..., dict[str, torch.Tensor]], model_config: Any, cfg: DataConfig, seed: int,
                     start: int, size: int, model_dtype: str = "float32") -> dict[str, torch.Tensor]:
    """Samples ``start .. start+size-1`` of a recipe's image + text generator ``make`` (called as
    ``make(model_config, size, seq_len, generator=..., motif_seed=seed)``), deterministic per index; with
    ``data.kind: corpus`` their text is replaced by corpus text (:func:`fill_text_from_corpus`).

    Floating-point media (``pixel_values``) take the dtype the model is built in: ``model_dtype`` (the
    config's ``model.dtype``) resolved as the build resolves it for this machine's accelerator
    (``auto``: bf16 on CUDA or an NPU, float32 without one), so images and weights always agree.
    """
    from ligerkit.environment import accelerator
    from ligerkit.train.models import resolve_dtype

    batch = make(model_config, size, cfg.seq_len, generator=sample_generator(seed, start), motif_seed=seed)
    if cfg.kind == "corpus":
        fill_text_from_corpus(batch, cfg, seed, start)
    dtype = resolve_dtype(model_dtype, accelerator() or "cpu")
    return {k: v.to(dtype) if k != "labels" and v.is_floating_point() else v for k, v in batch.items()}
