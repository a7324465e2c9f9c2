"""Serving under an SLA (dse.model.serving): operating points over concurrency, aggregated and
disaggregated pools, the best point that meets TTFT and TPOT targets, and its cost per token.
Hand-worked numbers on an ideal H100 (no fixed costs, efficiencies 1, hard roofline), properties on
random designs, and the CLI."""

import dataclasses
import json

import numpy as np
import pytest

from dse.api import design_and_workload, evaluate_design
from dse.model.evaluate import evaluate
from dse.model.scheduler import md1_wait_s
from dse.model.serving import (
    CONCURRENCY,
    aggregated_points,
    best_point,
    disaggregated_points,
    kv_transfer_s,
    sla_metrics,
)
from dse.workload.spec import Sla

SERVE = dict(hw="h200", chips=8, target="llama-3.1-70b", dtype="fp8", prompt=4000, output=500)


def _design(**kw):
    return design_and_workload(**{**SERVE, **kw})


def test_disaggregated_pools_by_hand(ideal):
    """8B bf16 on one ideal H100 (3.35 TB/s, 989.4 TFLOP/s), P 2,000, G 201. A prompt alone is a
    compute-bound pass of 2.8967e13 FLOPs at peak: 29.28 ms. A full pass of 4 prompts (budget 8,192 /
    2,000) is 4 times the FLOPs: S = the same 29.28 ms a prompt.
    With p prefill and d decode instances each decode instance finishes c/((G - 1) TPOT) requests a
    second, a prefill instance takes d/p times that: TTFT = 32.6 ms + M/D/1 wait + the KV cache's
    2,000 x 131,072 B = 262 MB over NVLink (450 GB/s one way, plus its latency)."""
    b, w = design_and_workload(hw="h100-sxm", target="llama-3.1-8b", prompt=2000, output=201, set_fields=ideal)
    pts = disaggregated_points(b, w, evaluate)
    # linear: 32 layers x 218,103,808 weights x 2 x 2,000 tokens + the LM head at the last position
    # (2 x 128,256 x 4,096); causal attention: 4 h d_h L = 524,288 FLOPs x 2,000 x 2,001/2 pairs
    flops = 2 * 32 * 218_103_808 * 2000 + 2 * 128_256 * 4096 + 524_288 * 2000 * 2001 / 2
    one = flops / 989.4e12
    assert one == pytest.approx(0.029278, abs=1e-6)
    j = list(CONCURRENCY).index(16)
    static16 = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=2000, output=201, batch=16,
                               set_fields=ideal)
    tpot = static16["spec_ms_per_token"] * 1e-3
    kv = 2000 * 131_072 / 450e9 + float(b.target.link_latency_s[0])      # NVLink: 450 GB/s each way
    assert float(kv_transfer_s(b, w, np.array([2.0]))[0, 0]) == pytest.approx(kv, rel=1e-9)
    for p, d in ((1, 1), (2, 3), (1, 4)):
        col = (p - 1) * 8 + (d - 1)
        assert pts["prefill_instances"][0, j, col] == p and pts["decode_instances"][0, j, col] == d
        lam = 16 / (200 * tpot) * d / p
        ttft = one + float(md1_wait_s(lam, one)) + kv
        assert pts["ttft_s"][0, j, col] == pytest.approx(ttft, rel=2e-3)
        assert pts["tpot_s"][0, j, col] == pytest.approx(tpot, rel=1e-9)
        # each request's 201 tokens, at 16 / (200 TPOT) requests a second per decode instance
        assert pts["tokens_per_s_per_chip"][0, j, col] == pytest.approx(d * 16 * 201 / (200 * tpot) / (p + d),
                                                                         rel=1e-9)
    # one prefill instance cannot keep up with four decode instances at batch 16: no steady state
    assert np.isinf(pts["ttft_s"][0, j, 3])


def test_the_best_point_meets_the_sla_and_the_next_concurrency_does_not():
    """70B fp8 on 8 H200, 4000/500, TTFT 1 s, TPOT 20 ms: the aggregated best point meets both and
    the next concurrency up breaks one (or gives less)."""
    b, w = _design()
    sla = Sla(ttft_s=1.0, tpot_s=0.020)
    pts = aggregated_points(b, w, evaluate)
    best = best_point(pts, sla)
    assert best["met"][0]
    assert best["ttft_s"][0] <= 1.0 and best["tpot_s"][0] <= 0.020
    j = list(CONCURRENCY).index(int(best["concurrency"][0]))
    nxt = {k: v[0, j + 1] for k, v in pts.items()}
    assert (nxt["ttft_s"] > 1.0 or nxt["tpot_s"] > 0.020 or not nxt["fits"]
            or nxt["tokens_per_s_per_chip"] <= best["tokens_per_s_per_chip"][0])
    # tokens/s per chip: c clients, each 500 tokens a cycle of TTFT + 499 TPOT (Little's law), over 8 chips
    cycle = best["ttft_s"][0] + 499 * best["tpot_s"][0]
    assert best["tokens_per_s_per_chip"][0] == pytest.approx(best["concurrency"][0] * 500 / cycle / 8)


def test_loosening_the_sla_never_lowers_throughput():
    b, w = _design()
    agg, dis = aggregated_points(b, w, evaluate), disaggregated_points(b, w, evaluate)
    rng = np.random.default_rng(7)
    for _ in range(40):
        ttft, tpot = rng.uniform(0.05, 3.0), rng.uniform(0.005, 0.1)
        for pts in (agg, dis):
            tight = best_point(pts, Sla(ttft_s=ttft, tpot_s=tpot))["tokens_per_s_per_chip"][0]
            loose = best_point(pts, Sla(ttft_s=ttft * 1.5, tpot_s=tpot * 1.2))["tokens_per_s_per_chip"][0]
            assert np.isnan(tight) or loose >= tight


def _scaled(b, flops=1.0, bw=1.0):
    t = dataclasses.replace(b.target, peak_flop_s=b.target.peak_flop_s * flops,
                            peak_attention_flop_s=b.target.peak_attention_flop_s * flops,
                            mem_bw_bytes_s=b.target.mem_bw_bytes_s * bw)
    return dataclasses.replace(b, target=t, draft=t)


@pytest.mark.parametrize("target,draft", [("llama-3.1-8b", "none"), ("llama-3.1-70b", "none"),
                                          ("mixtral-8x7b", "none")])
def test_more_flops_never_raises_ttft_or_tpot_and_more_bandwidth_never_raises_tpot(target, draft):
    """At every concurrency (a closed loop of c clients). More bandwidth can raise a closed loop's
    TTFT: the same clients then send more requests a second and the prompts' queue grows (the
    scheduler module's docstring); at a given arrival rate it cannot (next test)."""
    b, w = design_and_workload(hw="h100-sxm", chips=2, target=target, draft=draft, prompt=2048, output=256)
    base = aggregated_points(b, w, evaluate)
    for f in (1.2, 2.0, 5.0):
        fast = aggregated_points(_scaled(b, flops=f), w, evaluate)
        both = base["fits"] & fast["fits"]
        assert np.all(fast["ttft_s"][both] <= base["ttft_s"][both] * (1 + 1e-9))
        assert np.all(fast["tpot_s"][both] <= base["tpot_s"][both] * (1 + 1e-9))
        wide = aggregated_points(_scaled(b, bw=f), w, evaluate)
        assert np.all(wide["tpot_s"][both] <= base["tpot_s"][both] * (1 + 1e-9))


def test_a_closed_loops_ttft_can_rise_with_bandwidth():
    """docs/serving.md's example: 8B on an H100, 64 clients, 2,048-token prompts, 256 output tokens:
    1.5x the bandwidth decodes faster, the same clients send more requests a second and the prompts'
    queue grows: TTFT +5% (4x: +24%); with 128-token prompts it falls."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", batch=64, prompt=2048, output=256, continuous=True)
    base = evaluate_design(**kw)["ttft_ms"]
    assert evaluate_design(**kw, set_fields={"mem_bw_tb_s": 3.35 * 1.5})["ttft_ms"] / base == pytest.approx(1.05,
                                                                                                           abs=0.005)
    assert evaluate_design(**kw, set_fields={"mem_bw_tb_s": 3.35 * 4})["ttft_ms"] / base == pytest.approx(1.235,
                                                                                                         abs=0.005)
    short = dict(kw, prompt=128)
    assert (evaluate_design(**short, set_fields={"mem_bw_tb_s": 3.35 * 1.5})["ttft_ms"]
            < evaluate_design(**short)["ttft_ms"])


def test_the_issue_case_ttft_falls_with_flops_at_batch_256():
    """8B on an H100 under continuous batching: 20% more FLOP/s at batch 256 used to raise TTFT 27x."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", batch=256, continuous=True)
    base = evaluate_design(**kw)
    fast = evaluate_design(**kw, set_fields={"peak_tflops_bf16": 989.4 * 1.2})
    assert fast["ttft_ms"] <= base["ttft_ms"]


def test_open_loop_ttft_never_rises_with_bandwidth_or_flops():
    """At a given arrival rate the prompt server's load is lam S: faster hardware shortens S and the
    iteration, never lengthens the wait."""
    from dse.model.scheduler import open_loop_ttft_s
    rng = np.random.default_rng(3)
    it, own, busy = rng.uniform(0.005, 0.05, 200), rng.uniform(0.01, 0.5, 200), rng.uniform(0.01, 0.5, 200)
    rate = rng.uniform(0.1, 1.0, 200) / busy
    slow = open_loop_ttft_s(rate, it, own, busy)
    for f in (1.1, 2.0):
        assert np.all(open_loop_ttft_s(rate, it / f, own / f, busy / f) <= slow)


def test_sla_throughput_never_falls_with_better_hardware():
    b, w = _design()
    sla = Sla(ttft_s=1.0, tpot_s=0.030)
    base = sla_metrics(b, w, evaluate, sla)["sla_tokens_per_s_per_chip"][0]
    for kw in (dict(flops=1.5), dict(bw=1.5), dict(flops=2.0, bw=2.0)):
        assert sla_metrics(_scaled(b, **kw), w, evaluate, sla)["sla_tokens_per_s_per_chip"][0] >= base


def test_speculation_is_switched_off_where_it_hurts_and_the_point_says_so():
    """8B on an H100 with a 1B draft at alpha 0.6 (k auto), 1024/256: the draft pays at low
    concurrency (k = 2, then 1) and costs more than it saves once the steps are compute-bound
    (96 and up): those points decode plainly and say 'off'."""
    b, w = design_and_workload(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.6, prompt=1024,
                               output=256)
    pts = aggregated_points(b, w, evaluate)
    spec = dict(zip(pts["concurrency"][0].tolist(), pts["speculation"][0]))
    assert spec[1] == "llama-3.2-1b k=2" and spec[64] == "llama-3.2-1b k=1"
    assert spec[96] == spec[256] == "off"
    plain = aggregated_points(b, dataclasses.replace(w, drafter=dataclasses.replace(w.drafter, kind="none")),
                              evaluate)
    j = list(CONCURRENCY).index(128)
    assert pts["tpot_s"][0, j] == pytest.approx(plain["tpot_s"][0, j], rel=1e-9)


def test_cost_per_million_tokens_by_hand():
    """usd_per_mtok = 1e6 (cost / chips / life / tokens/s per chip + J/token x PUE x USD/J): the
    technology file's 4 years, 0.081 USD/kWh and PUE 1.3."""
    from dse.catalog.database import load_database
    from dse.catalog.technology import load_technology
    from dse.model.economics import usd_per_mtok
    tech = load_technology(load_database().root)
    life = 4 * 365.25 * 86400
    got = usd_per_mtok(tech, 20_000.0, 500.0, 1.5)
    assert float(got) == pytest.approx(1e6 * (20_000 / life / 500 + 1.5 * 1.3 * 0.081 / 3.6e6), rel=1e-9)
    r = evaluate_design(**SERVE, sla_ttft_ms=1000, sla_tpot_ms=20)
    p = r["sla_points"][r["sla_serving"]]
    assert r["usd_per_mtok"] == pytest.approx(
        1e6 * (r["cost_usd"] / 8 / life / p["tokens_per_s_per_chip"] + p["energy_j_per_token"] * 1.3 * 0.081 / 3.6e6))


def test_a_fleet_is_whole_deployments_at_the_best_point():
    """50 requests/s of 500 tokens: a deployment at the best point serves tokens/s per chip x its chips
    / 500 requests a second; the fleet is the fewest whole deployments that reach 50."""
    import math
    r = evaluate_design(**SERVE, sla_ttft_ms=1000, sla_tpot_ms=20, rate_rps=50)
    for mode in ("agg", "disagg"):
        p, z = r["sla_points"][mode], r["sizing"][mode]
        per = p["tokens_per_s_per_chip"] * p["deployment_chips"] / 500
        assert z["deployments"] == math.ceil(50 / per) and z["chips"] == z["deployments"] * p["deployment_chips"]
        assert (z["deployments"] - 1) * per < 50 <= z["deployments"] * per
    assert r["sla_points"]["agg"]["deployment_chips"] == 8
    assert r["sla_points"]["disagg"]["deployment_chips"] % 8 == 0
    # a disaggregated deployment is p + d instances of 8 chips; its prefill share is p / (p + d)
    dis = r["sla_points"]["disagg"]
    p_inst = dis["prefill_share"] * dis["deployment_chips"] / 8
    assert p_inst == pytest.approx(round(p_inst)) and 1 <= round(p_inst) <= 8
    assert r["sla_points"]["agg"]["prefill_share"] is None
    for p in r["sla_points"].values():           # tokens/s per user is 1 / TPOT
        assert p["tokens_per_s_per_user"] == pytest.approx(1e3 / p["tpot_ms"], rel=1e-12)
    best = r["sla_points"][r["sla_serving"]]
    assert r["sla_tokens_per_s_per_chip"] == pytest.approx(best["tokens_per_s_per_chip"], rel=1e-12)
    assert r["sla_concurrency"] == best["concurrency"] and r["sla_speculation"] == best["speculation"]


def test_cli_prints_both_pools_and_refuses_an_sla_no_point_meets(tmp_path):
    from click.testing import CliRunner

    from dse.cli import main
    args = ["eval", "--hw", "h200", "--chips", "8", "--target", "llama-3.1-70b", "--dtype", "fp8", "--prompt", "4000",
            "--output", "500"]
    r = CliRunner().invoke(main, args + ["--sla-ttft-ms", "1000", "--sla-tpot-ms", "20"])
    assert r.exit_code == 0, r.output
    assert "aggregated" in r.output and "disaggregated" in r.output and "best: " in r.output
    j = CliRunner().invoke(main, args + ["--sla-ttft-ms", "1000", "--sla-tpot-ms", "20", "--json"])
    rec = json.loads(j.output)
    assert set(rec["sla_points"]) == {"agg", "disagg"} and rec["sla_serving"] in ("agg", "disagg")
    bad = CliRunner().invoke(main, args + ["--sla-ttft-ms", "50", "--sla-tpot-ms", "2"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    assert "no operating point" in bad.output and "Traceback" not in bad.output
    half = CliRunner().invoke(main, args + ["--sla-tpot-ms", "20"])
    assert half.exit_code == 2 and "--sla-ttft-ms" in half.output
    for extra, needle in ((["--rate-rps", "-3"], "--rate-rps"), (["--sla-ttft-ms", "0"], "--sla-ttft-ms")):
        r = CliRunner().invoke(main, args + ["--sla-ttft-ms", "1000", "--sla-tpot-ms", "20"] + extra)
        assert r.exit_code == 2 and needle in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = CliRunner().invoke(main, args + ["--rate-rps", "5"])          # sizing needs the SLA it must meet
    assert r.exit_code == 2 and "--sla-ttft-ms" in r.output


def test_a_study_with_an_sla_writes_the_serving_columns(tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from dse.cli import main
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nworkload: {target: llama-3.1-70b, dtype: fp8, prompt_tokens: 4000, output_tokens: 500,\n"
                     "  sla: {ttft_ms: 1000, tpot_ms: 20}}\n"
                     "objectives: [{metric: sla_tokens_per_s_per_chip, direction: maximize},\n"
                     "             {metric: usd_per_mtok, direction: minimize}]\n"
                     "space: {target_chip: {device: [h200, b200], chips: [8]}}\n")
    r = CliRunner().invoke(main, ["sweep", str(study), "--out", str(tmp_path / "o"), "--quiet"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "o")
    h200 = df[df["params_target_chip_device"] == "h200"].iloc[0]
    one = evaluate_design(**SERVE, sla_ttft_ms=1000, sla_tpot_ms=20)
    assert h200["sla_tokens_per_s_per_chip"] == pytest.approx(one["sla_tokens_per_s_per_chip"], rel=1e-9)
    assert h200["sla_serving"] == one["sla_serving"] and h200["usd_per_mtok"] == pytest.approx(one["usd_per_mtok"])
    bad = tmp_path / "b.yaml"
    bad.write_text(study.read_text().replace("tpot_ms: 20", "tpot_ms: -3"))
    r = CliRunner().invoke(main, ["sweep", str(bad), "--out", str(tmp_path / "o2"), "--quiet"])
    assert r.exit_code == 2 and "workload.sla.tpot_ms" in r.output
