"""The suite's Hypothesis profile: property tests have no per-example deadline (they flaked under load)."""

from __future__ import annotations

from hypothesis import settings


def test_property_tests_have_no_deadline() -> None:
    assert settings.default.deadline is None


def test_settings_built_in_a_module_inherit_no_deadline() -> None:
    assert settings(max_examples=5).deadline is None
