"""The build's one addition to pyproject.toml: docs/*.md travel inside the package as capgeo/docs/,
so that `capgeo docs TOPIC`, which help texts and messages cite, works from an installed wheel and
not only from a checkout (capgeo.manual reads the checkout's docs/ folder itself)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_with_docs(build_py):
    def run(self):
        super().run()
        pages = sorted((Path(__file__).resolve().parent / "docs").glob("*.md"))
        if not pages:  # a wheel without its pages would send every citation nowhere
            raise SystemExit("setup.py: docs/*.md not found; build from a checkout or a full sdist")
        target = Path(self.build_lib) / "capgeo" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for page in pages:
            shutil.copyfile(page, target / page.name)


setup(cmdclass={"build_py": build_py_with_docs})
