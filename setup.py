"""The build: pyroce is pure Python; where mypy and a C compiler are at hand, its hot modules are
also compiled with mypyc from the same .py files (docs/architecture.md, "Compiled with mypyc").

The .py files stay installed beside the compiled ones: ``PYROCE_PURE=1`` runs them, and so does
every import when the sources no longer match the digests recorded here at build
(``pyroce/compiled.sha256``, read by ``pyroce/__init__.py``). Without a compiler, without Python's
headers or without mypy the install is pure, and one line says so (``pip install -v`` shows it;
``pyroce doctor`` says it afterwards, from the same file).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

PACKAGE = Path("src/pyroce")
MANIFEST = "compiled.sha256"  # "<sha256>  <path under pyroce/>" per compiled module; "# pure: <why>" when none
# The per-packet and per-message modules, in one mypyc group (its modules call each other natively).
# Not the CM's MADs and the pcap files (wire/cm.py, mad.py, pcap.py): no packet of an RDMA
# operation passes through them; nor the steering of several engines (link/steering.py: set up once).
NOT_HOT = {"wire/cm.py", "wire/mad.py", "wire/pcap.py", "link/errors.py", "link/steering.py"}
HOST = ("progress", "handoff")
# The verbs' per-message work and the work requests it reads field by field (the other verbs
# classes are pyverbs', which programs subclass: interpreted)
VERBS = ("send_queue", "recv_queue", "completions", "wr")
# The CM's clock, whose deadline the engine reads on every pass (the CM itself runs per MAD: interpreted)
CM = ("exchanges",)
NIC = ("engine", "rings", "wqe", "cqe", "port", "tx", "memory", "queues", "timers", "convert")
COMPILED = sorted(
    path
    for path in [*PACKAGE.glob("wire/*.py"), *PACKAGE.glob("transport/*.py"), *(PACKAGE / f"nic/{n}.py" for n in NIC),
                 *PACKAGE.glob("link/*.py"), *(PACKAGE / f"host/{n}.py" for n in HOST),
                 *(PACKAGE / f"verbs/{n}.py" for n in VERBS), *(PACKAGE / f"cm/{n}.py" for n in CM)]
    if path.relative_to(PACKAGE).as_posix() not in NOT_HOT
)
HOW_TO_COMPILE = "install gcc and Python's headers (python3-dev) and reinstall for the compiled build"
# What pip runs setup.py for before it builds (build requirements, metadata): no compiling then
METADATA_ONLY = {"egg_info", "dist_info", "sdist"}


def why_pure() -> str | None:
    """Why this build cannot compile, or None when it can."""
    if os.environ.get("PYROCE_PURE") == "1":
        return "PYROCE_PURE=1 at build"
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler} not found); {HOW_TO_COMPILE}"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return f"no Python.h (Python's headers); {HOW_TO_COMPILE}"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypy is not installed (pip installs it to build: pyproject.toml); install it and reinstall"
    return None


def write_manifest(package_dir: Path, lines: list[str]) -> None:
    package_dir.mkdir(parents=True, exist_ok=True)
    (package_dir / MANIFEST).write_text("\n".join(lines) + "\n")


def pure(why: str) -> None:
    print(f"pyroce: installing pure Python: {why}", flush=True)


class BuildCompiled(build_ext):
    """Builds the mypyc extensions, or none when they cannot be built, and records which (the
    manifest) beside the package's sources, where ``pyroce/__init__.py`` reads it."""

    def run(self) -> None:
        lines = MANIFEST_LINES
        if EXTENSIONS:
            try:
                super().run()
            except (BaseError, CCompilerError, OSError) as exc:  # a compiler that fails: pure, not broken
                lines = [f"# pure: the C build failed ({type(exc).__name__}: {exc})"]
                pure(lines[0][len("# pure: ") :])
        write_manifest(PACKAGE if self.inplace else Path(self.build_lib) / "pyroce", lines)


def compile_hot_modules() -> tuple[list[Extension], list[str]]:
    """mypyc's extensions and the manifest: each source's digest as mypyc read it, or why none."""
    why = why_pure()
    if why is None:
        from mypyc.build import mypycify

        digests = [f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(PACKAGE).as_posix()}"
                   for path in COMPILED]  # fmt: skip
        # isal, untyped for mypy where the build's environment lacks it, is called as any module
        options = ["--follow-imports=silent", "--ignore-missing-imports"]
        try:
            return mypycify([path.as_posix() for path in COMPILED] + options, group_name="pyroce"), digests
        except SystemExit:  # mypy's type errors: it printed them
            why = "mypyc refused the sources (mypy's errors above)"
    pure(why)
    return [], [f"# pure: {why}"]


EXTENSIONS, MANIFEST_LINES = [], []
if sys.argv[1:2] and sys.argv[1] not in METADATA_ONLY:
    EXTENSIONS, MANIFEST_LINES = compile_hot_modules()
setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildCompiled})
