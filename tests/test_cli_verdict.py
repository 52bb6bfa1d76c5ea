"""`capgeo profile` ends with the report's alerts, rendered from report/alerts.py (one source)."""

from __future__ import annotations

import io
import json

import numpy as np
from click.testing import CliRunner
from rich.console import Console

from capgeo.cli import main
from capgeo.geometry.typed_profile import Profile
from capgeo.terminal.profile import print_verdict
from capgeo.report.alerts import alerts_for


def twins_dataset(folder):
    """40 captions of 40 images whose vectors come in near-identical pairs: every caption has a near-twin."""
    rows = [{"id": f"c{i}", "image": f"img{i}", "caption": f"caption number {i}"} for i in range(40)]
    data = folder / "twins.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 16))
    vectors = np.repeat(base, 2, axis=0) + 0.01 * rng.normal(size=(40, 16))
    np.save(folder / "emb.npy", vectors.astype(np.float32))
    return data, folder / "emb.npy"


def test_terminal_profile_ends_with_every_alert_of_the_report(tmp_path):
    data, vectors = twins_dataset(tmp_path)
    saved = tmp_path / "profile.json"
    result = CliRunner().invoke(main, ["profile", str(data), "--encoder", f"vectors:{vectors}", "--batch-size", "8",
                                       "--n-batches", "20", "--no-gamma", "--json", str(saved)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    alerts = alerts_for(Profile.from_dict(json.loads(saved.read_text())))
    assert {alert.key for alert in alerts} >= {"near_duplicate_captions", "near_twin_batches"}
    verdict_at = result.output.index("Verdict:")
    assert verdict_at > result.output.index("Near-duplicates (cosine >= 0.95)")
    warnings = sum(alert.level == "warning" for alert in alerts)
    # counted in the singular for one (issue #30: "1 warning(s)")
    words = [f"{warnings} warning{'s' if warnings != 1 else ''}",
             f"{len(alerts) - warnings} notice{'s' if len(alerts) - warnings != 1 else ''}"]
    assert f"Verdict: {words[0]}, {words[1]}" in result.output
    # every alert, in the report's order, each title beside its level word; no line is wider than 80
    position = verdict_at
    for alert in alerts:
        line = f"{'WARNING' if alert.level == 'warning' else 'NOTICE':<8}{alert.title}"
        position = result.output.index(line, position)
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    # the message is there too, wrapped: compare with whitespace collapsed
    flat = " ".join(result.output[verdict_at:].split())
    assert all(" ".join(alert.message.split()) in flat for alert in alerts)


def test_no_alert_says_so_and_names_the_encoder():
    buffer = io.StringIO()
    print_verdict(Profile.from_dict({"encoder": {"name": "ViT-L-14"}}, check=False),
                  Console(file=buffer, width=80, color_system=None))
    assert buffer.getvalue().strip() == "Verdict: no alert fired for these captions under ViT-L-14."
