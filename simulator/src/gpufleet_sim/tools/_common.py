"""Helpers shared by the simulated NVIDIA tools: loading pynvml, NVIDIA's exit codes, daemons and pid files.

Standard library only. On a target host the tools run under the system ``python3`` with this package installed
as ``nvidia_sim`` under a private directory; pynvml comes from ``/usr/lib/nvidia-sim/python`` (the driver package
copies the pinned nvidia-ml-py there) and, in tests, from the importing environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

SIM_PYTHON_DIR = Path("/usr/lib/nvidia-sim/python")

# nvidia-smi's documented exit codes
EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NOT_SUPPORTED = 3
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_LIBRARY_NOT_FOUND = 12
EXIT_FUNCTION_NOT_FOUND = 13
EXIT_GPU_IS_LOST = 15
EXIT_OTHER = 255
_DOCUMENTED_EXITS = {2, 3, 4, 6, 9, 12, 13, 14, 15}

DRIVER_NOT_LOADED_MSG = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                         "Make sure that the latest NVIDIA driver is installed and running.")
LIBRARY_NOT_FOUND_MSG = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
                         "the NVIDIA Display Driver is properly installed and present in your system.\n"
                         "Please also try adding directory that contains libnvidia-ml.so to your system PATH.")


class ToolError(Exception):
    """A tool failure with the message to print (stderr or stdout per ``to_stdout``) and the exit status."""

    def __init__(self, message: str, status: int = EXIT_OTHER, to_stdout: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.to_stdout = to_stdout


def load_pynvml() -> ModuleType:
    """Import the unmodified pynvml, preferring the copy the driver packages install.

    Raises:
        ToolError: pynvml is not importable anywhere (reported like a missing NVML library, exit 12).
    """
    if SIM_PYTHON_DIR.joinpath("pynvml.py").is_file() and str(SIM_PYTHON_DIR) not in sys.path:
        sys.path.append(str(SIM_PYTHON_DIR))
    try:
        import pynvml
    except ImportError as exc:
        raise ToolError(LIBRARY_NOT_FOUND_MSG, EXIT_LIBRARY_NOT_FOUND) from exc
    return cast(ModuleType, pynvml)


def exit_status_for(nvml_code: int) -> int:
    """Map an ``nvmlReturn_t`` to nvidia-smi's exit status (documented codes pass through, others are 255)."""
    return nvml_code if nvml_code in _DOCUMENTED_EXITS else EXIT_OTHER


def nvml_init(pynvml: ModuleType) -> None:
    """``nvmlInit()`` with nvidia-smi's messages for the usual failures.

    Raises:
        ToolError: the library or driver is missing, or initialisation failed.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound as exc:
        raise ToolError(LIBRARY_NOT_FOUND_MSG, EXIT_LIBRARY_NOT_FOUND) from exc
    except pynvml.NVMLError_DriverNotLoaded as exc:
        raise ToolError(DRIVER_NOT_LOADED_MSG, EXIT_DRIVER_NOT_LOADED) from exc
    except pynvml.NVMLError as exc:
        raise ToolError(f"Failed to initialize NVML: {exc}", exit_status_for(exc.value)) from exc


def text(value: Any) -> str:
    """Return pynvml's string results as ``str`` (some fields arrive as bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def run_main(func: Any, argv: list[str] | None) -> int:
    """Call ``func(argv)`` and turn a :class:`ToolError` into its message and exit status."""
    try:
        return int(func(sys.argv[1:] if argv is None else argv))
    except ToolError as exc:
        stream = sys.stdout if exc.to_stdout else sys.stderr
        if exc.message:
            print(exc.message, file=stream)
        return exc.status
    except BrokenPipeError:
        return EXIT_OK


# --------------------------------------------------------------------------------------------------- daemons


def write_pid_file(path: Path) -> None:
    """Write our pid to ``path`` (creating its directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n", encoding="ascii")


def read_pid_file(path: Path) -> int | None:
    """Return the pid in ``path`` when that process is alive, else None."""
    try:
        pid = int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def sys_path(path: str) -> Path:
    """A system path, moved under ``$NVIDIA_SIM_ROOT`` when that is set (tests run the daemons unprivileged
    of the real /var/run, /var/log and /etc this way)."""
    root = os.environ.get("NVIDIA_SIM_ROOT")
    return Path(root + path) if root else Path(path)


def detach() -> Callable[[bool], None]:
    """Fork into the background like a ``Type=forking`` daemon.

    The calling process waits until the daemon reports readiness through the returned ``notify(ok)`` and exits
    0 (ready) or 1 (failed to start). Returns only in the daemon (new session, stdin on /dev/null; stdout and
    stderr stay until ``notify`` so start-up errors are seen, then go to /dev/null).
    """
    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        os.close(write_fd)
        data = os.read(read_fd, 1)
        os._exit(0 if data == b"1" else 1)
    os.close(read_fd)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)

    def notify(ok: bool) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(write_fd, b"1" if ok else b"0")
        os.close(write_fd)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)

    return notify


def tool_version(explicit: str | None, default: str) -> str:
    """The version a tool reports: given by its installed wrapper, else ``$GPUSIM_TOOL_VERSION``, else default."""
    return explicit or os.environ.get("GPUSIM_TOOL_VERSION") or default


class StopFlag:
    """An event set by SIGTERM/SIGINT (and SIGHUP), for daemons' main loops."""

    def __init__(self) -> None:
        self.event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until stopped or ``timeout`` elapses; return True when stopped."""
        return self.event.wait(timeout)

    @property
    def stopped(self) -> bool:
        """Whether a stop was requested."""
        return self.event.is_set()


@contextlib.contextmanager
def registered_client(name: str) -> Iterator[None]:
    """Hold every GPU as a driver client (``clients`` in the state) for the duration of the block."""
    from .. import hardware

    hardware.register_client(os.getpid(), name)
    try:
        yield
    finally:
        hardware.unregister_client(os.getpid())


def log_line(path: Path, message: str) -> None:
    """Append a timestamped line to a log file (best effort)."""

    stamp = time.strftime("[%b %d %Y %H:%M:%S]")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"{stamp} [INFO] [tid {os.getpid()}] {message}\n")
