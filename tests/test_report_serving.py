"""The report's serving figure (dse.report.serving_figure): drawn for a study with an SLA and for no
other, its star on a point that meets the SLA, its curves the model's own points."""

import numpy as np
import pytest
from click.testing import CliRunner

from dse.api import design_and_workload
from dse.cli import main
from dse.model.evaluate import evaluate
from dse.model.serving import aggregated_points
from dse.report.context import build_report, study_from_results
from dse.report.serving_figure import figure_serving, serving_data
from dse.results import analysis as da

STUDY = """name: s
workload: {target: llama-3.1-70b, dtype: fp8, prompt_tokens: 4000, output_tokens: 500, draft: [none, eagle3], k: auto,
  tree_nodes: 0 SLA}
objectives: [{metric: sla_tokens_per_s_per_chip, direction: maximize}, {metric: usd_per_mtok, direction: minimize}]
space: {target_chip: {device: [h200, b200], chips: [8]}}
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The study swept with and without an SLA: (results folder, report) of each."""
    tmp = tmp_path_factory.mktemp("serving")
    out = {}
    for name, sla in (("sla", ", sla: {ttft_ms: 1000, tpot_ms: 20}"), ("plain", "")):
        study = tmp / f"{name}.yaml"
        text = STUDY.replace(" SLA", sla)
        if not sla:
            text = text.replace("sla_tokens_per_s_per_chip", "tokens_per_s").replace("usd_per_mtok", "cost_usd")
        study.write_text(text)
        r = CliRunner().invoke(main, ["sweep", str(study), "--out", str(tmp / name), "--quiet"])
        assert r.exit_code == 0, r.output
        out[name] = (tmp / name, build_report(tmp / name, out=tmp / f"{name}-report", progress=False))
    return out


def test_the_figure_is_drawn_for_a_study_with_an_sla_and_for_no_other(swept):
    (_, sla), (_, plain) = swept["sla"], swept["plain"]
    assert any(f.endswith("serving.png") for f in sla["figures"])
    assert not any(f.endswith("serving.png") for f in plain["figures"])
    assert all(name != "Serving under the SLA" for name, _ in plain["skipped"])       # not listed as missing either


def test_the_star_sits_on_a_point_that_meets_the_sla_and_the_curves_are_the_models(swept):
    path, _ = swept["sla"]
    df = da.load_results(path)
    study = study_from_results(df)
    d = serving_data(study, da.front(df, [(o.metric, o.direction) for o in study.objectives]))
    assert d is not None and 1 <= len(d.curves) <= 6
    for c in d.curves:
        x, y, how, conc = c.star
        assert x >= 1 / 0.020 - 1e-9                                       # TPOT <= 20 ms: >= 50 tokens/s per user
        if how == "agg":            # one pool: the star is one of the drawn points, TTFT met there
            pts = c.on if c.on is not None else c.off
            hit = np.flatnonzero(np.isclose(pts["x"], x, rtol=1e-9) & np.isclose(pts["y"], y, rtol=1e-9)
                                 & pts["fits"])
            assert hit.size == 1 and pts["ttft_ok"][hit[0]]
    # each part on 8 chips ('b200 x8'): its off curve is aggregated_points of the part without a drafter, point for
    # point, and its on curve that of the part with EAGLE-3 (k auto, a chain)
    for c in d.curves:
        b, w = design_and_workload(hw=c.label.split()[0], chips=8, target="llama-3.1-70b", dtype="fp8", prompt=4000,
                                   output=500)
        ref = aggregated_points(b, w, evaluate)
        np.testing.assert_allclose(c.off["y"], ref["tokens_per_s_per_chip"][0], rtol=1e-9)
        np.testing.assert_array_equal(c.off["ttft_ok"], ref["ttft_s"][0] <= 1.0)
        assert c.drafter == "eagle3" and np.nanmax(c.on["y"] / c.off["y"]) > 1.0     # speculation pays somewhere


def test_the_figure_has_one_legend_and_names_each_design(swept):
    path, _ = swept["sla"]
    df = da.load_results(path)
    study = study_from_results(df)
    d = serving_data(study, da.front(df, [(o.metric, o.direction) for o in study.objectives]))
    fig = figure_serving(d, "t")
    (ax,) = fig.get_axes()
    assert ax.has_data() and ax.get_legend() is None and len(fig.legends) == 1
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert all(c.label in texts for c in d.curves)
    assert "TTFT > 1000 ms" in texts and any(t.startswith("SLA: TPOT <= 20 ms") for t in texts)
    assert ax.get_xlim()[1] > 50                                           # the SLA region is in view


def test_the_sla_survives_in_the_results_metadata(swept):
    """A report rebuilt from the metadata alone (the study file gone) still has the SLA."""
    from dse.report.context import study_mapping
    from dse.study import parse_study
    df = da.load_results(swept["sla"][0])
    wl = df.attrs["dse"]["study"]["workload"]
    assert wl["sla"] == {"ttft_ms": 1000.0, "tpot_ms": 20.0} and wl["serving"] == "best"
    study = parse_study(study_mapping(df.attrs["dse"]["study"]), "metadata")
    assert study.workload.sla.tpot_s == pytest.approx(0.020)
    plain = da.load_results(swept["plain"][0]).attrs["dse"]["study"]["workload"]
    assert "sla" not in plain and "max_batched_tokens" not in plain       # the fingerprint of a study without one
