"""Where the collection gpufleet.nvidia, its playbooks, inventories and ansible.cfg live.

Two layouts are supported and found without configuration:

* **installed wheel**: the collection is installed beside the package, at
  ``site-packages/ansible_collections/gpufleet/nvidia``, where ansible-core itself looks for collections in the
  Python it runs on (so ``ansible-playbook gpufleet.nvidia.site`` works without gpufleet); gpufleet's ansible.cfg
  is ``site-packages/gpufleet/ansible.cfg``;
* **checkout** (also an editable install): the package lives in ``<repo>/src/gpufleet`` and the repository root is
  the collection root; ``<repo>/collections/ansible_collections/gpufleet/nvidia`` is a symlink back to it.

The wheel layout wins when both exist, so that an installed package never runs content from elsewhere. It needs
both the collection and the ansible.cfg that the wheel ships together: a collection that ``ansible-galaxy``
installed into site-packages by itself is not mistaken for the wheel's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from gpufleet.errors import CollectionNotFoundError, InventoryNotFoundError, PlaybookNotFoundError

COLLECTION_NAMESPACE = "gpufleet"
COLLECTION_NAME = "nvidia"
FQCN_PREFIX = f"{COLLECTION_NAMESPACE}.{COLLECTION_NAME}."
PLAYBOOK_SUFFIXES = (".yml", ".yaml")

_PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CollectionLayout:
    """Where one copy of the collection lives.

    Attributes:
        origin: ``"wheel"`` (shipped inside the installed package) or ``"checkout"`` (a source tree).
        root: The collection root (``galaxy.yml``, ``playbooks/``, ``roles/``, ``plugins/``, ``inventories/``).
        collections_dir: The directory to put on ``ANSIBLE_COLLECTIONS_PATH``; it holds ``ansible_collections/``.
        ansible_cfg: The ansible.cfg that goes with this copy.
    """

    origin: Literal["wheel", "checkout"]
    root: Path
    collections_dir: Path
    ansible_cfg: Path


def _find_layout(package_dir: Path) -> CollectionLayout:
    """Find the collection next to a package directory (pure path logic, for :func:`layout` and the tests)."""
    site_packages = package_dir.parent
    shipped_root = site_packages / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    shipped_cfg = package_dir / "ansible.cfg"
    if (shipped_root / "galaxy.yml").is_file() and shipped_cfg.is_file():
        return CollectionLayout("wheel", shipped_root, site_packages, shipped_cfg)
    checkout = package_dir.parent.parent
    if (checkout / "galaxy.yml").is_file() and package_dir.parent.name == "src":
        return CollectionLayout("checkout", checkout, checkout / "collections", checkout / "ansible.cfg")
    raise CollectionNotFoundError(
        f"collection {COLLECTION_NAMESPACE}.{COLLECTION_NAME} not found: neither {shipped_root} (installed wheel) "
        f"nor a checkout at {checkout}; reinstall the gpufleet package"
    )


@cache
def layout() -> CollectionLayout:
    """Return the layout of the collection that belongs to this package (cached)."""
    return _find_layout(_PACKAGE_DIR)


def collection_root() -> Path:
    """Return the root directory of the collection gpufleet.nvidia used by this package."""
    return layout().root


def available_playbooks(root: Path | None = None) -> list[str]:
    """Return the names (without suffix) of the collection's playbooks, sorted."""
    directory = (root or collection_root()) / "playbooks"
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.iterdir() if p.suffix in PLAYBOOK_SUFFIXES and p.is_file())


def available_inventories(root: Path | None = None) -> list[str]:
    """Return the names of the inventories shipped with the collection (``inventories/<name>``), sorted."""
    directory = (root or collection_root()) / "inventories"
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def resolve_playbook(name: str | os.PathLike[str], root: Path | None = None) -> Path:
    """Turn a playbook name or path into an absolute path.

    Accepted forms, in this order: a path to an existing ``.yml``/``.yaml`` file; a playbook of the collection by
    name (``site``, ``site.yml``, or the FQCN ``gpufleet.nvidia.site``).

    Raises:
        PlaybookNotFoundError: neither form matches; the message lists the collection's playbooks.
    """
    text = os.fspath(name)
    candidate = Path(text).expanduser()
    if candidate.suffix in PLAYBOOK_SUFFIXES and candidate.is_file():
        return candidate.resolve()
    base = root or collection_root()
    short = text.removeprefix(FQCN_PREFIX)
    if short and "/" not in short and not short.startswith("."):
        stem = short.removesuffix(".yml").removesuffix(".yaml")
        for suffix in PLAYBOOK_SUFFIXES:
            path = base / "playbooks" / f"{stem}{suffix}"
            if path.is_file():
                return path
    known = ", ".join(available_playbooks(base)) or "none"
    raise PlaybookNotFoundError(
        f"unknown playbook {text!r}: not a playbook file and not one of the collection's playbooks ({known})"
    )


def resolve_inventory(value: str | os.PathLike[str], root: Path | None = None) -> Path:
    """Turn an inventory argument into an absolute path.

    Accepted forms, in this order: an existing file or directory; the name of an inventory shipped with the
    collection (``sim`` -> ``<collection>/inventories/sim``).

    Raises:
        InventoryNotFoundError: neither form matches; the message lists the shipped inventories.
    """
    text = os.fspath(value)
    candidate = Path(text).expanduser()
    if text and candidate.exists():
        return candidate.resolve()
    base = root or collection_root()
    if text and "/" not in text and not text.startswith("."):
        shipped = base / "inventories" / text
        if shipped.exists():
            return shipped
    known = ", ".join(available_inventories(base)) or "none"
    raise InventoryNotFoundError(
        f"inventory {text!r} not found: no such file or directory, and not one of the shipped inventories ({known})"
    )
