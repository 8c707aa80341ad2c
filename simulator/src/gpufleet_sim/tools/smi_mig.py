"""``nvidia-smi mig``: list profiles and placements, create and destroy GPU and compute instances.

Every rule (placements, capacity, IN_USE, MIG mode) lives in the simulated libnvidia-ml; this module only
formats NVIDIA's tables and messages around pynvml calls.
"""

from __future__ import annotations

import argparse
from typing import Any

from . import _common
from ._common import ToolError
from .smi_common import Gpu, Smi, ci_name, exit_status, profile_name

NO_MIG = "No MIG-enabled devices found."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # nvidia-smi's wording, exit 2
        raise ToolError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.",
                        _common.EXIT_INVALID_ARGUMENT)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nvidia-smi mig", add_help=False, allow_abbrev=False)
    p.add_argument("-i", "--id", dest="gpu")
    p.add_argument("-gi", "--gpu-instance-id", dest="gi")
    p.add_argument("-ci", "--compute-instance-id", dest="ci")
    p.add_argument("-C", "--default-compute-instance", dest="C", action="store_true")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-lgip", "--list-gpu-instance-profiles", dest="lgip", action="store_true")
    g.add_argument("-lgipp", "--list-gpu-instance-possible-placements", dest="lgipp", action="store_true")
    g.add_argument("-lgi", "--list-gpu-instances", dest="lgi", action="store_true")
    g.add_argument("-cgi", "--create-gpu-instance", dest="cgi")
    g.add_argument("-dgi", "--destroy-gpu-instance", dest="dgi", action="store_true")
    g.add_argument("-lcip", "--list-compute-instance-profiles", dest="lcip", action="store_true")
    g.add_argument("-lci", "--list-compute-instances", dest="lci", action="store_true")
    g.add_argument("-cci", "--create-compute-instance", dest="cci", nargs="?", const="")
    g.add_argument("-dci", "--destroy-compute-instance", dest="dci", action="store_true")
    return p


def _ids(spec: str | None) -> set[int] | None:
    if spec is None:
        return None
    try:
        return {int(x) for x in spec.split(",") if x.strip()}
    except ValueError as exc:
        raise ToolError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.",
                        _common.EXIT_INVALID_ARGUMENT) from exc


def main(argv: list[str], smi_factory: Any = Smi) -> int:
    """Run ``nvidia-smi mig ...``; return the exit status."""

    args = _parser().parse_args(argv)
    smi = smi_factory()
    gpus = smi.select(args.gpu)
    mig_gpus = [g for g in gpus if (smi.mig_mode(g.handle) or (0, 0))[0]]
    if not mig_gpus:
        print(NO_MIG)
        return _common.EXIT_NOT_FOUND
    if args.lgip or args.lgipp:
        return _list_profiles(smi, mig_gpus, placements=args.lgipp)
    if args.lgi:
        return _list_gis(smi, mig_gpus, _ids(args.gi))
    if args.cgi is not None:
        return _create_gis(smi, mig_gpus, args.cgi, args.C)
    if args.dgi:
        return _destroy_gis(smi, mig_gpus, _ids(args.gi))
    if args.lcip:
        return _list_ci_profiles(smi, mig_gpus, _ids(args.gi))
    if args.lci:
        return _list_cis(smi, mig_gpus, _ids(args.gi), _ids(args.ci))
    if args.cci is not None:
        return _create_cis(smi, mig_gpus, _ids(args.gi), args.cci)
    return _destroy_cis(smi, mig_gpus, _ids(args.gi), _ids(args.ci))


# ------------------------------------------------------------------------------------------------ GI profiles


def gi_profiles_535(smi: Smi, handle: Any) -> list[Any]:
    """The GPU's GI profiles in the order NVIDIA's 535 nvidia-smi lists them: by slice count, then profile enum.

    NVIDIA's 535 binary on an A100 (``mig -lgip``): 19 (1g.5gb), 20 (1g.5gb+me), 15 (1g.10gb), 14, 9, 5, 0.
    """
    return sorted(smi.gi_profiles(handle), key=lambda prof: int(prof.sliceCount))  # stable: enum order kept


def gpu_instances_535(smi: Smi, handle: Any) -> list[tuple[Any, Any, Any]]:
    """``(profile_info, gi_handle, gi_info)`` in 535's order: by profile (as ``-lgip``), then GI id."""
    rank = {int(prof.id): pos for pos, prof in enumerate(gi_profiles_535(smi, handle))}
    return sorted(smi.gpu_instances(handle), key=lambda item: (rank.get(int(item[0].id), 99), int(item[2].id)))


def _list_profiles(smi: Smi, gpus: list[Gpu], placements: bool) -> int:
    nv = smi.nvml
    lines: list[str] = []
    bar = "+" + "-" * 77 + "+"
    if not placements:
        lines += [bar, f"| {'GPU instance profiles:':<76}|",
                  "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
                  "|                              Free/Total   GiB              CE    JPEG  OFA  |",
                  "|" + "=" * 77 + "|"]
    for gpu in gpus:
        for prof in gi_profiles_535(smi, gpu.handle):
            name = profile_name(prof)
            if placements:
                lines.append(_placement_line(smi, gpu, prof))
                continue
            free = smi.call(nv.nvmlDeviceGetGpuInstanceRemainingCapacity, gpu.handle, prof.id, default=0)
            mem = f"{int(prof.memorySizeMB) / 1024:.2f}"
            p2p = "Yes" if int(getattr(prof, "isP2pSupported", 0)) else "No"
            lines.append(f"|  {gpu.index:>2}  MIG {name:<13}{prof.id:>3}   {f'{free}/{prof.instanceCount}':>5}"
                         f"        {mem:<10} {p2p:<6}{prof.multiprocessorCount:>3}   {prof.decoderCount:>3}"
                         f"   {prof.encoderCount:>3}   |")
            lines.append(f"|{'':59}{prof.copyEngineCount:>3}   {prof.jpegCount:>3}   {prof.ofaCount:>3}   |")
            lines.append(bar)
    print("\n".join(lines))
    return _common.EXIT_OK


def _placement_line(smi: Smi, gpu: Gpu, prof: Any) -> str:
    nv = smi.nvml
    count = nv.c_uint(0)
    array = (nv.c_nvmlGpuInstancePlacement_t * max(int(prof.instanceCount), 8))()
    count.value = len(array)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(gpu.handle, prof.id, array, nv.byref(count))
    places = [array[i] for i in range(count.value)]
    starts = ",".join(str(p.start) for p in places)
    size = places[0].size if places else 0
    word = "Placements" if len(places) > 1 else "Placement "
    return f"GPU {gpu.index:>2} Profile ID {prof.id:>2} {word}: {{{starts}}}:{size}"


# ------------------------------------------------------------------------------------------------ GIs


def _list_gis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None) -> int:
    rows = []
    for gpu in gpus:
        for prof, _gi, info in gpu_instances_535(smi, gpu.handle):
            if gi_ids is None or int(info.id) in gi_ids:
                rows.append((gpu, prof, info))
    if not rows:
        print("No GPU instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    bar = "+" + "-" * 55 + "+"
    lines = [bar, "| GPU instances:                                        |",
             "| GPU   Name             Profile  Instance   Placement  |",
             "|                          ID       ID       Start:Size |",
             "|" + "=" * 55 + "|"]
    for gpu, prof, info in rows:
        place = f"{info.placement.start}:{info.placement.size}"
        lines.append(f"|  {gpu.index:>2}  MIG {profile_name(prof):<15}{prof.id:>3}{info.id:>9}{place:>13}     |")
        lines.append(bar)
    print("\n".join(lines))
    return _common.EXIT_OK


def _resolve_profiles(smi: Smi, gpu: Gpu, spec: str) -> list[tuple[Any, int | None]]:
    """Profile infos (and optional placement starts) for a ``-cgi`` list of ids or names."""
    profiles = smi.gi_profiles(gpu.handle)
    result = []
    for raw in (x.strip() for x in spec.split(",") if x.strip()):
        token, _, start = raw.partition(":")
        token = token[4:].strip() if token.upper().startswith("MIG ") else token
        match = [p for p in profiles if (token.isdigit() and int(p.id) == int(token)) or profile_name(p) == token]
        if not match:
            raise ToolError(f"Unable to create a GPU instance on GPU {gpu.index:>2} using profile {raw}: "
                            "Invalid Argument", _common.EXIT_INVALID_ARGUMENT)
        result.append((match[0], int(start) if start.isdigit() else None))
    return result


def _create_gis(smi: Smi, gpus: list[Gpu], spec: str, default_ci: bool) -> int:
    nv = smi.nvml
    status = _common.EXIT_OK
    for gpu in gpus:
        for prof, start in _resolve_profiles(smi, gpu, spec):
            try:
                if start is None:
                    gi = nv.nvmlDeviceCreateGpuInstance(gpu.handle, prof.id)
                else:
                    place = nv.c_nvmlGpuInstancePlacement_t()
                    place.start, place.size = start, _profile_size(smi, gpu, prof)
                    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(gpu.handle, prof.id, nv.byref(place))
            except nv.NVMLError as exc:
                print(f"Unable to create a GPU instance on GPU {gpu.index:>2} using profile {prof.id}: {exc}\n"
                      f"Failed to create GPU instances: {exc}")
                return exit_status(exc.value)  # 535 stops at the first failure
            info = nv.nvmlGpuInstanceGetInfo(gi)
            print(f"Successfully created GPU instance ID {info.id:>2} on GPU {gpu.index:>2} using profile "
                  f"MIG {profile_name(prof)} (ID {prof.id:>2})")
            if default_ci:
                status = _create_ci(smi, gpu, gi, prof, None) or status
    return status


def _profile_size(smi: Smi, gpu: Gpu, prof: Any) -> int:
    nv = smi.nvml
    array = (nv.c_nvmlGpuInstancePlacement_t * 8)()
    count = nv.c_uint(8)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(gpu.handle, prof.id, array, nv.byref(count))
    return int(array[0].size) if count.value else 1


def _destroy_gis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None) -> int:
    nv = smi.nvml
    status, found, failure = _common.EXIT_OK, False, None
    for gpu, _prof, gi, info in _selected_gis(smi, gpus, gi_ids):  # 535 destroys in -lgi's order
        found = True
        try:
            nv.nvmlGpuInstanceDestroy(gi)
        except nv.NVMLError as exc:
            print(f"Unable to destroy GPU instance ID {info.id:>2} from GPU {gpu.index:>2}: {exc}")
            status, failure = exit_status(exc.value), exc
            break  # 535 stops at the first failure
        print(f"Successfully destroyed GPU instance ID {info.id:>2} from GPU {gpu.index:>2}")
    if not found:
        print("No GPU instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    if failure is not None:
        print(f"Failed to destroy GPU instances: {failure}")
    return status


# ------------------------------------------------------------------------------------------------ CIs


def _selected_gis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None) -> list[tuple[Gpu, Any, Any, Any]]:
    return [(gpu, prof, gi, info) for gpu in gpus for prof, gi, info in gpu_instances_535(smi, gpu.handle)
            if gi_ids is None or int(info.id) in gi_ids]


def _list_ci_profiles(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None) -> int:
    nv = smi.nvml
    gis = _selected_gis(smi, gpus, gi_ids)
    if not gis:
        print("No GPU instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    bar = "+" + "-" * 86 + "+"
    lines = [bar, f"| {'Compute instance profiles:':<85}|",
             "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
             "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
             "|         ID                                                          CE    JPEG       |",
             "|" + "=" * 86 + "|"]
    for gpu, gi_prof, gi, info in gis:
        profiles = smi.ci_profiles(gi)
        default_id = max((int(p.id) for p in profiles), default=0)
        for prof in profiles:
            free = smi.call(nv.nvmlGpuInstanceGetComputeInstanceRemainingCapacity, gi, prof.id, default=0)
            star = "*" if int(prof.id) == default_id else " "
            lines.append(f"|  {gpu.index:>2}{info.id:>7}       MIG {ci_name(prof, gi_prof):<15}{prof.id:>3}{star}     "
                         f"{f'{free}/{prof.instanceCount}':<8}{prof.multiprocessorCount:>8}"
                         f"{prof.sharedDecoderCount:>9}{prof.sharedEncoderCount:>6}{prof.sharedOfaCount:>6}   |")
            lines.append(f"|{'':62}{prof.sharedCopyEngineCount:>9}{prof.sharedJpegCount:>6}{'':9}|")
            lines.append(bar)
    print("\n".join(lines))
    return _common.EXIT_OK


def _list_cis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None, ci_ids: set[int] | None) -> int:
    rows = []
    for gpu, gi_prof, gi, info in _selected_gis(smi, gpus, gi_ids):
        for prof, ci in smi.compute_instances(gi):
            if ci_ids is None or int(ci.id) in ci_ids:
                rows.append((gpu, info, gi_prof, prof, ci))
    if not rows:
        print("No compute instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    bar = "+" + "-" * 68 + "+"
    lines = [bar, f"| {'Compute instances:':<67}|",
             f"| {'GPU     GPU       Name             Profile   Instance   Placement':<67}|",
             f"| {'      Instance                       ID        ID       Start:Size':<67}|",
             f"| {'        ID':<67}|",
             "|" + "=" * 68 + "|"]
    for gpu, info, gi_prof, prof, ci in rows:
        place = f"{ci.placement.start}:{ci.placement.size}"
        lines.append(f"|  {gpu.index:>2}{info.id:>7}       MIG {ci_name(prof, gi_prof):<15}{prof.id:>3}{ci.id:>10}"
                     f"{place:>13}     |")
        lines.append(bar)
    print("\n".join(lines))
    return _common.EXIT_OK


def _create_ci(smi: Smi, gpu: Gpu, gi: Any, gi_prof: Any, token: str | None) -> int:
    nv = smi.nvml
    gi_id = int(nv.nvmlGpuInstanceGetInfo(gi).id)
    profiles = smi.ci_profiles(gi)
    if token is None:
        match = [max(profiles, key=lambda p: int(p.sliceCount))] if profiles else []
    else:
        match = [p for p in profiles
                 if (token.isdigit() and int(p.id) == int(token)) or ci_name(p, gi_prof) == token.removeprefix("MIG ")]
    if not match:
        print(f"Unable to create a compute instance on GPU {gpu.index:>2} GPU instance ID {gi_id:>2} using profile "
              f"{token}: Invalid Argument\nFailed to create compute instances: Invalid Argument")
        return _common.EXIT_INVALID_ARGUMENT
    prof = match[0]
    try:
        ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, prof.id)
    except nv.NVMLError as exc:
        print(f"Unable to create a compute instance on GPU {gpu.index:>2} GPU instance ID {gi_id:>2} using profile "
              f"{'default' if token is None else prof.id}: {exc}\nFailed to create compute instances: {exc}")
        return exit_status(exc.value)
    ci_info = nv.nvmlComputeInstanceGetInfo(ci)
    print(f"Successfully created compute instance ID {ci_info.id:>2} on GPU {gpu.index:>2} GPU instance ID "
          f"{gi_id:>2} using profile MIG {ci_name(prof, gi_prof)} (ID {prof.id:>2})")
    return _common.EXIT_OK


def _create_cis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None, spec: str) -> int:
    gis = _selected_gis(smi, gpus, gi_ids)
    if not gis:
        print("No GPU instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    tokens: list[str | None] = [t.strip() for t in spec.split(",") if t.strip()] or [None]
    status = _common.EXIT_OK
    for gpu, gi_prof, gi, _info in gis:
        for token in tokens:
            status = _create_ci(smi, gpu, gi, gi_prof, token)
            if status != _common.EXIT_OK:
                return status  # 535 stops at the first failure
    return status


def _destroy_cis(smi: Smi, gpus: list[Gpu], gi_ids: set[int] | None, ci_ids: set[int] | None) -> int:
    nv = smi.nvml
    found = False
    for gpu, _gi_prof, gi, info in _selected_gis(smi, gpus, gi_ids):
        for prof in smi.ci_profiles(gi):
            array = (nv.c_nvmlComputeInstance_t * max(int(prof.instanceCount), 1))()
            num = nv.c_uint()
            try:
                nv.nvmlGpuInstanceGetComputeInstances(gi, prof.id, array, nv.byref(num))
            except nv.NVMLError:
                continue
            for i in range(num.value):
                ci_info = nv.nvmlComputeInstanceGetInfo(array[i])
                if ci_ids is not None and int(ci_info.id) not in ci_ids:
                    continue
                found = True
                try:
                    nv.nvmlComputeInstanceDestroy(array[i])
                except nv.NVMLError as exc:
                    print(f"Unable to destroy compute instance ID {ci_info.id:>2} from GPU {gpu.index:>2} "
                          f"GPU instance ID {info.id:>2}: {exc}\nFailed to destroy compute instances: {exc}")
                    return exit_status(exc.value)  # 535 stops at the first failure
                print(f"Successfully destroyed compute instance ID {ci_info.id:>2} from GPU {gpu.index:>2} "
                      f"GPU instance ID {info.id:>2}")
    if not found:
        print("No compute instances found: Not Found")
        return _common.EXIT_NOT_FOUND
    return _common.EXIT_OK
