"""The tier registry is the one list of tiers: every Tier is declared there, and no other
module of the service keeps a list of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from memoryd.core.models import Kind, Tier
from memoryd.core.tiers import registry
from memoryd.core.tiers.registry import TIERS, StoreFamily
from memoryd.settings import RetentionSettings, Settings

SERVICE = Path(registry.__file__).resolve().parents[2]


def test_every_tier_of_the_enum_is_declared_once() -> None:
    assert list(TIERS) == list(Tier)
    assert all(spec.tier is tier for tier, spec in TIERS.items())


def test_a_tier_settings_section_and_retention_setting_exist() -> None:
    settings, retention = Settings.explicit(), RetentionSettings()
    for spec in TIERS.values():
        if spec.settings_section:
            assert hasattr(settings, spec.settings_section), spec.tier
        if spec.archive_after_setting:
            assert spec.archive_after_days(retention) > 0, spec.tier


def test_kinds_belong_to_at_most_one_tier() -> None:
    owned = [k for spec in TIERS.values() for k in spec.kinds]
    assert len(owned) == len(set(owned))
    assert Kind.EPISODE in registry.kinds_owned_elsewhere(Tier.LONG_TERM)
    assert Kind.EPISODE not in registry.kinds_owned_elsewhere(Tier.EPISODIC)


def test_hot_tiers_are_neither_backed_up_nor_archived() -> None:
    for spec in TIERS.values():
        if spec.store is StoreFamily.HOT:
            assert not spec.backed_up and not spec.archive_after_setting, spec.tier


def test_maintenance_archives_episodes_after_the_tiers_that_purge_first() -> None:
    order = [s.tier for s in registry.retained()]
    assert order == [Tier.LONG_TERM, Tier.STRUCTURED, Tier.EPISODIC]


def _tier_members(node: ast.AST) -> int:
    """How many `Tier.X` members a literal collection names."""
    elements: list[ast.expr] = []
    if isinstance(node, ast.Set | ast.List | ast.Tuple):
        elements = list(node.elts)
    elif isinstance(node, ast.Dict):
        elements = [k for k in node.keys if k is not None]
    return sum(
        1
        for e in elements
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "Tier"
    )


def test_no_module_but_the_registry_keeps_a_list_of_tiers() -> None:
    offenders = []
    for path in sorted(SERVICE.rglob("*.py")):
        if path.name == "registry.py" or "v1" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if _tier_members(node) >= 2:
                offenders.append(f"{path.relative_to(SERVICE)}:{getattr(node, 'lineno', '?')}")
    assert offenders == [], "tier lists outside the registry: " + ", ".join(offenders)
