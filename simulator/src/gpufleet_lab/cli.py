"""``gpufleet-lab``: build the test-host image, start/stop hosts and fleets (the demo that drives the product
against them is ``tools/demo.py``, outside this distribution).

    gpufleet-lab image build [--force]
    gpufleet-lab hosts up NAME=PRESET... [--owner molecule] [--first-loopback N] [--fleet F]
    gpufleet-lab hosts down NAME... | hosts list
    gpufleet-lab fleet up [--name sim] [--count N] | fleet down [--name sim] | fleet status
    gpufleet-lab cleanup [--molecule]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence

from gpufleet_lab import fleet as fleet_mod
from gpufleet_lab import hosts as hosts_mod
from gpufleet_lab import image as image_mod
from gpufleet_lab.podman import LAB_OWNER, MOLECULE_OWNER, build_dir


def _image_build(args: argparse.Namespace) -> int:
    start = time.monotonic()
    report = image_mod.ensure_image(force=args.force)
    state = "built" if report.built_tarball else "cached"
    print(f"image {image_mod.IMAGE} recipe {report.digest}: tarball {state} ({report.tarball_s:.1f} s), "
          f"{'imported' if report.imported else 'already imported'} ({report.import_s:.1f} s); "
          f"total {time.monotonic() - start:.1f} s")
    return 0


def _parse_pairs(pairs: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        name, sep, preset = pair.partition("=")
        if not sep or not name or not preset:
            raise SystemExit(f"gpufleet-lab: expected NAME=PRESET, got {pair!r}")
        out.append((name, preset))
    return out


def _hosts_up(args: argparse.Namespace) -> int:
    image_mod.ensure_image()
    specs = [hosts_mod.HostSpec(name=name, preset=preset,
                                loopback=hosts_mod.loopback_address(args.first_loopback + i),
                                owner=args.owner, fleet=args.fleet)
             for i, (name, preset) in enumerate(_parse_pairs(args.hosts))]
    start = time.monotonic()
    started = hosts_mod.start_hosts(specs)
    rows = [{"name": h.name, "preset": h.spec.preset, "loopback": h.spec.loopback, "gpus": h.gpus,
             "pci_devices": len(h.pci_devices), "boot_s": round(h.boot_s, 2)} for h in started]
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['name']}: {row['preset']} ({row['gpus']} GPUs, {row['pci_devices']} PCI devices) "
                  f"on {row['loopback']}")
        print(f"{len(rows)} host(s) up in {time.monotonic() - start:.1f} s")
    return 0


def _hosts_down(args: argparse.Namespace) -> int:
    removed = hosts_mod.stop_hosts(args.names, owners=(args.owner,))
    print(f"removed: {', '.join(removed) or 'nothing'}")
    return 0


def _hosts_list(args: argparse.Namespace) -> int:
    for row in hosts_mod.list_hosts(args.owner):
        print(f"{row['name']}\t{row['state']}\t{row['preset']}\t{row['loopback']}\t{row['fleet']}")
    return 0


def _fleet_up(args: argparse.Namespace) -> int:
    fleet = fleet_mod.up(args.name, args.count)
    for host in fleet.hosts:
        print(f"{host['name']}: {host['preset']} ({host['gpus']} GPUs) on {host['loopback']}")
    print(f"fleet {fleet.name} up: inventory {fleet.inventory}; "
          f"hosts started in {fleet.timings.get('hosts_s', 0):.1f} s; stop it with `gpufleet-lab fleet down"
          f"{'' if args.name == fleet_mod.SIM_FLEET else ' --name ' + args.name}`")
    return 0


def _fleet_down(args: argparse.Namespace) -> int:
    removed = fleet_mod.down(args.name)
    print(f"fleet {args.name} down; removed: {', '.join(removed) or 'nothing'}")
    return 0


def _fleet_status(args: argparse.Namespace) -> int:
    rows = hosts_mod.list_hosts(LAB_OWNER, fleet=args.name)
    for row in rows:
        print(f"{row['name']}\t{row['state']}\t{row['preset']}\t{row['loopback']}")
    print(f"{len(rows)} host(s) in fleet {args.name}")
    return 0


def _cleanup(args: argparse.Namespace) -> int:
    removed = hosts_mod.cleanup((LAB_OWNER, MOLECULE_OWNER) if args.molecule else (LAB_OWNER,))
    for record in sorted((build_dir() / "fleets").glob("*.json")):
        fleet_mod.down(record.stem)
    print(f"removed: {', '.join(removed) or 'nothing'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``gpufleet-lab``."""
    parser = argparse.ArgumentParser(prog="gpufleet-lab", description="Throw-away simulated GPU test hosts.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each command run")
    sub = parser.add_subparsers(dest="command", required=True)

    image = sub.add_parser("image", help="the test-host image").add_subparsers(dest="action", required=True)
    build = image.add_parser("build", help="build and import the image (cached by recipe hash)")
    build.add_argument("--force", action="store_true", help="rebuild even when the cache is current")
    build.set_defaults(func=_image_build)

    hosts = sub.add_parser("hosts", help="single hosts (used by Molecule)").add_subparsers(dest="action",
                                                                                         required=True)
    h_up = hosts.add_parser("up", help="start hosts NAME=PRESET")
    h_up.add_argument("hosts", nargs="+", metavar="NAME=PRESET")
    h_up.add_argument("--owner", default=LAB_OWNER, choices=[LAB_OWNER, MOLECULE_OWNER])
    h_up.add_argument("--first-loopback", type=int, default=1, help="N of the first host's 127.0.N.1")
    h_up.add_argument("--fleet", default="")
    h_up.add_argument("--json", action="store_true")
    h_up.set_defaults(func=_hosts_up)
    h_down = hosts.add_parser("down", help="remove hosts by name (only ours)")
    h_down.add_argument("names", nargs="+")
    h_down.add_argument("--owner", default=LAB_OWNER, choices=[LAB_OWNER, MOLECULE_OWNER])
    h_down.set_defaults(func=_hosts_down)
    h_list = hosts.add_parser("list", help="list our hosts")
    h_list.add_argument("--owner", default=LAB_OWNER, choices=[LAB_OWNER, MOLECULE_OWNER])
    h_list.set_defaults(func=_hosts_list)

    fleet = sub.add_parser("fleet", help="a whole simulated fleet").add_subparsers(dest="action", required=True)
    f_up = fleet.add_parser("up", help="start the repository server and the fleet's hosts; they keep running")
    f_up.add_argument("--name", default=fleet_mod.SIM_FLEET)
    f_up.add_argument("--count", type=int, default=None, help="N synthetic hosts instead of inventories/sim")
    f_up.set_defaults(func=_fleet_up)
    f_down = fleet.add_parser("down", help="stop the fleet's hosts and the server it started")
    f_down.add_argument("--name", default=fleet_mod.SIM_FLEET)
    f_down.set_defaults(func=_fleet_down)
    f_status = fleet.add_parser("status", help="list the fleet's hosts")
    f_status.add_argument("--name", default=fleet_mod.SIM_FLEET)
    f_status.set_defaults(func=_fleet_status)

    clean = sub.add_parser("cleanup", help="remove every lab host and stop the repository servers fleets started")
    clean.add_argument("--molecule", action="store_true", help="also remove containers labelled owner=molecule")
    clean.set_defaults(func=_cleanup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gpufleet-lab``; returns the exit code."""
    arguments = build_parser()
    from importlib.metadata import PackageNotFoundError, version

    try:
        dist_version = version("gpufleet-sim")
    except PackageNotFoundError:  # a checkout used without installing it
        dist_version = "0.0.0+checkout"
    arguments.add_argument("--version", action="version", version=f"%(prog)s {dist_version}")
    args = arguments.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args))
    except (hosts_mod.HostError, fleet_mod.FleetError, image_mod.PodmanError, RuntimeError) as exc:
        print(f"gpufleet-lab: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
