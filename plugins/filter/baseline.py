# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Filters shared by the node-baseline roles (nvidia_driver, nvidia_container_toolkit, nvml_python, nvidia_dcgm).

One implementation of each fact the roles used to spell out in Jinja, each unit-tested as pure Python:

* ``field_errors``: inventory strings that end up in a unit file, a config file or a command line, checked against
  the character set of their field (no newline, no control character, no shell or systemd syntax);
* ``url_mask`` / ``url_credentials``: a repository URL with credentials (``https://user:token@mirror/...``) is
  shown masked, and split into a credential-free URL plus an apt ``auth.conf`` entry (apt_auth.conf(5));
* ``deb_packages`` / ``deb_pick_version``: a Debian ``Packages`` index parsed into ``{package: [versions]}``, and
  the version to install chosen with dpkg's ordering (deb-version(7)), not a string or loose-version compare.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ansible.errors import AnsibleFilterError

# What each kind of field may hold: (regex of the whole value, what the user is told is allowed).
FIELD_KINDS: dict[str, tuple[str, str]] = {
    "args": (r"[A-Za-z0-9 _./:=,@%+-]*",
             "letters, digits, spaces and _ . / : = , @ % + - (no quotes, no shell or systemd syntax)"),
    "path": (r"/[A-Za-z0-9_./@+-]*", "an absolute path of letters, digits and _ . / @ + -"),
    "hostport": (r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}",
                 "host:port, the host a name, an IPv4 address or a [bracketed] IPv6 address"),
    "url": (r"[a-z][a-z0-9+.-]*://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+",
            "a URL without spaces, quotes or control characters"),
    "suite": (r"[A-Za-z0-9_./~+-]+", "a Debian suite or path of letters, digits and _ . / ~ + -"),
    "word": (r"[A-Za-z0-9_.:~+-]+", "letters, digits and _ . : ~ + -"),
    "text": (r"[^\x00-\x1f\x7f]*", "one line of text without control characters"),
}
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def url_mask(url: Any) -> str:
    """The URL with the user information (``user:token@``) replaced by ``***@``; other strings as they are."""
    return _USERINFO.sub(r"\1***@", str(url))


def _shown(value: str, kind: str) -> str:
    """A value as an error message may show it: masked when it is a URL, escapes visible, bounded in length."""
    shown = url_mask(value) if kind == "url" or "://" in value else value
    shown = shown.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= 80 else shown[:77] + "..."


def field_errors(fields: Any, role: str = "") -> list[str]:
    """One sentence per field whose value does not fit its kind (see FIELD_KINDS); an empty list when all fit.

    ``fields`` is a mapping ``{variable name: [value, kind]}``; a value of None or "" is accepted (the roles treat
    it as "not set").
    """
    if not isinstance(fields, dict):
        raise AnsibleFilterError(f"field_errors takes a mapping of variable name to [value, kind], "
                                 f"not {type(fields).__name__}")
    prefix = f"{role}: " if role else ""
    errors = []
    for name, spec in fields.items():
        if not isinstance(spec, (list, tuple)) or len(spec) != 2 or spec[1] not in FIELD_KINDS:
            raise AnsibleFilterError(f"field_errors: {name} needs [value, kind] with kind one of "
                                     f"{', '.join(FIELD_KINDS)} (got {spec!r})")
        value, kind = spec
        if value is None or value == "":
            continue
        pattern, allowed = FIELD_KINDS[kind]
        text = str(value)
        if not re.fullmatch(pattern, text, flags=re.ASCII) or (kind == "path" and "/../" in text + "/"):
            errors.append(f"{prefix}{name} is not safe to write into a file or command line on the host "
                          f"(got \"{_shown(text, kind)}\"); it may hold only {allowed}.")
    return errors


def url_credentials(url: Any) -> dict[str, str]:
    """Split a URL into a credential-free ``url`` and, when it had user information, an apt auth.conf entry.

    Returns ``{"url", "shown", "login", "password", "machine"}``; ``machine`` is ``[scheme://]host[:port]/path``
    as apt_auth.conf(5) matches it (apt applies an entry without a scheme to https only, so the scheme is kept).
    """
    text = str(url)
    parts = urlsplit(text)
    netloc = parts.netloc
    login = password = ""
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        login, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    machine = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}" if login else ""
    return {"url": clean, "shown": url_mask(text), "login": login, "password": password, "machine": machine}


def deb_packages(index: Any) -> dict[str, list[str]]:
    """``{package: [version, ...]}`` from a Debian ``Packages`` index (versions unique, in index order)."""
    packages: dict[str, list[str]] = {}
    for stanza in re.split(r"\n\s*\n", str(index or "")):
        fields = dict(re.findall(r"(?m)^([A-Za-z0-9-]+):[ \t]*(.*?)[ \t]*$", stanza))
        name, version = fields.get("Package"), fields.get("Version")
        if name and version:
            versions = packages.setdefault(name, [])
            if version not in versions:
                versions.append(version)
    return packages


def _order(char: str) -> int:
    """dpkg's order of one character of a non-digit part: ~ first, then the end, letters, then the rest."""
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    """dpkg's verrevcmp of an upstream version or a revision."""
    i = j = 0
    while i < len(left) or j < len(right):
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            a = _order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            b = _order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if a != b:
                return -1 if a < b else 1
            i += 1
            j += 1
        start_i, start_j = i, j
        while i < len(left) and left[i].isdigit():
            i += 1
        while j < len(right) and right[j].isdigit():
            j += 1
        a_num, b_num = int(left[start_i:i] or 0), int(right[start_j:j] or 0)
        if a_num != b_num:
            return -1 if a_num < b_num else 1
    return 0


def deb_version_compare(left: str, right: str) -> int:
    """-1, 0 or 1, as ``dpkg --compare-versions`` orders ``[epoch:]upstream[-revision]``."""
    def split(version: str) -> tuple[int, str, str]:
        epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
        return int(epoch or 0), upstream, revision

    (e1, u1, r1), (e2, u2, r2) = split(str(left)), split(str(right))
    if e1 != e2:
        return -1 if e1 < e2 else 1
    return _compare_part(u1, u2) or _compare_part(r1, r2)


def deb_pick_version(versions: Any, requested: Any = "") -> str:
    """The version to install: the one that ``requested`` names (``570.172.08`` matches ``570.172.08-1``), or the
    newest by dpkg's ordering when nothing is requested; "" when none fits."""
    candidates = [str(v) for v in (versions or [])]
    wanted = str(requested or "")
    if wanted:
        matches = [v for v in candidates if v == wanted or v.startswith(wanted + "-")]
        return matches[0] if matches else ""
    best = ""
    for version in candidates:
        if not best or deb_version_compare(version, best) > 0:
            best = version
    return best


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "field_errors": field_errors,
            "url_mask": url_mask,
            "url_credentials": url_credentials,
            "deb_packages": deb_packages,
            "deb_pick_version": deb_pick_version,
        }
