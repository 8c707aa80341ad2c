# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""MIG types and grammar: profile names, GPU-instance and compute-instance profiles, GPU models, PCI ids.

Split from :mod:`mig_profiles` (which holds the catalogue of models and re-exports these names). Pure Python,
standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# NVML GPU-instance profile enums (nvml.h NVML_GPU_INSTANCE_PROFILE_*).
GI_ENUM_1_SLICE = 0
GI_ENUM_2_SLICE = 1
GI_ENUM_3_SLICE = 2
GI_ENUM_4_SLICE = 3
GI_ENUM_7_SLICE = 4
GI_ENUM_1_SLICE_REV1 = 7  # +me
GI_ENUM_2_SLICE_REV1 = 8  # +me
GI_ENUM_1_SLICE_REV2 = 9  # 1g with twice the memory
GI_ENUM_1_SLICE_GFX = 10  # +gfx
GI_ENUM_2_SLICE_GFX = 11
GI_ENUM_4_SLICE_GFX = 12
GI_ENUM_1_SLICE_NO_ME = 13  # -me
GI_ENUM_2_SLICE_NO_ME = 14
GI_ENUM_1_SLICE_ALL_ME = 15  # +me.all
GI_ENUM_2_SLICE_ALL_ME = 16

# NVML compute-instance profile enums by compute-slice count (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_*).
# nvidia-smi prints the enum as the CI profile id, and NVML's CI profile info id equals it.
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

_PROFILE_RE = re.compile(
    r"^(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb"
    r"(?:(?P<sign>[+-])(?P<attrs>[A-Za-z][A-Za-z0-9.]*(?:,[A-Za-z][A-Za-z0-9.]*)*))?$"
)


class UnknownModelError(ValueError):
    """No MIG profile table is known for a GPU."""


class ProfileSyntaxError(ValueError):
    """A MIG profile string does not follow NVIDIA's grammar."""


@dataclass(frozen=True)
class ProfileName:
    """A parsed MIG profile string ``[<C>c.]<G>g.<GB>gb[+attr|-attr]``."""

    compute_slices: int
    gi_slices: int
    gb: int
    suffix: str = ""

    @property
    def gi_name(self) -> str:
        """Name of the GPU-instance profile, e.g. ``3g.40gb`` for ``1c.3g.40gb``."""
        return f"{self.gi_slices}g.{self.gb}gb{self.suffix}"

    @property
    def name(self) -> str:
        """Canonical name: the compute prefix only when the CI is smaller than its GI (NVIDIA's rule)."""
        if self.compute_slices == self.gi_slices:
            return self.gi_name
        return f"{self.compute_slices}c.{self.gi_name}"


def parse_profile_name(text: str) -> ProfileName:
    """Parse a MIG profile string; raise :class:`ProfileSyntaxError` naming the string when it is malformed."""
    if not isinstance(text, str):
        raise ProfileSyntaxError(f"MIG profile {text!r} is not a string")
    match = _PROFILE_RE.fullmatch(text)
    if match is None:
        raise ProfileSyntaxError(
            f"malformed MIG profile '{text}'; expected [<C>c.]<G>g.<GB>gb[+attr], e.g. 3g.40gb or 1c.3g.40gb"
        )
    gi_slices = int(match.group("g"))
    compute = int(match.group("c")) if match.group("c") else gi_slices
    if compute < 1 or gi_slices < 1 or compute > gi_slices:
        raise ProfileSyntaxError(f"malformed MIG profile '{text}'; need 1 <= C <= G")
    attrs = match.group("attrs")
    suffix = "{}{}".format(match.group("sign"), attrs) if attrs else ""
    if attrs and (attrs.endswith(".") or ".," in attrs):
        raise ProfileSyntaxError(f"malformed MIG profile '{text}'; attributes must not end with '.'")
    return ProfileName(compute, gi_slices, int(match.group("gb")), suffix)


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile of one GPU model."""

    name: str
    nvml_enum: int
    profile_id: int
    compute_slices: int
    memory_slices: int
    instance_count: int
    memory_mib: int
    starts: tuple[int, ...]

    @property
    def size(self) -> int:
        """Size of every placement on the memory-slice axis."""
        return self.memory_slices

    @property
    def placements(self) -> list[tuple[int, int]]:
        """``(start, size)`` pairs, as ``nvmlDeviceGetGpuInstancePossiblePlacements_v2`` reports them."""
        return [(start, self.memory_slices) for start in self.starts]


@dataclass(frozen=True)
class CiProfile:
    """A compute-instance profile inside a GPU instance of a given profile."""

    name: str
    nvml_enum: int
    profile_id: int
    compute_slices: int
    instance_count: int
    starts: tuple[int, ...] = ()


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model and its GPU-instance profile table."""

    name: str
    pci_device_ids: tuple[int, ...]
    nvml_names: tuple[str, ...]
    aliases: tuple[str, ...]
    memory_mib: int
    memory_slots: int
    compute_slices: int
    mode_change_requires_reset: bool
    gi_profiles: tuple[GiProfile, ...]
    profile_aliases: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    inferred: tuple[str, ...] = ()
    # (listing, driver) the profiles' MiB are read from: a file under tests/data/ground-truth where the project keeps
    # the listing, else where it was posted; driver "unknown" where the listing does not say. () = no listing gives
    # the MiB (INFERRED). Another driver prints other MiB for the same profile: planning on a host uses the host's
    # own table (mig_host), never these.
    memory_from: tuple[str, str] | tuple[()] = ()
    key: str = ""  # a host table's model (mig_host): its own registry key; a catalogue row: its name

    @property
    def cache_key(self) -> str:
        """The key :func:`model_by_key` finds this model under."""
        return self.key or self.name

    @property
    def from_host(self) -> bool:
        """True for a model built from a host's own NVML profile table (:mod:`mig_host`)."""
        return bool(self.key)

    def profile(self, name: str) -> GiProfile | None:
        """The GI profile called ``name``, or that a driver's variant name ``name`` means (``profile_aliases``);
        None when the model offers neither."""
        for profile in self.gi_profiles:
            if profile.name == name:
                return profile
        canonical = self.canonical_profile_name(name)
        if canonical != name:
            return self.profile(canonical)
        return None

    def canonical_profile_name(self, name: str) -> str:
        """The catalogue's name for ``name``: itself, or the profile a driver's variant name stands for."""
        for alias, canonical in self.profile_aliases:
            if alias == name:
                return canonical
        return name

    def canonical_ci_name(self, text: str) -> str:
        """The canonical name of a compute-instance profile, its GI part through ``profile_aliases``
        (``1c.3g.95gb`` -> ``1c.3g.93gb`` on a GB200); raise :class:`ProfileSyntaxError` when it is malformed."""
        parsed = parse_profile_name(text)
        gi = parse_profile_name(self.canonical_profile_name(parsed.gi_name))
        return ProfileName(parsed.compute_slices, gi.gi_slices, gi.gb, gi.suffix).name

    def profile_by_id(self, profile_id: int) -> GiProfile | None:
        """The GI profile whose NVML profile id (nvidia-smi's ID column) is ``profile_id``, or None."""
        for profile in self.gi_profiles:
            if profile.profile_id == profile_id:
                return profile
        return None

    @property
    def profile_names(self) -> list[str]:
        """Names of every GI profile, in table order."""
        return [profile.name for profile in self.gi_profiles]

    def ci_profiles(self, gi: GiProfile) -> list[CiProfile]:
        """Compute-instance profiles offered inside a GI: C <= G and not (C < G and 2C > G + 1) (go-nvlib)."""
        result = []
        gslices = gi.compute_slices
        for cslices in sorted(CI_ENUM_BY_SLICES):
            if cslices > gslices or (cslices < gslices and 2 * cslices > gslices + 1):
                continue
            name = gi.name if cslices == gslices else f"{cslices}c.{gi.name}"
            enum = CI_ENUM_BY_SLICES[cslices]
            step = 1 << (cslices - 1).bit_length()  # placements at multiples of the next power of two
            starts = tuple(range(0, gslices - cslices + 1, step))
            result.append(CiProfile(name, enum, enum, cslices, len(starts), starts))
        return result

    def pack_compute_instances(self, gi: GiProfile, cis: list[CiProfile]) -> list[int] | None:
        """Starts (on the GI's compute-slice axis) for ``cis`` in the given order, or None when they cannot all
        be placed: backtracking, lowest start first. Callers pass the largest CI first."""
        starts: list[int] = []

        def place(i: int, used: int) -> bool:
            if i == len(cis):
                return True
            for start in cis[i].starts:
                bits = ((1 << cis[i].compute_slices) - 1) << start
                if not used & bits:
                    starts.append(start)
                    if place(i + 1, used | bits):
                        return True
                    starts.pop()
            return False

        return starts if place(0, 0) else None

    def ci_profile_by_id(self, gi: GiProfile, profile_id: int) -> CiProfile | None:
        """The CI profile inside ``gi`` with NVML CI profile id ``profile_id``, or None."""
        for ci in self.ci_profiles(gi):
            if ci.profile_id == profile_id:
                return ci
        return None


Row = tuple[str, int, int, int, int, int, int, tuple[int, ...]]


def _model(name: str, pci: tuple[int, ...], nvml_names: tuple[str, ...], aliases: tuple[str, ...], memory_mib: int,
           reset: bool, rows: list[Row], profile_aliases: tuple[tuple[str, str], ...] = (),
           sources: tuple[str, ...] = (), inferred: tuple[str, ...] = (),
           memory_from: tuple[str, str] | tuple[()] = ()) -> GpuModel:
    """Build a model; ``rows`` are (name, enum, id, compute slices, memory slices, count, MiB, starts)."""
    profiles = tuple(GiProfile(*row) for row in rows)
    slots = max(p.memory_slices for p in profiles)
    return GpuModel(name=name, pci_device_ids=pci, nvml_names=nvml_names, aliases=aliases, memory_mib=memory_mib,
                    memory_slots=slots, compute_slices=max(p.compute_slices for p in profiles),
                    mode_change_requires_reset=reset, gi_profiles=profiles, profile_aliases=profile_aliases,
                    sources=sources, inferred=inferred, memory_from=memory_from)


def _eight_slot(g1: str, g1x2: str, g2: str, g3: str, g4: str, g7: str, mib: tuple[int, int, int, int]) -> list[Row]:
    """The GI table every 7-compute / 8-memory-slice GA100/GH100/GB100 board lists (``-lgip``/``-lgipp``):
    ids 19/20/15/14/9/5/0, enums 0/7/9/1/2/3/4, starts 0-6 / 0-6 / 0,2,4,6 / 0,2,4 / 0,4 / 0 / 0.
    ``mib`` = the memory of a 1-, 2-, 4- and 8-slice instance."""
    m1, m2, m4, m8 = mib
    return [
        (g1, GI_ENUM_1_SLICE, 19, 1, 1, 7, m1, _ALL_1G),
        (f"{g1}+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, m1, _ALL_1G),
        (g1x2, GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, m2, _EVEN),
        (g2, GI_ENUM_2_SLICE, 14, 2, 2, 3, m2, (0, 2, 4)),
        (g3, GI_ENUM_3_SLICE, 9, 3, 4, 2, m4, (0, 4)),
        (g4, GI_ENUM_4_SLICE, 5, 4, 4, 1, m4, (0,)),
        (g7, GI_ENUM_7_SLICE, 0, 7, 8, 1, m8, (0,)),
    ]


def _gib(value: float) -> int:
    """MiB of a GiB figure as ``nvidia-smi mig -lgip`` prints it (two decimals of a multiple of 1/8 GiB)."""
    return round(value * 8) * 128


_ALL_1G = (0, 1, 2, 3, 4, 5, 6)
_EVEN = (0, 2, 4, 6)

def parse_pci_id(value: int | str | None) -> int | None:
    """``0x20B010DE`` (any case, with or without ``0x``) or an int -> int; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"PCI device id {value!r} is not a number")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text, 16) if not text.lower().startswith("0x") else int(text, 0)
    except ValueError:
        raise ValueError(f"PCI device id '{text}' is not hexadecimal like 0x20B010DE") from None


_GO_INT_RE = re.compile(r"[+-]?[0-9A-Za-z_]+", re.ASCII)
MAX_DEVICE_ID = 2**31 - 1


def parse_device_id(value: Any, field_name: str = "device-filter") -> int:
    """A PCI device id of a device filter, read exactly as mig-parted reads it.

    mig-parted's ``NewDeviceIDFromString`` (pkg/types/device.go) calls ``strconv.ParseInt(str, 0, 32)``: base
    prefixes ``0x``/``0X`` (hex), ``0o``/``0O`` or a bare leading ``0`` (octal), ``0b``/``0B`` (binary), otherwise
    decimal (so ``'548409566'`` is 0x20B010DE), underscores between digits, ASCII digits only, and the value must
    fit a signed 32-bit int. An int is taken as it is. Negative values, which mig-parted would wrap, are refused.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{field_name} {value!r} is not a PCI device id; give one like 0x20B010DE")
    if isinstance(value, int):
        number = value
    else:
        text = value  # Go's ParseInt trims nothing
        body = text.lstrip("+-")
        if not _GO_INT_RE.fullmatch(text) or not body:
            raise ValueError(f"{field_name} '{value}' is not a PCI device id; give one like 0x20B010DE "
                             "(hexadecimal with 0x, or decimal)")
        sign = -1 if text.startswith("-") else 1
        if len(body) > 1 and body[0] == "0" and (body[1].isdigit() or body[1] == "_"):
            body = "0o" + body[1:]  # Go: a bare leading 0 means octal
        try:
            number = sign * int(body, 0)
        except ValueError:
            raise ValueError(f"{field_name} '{value}' is not a PCI device id; give one like 0x20B010DE "
                             "(hexadecimal with 0x, or decimal)") from None
    if not 0 <= number <= MAX_DEVICE_ID:
        raise ValueError(f"{field_name} '{value}' is out of range; a PCI device id is from 0 to 0x7FFFFFFF, "
                         "e.g. 0x20B010DE")
    return number


def format_pci_id(value: int) -> str:
    """Format a packed device+vendor id the way mig-parted does: ``0x20B010DE``."""
    return f"0x{(value >> 16) & 0xFFFF:04X}{value & 0xFFFF:04X}"


def mig_memory_gb(total_mib: int, profile_mib: int) -> int:
    """The GB figure in a profile name (go-nvlib getMigMemorySizeGB), with Go's round-half-away-from-zero."""
    frac = profile_mib / total_mib
    eighths = -(-frac * 8 // 1)  # ceil without float surprises for exact multiples
    total_gb = -(-total_mib // 1024)
    return int(eighths / 8 * total_gb + 0.5)
