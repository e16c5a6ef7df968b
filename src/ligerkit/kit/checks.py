"""Alias kept for one release: ``ligerkit.kit.checks`` is now :mod:`ligerkit.kit.swap_checks`.

The checks of a route's swaps against the model before it is built (reach, in-place writes, probes
of custom patches) are named for what they check. Import them from ``ligerkit.kit.swap_checks``;
nothing in ligerkit imports this module.
"""

from __future__ import annotations

from ligerkit.kit.swap_checks import (
    aliasing_of,
    in_place_advice,
    in_place_error,
    probe_patches,
    swap_problem,
    unproven_error,
    unreached,
    writes_in_place,
)

__all__ = ["aliasing_of", "in_place_advice", "in_place_error", "probe_patches", "swap_problem", "unproven_error",
           "unreached", "writes_in_place"]
