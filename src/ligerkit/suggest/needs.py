"""What a config must hold for ``suggest`` to probe: every key a candidate reads, checked up front.

A candidate that takes the model config is built from it by the probe, and so is each Liger
replacement it is compared against (``LigerSwiGLUMLP(config)`` reads ``config.hidden_act``). A key
the config lacks would otherwise surface as a mismatch ("no attribute 'hidden_act'") and the
candidate would be left off for a reason that is the config's, not the module's. So each of them,
and the module's model, is built once on the meta device first, and every missing key is an error
that names it. This holds for a free-form config (a JSON file filling no config class): a config
*class* without an attribute is what it is (a composite config whose sub-configs the classes read,
a replacement that needs what the class lacks), and the probe reports the mismatch as its reason.
"""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ligerkit.hf import quiet_transformers
from ligerkit.probe.catalog import by_kind
from ligerkit.suggest.target import SuggestError

_MODEL_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "Model")


def _config_kwargs(cls: type) -> dict[str, Any] | None:
    """How the model constructs ``cls`` from its config (``None`` when its constructor does not take one)."""
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    if not params or params[0].name != "config":
        return None
    required = {p.name for p in params[1:] if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return {"layer_idx": 0} if required == {"layer_idx"} else {} if not required else None


def missing_keys(found: list[tuple[str, object, str]], module: types.ModuleType, config: Any) -> dict[str, list[str]]:
    """``{key: [what reads it]}`` for every config key a candidate, its replacements or the model read but
    ``config`` lacks."""
    missing: dict[str, list[str]] = {}

    def attempt(label: str, build: Callable[[], object]) -> None:
        try:
            with warnings.catch_warnings(), quiet_transformers(), torch.device("meta"):
                warnings.simplefilter("ignore")
                build()
        except AttributeError as exc:
            if exc.obj is config and exc.name:
                missing.setdefault(exc.name, []).append(label)
        except Exception:  # anything else is the probe's to find and explain
            return

    for name, obj, kind in found:
        kwargs = _config_kwargs(obj) if isinstance(obj, type) else None
        if kwargs is None:
            continue
        attempt(name, lambda obj=obj, kwargs=kwargs: obj(config, **kwargs))
        for replacement in by_kind(kind):
            attempt(replacement.name,
                    lambda replacement=replacement, kwargs=kwargs: replacement.obj(config, **kwargs))
    models = sorted((v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__
                     and issubclass(v, torch.nn.Module) and v.__name__.endswith(_MODEL_SUFFIXES)
                     and _config_kwargs(v) == {}),
                    key=lambda v: next(i for i, end in enumerate(_MODEL_SUFFIXES) if v.__name__.endswith(end)))
    for model in models[:1]:  # the whole model: what the in-place checks build
        attempt(model.__name__, lambda: model(config))
    return missing


def check_config_keys(found: list[tuple[str, object, str]], module: types.ModuleType, config: Any,
                      source: str | None) -> None:
    """Raise :class:`SuggestError` naming every key a free-form config (a JSON file the module has no
    config class for) must add (see :func:`missing_keys`)."""
    if not isinstance(config, types.SimpleNamespace):
        return
    missing = missing_keys(found, module, config)
    if not missing:
        return
    needs = "; ".join(f"{key} (read by {', '.join(dict.fromkeys(who))})" for key, who in missing.items())
    raise SuggestError(f"the config {source} does not set {needs}: add {'it' if len(missing) == 1 else 'them'} "
                       f"to the file, or --set {next(iter(missing))}=VALUE")
