"""nvidia_driver_repo_mirror: the host's repository, index and key under a mirror root of NVIDIA's tree (issue 20).

Rendered from the role's own vars/main.yml and preflight task; the expected URLs are written out by hand, as NVIDIA
lays its tree out (compute/cuda/repos/<debian12|ubuntu2204|ubuntu2404>/<x86_64|sbsa>/).
"""

from __future__ import annotations

import pytest

from .conftest import find_task

ROLE = "nvidia_driver"
PIN = "EB693B3035CD5710E231E123A4B469963BF863CC"


def _facts(arch: str = "x86_64") -> dict:
    return {"architecture": arch, "kernel": "6.1.0-28-amd64", "packages": {}}


@pytest.mark.parametrize(
    ("os_vars", "arch", "mirror", "base", "index", "key"),
    [
        ("Debian-12", "x86_64", "https://mirror.example/compute/cuda/repos",
         "https://mirror.example/compute/cuda/repos/debian12/x86_64/",
         "https://mirror.example/compute/cuda/repos/debian12/x86_64/Packages",
         "https://mirror.example/compute/cuda/repos/debian12/x86_64/3bf863cc.pub"),
        ("Ubuntu-22.04", "aarch64", "http://10.0.0.5:8080/nv//",
         "http://10.0.0.5:8080/nv/ubuntu2204/sbsa/", "http://10.0.0.5:8080/nv/ubuntu2204/sbsa/Packages",
         "http://10.0.0.5:8080/nv/ubuntu2204/sbsa/3bf863cc.pub"),
        ("Ubuntu-24.04", "x86_64", "https://user:tok@mirror.example/cuda/",
         "https://user:tok@mirror.example/cuda/ubuntu2404/x86_64/",
         "https://user:tok@mirror.example/cuda/ubuntu2404/x86_64/Packages",
         "https://user:tok@mirror.example/cuda/ubuntu2404/x86_64/3bf863cc.pub"),
    ],
)
def test_the_mirror_root_gives_the_hosts_repository_and_key(render, os_vars, arch, mirror, base, index,
                                                             key) -> None:
    values = render(ROLE, ["{{ __nvidia_driver_repo_base }}", "{{ __nvidia_driver_index_url }}",
                           "{{ __nvidia_driver_key_url }}", "{{ __nvidia_driver_key_fingerprint }}"],
                    os_vars=os_vars, ansible_facts=_facts(arch), nvidia_driver_repo_mirror=mirror)
    assert values == [base, index, key, PIN]


@pytest.mark.parametrize(
    ("mirror", "url", "origin"),
    [
        ("", "", "nvidia_driver_repo_url"),
        ("", "http://one.example/repo/", "nvidia_driver_repo_url"),
        ("http://m.example/cuda", "",
         "nvidia_driver_repo_mirror (the root of a mirror of NVIDIA's compute/cuda/repos, which must hold "
         "debian12/x86_64/)"),
    ],
)
def test_the_unreachable_index_message_names_the_variable_that_chose_the_url(render, mirror, url,
                                                                             origin) -> None:
    assert render(ROLE, "{{ __nvidia_driver_repo_origin }}", os_vars="Debian-12", ansible_facts=_facts(),
                  nvidia_driver_repo_mirror=mirror, nvidia_driver_repo_url=url) == origin


def _mirror_check(render, mirror: str, url: str = "") -> tuple[bool, str]:
    task = find_task(ROLE, "preflight.yml", "Check the repository mirror root")
    assertion = task["ansible.builtin.assert"]
    holds = all(render(ROLE, "{{ " + cond + " }}", nvidia_driver_repo_mirror=mirror, nvidia_driver_repo_url=url)
                for cond in assertion["that"])
    return holds, render(ROLE, assertion["fail_msg"], nvidia_driver_repo_mirror=mirror, nvidia_driver_repo_url=url)


@pytest.mark.parametrize(
    ("mirror", "url", "holds", "message"),
    [
        ("https://mirror.example/compute/cuda/repos", "", True, None),
        ("http://127.0.0.1:8765/compute/cuda/repos/", "", True, None),
        ("file:///srv/cuda", "", False,
         "nvidia_driver: nvidia_driver_repo_mirror must be the http(s) URL of the root of a mirror of NVIDIA's "
         "compute/cuda/repos tree, such as https://mirror.example/compute/cuda/repos (got \"file:///srv/cuda\"). "
         "Nothing was changed."),
        ("https://user:secret@mirror.example", "ftp://x", False, None),
        ("mirror.example/cuda", "", False,
         "nvidia_driver: nvidia_driver_repo_mirror must be the http(s) URL of the root of a mirror of NVIDIA's "
         "compute/cuda/repos tree, such as https://mirror.example/compute/cuda/repos (got \"mirror.example/cuda\"). "
         "Nothing was changed."),
        ("https://mirror.example/cuda", "https://mirror.example/cuda/debian12/x86_64/", False,
         "nvidia_driver: set nvidia_driver_repo_mirror (the root of a mirror of NVIDIA's tree) or "
         "nvidia_driver_repo_url (one repository), not both. Nothing was changed."),
    ],
)
def test_mirror_root_check(render, mirror, url, holds, message) -> None:
    got_holds, got_message = _mirror_check(render, mirror, url)
    assert got_holds is holds
    if message is not None:
        assert got_message == message
    assert "secret" not in got_message
