"""A profile carrying a measured gamma (`capgeo gamma --sweep --json`): its figure in the report, its
gamma as the one headline, and the typed profile's round trip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch  # noqa: F401  (required: a broken install fails, never skips)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report_fixtures import make_full_profile  # noqa: E402

from capgeo.findings.gamma_sweep import SweepOptions, gamma_sweep  # noqa: E402
from capgeo.geometry.typed_profile import Profile  # noqa: E402
from capgeo.report.single import GAMMA_SWEEP_FIGURE_ID, render_report  # noqa: E402
from capgeo.report.summary import headline_gamma_text  # noqa: E402


@pytest.fixture(scope="module")
def swept():
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(40), 3)
    vectors = rng.standard_normal((40, 16))[codes] + rng.standard_normal((120, 16))
    sweep = gamma_sweep(vectors, codes, options=SweepOptions(gammas=(0.0, 0.5), seeds=(0, 1), steps=4),
                        rule_gamma=0.375, default_batch_size=8, device="cpu", progress=False)
    profile = make_full_profile()
    profile["gamma"]["sweep"] = json.loads(json.dumps(sweep.to_dict()))
    return profile, sweep


def test_the_report_draws_the_sweep_and_headlines_the_measured_gamma(swept):
    profile, sweep = swept
    page = render_report(Profile.from_dict(profile))
    assert f'id="{GAMMA_SWEEP_FIGURE_ID}"' in page
    assert f"Gamma {sweep.best_gamma:g} measured" in page and "caption-caption proxy" in page
    headline = headline_gamma_text(Profile.from_dict(profile).gamma)
    assert headline.startswith(f"{sweep.best_gamma:g} measured") and "rule's instant estimate 0.38" in headline
    without = make_full_profile()
    assert GAMMA_SWEEP_FIGURE_ID not in render_report(Profile.from_dict(without))
    assert headline_gamma_text(Profile.from_dict(without).gamma).startswith("0.38")


def test_the_typed_profile_carries_the_sweep_and_old_profiles_load(swept):
    profile, sweep = swept
    typed = Profile.from_dict(profile)
    assert typed.gamma.measured_gamma == sweep.best_gamma
    assert typed.to_dict()["gamma"]["sweep"] == profile["gamma"]["sweep"]
    old = make_full_profile()
    assert Profile.from_dict(old).gamma.sweep is None and Profile.from_dict(old).gamma.measured_gamma is None
    assert "sweep" not in Profile.from_dict(old).to_dict()["gamma"]
