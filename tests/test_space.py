"""Which knobs act on a design (dse.study.space): the conditional search space of issue 11."""

import numpy as np
import pytest

from dse.evaluation.designs import build_designs
from dse.study import parse_study
from dse.study.space import active_masks, fill_inactive, sampling_order

RAW = {
    "name": "space",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", "acceptance": {"alpha": 0.8}},
    "space": {
        "target_chip": {"process_node": "n5", "peak_tflops": {"low": 100, "high": 1000},
                        "memory": ["hbm3e", "lpddr5x", "sram"], "memory_stacks": {"low": 1, "high": 8},
                        "stack_height": [8, 12], "sram_mb": {"low": 0, "high": 512}, "chips": [1, 2],
                        "link_bw_gb_s": {"low": 100, "high": 900}, "link_latency_us": {"low": 1, "high": 5}},
        "draft_chip": {"enabled": [True, False], "peak_tflops": {"low": 10, "high": 100},
                       "memory": ["gddr7", "hbm3e"], "memory_stacks": {"low": 1, "high": 4}, "stack_height": [8, 12],
                       "link_bw_gb_s": {"low": 16, "high": 128}},
    },
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"}],
}


@pytest.fixture(scope="module")
def study():
    return parse_study(RAW, "space.yaml")


def test_each_rule_by_hand(study):
    # rows: (target memory, chips, draft chip on, draft memory)
    rows = [("hbm3e", 1, False, "gddr7"), ("lpddr5x", 2, False, "hbm3e"), ("sram", 1, True, "hbm3e"),
            ("hbm3e", 2, True, "gddr7")]
    v = {"target_chip_memory": np.array([r[0] for r in rows], dtype=object),
         "target_chip_chips": np.array([r[1] for r in rows]),
         "draft_chip_enabled": np.array([r[2] for r in rows]),
         "draft_chip_memory": np.array([r[3] for r in rows], dtype=object)}
    m = {k: a.tolist() for k, a in active_masks(study, v, 4).items()}
    # stacks: not with SRAM-only memory; height: HBM only
    assert m["target_chip_memory_stacks"] == [True, True, False, True]
    assert m["target_chip_stack_height"] == [True, False, False, True]
    # the target's link: across chips, or as one end of the draft link; its latency across chips only
    assert m["target_chip_link_bw_gb_s"] == [False, True, True, True]
    assert m["target_chip_link_latency_us"] == [False, True, False, True]
    # draft-chip knobs: only with the draft chip on; its stack height only on HBM
    assert m["draft_chip_peak_tflops"] == m["draft_chip_link_bw_gb_s"] == [False, False, True, True]
    assert m["draft_chip_stack_height"] == [False, False, True, False]
    assert "target_chip_peak_tflops" not in m and "draft_chip_enabled" not in m


def test_controllers_are_sampled_first(study):
    names = [k.name for k in sampling_order(study)]
    assert names[0] == "draft_chip_enabled"
    ctrl = {"target_chip_memory", "target_chip_chips", "draft_chip_memory"}
    assert set(names[1:4]) == ctrl


def test_inactive_knobs_take_their_neutral_value(study):
    """A lone chip without a draft chip: 0 GB/s and 0 us of link, so 0 W of link power; the same
    chip with a 900 GB/s link (2 chips) pays 900e9 B/s x 8 bit x 5 pJ/bit = 36 W per chip more."""
    n = 2
    params = {k.name: np.array([None] * n, dtype=object) for k in study.searched}
    params.update(target_chip_peak_tflops=np.array([500.0, 500.0]), target_chip_memory=np.array(["hbm3e"] * 2),
                  target_chip_memory_stacks=np.array([4, 4]), target_chip_stack_height=np.array([8, 8]),
                  target_chip_sram_mb=np.array([50.0, 50.0]), target_chip_chips=np.array([1, 2]),
                  draft_chip_enabled=np.array([False, False]))
    params["target_chip_link_bw_gb_s"] = np.array([None, 900.0], dtype=object)
    params["target_chip_link_latency_us"] = np.array([None, 2.0], dtype=object)
    filled, masks = fill_inactive(study, params, n)
    assert filled["target_chip_link_bw_gb_s"].tolist() == [0.0, 900.0]
    assert filled["target_chip_link_latency_us"].tolist() == [0.0, 2.0]
    assert filled["draft_chip_peak_tflops"].tolist() == [10.0, 10.0]         # the range's low end, unused
    assert filled["draft_chip_memory"].tolist() == ["gddr7", "gddr7"]       # the first choice, unused
    from dse.catalog.database import load_database
    d = build_designs(study, params, n, load_database(), study.tech)
    assert d.hardware["chip_power_w"][1] - d.hardware["chip_power_w"][0] == pytest.approx(36.0, rel=1e-12)
    assert d.active["target_chip_link_bw_gb_s"].tolist() == [False, True]


def test_category_codes_by_hand():
    from dse.study.space import category_codes
    names, codes = category_codes(np.array(["hbm3e", "hbm3", "hbm3e"], dtype=object), ("hbm3", "hbm3e"))
    assert names == ("hbm3", "hbm3e") and codes.tolist() == [1, 0, 1]
    # a value not among the names (a search's None where the knob is inactive) extends them, as text, sorted
    names, codes = category_codes(np.array(["x", None, "hbm3"], dtype=object), ("hbm3",))
    assert names == ("hbm3", "None", "x") and codes.tolist() == [2, 1, 0]
    # integers are codes already
    names, codes = category_codes(np.array([1, 0]), ("a", "b"))
    assert names == ("a", "b") and codes.tolist() == [1, 0]


def test_codes_and_names_evaluate_the_same(study):
    """A grid hands categorical knobs over as indices into their choices, a search as names (with
    None where inactive): the same designs give the same columns, bit for bit."""
    from dse.catalog.database import load_database
    from dse.evaluation.designs import evaluate_study, metric_table
    rng = np.random.default_rng(0)
    n = 3000
    coded, named = {}, {}
    for k in study.searched:
        if k.kind == "cat":
            i = rng.integers(0, len(k.choices), n)
            coded[k.name], named[k.name] = i, np.array(k.choices, dtype=object)[i]
        elif k.kind == "bool":
            coded[k.name] = named[k.name] = rng.random(n) < 0.5
        elif k.choices:
            coded[k.name] = named[k.name] = np.array(k.choices)[rng.integers(0, len(k.choices), n)]
        else:
            v = rng.uniform(k.low, k.high, n)
            coded[k.name] = named[k.name] = np.round(v) if k.kind == "int" else v
    masks = active_masks(study, named, n)
    named["draft_chip_memory"] = np.where(masks["draft_chip_memory"], named["draft_chip_memory"], None)
    db = load_database()
    a, b = (metric_table(*evaluate_study(study, p, n, db, study.tech)) for p in (coded, named))
    assert list(a) == list(b)
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype == y.dtype and (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f"
                                       else np.array_equal(x, y)), name
