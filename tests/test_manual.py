"""`capgeo docs`: every page of docs/ is reachable by topic, from a checkout and from a built wheel,
and every page the code cites as `capgeo docs TOPIC` exists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from capgeo import manual
from capgeo.cli import main
from capgeo.errors import CapgeoError

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))


def test_every_page_is_a_topic_titled_by_its_first_heading():
    topics = manual.topics()
    assert list(topics) == [page.stem for page in PAGES]
    gamma_heading = (ROOT / "docs" / "gamma.md").read_text(encoding="utf-8").splitlines()[0]
    assert topics["gamma"] == gamma_heading.removeprefix("# ").replace("`", "")


@pytest.mark.parametrize("written", ["gamma", "gamma.md", "docs/gamma.md", " gamma "])
def test_a_page_is_found_however_it_is_cited(written):
    assert manual.page(written) == (ROOT / "docs" / "gamma.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("written", ["nope", "", "../README", "docs/../gamma"])
def test_an_unknown_topic_is_refused_with_the_list(written):
    with pytest.raises(CapgeoError, match=r"no documentation page .*the pages are: (.*, )?dupes, encoders"):
        manual.page(written)


def test_the_command_prints_a_page_when_piped_and_lists_pages_without_a_topic():
    runner = CliRunner()
    shown = runner.invoke(main, ["docs", "leak"])
    assert shown.exit_code == 0, shown.output
    assert shown.output == (ROOT / "docs" / "leak.md").read_text(encoding="utf-8")
    listed = runner.invoke(main, ["docs"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.output.splitlines() if line and not line.startswith(" ")] \
        == [page.stem for page in PAGES]
    unknown = runner.invoke(main, ["docs", "nope"])
    assert unknown.exit_code == 2
    assert unknown.output.count("\n") == 1 and unknown.output.startswith("Error: no documentation page 'nope'")


def test_every_cited_topic_exists():
    cited = set()
    for source in (ROOT / "capgeo").rglob("*.py"):
        cited |= set(re.findall(r"capgeo docs ([a-z-]+)", source.read_text(encoding="utf-8")))
    assert cited, "nothing cites a page: the pattern is stale"
    assert cited <= set(manual.topics()), cited - set(manual.topics())


@pytest.mark.slow
def test_a_built_wheel_carries_the_pages(tmp_path):
    """An installed wheel has no docs/ beside it: setup.py copies the pages into capgeo/docs/."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("capgeo", "docs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "out"),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "out").glob("capgeo-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = {name: archive.read(name) for name in archive.namelist() if name.startswith("capgeo/docs/")}
    assert packed == {f"capgeo/docs/{page.name}": page.read_bytes() for page in PAGES}
    # installed, it reads its own copy (there is no checkout beside site-packages)
    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                                str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    probe = ("from capgeo import manual; import sys; "
             "sys.stdout.write(manual.__file__ + '\\n' + ' '.join(manual.topics()) + '\\n' + manual.page('leak'))")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                           env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0, shown.stderr[-2000:]
    module_file, names, text = shown.stdout.split("\n", 2)
    assert Path(module_file).is_relative_to(target)
    assert names.split() == [page.stem for page in PAGES]
    assert text == (ROOT / "docs" / "leak.md").read_text(encoding="utf-8")
