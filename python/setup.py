"""Puts ``coroner_hook.pth`` at the top of the wheel, so that pip installs it into site-packages
(where Python runs it at start-up: ``CORONER_HOOK=1`` then installs the hook). Everything else
is in pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "coroner_hook.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        self.copy_file(os.path.join(here, PTH), os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
