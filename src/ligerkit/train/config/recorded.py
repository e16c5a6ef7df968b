"""Reading a run folder's recorded config written by an earlier ligerkit: the one map of old keys.

A run folder keeps the ``config.yaml`` it trained with, and a resume must read it as it ran. Earlier
releases spelled some keys differently:

- ``train``'s flat keys, before the sections (:data:`MOVED`): ``train.lr`` is ``train.optim.lr``,
  ``train.checkpoint_every`` is ``train.run.checkpoint_every``, ``train.recompute_glu_product`` is
  ``train.memory.recompute_glu_product``, ...;
- ``model.liger_kernel.loss`` (``off | standard | fused``) and ``model.liger_kernel.loss_chunk_tokens``,
  now ``train.loss.path`` and ``train.loss.chunk_tokens``;
- ``train.compile: true | false`` with ``train.liger_compile_ops`` and
  ``train.compile_over_liger_kernels``, now one named value of ``train.compile`` (``off | ops | trace``);
- ``train.compile: trace`` with Liger off, written before that pair was refused, which ran as ``ops``;
- ``model.pretrained_model_name_or_path``, now ``model.pretrained_path``.

:func:`read_recorded` turns such a mapping into today's; the config loader calls it only for a
recorded config (a run folder's ``config.yaml``). Anywhere else an old key is an unknown key, and
:func:`old_key_hint` says where it lives now.
"""

from __future__ import annotations

import copy
from typing import Any

MOVED: dict[str, str] = {
    **{f"train.{key}": f"train.optim.{key}"
       for key in ("lr", "weight_decay", "betas", "grad_clip", "warmup_steps", "fused_adamw")},
    **{f"train.{key}": f"train.run.{key}"
       for key in ("output_dir", "runs_dir", "checkpoint_every", "keep_checkpoints", "stop_after_steps",
                   "log_every", "progress", "summary_warmup_steps", "peak_tflops")},
    **{f"train.{key}": f"train.memory.{key}" for key in ("recompute_glu_product", "recompute_norm_output")},
}
"""The flat ``train`` keys of earlier releases and the section key each is now."""

RESPELLED: dict[str, str] = {
    "model.liger_kernel.loss": "train.loss.path (standard or fused)",
    "model.liger_kernel.loss_chunk_tokens": "train.loss.chunk_tokens",
    "train.liger_compile_ops": "train.compile (off, ops or trace)",
    "train.compile_over_liger_kernels": "train.compile: trace",
    "model.pretrained_model_name_or_path": "model.pretrained_path",
}
"""The other keys of earlier releases and what says the same now."""

_COMPILE_REFUSED = (
    "train.compile with Liger on and train.liger_compile_ops=false lets torch.compile trace into Liger's "
    "autograd functions, which on an H200 overwrote norm weights next to Liger's MLP during backward "
    "(docs/benchmarks.md, compile drift); this recorded config never trained as written. Use train.compile: ops, "
    "or train.compile: trace to accept that path"
)


def old_key_hint(path: str) -> str:
    """`` (moved to train.optim.lr ...)`` for a key of an earlier release, ``""`` for any other."""
    if path in MOVED:
        return f" (an earlier release's key: it is {MOVED[path]} now, which is what to write)"
    if path in RESPELLED:
        return f" (an earlier release's key: write {RESPELLED[path]})"
    return ""


def read_recorded(data: Any) -> Any:
    """A recorded config with every key of an earlier release (:data:`MOVED`, :data:`RESPELLED`) read
    into today's (a copy; ``data`` itself when it is not a mapping). A key given both ways with two
    different values is a ``ValueError`` naming both."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    _path_key(data)
    train = data.get("train")
    if not isinstance(train, dict):
        return data
    _loss_keys(data, train)
    _compile_keys(data, train)
    for old, new in MOVED.items():
        key = old.split(".")[-1]
        if key not in train:
            continue
        value = train.pop(key)
        section = train.setdefault(new.split(".")[1], {})
        if not isinstance(section, dict):
            raise ValueError(f"{new.rsplit('.', 1)[0]} is not a mapping, and the recorded {old} belongs in it")
        if section.setdefault(key, value) != value:
            raise ValueError(f"the recorded config gives {old}={value!r} and {new}={section[key]!r}; "
                             f"keep only {new}")
    return data


def _liger_enabled(data: dict[str, Any]) -> Any:
    """A raw config's ``model.liger_kernel.enabled`` as written (``None`` where it is not given)."""
    model = data.get("model")
    liger = model.get("liger_kernel") if isinstance(model, dict) else None
    return liger.get("enabled") if isinstance(liger, dict) else None


def _path_key(data: dict[str, Any]) -> None:
    """``model.pretrained_model_name_or_path`` -> ``model.pretrained_path`` (in place)."""
    model = data.get("model")
    if not isinstance(model, dict) or "pretrained_model_name_or_path" not in model:
        return
    value = model.pop("pretrained_model_name_or_path")
    if model.setdefault("pretrained_path", value) != value:
        raise ValueError("the recorded config gives model.pretrained_model_name_or_path and model.pretrained_path "
                         "two values; keep only model.pretrained_path")


def _loss_keys(data: dict[str, Any], train: dict[str, Any]) -> None:
    """``model.liger_kernel.loss`` / ``loss_chunk_tokens`` -> ``train.loss`` (in place)."""
    model = data.get("model")
    liger = model.get("liger_kernel") if isinstance(model, dict) else None
    if not isinstance(liger, dict) or not {"loss", "loss_chunk_tokens"} & set(liger):
        return
    loss = train.setdefault("loss", {})
    if not isinstance(loss, dict):
        raise ValueError("train.loss is not a mapping, and the recorded model.liger_kernel.loss belongs in it")
    if "loss" in liger:
        value = liger.pop("loss")
        path = {False: "standard", "off": "standard"}.get(value, value)
        if loss.setdefault("path", path) != path:
            raise ValueError(f"the recorded config gives model.liger_kernel.loss={value!r} and "
                             f"train.loss.path={loss['path']!r}; keep only train.loss.path")
    if "loss_chunk_tokens" in liger:
        chunks = liger.pop("loss_chunk_tokens")
        if loss.setdefault("chunk_tokens", chunks) != chunks:
            raise ValueError("the recorded config gives model.liger_kernel.loss_chunk_tokens and "
                             "train.loss.chunk_tokens two values; keep only train.loss.chunk_tokens")


def _flag(train: dict[str, Any], key: str) -> bool | None:
    value = train.pop(key, None)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"the recorded train.{key} must be true or false, got {value!r}")
    return value


def _compile_keys(data: dict[str, Any], train: dict[str, Any]) -> None:
    """``train.compile``'s booleans (and the two keys beside them) -> its named value; ``trace`` with
    Liger off -> ``ops``, which it ran as (in place)."""
    compiled = train.get("compile", "off")
    ops, over = _flag(train, "liger_compile_ops"), _flag(train, "compile_over_liger_kernels")
    value = {True: "ops", False: "off"}.get(compiled, compiled) if isinstance(compiled, bool) else compiled
    enabled = _liger_enabled(data)
    if value == "ops" and ops is False:  # the earlier way to compile over Liger's own functions
        if over is not True and enabled is True:
            raise ValueError(_COMPILE_REFUSED)
        value = "trace"
    elif value == "trace" and ops is True:
        raise ValueError("the recorded train.compile: trace and train.liger_compile_ops=true disagree; "
                         "keep only train.compile")
    if value == "trace" and enabled is not True:  # nothing to trace into: it ran as ops
        value = "ops"
    if "compile" in train or value != "off":
        train["compile"] = value
