# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Run external tools from gpufleet modules: argv lists only (never a shell line), C locale forced."""

from __future__ import annotations

from typing import Any

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}


class CommandError(Exception):
    """An external command exited non-zero.

    Attributes:
        argv: the command run.
        rc: its exit status.
        stdout: what it printed.
        stderr: what it printed on stderr.
    """

    def __init__(self, argv: list[str], rc: int, stdout: str, stderr: str) -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(str(self))

    def __str__(self) -> str:
        detail = (self.stderr or self.stdout).strip().splitlines()
        last = detail[-1] if detail else "no output"
        return f"{' '.join(self.argv)} exited with status {self.rc}: {last}"


def run_command(module: Any, argv: list[str], check: bool = False) -> tuple[int, str, str]:
    """Run ``argv`` with ``LC_ALL=C`` through ``module.run_command``; return ``(rc, stdout, stderr)``.

    Args:
        module: the AnsibleModule.
        argv: the command as a list (no shell).
        check: raise :class:`CommandError` on a non-zero exit instead of returning it.
    """
    rc, out, err = module.run_command(list(argv), environ_update=dict(C_LOCALE), check_rc=False)
    if check and rc != 0:
        raise CommandError(list(argv), rc, out, err)
    return rc, out, err
