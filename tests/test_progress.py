"""The encoding bar moves after every encoder batch, not once per cache chunk."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from capgeo.progress import Tally, batch_progress


class RecordingBar:
    def __init__(self):
        self.steps: list[float] = []

    def advance(self, amount: float = 1) -> None:
        self.steps.append(amount)


def test_batch_progress_hands_the_callers_bar_through():
    bar = RecordingBar()
    with batch_progress(bar, "x", 10) as given:
        given.advance(3)
    assert given is bar and bar.steps == [3]


def test_tally_counts_and_forwards():
    bar = RecordingBar()
    tally = Tally(bar)
    tally.advance(2)
    tally.advance(5)
    assert tally.count == 7 and bar.steps == [2, 5]


def test_minilm_advances_per_batch_and_matches_one_call():
    from capgeo.encoders.minilm import load_minilm_encoder

    encoder = load_minilm_encoder()
    texts = [f"{'a big ' * (i % 5)}dog number {i} runs on the grass" for i in range(11)]
    bar = RecordingBar()
    batched = encoder.encode(texts, batch_size=4, progress=bar)
    assert bar.steps == [4, 4, 3]
    # independent: sentence-transformers in one call over all texts
    whole = encoder.model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    assert np.abs(batched - whole).max() < 1e-5


def test_clip_tower_advances_per_trimmed_batch():
    import open_clip  # noqa: F401
    from _clip_fixtures import tiny_clip, tiny_config

    from capgeo.encoders.trimmed import encode_token_rows, text_tower

    parts = text_tower(tiny_clip(tiny_config(77)))
    rows = [np.array([49406] + [320] * length + [49407]) for length in (3, 40, 7, 60, 2, 20, 11, 5)]
    bar = RecordingBar()
    _, stats = encode_token_rows(parts, rows, batch_size=2, progress=bar)
    assert len(bar.steps) == stats.batches > 1 and sum(bar.steps) == len(rows)


class StepEncoder:
    """Encodes in batches of ``step`` and reports each, like the real towers (or not at all)."""

    def __init__(self, step: int | None):
        from capgeo.encoders.base import EncoderInfo

        self.step = step
        self.info = EncoderInfo(spec="fake", kind="fake", name="fake", width=4, context_length=77,
                                logit_scale=None, fingerprint=f"fake-{step}")

    def token_counts(self, texts):
        return np.array([len(text.split()) for text in texts])

    def encode(self, texts, *, max_tokens=None, batch_size=64, progress=None):
        if self.step:
            for start in range(0, len(texts), self.step):
                progress.advance(min(self.step, len(texts) - start))
        vectors = np.zeros((len(texts), 4), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


@pytest.mark.parametrize("step, expected", [(3, [3, 3, 3, 1, 3, 3, 1]), (None, [10, 7])])
def test_embed_moves_the_bar_per_encoder_batch(monkeypatch, step, expected):
    import importlib

    embed_module = importlib.import_module("capgeo.encoders.embed")
    bars: list[RecordingBar] = []

    @contextlib.contextmanager
    def recording_progress_bar(description, total, enabled=None):
        bars.append(RecordingBar())
        yield bars[-1]

    monkeypatch.setattr(embed_module, "progress_bar", recording_progress_bar)
    texts = [f"caption {i} of a red bus" for i in range(17)]
    embed_module.embed(texts, StepEncoder(step), use_cache=False, chunk_rows=10)
    # an encoder that reports its batches moves the bar by each; one that does not is made up per chunk
    assert [step for step in bars[0].steps if step] == expected


def test_a_bar_whose_steps_take_longer_than_half_a_minute_still_has_a_rate(monkeypatch):
    """rich estimates speed over the last 30 s: with 40 s batches (encoding on a CPU) the window held
    one sample, so the bar showed no rate and no ETA until the end, or 0.0/s."""
    import rich.console

    from capgeo.progress import progress_bar

    clock = [0.0]
    monkeypatch.setattr(rich.console, "monotonic", lambda: clock[0])
    with progress_bar("encoding", 4, enabled=True) as bar:
        bar.advance(0)  # the encoder's start
        for _ in range(3):
            clock[0] += 40.0
            bar.advance(1)
        task = bar._progress.tasks[0]
        assert task.speed is not None and task.speed == pytest.approx(3 / 120)
        assert task.time_remaining == pytest.approx(40.0)


from rich.console import Console as REAL_CONSOLE  # noqa: E402


def _drawn(monkeypatch, width: int, description: str, total: int = 25010) -> str:
    """What progress_bar draws on a terminal of ``width`` columns, control sequences taken out."""
    import io
    import re

    import rich.console

    from capgeo.progress import progress_bar

    screen = io.StringIO()
    monkeypatch.setattr(rich.console, "Console", lambda **options: REAL_CONSOLE(
        file=screen, force_terminal=True, width=width, color_system=None))
    with progress_bar(description, total, enabled=True) as bar:
        bar.advance(23000)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())


def test_the_bar_keeps_its_numbers_on_a_narrow_terminal_and_shows_names_as_text(monkeypatch):
    """At 40 columns the count and times were cut ("23000/25…", "0:00:…"); an encoder's name was read
    as markup ([red] coloured the line, [/x] raised MarkupError) and its ESC reached the terminal."""
    narrow = _drawn(monkeypatch, 40, "Encoding with all-MiniLM-L6-v2")
    assert "23000/25010" in narrow and "…" not in narrow
    wide = _drawn(monkeypatch, 120, "Encoding with cfg[/x] [red]x \x1b[7mINV")
    assert "Encoding with cfg[/x] [red]x \\x1b[7mINV" in wide and "23000/25010" in wide


@pytest.mark.parametrize("width", [40, 80, 100])
def test_wide_characters_and_large_totals_leave_the_numbers_whole(monkeypatch, width):
    """A name in CJK (two cells a character) was cut by characters, and a million-caption count did
    not fit the room kept for the numbers: "192/3…", "0:00:…" at 80 columns."""
    drawn = _drawn(monkeypatch, width, "Encoding with 日本語モデルのフォルダ名前テスト長い名前長い名前", total=1_000_000)
    assert "23000/1000000" in drawn
    numbers = drawn.split("23000/1000000", 1)[1].splitlines()[0]
    assert "…" not in numbers


def test_no_bar_name_is_cut_it_takes_the_line_above_when_it_does_not_fit(monkeypatch):
    """At 80 columns "[1/3] Encoding with all-MiniLM-L6-v2" read "[1/3] Encoding with al…"."""
    name = "[1/3] Encoding with all-MiniLM-L6-v2"
    for width in (40, 60, 80):
        drawn = _drawn(monkeypatch, width, name)
        assert "…" not in drawn and "23000/25010" in drawn
        assert name in " ".join(drawn.split()) or name in drawn.replace("\n", ""), (width, drawn)
    beside = _drawn(monkeypatch, 120, name)
    assert any(name in line and "23000/25010" in line for line in beside.splitlines())


def test_a_byte_counting_bar_says_its_unit(monkeypatch):
    import io
    import re

    import rich.console

    from capgeo.progress import BYTES, progress_bar

    for width in (40, 80, 120):
        screen = io.StringIO()
        monkeypatch.setattr(rich.console, "Console", lambda **options: REAL_CONSOLE(
            file=screen, force_terminal=True, width=width, color_system=None))
        with progress_bar("Reading shards", 46_200_000, enabled=True, unit=BYTES) as bar:
            bar.advance(12_300_000)
        drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
        assert "12.3/46.2 MB" in drawn and "…" not in drawn, (width, drawn)
        assert "Reading shards" in drawn
