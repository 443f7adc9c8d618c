"""Compiling the C driver on first use: ``libibverbs.so.1`` from ``c/``, with the system's C
compiler, the system's ``<infiniband/verbs.h>`` (so the structs are the real ABI) and
``<infiniband/mlx5dv.h>`` (the ring layouts: mlx5's WQE segments, CQE and opcodes), the
``pyroce_abi.h`` that ``driver.abi`` renders from the Python definitions (pyroce's own values:
the doorbell records, the bind segment, limits); no Python: the library speaks the shared NIC's
protocol itself (``c/nic_client.c``), and only names this Python as the one that starts the NIC
when ``PYROCE_PYTHON`` is unset. Beside it
the stub provider libraries (``libmlx5.so.1``, ``libefa.so.1``: every symbol version of the real
ones, each answering "not this device": ``providers``), since the real ones cannot load
against a libibverbs without libibverbs' private provider interface; and ``libpyroce_rdmacm.so``
(``c/rdma_cm*.c``), which ``pyroce run`` preloads: the kernel's rdma_cm file for the system's
librdmacm, served by the shared NIC over the connection of the library above.

The result is cached under ``PYROCE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/pyroce`` or
``~/.cache/pyroce``) in a folder named by a hash of everything that goes into it: the sources,
``verbs.h``, ``mlx5dv.h``, the text of ``pyroce_abi.h`` (kept in the folder: a changed Python
constant builds a new library), the compiler and this Python's path. A build goes to a temporary folder renamed into
place, so two programs starting at once never see half a library. What is missing to build is
said in one line naming the package that provides it (``BuildError``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pyroce import __version__
from pyroce.driver import abi, private_abi, providers

SOURCES = Path(__file__).resolve().parent / "c"
LIBRARY = "libibverbs.so.1"
RDMA_CM_LIBRARY = "libpyroce_rdmacm.so"  # preloaded: the rdma_cm file for librdmacm (c/rdma_cm*.c)
RDMA_CM_SOURCES = "rdma_cm*.c"
VERSION_SCRIPT = "libibverbs.map"
DEFAULT_INCLUDE = "/usr/include"  # where Debian's libibverbs-dev puts <infiniband/verbs.h>
FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-fvisibility=hidden")
STUBS = SOURCES / "stubs"
STUB_LIBRARIES = {provider.library: provider.stem for provider in providers.PROVIDERS}  # library: its <stem>.symbols
# The Python the C library speaks to: the commands it sends (``calls``), the protocol, and the
# session that answers them. Their text is in the sources digest, which the NIC compares.
PEERS = (*(Path(__file__).with_name(name) for name in ("calls.py", "cm_calls.py")), *(Path(__file__).resolve().parent.parent / "nicd" / name
                                                  for name in ("protocol.py", "session.py")))  # fmt: skip


class BuildError(Exception):
    """The C driver cannot be built here: one line saying what to install or fix."""


def cache_root() -> Path:
    explicit = os.environ.get("PYROCE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyroce"


def compiler() -> str:
    """The C compiler (``CC``, else ``cc``), as a path."""
    name = os.environ.get("CC") or "cc"
    found = shutil.which(name)
    if found is None:
        raise BuildError(f"no C compiler ({name}) found: install gcc (apt-get install gcc)")
    return found


def verbs_header(include: str) -> Path:
    """``<infiniband/verbs.h>`` under ``include`` (``PYROCE_VERBS_INCLUDE``, else /usr/include)."""
    header = Path(include) / "infiniband" / "verbs.h"
    if not header.is_file():
        raise BuildError("<infiniband/verbs.h> not found: install libibverbs-dev (apt-get install libibverbs-dev)")
    return header


def mlx5dv_header(include: str) -> Path:
    """``<infiniband/mlx5dv.h>`` under ``include``: the ring layouts the driver writes and reads."""
    header = Path(include) / "infiniband" / "mlx5dv.h"
    if not header.is_file():
        raise BuildError("<infiniband/mlx5dv.h> not found: install libibverbs-dev (apt-get install libibverbs-dev)")
    return header


def sources_digest() -> str:
    """A digest of the driver's own sources and of the Python it speaks to (``PEERS``): compiled
    into the library, which sends it in its hello, and compared by the shared NIC
    (``nicd.session``), so a library left from another pyroce is refused in one line instead of
    sending commands that changed."""
    digest = hashlib.sha256(abi.render().encode())  # the ring values, rendered from the Python modules
    for path in sorted(SOURCES.glob("*.[ch]")) + [SOURCES / VERSION_SCRIPT, *PEERS]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def library_dir(include: str | None = None) -> Path:
    """The folder holding ``libibverbs.so.1``, built first if this combination has none."""
    include = include or os.environ.get("PYROCE_VERBS_INCLUDE") or DEFAULT_INCLUDE
    header = verbs_header(include)
    mlx5dv = mlx5dv_header(include)
    abi_text = abi.render()
    cc = compiler()
    sources = sorted(SOURCES.glob("*.[ch]")) + [SOURCES / VERSION_SCRIPT]
    rdma_cm = sorted(SOURCES.glob(RDMA_CM_SOURCES))
    stubs = sorted(STUBS.glob("*.[ch]"))
    generated = {provider: providers.stubs_of(provider, STUBS / f"{provider.stem}.symbols",
                                              providers.system_library(provider.library), Path(include))
                 for provider in providers.PROVIDERS}  # fmt: skip
    private_nodes = private_abi.private_nodes(providers.system_library(LIBRARY))
    digest = hashlib.sha256("".join(private_nodes).encode())
    for provider, provider_stubs in generated.items():  # the system's libraries are part of what it is
        digest.update(providers.c_source(provider_stubs, provider.served).encode()
                      + providers.version_script(provider_stubs).encode())  # fmt: skip
    for part in (cc, sys.executable, __version__, include, *FLAGS):
        digest.update(part.encode() + b"\0")
    digest.update(sources_digest().encode())
    for path in (*sources, *stubs, header, mlx5dv):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(abi.HEADER.encode() + b"\0" + abi_text.encode())
    target = cache_root() / f"driver-{digest.hexdigest()[:16]}"
    if (target / LIBRARY).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    (work / abi.HEADER).write_text(abi_text)
    private_source, script = work / "private_abi.c", work / VERSION_SCRIPT
    private_source.write_text(private_abi.c_source(private_nodes))
    script.write_text((SOURCES / VERSION_SCRIPT).read_text() + private_abi.version_script(private_nodes))
    defines = {"PYROCE_SOURCES_DIGEST": sources_digest(), "PYROCE_VERSION": __version__,
               "PYROCE_DEFAULT_PYTHON": sys.executable}  # fmt: skip
    commands = [[cc, *FLAGS, *(f"-D{name}={c_string(value)}" for name, value in defines.items()), f"-I{work}",
                 f"-I{SOURCES}", f"-I{STUBS}", f"-I{include}",
                 *(str(path) for path in [*sources, private_source] if path.suffix == ".c" and path not in rdma_cm),
                 f"-Wl,--version-script={script}", f"-Wl,-soname,{LIBRARY}", "-lpthread", "-o",
                 str(work / LIBRARY)],
                # linked against the library above (its PYROCE_PRIVATE_1 functions: the program's connection)
                [cc, *FLAGS, f"-I{include}", *map(str, rdma_cm), f"-Wl,-soname,{RDMA_CM_LIBRARY}", str(work / LIBRARY),
                 "-ldl", "-lpthread", "-o", str(work / RDMA_CM_LIBRARY)]]  # fmt: skip
    for provider, provider_stubs in generated.items():
        source, script = work / f"{provider.stem}.c", work / f"{provider.stem}.map"
        source.write_text(providers.c_source(provider_stubs, provider.served))
        script.write_text(providers.version_script(provider_stubs))
        served = [str(STUBS / provider.served_source)] if provider.served_source else []
        commands.append([cc, *FLAGS, f"-I{STUBS}", f"-I{include}", str(source), *served,
                         f"-Wl,--version-script={script}", f"-Wl,-soname,{provider.library}", "-o",
                         str(work / provider.library)])  # fmt: skip
    for command in commands:
        compile_one(command, work, target.parent / "build.log")
    try:
        work.rename(target)
    except OSError:  # another program built it meanwhile
        shutil.rmtree(work, ignore_errors=True)
    if not (target / LIBRARY).is_file():
        raise BuildError(f"{target} is in the way of the C driver's build: remove it")
    return target


def c_string(value: str) -> str:
    """A C string literal of ``value`` (a path may hold quotes or backslashes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def compile_one(command: list[str], work: Path, log: Path) -> None:
    """Run one compiler command; on failure keep its output in ``log``, drop ``work`` and say
    the first error in one line."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.write_text(" ".join(command) + "\n" + done.stderr)
        first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:200])
        shutil.rmtree(work, ignore_errors=True)
        raise BuildError(f"compiling the C driver failed ({log}): {first}")
