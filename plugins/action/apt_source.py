# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Action plugin of gpufleet.nvidia.apt_source: the key is fetched and checked on the controller, in this process.

What the role's tasks did in seven controller-side tasks per host (a cache folder, get_url, two asserts, two gpg
commands) happens here in one Python call; a key whose primary fingerprint is not the pinned one is refused before
the host is contacted. Then, unless ``verify_only``, the module of the same name writes the host's side in one
round trip. The URL's credentials go to the module only as ``no_log`` options; nothing returned carries them.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import tempfile
from typing import Any
from urllib.error import HTTPError, URLError

from ansible.errors import AnsibleActionFail
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.nvidia.plugins.filter.baseline import url_credentials, url_mask

ARGS: dict[str, Any] = {
    "url": {"type": "str"},
    "suite": {"type": "str", "default": "/"},
    "key_url": {"type": "str", "required": True},
    "key_fingerprint": {"type": "str", "required": True},
    "owner": {"type": "str", "default": "gpufleet"},
    "timeout": {"type": "int", "default": 30},
    "prerequisites": {"type": "list", "elements": "str", "default": ["ca-certificates"]},
    "verify_only": {"type": "bool", "default": False},
    "key_cache": {"type": "path"},
}
KEYRING_DIR = "/usr/share/keyrings"
AUTH_DIR = "/etc/apt/auth.conf.d"
FINGERPRINT = re.compile(r"^[0-9A-F]{40}\Z")


def pinned_fingerprint(value: str) -> str:
    """The pinned fingerprint as gpg prints it: upper case, no spaces."""
    return str(value or "").upper().replace(" ", "")


def source_name(base: str) -> str:
    """``gpufleet-<host-port-path>`` of a credential-free URL: one name for one repository, whichever role asks."""
    match = re.match(r"^[a-z][a-z0-9+.-]*://([^/?#]*)([^?#]*)", base, re.IGNORECASE)
    netloc, path = (match.group(1), match.group(2)) if match else (base, "")
    return "gpufleet-" + re.sub(r"[^A-Za-z0-9]+", "-", netloc + path).strip("-").lower()


def keyring_path(fingerprint: str) -> str:
    """Named by the key: two sources of one repository then carry the same Signed-By, which apt requires."""
    return f"{KEYRING_DIR}/gpufleet-{fingerprint[-16:].lower()}.gpg"


def primary_fingerprints(colons: str) -> list[str]:
    """The fingerprint of each primary key (the ``fpr`` record that follows each ``pub`` record) in gpg's colons."""
    found, want = [], False
    for line in colons.splitlines():
        kind = line.split(":", 1)[0]
        if kind == "pub":
            want = True
        elif kind == "fpr" and want:
            fields = line.split(":")
            if len(fields) > 9 and fields[9]:
                found.append(fields[9])
            want = False
        elif kind in ("sub", "ssb"):
            want = False
    return found


def default_cache() -> str:
    """``$XDG_CACHE_HOME/gpufleet/keys``, or ``~/.cache/gpufleet/keys``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", "keys")


def check_key(owner: str, key_url: str, fingerprint: str, timeout: int, cache: str) -> bytes:
    """Download the key, refuse it unless its primary fingerprint is ``fingerprint``; return it as a binary keyring.

    Raises AnsibleActionFail with a message that names the key (credentials masked) and the variable to fix.
    """
    key = url_credentials(key_url)
    shown = key["shown"]
    if not FINGERPRINT.match(fingerprint):
        raise AnsibleActionFail(
            f"{owner}: no pinned fingerprint for the repository key {shown} (got \"{fingerprint}\"); set "
            f"{owner}_repo_key_fingerprint to its 40-digit fingerprint.")
    try:
        with open_url(key["url"], timeout=timeout, url_username=key["login"] or None,
                      url_password=key["password"] or None, force_basic_auth=bool(key["login"])) as answer:
            data = answer.read()
    except HTTPError as err:
        raise AnsibleActionFail(f"{owner}: cannot download the repository key {shown} (HTTP Error {err.code}: "
                                f"{err.reason}); check {owner}_repo_key_url and the network. Nothing was changed."
                                ) from None
    except (URLError, OSError, ValueError) as err:
        reason = err.reason if isinstance(err, URLError) else err
        raise AnsibleActionFail(f"{owner}: cannot download the repository key {shown} ({url_mask(reason)}); check "
                                f"{owner}_repo_key_url and the network. Nothing was changed.") from None
    gnupg = os.path.join(cache, "gnupg")
    os.makedirs(gnupg, mode=0o700, exist_ok=True)
    os.chmod(cache, 0o700)
    os.chmod(gnupg, 0o700)
    env = dict(os.environ, GNUPGHOME=gnupg)
    with tempfile.NamedTemporaryFile(dir=cache, prefix="key-", suffix=".key") as tmp:
        tmp.write(data)
        tmp.flush()
        shown_keys = subprocess.run(["gpg", "--batch", "--show-keys", "--with-colons", tmp.name], env=env,
                                    capture_output=True, text=True, check=False)
        found = primary_fingerprints(shown_keys.stdout)
        if not found or set(found) != {fingerprint}:
            raise AnsibleActionFail(
                f"{owner}: the repository key {shown} has fingerprint {', '.join(found) or 'none'}, not the pinned "
                f"{fingerprint}; refusing it. Check the key's origin, then fix {owner}_repo_key_url or "
                f"{owner}_repo_key_fingerprint. Nothing was changed.")
        binary = subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", "-", tmp.name], env=env,
                                capture_output=True, check=False)
    if binary.returncode != 0 or not binary.stdout:
        raise AnsibleActionFail(f"{owner}: gpg cannot convert the repository key {shown} into a keyring "
                                f"({binary.stderr.decode(errors='replace').strip()[-300:]}). Nothing was changed.")
    return binary.stdout


class ActionModule(ActionBase):
    """Check the key here, then (unless verify_only) write the host's side with the module."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGS)
        owner = args["owner"]
        fingerprint = pinned_fingerprint(args["key_fingerprint"])
        keyring = check_key(owner, args["key_url"], fingerprint, args["timeout"], args["key_cache"] or default_cache())
        result.update(changed=False, fingerprint=fingerprint, keyring=keyring_path(fingerprint))
        if args["verify_only"]:
            return result
        if not args["url"]:
            raise AnsibleActionFail(f"{owner}: apt_source needs url unless verify_only is set.")
        repo = url_credentials(args["url"])
        base = repo["url"].rstrip("/") + "/"
        name = source_name(base)
        module_args = {
            "name": name, "uris": base, "suite": args["suite"], "signed_by": keyring_path(fingerprint),
            "keyring": base64.b64encode(keyring).decode("ascii"), "owner": owner, "shown": repo["shown"],
            "auth_file": f"{AUTH_DIR}/{name}.conf", "auth_machine": repo["machine"], "auth_login": repo["login"],
            "auth_password": repo["password"], "prerequisites": args["prerequisites"],
        }
        answer = self._execute_module(module_name="gpufleet.nvidia.apt_source", module_args=module_args,
                                      task_vars=task_vars)
        answer.pop("invocation", None)   # the keyring in base64 and the masked credentials: nothing to read there
        result.update(answer)
        return result
