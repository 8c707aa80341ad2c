# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""gpufleet's own table of MIG-capable GPU models and the MIG profile-name grammar.

Pure Python, standard library only: the controller uses it with no GPU and no NVML.

Sources (see ``docs/mig.md`` for the full list):

* NVIDIA MIG User Guide, "Supported MIG Profiles" and "List GPU Instance Profiles" (``nvidia-smi mig -lgip`` /
  ``-lgipp``): profile names, instance counts, profile ids and placements (A100, H100, H200, A30).
* nvml.h (``NVML_GPU_INSTANCE_PROFILE_*`` and ``NVML_COMPUTE_INSTANCE_PROFILE_*``): enum indexes.
* NVIDIA/go-nvlib ``mig_profile.go``: the profile-string grammar and the compute-instance heuristic.
* NVIDIA/mig-parted ``deployments/systemd/config-default.yaml`` and NVIDIA/gpu-operator
  ``assets/state-mig-manager/0400_configmap.yaml``: PCI device ids and which boards share profile names.
* ``nvidia-smi mig -lgip`` listings quoted in NVIDIA's own pull requests and issues (mig-parted #120 H200, #139
  GH200 144G, #166/#187 B200, #227/#228 GB200; gpu-operator #1303 early GB200) and in users' trackers
  (bigstack-oss/cubecos #312, GoogleCloudPlatform/container-engine-accelerators #564: RTX PRO 6000 Blackwell).

Placements are on the memory-slice axis: 8 slots (4 on the A30, 12 units on the RTX PRO 6000 Blackwell). Every
model row names its sources; what no source states (profile ids only listed for some rows, placements presumed
from a sibling board, exact MiB chosen to reproduce NVIDIA's names) is marked INFERRED there and listed in the
model's ``inferred`` field, which ``docs/mig.md``'s catalogue table repeats. ``memory_from`` names the listing and
driver the MiB are read from: drivers print other MiB for the same profile, so a host is planned from its own
table (``mig_host``), and ``tests/unit/test_mig_listings.py`` holds every row to the real listings the project keeps.

Drivers name one profile differently across boards and driver versions (GB200's ``1g.24gb`` became ``1g.23gb``
on production boards): a model's ``profile_aliases`` map such a variant to the profile it means, so a layout
written with either name resolves to the same slices (:meth:`GpuModel.profile`).
"""

from __future__ import annotations

from dataclasses import replace

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_types import (  # noqa: F401 (re-exported)
    _ALL_1G,
    _EVEN,
    CI_ENUM_BY_SLICES,
    GI_ENUM_1_SLICE,
    GI_ENUM_1_SLICE_ALL_ME,
    GI_ENUM_1_SLICE_GFX,
    GI_ENUM_1_SLICE_NO_ME,
    GI_ENUM_1_SLICE_REV1,
    GI_ENUM_1_SLICE_REV2,
    GI_ENUM_2_SLICE,
    GI_ENUM_2_SLICE_ALL_ME,
    GI_ENUM_2_SLICE_GFX,
    GI_ENUM_2_SLICE_NO_ME,
    GI_ENUM_2_SLICE_REV1,
    GI_ENUM_3_SLICE,
    GI_ENUM_4_SLICE,
    GI_ENUM_4_SLICE_GFX,
    GI_ENUM_7_SLICE,
    MAX_DEVICE_ID,
    CiProfile,
    GiProfile,
    GpuModel,
    ProfileName,
    ProfileSyntaxError,
    Row,
    UnknownModelError,
    _eight_slot,
    _gib,
    _model,
    format_pci_id,
    mig_memory_gb,
    parse_device_id,
    parse_pci_id,
    parse_profile_name,
)

# where the project keeps the real listings a table's values are read from (memory_from, sources)
_GT = "tests/data/ground-truth/"

MODELS: tuple[GpuModel, ...] = (
    # MIG User Guide "A100 MIG Profiles" table + `nvidia-smi mig -lgip/-lgipp` on A100-SXM4-40GB.
    _model("A100-SXM4-40GB", (0x20B010DE,), ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), (), 40536, True, [
        ("1g.5gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, 4864, _ALL_1G),
        ("1g.5gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, 4864, _ALL_1G),
        ("1g.10gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, 9856, _EVEN),
        ("2g.10gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, 9856, (0, 2, 4)),
        ("3g.20gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, 19968, (0, 4)),
        ("4g.20gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, 19968, (0,)),
        ("7g.40gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, 40192, (0,)),
    ], sources=("MIG User Guide: A100 MIG Profiles, -lgip/-lgipp listings",), inferred=("total MiB",),
       memory_from=("MIG User Guide: List GPU Instance Profiles (nvidia-smi mig -lgip, A100-SXM4-40GB)", "unknown")),
    # A100 80GB `-lgip` transcripts (driver 515 + a later one listing 1g.20gb); same placements as 40GB.
    _model("A100-SXM4-80GB", (0x20B210DE,), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), (), 81920, True, [
        ("1g.10gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, 9728, _ALL_1G),
        ("1g.10gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, 9728, _ALL_1G),
        ("1g.20gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, 19968, _EVEN),
        ("2g.20gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, 19968, (0, 2, 4)),
        ("3g.40gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, 40192, (0, 4)),
        ("4g.40gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, 40192, (0,)),
        ("7g.80gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, 80896, (0,)),
    ], sources=("nvidia-smi mig -lgip transcripts, A100 80GB (driver 515 and later)",),
       inferred=("placements (the A100 40GB -lgipp)",),
       memory_from=("nvidia-smi mig -lgip transcript, A100 80GB PCIe (not kept in the project)", "R515")),
    # MIG User Guide "A30 MIG Profiles" + `-lgipp` transcript: 4 memory slots, 4 compute slices.
    _model("A30-24GB", (0x20B710DE,), ("NVIDIA A30", "A30"), ("A30",), 24576, True, [
        ("1g.6gb", GI_ENUM_1_SLICE, 14, 1, 1, 4, 5952, (0, 1, 2, 3)),
        ("1g.6gb+me", GI_ENUM_1_SLICE_REV1, 21, 1, 1, 1, 5952, (0, 1, 2, 3)),
        ("2g.12gb", GI_ENUM_2_SLICE, 5, 2, 2, 2, 11968, (0, 2)),
        ("2g.12gb+me", GI_ENUM_2_SLICE_REV1, 6, 2, 2, 1, 11968, (0, 2)),
        ("4g.24gb", GI_ENUM_4_SLICE, 0, 4, 4, 1, 24000, (0,)),
    ], sources=("MIG User Guide: A30 MIG Profiles", "nvidia-smi mig -lgip/-lgipp transcript, A30",
                f"{_GT}public/A30__lgip__1.txt (driver unknown; no 2g.12gb+me row)"),
       inferred=("whether 1g.6gb+me and 2g.12gb+me can coexist",),
       memory_from=(f"{_GT}public/A30__lgip__1.txt", "unknown")),
    # MIG User Guide "H100 MIG Profiles" + two H100 `-lgip/-lgipp` transcripts.
    _model("H100-SXM5-80GB", (0x233010DE,), ("NVIDIA H100 80GB HBM3",), ("H100-80GB-HBM3",), 81559, False, [
        ("1g.10gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, 9984, _ALL_1G),
        ("1g.10gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, 9984, _ALL_1G),
        ("1g.20gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, 20096, _EVEN),
        ("2g.20gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, 20096, (0, 2, 4)),
        ("3g.40gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, 40448, (0, 4)),
        ("4g.40gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, 40448, (0,)),
        ("7g.80gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, 81152, (0,)),
    ], sources=("MIG User Guide: H100 MIG Profiles", "two nvidia-smi mig -lgip/-lgipp transcripts, H100 80GB",
                f"{_GT}public/H100_SXM_80GB__lgip__1.txt and __lgipp__1.txt (driver unknown)"),
       inferred=("total MiB",), memory_from=(f"{_GT}public/H100_SXM_80GB__lgip__1.txt", "unknown")),
    # MIG User Guide "H200 MIG Profiles"; ids, counts, MiB and placements from a real H200 SXM 141GB, driver
    # 580.159.04 (tests/data/ground-truth/h200-sxm-passthrough-r580, 2026-11-28: nvidia-smi/mig_lgip.txt,
    # mig_lgipp.txt, nvmlDeviceGetGpuInstanceProfileInfo in nvml/getters-nvidia-ml-py-13.615.71.jsonl; total MiB
    # from its nvmlDeviceGetMemoryInfo). Other drivers list other MiB for the same names (3g.71gb 69.50 GiB in
    # mig-parted #120, 69.75 GiB on 580.159.04): planning on a host uses the host's own table.
    _model("H200-141GB", (0x233510DE,), ("NVIDIA H200",), ("H200", "H200-SXM5-141GB"), 143771, False, [
        ("1g.18gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, 16384, _ALL_1G),
        ("1g.18gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, 16384, _ALL_1G),
        ("1g.35gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, 33280, _EVEN),
        ("2g.35gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, 33280, (0, 2, 4)),
        ("3g.71gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, 71424, (0, 4)),
        ("4g.71gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, 71424, (0,)),
        ("7g.141gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, 143360, (0,)),
    ], sources=("MIG User Guide: H200 MIG Profiles", "nvidia-smi mig -lgip in NVIDIA/mig-parted #120 (ids)",
                "nvidia-smi mig -lgip/-lgipp and NVML on a real H200 SXM, driver 580.159.04 (MiB, placements)"),
       memory_from=(f"{_GT}h200-sxm-passthrough-r580/nvidia-smi/mig_lgip.txt", "580.159.04")),
    # ---- the catalogue for the boards operators buy now (issue 15). Each row cites its sources; INFERRED marks
    # what no source states. "gpu-operator 0400" = NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml
    # (copy and commit in tests/data/gpu-operator/SOURCE.md), which lists the PCI ids of each group of boards
    # that share profile names.
    #
    # A100 PCIe 40GB: MIG User Guide "Supported GPUs" (A100-PCIE 40GB, 7 instances); gpu-operator 0400 puts
    # 0x20F1/0x20B1 in the A100-40GB group (same names and counts as A100-SXM4-40GB). Ids, counts and GiB from
    # the board's complete `-lgip` (harvester/pcidevices mig_test.go, driver unknown: tests/data/ground-truth/
    # public/A100_PCIe_40GB__lgip__1.txt): 4.75 / 9.75 / 19.62 / 39.50 GiB, where the MIG User Guide's SXM4
    # listing prints 4.75 / 9.62 / 19.50 / 39.25. INFERRED: placements (the A100 -lgipp); total MiB; that 0x20B1
    # is a PCIe 40GB board (pci.ids).
    _model("A100-PCIE-40GB", (0x20F110DE, 0x20B110DE), ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"), (), 40960, True,
           [("1g.5gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, _gib(4.75), _ALL_1G),
            ("1g.5gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, _gib(4.75), _ALL_1G),
            ("1g.10gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, _gib(9.75), _EVEN),
            ("2g.10gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, _gib(9.75), (0, 2, 4)),
            ("3g.20gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, _gib(19.62), (0, 4)),
            ("4g.20gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, _gib(19.62), (0,)),
            ("7g.40gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, _gib(39.50), (0,))],
           sources=("MIG User Guide: Supported GPUs (A100-PCIE 40GB)", "gpu-operator 0400: A100-40GB group",
                    f"{_GT}public/A100_PCIe_40GB__lgip__1.txt (harvester/pcidevices, driver unknown)"),
           inferred=("placements (the A100 -lgipp)", "total MiB", "0x20B1 as an A100 PCIe 40GB id"),
           memory_from=(f"{_GT}public/A100_PCIe_40GB__lgip__1.txt", "unknown")),
    # A100 80GB PCIe: the research file's A100-80GB `-lgip` transcript is of this board (driver 515: ids, counts,
    # GiB; 1g.20gb from a later driver); placements as every A100 (`-lgipp`); 0x20B5 in gpu-operator 0400's
    # A100-80GB group.
    _model("A100-PCIE-80GB", (0x20B510DE,), ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB", "NVIDIA A100-PCIE-80GB"), (),
           81920, True, [
               ("1g.10gb", GI_ENUM_1_SLICE, 19, 1, 1, 7, 9728, _ALL_1G),
               ("1g.10gb+me", GI_ENUM_1_SLICE_REV1, 20, 1, 1, 1, 9728, _ALL_1G),
               ("1g.20gb", GI_ENUM_1_SLICE_REV2, 15, 1, 2, 4, 19968, _EVEN),
               ("2g.20gb", GI_ENUM_2_SLICE, 14, 2, 2, 3, 19968, (0, 2, 4)),
               ("3g.40gb", GI_ENUM_3_SLICE, 9, 3, 4, 2, 40192, (0, 4)),
               ("4g.40gb", GI_ENUM_4_SLICE, 5, 4, 4, 1, 40192, (0,)),
               ("7g.80gb", GI_ENUM_7_SLICE, 0, 7, 8, 1, 80896, (0,))],
           sources=("nvidia-smi mig -lgip transcript, A100 80GB PCIe (driver 515)",
                    "gpu-operator 0400: A100-80GB group"),
           inferred=("NVML name 'NVIDIA A100 80GB PCIe'",),
           memory_from=("nvidia-smi mig -lgip transcript, A100 80GB PCIe (not kept in the project)", "R515")),
    # H100 PCIe: MIG User Guide "Supported GPUs" (H100-PCIE 80GB, 7 instances); gpu-operator 0400 puts 0x2331 in
    # the H100-80GB group. INFERRED: ids, placements, MiB and total copied from H100-SXM5-80GB (same GH100).
    _model("H100-PCIE-80GB", (0x233110DE,), ("NVIDIA H100 PCIe",), ("H100-PCIE",), 81559, False,
           _eight_slot("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", (9984, 20096, 40448, 81152)),
           sources=("MIG User Guide: Supported GPUs (H100-PCIE 80GB)", "gpu-operator 0400: H100-80GB group"),
           inferred=("profile ids, placements and MiB copied from H100-SXM5-80GB", "total MiB")),
    # H100 NVL 94GB: the complete `nvidia-smi mig -lgip` in harvester/pcidevices mig_test.go (driver unknown:
    # tests/data/ground-truth/public/H100_NVL__lgip__1.txt): ids 19/20/15/14/9/5/0, GiB 10.62 / 21.50 / 46.12 /
    # 92.62 (another driver's transcript in the research notes printed 10.75 / 21.62 / 46.38 / 93.12);
    # `-lgipp` equal to H100's (research 3.2); 0x2321 in gpu-operator 0400's H100 NVL group (all-balanced
    # 1g.12gb/2g.24gb/3g.47gb). INFERRED: total MiB.
    _model("H100-NVL-94GB", (0x232110DE,), ("NVIDIA H100 NVL",), ("H100-NVL", "H100 NVL"), 95830, False,
           _eight_slot("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb",
                       (_gib(10.62), _gib(21.50), _gib(46.12), _gib(92.62))),
           sources=("nvidia-smi mig -lgip/-lgipp transcript, H100 NVL", "gpu-operator 0400: H100 NVL group",
                    f"{_GT}public/H100_NVL__lgip__1.txt (harvester/pcidevices, driver unknown)"),
           inferred=("total MiB",), memory_from=(f"{_GT}public/H100_NVL__lgip__1.txt", "unknown")),
    # GH200 (H100 96GB on GH200): MIG User Guide "Supported GPUs" (H100 on GH200, 96GB, 7 instances);
    # mig-parted config-default / gpu-operator 0400: 1g.12gb x7, 1g.24gb x4, 2g.24gb x3, 3g.48gb x2, 4g.48gb,
    # 7g.96gb, 1g.12gb+me for the group 0x2342/0x233D/0x20B6/0x2329 (H100-96GB, PG506-96GB, GH200, H20).
    # INFERRED: ids and placements (the GH100 table), every MiB and the total, the NVML name.
    _model("GH200-96GB", (0x234210DE,), ("NVIDIA GH200 480GB",), ("GH200",), 97871, False,
           _eight_slot("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", (11776, 23808, 48384, 96768)),
           sources=("MIG User Guide: Supported GPUs (H100 on GH200, 96GB)", "gpu-operator 0400: H100-96GB/GH200 group"),
           inferred=("profile ids and placements (GH100 table)", "every MiB and the total", "NVML name")),
    # GH200 144G HBM3e: `-lgip` in mig-parted #139 / gpu-operator #1057 (1g.18gb 19 x7 17.50 GiB, +me 20,
    # 1g.36gb 15 x4 35.25 GiB, 2g.36gb 14 x3); 3g.72gb x2, 4g.72gb, 7g.144gb from config-default.yaml.
    # INFERRED: ids 9/5/0 and MiB of 3g/4g/7g, placements (GH100 table), total MiB, NVML name.
    _model("GH200-144GB", (0x234810DE,), ("NVIDIA GH200 144G HBM3e",), ("GH200-144G",), 146944, False,
           _eight_slot("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb",
                       (_gib(17.50), _gib(35.25), 72192, 144896)),
           sources=("nvidia-smi mig -lgip in NVIDIA/mig-parted #139", "mig-parted config-default.yaml (GH200 144G)"),
           inferred=("ids of 3g/4g/7g", "placements (GH100 table)", "MiB of 3g/4g/7g and the total", "NVML name"),
           memory_from=(f"{_GT}public/GH200__lgip_partial__1.txt", "unknown")),
    # H200 NVL: MIG User Guide "Supported GPUs" (H200 NVL, 141GB); gpu-operator 0400 all-balanced puts 0x233B
    # beside the H200 (0x2335). Ids and GiB: the H200 `-lgip` in mig-parted #120 (1g.18gb 19 16.00, +me 20,
    # 1g.35gb 15 32.25, 2g.35gb 14, 3g.71gb 9 69.50, 4g.71gb 5, 7g.141gb 0 139.75). INFERRED: placements (GH100
    # table), total MiB.
    _model("H200-NVL-141GB", (0x233B10DE,), ("NVIDIA H200 NVL",), ("H200-NVL", "H200 NVL"), 143771, False,
           _eight_slot("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb",
                       (_gib(16.00), _gib(32.25), _gib(69.50), _gib(139.75))),
           sources=("nvidia-smi mig -lgip in NVIDIA/mig-parted #120 (H200)", "gpu-operator 0400: H200 NVL filter"),
           inferred=("placements (GH100 table)", "total MiB", "the H200's table holds for the NVL board"),
           memory_from=(f"{_GT}public/H200_SXM__lgip_partial__1.txt", "unknown")),
    # B200: `-lgip` in mig-parted #166 / gpu-operator #1242 (1g.23gb 19 x7 22.00 GiB, +me 20, 1g.45gb 15 x4
    # 44.25 GiB, 2g.45gb 14 x3) and #187 / #1351 (the same names with 1g at 20.50 GiB; adds 4g.90gb); 3g.90gb x2
    # and 7g.180gb in config-default.yaml; MIG User Guide "Supported GPUs" (B200, 180GB, 7 instances). Both
    # drivers call the 1g profile 1g.23gb, so no alias is needed. INFERRED: ids 9/5/0, placements (the 8-slot
    # table), MiB of 3g/4g/7g and the total.
    _model("B200-180GB", (0x290110DE,), ("NVIDIA B200",), ("B200",), 183359, False,
           _eight_slot("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb",
                       (_gib(22.00), _gib(44.25), 90624, 181248)),
           sources=("nvidia-smi mig -lgip in NVIDIA/mig-parted #166 and #187", "gpu-operator 0400: B200 filter"),
           inferred=("ids of 3g/4g/7g", "placements (8-slot table)", "MiB of 3g/4g/7g and the total",
                     "1g memory is 22.00 GiB on one driver, 20.50 GiB on another"),
           memory_from=("nvidia-smi mig -lgip in NVIDIA/mig-parted #166", "unknown")),
    # GB200: production boards `-lgip` in mig-parted #227 (1g.23gb 19 x7 22.00 GiB, +me 20, 1g.47gb 15 x4
    # 45.50 GiB, 2g.47gb 14 x3); 3g.93gb/4g.93gb/7g.186gb in config-default after #228; MIG User Guide
    # "Supported GPUs" (GB200, 186GB). Early boards (gpu-operator #1303) print 1g.24gb / 1g.24gb+me at 20.00 GiB:
    # aliases. INFERRED: ids 9/5/0, placements, MiB of 3g/4g/7g and the total, and the aliases 3g.95gb/4g.95gb/
    # 7g.189gb (the early board's 189 GB rounded with go-nvlib's rule; gpu-operator 0400 has those labels).
    _model("GB200-186GB", (0x294110DE,), ("NVIDIA GB200",), ("GB200",), 189471, False,
           _eight_slot("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb",
                       (_gib(22.00), _gib(45.50), 93184, 186368)),
           profile_aliases=(("1g.24gb", "1g.23gb"), ("1g.24gb+me", "1g.23gb+me"), ("3g.95gb", "3g.93gb"),
                            ("4g.95gb", "4g.93gb"), ("7g.189gb", "7g.186gb")),
           sources=("nvidia-smi mig -lgip in NVIDIA/mig-parted #227 and gpu-operator #1303",
                    "mig-parted #228", "gpu-operator 0400: GB200 HGX filter"),
           inferred=("ids of 3g/4g/7g", "placements (8-slot table)", "MiB of 3g/4g/7g and the total",
                     "aliases 3g.95gb, 4g.95gb, 7g.189gb"),
           memory_from=(f"{_GT}public/GB200__lgip_partial__1.txt", "unknown")),
    # RTX PRO 6000 Blackwell: MIG User Guide "Supported GPUs" (96GB, 4 instances); `-lgip` in bigstack-oss/cubecos
    # #312 (driver 580.105.06; ids 14/21/47/65/67 for 1g.24gb/+me/+gfx/+me.all/-me at 23.12 GiB, 5/35/64/66 for
    # 2g.48gb/+gfx/+me.all/-me at 46.50 GiB; counts 4/1/4/1/4 and 2/2/1/2; its first rows are kept in
    # tests/data/ground-truth/public/RTX_PRO_6000_Blackwell__lgip_partial__1.txt, and the MiB here are its) and
    # GoogleCloudPlatform/container-engine-accelerators #564 (the same ids, 1g at 23.62 GiB: another driver);
    # 0x2BB5 from `nvidia-smi --query-gpu=pci.device_id` in bottlerocket-os/bottlerocket-kernel-kit #300.
    # Placements on a 12-unit axis (1g {0,3,6,9}:3, 2g {0,6}:6, 4g {0}:12) from one `-lgipp` transcript (research
    # file 3.2). INFERRED: 4g ids 0/32, the placements of the attribute variants, 4g MiB, total MiB, the enums of
    # the attribute variants (go-nvlib's grammar), NVML name.
    _model("RTX-PRO-6000-96GB", (0x2BB510DE,), ("NVIDIA RTX PRO 6000 Blackwell Server Edition",),
           ("RTX PRO 6000", "RTX-PRO-6000"), 97887, False, [
               ("1g.24gb", GI_ENUM_1_SLICE, 14, 1, 3, 4, _gib(23.12), (0, 3, 6, 9)),
               ("1g.24gb+me", GI_ENUM_1_SLICE_REV1, 21, 1, 3, 1, _gib(23.12), (0, 3, 6, 9)),
               ("1g.24gb+gfx", GI_ENUM_1_SLICE_GFX, 47, 1, 3, 4, _gib(23.12), (0, 3, 6, 9)),
               ("1g.24gb+me.all", GI_ENUM_1_SLICE_ALL_ME, 65, 1, 3, 1, _gib(23.12), (0, 3, 6, 9)),
               ("1g.24gb-me", GI_ENUM_1_SLICE_NO_ME, 67, 1, 3, 4, _gib(23.12), (0, 3, 6, 9)),
               ("2g.48gb", GI_ENUM_2_SLICE, 5, 2, 6, 2, _gib(46.50), (0, 6)),
               ("2g.48gb+gfx", GI_ENUM_2_SLICE_GFX, 35, 2, 6, 2, _gib(46.50), (0, 6)),
               ("2g.48gb+me.all", GI_ENUM_2_SLICE_ALL_ME, 64, 2, 6, 1, _gib(46.50), (0, 6)),
               ("2g.48gb-me", GI_ENUM_2_SLICE_NO_ME, 66, 2, 6, 2, _gib(46.50), (0, 6)),
               ("4g.96gb", GI_ENUM_4_SLICE, 0, 4, 12, 1, 95232, (0,)),
               ("4g.96gb+gfx", GI_ENUM_4_SLICE_GFX, 32, 4, 12, 1, 95232, (0,)),
           ],
           memory_from=(f"{_GT}public/RTX_PRO_6000_Blackwell__lgip_partial__1.txt", "580.105.06"),
           sources=("nvidia-smi mig -lgip in bigstack-oss/cubecos #312 and container-engine-accelerators #564",
                    "MIG User Guide: Supported GPUs (RTX PRO 6000 Blackwell, 4 instances)",
                    "gpu-operator 0400: RTX-PRO-6000-96GB filter"),
           inferred=("ids of 4g.96gb (0) and 4g.96gb+gfx (32)", "placements (one -lgipp transcript; variants presumed)",
                     "4g MiB and the total", "enums of the attribute variants", "NVML name",
                     "+me.all beside -me profiles only (from NVML's ALL_ME / NO_ME definitions; not listed by "
                     "NVIDIA as a rule)")),
    # B300 (Blackwell Ultra, 288GB HBM3e): MIG User Guide "Deployment Considerations" (B300, R580 >= 580.82.07);
    # profile names and counts 1g.34gb x7, 1g.67gb x4, 2g.67gb x3, 3g.135gb x2, 4g.135gb x1, 7g.269gb x1 for
    # device-filter 0x318210DE from gpu-operator v25.3.0, as quoted in aws/sagemaker-hyperpod-cli #403.
    # INFERRED: every id and enum, placements (the 8-slot table), 1g.34gb+me, every MiB and the total (chosen so
    # go-nvlib's rounding of a 269 GB board gives NVIDIA's names), the NVML name.
    _model("B300-288GB", (0x318210DE,), ("NVIDIA B300",), ("B300",), 275040, False,
           _eight_slot("1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb",
                       (_gib(33.00), _gib(66.50), 134528, 273920)),
           sources=("MIG User Guide: Deployment Considerations (B300)",
                    "gpu-operator v25.3.0 config for 0x318210DE, quoted in aws/sagemaker-hyperpod-cli #403"),
           inferred=("profile ids, enums and placements (8-slot table)", "1g.34gb+me", "every MiB and the total",
                     "NVML name")),
)


def _variant(sibling: str, name: str, pci: tuple[int, ...], nvml_names: tuple[str, ...], source: str) -> GpuModel:
    """A board that gpu-operator's default config (0400, commit 0b0b6b15) puts in one device-filter group with
    ``sibling``: the same profile table, its own PCI id and name."""
    base = next(m for m in MODELS if m.name == sibling)
    return replace(base, name=name, pci_device_ids=pci, nvml_names=nvml_names, aliases=(), sources=(source,),
                   inferred=(f"the profile table of {sibling} (same device-filter group)", "NVML name",
                             *base.inferred))


# A800 / H800 (export variants of A100 / H100) and H20: MIG User Guide "Supported GPUs" lists H20 (96GB, 7
# instances); gpu-operator 0400 groups 0x20F3/0x20F5 with the A100 80GB, 0x20F6 with the A100 40GB, 0x2322/0x2324
# with the H100 80GB and 0x2329 with the H100 96GB / GH200 boards.
MODELS += (
    _variant("A100-SXM4-80GB", "A800-SXM4-80GB", (0x20F310DE,), ("NVIDIA A800-SXM4-80GB",),
             "gpu-operator 0400: A100-80GB group (0x20F3)"),
    _variant("A100-PCIE-80GB", "A800-PCIE-80GB", (0x20F510DE,), ("NVIDIA A800 80GB PCIe",),
             "gpu-operator 0400: A100-80GB group (0x20F5)"),
    _variant("A100-PCIE-40GB", "A800-PCIE-40GB", (0x20F610DE,), ("NVIDIA A800 40GB PCIe",),
             "gpu-operator 0400: A100-40GB group (0x20F6)"),
    _variant("H100-SXM5-80GB", "H800-80GB", (0x232410DE,), ("NVIDIA H800",),
             "gpu-operator 0400: H100-80GB group (0x2324)"),
    _variant("H100-PCIE-80GB", "H800-PCIE-80GB", (0x232210DE,), ("NVIDIA H800 PCIe",),
             "gpu-operator 0400: H100-80GB group (0x2322)"),
    _variant("GH200-96GB", "H20-96GB", (0x232910DE,), ("NVIDIA H20",),
             "MIG User Guide: Supported GPUs (H20, 96GB, 7 instances); gpu-operator 0400: H100-96GB group (0x2329)"),
)


def _norm_name(text: str) -> str:
    text = text.strip().upper()
    if text.startswith("NVIDIA "):
        text = text[len("NVIDIA "):]
    return text


_BY_KEY: dict[str, GpuModel] = {}
_BY_PCI: dict[int, GpuModel] = {}
for _m in MODELS:
    for _key in (_m.name, *_m.nvml_names, *_m.aliases):
        _BY_KEY[_norm_name(_key)] = _m
    for _pci in _m.pci_device_ids:
        _BY_PCI[_pci] = _m


_BY_CACHE_KEY: dict[str, GpuModel] = {m.name: m for m in MODELS}


def register_model(model: GpuModel) -> None:
    """Make a model built elsewhere (a host's table) findable by :func:`model_by_key`."""
    _BY_CACHE_KEY[model.cache_key] = model


def model_by_key(key: str) -> GpuModel:
    """The catalogue row or registered host model under ``key`` (:attr:`GpuModel.cache_key`)."""
    return _BY_CACHE_KEY[key]


def known_model_names() -> list[str]:
    """Names of every model in the table, sorted."""
    return sorted(m.name for m in MODELS)


def find_model(model: str | None = None, name: str | None = None,
               pci_device_id: int | str | None = None) -> GpuModel | None:
    """Resolve a GPU to its table entry: by model key, then PCI device id, then NVML marketing name."""
    if model and _norm_name(str(model)) in _BY_KEY:
        return _BY_KEY[_norm_name(str(model))]
    try:
        pci = parse_pci_id(pci_device_id)
    except ValueError:
        pci = None
    if pci is not None and pci in _BY_PCI:
        return _BY_PCI[pci]
    if name and _norm_name(str(name)) in _BY_KEY:
        return _BY_KEY[_norm_name(str(name))]
    return None


def get_model(model: str | None = None, name: str | None = None,
              pci_device_id: int | str | None = None) -> GpuModel:
    """Like :func:`find_model` but raise :class:`UnknownModelError` with the known models listed."""
    found = find_model(model, name, pci_device_id)
    if found is None:
        raise UnknownModelError(describe_unknown(model, name, pci_device_id))
    return found


def describe_unknown(model: str | None, name: str | None, pci_device_id: int | str | None) -> str:
    """The message for a GPU that the table does not know."""
    label = model or name or "?"
    extra = ""
    try:
        pci = parse_pci_id(pci_device_id)
    except ValueError:
        pci = None
    if pci is not None:
        extra = f" (pci_device_id {format_pci_id(pci)})"
    return "unknown GPU model '{}'{}; known: {}".format(label, extra, ", ".join(known_model_names()))
