# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""NVIDIA's XID catalogue as data: each code's mnemonic, description and resolution buckets.

Transcribed from NVIDIA's catalogue for Ampere and newer GPUs (:data:`SOURCE`): its columns "Mnemonic",
"Description", "Resolution Bucket (Immediate Action)" and "Resolution Bucket (Investigatory Action)". Only codes
the catalogue marks as applying to at least one of A100 / H100 / B100 / GB200 are listed; a code that is not here
is judged by :mod:`xid` as unknown (WARNING, look it up), never as harmless.

:data:`BUCKETS` turns NVIDIA's immediate-action bucket into gpufleet's verdict level and its step on the action
ladder (none < restart_app < drain < reset_gpu < reboot < rma). The NVLink5 codes 144-150 have no fixed level: the
catalogue's ``WORKFLOW_NVLINK5_ERR`` says to read the severity in the event's text (see :mod:`xid`).

Nothing in this file is code: edit it when NVIDIA publishes a new catalogue, and bump :data:`SOURCE`.
"""

from __future__ import annotations

SOURCE = {
    "title": "NVIDIA Xid Errors: Analyzing Xid Errors with the Xid Catalog (Ampere and newer GPUs)",
    "url": "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
    "version": "catalogue table with the columns Applies to A100/H100/B100/GB200 and Xid 154 linkage, "
               "as read on 2026-11-24",
}

# The ladder, mildest first (NVIDIA's resolution buckets and Health Validation's drain -> reset -> reboot ->
# service required). An event's or a check's action is one of these.
ACTIONS = ("none", "restart_app", "drain", "reset_gpu", "reboot", "rma")

# Immediate-action bucket -> (level, action).
BUCKETS: dict[str, tuple[str, str]] = {
    "IGNORE": ("INFO", "none"),
    "RESTART_APP": ("WARNING", "restart_app"),
    "CHECK_APP/CUDA": ("WARNING", "restart_app"),
    "UPDATE_SW": ("WARNING", "none"),
    "RESET_GPU": ("CRITICAL", "reset_gpu"),
    "WORKFLOW_XID_48": ("CRITICAL", "reset_gpu"),
    "WORKFLOW_NVLINK_ERR": ("CRITICAL", "reset_gpu"),
    "RESTART_BM": ("CRITICAL", "reboot"),
    "RESTART_VM": ("CRITICAL", "reboot"),
    "CONTACT_SUPPORT": ("CRITICAL", "rma"),
    # The catalogue lists the code but no resolution bucket yet (162-172): watch it and look it up, never harmless.
    "": ("WARNING", "none"),
}

# code: (mnemonic, description, immediate bucket, investigatory bucket)
CATALOGUE: dict[int, tuple[str, str, str, str]] = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "CONTACT_SUPPORT"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP",
         "CHECK_APP/CUDA"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", "WORKFLOW_XID_13"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR", "GPU memory page fault", "RESTART_APP", "CHECK_APP/CUDA"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", "CONTACT_SUPPORT"),
    38: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "RESTART_APP", "UPDATE_SW"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "RESTART_APP", "CHECK_APP/CUDA"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "RESET_GPU",
         "CONTACT_SUPPORT"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "IGNORE",
         "CHECK_APP/CUDA"),
    46: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL_FATAL", "GPU stopped processing", "RESET_GPU", "CONTACT_SUPPORT"),
    48: ("ROBUST_CHANNEL_DBE_ERROR", "DBE (Double Bit Error) ECC Error", "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    56: ("ROBUST_CHANNEL_DISPLAY_ENGINE_ERROR", "Display Engine error", "RESTART_APP", "CONTACT_SUPPORT"),
    57: ("ROBUST_CHANNEL_FB_INTERFACE_ERROR", "Error programming video memory interface", "RESET_GPU",
         "CONTACT_SUPPORT"),
    58: ("ROBUST_CHANNEL_FB_INTERFACE_UNSTABLE", "Unstable video memory interface detected", "RESET_GPU",
         "CONTACT_SUPPORT"),
    61: ("ROBUST_CHANNEL_PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", "RESET_GPU",
         "CONTACT_SUPPORT"),
    62: ("ROBUST_CHANNEL_PMU_HALT", "Internal micro-controller halt", "RESET_GPU", "CONTACT_SUPPORT"),
    63: ("ROBUST_CHANNEL_ECC_PAGE_RETIREMENT_OR_ROW_REMAPPER", "ECC page retirement or row remapping recording event",
         "IGNORE", "CHECK_REMAPPED_ROWS"),
    64: ("ROBUST_CHANNEL_ECC_PAGE_RETIREMENT_OR_ROW_REMAPPER_FAILURE",
         "ECC page retirement or row remapper recording failure", "RESET_GPU", "CONTACT_SUPPORT"),
    65: ("ROBUST_CHANNEL_VIDEO_PROCESSOR_EXCEPTION", "Video processor exception", "RESET_GPU", "CONTACT_SUPPORT"),
    68: ("ROBUST_CHANNEL_NVDEC0_EXCEPTION", "NVDEC0 Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", "CONTACT_SUPPORT"),
    74: ("ROBUST_CHANNEL_NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK_ERR"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM",
         "CHECK_MECHANICALS"),
    92: ("ROBUST_CHANNEL_EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "CONTACT_SUPPORT"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC error", "RESTART_APP", "CHECK_REMAPPED_ROWS"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC error", "RESET_GPU", "CHECK_REMAPPED_ROWS"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESTART_APP", "CHECK_APP/CUDA"),
    110: ("ROBUST_CHANNEL_SECURITY_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "CONTACT_SUPPORT"),
    119: ("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "CONTACT_SUPPORT"),
    120: ("GSP_ERROR", "GSP Error", "RESET_GPU", "CONTACT_SUPPORT"),
    121: ("C2C_ERROR", "C2C Link corrected error", "IGNORE", "CONTACT_SUPPORT"),
    122: ("SPI_PMU_RPC_READ_FAIL", "SPI PMU RPC read failure", "RESET_GPU", "CONTACT_SUPPORT"),
    123: ("SPI_PMU_RPC_WRITE_FAIL", "SPI PMU RPC write failure", "RESET_GPU", "CONTACT_SUPPORT"),
    124: ("SPI_PMU_RPC_ERASE_FAIL", "SPI PMU RPC erase failure", "RESET_GPU", "CONTACT_SUPPORT"),
    125: ("INFOROM_FS_ERROR", "Inforom FS failure", "RESET_GPU", "CONTACT_SUPPORT"),
    137: ("NVLINK_FLA_PRIV_ERR", "NVLink FLA privilege error", "RESTART_APP", "CHECK_APP/CUDA"),
    140: ("ROBUST_CHANNEL_UNRECOVERABLE_ECC_ERROR", "Unrecovered ECC error", "RESET_GPU", "CHECK_REMAPPED_ROWS"),
    143: ("GPU_INIT_FAILURE", "GPU initialization failure", "RESET_GPU", "CONTACT_SUPPORT"),
    144: ("NVLINK_SAW_ERROR", "NVLink SAW error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK_RLW_ERROR", "NVLink RLW error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK_TLW_ERROR", "NVLink TLW error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK_TREX_ERROR", "NVLink TREX error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW control error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK_NETIR_ERROR", "NVLink NETIR error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "NVLink MSE error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "XID_154_EVAL", "XID_154_EVAL"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", "RESET_GPU", "CONTACT_SUPPORT"),
    156: ("RESOURCE_RETIREMENT_EVENT", "Resource retirement event", "IGNORE", "CONTACT_SUPPORT"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "Resource retirement failure", "RESET_GPU", "CONTACT_SUPPORT"),
    158: ("GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU", "CONTACT_SUPPORT"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI non-data error", "RESET_GPU", "CONTACT_SUPPORT"),
    # 160-172 as the catalogue's sheet has them (checked against leptonai/gpud's catalog_generated.go, generated
    # 2025-10-29 from NVIDIA's Xid-Catalog.xlsx): 160/161 IGNORE, 162-172 without a resolution bucket.
    160: ("CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", "INVESTIGATE_SW"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", "INVESTIGATE_SW"),
    162: ("PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "", ""),
    163: ("PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "", ""),
    164: ("PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "", ""),
    165: ("PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "", ""),
    166: ("NVLINK_SECURE_CRYPTO_ERR",
          "CC traffic seen prior to link properly being configured for encrypted traffic", "", ""),
    167: ("PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", "", ""),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", "", ""),
    169: ("SEC2_HALT_ERROR", "Internal micro-controller halt", "", ""),
    170: ("NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", "", ""),
    171: ("UNCORRECTABLE_DRAM_ERROR",
          "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "", ""),
    172: ("UNCORRECTABLE_SRAM_ERROR",
          "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "", ""),
}

# Codes the catalogue describes as details of another code: judged by that code's bucket (171/172 say which part of
# the memory an Xid 48 double-bit error hit, so they are as serious as Xid 48 itself).
DETAIL_OF: dict[int, int] = {171: 48, 172: 48}

# Xid 154's text names the recovery action the driver now asks for (the same values as NVML field 230).
XID_154_ACTIONS: dict[str, tuple[str, str]] = {
    "none": ("INFO", "none"),
    "gpu reset required": ("CRITICAL", "reset_gpu"),
    "node reboot required": ("CRITICAL", "reboot"),
    "drain p2p": ("CRITICAL", "drain"),
    "drain and reset": ("CRITICAL", "reset_gpu"),
}

# NVLink5 (144-150) severity words in the event text -> (level, action). "Nonfatal" events were corrected by the
# link; "Fatal" ones took the link down and the GPU needs a reset (Xid 154 follows with the exact action).
NVLINK5_SEVERITIES: dict[str, tuple[str, str]] = {
    "nonfatal": ("INFO", "none"),
    "fatal": ("CRITICAL", "reset_gpu"),
}
