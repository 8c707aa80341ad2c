"""The internal gpufleet role: the one place for repository names, keyrings, apt credentials and container detection.

The repository's names and the key check live in gpufleet.nvidia.apt_source's action plugin (run on the controller);
the key check is exercised here with a real gpg and a key made for the test, served from a file: URL. Container
detection is rendered from the role's own task by Ansible's templating engine (see conftest.py). That a lab host
gets the source, keyring and credentials file is proven by tests/integration/test_baseline_secrets.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.gpufleet.nvidia.plugins.action import apt_source
from ansible_collections.gpufleet.nvidia.plugins.filter.baseline import url_credentials

from .conftest import find_task

ROLE = "gpufleet"
FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"


def _names(url: str, fingerprint: str) -> list[str]:
    repo = url_credentials(url)
    base = repo["url"].rstrip("/") + "/"
    name = apt_source.source_name(base)
    return [base, name, apt_source.keyring_path(apt_source.pinned_fingerprint(fingerprint)),
            f"{apt_source.AUTH_DIR}/{name}.conf", repo["machine"], repo["shown"]]


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
def test_repository_names_are_credential_free(url, fingerprint, expected) -> None:
    assert _names(url, fingerprint) == expected


@pytest.fixture(scope="module")
def made_key(tmp_path_factory) -> dict[str, object]:
    """A throw-away ed25519 key: its fingerprint (from gpg's own listing), armoured and binary exports."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Test Repo <repo@example.invalid>",
                    "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True,
                             capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armoured = home / "key.asc"
    armoured.write_bytes(subprocess.run(["gpg", "--batch", "--armor", "--export"], env=env, check=True,
                                        capture_output=True).stdout)
    binary = subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True).stdout
    return {"fingerprint": fingerprint, "armoured": armoured, "binary": binary}


def test_a_pinned_key_becomes_the_binary_keyring(made_key, tmp_path: Path) -> None:
    keyring = apt_source.check_key("nvidia_driver", made_key["armoured"].as_uri(), made_key["fingerprint"], 5,
                                   str(tmp_path / "cache"))
    assert keyring == made_key["binary"]
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    assert list((tmp_path / "cache").glob("key-*")) == []     # the download is not left behind


def test_a_key_with_another_fingerprint_is_refused(made_key, tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail) as err:
        apt_source.check_key("nvidia_driver", made_key["armoured"].as_uri(), FINGERPRINT, 5, str(tmp_path))
    assert str(err.value) == (
        f"nvidia_driver: the repository key {made_key['armoured'].as_uri()} has fingerprint "
        f"{made_key['fingerprint']}, not the pinned {FINGERPRINT}; refusing it. Check the key's origin, then fix "
        "nvidia_driver_repo_key_url or nvidia_driver_repo_key_fingerprint. Nothing was changed.")


def test_a_file_that_is_no_key_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<html>not a key</html>\n")
    with pytest.raises(AnsibleActionFail, match=r"has fingerprint none, not the pinned"):
        apt_source.check_key("nvidia_container_toolkit", page.as_uri(), FINGERPRINT, 5, str(tmp_path / "c"))


@pytest.mark.parametrize("fingerprint", ["", "0123", "0123456789ABCDEF0123456789ABCDEF0123456G"])
def test_no_pinned_fingerprint_is_refused_before_any_download(fingerprint, tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail) as err:
        apt_source.check_key("nvidia_driver", "https://u:s3cret@nowhere.invalid/k.pub",
                             apt_source.pinned_fingerprint(fingerprint), 5, str(tmp_path))
    assert str(err.value).startswith("nvidia_driver: no pinned fingerprint for the repository key "
                                     "https://***@nowhere.invalid/k.pub")
    assert "s3cret" not in str(err.value)
    assert not (tmp_path / "gnupg").exists()


def test_an_unreachable_key_is_refused_without_its_credentials(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail) as err:
        apt_source.check_key("nvidia_driver", "http://ci:s3cret@127.0.0.1:9/key.pub", FINGERPRINT, 5, str(tmp_path))
    message = str(err.value)
    assert message.startswith("nvidia_driver: cannot download the repository key http://***@127.0.0.1:9/key.pub (")
    assert message.endswith("); check nvidia_driver_repo_key_url and the network. Nothing was changed.")
    assert "s3cret" not in message


def test_primary_fingerprints_skip_the_subkeys() -> None:
    colons = ("pub:-:255:22:AAAA:1:::-:::scSC::::::23::0:\nfpr:::::::::" + FINGERPRINT + ":\n"
              "sub:-:255:18:BBBB:1::::::e::::::23:\nfpr:::::::::" + "F" * 40 + ":\n")
    assert apt_source.primary_fingerprints(colons) == [FINGERPRINT]


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
                    ansible_facts=facts, __gpufleet_container_markers={"matched": sum(markers)})
    assert result is container
