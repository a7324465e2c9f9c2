"""Spaces that used to be refused whole now run: a combination that cannot exist on some rows is
served the way frameworks do (a draft at the tensor parallel its heads allow), applied where it
can be (overlapped drafting where the row has a draft chip), or makes those rows infeasible with
the reason in ``infeasible_reason`` (an EP that does not divide the row's chips). A study is
refused only when no row could ever be valid, in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dse
from dse.api import evaluate_design
from dse.cli import main
from dse.evaluation.designs import constraint_values, evaluate_study, metric_table
from dse.search.presearch import score
from dse.study import parse_study

EP_REASON = "expert-parallel ranks (ep) do not divide the chips"

#: a draft-as-knob co-design on Qwen2.5-72B: two drafts whose heads (14, 12) do not divide 8 chips, an optional
#: draft chip on 1 or 3 L4s (neither divides 14 or 12), overlapped drafting, and drafts that cannot use the chip
CODESIGN = {
    "name": "codesign",
    "workload": {"target": "qwen2.5-72b", "draft": ["qwen2.5-0.5b", "qwen2.5-1.5b", "eagle3", "ngram", "none"],
                 "dtype": "fp8", "overlap": True, "acceptance": {"alpha": 0.8}, "k": 4, "batch": 1,
                 "prompt_tokens": 128, "output_tokens": 128},
    "space": {"target_chip": {"device": ["h100-sxm"], "chips": [4, 8]},
              "draft_chip": {"enabled": [True, False], "device": ["l4"], "chips": [1, 3]}},
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"}],
}
#: DeepSeek-V3 on 8-64 H200s with expert parallel searched: ep 16 cannot split 8 chips, ep 64 only 64
MOE = {
    "name": "moe",
    "workload": {"target": "deepseek-v3", "dtype": "fp8", "ep": [1, 8, 16, 64], "batch": 1, "prompt_tokens": 128,
                 "output_tokens": 128},
    "space": {"target_chip": {"device": ["h200"], "chips": [8, 16, 32, 64]}},
    "objectives": [{"metric": "baseline_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"}],
}


def _write(tmp_path, raw: dict, **changes) -> str:
    raw = yaml.safe_load(yaml.safe_dump(raw))          # a deep copy
    for key, value in changes.items():
        section, _, field = key.partition(".")
        raw[section][field] = value
    raw["output"] = str(tmp_path / f"{raw['name']}.parquet")
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


def test_codesign_with_unsplittable_drafts_and_optional_overlap_runs(tmp_path, db):
    p = _write(tmp_path, CODESIGN)
    res = CliRunner().invoke(main, ["sweep", p, "--out", str(tmp_path / "grid")])
    assert res.exit_code == 0, res.output
    assert "overlap" not in res.output
    df = pd.read_parquet(tmp_path / "grid")
    on = df["params_draft_chip_enabled"].fillna(False).astype(bool)
    tp = {key: set(g) for key, g in df.groupby([df.params_draft, df.params_target_chip_chips, on])["draft_tp"]}
    # on the target chips: 14 heads / 2 KV heads over 4 or 8 -> 2; 12 heads / 2 KV heads over 4 or 8 -> 4;
    # on 1 or 3 L4s: 1 (neither 14 nor 12 heads split 3 ways with 2 KV heads); EAGLE-3 runs at the target's
    # chips, n-gram and none draft nothing on the device
    for chips in (4, 8):
        assert set(tp[("qwen2.5-0.5b", chips, False)]) == {2}
        assert set(tp[("qwen2.5-1.5b", chips, False)]) == {4}
        assert set(tp[("qwen2.5-0.5b", chips, True)]) == {1} == set(tp[("qwen2.5-1.5b", chips, True)])
        assert set(tp[("eagle3", chips, False)]) == {chips}
        assert set(tp[("ngram", chips, False)]) == {0} == set(tp[("none", chips, False)])
    assert df["feasible"].all() and df["infeasible_reason"].isna().all()
    # overlapped where the row's draft chip holds the draft, serial elsewhere: each row is dse eval of it
    # (the study's draft-chip link is its 128 GB/s knob, dse eval's the slower end's: compare the
    # draft and verify passes and the software share, not the link)
    kw = dict(hw="h100-sxm", chips=8, target="qwen2.5-72b", draft="qwen2.5-1.5b", dtype="fp8", alpha=0.8, k=4,
              prompt=128, output=128, db=db)
    rows = df[(df.params_draft == "qwen2.5-1.5b") & (df.params_target_chip_chips == 8)]
    chip = rows[rows.params_draft_chip_enabled.fillna(False).astype(bool) & (rows.params_draft_chip_chips == 1)]
    plain = rows[~rows.params_draft_chip_enabled.fillna(False).astype(bool)]
    for row, one in ((chip.iloc[0], evaluate_design(draft_hw="l4", overlap=True, **kw)),
                     (plain.iloc[0], evaluate_design(**kw))):
        for c in ("draft_ms_per_iter", "verify_ms_per_iter", "overhead_ms_per_token", "draft_tp"):
            assert row[c] == pytest.approx(one[c], rel=1e-12), c
    # serial: iteration = draft + verify + link + the runtime's per-iteration cost; overlapped, part of the
    # draft hides behind the verify pass
    a, b = chip.iloc[0], plain.iloc[0]
    hidden = [r.draft_ms_per_iter + r.verify_ms_per_iter + r.link_ms_per_iter - r.iter_ms for r in (a, b)]
    assert hidden[0] > 0 > hidden[1]


def test_ep_that_does_not_divide_a_rows_chips_is_infeasible_with_its_reason(tmp_path, db):
    p = _write(tmp_path, MOE)
    res = CliRunner().invoke(main, ["sweep", p, "--out", str(tmp_path / "grid")])
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(tmp_path / "grid")
    assert len(df) == 16
    bad = (df.params_target_chip_chips % df.params_ep) != 0
    # 16 on 8 chips; 64 on 8, 16 and 32 chips
    assert sorted(zip(df.params_ep[bad], df.params_target_chip_chips[bad])) == [(16, 8), (64, 8), (64, 16), (64, 32)]
    assert (df.infeasible_reason[bad] == EP_REASON).all() and not df.feasible[bad].any()
    assert (df.constraint_violation[bad] == 1.0).all()          # the buildable column's +1
    assert df.feasible[~bad].all() and df.infeasible_reason[~bad].isna().all()
    # the search's constraint handling sees the same: constraint column 1 (buildable and valid) is +1 there,
    # and the pre-search scores those designs infeasible
    s = parse_study(yaml.safe_load(open(p)), p, db)
    params = {"ep": df.params_ep.to_numpy(), "target_chip_chips": df.params_target_chip_chips.to_numpy(),
              "target_chip_device": np.full(len(df), "h200", dtype=object)}
    d, m = evaluate_study(s, params, len(df), db, s.tech)
    cons = constraint_values(metric_table(d, m), s)
    assert (cons[:, 1] > 0).tolist() == bad.tolist()
    assert (~score(s, params, len(df), db, s.tech)[1]).tolist() == bad.tolist()


def test_a_search_marks_the_rows_that_cannot_exist_infeasible(tmp_path):
    p = _write(tmp_path, MOE, **{"workload.ep": [16, 64]})
    df = dse.run_study(p, n_trials=12, sampler="random", storage=":memory:", progress=False).frame
    ok = (df.params_target_chip_chips % df.params_ep) == 0
    assert (df.feasible == ok).all() and (df.infeasible_reason.isna() == ok).all()
    assert (df.infeasible_reason[~ok] == EP_REASON).all()


def test_fixed_ep_beside_chips_it_does_not_divide(tmp_path):
    # ep 8 fixed, chips [4, 8]: the 4-chip rows are infeasible, the 8-chip rows run (they used to refuse the study)
    p = _write(tmp_path, MOE, **{"workload.ep": 8})
    raw = yaml.safe_load(open(p))
    raw["space"]["target_chip"]["chips"] = [4, 8]
    raw["workload"]["target"] = "mixtral-8x7b"
    raw["workload"]["dtype"] = "bf16"
    dse.sweep(_write(tmp_path, raw), out=tmp_path / "grid", progress=False)
    df = pd.read_parquet(tmp_path / "grid").set_index("params_target_chip_chips")
    assert df.loc[4, "infeasible_reason"] == EP_REASON and not df.loc[4, "feasible"]
    assert df.loc[8, "feasible"] and pd.isna(df.loc[8, "infeasible_reason"])


@pytest.mark.parametrize("changes, line", [
    # no (ep, chips) row can exist
    ({"workload.ep": [16, 64], "space.target_chip": {"device": ["h200"], "chips": [8]}},
     "workload.ep = [16, 64]: no row can exist (E expert ranks of t/E chips need E to divide the chips t): expected a "
     "divisor of num_experts = 256 that divides some chip count of space.target_chip.chips = 8: one of 1, 2, 4, 8"),
])
def test_refused_only_when_no_row_can_exist_in_one_line(tmp_path, changes, line):
    p = _write(tmp_path, MOE, **changes)
    res = CliRunner().invoke(main, ["run", p, "--n-trials", "4", "--storage", ":memory:"])
    assert res.exit_code == 2
    assert _lines(res) == [f"error: {p}: {line}"]


def test_overlap_without_any_draft_chip_is_refused_once(tmp_path, db):
    """Five drafts and no draft chip: overlapped drafting can happen on no row. Said once, not once
    per draft."""
    raw = yaml.safe_load(yaml.safe_dump(CODESIGN))
    del raw["space"]["draft_chip"]
    p = _write(tmp_path, raw)
    res = CliRunner().invoke(main, ["run", p, "--n-trials", "4", "--storage", ":memory:"])
    assert res.exit_code == 2
    assert _lines(res) == [f"error: {p}: workload.overlap = True: overlapped drafting needs a draft model on a draft "
                           "chip (space.draft_chip.enabled: true, or [true, false] to overlap where it is on); no row "
                           "has one"]
    # a draft chip that is always on, with a draft whose heads do not split its 3 chips: runs at tensor parallel 1
    raw["space"]["draft_chip"] = {"enabled": True, "device": ["l4"], "chips": [1, 3]}
    raw["workload"]["draft"] = "qwen2.5-1.5b"
    s = parse_study(raw, p, db)
    d, m = evaluate_study(s, {"draft_chip_chips": np.array([1, 3]), "target_chip_chips": np.array([4, 8])}, 2, db,
                          s.tech)
    assert m.draft_tp.tolist() == [1, 1]
