"""Figures a person can read (issue 21 item 5): no empty panels, one legend, known-part labels
that stay inside the axes and off the points and each other, draft chips named by what they are."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.report import figures
from dse.report.rows import design_label, draft_chip_label


def _df(n=600, seed=1):
    rng = np.random.default_rng(seed)
    lat = rng.uniform(2, 30, n)
    df = pd.DataFrame({"trial": np.arange(n), "spec_ms_per_token": lat, "cost_usd": 2e5 / lat + rng.uniform(0, 5e3, n),
                       "power_w": rng.uniform(200, 900, n), "feasible": rng.random(n) > 0.2})
    return df


def _known(df):
    """Four known parts in the thick of the cloud, two of them almost on top of each other."""
    return pd.DataFrame({"name": ["h100-sxm x1", "h200 x1", "b200 x1", "mi300x x1"],
                         "spec_ms_per_token": [9.0, 9.3, 5.0, 14.0], "cost_usd": [25e3, 24e3, 40e3, 15e3],
                         "power_w": [700.0, 700.0, 1000.0, 750.0]})


@pytest.mark.parametrize("n_obj, panels", [(2, 1), (3, 3)])
def test_front_figure_has_no_empty_panel_and_one_legend(n_obj, panels):
    df = _df()
    objs = [("spec_ms_per_token", "minimize"), ("cost_usd", "minimize"), ("power_w", "minimize")][:n_obj]
    fig = figures.figure_fronts(figures.pairs_data(df, objs, _known(df)), "t")
    axes = fig.get_axes()
    assert len(axes) == panels                                  # 3 pairs: one row of 3, not a 2x2 with a hole
    assert all(ax.has_data() for ax in axes)
    legends = [ax.get_legend() for ax in axes if ax.get_legend()] + list(fig.legends)
    assert len(legends) == 1
    texts = [t.get_text() for t in legends[0].get_texts()]
    assert not any("x1" in t for t in texts)                    # parts are named on the plot, not again in a legend
    assert "known part (named beside it)" in texts


def test_known_part_labels_stay_inside_and_off_the_points():
    df = _df()
    objs = [("spec_ms_per_token", "minimize"), ("cost_usd", "minimize")]
    (pair,) = figures.pairs_data(df, objs, _known(df))
    fig = figures.figure_fronts([pair], "t")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.get_axes()[0]
    box = ax.get_window_extent(r)
    labels = [t for t in ax.texts if t.get_text().endswith("x1")]
    assert sorted(t.get_text() for t in labels) == sorted(_known(df)["name"])
    boxes = [t.get_window_extent(r) for t in labels]
    legend = ax.get_legend().get_window_extent(r)
    front = ax.transData.transform(pair.front)
    for i, b in enumerate(boxes):
        assert box.x0 <= b.x0 and b.x1 <= box.x1 and box.y0 <= b.y0 and b.y1 <= box.y1    # not clipped
        assert not b.overlaps(legend)
        assert not any(b.overlaps(o) for o in boxes[i + 1:])                               # not on each other
        on = (front[:, 0] >= b.x0) & (front[:, 0] <= b.x1) & (front[:, 1] >= b.y0) & (front[:, 1] <= b.y1)
        assert not on.any()                                                                # not on the front


def test_draft_chips_are_named_by_what_they_are():
    row = pd.Series({"peak_tflops": 2081.0, "params_target_chip_memory": "hbm3e",
                     "params_target_chip_memory_stacks": 8, "params_target_chip_stack_height": 8, "chips": 1,
                     "params_draft_chip_enabled": True, "params_draft_chip_peak_tflops": 233.2,
                     "params_draft_chip_memory": "hbm3e", "params_draft_chip_memory_stacks": 4,
                     "params_draft_chip_sram_mb": 758.2})
    assert design_label(row) == ("2081 TFLOP/s, 8x hbm3e (8-high), 1 chip + draft chip 233 TFLOP/s, 4x hbm3e, "
                                 "758 MB SRAM")
    other = row.copy()
    other["params_draft_chip_memory"], other["params_draft_chip_sram_mb"] = "lpddr5x", 0.0
    assert design_label(other) != design_label(row)            # two designs, two names
    assert draft_chip_label(pd.Series({"params_draft_chip_device": "l4", "params_draft_chip_chips": 2})) == \
        "draft chip l4 x2"


def test_speedup_curves_of_designs_with_one_name_are_told_apart():
    """Two front designs whose label knobs agree (they differ in a knob the label leaves out, e.g.
    the draft chip's link) get the trial in their names: one legend entry each, no repeats."""
    from types import SimpleNamespace

    from dse.report.context import _pick_designs
    row = {"peak_tflops": 989.4, "params_target_chip_memory": "hbm3", "params_target_chip_memory_stacks": 5,
           "chips": 1, "params_draft_chip_enabled": True, "params_draft_chip_peak_tflops": 50.0}
    front = pd.DataFrame([{**row, "trial": 3, "spec_ms_per_token": 5.0, "cost_usd": 9e3},
                          {**row, "trial": 8, "spec_ms_per_token": 6.0, "cost_usd": 8e3}])
    study = SimpleNamespace(objectives=[SimpleNamespace(metric="spec_ms_per_token", direction="minimize"),
                                        SimpleNamespace(metric="cost_usd", direction="minimize")])
    labels = [lab for _, lab in _pick_designs(study, front, 4)]
    assert len(set(labels)) == 2
    assert labels[0] == "989.4 TFLOP/s, 5x hbm3, 1 chip + draft chip 50 TFLOP/s, trial 3 (best latency)"
