"""The sweep's per-chunk fast paths give the same rows as the plain ones (issue 10): grid indices
from runs of each axis (axis_run), activity masks once per controlling combination
(grid_chunk), and chips synthesised once per distinct combination of the knobs but the link
(dse.evaluation.designs.synthesized_chips)."""

from pathlib import Path

import numpy as np
import pytest

import dse.evaluation.designs as ev
from dse.campaign.grid import axis_run, distinct_points, grid_axes, grid_chunk
from dse.evaluation.designs import build_designs
from dse.model.technology import link_power_w, synthesize_chip
from dse.study import load_study, open_study

STUDIES = Path(__file__).parent.parent / "studies"


def test_axis_run_by_hand():
    # shape (2, 3): flat 2, 3, 4 are (0, 2), (1, 0), (1, 1)
    assert axis_run(0, (2, 3), 2, 5).tolist() == [0, 1, 1]
    assert axis_run(1, (2, 3), 2, 5).tolist() == [2, 0, 1]
    # shape (4, 2, 5): flat 7..22; axis 1 has stride 5, period 10: 7-9 -> 1, 10-14 -> 0, 15-19 -> 1, 20-21 -> 0
    assert axis_run(1, (4, 2, 5), 7, 22).tolist() == [1] * 3 + [0] * 5 + [1] * 5 + [0] * 2


def test_axis_run_is_unravel_index():
    rng = np.random.default_rng(3)
    for _ in range(200):
        shape = tuple(int(x) for x in rng.integers(1, 7, size=rng.integers(1, 6)))
        total = int(np.prod(shape))
        a = int(rng.integers(0, total))
        b = int(rng.integers(a + 1, total + 1))
        want = np.unravel_index(np.arange(a, b), shape)
        for j in range(len(shape)):
            got = axis_run(j, shape, a, b)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want[j], err_msg=f"{shape} [{a}, {b}) axis {j}")


@pytest.mark.parametrize("name", ["quickstart.yaml", "draft-chip.yaml"])
def test_grid_chunk_is_distinct_points(name):
    """Chunks that start and end mid-run, and chunks smaller than the table of controlling
    combinations (the sorted branch): the rows, values and masks of the plain path."""
    study = load_study(STUDIES / name)
    axes = grid_axes(study, 3)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape))
    for start, stop in [(0, min(total, 777)), (333, min(total, 4_000)), (total - 1_001, total), (5, 7), (100, 101)]:
        flat = np.arange(start, stop, dtype=np.int64)
        idx = np.unravel_index(flat, shape)
        params = {k.name: i if k.kind == "cat" else vals[i] for (k, vals), i in zip(axes, idx)}
        keep = distinct_points(study, axes, idx, params, flat.size)
        got_flat, got_idx, got_params, masks = grid_chunk(study, axes, shape, start, stop)
        np.testing.assert_array_equal(got_flat, flat[keep])
        for name_, v in params.items():
            np.testing.assert_array_equal(got_params[name_], v[keep], err_msg=name_)
        for i, j in zip(got_idx, idx):
            np.testing.assert_array_equal(i, j[keep])
        from dse.study.space import active_masks
        want = active_masks(study, {n: v[keep] for n, v in params.items()}, int(keep.sum()))
        assert masks.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(masks[k], want[k], err_msg=k)


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint64) if a.dtype == np.float64 else a


@pytest.mark.parametrize("name", ["quickstart.yaml", "draft-chip.yaml"])
def test_chips_once_per_distinct_combination_same_bits(name, monkeypatch):
    study, db, tech = open_study(load_study(STUDIES / name))
    axes = grid_axes(study, 3)
    shape = tuple(v.size for _, v in axes)
    flat, _, params, masks = grid_chunk(study, axes, shape, 0, min(int(np.prod(shape)), 5_000))
    n = flat.size
    calls = []
    real = synthesize_chip

    def counted(tech_, **kw):
        calls.append(np.asarray(kw["node_idx"]).size)
        return real(tech_, **kw)
    monkeypatch.setattr(ev, "synthesize_chip", counted)
    fast = build_designs(study, params, n, db, tech, masks)
    assert calls and max(calls) < n / 2          # the chips were synthesised on distinct rows only
    monkeypatch.setattr(ev, "MIN_ROWS_DEDUPE", 10 ** 12)
    calls.clear()
    plain = build_designs(study, params, n, db, tech, masks)
    assert calls and min(calls) == n
    assert fast.hardware.keys() == plain.hardware.keys()
    for k in plain.hardware:
        np.testing.assert_array_equal(_bits(fast.hardware[k]), _bits(plain.hardware[k]), err_msg=k)
    for g in ("target", "draft"):
        a, b = getattr(fast.batch, g), getattr(plain.batch, g)
        for f in a.__dataclass_fields__:
            np.testing.assert_array_equal(_bits(getattr(a, f)), _bits(getattr(b, f)), err_msg=f"{g}.{f}")


def test_link_power_by_hand():
    # 900 GB/s both ways = 9e11 B/s x 8 bit/B = 7.2e12 bit/s at link_j_per_bit J/bit
    _, _, tech = open_study(load_study(STUDIES / "quickstart.yaml"))
    assert link_power_w(tech, 9e11) == pytest.approx(7.2e12 * tech.link_j_per_bit)
    chip = synthesize_chip(tech, node_idx=0, peak_tflops=1000.0, memory_idx=0, memory_stacks=4,
                           stack_height=8, sram_mb=64, link_bw_gb_s=900.0)
    bare = synthesize_chip(tech, node_idx=0, peak_tflops=1000.0, memory_idx=0, memory_stacks=4,
                           stack_height=8, sram_mb=64, link_bw_gb_s=0.0)
    assert chip.power_w[0] == bare.power_w[0] + link_power_w(tech, 9e11)


def test_take_reads_the_row_groups_that_hold_the_rows(tmp_path, monkeypatch):
    """Dataset.take over parts of several row groups: the rows load_results has at those numbers."""
    import pyarrow.parquet as pq

    import dse.results.store as store
    from dse.campaign.grid import sweep
    from dse.results.dataset import open_results
    from dse.results.load import load_results
    real = store.write_options
    monkeypatch.setattr(store, "write_options", lambda schema: {**real(schema), "row_group_size": 64})
    out = tmp_path / "sw"
    sweep(load_study(STUDIES / "quickstart.yaml"), points=3, out=out, chunk_size=500, progress=False)
    ds = open_results(out)
    assert pq.ParquetFile(ds.files[0]).metadata.num_row_groups > 1
    full = load_results(out, columns=["trial", "cost_usd", "params_target_chip_memory"])
    rows = np.array([0, 1, 63, 64, 65, 200, 499, 500, 777, len(full) - 1])
    got = ds.take(rows, ["trial", "cost_usd", "params_target_chip_memory"])
    assert np.concatenate([m for m, _ in got]).tolist() == rows.tolist()
    trial = np.concatenate([t["trial"].to_numpy() for _, t in got])
    np.testing.assert_array_equal(trial, full["trial"].to_numpy()[rows])
    mem = sum((t["params_target_chip_memory"].to_pylist() for _, t in got), [])
    assert mem == full["params_target_chip_memory"].iloc[rows].tolist()
