"""Alias kept for one release: ``ligerkit.train.checks`` is now :mod:`ligerkit.train.config_checks`.

The checks of a config against the world (files, family, model keys, module names) are named for
what they check. Import them from ``ligerkit.train.config_checks``; nothing in ligerkit imports this
module.
"""

from __future__ import annotations

from ligerkit.train.config_checks import (
    MAX_COUNT,
    build_config,
    check_file,
    check_heads,
    check_model_keys,
    check_modules,
    check_paths,
    check_text_file,
    config_class_for,
    known_options,
    problems_of,
)

__all__ = ["MAX_COUNT", "build_config", "check_file", "check_heads", "check_model_keys", "check_modules",
           "check_paths", "check_text_file", "config_class_for", "known_options", "problems_of"]
