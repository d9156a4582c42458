"""Build script for ampd-client: metadata lives in pyproject.toml; this file
generates the gRPC stubs from the repository's proto/ (grpcio-tools, a build
requirement) and pins the runtime versions the generated code needs."""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ampd_build  # noqa: E402


class BuildPy(build_py):
    """Copies the package, then generates ampd_client/_gen/ next to it."""

    def run(self):
        if getattr(self, "editable_mode", False):
            # pip install -e: the package is imported from the source tree.
            target = os.path.join(ampd_build.HERE, ampd_build.PACKAGE)
        else:
            target = os.path.join(self.build_lib, ampd_build.PACKAGE)
            shutil.rmtree(target, ignore_errors=True)  # no stale files from older builds
        super().run()
        ampd_build.generate(target)


class Sdist(sdist):
    """Carries a copy of the protos (proto/) so the sdist builds on its own."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = ampd_build.find_proto_root()
        for rel in ampd_build.proto_files(root):
            dest = os.path.join(base_dir, "proto", rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(os.path.join(root, rel), dest)


setup(
    install_requires=ampd_build.runtime_requirements(),
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
)
