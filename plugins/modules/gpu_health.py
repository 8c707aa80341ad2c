#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.gpu_health: one health check of every GPU of a host, in one NVML session."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Check the health of every NVIDIA GPU of a host (ECC, row remapping, XID, PCIe, NVLink, thermals...)
version_added: "0.1.0"
description:
  - Reads every GPU through NVML in one session and evaluates each reading against a threshold. Every check
    returns C(name), C(gpu) (C(index), C(uuid), C(pci_bus_id); null for host-wide checks), C(status)
    (C(ok), C(warn) or C(fail)), the measured C(value), the C(threshold) it was compared with and a C(message).
  - "Host-wide checks: C(gpu_count), C(driver_version), C(fabric_manager), C(vbios_consistency) (or a single C(nvml)
    check when NVML cannot start). Per-GPU checks: C(gpu_lost), C(gpu_model), C(persistence_mode),
    C(ecc_uncorrected_volatile), C(ecc_corrected_volatile), C(retired_pages), C(remapped_rows), C(xid),
    C(pcie_link_width), C(pcie_link_gen), C(nvlink) (links up and their speed against the model's numbers in
    nvlink_models.py), C(fabric) (C(nvmlDeviceGetGpuFabricInfoV) - state Completed,
    status Success, a clique id and a cluster UUID, where the GPU has an NVLink fabric), C(temperature),
    C(clock_events), C(processes), C(mig_layout), C(recovery_action) (NVML field 230, the recovery action the driver
    asks for)."
  - A check that does not apply to a GPU (NVML answers NOT_SUPPORTED, for example retired pages on Ampere and
    newer) is C(ok) with a null value and says so. A reading that fails for another reason is C(fail).
  - "Fail closed: a check that cannot read what it needs is C(fail) with the reason, never C(ok): ECC off or not
    reported on a GPU that should run it (O(ecc_mode_expected)), a temperature whose fail limit is unknown, a
    kernel log that cannot be read (O(xid_kernel_log)), a reading that was not made or does not parse."
  - The host fails when any check fails (see O(fail_on)); the full report is in RV(health) either way.
  - Read-only. The default thresholds, and where they come from, are listed in docs/health.md.
author:
  - gpufleet contributors
options:
  expected_gpu_count:
    description: Number of GPUs the host must have (exact). Not checked when null.
    type: int
  expected_gpu_models:
    description: Each GPU's name must contain one of these (case-insensitive), for example C(H100). Empty - not checked.
    type: list
    elements: str
    default: []
  expected_driver_version:
    description: Driver version that must be loaded; a branch or prefix matches at a dot (C(570) matches C(570.172.08)).
    type: str
  expected_vbios_version:
    description: VBIOS every GPU must run. When null, the GPUs of one model must only agree with each other.
    type: str
  persistence_mode_expected:
    description: Fail a GPU whose persistence mode is disabled.
    type: bool
    default: true
  ecc_mode_expected:
    description:
      - ECC mode every GPU must run. C(auto) - C(enabled) on data-centre GPUs (NVML brand Tesla or NVIDIA, for
        example A100, H100, T4; a brand that cannot be read counts as data-centre), C(any) on others.
      - A GPU expected to run ECC whose ECC is off, or whose ECC counts NVML does not report, fails.
    type: str
    choices: [auto, enabled, disabled, any]
    default: auto
  ecc_uncorrected_volatile_fail:
    description: Fail when the volatile uncorrectable ECC count exceeds this.
    type: int
    default: 0
  ecc_corrected_volatile_warn:
    description: Warn when the volatile correctable ECC count exceeds this.
    type: int
    default: 10000
  ecc_corrected_volatile_fail:
    description: Fail when the volatile correctable ECC count exceeds this.
    type: int
    default: 50000000
  retired_pages_warn:
    description: Warn when more pages than this are retired (SBE + DBE; pre-Ampere GPUs).
    type: int
    default: 10
  retired_pages_fail:
    description: Fail when more pages than this are retired. A pending retirement always fails.
    type: int
    default: 61
  remapped_rows_uncorrectable_fail:
    description:
      - Fail when more rows than this were remapped for uncorrectable errors.
      - A pending or a failed remapping always fails.
    type: int
    default: 512
  xid_window_s:
    description: How far back (seconds) the kernel log is searched for XID events.
    type: int
    default: 7200
  xid_critical:
    description:
      - XIDs judged CRITICAL (reset the GPU) whatever NVIDIA's XID catalogue says. Every other XID in the window
        (not in O(xid_ignore)) takes its level and action from the catalogue (docs/health.md).
    type: list
    elements: int
    default: []
  xid_ignore:
    description: XIDs that are not reported at all (for example 94 - contained ECC error - where applications restart
      themselves).
    type: list
    elements: int
    default: []
  xid_wait_ms:
    description:
      - How long to wait (milliseconds) for XID events on the NVML event set registered by this call. 0 turns the
        NVML source off.
    type: int
    default: 100
  xid_kernel_log:
    description:
      - "Also search the kernel log of the last O(xid_window_s) seconds for C(NVRM: Xid) lines, from the first
        source of O(xid_kernel_log_sources) that can be read."
    type: bool
    default: true
  xid_kernel_log_sources:
    description:
      - Where the kernel log is read, in order; the first that can be read is used and the report names it
        (RV(health.xid_sources)). C(journal) - C(journalctl -k), used only when the journal holds this boot's kernel
        messages (journald in a container answers an empty log); C(kmsg) - C(/dev/kmsg), the kernel's ring buffer;
        C(dmesg) - the C(dmesg) command.
      - The XID check is UNKNOWN only when none of them can be read.
    type: list
    elements: str
    choices: [journal, kmsg, dmesg]
    default: [journal, kmsg, dmesg]
  temperature_fail_c:
    description:
      - Fail at or above this GPU temperature (C); 0 is a limit like any other. Null - the GPU's own slowdown
        threshold from NVML.
      - The GPU's shutdown threshold is always honoured too. With no limit known (null here and the slowdown
        threshold unreadable) the check fails.
    type: int
  temperature_warn_margin_c:
    description: Warn this many degrees below the fail temperature.
    type: int
    default: 5
  pcie_width_status:
    description: Status of a GPU whose PCIe link trained narrower than its maximum.
    type: str
    choices: [warn, fail]
    default: fail
  pcie_gen_status:
    description:
      - Status of a busy GPU whose PCIe link runs below its maximum generation.
      - An idle GPU legitimately down-trains its link to save power; that is always ok.
    type: str
    choices: [ok, warn, fail]
    default: warn
  nvswitch_expected:
    description: The host has NVSwitches, so C(nvidia-fabricmanager) must be active.
    type: bool
    default: false
  nvlink_bridges_expected:
    description:
      - The host's PCIe boards with NVLink bridges (A100/H100 PCIe, H100/H200 NVL, A30...) have their bridges
        fitted, so such a board with no NVLink up fails its C(nvlink) check, and one with some links down fails
        instead of warning. When false, a bridge board with no link up is not applicable (sold and run without).
    type: bool
    default: false
  nvlink_expected:
    description:
      - Whether the GPUs' NVLinks must be visible to this host. Null - decided by what the host is - on bare metal
        a board that has NVLinks must report them (CRITICAL on NVSwitch boards without any); inside a VM
        (C(nvmlDeviceGetVirtualizationMode) Pass-Through or vGPU) a GPU whose links the hypervisor does not expose
        is not applicable. C(true) requires the model's links everywhere (CRITICAL without them); C(false) says
        none are expected. Links NVML reports are judged either way (a link down stays a failure).
    type: bool
  fabric_multinode_expected:
    description:
      - Whether the GPUs belong to a multi-node NVLink domain (GB200/GB300 NVL72, GH200 NVL32), where a completed
        fabric must have a non-zero clique id and cluster UUID. Null - expected when O(imex_nodes_config_file)
        exists (IMEX is configured) or when some GPU of the host reports a clique. A single-node NVSwitch system
        (HGX) completes with clique 0 and a zero UUID, which is healthy.
    type: bool
  imex_nodes_config_file:
    description: IMEX's node list (C(nvidia_imex_nodes_config_file)); its presence means a multi-node NVLink domain.
    type: path
    default: /etc/nvidia-imex/nodes_config.cfg
  fabric_manager_service:
    description: The fabric manager's systemd unit.
    type: str
    default: nvidia-fabricmanager
  idle_expected:
    description: The GPUs should be idle; any compute process not in O(idle_allowed_processes) fails its GPU.
    type: bool
    default: false
  idle_allowed_processes:
    description: Process names that do not count as foreign on an idle GPU.
    type: list
    elements: str
    default: [nvidia-cuda-mps-server]
  mig_state_file:
    description: MIG layout recorded by the C(nvidia_mig) role; when the file exists each GPU must match it.
    type: path
    default: /etc/gpufleet/mig-state.json
  previous_report:
    description: The last report (JSON written by the C(gpu_health) role); names a lost GPU by UUID and bus id.
    type: path
    default: /var/lib/gpufleet/health.json
  skip_checks:
    description: Names of checks not to report.
    type: list
    elements: str
    default: []
  dcgm_diag_level:
    description:
      - Run C(dcgmi diag -r N -j) (1 quick, seconds; 2 medium, about 2 minutes; 3 long; 4 extended) and report it as
        the host-wide C(dcgm_diag) check, judged from DCGM's JSON - a failing test is CRITICAL (action C(drain), or
        C(reset_gpu) when DCGM's severity is RESET) with the test, GPU and DCGM's words in C(evidence); a warning is
        WARNING; output that is not DCGM's JSON, or no test, is UNKNOWN.
        0 turns it off. Needs the DCGM host engine (the C(nvidia_dcgm) role).
    type: int
    choices: [0, 1, 2, 3, 4]
    default: 0
  dcgm_host:
    description:
      - C(host:port) of the DCGM host engine that C(dcgmi diag) talks to (C(dcgmi --host)); unset - DCGM's default
        (the local engine on port 5555). Set it when the engine listens elsewhere (C(nvidia_dcgm_hostengine_listen)).
    type: str
  container_runtime:
    description:
      - Container engine for a smoke test (C(docker), C(podman) or C(nerdctl)) that runs O(container_image) with
        every GPU (CDI device C(nvidia.com/gpu=all)) and C(nvidia-smi -L); the host-wide C(container_smoke) check
        fails unless every GPU is listed. Null - no smoke test.
    type: str
    choices: [docker, podman, nerdctl]
  container_image:
    description: Image of the smoke test.
    type: str
    default: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
  fail_on:
    description: Fail the task when a check has this status or worse (C(never) - always return).
    type: str
    choices: [fail, warn, never]
    default: fail
  rdma_expected:
    description:
      - Whether the host must do GPUDirect RDMA. V(true) - C(nvidia_peermem) must be loaded (C(rdma_peermem),
        CRITICAL) and every HCA port must be up (C(rdma_port_state), CRITICAL). V(null) - the HCAs that exist
        (C(/sys/class/infiniband)) are checked, but what would be CRITICAL is a WARNING (an Ethernet-only ConnectX
        or a spare unplugged port is a healthy node); a host with no HCA gets no RDMA check.
    type: bool
  rdma_expected_rate_gbps:
    description:
      - The rate every HCA port must run at, in Gb/s (C(400) for NDR 4X); a slower port is a WARNING
        (C(rdma_port_rate)). V(null) - the fastest port of the same link layer on the host.
    type: int
  rdma_expected_link_layer:
    description:
      - The link layer every HCA port must run - V(InfiniBand), or V(Ethernet) for RoCE; V(null) - not checked. A port
        on the other one (a VPI port set to the other protocol) is a WARNING (C(rdma_port_link_layer)).
    type: str
    choices: [InfiniBand, Ethernet]
  rdma_counter_interval_s:
    description:
      - Seconds between the two reads of the ports' error counters (C(symbol_error), C(link_downed),
        C(link_error_recovery), C(port_rcv_errors), C(excessive_buffer_overrun_errors) ...); a counter that rose
        is a WARNING (C(rdma_port_errors)). Only hosts with HCAs wait.
    type: int
    default: 2
  rdma_nic_max_level:
    description:
      - The farthest C(nvidia-smi topo -m) level allowed between a GPU and its nearest NIC
        (C(rdma_gpu_nic_distance), WARNING beyond).
    type: str
    choices: [PIX, PXB, PHB, NODE, SYS]
    default: PXB
  rdma_pairing_expected:
    description:
      - Whether each GPU must have a NIC near it. V(null) - when the host has at least as many HCAs as GPUs.
    type: bool
requirements:
  - nvidia-ml-py == 13.615.71 on the managed host
  - an NVIDIA driver (libnvidia-ml.so.1)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.read_only
notes:
  - XID events come from two sources. The kernel log gives the window (the journal, C(/dev/kmsg) or C(dmesg), as
    O(xid_kernel_log_sources) says). NVML events only arrive for XIDs raised while this call's event set is registered
    (O(xid_wait_ms)), so they catch events of the moment, never older ones. RV(health.xid_sources) says which
    kernel-log source was read, or why none could be.
seealso:
  - module: gpufleet.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Check GPU health (8 H100 on an NVSwitch board, driver branch 570)
  gpufleet.nvidia.gpu_health:
    expected_gpu_count: 8
    expected_gpu_models: [H100]
    expected_driver_version: "570"
    nvswitch_expected: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"

- name: Health report without failing the host (a later task decides)
  gpufleet.nvidia.gpu_health:
    idle_expected: true
    fail_on: never
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
  register: __health

- name: Show failing checks
  ansible.builtin.debug:
    msg: "{{ __health.health.checks | selectattr('status', 'equalto', 'fail') | list }}"
"""

RETURN = r"""
health:
  description: The report.
  returned: always
  type: dict
  contains:
    status: {description: Worst status of all checks (ok, warn or fail)., type: str, sample: ok}
    level:
      description:
        - Worst level of all checks in NVIDIA Health Validation's words - PASS, INFO, WARNING, UNKNOWN (an input
          could not be read; the host is never PASS then) or CRITICAL.
      type: str
      sample: PASS
    action:
      description: Highest recommended action of all checks - none, restart_app, drain, reset_gpu, reboot or rma.
      type: str
      sample: none
    xid_catalogue: {description: The XID catalogue the XIDs were judged by (title, url, version)., type: dict}
    counts: {description: Number of checks per status., type: dict, sample: {ok: 120, warn: 0, fail: 0}}
    failed: {description: "Failing checks as C(name[gpu N]).", type: list, elements: str}
    checks:
      description:
        - Every check - C(name), C(gpu) (C(index), C(uuid), C(pci_bus_id) or null), C(status), C(level),
          C(action), C(value), C(threshold), C(message), C(evidence) (for C(xid) - one entry per XID code and
          subcode with its C(count), C(level), C(action) and the catalogue's words; for C(dcgm_diag) - one entry
          per failing or warning DCGM test and GPU with DCGM's warnings; C(rdma_port_*) - hca, port, rate; else null).
      type: list
      elements: dict
    gpus:
      description:
        - Per GPU - C(index), C(uuid), C(pci_bus_id), C(name), C(virtualization_mode) (as nvidia-smi prints it -
          C(None) on bare metal, C(Pass-Through) or C(VGPU) inside a VM; null where NVML does not say), C(status),
          C(level) and C(action) (worst of its checks), C(mig)
          (mode, C(slots) - the memory slices placements range over - and the GPU instances with
          their placement C(start) and C(size) and their compute instances' MIG UUIDs, as NVML reports them; or
          null).
      type: list
      elements: dict
    driver_version: {description: Loaded driver version., type: str, sample: 570.172.08}
    cuda_version: {description: CUDA version of the driver., type: str, sample: "12.8"}
    gpu_count: {description: GPUs found., type: int, sample: 8}
    xid_sources:
      description:
        - Where XIDs were read from - C(source) (nvml or kernel) and C(error) (null when it worked); the kernel
          entry also has C(read_from) (C(journal), C(kmsg), C(dmesg), or null when none could be read), C(tried)
          (each source passed over, with why) and C(window_s).
      type: list
      elements: dict
    thresholds: {description: The thresholds used., type: dict}
    network:
      description:
        - The host's RDMA side where its checks ran, else null - C(level) and C(failed) of all RDMA checks, and per
          HCA port as read (C(ports)) and per GPU (C(gpus), its C(nearest) NIC and C(topo -m) level) as the sample.
      type: dict
      sample: {expected: true, nvidia_peermem_loaded: true, level: PASS, failed: [], gpus: [{pci_bus_id: "0000:18:00.0",
               nearest: {hca: mlx5_0, level: PIX}}], ports: [{hca: mlx5_0, port: 1, pci_bus_id: "0000:fe:00.0", state:
               ACTIVE, phys_state: LinkUp, rate: 400 Gb/sec (4X NDR), rate_gbps: 400.0, link_layer: InfiniBand,
               level: PASS, failed: []}]}
msg:
  description: One line - the status and the failing checks.
  returned: always
  type: str
"""

import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_commands as hcmd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import kernel_log, rdma_health, xid
from ansible_collections.gpufleet.nvidia.plugins.module_utils.command import run_command
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError, nvml_session
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_health import read_host

ARGUMENT_SPEC: dict[str, Any] = {
    "expected_gpu_count": {"type": "int"},
    "expected_gpu_models": {"type": "list", "elements": "str", "default": []},
    "expected_driver_version": {"type": "str"},
    "expected_vbios_version": {"type": "str"},
    "persistence_mode_expected": {"type": "bool", "default": True},
    "ecc_mode_expected": {"type": "str", "choices": ["auto", "enabled", "disabled", "any"], "default": "auto"},
    "ecc_uncorrected_volatile_fail": {"type": "int", "default": 0},
    "ecc_corrected_volatile_warn": {"type": "int", "default": 10000},
    "ecc_corrected_volatile_fail": {"type": "int", "default": 50000000},
    "retired_pages_warn": {"type": "int", "default": 10},
    "retired_pages_fail": {"type": "int", "default": 61},
    "remapped_rows_uncorrectable_fail": {"type": "int", "default": 512},
    "xid_window_s": {"type": "int", "default": 7200},
    "xid_critical": {"type": "list", "elements": "int", "default": []},
    "xid_ignore": {"type": "list", "elements": "int", "default": []},
    "xid_wait_ms": {"type": "int", "default": 100},
    "xid_kernel_log": {"type": "bool", "default": True},
    "xid_kernel_log_sources": {"type": "list", "elements": "str", "choices": list(kernel_log.SOURCES),
                               "default": list(kernel_log.SOURCES)},
    "temperature_fail_c": {"type": "int"},
    "temperature_warn_margin_c": {"type": "int", "default": 5},
    "pcie_width_status": {"type": "str", "choices": ["warn", "fail"], "default": "fail"},
    "pcie_gen_status": {"type": "str", "choices": ["ok", "warn", "fail"], "default": "warn"},
    "nvswitch_expected": {"type": "bool", "default": False},
    "nvlink_bridges_expected": {"type": "bool", "default": False},
    "nvlink_expected": {"type": "bool"},
    "fabric_multinode_expected": {"type": "bool"},
    "imex_nodes_config_file": {"type": "path", "default": "/etc/nvidia-imex/nodes_config.cfg"},
    "fabric_manager_service": {"type": "str", "default": "nvidia-fabricmanager"},
    "idle_expected": {"type": "bool", "default": False},
    "idle_allowed_processes": {"type": "list", "elements": "str", "default": ["nvidia-cuda-mps-server"]},
    "mig_state_file": {"type": "path", "default": "/etc/gpufleet/mig-state.json"},
    "previous_report": {"type": "path", "default": "/var/lib/gpufleet/health.json"},
    "skip_checks": {"type": "list", "elements": "str", "default": []},
    "dcgm_diag_level": {"type": "int", "choices": [0, 1, 2, 3, 4], "default": 0},
    "dcgm_host": {"type": "str"},
    "container_runtime": {"type": "str", "choices": ["docker", "podman", "nerdctl"]},
    "container_image": {"type": "str", "default": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"},
    "fail_on": {"type": "str", "choices": ["fail", "warn", "never"], "default": "fail"},
    # GPUDirect RDMA (module_utils/rdma_health.py; docs/health.md): null - expected where HCAs exist
    "rdma_expected": {"type": "bool"},
    "rdma_expected_rate_gbps": {"type": "int"},
    "rdma_expected_link_layer": {"type": "str", "choices": ["InfiniBand", "Ethernet"]},
    "rdma_counter_interval_s": {"type": "int", "default": 2},
    "rdma_nic_max_level": {"type": "str", "choices": ["PIX", "PXB", "PHB", "NODE", "SYS"], "default": "PXB"},
    "rdma_pairing_expected": {"type": "bool"},
}


# Options that say how to read or what to run, not what to compare with: everything else is a threshold.
NOT_THRESHOLDS = ("fabric_manager_service", "mig_state_file", "previous_report", "skip_checks", "dcgm_diag_level",
                  "dcgm_host", "container_runtime", "container_image", "fail_on", "xid_wait_ms", "xid_kernel_log",
                  "xid_kernel_log_sources", "imex_nodes_config_file")


def thresholds(params: dict[str, Any]) -> dict[str, Any]:
    """The thresholds of a call: its validated parameters (defaults from :data:`ARGUMENT_SPEC`, the only place
    that defines them) less the options in :data:`NOT_THRESHOLDS`."""
    return {key: value for key, value in params.items() if key not in NOT_THRESHOLDS}


def load_json(path: str) -> Any:
    """Return the parsed JSON file at ``path``, or None when it does not exist or does not parse."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def mig_expectations(doc: Any) -> dict[str, Any] | None:
    """Index a recorded MIG state by GPU UUID: accepts ``{"gpus": [{uuid, mig|...}]}`` or ``{uuid: layout}``."""
    if not isinstance(doc, dict):
        return None
    entries = doc.get("gpus")
    if isinstance(entries, list):
        out = {}
        for entry in entries:
            if isinstance(entry, dict) and entry.get("uuid"):
                layout = entry.get("mig") if isinstance(entry.get("mig"), dict) else entry
                out[str(entry["uuid"])] = layout
        return out
    return {k: v for k, v in doc.items() if str(k).startswith("GPU-") and isinstance(v, dict)}


def fill_lost_identity(meas: dict[str, Any], previous: Any) -> None:
    """Name lost GPUs (NVML cannot read their UUID) by index from the previous report, when there is one."""
    known = {}
    if isinstance(previous, dict):
        for gpu in previous.get("gpus") or []:
            if isinstance(gpu, dict) and gpu.get("index") is not None:
                known[int(gpu["index"])] = gpu
    for gpu in meas.get("gpus", []):
        if gpu.get("lost") and not gpu.get("uuid") and gpu["index"] in known:
            gpu["uuid"] = known[gpu["index"]].get("uuid")
            gpu["pci_bus_id"] = known[gpu["index"]].get("pci_bus_id")


def fabric_manager_state(module: AnsibleModule, service: str) -> str:
    """``systemctl is-active <service>`` (active, inactive, failed, unknown...)."""
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return "unknown (no systemctl)"
    _rc, out, _err = run_command(module, [systemctl, "is-active", service])
    return out.strip() or "unknown"


def dcgm_diag(module: AnsibleModule, level: int, host: str | None = None) -> dict[str, Any]:
    """Run ``dcgmi diag [--host HOST] -r <level>``; return the host-wide ``dcgm_diag`` check."""
    dcgmi = module.get_bin_path("dcgmi")
    if dcgmi is None:
        return hc.check("dcgm_diag", None, hc.FAIL, None, f"level {level} passes",
                        "dcgmi not found; install DCGM (the nvidia_dcgm role) or set dcgm_diag_level to 0")
    rc, out, err = run_command(module, [dcgmi, "diag", *(["--host", host] if host else []), "-r", str(level), "-j"])
    return hcmd.evaluate_dcgm_diag(level, rc, out, err)


def container_smoke(module: AnsibleModule, runtime: str, image: str, gpu_count: int | None) -> dict[str, Any]:
    """Run ``nvidia-smi -L`` in a container with every GPU; return the host-wide ``container_smoke`` check."""
    engine = module.get_bin_path(runtime)
    if engine is None:
        return hc.check("container_smoke", None, hc.FAIL, None, gpu_count,
                        f"{runtime} not found; install the container engine or unset container_runtime")
    rc, out, err = run_command(module, [engine, "run", "--rm", "--device", "nvidia.com/gpu=all", image,
                                        "nvidia-smi", "-L"])
    return hcmd.evaluate_container_smoke(rc, out, err, gpu_count)


def add_mig_slots(nvml: Any, meas: dict[str, Any]) -> None:
    """Give each MIG-capable GPU's ``mig`` its ``slots``: the memory slices its placements range over (A100/H100 8,
    A30 4), so a report can draw the GPU and its instances where they are. Null when the profiles cannot be read."""
    for gpu in meas.get("gpus", []):
        mig = gpu.get("values", {}).get("mig")
        if not isinstance(mig, dict) or not mig.get("supported"):
            continue
        try:
            ends = [start + size for prof in nvml.gi_profiles(gpu["index"]) for start, size in prof["placements"]]
        except NvmlError:
            ends = []
        mig["slots"] = max(ends) if ends else None


def build_report(meas: dict[str, Any], th: dict[str, Any], skip: list[str]) -> dict[str, Any]:
    """Evaluate the measurements; return the report (status, counts, checks, per-GPU status)."""
    checks = [c for c in hc.evaluate_host(meas, th) + meas.get("extra_checks", []) if c["name"] not in skip]
    summary = hc.summarize(checks)
    gpus = []
    for gpu in meas.get("gpus", []):
        mine = [c for c in checks if c.get("gpu") and c["gpu"]["index"] == gpu["index"]]
        gpus.append({"index": gpu["index"], "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                     "name": gpu.get("values", {}).get("name"),
                     "virtualization_mode": hc.virtualization_mode(gpu),
                     "status": hc.worst([c["status"] for c in mine]),
                     "level": xid.worst_level([c["level"] for c in mine]),
                     "action": xid.worst_action([c["action"] for c in mine]),
                     "mig": gpu.get("values", {}).get("mig")})
    return {"status": summary["status"], "level": summary["level"], "action": summary["action"],
            "counts": summary["counts"], "failed": summary["failed"], "xid_catalogue": xid.cat.SOURCE,
            "checks": checks, "gpus": gpus, "driver_version": meas.get("driver_version"),
            "cuda_version": meas.get("cuda_version"), "gpu_count": meas.get("gpu_count"),
            "xid_sources": meas.get("xid_sources", []), "thresholds": th,
            "network": rdma_health.network(meas.get("rdma"), checks)}


def measure(module: AnsibleModule, th: dict[str, Any]) -> dict[str, Any]:
    """Read NVML, the kernel log and the fabric manager; return the measurement document."""
    params = module.params
    mig_doc = mig_expectations(load_json(params["mig_state_file"]))
    try:
        with nvml_session() as nvml:
            meas = read_host(nvml, want_mig=True, xid_wait_ms=params["xid_wait_ms"])
            add_mig_slots(nvml, meas)
    except NvmlError as exc:
        meas = {"init_error": str(exc), "gpus": [], "xid_sources": []}
        return meas
    meas["mig_expected"] = mig_doc
    fill_lost_identity(meas, load_json(params["previous_report"]))
    meas["imex_configured"] = os.path.isfile(params["imex_nodes_config_file"])
    if params["xid_kernel_log"]:
        events, source = kernel_log.kernel_xids(lambda argv: run_command(module, argv), module.get_bin_path,
                                                th["xid_window_s"], params["xid_kernel_log_sources"])
        meas["xid_sources"].append(source)
        kernel_log.merge_kernel_xids(meas, events)
    if th["nvswitch_expected"]:
        meas["fabric_manager"] = fabric_manager_state(module, params["fabric_manager_service"])
    extra = meas.setdefault("extra_checks", [])
    if params["dcgm_diag_level"]:
        extra.append(dcgm_diag(module, params["dcgm_diag_level"], params["dcgm_host"]))
    meas["rdma"] = rdma_health.measure(th)
    extra += rdma_health.evaluate(meas["rdma"], th, meas.get("gpus", []))
    if params["container_runtime"]:
        extra.append(container_smoke(module, params["container_runtime"], params["container_image"],
                                     meas.get("gpu_count")))
    return meas


def main() -> None:
    """Entry point."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    th = thresholds(module.params)
    report = build_report(measure(module, th), th, module.params["skip_checks"])
    status = report["status"]
    failed = ", ".join(report["failed"]) or "no failing check"
    msg = f"health {status}: {failed}"
    fail_on = module.params["fail_on"]
    if (fail_on == "fail" and status == hc.FAIL) or (fail_on == "warn" and status in (hc.WARN, hc.FAIL)):
        module.fail_json(msg=msg, health=report, changed=False)
    module.exit_json(changed=False, msg=msg, health=report)


if __name__ == "__main__":
    main()
