"""The node-baseline filters (plugins/filter/baseline.py) as pure functions: tables of fixed cases.

Version orderings come from deb-version(7) and Debian Policy 5.6.12 (the ``~`` rule, epochs, revisions), checked
with ``dpkg --compare-versions``; inventory strings from issue 13's injection report.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpufleet_baseline_filters", REPO / "plugins" / "filter" /
                                                  "baseline.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPO = Path(__file__).resolve().parents[3]
_filters = _load()
deb_packages = _filters.deb_packages
deb_pick_version = _filters.deb_pick_version
deb_version_compare = _filters.deb_version_compare
field_errors = _filters.field_errors
url_credentials = _filters.url_credentials
url_mask = _filters.url_mask

INJECTION = '--verbose\nExecStartPre=/bin/sh -c "id > /root/pwned"'


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("1.0~rc1", "1.0", -1),            # Policy 5.6.12: ~ sorts before the end of the part
        ("1.0~~", "1.0~~a", -1),
        ("1.0~~a", "1.0~", -1),
        ("1.0~", "1.0", -1),
        ("1.0", "1.0a", -1),
        ("1:0.1", "9.9", 1),              # the epoch wins
        ("570.172.08-1", "570.86.10-1", 1),  # numbers compare as numbers, not strings
        ("570.172.08-1", "570.172.08-2", -1),  # the revision decides last
        ("570.172.08-1", "570.172.08-1", 0),
        ("1.2.3", "1.2.3-0", 0),          # no revision equals revision 0
        ("1.0+b1", "1.0.1", -1),           # '+' sorts before '.' (both after letters)
        ("2.30", "2.4", 1),
    ],
)
def test_deb_version_compare_follows_dpkg(left, right, order) -> None:
    assert deb_version_compare(left, right) == order
    assert deb_version_compare(right, left) == -order


@pytest.mark.parametrize(
    ("versions", "requested", "chosen"),
    [
        (["570.86.10-1", "570.172.08-1", "570.124.06-1"], "", "570.172.08-1"),
        (["570.86.10-1", "570.172.08-1", "570.124.06-1"], "570.124.06", "570.124.06-1"),
        (["570.86.10-1", "570.172.08-1", "570.124.06-1"], "570.124.06-1", "570.124.06-1"),
        (["570.86.10-1", "570.172.08-1", "570.124.06-1"], "570.1", ""),
        (["570.195.03~rc1-1", "570.172.08-1"], "", "570.195.03~rc1-1"),
        (["575.51.02~rc-1", "575.51.02-1"], "", "575.51.02-1"),
        ([], "", ""),
        (None, "570.124.06", ""),
    ],
)
def test_deb_pick_version(versions, requested, chosen) -> None:
    assert deb_pick_version(versions, requested) == chosen


INDEX = """Package: cuda-drivers-570
Version: 570.86.10-1
Architecture: amd64

Package: nvidia-fabricmanager-570
Architecture: amd64
Version: 570.86.10-1

Package: cuda-drivers-570
Version: 570.172.08-1
Depends: nvidia-driver (>= 570.172.08)

Package: cuda-drivers-570
Version: 570.172.08-1

Package: cuda-drivers-5700
Version: 5700.1.1-1

Package: broken-stanza-without-version
Architecture: amd64
"""


def test_deb_packages_parses_every_stanza_whatever_the_field_order() -> None:
    assert deb_packages(INDEX) == {
        "cuda-drivers-570": ["570.86.10-1", "570.172.08-1"],
        "nvidia-fabricmanager-570": ["570.86.10-1"],
        "cuda-drivers-5700": ["5700.1.1-1"],
    }
    assert deb_packages("") == {}
    assert deb_packages(None) == {}


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("https://user:t0ken@mirror.example/cuda/", "https://***@mirror.example/cuda/"),
        ("https://token@mirror.example/", "https://***@mirror.example/"),
        ("ftp://builder:s3cret@mirror.example/simple/", "ftp://***@mirror.example/simple/"),
        ("https://mirror.example/cuda/", "https://mirror.example/cuda/"),
        ("https://mirror.example/a@b/", "https://mirror.example/a@b/"),
    ],
)
def test_url_mask(url, masked) -> None:
    assert url_mask(url) == masked


def test_url_credentials_split_for_apt_auth_conf() -> None:
    assert url_credentials("https://ci-bot:p%40ss:word@mirror.example:8443/cuda/debian12/x86_64/") == {
        "url": "https://mirror.example:8443/cuda/debian12/x86_64/",
        "shown": "https://***@mirror.example:8443/cuda/debian12/x86_64/",
        "login": "ci-bot",
        "password": "p%40ss:word",
        "machine": "https://mirror.example:8443/cuda/debian12/x86_64",
    }
    assert url_credentials("http://mirror.example/x/") == {
        "url": "http://mirror.example/x/", "shown": "http://mirror.example/x/", "login": "", "password": "",
        "machine": ""}


@pytest.mark.parametrize(
    ("name", "value", "kind", "error"),
    [
        ("nvidia_driver_persistenced_args", INJECTION, "args",
         'nvidia_driver: nvidia_driver_persistenced_args is not safe to write into a file or command line on the '
         'host (got "--verbose\\nExecStartPre=/bin/sh -c "id > /root/pwned""); it may hold only letters, '
         'digits, spaces and _ . / : = , @ % + - (no quotes, no shell or systemd syntax).'),
        ("nvidia_driver_persistenced_args", "--user root; reboot", "args",
         'nvidia_driver: nvidia_driver_persistenced_args is not safe to write into a file or command line on the '
         'host (got "--user root; reboot"); it may hold only letters, digits, spaces and _ . / : = , @ % + - (no '
         'quotes, no shell or systemd syntax).'),
        ("nvidia_driver_mok_key", "/var/lib/shim-signed/mok/../../../etc/shadow", "path",
         'nvidia_driver: nvidia_driver_mok_key is not safe to write into a file or command line on the host (got '
         '"/var/lib/shim-signed/mok/../../../etc/shadow"); it may hold only an absolute path of letters, digits '
         'and _ . / @ + -.'),
        ("nvidia_driver_mok_key", 'key"\nmok_signing_key="/tmp/x', "path",
         'nvidia_driver: nvidia_driver_mok_key is not safe to write into a file or command line on the host (got '
         '"key"\\nmok_signing_key="/tmp/x"); it may hold only an absolute path of letters, digits and _ . / @ '
         '+ -.'),
        ("nvidia_driver_repo_url", "https://u:tok@mirror.example/cuda/ trusted=yes", "url",
         'nvidia_driver: nvidia_driver_repo_url is not safe to write into a file or command line on the host (got '
         '"https://***@mirror.example/cuda/ trusted=yes"); it may hold only a URL without spaces, quotes or control '
         'characters.'),
        ("nvidia_driver_repo_suite", "/\nTrusted: yes", "suite",
         'nvidia_driver: nvidia_driver_repo_suite is not safe to write into a file or command line on the host (got '
         '"/\\nTrusted: yes"); it may hold only a Debian suite or path of letters, digits and _ . / ~ + -.'),
        ("nvidia_dcgm_hostengine_listen", "127.0.0.1:5555 --no-auth", "hostport",
         'nvidia_driver: nvidia_dcgm_hostengine_listen is not safe to write into a file or command line on the '
         'host (got "127.0.0.1:5555 --no-auth"); it may hold only host:port, the host a name, an IPv4 address or a '
         '[bracketed] IPv6 address.'),
        ("nvidia_driver_fabricmanager_ready_pattern", "ok\x1b[2J", "text",
         'nvidia_driver: nvidia_driver_fabricmanager_ready_pattern is not safe to write into a file or command line '
         'on the host (got "ok\\x1b[2J"); it may hold only one line of text without control characters.'),
    ],
)
def test_field_errors_refuse_unsafe_values(name, value, kind, error) -> None:
    assert field_errors({name: [value, kind]}, "nvidia_driver") == [error]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("--user root --persistence-mode --verbose", "args"),
        ("", "args"),
        (None, "path"),
        ("/var/lib/shim-signed/mok/MOK.priv", "path"),
        ("127.0.0.1:5555", "hostport"),
        ("[::1]:9400", "hostport"),
        ("dcgm.example.internal:5555", "hostport"),
        ("https://u:tok@mirror.example:8443/cuda/debian12/x86_64/", "url"),
        ("./", "suite"),
        ("bookworm/main", "suite"),
        ("DCGM_FI_DEV_GPU_TEMP", "word"),
        ("GPU temperature (in C).", "text"),
    ],
)
def test_field_errors_accept_values_that_fit(value, kind) -> None:
    assert field_errors({"some_var": [value, kind]}) == []


@pytest.mark.parametrize("fields", [["x"], {"x": "value"}, {"x": ["value", "shell"]}])
def test_field_errors_refuses_a_malformed_call(fields) -> None:
    with pytest.raises(AnsibleFilterError):
        field_errors(fields)
