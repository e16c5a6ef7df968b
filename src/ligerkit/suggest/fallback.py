"""The fallback map: ``suggest``'s proven map of a family whose Liger helper fails.

``proven_map`` is the builder ``LigerKernelKit.apply(..., fallback=proven_map)`` takes
(``ligerkit.kit.fallback``): it runs ``suggest`` on each of the family's modeling modules (the math
probes, the replay of every call the whole model makes, the in-place check in the whole model, the
construction check) and returns the matches as a ``custom_patches`` map, keyed by Liger's module names
(``rms_norm``, ``swiglu``, ``rope``, ...). Nothing that was left off is in it. The kit then applies the
map through the custom route, which probes every entry again against the model's own config.

    from ligerkit import LigerKernelKit
    from ligerkit.suggest import proven_map

    report = LigerKernelKit().apply(model_family="qwen2_5_vl", fallback=proven_map)
    report.fallbacks        # {"qwen2_5_vl": "Liger's helper ... failed: ImportError: ..."}

``suggest`` builds the family's whole model from its own config class (shrunk), on a CUDA GPU where
one is (:func:`proven_map_on`: another device), so the first call takes tens of seconds on a CPU; its
verdicts are cached on disk.
"""

from __future__ import annotations

from ligerkit.errors import HelperFailedError, SuggestError
from ligerkit.kit.custom import LigerPatch
from ligerkit.kit.fallback import FallbackBuilder, FallbackMap
from ligerkit.kit.families import get_family
from ligerkit.probe.catalog import by_name
from ligerkit.suggest.core import suggest


def proven_map_on(device: str | None) -> FallbackBuilder:
    """A fallback builder whose ``suggest`` runs its whole-model checks on ``device`` (``None``: a CUDA GPU
    where one is, else the CPU)."""

    def build(family: str, error: HelperFailedError) -> FallbackMap:
        import torch

        where = device or ("cuda" if torch.cuda.is_available() else "cpu")
        patches: dict[str, list[LigerPatch]] = {}
        looked, config = [], None
        for module in get_family(family).modeling_modules:
            try:
                found = suggest(module, device=where)
            except SuggestError:  # nothing to probe in this module
                continue
            looked.append(module)
            config = config if config is not None else found.config_object
            for key, candidates in found.groups().items():
                patches.setdefault(key, []).extend(
                    LigerPatch(found.module, c.symbol, by_name(c.replacement).obj) for c in candidates
                    if c.replacement is not None)
        source = (f"suggest's proven map of {', '.join(looked)} on the {where}" if looked else
                  f"suggest found nothing to probe in {', '.join(get_family(family).modeling_modules)}")
        return FallbackMap({k: v[0] if len(v) == 1 else v for k, v in patches.items()}, config, source)

    return build


proven_map: FallbackBuilder = proven_map_on(None)
"""The fallback builder: ``suggest``'s proven map of the family, checked on a CUDA GPU where one is."""
