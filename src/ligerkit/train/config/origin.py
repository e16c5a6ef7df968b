"""Where a config value came from: the file, or a ``--set`` line; a problem a ``--set`` caused says so.

A config is a file plus the ``--set KEY=VALUE`` lines of the command line, applied over it. A problem found
in the result (an unknown key, a value out of range, a path that does not exist) names its key; when a
``--set`` line gave that key (or a mapping above it), the problem is led by that line, and a message
whose every problem came from ``--set`` says the file itself is fine: ``--set train.stpes=5`` never
sends the reader to a config file that holds no mistake.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SET = "--set "


def given_by(key: str, overrides: Sequence[str]) -> str | None:
    """The ``--set`` line that gave the dotted ``key`` its value (the last naming the key or a mapping above it;
    ``train.optim.betas.0`` came from ``--set train.optim.betas=[2, 3]``), or ``None`` (the file gave it)."""
    path = key.split(".")
    for item in reversed(overrides):
        given = [part.strip() for part in item.partition("=")[0].split(".")]
        if given and path[:len(given)] == given:
            return item
    return None


def named_in(problem: str, overrides: Sequence[str]) -> str | None:
    """The last ``--set`` line whose key and value the text of ``problem`` names (``num_attention_heads=3``:
    a rule across keys, found at another key than the one the line set), or whose whole dotted key it
    names (``train.optim.warmup_steps (100) is more than ...``: a rule across sections), or ``None``."""
    for item in reversed(overrides):
        key, _, value = item.partition("=")
        key = key.strip()
        if f"{key.rsplit('.', 1)[-1]}={value.strip()}" in problem or (
                "." in key and re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", problem)):
            return item
    return None


def attributed(problems: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """Each problem (``key: what is wrong``) whose key a ``--set`` line gave (or that names the key and value of
    one: :func:`named_in`), led by that line (``--set train.stpes=5: train.stpes: unknown key ...``); the others
    as they are."""
    out = []
    for problem in problems:
        key = problem.split(":", 1)[0].strip()
        item = None if problem.startswith(SET) else (
            (given_by(key, overrides) if key and " " not in key else None) or named_in(problem, overrides))
        out.append(f"{SET}{item}: {problem}" if item is not None else problem)
    return out


def invalid_heading(source: str, problems: Sequence[str]) -> str:
    """The first line of a message listing ``problems`` (:func:`attributed`) of the config ``source``: the
    ``--set`` values when every problem is theirs (the file itself is fine), the file and its ``--set`` values
    when both have some, else the file."""
    from_set = sum(p.startswith(SET) for p in problems)
    if problems and from_set == len(problems):
        return (f"the --set values given with {source} are not a valid recipe config (the file itself is fine); fix "
                "each --set named here")
    if from_set:
        return (f"{source} with its --set values is not a valid recipe config; fix each key named here (in the file, "
                "or the --set that gave it)")
    return f"{source} is not a valid recipe config; fix each key named here"
