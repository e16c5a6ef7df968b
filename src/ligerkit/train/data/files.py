"""A user's own data: a local JSONL or text file, tokenized with the model's own tokenizer.

Every document is tokenized once. ``packing`` concatenates documents (an end-of-sequence token
between them) and cuts the stream into ``seq_len`` windows; otherwise each document is one sample,
truncated or right-padded to ``seq_len``. Sample ``i`` is a pure function of ``(seed, i)``: epoch
``i // n`` visits the ``n`` samples in an order drawn from ``(seed, epoch)`` (``shuffle``), so a run
resumed at any step, on any number of ranks, sees exactly the data the uninterrupted run saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from ligerkit.errors import DataError, TokenizerError


def read_documents(path: str, kind: str, text_field: str) -> list[str]:
    """The documents of a ``jsonl`` file (``text_field`` of each line) or a ``text`` file (each non-empty line)."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"data.path {path!r} is not a file; point it at a local {kind} file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"data.path {path!r} is not UTF-8 text ({exc}); give a {kind} file") from exc
    documents = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if kind == "text":
            documents.append(line)
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}:{number} is not a JSON object ({exc}); a jsonl file holds one per line: fix or "
                            "remove that line") from exc
        except RecursionError:
            raise DataError(f"{path}:{number} nests its JSON too deeply to read; a jsonl line is a flat object "
                            f"such as {{\"{text_field}\": \"...\"}}: fix or remove that line") from None
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise DataError(f"{path}:{number} has no string field {text_field!r}; set data.text_field to the field "
                            f"that holds the text (this line has {sorted(record) if isinstance(record, dict) else record!r})")
        documents.append(text)
    if not documents:
        raise DataError(f"data.path {path!r} holds no documents (every line is blank); point data.path at a file "
                        f"with one {'JSON object' if kind == 'jsonl' else 'document'} per line")
    return documents


VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                    "sentencepiece.bpe.model", "tiktoken.model")
"""Files that hold a tokenizer's vocabulary (a fast tokenizer's ``tokenizer.json``, or a slow one's files); a
model folder written by ``save_pretrained`` holds none of them (its tokenizer is saved on its own)."""


def _give_one(path: str) -> str:
    return (f"save the model's tokenizer into it (tokenizer.save_pretrained({path!r})), point data.tokenizer at a "
            "folder that holds one, or train on the shipped corpus's byte-level tokenizer instead (data.kind: corpus "
            "with data.corpus_path: your text file; it needs a model vocabulary of at least 259 tokens)")


def check_tokenizer_folder(path: str, key: str = "data.tokenizer") -> None:
    """``path`` (the folder ``key`` names) holds a tokenizer: a :class:`TokenizerError` naming what it lacks and
    what it holds otherwise (a model checkpoint's weights and config, say)."""
    folder = Path(path)
    if not folder.is_dir():
        raise TokenizerError(f"{key}: the tokenizer folder {path!r} does not exist; set data.tokenizer or "
                             "model.pretrained_path to a local folder that holds a tokenizer")
    present = [name for name in VOCABULARY_FILES if (folder / name).is_file()]
    if any((folder / name).stat().st_size for name in present):
        return
    if present:  # there, but empty: a copy cut short, a save that failed
        raise TokenizerError(f"{key}: {path!r} holds no usable tokenizer: {', '.join(present)} is empty. To give "
                             f"one, {_give_one(path)}")
    held = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(held[:8]) + (f" and {len(held) - 8} more" if len(held) > 8 else "") if held else "nothing"
    raise TokenizerError(f"{key}: {path!r} holds no tokenizer: none of {', '.join(VOCABULARY_FILES)} is there (it "
                         f"holds {shown}). To give one, {_give_one(path)}")


def load_tokenizer(path: str, key: str = "data.tokenizer") -> Any:
    """A local tokenizer (``tokenizer.json`` and its config), never from a hub; one that makes no token of a
    plain sentence (an empty vocabulary) is a :class:`TokenizerError`."""
    from transformers import AutoTokenizer

    check_tokenizer_folder(path, key)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise TokenizerError(f"{key}: cannot load a tokenizer from {path!r} ({type(exc).__name__}: {exc}); the folder "
                             f"needs tokenizer.json (or the files its tokenizer class saves). To give one, "
                             f"{_give_one(path)}") from exc
    if not tokenizer("The quick brown fox.", add_special_tokens=False)["input_ids"]:
        raise TokenizerError(f"{key}: the tokenizer in {path!r} turns text into no tokens (its vocabulary holds "
                             f"{len(tokenizer)} entries). To give a working one, {_give_one(path)}")
    return tokenizer


@dataclass(frozen=True)
class TokenizedData:
    """Samples of ``seq_len`` token ids with their real (unpadded) lengths."""

    samples: torch.Tensor  # (n, seq_len)
    lengths: torch.Tensor  # (n,)
    vocab_size: int

    def sample(self, seed: int, index: int, shuffle: bool) -> tuple[torch.Tensor, int]:
        """Global sample ``index``: epoch ``index // n``, in that epoch's order."""
        n = self.samples.shape[0]
        epoch, position = divmod(index, n)
        if shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
            position = int(order[position])
        return self.samples[position], int(self.lengths[position])


@cache
def tokenized(path: str, kind: str, text_field: str, tokenizer_path: str, seq_len: int, packing: bool,
              tokenizer_key: str = "data.tokenizer") -> TokenizedData:
    """The dataset at ``path`` as samples (built once per process and settings); ``tokenizer_key`` is the config
    key that named ``tokenizer_path`` (for messages)."""
    tokenizer = load_tokenizer(tokenizer_path, tokenizer_key)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    eos = tokenizer.eos_token_id
    docs = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in read_documents(path, kind, text_field)]
    if not any(docs):
        raise DataError(f"every document in {path} is empty once tokenized ({len(docs)} documents, 0 tokens); "
                        f"check data.text_field ({text_field!r}) names the field that holds the text, or fill the file")
    rows: list[list[int]] = []
    if packing:
        stream = [t for doc in docs for t in [*doc, *([eos] if eos is not None else [])]]
        rows = [stream[i:i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]
        if not rows:
            raise DataError(f"{path} packs into no full window of data.seq_len={seq_len} tokens ({len(stream)} "
                            "tokens in all); lower data.seq_len or use packing: false")
    else:
        rows = [doc[:seq_len] for doc in docs if doc]
    lengths = torch.tensor([len(r) for r in rows])
    samples = torch.full((len(rows), seq_len), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        samples[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return TokenizedData(samples, lengths, len(tokenizer))
