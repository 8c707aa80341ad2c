"""The image recipe hash that keys the cache, and the mirror lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet_lab.image import DEFAULT_MIRROR, PACKAGES, Recipe, debian_mirror


def test_digest_is_stable_and_order_independent() -> None:
    assert Recipe().digest() == Recipe(packages=tuple(reversed(PACKAGES))).digest()
    assert len(Recipe().digest()) == 16


@pytest.mark.parametrize("change", [
    {"suite": "trixie"}, {"variant": "buildd"}, {"packages": (*PACKAGES, "vim")}, {"revision": 99},
    {"apt_conf": ""},
])
def test_digest_changes_with_the_recipe(change: dict) -> None:
    assert Recipe(**change).digest() != Recipe().digest()


@pytest.mark.parametrize(("deb822", "legacy", "mirror"), [
    ("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n", None, "http://mirror.example/debian"),
    (None, "deb http://security.debian.org/debian-security bookworm-security main\n"
           "deb http://ftp.example/debian bookworm main\n", "http://ftp.example/debian"),
    (None, "deb [arch=amd64] http://a.example/debian bookworm main\n", "http://a.example/debian"),
    (None, None, DEFAULT_MIRROR),
])
def test_debian_mirror(tmp_path: Path, deb822: str | None, legacy: str | None, mirror: str) -> None:
    sources, old = tmp_path / "debian.sources", tmp_path / "sources.list"
    if deb822 is not None:
        sources.write_text(deb822)
    if legacy is not None:
        old.write_text(legacy)
    assert debian_mirror(sources, old) == mirror
