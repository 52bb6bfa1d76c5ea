"""What `capgeo.profile(...)` hands a one-call user: per-caption rows without passing anything back,
the page `capgeo report` writes, a provenance that says what identifies the data, and a clear message
when the clone's own folder shadows the package."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import capgeo
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import Profile

from _action_fixtures import unit, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dataset(tmp_path):
    """30 captions of 15 images with near-twins across images, and their vectors (.npy)."""
    rng = np.random.default_rng(11)
    n = 30
    vectors = unit(rng.normal(size=(6, 10))[np.arange(n) % 6] + 0.2 * rng.normal(size=(n, 10)))
    texts = [f"a {['red', 'blue', 'green'][i % 3]} kite number {i} over the {['beach', 'hill'][i % 2]}"
             for i in range(n)]
    ids, groups = [f"c{i:02d}" for i in range(n)], [f"img{i // 2:02d}" for i in range(n)]
    data = write_jsonl(tmp_path / "d.jsonl", ids, groups, texts)
    np.save(tmp_path / "v.npy", vectors)
    return data, f"vectors:{tmp_path / 'v.npy'}", ids, groups, texts


def test_per_caption_without_arguments_is_the_rows_of_the_data_it_was_made_from(dataset):
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    data, spec, *_ = dataset
    profile = capgeo.profile(data, encoder=spec, batch_size=8, progress=False)
    captions = load_captions(data)
    expected = profile.per_caption(captions, embed(captions, spec, progress=False))
    rows = profile.per_caption()
    assert rows.equals(expected) and rows.height == 30
    # what it keeps is no field: not written, not compared, not shown
    assert profile == Profile.from_dict(profile.to_dict()) and "_made_from" not in profile.to_dict()
    assert "vectors" not in repr(profile).lower() or "vectors:" in repr(profile)
    with pytest.raises(CapgeoError, match="give both"):
        profile.per_caption(captions)


def test_per_caption_of_a_profile_without_its_data_says_what_to_pass(dataset):
    data, spec, *_ = dataset
    profile = capgeo.profile(data, encoder=spec, batch_size=8, gamma=False, progress=False)
    for alone in (Profile.from_dict(profile.to_dict()), dataclasses.replace(profile, gamma_left_out="x")):
        with pytest.raises(CapgeoError, match=r"pass them, profile.per_caption\(captions, embeddings\)"):
            alone.per_caption()


def _body(page: str) -> str:
    """A page without what differs between two runs: dates, timings and the command lines."""
    page = re.sub(r"\d{4}-\d\d-\d\dT?[ \d:.]*(?:UTC|Z|\+00:00)?", "DATE", page)
    page = re.sub(r" in \d+\.\d s", "", page)
    page = re.sub(r"<tr><th>Profile command</th>.*?</tr>", "", page, flags=re.S)  # the library's has none
    return re.sub(r'<pre class="command">.*?</pre>', "", page, flags=re.S)


@pytest.mark.slow
def test_to_html_writes_the_page_capgeo_report_writes(dataset, tmp_path):
    from capgeo.cli import main

    pytest.importorskip("openTSNE")
    data, spec, *_ = dataset
    profile = capgeo.profile(data, encoder=spec, batch_size=[8, 4], relative_buckets=True, progress=False)
    written = profile.to_html(tmp_path / "api.html")
    result = CliRunner().invoke(main, ["report", str(data), "--encoder", spec, "--batch-size", "8", "--batch-size",
                                       "4", "-o", str(tmp_path / "cli.html")])
    assert result.exit_code == 0, result.output
    page, cli = written.read_text(encoding="utf-8"), (tmp_path / "cli.html").read_text(encoding="utf-8")
    assert 'id="gallery"' in page and 'id="map"' in page
    assert _body(page) == _body(cli)


def test_to_html_of_a_saved_profile_says_what_it_lacks_and_the_call_that_adds_it(dataset, tmp_path):
    data, spec, *_ = dataset
    saved = Profile.from_dict(capgeo.profile(data, encoder=spec, batch_size=8, gamma=False,
                                             progress=False).to_dict())
    page = saved.to_html(tmp_path / "p.html").read_text(encoding="utf-8")
    for lacking in ("Near-duplicate gallery: this profile has no dupes section",
                    "Gamma diagnostics: this profile has no gamma section",
                    "Caption map: this profile has no map section"):
        assert f"{lacking}; capgeo.profile(DATA).to_html(...) adds it" in page
    assert 'id="gallery"' not in page


def test_provenance_names_the_data_fingerprint_or_what_identifies_data_in_memory(dataset, tmp_path):
    import hashlib

    data, spec, ids, groups, texts = dataset
    from_file = capgeo.profile(data, encoder=spec, batch_size=8, gamma=False, progress=False)
    page = Profile.from_dict(from_file.to_dict()).to_html(tmp_path / "f.html").read_text(encoding="utf-8")
    # CaptionSet.fingerprint: the file name, then its bytes
    assert f"<code>{hashlib.sha256(b'd.jsonl' + Path(data).read_bytes()).hexdigest()}</code>" in page
    rows = [{"id": i, "image": g, "caption": t} for i, g, t in zip(ids, groups, texts)]
    in_memory = capgeo.profile(rows, encoder=spec, batch_size=8, gamma=False, progress=False)
    assert in_memory.dataset.fingerprint is None
    page = Profile.from_dict(in_memory.to_dict()).to_html(tmp_path / "m.html").read_text(encoding="utf-8")
    assert "<code>None</code>" not in page
    assert "none: the captions were built in memory, not read from a file" in page




@pytest.mark.slow
def test_an_editable_install_is_found_from_the_folder_holding_the_clone(tmp_path):
    """`pip install -e .` of a clone named capgeo, then a script run from the clone's parent folder: the
    package, not the clone's own folder as an empty namespace package."""
    import os
    import shutil

    clone = tmp_path / "capgeo"
    clone.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "docs", clone / "docs")
    shutil.copytree(ROOT / "capgeo", clone / "capgeo", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True)
    if made.returncode:
        pytest.skip(f"no venv here: {made.stderr.decode()[-200:]}")
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # this environment's pip and setuptools build the editable wheel into the new environment, offline
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", site, "-e", str(clone)], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    if install.returncode:
        pytest.skip(f"pip could not make an editable install here: {install.stderr[-300:]}")
    (tmp_path / "script.py").write_text("import capgeo\nprint(capgeo.__file__, capgeo.__version__)\n")
    alone = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run([str(python), "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=alone)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == str(clone / "capgeo" / "__init__.py")
