"""The lab's OCI hook: every start of a lab host is a boot, with its own boot id and power-cycled GPUs.

Podman runs this (:func:`main`) at the ``createContainer`` stage of every start of a
container that carries the :data:`ANNOTATION` annotation, the first start and each restart after a ``reboot``
inside the host alike (the hosts run with ``--restart=always``, so conmon starts them again). The hook runs in the
container's mount namespace after its mounts are made and before ``pivot_root``, so the container's root file
system and this machine's files are both visible. It:

1. writes a fresh random boot id to ``<host files>/boot_id`` (the annotation's value names that folder) and
   binds it read-only over the container's ``/proc/sys/kernel/random/boot_id`` (a mount that runc refuses in a
   container's own configuration, but not from a hook), so ``ansible.builtin.reboot`` and journald see a new boot;
2. tells the simulated hardware that it was powered on with that boot id
   (:func:`gpufleet_sim.power.power_on` on ``/var/lib/nvidia-sim/state.json`` in the container): the simulator
   applies what a power cycle does, once per boot id.
3. gives the host an empty kernel ring buffer of its own at ``/dev/kmsg`` (a regular file, 0600 root, in the
   container's fresh ``/dev``), where a test writes ``NVRM: Xid`` records in the kernel's record format as the
   driver would. A container sees neither the machine's ring buffer (podman does not pass ``/dev/kmsg``) nor its
   kernel messages in its journal, as on hosts whose journald does not read the kernel log; gpu_health then reads
   ``/dev/kmsg`` (plugins/module_utils/kernel_log.py).

The hook's environment is empty (no ``PATH``): every program is named by its absolute path. Whatever fails is
printed to standard error and exits non-zero, which makes podman refuse to start the host: a host without its own
boot id, or with GPUs in the state of the previous boot, is not started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

#: The annotation that selects the lab's hosts; its value is the host's folder under ``build/lab/hosts``.
ANNOTATION = "io.gpufleet.lab.boot"
BOOT_ID_FILE = "boot_id"
BOOT_ID_PATH = "proc/sys/kernel/random/boot_id"
STATE_PATH = "var/lib/nvidia-sim/state.json"
KMSG_PATH = "dev/kmsg"
MOUNT = "/usr/bin/mount"


class BootHookError(RuntimeError):
    """The boot could not be prepared; the message says what is wrong and what to do."""


def hook_config(python: str, hooks_dir: Path) -> Path:
    """Write the hook's OCI hooks definition (``gpufleet-lab-boot.json``) under ``hooks_dir``; return its path."""
    # -I and an explicit path: the hook needs only this file and the simulator's power/store (standard library)
    src = str(Path(__file__).resolve().parent.parent)
    code = f"import sys; sys.path.insert(0, {src!r}); from gpufleet_lab.boothook import main; sys.exit(main())"
    doc = {"version": "1.0.0",
           "hook": {"path": python, "args": [python, "-I", "-c", code], "timeout": 60},
           "when": {"annotations": {f"^{ANNOTATION.replace('.', '[.]')}$": ".+"}},
           "stages": ["createContainer"]}
    hooks_dir.mkdir(parents=True, exist_ok=True)
    path = hooks_dir / "gpufleet-lab-boot.json"
    text = json.dumps(doc, indent=1) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path


def new_boot_id(files_dir: Path) -> str:
    """Write a fresh boot id (a random UUID, as the kernel's) to ``files_dir/boot_id``, mode 0444; return it."""
    boot_id = str(uuid.uuid4())
    files_dir.mkdir(parents=True, exist_ok=True)
    tmp = files_dir / f"{BOOT_ID_FILE}.tmp.{os.getpid()}"
    tmp.write_text(boot_id + "\n", encoding="utf-8")
    tmp.chmod(0o444)
    tmp.replace(files_dir / BOOT_ID_FILE)
    return boot_id


def rootfs_of(state: dict[str, Any]) -> tuple[Path, dict[str, str]]:
    """Return the container's root file system and annotations from the OCI state given to a hook."""
    bundle = Path(state["bundle"])
    config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
    root = Path(config["root"]["path"])
    return (root if root.is_absolute() else bundle / root), dict(config.get("annotations") or {})


def boot(state: dict[str, Any]) -> str:
    """Give the container described by the OCI ``state`` a new boot id and power its GPUs on; return the id."""
    rootfs, annotations = rootfs_of(state)
    files = annotations.get(ANNOTATION) or (state.get("annotations") or {}).get(ANNOTATION)
    if not files:
        raise BootHookError(f"the container has no {ANNOTATION} annotation; start lab hosts with gpufleet_lab")
    boot_id = new_boot_id(Path(files))
    target = rootfs / BOOT_ID_PATH
    proc = subprocess.run([MOUNT, "--bind", "-o", "ro", str(Path(files) / BOOT_ID_FILE), str(target)],
                          capture_output=True, text=True, check=False, env={})
    if proc.returncode != 0:
        raise BootHookError(f"cannot bind the boot id over {target}: {proc.stderr.strip()}; is /proc mounted?")
    kmsg = rootfs / KMSG_PATH
    if not kmsg.exists():
        kmsg.touch(mode=0o600)
    state_file = rootfs / STATE_PATH
    if state_file.exists():
        from gpufleet_sim.power import power_on  # the simulator decides what a power cycle resets

        power_on(boot_id, path=state_file)
    return boot_id


def main() -> int:
    """Read the OCI state from standard input and prepare the boot."""
    try:
        boot(json.load(sys.stdin))
    except Exception as exc:  # any failure must stop the start, with its reason
        print(f"gpufleet-lab boot hook: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
