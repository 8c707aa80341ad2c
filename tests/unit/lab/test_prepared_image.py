"""The prepared baseline images: the recipe hash that keys them, and the platform checks before any host starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet_lab.image import prepared_image, tree_digest
from gpufleet_lab.loader import lab_hosts as load_lab_hosts

ROOT = Path(__file__).resolve().parents[3]


def _tree(base: Path) -> Path:
    role = base / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("- name: A\n", encoding="utf-8")
    (role / "defaults").mkdir()
    (role / "defaults" / "main.yml").write_text("r_x: 1\n", encoding="utf-8")
    return role


def test_digest_follows_content_names_and_extra(tmp_path: Path) -> None:
    role = _tree(tmp_path)
    first = tree_digest([role], base=tmp_path)
    (role / "defaults" / "main.yml").write_text("r_x: 2\n", encoding="utf-8")
    second = tree_digest([role], base=tmp_path)
    (role / "defaults" / "main.yml").rename(role / "defaults" / "other.yml")
    third = tree_digest([role], base=tmp_path)
    fourth = tree_digest([role], base=tmp_path, extra={"branch": "550"})
    assert len({first, second, third, fourth}) == 4


def test_digest_ignores_where_the_checkout_lives_and_pycache(tmp_path: Path) -> None:
    role = _tree(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "roles" / "r" / "__pycache__").mkdir()
    (tmp_path / "b" / "roles" / "r" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert tree_digest([role], base=tmp_path / "a") == tree_digest([tmp_path / "b" / "roles" / "r"],
                                                                   base=tmp_path / "b")


def test_a_missing_input_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        tree_digest([tmp_path / "roles" / "gone"], base=tmp_path)
    assert str(err.value) == f"{tmp_path}/roles/gone is named in the recipe and does not exist"


def test_image_tag() -> None:
    assert prepared_image("plain-570", "0123456789abcdef") == \
        "localhost/gpufleet-testhost-prepared:plain-570-0123456789abcdef"


@pytest.mark.parametrize(("platform", "message"), [
    ({"name": "x", "preset": "2xL40S", "baseline": "nvswitch-570"},
     "platform x (2xL40S) cannot use baseline nvswitch-570: it was built on a host with a different NVSwitch setup "
     "(fabric manager); pick the baseline of the same kind"),
    ({"name": "y", "preset": "8xH100-NVSwitch", "baseline": "plain-550"},
     "platform y (8xH100-NVSwitch) cannot use baseline plain-550: it was built on a host with a different NVSwitch "
     "setup (fabric manager); pick the baseline of the same kind"),
    ({"name": "z", "preset": "4xA30", "baseline": "plain-999"},
     "unknown baseline plain-999: use one of nvswitch-550, nvswitch-570, plain-550, plain-570"),
])
def test_platforms_refused_before_any_host_starts(platform: dict, message: str, monkeypatch) -> None:
    lab_hosts = load_lab_hosts()
    started: list[object] = []
    monkeypatch.setattr(lab_hosts.hosts_mod, "start_hosts", lambda *a, **k: started.append(a))
    with pytest.raises(lab_hosts.LabHostsError) as err:
        lab_hosts.hosts_up([platform], "molecule", 101)
    assert str(err.value) == message
    assert started == []
