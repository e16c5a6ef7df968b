"""Which official Liger helper already patches a modeling module, so ``suggest`` can say so.

``suggest`` writes a ``custom_patches`` map for any module, transformers' own included. For a module
one of Liger's family helpers already patches (``transformers.models.olmo2.modeling_olmo2`` ->
``apply_liger_kernel_to_olmo2``), the official route is the one to take for that model: Liger's own
module choices, kept current by Liger. The custom map is then for vendored copies of the module.
The mapping is read from Liger's registry (the modeling modules each helper imports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OfficialHelper:
    """The official route for a modeling module: the family to apply and every family whose helper patches it."""

    module: str
    family: str
    helper: str
    families: tuple[str, ...]

    @property
    def route(self) -> str:
        """The call that takes the official route."""
        return f'kit.apply(model_family="{self.family}")'

    def advice(self) -> str:
        """One paragraph for the table output."""
        copy = "The map below is for a vendored copy of this module, which the helper cannot reach."
        if self.module == f"transformers.models.{self.family}.modeling_{self.family}":
            return (f"{self.family} has an official Liger helper, {self.helper}: for transformers' {self.family} "
                    f"models take the official route, {self.route} (model.family: {self.family} in a recipe "
                    f"config). {copy}")
        return (f"Liger's helpers for {', '.join(self.families)} patch this module as part of those models: for "
                f"one of them take the official route, e.g. {self.route}. {copy}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"family": self.family, "helper": self.helper, "families": list(self.families), "route": self.route}


def official_helper(module_name: str) -> OfficialHelper | None:
    """The official route for ``module_name``, or ``None`` when no Liger helper patches it.

    Only transformers' modules can be patched by a helper, so nothing else reads Liger's registry.
    """
    if not module_name.startswith("transformers.models."):
        return None
    from ligerkit.kit.families import all_families

    families = {name: f for name, f in all_families().items() if module_name in f.modeling_modules}
    if not families:
        return None
    own = [name for name in families if module_name == f"transformers.models.{name}.modeling_{name}"]
    family = own[0] if own else sorted(families)[0]
    return OfficialHelper(module_name, family, families[family].helper.__name__, tuple(sorted(families)))
