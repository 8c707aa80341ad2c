"""NVIDIA k8s-device-plugin's config loading, ported to Python as a test oracle (test code, not product code).

The plugin's source cannot be fetched in CI, so the rules of its ``api/config/v1`` package and of the flag check in
``cmd/nvidia-device-plugin/main.go`` are ported here, from NVIDIA/k8s-device-plugin as read through the project's
code search (Apache-2.0). Releases and files:

- v0.17.4 (``DEFAULT``):
  - ``api/config/v1/config.go`` ``parseConfigFrom``: YAML through sigs.k8s.io/yaml into ``Config``; unknown keys
    are ignored; an empty ``version`` becomes ``v1``, any other is "unknown version".
  - ``api/config/v1/config.go`` ``NewConfig``: a flag given on the command line or in the environment
    (``MIG_STRATEGY``, ``MPS_ROOT``) overrides the file (``flags.go`` ``updateFromCLIFlag``: set when
    ``c.IsSet`` or when the file left it unset).
  - ``api/config/v1/replicas.go`` ``ReplicatedResources.UnmarshalJSON`` (``renameByDefault`` and
    ``failRequestsGreaterThanOne`` booleans, default false; ``resources`` required and non-empty; a default rename
    ``<name>.shared`` under ``renameByDefault``), ``ReplicatedResource.UnmarshalJSON`` (``name`` required,
    ``devices`` default ``all``, ``replicas`` required and ``>= 2``, ``rename`` optional),
    ``ReplicatedDevices.UnmarshalJSON`` (``"all"``, a count > 0, or a list of GPU indexes, MIG indexes
    ``<gpu>:<mig>`` and GPU/MIG UUIDs).
  - ``api/config/v1/resources.go`` ``NewResourceName``: the ``nvidia.com/`` prefix is added when missing; at most
    63 characters (``consts.go`` ``MaxResourceNameLength``); the part after ``/`` must be a DNS-1123 subdomain.
  - ``api/config/v1/sharing.go`` ``SharingStrategy``: MPS when ``mps`` is set with any resource of more than one
    replica, else time-slicing when ``timeSlicing`` has one, else none.
  - ``api/config/v1/config.go`` ``DisableResourceNamingInConfig`` (called by ``loadConfig``): a custom ``rename``
    or ``devices`` is ignored with a warning.
  - ``cmd/nvidia-device-plugin/main.go`` ``validateFlags``: with MPS, ``mixed`` is refused ("using
    --mig-strategy=mixed is not supported with MPS") and an empty MPS root is refused ("using MPS requires
    --mps-root to be specified"); a MIG strategy other than none/single/mixed is "unknown MIG strategy".
  - ``internal/rm/rm.go`` ``ValidateRequest``: under MPS every request for more than one shared device is refused,
    whatever ``failRequestsGreaterThanOne`` says.
- v0.20.x (``V020``), where it differs: ``failRequestsGreaterThanOne`` is a pointer (``*bool``) and ``NewConfig``
  sets it to true for MPS only when the file leaves it unset ("Preserve the historical MPS behavior unless the
  config explicitly relaxes it", config.go at commit 03973a9), so ``false`` is honoured.

Not ported: JSON numbers with a fraction that YAML turns into integers (the generator never writes floats).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import yaml

V0174 = (0, 17, 4)
V020 = (0, 20, 0)
MAX_RESOURCE_NAME = 63
SHARED_SUFFIX = ".shared"
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")


class PluginConfigError(ValueError):
    """The plugin would refuse to start with this config (its message, as near as the port gets)."""


@dataclass
class Resource:
    """One ``ReplicatedResource`` after unmarshalling."""

    name: str
    replicas: int
    rename: str = ""
    devices: Any = "all"


@dataclass
class Replicated:
    """One ``ReplicatedResources`` (``sharing.timeSlicing`` or ``sharing.mps``)."""

    rename_by_default: bool = False
    fail_requests_greater_than_one: bool | None = False
    resources: list[Resource] = field(default_factory=list)

    def is_replicated(self) -> bool:
        return any(r.replicas > 1 for r in self.resources)


@dataclass
class Loaded:
    """What the plugin runs with: the effective flags, the sharing strategy and its resources, its warnings."""

    mig_strategy: str
    mps_root: str
    strategy: str
    resources: list[Resource]
    fail_requests_greater_than_one: bool
    warnings: list[str]

    def advertised(self) -> dict[str, int]:
        """Resource name the plugin advertises (the rename when there is one) -> replicas."""
        return {(r.rename or r.name): r.replicas for r in self.resources}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_uint(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def is_gpu_uuid(ref: str) -> bool:
    return ref.startswith("GPU-") and _is_uuid(ref[4:])


def is_mig_uuid(ref: str) -> bool:
    if not ref.startswith("MIG-"):
        return False
    suffix = ref[4:]
    if _is_uuid(suffix):
        return True
    parts = suffix.split("/", 2)
    return len(parts) == 3 and is_gpu_uuid(parts[0]) and all(_is_uint(p) for p in parts[1:])


def is_gpu_index(ref: str) -> bool:
    return _is_uint(ref)


def is_mig_index(ref: str) -> bool:
    parts = ref.split(":", 1)
    return len(parts) == 2 and all(_is_uint(p) for p in parts)


def new_resource_name(name: Any) -> str:
    """``resources.go`` ``NewResourceName``."""
    if not isinstance(name, str):
        raise PluginConfigError(f"json: cannot unmarshal {type(name).__name__} into Go value of type string")
    if not name.startswith("nvidia.com/"):
        name = "nvidia.com/" + name
    if len(name) > MAX_RESOURCE_NAME:
        raise PluginConfigError(f"fully-qualified resource name must be {MAX_RESOURCE_NAME} characters or less: "
                                f"{name}")
    short = name.split("/", 1)[1]
    if len(short) > 253 or not _DNS1123_SUBDOMAIN.match(short):
        raise PluginConfigError(f"incorrect format for resource name '{name}': a lowercase RFC 1123 subdomain "
                                f"must consist of lower case alphanumeric characters, '-' or '.'")
    return name


def unmarshal_devices(value: Any) -> Any:
    """``replicas.go`` ``ReplicatedDevices.UnmarshalJSON``: ``"all"``, a count, or a list of references."""
    if isinstance(value, str):
        if value != "all":
            raise PluginConfigError(f"devices set as '{value}' but the only valid string input is 'all'")
        return "all"
    if _is_int(value):
        if value <= 0:
            raise PluginConfigError(f"devices set as '{value}' but a count of devices must be > 0")
        return value
    if isinstance(value, list):
        refs = []
        for item in value:
            if _is_int(item) and item >= 0:
                refs.append(str(item))
                continue
            if isinstance(item, str) and (is_gpu_index(item) or is_mig_index(item) or is_gpu_uuid(item)
                                          or is_mig_uuid(item)):
                refs.append(item)
                continue
            raise PluginConfigError(f"unsupported type for device in devices list: {item}")
        return refs
    raise PluginConfigError(f"unrecognized type for devices spec: {value!r}")


def unmarshal_resource(value: Any) -> Resource:
    """``replicas.go`` ``ReplicatedResource.UnmarshalJSON``."""
    if not isinstance(value, dict):
        raise PluginConfigError("json: cannot unmarshal into Go value of type ReplicatedResource")
    if "name" not in value:
        raise PluginConfigError("no resource name specified")
    name = new_resource_name(value["name"])
    devices = unmarshal_devices(value.get("devices", "all"))
    if "replicas" not in value:
        raise PluginConfigError("no replicas specified")
    if not _is_int(value["replicas"]):
        raise PluginConfigError(f"json: cannot unmarshal {value['replicas']!r} into Go struct field .replicas of "
                                f"type int")
    if value["replicas"] < 2:
        raise PluginConfigError("number of replicas must be >= 2")
    rename = new_resource_name(value["rename"]) if "rename" in value else ""
    return Resource(name=name, replicas=value["replicas"], rename=rename, devices=devices)


def unmarshal_replicated(value: Any, version: tuple[int, int, int] = V0174) -> Replicated:
    """``replicas.go`` ``ReplicatedResources.UnmarshalJSON`` (v0.20: ``failRequestsGreaterThanOne`` may be unset)."""
    if not isinstance(value, dict):
        raise PluginConfigError("json: cannot unmarshal into Go value of type ReplicatedResources")
    out = Replicated()
    for key, attr in (("renameByDefault", "rename_by_default"),
                      ("failRequestsGreaterThanOne", "fail_requests_greater_than_one")):
        if key in value:
            if not isinstance(value[key], bool):
                raise PluginConfigError(f"json: cannot unmarshal {value[key]!r} into Go value of type bool")
            setattr(out, attr, value[key])
        elif attr == "fail_requests_greater_than_one" and version >= V020:
            out.fail_requests_greater_than_one = None
    if "resources" not in value:
        raise PluginConfigError("no resources specified")
    if not isinstance(value["resources"], list):
        raise PluginConfigError("json: cannot unmarshal into Go value of type []ReplicatedResource")
    out.resources = [unmarshal_resource(r) for r in value["resources"]]
    if not out.resources:
        raise PluginConfigError("no resources specified")
    for res in out.resources:
        if out.rename_by_default and not res.rename:
            res.rename = res.name + SHARED_SUFFIX
    return out


def _disable_renaming(rep: Replicated, where: str) -> list[str]:
    """``config.go`` ``DisableResourceNamingInConfig``: custom renames and device lists are dropped, with a warning."""
    warnings = []
    renamed = devices = False
    for res in rep.resources:
        default = res.name + SHARED_SUFFIX if rep.rename_by_default else ""
        if res.rename != default:
            renamed, res.rename = True, default
        if res.devices != "all":
            devices, res.devices = True, "all"
    if renamed:
        warnings.append(f"Setting the 'rename' field in sharing.{where}.resources is not yet supported in the "
                        f"config. Ignoring...")
    if devices:
        warnings.append(f"Customizing the 'devices' field in sharing.{where}.resources is not yet supported in the "
                        f"config. Ignoring...")
    return warnings


def load(text: str, version: tuple[int, int, int] = V0174, environment: dict[str, str] | None = None) -> Loaded:
    """Load a config file as ``nvidia-device-plugin --config-file`` does and check its flags; raise on refusal."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PluginConfigError(f"unable to parse config file: unmarshal error: {exc}") from exc
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise PluginConfigError("unable to parse config file: unmarshal error: not a mapping")
    # sigs.k8s.io/yaml goes through JSON: keys are strings, values JSON values.
    raw = json.loads(json.dumps(raw))
    cfg_version = raw.get("version") or "v1"
    if cfg_version != "v1":
        raise PluginConfigError(f"unable to parse config file: unknown version: {cfg_version}")
    flags = raw.get("flags") or {}
    if not isinstance(flags, dict):
        raise PluginConfigError("unable to parse config file: flags is not a mapping")
    for key in ("migStrategy", "mpsRoot"):
        if key in flags and flags[key] is not None and not isinstance(flags[key], str):
            raise PluginConfigError(f"json: cannot unmarshal {flags[key]!r} into Go struct field .flags.{key}")
    sharing = raw.get("sharing") or {}
    if not isinstance(sharing, dict):
        raise PluginConfigError("unable to parse config file: sharing is not a mapping")
    time_slicing = unmarshal_replicated(sharing["timeSlicing"], version) if "timeSlicing" in sharing else Replicated()
    mps = unmarshal_replicated(sharing["mps"], version) if sharing.get("mps") is not None else None

    # NewConfig: the command line and the environment win over the file; an unset flag takes the flag's default.
    env = environment or {}
    mig_strategy = env["MIG_STRATEGY"] if "MIG_STRATEGY" in env else (flags.get("migStrategy") or "none")
    mps_root = env["MPS_ROOT"] if "MPS_ROOT" in env else (flags.get("mpsRoot") or "")
    if version >= V020 and mps is not None and mps.fail_requests_greater_than_one is None:
        mps.fail_requests_greater_than_one = True

    warnings = _disable_renaming(time_slicing, "timeSlicing")
    if mps is not None:
        warnings += _disable_renaming(mps, "mps")

    if mps is not None and mps.is_replicated():
        strategy, active = "mps", mps
    elif time_slicing.is_replicated():
        strategy, active = "time-slicing", time_slicing
    else:
        strategy, active = "none", time_slicing

    # validateFlags (cmd/nvidia-device-plugin/main.go).
    if strategy == "mps":
        if mig_strategy == "mixed":
            raise PluginConfigError("using --mig-strategy=mixed is not supported with MPS")
        if not mps_root:
            raise PluginConfigError("using MPS requires --mps-root to be specified")
    if mig_strategy not in ("none", "single", "mixed"):
        raise PluginConfigError(f"unknown MIG strategy: {mig_strategy}")

    # internal/rm/rm.go ValidateRequest: before v0.20 MPS refuses requests > 1 whatever the file says.
    if strategy == "mps":
        fail_gt_one = True if version < V020 else bool(active.fail_requests_greater_than_one)
    else:
        fail_gt_one = bool(active.fail_requests_greater_than_one)
    return Loaded(mig_strategy=mig_strategy, mps_root=mps_root, strategy=strategy, resources=active.resources,
                  fail_requests_greater_than_one=fail_gt_one, warnings=warnings)
