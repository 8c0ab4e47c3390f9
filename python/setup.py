"""Build of the depthdec Python package.

The package is one CPython extension, depthdec._ext (src/depthdec/_ext.c), statically linked with the C library
libdepthdec.a. The library is built by the repository's own Makefile (`make lib`), so every C source (src/, src/model/, src/cpu/) gets exactly the
flags `make` gives it (per-file ISA flags, -DDD_WITH_* switches, -ffp-contract=off ...) and the Python build never
drifts from the C build. CUDA is left out (CUDA=0) unless DEPTHDEC_CUDA=1: then the library is built with
`make CUDA=1 CUDA_ARCH=$DEPTHDEC_CUDA_ARCH` (default sm_90; CUDA_HOME default /usr/local/cuda) and the extension
links the CUDA runtime statically (CUDA tensors in Decoder.generate/score: docs/device_api.md). DEPTHDEC_LIB=path
links an archive already built by that make command instead of building one (the device check script does).

Where the C sources come from, first match wins:
  1. the repository this directory sits in: ../Makefile, ../src/, ../include/depthdec.h (`pip install ./python`,
     which builds in place with pip >= 21.3);
  2. _csrc/ beside this file: the copy that `setup.py sdist` (and `python -m build`) puts into the sdist.
The library is built into a fresh folder under setuptools' build_temp, never into the repository's build/. The
installed package contains only the extension module (libjansson is linked dynamically from the system), so it does
not reference the source tree at run time.

Needs: a C compiler, make, libjansson-dev (Debian/Ubuntu: apt-get install build-essential libjansson-dev).
"""

import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENDORED = os.path.join(HERE, "_csrc")
NEEDED = ("Makefile", os.path.join("include", "depthdec.h"), "src")
HINT = "install a C compiler, make and jansson first (Debian/Ubuntu: apt-get install build-essential libjansson-dev)"


def _has_sources(root):
    return all(os.path.exists(os.path.join(root, p)) for p in NEEDED)


def c_source_root():
    for root in (REPO, VENDORED):
        if _has_sources(root):
            return root
    raise SystemExit(
        "depthdec: C sources not found: want %s (a repository checkout) or %s (an sdist)"
        % (", ".join(os.path.join(REPO, p) for p in NEEDED), VENDORED)
    )


def version():
    with open(os.path.join(c_source_root(), "include", "depthdec.h"), encoding="utf-8") as f:
        m = re.search(r'#define\s+DD_VERSION_STRING\s+"([^"]+)"', f.read())
    if not m:
        raise SystemExit("depthdec: DD_VERSION_STRING not found in include/depthdec.h")
    return m.group(1)


class BuildExt(build_ext):
    """Runs `make lib` on the C sources, then compiles and links the extension against build/libdepthdec.a."""

    def run(self):
        root = c_source_root()
        lib_build = os.path.abspath(os.path.join(self.build_temp, "libdepthdec"))
        # A fresh folder each time: make does not notice changed flags, and a stale object must not slip in.
        shutil.rmtree(lib_build, ignore_errors=True)
        os.makedirs(lib_build)
        cuda = os.environ.get("DEPTHDEC_CUDA", "0") == "1"
        cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        cmd = ["make", "-C", root, "-j%d" % (os.cpu_count() or 1), "lib", "BUILD=" + lib_build]
        cmd += ["CUDA=1", "CUDA_ARCH=" + os.environ.get("DEPTHDEC_CUDA_ARCH", "sm_90"), "CUDA_HOME=" + cuda_home] \
            if cuda else ["CUDA=0"]
        archive = os.environ.get("DEPTHDEC_LIB") or os.path.join(lib_build, "libdepthdec.a")
        if not os.environ.get("DEPTHDEC_LIB"):
            print("depthdec: building the C library: " + " ".join(cmd), flush=True)
            try:
                subprocess.run(cmd, check=True)
            except (OSError, subprocess.CalledProcessError) as e:
                raise SystemExit("depthdec: building the C library failed (%s); %s" % (e, HINT))
        if not os.path.isfile(archive):
            raise SystemExit("depthdec: no C library at %s" % archive)
        for ext in self.extensions:
            if cuda:  # the static runtime: no libcudart.so to find at import (torch brings its own)
                ext.library_dirs.append(os.path.join(cuda_home, "lib64"))
                ext.libraries[:0] = ["cudart_static", "stdc++", "dl", "rt"]
            ext.include_dirs.append(os.path.join(root, "include"))
            ext.extra_objects.append(archive)  # linked before -ljansson -lm, as static linking needs
            ext.depends.append(archive)  # relink whenever the library was rebuilt
        super().run()


class SDist(sdist):
    """Copies the C sources (Makefile, src/, include/) into _csrc/ so that the sdist builds on its own."""

    def run(self):
        if _has_sources(REPO):
            shutil.rmtree(VENDORED, ignore_errors=True)
            os.makedirs(VENDORED)
            shutil.copy2(os.path.join(REPO, "Makefile"), VENDORED)
            for d in ("src", "include"):
                shutil.copytree(os.path.join(REPO, d), os.path.join(VENDORED, d),
                                ignore=shutil.ignore_patterns("__pycache__", "*.o"))
        elif not _has_sources(VENDORED):
            c_source_root()  # raises with the explanation
        super().run()


ext = Extension(
    "depthdec._ext",
    sources=["src/depthdec/_ext.c"],
    libraries=["jansson", "m", "pthread"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-ffp-contract=off", "-pthread", "-Wall", "-Wextra",
                        "-Wno-unused-parameter"],
    # --exclude-libs: the library's symbols stay private to the extension.
    extra_link_args=["-pthread", "-Wl,--exclude-libs,ALL"],
)

setup(version=version(), ext_modules=[ext], cmdclass={"build_ext": BuildExt, "sdist": SDist})
