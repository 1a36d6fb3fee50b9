"""Generates the gRPC stubs of coronerd's query protocol from the repository's ``proto/`` while
the wheel is built (``pip install ./python/client``), into ``coroner_client/_proto``. Everything
else is in pyproject.toml."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402  (beside this file)


class build_py_with_stubs(build_py):
    def run(self):
        super().run()
        self._stubs = build_stubs.generate(self.build_lib)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + list(getattr(self, "_stubs", []))


setup(cmdclass={"build_py": build_py_with_stubs})
