"""Which config a composite model passes to one of its classes (a VLM gives its text MLP the text config).

A probe builds a class the way the model builds it. For a class that takes the model config, a
composite model's config (one with ``sub_configs``) is often not what it is given: the whole model
hands each part its own. :func:`constructed_config` builds the whole model on the meta device once per
config, notes what the class's constructor receives, and returns that part's config.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from ligerkit.probe.calls import constructions
from ligerkit.probe.runnable import no_class_caches

_CONSTRUCTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # config -> {class: its part config}


def constructed_config(cls: type, config: Any) -> Any:
    """The config the whole model of a composite ``config`` (one with ``sub_configs``: a VLM's text and
    vision parts) passes to ``cls``'s constructor: the first instance's first argument when it is one of
    ``config``'s parts; ``None`` for a plain config, or where the model does not build on the meta device
    or never builds ``cls``. One meta build per config, remembered while the config lives."""
    names = getattr(config, "sub_configs", None)
    if not isinstance(names, dict) or not names:
        return None
    try:
        seen = _CONSTRUCTED.setdefault(config, {})
    except TypeError:  # not weak-referenceable: look it up unremembered
        seen = {}
    if cls not in seen:
        from ligerkit.hf import build_meta_model

        parts = {id(getattr(config, name, None)) for name in names} - {id(None)}
        found = None
        try:
            with no_class_caches(sys.modules[cls.__module__]), constructions([cls]) as made:
                model = build_meta_model(config)
                for args, kwargs in made.values():
                    given = args[0] if args else kwargs.get("config")
                    if id(given) in parts:
                        found = given
                        break
            del model
        except Exception:  # noqa: BLE001 (no meta build, no answer: the caller's own error stands)
            found = None
        seen[cls] = found
    return seen[cls]
