"""``ligerkit`` command line: families | plan | suggest | check | train | smoke | bench | env, and --version.

Every verb takes ``--json`` for machine-readable output; a ligerkit error exits with code 1 and
its message on stderr. The verbs live in ``kit_commands`` (no training), ``run_commands`` and
``env_commands`` (``env`` and ``--version``: the installed versions against the tested ones).
"""

from __future__ import annotations

from ligerkit.cli import kit_commands, run_commands
from ligerkit.cli import env_commands  # noqa: I001 (after the others: last in the help's list of verbs)
from ligerkit.cli.common import app, parse_exclude, parse_modules, scan_lines

_VERBS = (kit_commands, run_commands, env_commands)  # importing them registers the verbs on ``app``

__all__ = ["app", "main", "parse_exclude", "parse_modules", "scan_lines"]


def main() -> None:
    """Console-script entry point."""
    app()
