"""The internal gpufleet role: the one place for repository names, keyrings, apt credentials and container detection.

Rendered from the role's own files by Ansible's templating engine (see conftest.py).
"""

from __future__ import annotations

import pytest

from .conftest import find_task

ROLE = "gpufleet"
FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"


def _repo(render, url: str, fingerprint: str = FINGERPRINT) -> list:
    return render(ROLE, ["{{ __gpufleet_apt_base }}", "{{ __gpufleet_apt_name }}", "{{ __gpufleet_keyring }}",
                         "{{ __gpufleet_auth_file }}", "{{ __gpufleet_repo.machine }}", "{{ __gpufleet_repo.shown }}"],
                  os_vars=None, gpufleet_apt_url=url, gpufleet_apt_key_url=url + "key.pub",
                  gpufleet_apt_key_fingerprint=fingerprint)




@pytest.mark.parametrize(
    ("url", "fingerprint", "expected"),
    [
        ("http://127.0.0.1:8765", FINGERPRINT,
         ["http://127.0.0.1:8765/", "gpufleet-127-0-0-1-8765", "/usr/share/keyrings/gpufleet-89abcdef01234567.gpg",
          "/etc/apt/auth.conf.d/gpufleet-127-0-0-1-8765.conf", "", "http://127.0.0.1:8765"]),
        # The credentials go to auth.conf.d: the source name, the file names and the shown URL never carry them.
        ("https://ci:t0k3n@mirror.example:8443/cuda/debian12/x86_64//",
         "0123 4567 89ab cdef 0123  4567 89ab cdef 0123 4567",
         ["https://mirror.example:8443/cuda/debian12/x86_64/", "gpufleet-mirror-example-8443-cuda-debian12-x86-64",
          "/usr/share/keyrings/gpufleet-89abcdef01234567.gpg",
          "/etc/apt/auth.conf.d/gpufleet-mirror-example-8443-cuda-debian12-x86-64.conf",
          "https://mirror.example:8443/cuda/debian12/x86_64", "https://***@mirror.example:8443/cuda/debian12/x86_64//"]),
    ],
)
def test_repository_names_are_credential_free(render, url, fingerprint, expected) -> None:
    assert _repo(render, url, fingerprint) == expected


@pytest.mark.parametrize(
    ("markers", "role", "vtype", "container"),
    [
        ([True, False], "", "", True),             # podman's /run/.containerenv
        ([False, True], "", "", True),             # docker's /.dockerenv
        ([False, False], "guest", "docker", True),
        ([False, False], "guest", "lxc", True),
        ([False, False], "guest", "systemd-nspawn", True),
        ([False, False], "host", "docker", False),  # a GPU node that runs containers is not one
        ([False, False], "guest", "kvm", False),    # a VM has its own kernel
        ([False, False], "", "", False),
    ],
)
def test_container_detection(render, markers, role, vtype, container) -> None:
    task = find_task(ROLE, "container.yml", "Decide whether the host is a container")
    facts = {"virtualization_role": role, "virtualization_type": vtype} if role else {}
    result = render(ROLE, task["ansible.builtin.set_fact"]["gpufleet_is_container"], os_vars=None,
                    ansible_facts=facts,
                    __gpufleet_container_markers={"results": [{"stat": {"exists": m}} for m in markers]})
    assert result is container
