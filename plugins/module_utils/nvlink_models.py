# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""gpufleet's one table of each GPU model's NVLinks: how many links the GPU has, their generation and the speed NVML
reports for each up link, and how they are wired (NVSwitch baseboard, optional bridges, none).

Pure Python, standard library only. Read by gpu_health's ``nvlink`` check (:mod:`health_nvlink`); the simulator's
model files (``simulator/src/gpufleet_sim/models``) are cross-checked against it through pynvml
(``tests/sim/test_nvlink_models_sim.py``). ``docs/health.md`` repeats the table with its sources.

Speeds are what NVML's per-link field ``NVML_FI_DEV_NVLINK_GET_SPEED`` (164) answers and ``nvidia-smi nvlink -s``
prints, in MB/s per link and direction. That is the line rate, 17/16 of the data rate NVIDIA's product pages quote
(25 and 50 GB/s per link and direction):

* NVLink 3 (Ampere): 25000. ``nvidia-smi nvlink -s`` on an 8x A100 server totals 300 GB/s over 12 links
  (NVIDIA/nccl #1054).
* NVLink 4 (Hopper): 26562. INFERRED: no transcript seen while writing this table; 25 GB/s x 17/16 as NVLink 5 shows.
* NVLink 5 (Blackwell): 53125. ``nvidia-smi nvlink -s`` on GB200 prints 53.125 GB/s for each of 18 links
  (NVIDIA/k8s-test-infra #371).

Link counts are the bandwidth NVIDIA quotes per GPU (bidirectional) over 50 GB/s per link (NVLink 3 and 4) or
100 GB/s (NVLink 5): 600 GB/s = 12 links, 900 GB/s = 18, 400 GB/s = 8, 200 GB/s = 4, 1.8 TB/s = 18.

``wiring``: ``switch`` (SXM/superchip modules on an NVSwitch baseboard or NVLink switch tray: every link is wired, a
link down is a fault), ``bridge`` (PCIe boards whose links are used only when NVLink bridges are fitted: NVML
enumerates the links and reports them all inactive without a bridge; NVIDIA/NVSentinel #1481 shows an A100 80GB
PCIe without a bridge with all 12 links down), ``external`` (GH200: its links reach other superchips only in an
NVLink Switch System such as DGX GH200 or GH200 NVL32; in a one-superchip server they are unused), ``none`` (no
NVLink: NVML answers NOT_SUPPORTED).
"""

from __future__ import annotations

from dataclasses import dataclass

SWITCH = "switch"
BRIDGE = "bridge"
EXTERNAL = "external"
NONE = "none"
#: wirings whose links are only used when something outside the board is fitted (a bridge, an NVLink switch system)
OPTIONAL = (BRIDGE, EXTERNAL)

#: NVML_FI_DEV_NVLINK_GET_SPEED answer (MB/s per link and direction) by NVLink generation
SPEED_MBPS = {3: 25000, 4: 26562, 5: 53125}
SPEED_SOURCES = {
    3: "NVIDIA/nccl #1054 (nvidia-smi nvlink -s on 8x A100: 300 GB/s over 12 links)",
    4: "INFERRED: 25 GB/s data rate x 17/16 line coding, as NVLink 5's transcript shows",
    5: "NVIDIA/k8s-test-infra #371 (nvidia-smi nvlink -s on GB200: 53.125 GB/s x 18 links)",
}


@dataclass(frozen=True)
class NvlinkSpec:
    """One board's NVLinks. ``links`` 0 and ``generation`` 0 for boards without NVLink."""

    model: str
    pci_device_id: int
    nvml_name: str
    links: int
    generation: int
    wiring: str
    source: str
    inferred: str = ""

    @property
    def speed_mbps(self) -> int | None:
        """The speed NVML reports for each up link (None without NVLink)."""
        return SPEED_MBPS.get(self.generation)


def _s(model: str, pci: int, name: str, links: int, gen: int, wiring: str, source: str,
       inferred: str = "") -> NvlinkSpec:
    return NvlinkSpec(model, pci, name, links, gen, wiring, source, inferred)


_NVLINK_PAGE = "nvidia.com/data-center/nvlink (A100: twelve 3rd-gen links, 600 GB/s; also in A100 PCIe pairs)"
_H100_PAGE = "NVIDIA H100 product page / datasheet: NVLink 900 GB/s (SXM), 600 GB/s bridge (PCIe, NVL)"
_H200_PAGE = "NVIDIA H200 product page / datasheet: NVLink 900 GB/s (SXM), 2- or 4-way bridge 900 GB/s (NVL)"
_BLACKWELL = "NVIDIA HGX B200/B300, GB200 NVL72 product pages: fifth-gen NVLink 1.8 TB/s per GPU"
_EXPORT = ("Reuters/NVIDIA statement Nov 2022 (A800: NVLink 400 GB/s instead of 600 GB/s); H800: 400 GB/s "
           "(DeepSeek-V3 #28, deepseek-ai/DeepEP #16)")

#: every board gpufleet knows, by PCI device id (``nvmlDeviceGetPciInfo().pciDeviceId``: device << 16 | 0x10DE)
MODELS: tuple[NvlinkSpec, ...] = (
    _s("A100-SXM4-40GB", 0x20B010DE, "NVIDIA A100-SXM4-40GB", 12, 3, SWITCH, _NVLINK_PAGE),
    _s("A100-SXM4-80GB", 0x20B210DE, "NVIDIA A100-SXM4-80GB", 12, 3, SWITCH, _NVLINK_PAGE),
    _s("A100-PCIE-40GB", 0x20F110DE, "NVIDIA A100-PCIE-40GB", 12, 3, BRIDGE,
       f"{_NVLINK_PAGE}; A100 40GB PCIe product brief PB-10137 (NVLink bridge support, table 6)"),
    _s("A100-PCIE-80GB", 0x20B510DE, "NVIDIA A100 80GB PCIe", 12, 3, BRIDGE,
       f"{_NVLINK_PAGE}; NVIDIA/NVSentinel #1481 (A100 80GB PCIe without bridge: all 12 links down)"),
    _s("A800-SXM4-80GB", 0x20F310DE, "NVIDIA A800-SXM4-80GB", 8, 3, SWITCH, _EXPORT,
       "link count from 400 GB/s (which 8 of the GPU's links NVML enumerates is not documented)"),
    _s("A800-PCIE-80GB", 0x20F510DE, "NVIDIA A800 80GB PCIe", 8, 3, BRIDGE, _EXPORT, "link count from 400 GB/s"),
    _s("A800-PCIE-40GB", 0x20F610DE, "NVIDIA A800 40GB PCIe", 8, 3, BRIDGE, _EXPORT, "link count from 400 GB/s"),
    _s("A30-24GB", 0x20B710DE, "NVIDIA A30", 4, 3, BRIDGE,
       "NVIDIA A30 datasheet: third-generation NVLink 200 GB/s (bridge for two GPUs)", "link count from 200 GB/s"),
    _s("H100-SXM5-80GB", 0x233010DE, "NVIDIA H100 80GB HBM3", 18, 4, SWITCH, _H100_PAGE),
    _s("H100-PCIE-80GB", 0x233110DE, "NVIDIA H100 PCIe", 12, 4, BRIDGE,
       f"{_H100_PAGE}; H100 PCIe product brief PB-11133 (NVLink bridge)"),
    _s("H100-NVL-94GB", 0x232110DE, "NVIDIA H100 NVL", 12, 4, BRIDGE, _H100_PAGE),
    _s("H800-80GB", 0x232410DE, "NVIDIA H800", 8, 4, SWITCH, _EXPORT,
       "link count from 400 GB/s (which of the GPU's links NVML enumerates is not documented)"),
    _s("H800-PCIE-80GB", 0x232210DE, "NVIDIA H800 PCIe", 8, 4, BRIDGE, _EXPORT, "link count from 400 GB/s"),
    _s("H20-96GB", 0x232910DE, "NVIDIA H20", 18, 4, SWITCH, "deepseek-ai/DeepEP #16 (H20 NVLink 900 GB/s)"),
    _s("H200-141GB", 0x233510DE, "NVIDIA H200", 18, 4, SWITCH, _H200_PAGE),
    _s("H200-NVL-141GB", 0x233B10DE, "NVIDIA H200 NVL", 18, 4, BRIDGE, _H200_PAGE),
    _s("GH200-96GB", 0x234210DE, "NVIDIA GH200 480GB", 18, 4, EXTERNAL,
       "NVIDIA GH200 product page: NVLink 900 GB/s GPU-to-GPU (NVLink-C2C to the CPU is not an NVLink link)"),
    _s("GH200-144GB", 0x234810DE, "NVIDIA GH200 144G HBM3e", 18, 4, EXTERNAL,
       "NVIDIA GH200 product page: NVLink 900 GB/s GPU-to-GPU (NVLink-C2C to the CPU is not an NVLink link)"),
    _s("B200-180GB", 0x290110DE, "NVIDIA B200", 18, 5, SWITCH, _BLACKWELL, "speed from GB200's transcript"),
    _s("B300-288GB", 0x318210DE, "NVIDIA B300", 18, 5, SWITCH, _BLACKWELL, "speed from GB200's transcript"),
    _s("GB200-186GB", 0x294110DE, "NVIDIA GB200", 18, 5, SWITCH, f"{_BLACKWELL}; NVIDIA/k8s-test-infra #371"),
    _s("L40S", 0x26B910DE, "NVIDIA L40S", 0, 0, NONE, "NVIDIA L40S datasheet: no NVLink (PCIe Gen4 x16 only)"),
    _s("T4", 0x1EB810DE, "Tesla T4", 0, 0, NONE, "NVIDIA T4 datasheet: no NVLink (PCIe Gen3 x16 only)"),
    _s("RTX-PRO-6000-96GB", 0x2BB510DE, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 0, 0, NONE,
       "RTX PRO 6000 Blackwell Server Edition product brief: no NVLink (PCIe Gen5 x16)"),
)

_BY_PCI = {m.pci_device_id: m for m in MODELS}
_BY_NAME = {m.nvml_name.upper(): m for m in MODELS}


def parse_pci_device_id(value: int | str | None) -> int | None:
    """``0x233010DE`` (text or int) as an int; None when absent or not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip(), 16)
    except ValueError:
        return None


def find(pci_device_id: int | str | None = None, name: str | None = None) -> NvlinkSpec | None:
    """The board's row: by PCI device id first (what identifies a board), else by NVML name; None if unknown."""
    pci = parse_pci_device_id(pci_device_id)
    if pci is not None and pci in _BY_PCI:
        return _BY_PCI[pci]
    if name and str(name).strip().upper() in _BY_NAME:
        return _BY_NAME[str(name).strip().upper()]
    return None


def known_models() -> list[str]:
    """Every model in the table, sorted."""
    return sorted(m.model for m in MODELS)
