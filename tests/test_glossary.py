"""One word per idea: the glossary's retired synonyms appear in no help text, JSON key or public name.

The glossary is the "Words" table of docs/guide.md; its last column lists, in double quotes, the
synonyms each word retires. The aliases of earlier releases (old names kept beside the glossary's) were
removed before 1.0: each is checked to be gone, from the package and from every caller.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ligerkit.cli import app

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"

# Names removed in 0.2.0 (the README's changelog), each with the glossary's name that replaced it.
REMOVED = {
    "LigerKernelKit.verify": "LigerKernelKit.scan",
    "ligerkit.kit.core.verified_by": "ligerkit.kit.core.scanned_by",
    "RecipeEngine.kit": "RecipeEngine.liger_kit",
    "FusedTokenLossTrainer": "FusedLossTrainer",
    "FusedTokenLossMixin": "FusedLossMixin",
    "ligerkit.engine": "ligerkit.train",
    "Trainer.recipe": "Trainer.engine",
    "RecipeEngine.setup_model": "ligerkit.train.set_up_model",
    "ligerkit.kit.checks": "ligerkit.kit.swap_checks",
    "ligerkit.train.checks": "ligerkit.train.config.checks",
    "ligerkit.proof.check": "ligerkit.proof.recipe_check",
    "ligerkit.train.checkpoint_errors": "ligerkit.errors",
    "NoAcceleratorError": "LigerNeedsAcceleratorError",
}
# The packages whose exported names (and their classes' public members) are the public API.
PUBLIC_PACKAGES = ("ligerkit", "ligerkit.kit", "ligerkit.train", "ligerkit.integrations")
WORDS_THE_ISSUE_NAMES = ("scan", "probe", "proof", "smoke", "bench", "map", "route", "swap", "verdict", "unproven",
                         "PARTIAL", "compile mode", "fused loss", "recipe", "run", "arm")


def glossary() -> dict[str, list[str]]:
    """Word -> the synonyms it retires, read from the guide's "Words" table."""
    section = GUIDE.read_text().split("\n## Words\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    table: dict[str, list[str]] = {}
    for line in rows[1:]:  # the first row is the header
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 3, line
        table[cells[0]] = re.findall(r'"([^"]+)"', cells[2])
    return table


def retired() -> list[str]:
    return sorted({phrase for phrases in glossary().values() for phrase in phrases})


def _pattern(phrase: str) -> re.Pattern[str]:
    """The phrase as whole words, however spaced, hyphenated or underscored."""
    words = re.split(r"[\s_-]+", phrase.lower())
    return re.compile(r"(?<![a-z0-9])" + r"[\s_-]+".join(map(re.escape, words)) + r"(?![a-z0-9])")


def _words(name: str) -> str:
    """An identifier as lower-case words: ``FusedTokenLossTrainer`` -> ``fused token loss trainer``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|_", " ", name).lower()


def offenders(texts: dict[str, str]) -> list[str]:
    found = []
    for phrase in retired():
        pattern = _pattern(phrase)
        found += [f"{phrase!r} in {where}" for where, text in texts.items() if pattern.search(text.lower())]
    return found


# --- the glossary itself ---

def test_the_glossary_defines_each_word_once_and_retires_real_synonyms():
    table = glossary()
    assert set(WORDS_THE_ISSUE_NAMES) <= set(table), set(WORDS_THE_ISSUE_NAMES) - set(table)
    phrases = [p for ps in table.values() for p in ps]
    assert len(phrases) == len(set(phrases)), "a synonym is retired twice"
    assert not set(phrases) & set(table), "a retired synonym is also a glossary word"
    assert {"verify", "fused token loss", "fused path", "loss-compatibility path"} <= set(phrases)


def test_the_matcher_finds_a_phrase_in_identifiers_and_prose_but_not_inside_words():
    assert _pattern("fused token loss").search(_words("FusedTokenLossTrainer"))
    assert _pattern("loss-compatibility path").search("the loss compatibility path")
    assert _pattern("verify").search(_words("kit.verify"))
    assert not _pattern("verify").search("verifying") and not _pattern("fused path").search("fused paths2")


# --- the command line ---

def _verbs() -> list[str]:
    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_the_help_texts_use_the_glossary_words():
    runner = CliRunner()
    texts = {}
    for verb in [[], *([v] for v in _verbs())]:
        result = runner.invoke(app, [*verb, "--help"], prog_name="ligerkit", env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        texts[f"ligerkit {' '.join(verb)} --help".replace("  ", " ")] = " ".join(result.stdout.split())
    assert len(texts) == len(_verbs()) + 1 >= 8
    assert not offenders(texts), offenders(texts)


def _keys(data: object) -> set[str]:
    if isinstance(data, dict):
        return set(map(str, data)) | {k for v in data.values() for k in _keys(v)}
    if isinstance(data, list):
        return {k for v in data for k in _keys(v)}
    return set()


@pytest.fixture(scope="module")
def json_keys() -> dict[str, set[str]]:
    """The keys of the JSON the quick verbs print (plan, families, suggest on a shipped modeling file)."""
    runner = CliRunner()
    argvs = {"plan": ["plan", "--json"], "families": ["families", "--json"],
             "suggest": ["suggest", str(ROOT / "recipes/custom_lm/model/modeling_custom_lm.py"), "--config",
                         "recipes.custom_lm.model.modeling_custom_lm:CustomLMConfig", "--json"]}
    keys = {}
    for verb, argv in argvs.items():
        result = runner.invoke(app, argv, prog_name="ligerkit")
        assert result.exit_code == 0, result.output
        keys[verb] = _keys(json.loads(result.stdout))
    return keys


def test_the_json_keys_use_the_glossary_words(json_keys):
    assert "scan" in json_keys["plan"] and "verdict" in json_keys["suggest"]
    texts = {f"{verb} --json key {key!r}": _words(key) for verb, keys in json_keys.items() for key in keys}
    assert not offenders(texts), offenders(texts)


# --- the public API ---

def _members(cls: type) -> set[str]:
    """Public attributes a ligerkit class defines (or inherits from another ligerkit class)."""
    return {name for base in cls.__mro__ if base.__module__.startswith("ligerkit") for name in vars(base)
            if not name.startswith("_")}


def public_names() -> set[str]:
    names = set()
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            names.add(name)
            value = getattr(module, name)
            if inspect.isclass(value):
                names |= {f"{name}.{member}" for member in _members(value)}
    for path in sorted((ROOT / "src/ligerkit/proof").glob("*.py")):  # ligerkit.proof: each module's public defs
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                names.add(f"proof.{path.stem}.{node.name}")
                if isinstance(node, ast.ClassDef):
                    names |= {f"proof.{path.stem}.{node.name}.{item.name}" for item in node.body
                              if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")}
        names.add(f"proof.{path.stem}")
    return names


def test_the_public_names_use_the_glossary_words():
    names = public_names()
    assert {"LigerKernelKit.scan", "FusedLossTrainer", "RecipeEngine.prepare_model", "proof.recipe_check"} <= names
    texts = {name: _words(name) for name in names}
    assert not offenders(texts), offenders(texts)


# --- the removed aliases: gone from the package, and from every caller ---

def test_the_removed_aliases_are_gone():
    from ligerkit import errors
    from ligerkit.integrations import hf_trainer
    from ligerkit.kit import core
    from ligerkit.train import RecipeEngine, Trainer

    for module in ("ligerkit.engine", "ligerkit.kit.checks", "ligerkit.train.checks", "ligerkit.proof.check",
                   "ligerkit.train.checkpoint_errors"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(module)
    import ligerkit.integrations as integrations

    assert not hasattr(core.LigerKernelKit, "verify") and not hasattr(core, "verified_by")
    assert not hasattr(RecipeEngine, "kit") and not hasattr(RecipeEngine, "setup_model")
    assert not hasattr(Trainer, "recipe") and not hasattr(errors, "NoAcceleratorError")
    for name in ("FusedTokenLossTrainer", "FusedTokenLossMixin"):
        assert not hasattr(hf_trainer, name)
        with pytest.raises(AttributeError):
            getattr(integrations, name)
    for new in ("ligerkit.kit.swap_checks", "ligerkit.train.config.checks", "ligerkit.proof.recipe_check"):
        importlib.import_module(new)  # the modules named for what they hold are there
    assert core.scanned_by and core.LigerKernelKit.scan and integrations.FusedLossTrainer


REMOVED_USES = {  # removed name -> how a use of it reads in code
    "LigerKernelKit.verify": re.compile(r"\.verify\("),
    "RecipeEngine.kit": re.compile(r"\b(engine|recipe|self|engines\[[^]]+\])\.kit\b(?!\w)"),
    "verified_by": re.compile(r"\bverified_by\b"),
    "FusedTokenLoss*": re.compile(r"\bFusedTokenLoss(Trainer|Mixin)\b"),
    "NoAcceleratorError": re.compile(r"\bNoAcceleratorError\b"),
    "Trainer.recipe": re.compile(r"\btrainer\.recipe\b"),
    "RecipeEngine.setup_model": re.compile(r"\.setup_model\("),
    "modules": re.compile(r"^\s*(from|import) ligerkit\.(engine|kit\.checks|train\.checks|proof\.check|"
                          r"train\.checkpoint_errors)\b|^\s*from ligerkit import engine\b", re.M),
}


def test_nothing_calls_a_removed_alias():
    folders = ("src", "recipes", "examples", "benchmarks", "tests")
    uses = []
    for path in [p for folder in folders for p in (ROOT / folder).rglob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tests/test_glossary.py":
            continue
        text = path.read_text()
        uses += [(rel, name) for name, pattern in REMOVED_USES.items() if pattern.search(text)]
    assert not uses, sorted(uses)


def test_the_current_docs_use_the_glossary_words():
    """README, the guide (its "Words" table aside) and integrations.md (the README's changelog, which
    names what was removed, aside); a paragraph, list item or table row that names a config key's earlier
    spelling (says "alias") may say it."""
    texts = {}
    for name in ("README.md", "docs/guide.md", "docs/integrations.md"):
        text = (ROOT / name).read_text()
        if name == "docs/guide.md":
            head, rest = text.split("\n## Words\n", 1)
            text = head + "\n## " + rest.split("\n## ", 1)[1]
        if name == "README.md" and "\n## Changelog\n" in text:
            head, rest = text.split("\n## Changelog\n", 1)
            text = head + ("\n## " + rest.split("\n## ", 1)[1] if "\n## " in rest else "")
        blocks = re.split(r"\n(?=\s*\n|- |\| |#)", text)
        texts[name] = "\n".join(block for block in blocks if "alias" not in block)
    assert not offenders(texts), offenders(texts)


def test_earlier_config_keys_live_only_in_the_map_that_reads_recorded_runs():
    """The flat ``train`` keys and the older spellings (``ligerkit.train.config.recorded``) appear in no
    shipped config, no code and no current doc outside that map, its tests and the changelog."""
    from ligerkit.train.config.recorded import MOVED, RESPELLED

    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in [*MOVED, *RESPELLED]) + r")(?![\w.])")
    allowed = {"src/ligerkit/train/config/recorded.py", "tests/test_recorded_config.py", "tests/test_glossary.py"}
    found = []
    for folder in ("src", "recipes", "examples", "benchmarks", "tests"):
        for path in (ROOT / folder).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix not in (".py", ".yaml", ".md") or rel in allowed or "egg-info" in rel:
                continue
            found += [(rel, m.group(1)) for m in pattern.finditer(path.read_text())]
    for name in ("README.md", "docs/guide.md", "docs/integrations.md"):
        text = (ROOT / name).read_text().split("\n## Changelog\n")[0]
        found += [(name, m.group(1)) for m in pattern.finditer(text)]
    assert not found, sorted(set(found))
    keys = {line.split(":")[0].strip() for p in (ROOT / "recipes").glob("*/configs/*.yaml")
            for line in p.read_text().splitlines()}
    assert not {k.split(".")[-1] for k in MOVED} & keys
