# Copyright: gpufleet maintainers. Apache-2.0 (see LICENSE).
"""Compiled code for the modules a lab host imports from zip files, kept by content (lab hosts only).

Ansible runs each task's module from a zip of its module_utils (AnsiballZ), and Python's zipimport compiles every
source file in it again on every run: on a lab host that is about 40 ms of CPU of the 175 ms a small task's module
costs, paid a few thousand times in a run of the suite. This path hook is zipimport with one change: the code
compiled from a source file in a zip is kept under ``CACHE``, named by a hash of the interpreter's magic number,
the file's path inside the archive and its bytes, and read back the next time the same bytes are imported from
the same path in an archive (the file name the code carries is set to the archive it came from this time, as
importlib does for a ``.pyc``). Whatever runs is what Python compiles from those bytes; nothing else changes.

gpufleet_lab bind-mounts this file and ``gpufleet_lab_zipcache.pth`` (which imports it) read-only into the
Python of every lab host (hosts.py ``python_mounts``); no real host has it. It is active for root only, where
the cache directory (mode 0700) is the writer's own. Imports stay lazy: every Python start on the host loads it.
"""

import os
import sys
import zipimport

CACHE = "/var/cache/gpufleet-lab/pycache"


class CachingZipImporter(zipimport.zipimporter):
    """zipimport whose compiled code is kept by content (``get_code`` is what exec_module and runpy ask)."""

    def get_code(self, fullname):
        try:
            source = self.get_source(fullname)
        except zipimport.ZipImportError:
            source = None
        if source is None:  # bytecode only, or not found: zipimport's own answer
            return super().get_code(fullname)
        import _imp
        import hashlib
        import importlib.util
        import marshal

        # not get_filename(): zipimport compiles the module to answer it
        inner = self.prefix + fullname.rpartition(".")[2] + ("/__init__.py" if self.is_package(fullname) else ".py")
        path = self.archive + "/" + inner
        data = source.encode("utf-8")
        key = hashlib.sha256(importlib.util.MAGIC_NUMBER + inner.encode("utf-8") + b"\0" + data).hexdigest()
        cached = os.path.join(CACHE, key)
        try:
            with open(cached, "rb") as handle:
                code = marshal.loads(handle.read())
        except (OSError, ValueError, EOFError, TypeError):
            code = None
        if code is not None:
            _imp._fix_co_filename(code, path)
            return code
        code = compile(data, path, "exec", dont_inherit=True)
        _store(cached, marshal.dumps(code))
        return code


def _store(path: str, data: bytes) -> None:
    import tempfile

    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def install() -> None:
    """Put the caching importer before zipimport's own hook (root only: the cache is root's)."""
    if os.geteuid() != 0:
        return
    for index, hook in enumerate(sys.path_hooks):
        if hook is zipimport.zipimporter:
            sys.path_hooks.insert(index, CachingZipImporter)
            sys.path_importer_cache.clear()
            return


install()
