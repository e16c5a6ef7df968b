"""Hard validation of this recipe's Liger wiring (the requirement's references/asserts.py).

Structure, configs, apply-before-build (observed), and the enabled kernels in the built model.
"""

from pathlib import Path

from ligerkit.validate import asserts

RECIPE = Path(__file__).resolve().parents[3]


def test_file_structure():
    asserts.assert_file_structure(RECIPE)


def test_config_structure():
    asserts.assert_config_structure(RECIPE)


def test_engine_applies_before_building():
    asserts.assert_applies_before_build(RECIPE)


def test_enabled_kernels_are_in_the_built_model():
    asserts.assert_kernels_in_model(RECIPE)
