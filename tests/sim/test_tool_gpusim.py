"""The ``gpusim`` command: host init from a preset, show, fault inject/clear, reset, process add/remove."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet_sim import cli, presets, store


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_host_init_show_faults_and_reset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.json"
    preset = presets.list_presets()[0]
    rc, out, _ = run(capsys, "host", "init", "--preset", preset, "--seed", "node-1", "--state", str(state))
    assert rc == 0
    gpus = store.load(state)["gpus"]
    assert out == f"{state}: {len(gpus)} GPUs ({preset}, seed node-1)\n"
    rc, _, err = run(capsys, "host", "init", "--preset", preset, "--seed", "x", "--state", str(state))
    assert (rc, err) == (1, f"gpusim: {state} already exists; pass --force to replace it\n")
    rc, out, _ = run(capsys, "fault", "inject", "xid", "79", "-i", "0", "--state", str(state))
    assert out == "injected: XID 79 on GPU 0\n"
    run(capsys, "process", "add", "-i", "0", "--pid", "4242", "--state", str(state))
    rc, out, _ = run(capsys, "show", "--state", str(state))
    first = out.splitlines()[1].split()
    assert (first[0], first[-2], first[-1]) == ("0", "4242", "xid")
    rc, _, err = run(capsys, "reset", "-i", "0", "--state", str(state))
    bus = gpus[0]["pci"]["bus_id"]
    assert (rc, err) == (1, f"gpusim: The following GPUs could not be reset:\n  GPU {bus}: In use by another client\n")
    run(capsys, "process", "remove", "-i", "0", "--pid", "4242", "--state", str(state))
    assert run(capsys, "reset", "-i", "0", "--state", str(state))[1] == f"GPU {bus} was successfully reset.\n"
    assert run(capsys, "fault", "clear", "--state", str(state))[1] == "cleared GPU 0: xid\n"
    assert store.load(state)["gpus"][0]["events"] == []


def test_fault_needs_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["fault", "inject", "remap-failure", "--state", str(tmp_path / "s.json")])
    assert "the following arguments are required: -i/--gpu" in capsys.readouterr().err


def test_unknown_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "host", "init", "--preset", "nope", "--seed", "s", "--state", str(tmp_path / "s.json"))
    assert rc == 1
    assert err.startswith("gpusim: unknown preset 'nope'; known: ")
