"""``suggest``: find the norm / MLP / rotary symbols of a modeling module, probe each against the
catalog, and write the ``custom_patches`` map of the matches. When unsure, leave it off.

``core`` holds ``suggest`` and its verdicts; ``fallback`` the proven map the kit applies when Liger's
helper for a family fails (it calls ``core``); ``target`` reads the module and config the user names.
"""

from __future__ import annotations

from ligerkit.probe.symbols import discover
from ligerkit.suggest.core import Candidate, Suggestion, suggest
from ligerkit.suggest.fallback import proven_map, proven_map_on
from ligerkit.suggest.official import OfficialHelper
from ligerkit.suggest.target import SuggestError, load_config, load_module

__all__ = ["Candidate", "OfficialHelper", "SuggestError", "Suggestion", "discover", "load_config", "load_module",
           "proven_map", "proven_map_on", "suggest"]
