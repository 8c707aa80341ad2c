"""Finding the collection (wheel or checkout) and resolving playbook and inventory names."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet import _paths
from gpufleet.errors import CollectionNotFoundError, InventoryNotFoundError, PlaybookNotFoundError


def make_checkout(base: Path) -> Path:
    (base / "src" / "gpufleet").mkdir(parents=True)
    (base / "galaxy.yml").write_text("namespace: gpufleet\n")
    return base / "src" / "gpufleet"


def make_wheel(site: Path, *, cfg: bool = True) -> Path:
    """What the wheel installs: site-packages/ansible_collections/gpufleet/nvidia and site-packages/gpufleet."""
    root = site / "ansible_collections" / "gpufleet" / "nvidia"
    root.mkdir(parents=True)
    (root / "galaxy.yml").write_text("namespace: gpufleet\n")
    (site / "gpufleet").mkdir(exist_ok=True)
    if cfg:
        (site / "gpufleet" / "ansible.cfg").write_text("[defaults]\n")
    return site / "gpufleet"


def test_checkout_layout(tmp_path):
    package = make_checkout(tmp_path)
    assert _paths._find_layout(package) == _paths.CollectionLayout(
        "checkout", tmp_path, tmp_path / "collections", tmp_path / "ansible.cfg"
    )


def test_wheel_layout(tmp_path):
    site = tmp_path / "site-packages"
    package = make_wheel(site)
    assert _paths._find_layout(package) == _paths.CollectionLayout(
        "wheel", site / "ansible_collections" / "gpufleet" / "nvidia", site, site / "gpufleet" / "ansible.cfg"
    )


def test_collection_without_the_wheels_cfg_is_not_the_wheel(tmp_path):
    """A gpufleet.nvidia that ansible-galaxy put in site-packages is not the wheel's: the checkout is used."""
    package = make_checkout(tmp_path)
    make_wheel(tmp_path / "src", cfg=False)
    assert _paths._find_layout(package).origin == "checkout"


def test_wheel_wins_over_checkout(tmp_path):
    package = make_checkout(tmp_path)
    make_wheel(tmp_path / "src")
    assert _paths._find_layout(package).origin == "wheel"


def test_no_collection(tmp_path):
    package = tmp_path / "lib" / "gpufleet"
    package.mkdir(parents=True)
    with pytest.raises(CollectionNotFoundError) as info:
        _paths._find_layout(package)
    shipped = tmp_path / "lib" / "ansible_collections" / "gpufleet" / "nvidia"
    assert str(info.value) == (
        f"collection gpufleet.nvidia not found: neither {shipped} (installed wheel) nor a checkout at {tmp_path}; "
        "reinstall the gpufleet package"
    )


def test_this_checkout_is_found():
    layout = _paths.layout()
    assert (layout.root / "galaxy.yml").is_file()
    assert (layout.collections_dir / "ansible_collections" / "gpufleet" / "nvidia" / "galaxy.yml").is_file()
    assert layout.ansible_cfg.is_file()


@pytest.fixture
def root(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("[]\n")
    (tmp_path / "playbooks" / "verify.yaml").write_text("[]\n")
    (tmp_path / "playbooks" / "notes.txt").write_text("x\n")
    (tmp_path / "inventories" / "sim").mkdir(parents=True)
    (tmp_path / "inventories" / "sample").mkdir()
    (tmp_path / "inventories" / ".hidden").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("site", "playbooks/site.yml"),
        ("site.yml", "playbooks/site.yml"),
        ("gpufleet.nvidia.site", "playbooks/site.yml"),
        ("verify", "playbooks/verify.yaml"),
        ("verify.yaml", "playbooks/verify.yaml"),
        ("playbooks/site.yml", "playbooks/site.yml"),
    ],
)
def test_resolve_playbook(root, monkeypatch, name, expected):
    monkeypatch.chdir(root)
    assert _paths.resolve_playbook(name, root) == (root / expected).resolve()


@pytest.mark.parametrize(
    "name", ["nope", "notes", "notes.txt", "../site", "", "gpufleet.nvidia.", "other.col.site", ".site"]
)
def test_unknown_playbook_message(root, name):
    with pytest.raises(PlaybookNotFoundError) as info:
        _paths.resolve_playbook(name, root)
    assert str(info.value) == (
        f"unknown playbook {name!r}: not a playbook file and not one of the collection's playbooks (site, verify)"
    )


def test_unknown_playbook_without_playbooks(tmp_path):
    with pytest.raises(PlaybookNotFoundError, match=r"\(none\)$"):
        _paths.resolve_playbook("site", tmp_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("sim", "inventories/sim"), ("inventories/sample", "inventories/sample"), ("playbooks/site.yml", None)],
)
def test_resolve_inventory(root, monkeypatch, value, expected):
    monkeypatch.chdir(root)
    want = root / (expected or value)
    assert _paths.resolve_inventory(value, root) == want.resolve()


@pytest.mark.parametrize("value", ["nope", "", "a/b", ".hidden/x"])
def test_unknown_inventory_message(root, value):
    with pytest.raises(InventoryNotFoundError) as info:
        _paths.resolve_inventory(value, root)
    assert str(info.value) == (
        f"inventory {value!r} not found: no such file or directory, and not one of the shipped inventories "
        "(sample, sim)"
    )
