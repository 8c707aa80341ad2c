#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.apt_source: one signed apt repository on a host in one call.

The action plugin of the same name (plugins/action/apt_source.py) runs first, on the controller: it downloads the
repository key, refuses it unless its fingerprint is the pinned one, and hands this module the binary keyring. This
module compares and writes the host's side (prerequisite packages, keyring, apt credentials, deb822 source) and
says what changed: one module round trip where the role's tasks took five, on every run of every host.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source
short_description: Add a signed apt repository (keyring, credentials, deb822 source) whose key the controller checked
version_added: "0.3.0"
description:
  - On the controller (the action plugin), downloads the key of O(key_url), reads its fingerprints with C(gpg) and
    refuses the key, before the host is touched, unless its primary key's fingerprint is O(key_fingerprint). The key
    is converted into a binary keyring there; the host needs no C(gnupg).
  - On the host, installs the missing O(prerequisites) with C(apt-get), writes the keyring to
    C(/usr/share/keyrings/gpufleet-<last 16 digits of the fingerprint>.gpg), writes the credentials of a URL with
    user information to C(/etc/apt/auth.conf.d/<source>.conf) (root only, 0600, as apt_auth.conf(5) documents) or
    removes that file when the URL has none, and writes the deb822 source
    C(/etc/apt/sources.list.d/<source>.sources) with the credential-free URL and C(Signed-By) that keyring (the same
    bytes M(ansible.builtin.deb822_repository) writes).
  - The source is named by the credential-free URL (V(gpufleet-<host-port-path>)), so that two roles pointed at one
    repository write one identical source, and the keyring by the key's fingerprint, so that both carry the same
    C(Signed-By), which apt requires.
  - Credentials never appear in the result, the diff or a log; every message shows the URL with C(***@).
author:
  - gpufleet contributors
options:
  url:
    description:
      - The repository's base URL; user information (C(https://user:token@mirror/...)) goes to apt's auth.conf.d.
      - Required unless O(verify_only) is set.
    type: str
  suite:
    description: The deb822 C(Suites) value (V(/) for a flat repository such as NVIDIA's CUDA repository).
    type: str
    default: /
  key_url:
    description: Where the repository's signing key is (armoured or binary).
    type: str
    required: true
  key_fingerprint:
    description: The pinned 40-digit fingerprint of the key's primary key (spaces and case ignored).
    type: str
    required: true
  owner:
    description: The role that asks, named in every error message and in the credentials file's comment.
    type: str
    default: gpufleet
  timeout:
    description: Seconds to wait for the key download.
    type: int
    default: 30
  prerequisites:
    description: Packages installed (when missing) before the source is added.
    type: list
    elements: str
    default: [ca-certificates]
  verify_only:
    description: Only download and check the key on the controller (a role's preflight); the host is not contacted.
    type: bool
    default: false
  key_cache:
    description: The controller's folder for the downloaded key and the gpg home used to read it (created 0700).
    type: path
    default: ~/.cache/gpufleet/keys (C($XDG_CACHE_HOME/gpufleet/keys) when set)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.changes
notes:
  - The host-side options (V(name), V(uris), V(signed_by), V(keyring), the V(auth_*) fields) are filled in by the
    action plugin; a task gives the options above.
seealso:
  - module: ansible.builtin.deb822_repository
  - name: apt_auth.conf(5)
    description: Where apt reads repository credentials, and why they stay out of sources.list.
    link: https://manpages.debian.org/bookworm/apt/apt_auth.conf.5.en.html
"""

EXAMPLES = r"""
- name: Check the key of NVIDIA's CUDA repository before anything changes
  gpufleet.nvidia.apt_source:
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    key_fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
    owner: nvidia_driver
    verify_only: true

- name: Add it
  gpufleet.nvidia.apt_source:
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    key_fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
    owner: nvidia_driver
  register: __repo
"""

RETURN = r"""
name:
  description: The source's name (also its file name under C(/etc/apt/sources.list.d/) without C(.sources)).
  returned: always
  type: str
  sample: gpufleet-developer-download-nvidia-com-compute-cuda-repos-debian12-x86-64
keyring:
  description: The keyring's path on the host.
  returned: always
  type: str
  sample: /usr/share/keyrings/gpufleet-a4b469963bf863cc.gpg
fingerprint:
  description: The key's checked fingerprint.
  returned: always
  type: str
changes:
  description: What changed (in check mode - would change) on the host, each as C(kind) and C(path).
  returned: unless verify_only
  type: list
  elements: dict
  sample: [{"kind": "keyring", "path": "/usr/share/keyrings/gpufleet-a4b469963bf863cc.gpg"}]
installed:
  description: The prerequisite packages that were (would be) installed.
  returned: unless verify_only
  type: list
  elements: str
"""

import base64
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

SOURCES_DIR = "/etc/apt/sources.list.d"


def source_text(name: str, uris: str, suite: str, signed_by: str) -> str:
    """The deb822 source as ansible.builtin.deb822_repository writes it (its name first, then the fields sorted)."""
    return (f"X-Repolib-Name: {name}\nSigned-By: {signed_by}\nSuites: {suite}\nTypes: deb\nURIs: {uris}\n")


def auth_text(owner: str, shown: str, machine: str, login: str, password: str) -> str:
    """The apt_auth.conf(5) entry, with a comment that says who wrote it (the URL in it is masked)."""
    return (f"# Managed by gpufleet ({owner}): credentials of {shown}\n"
            f"machine {machine} login {login} password {password}\n")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _write(path: str, data: bytes, mode: int) -> None:
    """Write atomically (a temporary file in the same folder, then rename), owned by root with ``mode``."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gpufleet-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chown(tmp, 0, 0)
        # os.replace, not module.atomic_move: atomic_move gives a new file the umask's mode after the rename, which
        # would leave the credentials file world-readable for a moment. The temporary file has the mode from birth.
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _mode_of(path: str) -> int | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_mode & 0o7777 if (stat.st_uid, stat.st_gid) == (0, 0) else -1


def missing_packages(module: AnsibleModule, names: list[str]) -> list[str]:
    """The names that dpkg does not list as installed (``ii``)."""
    if not names:
        return []
    _, out, _ = module.run_command(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *names])
    installed = {line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1] == "ii"}
    return [name for name in names if name not in installed]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "uris": {"type": "str", "required": True},
            "suite": {"type": "str", "default": "/"},
            "signed_by": {"type": "path", "required": True},
            "keyring": {"type": "str", "required": True, "no_log": False},
            "owner": {"type": "str", "default": "gpufleet"},
            "shown": {"type": "str", "default": ""},
            "auth_file": {"type": "path", "required": True},
            "auth_machine": {"type": "str", "default": ""},
            # The login is not secret (apt_auth.conf(5) keeps it beside the password); no_log on it would mask every
            # occurrence of a short login in the result (a source named ...-nvidia-com under login "nvidia").
            "auth_login": {"type": "str", "default": "", "no_log": False},
            "auth_password": {"type": "str", "default": "", "no_log": True},
            "prerequisites": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    changes: list[dict[str, str]] = []
    before: dict[str, str] = {}
    after: dict[str, str] = {}

    missing = missing_packages(module, p["prerequisites"])
    if missing:
        changes.append({"kind": "packages", "path": " ".join(missing)})
        before["packages"], after["packages"] = "", " ".join(missing)
        if not module.check_mode:
            rc, out, err = module.run_command(
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                environ_update={"DEBIAN_FRONTEND": "noninteractive"})
            if rc != 0:
                module.fail_json(msg=f"{p['owner']}: cannot install {', '.join(missing)} before adding the "
                                     f"repository {p['shown']} (apt-get exit {rc}: {(err or out).strip()[-400:]}). "
                                     "Check the host's apt sources. Nothing else was changed.")

    keyring = base64.b64decode(p["keyring"])
    source_path = os.path.join(SOURCES_DIR, f"{p['name']}.sources")
    auth = (auth_text(p["owner"], p["shown"], p["auth_machine"], p["auth_login"], p["auth_password"]).encode()
            if p["auth_login"] else None)
    wanted = [
        ("keyring", p["signed_by"], keyring, 0o644),
        ("source", source_path, source_text(p["name"], p["uris"], p["suite"], p["signed_by"]).encode(), 0o644),
    ]
    if auth is not None:
        wanted.append(("credentials", p["auth_file"], auth, 0o600))
    for kind, path, data, mode in wanted:
        if _read(path) == data and _mode_of(path) == mode:
            continue
        changes.append({"kind": kind, "path": path})
        # The diff shows the source's text; never the credentials, and the keyring only by its size.
        shown_before = _read(path)
        if kind == "source":
            before[path] = (shown_before or b"").decode(errors="replace")
            after[path] = data.decode()
        else:
            before[path] = "" if shown_before is None else f"({len(shown_before)} bytes)"
            after[path] = f"({len(data)} bytes, mode {mode:04o})"
        if not module.check_mode:
            _write(path, data, mode)
    if auth is None and os.path.exists(p["auth_file"]):
        changes.append({"kind": "credentials removed", "path": p["auth_file"]})
        before[p["auth_file"]], after[p["auth_file"]] = "(credentials)", ""
        if not module.check_mode:
            os.unlink(p["auth_file"])

    result = {"changed": bool(changes), "name": p["name"], "keyring": p["signed_by"], "changes": changes,
              "installed": missing}
    if module._diff:
        result["diff"] = {"before": before, "after": after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
