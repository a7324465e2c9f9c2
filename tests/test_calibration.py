"""The model against public measurements (dse.validation, `dse validate`, docs/calibration.md).

Every number here is computed through dse.api.evaluate_design on the database as stored.
"""

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dse.api import evaluate_design
from dse.catalog.database import load_database
from dse.cli.commands import main
from dse.validation import comparison, fits, measurements

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "calibration.md"


@pytest.fixture(scope="module")
def report():
    return comparison.report()


def test_decode_latency_median_error_at_most_15_percent(report):
    s = report["summary"]["decode"]
    assert s["all"]["n"] >= 15
    assert s["all"]["median_abs_error"] <= 0.15


def test_held_out_error_is_reported_separately(report):
    s = report["summary"]["decode"]
    assert s["fit"]["n"] > 0 and s["held-out"]["n"] > 0
    assert s["fit"]["n"] + s["held-out"]["n"] == s["all"]["n"]
    assert s["held-out"]["median_abs_error"] is not None
    assert s["held-out"]["median_abs_error"] <= 0.15
    text = comparison.format_report(report)
    assert "held-out" in text and "decode latency: fit" in text
    # the fit rows are exactly the stated subsets: gpt-fast on A100 (single GPU, and Llama-2-7B
    # bf16 tensor parallel), the Hugging Face eager row and the DeepSeek-R1 B200 row (the kernels an
    # MLA block adds); everything else is held out (the acceptance table's rows are counted apart)
    fit_ids = {r["id"] for r in report["rows"] if r["role"] == "fit" and not r["id"].startswith("acceptance:")}
    # serving: the TensorRT-LLM Llama-2-7B rows on H100 and A100 (TTFT 1, 2, 7, 8; throughput
    # 11-14, 23-26); the 70B, L40S and MLC rows are held out
    serving = {1, 2, 7, 8, 11, 12, 13, 14, 23, 24, 25, 26}
    # trees: Spec-Bench's A100 Vicuna-7B EAGLE-1 and Medusa-1 rows; every other tree and chain row held out
    # energy: ML.ENERGY v3.0 Llama-3.1-8B on one H100 at 8-64 sequences (energy:10-13), under 95% of its TDP
    # serving stacks' speculation (specdec_serving_measurements.csv): SGLang's 4 batch-1 rows on 4 H100s
    # (servingspec:9-12) and vLLM's K = 2, 4, 6 chains (servingspec:18, 19, 22, 23, 26, 27)
    spec = {9, 10, 11, 12, 18, 19, 22, 23, 26, 27}
    # rocm: AMD's vLLM 0.10.2 batch-1 row (serving:39, the level) and OCI's MI300X batch sweep (load:71-79,
    # the growth with batch); AMD's batch 2 and 4 and its vLLM 0.9.1 rows (serving:40-43) are held out
    assert fit_ids == ({f"decode:{i}" for i in range(1, 9)} | {"extra:1", "moe:1"}
                       | {f"serving:{i}" for i in serving} | {"specbench:4", "specbench:6"}
                       | {f"energy:{i}" for i in range(10, 14)} | {f"servingspec:{i}" for i in spec}
                       | {"serving:39"} | {f"load:{i}/tput" for i in range(71, 80)})
    assert {r["fit_group"] for r in report["rows"] if r["id"] == "serving:39" or r["id"].startswith("load:7")
            and r["role"] == "fit"} == {"rocm"}
    assert {r["id"] for r in report["rows"] if r["role"] == "input" and r["fit_group"] == "idle"} == \
        {f"energy:{i}" for i in range(120, 128)}


def test_serving_held_out_errors_within_the_issue_targets(report):
    """Issue 9: held-out median error <= 12% for decode, <= 20% for TTFT and large batch."""
    s = report["summary"]
    assert s["decode"]["held-out"]["median_abs_error"] <= 0.12
    for fam in ("ttft", "throughput"):
        assert s[fam]["held-out"]["n"] >= 5
        assert s[fam]["held-out"]["median_abs_error"] <= 0.20, fam
    # the MLC q4f16_1 70B row on two RTX 4090s: within 10% with the format's own bytes (the old
    # int4 factor fitted on gpt-fast predicted it 50% slow)
    mlc = next(r for r in report["rows"] if r["id"] == "serving:30")
    assert abs(mlc["rel_error"]) <= 0.10


def test_gpt_fast_llama2_7b_a100_bf16_within_15_percent():
    """gpt-fast README (github.com/pytorch-labs/gpt-fast, Benchmarks): Llama-2-7B bf16 on one
    A100-SXM4-80GB, 104.9 tok/s at batch 1 (prompt 5, ~200 new tokens)."""
    r = evaluate_design(hw="a100-80gb", target="llama-2-7b", dtype="bf16", prompt=5, output=200)
    measured_ms = 1000.0 / 104.9
    assert abs(r["baseline_ms_per_token"] - measured_ms) / measured_ms <= 0.15


def test_every_row_of_every_file_is_reported(report):
    folder = measurements.measurements_dir()
    n = 0
    for name in measurements.FILES.values():
        with open(folder / name, newline="") as fh:
            n += sum(1 for _ in csv.DictReader(fh))
    rows = [r for r in report["rows"] if not r["id"].startswith("acceptance:")]
    # a serving-load row gives one case per measured metric ('load:13/ttft', 'load:13/tpot', ...)
    assert len({r["id"].split("/")[0] for r in rows}) == n
    # and every row of the acceptance table, fitted, held out or not placed (with why)
    from dse.catalog.acceptance import load_table
    acc = [r for r in report["rows"] if r["id"].startswith("acceptance:")]
    assert [r["id"] for r in acc] == [f"acceptance:{r.id}" for r in load_table()]
    assert all(r["note"] for r in acc if r["role"] != "fit")
    for r in rows:
        if r["role"] == "not modelled":
            assert r["note"] and r["predicted"] is None
        elif r["predicted"] is None:     # reported, with the reason (serving:24 needs 86.2 of 85.9 GB)
            assert r["note"].endswith("does not fit in memory"), r["id"]
        else:
            assert r["rel_error"] is not None, r["id"]


def test_public_files_are_the_copies_recorded_in_sha256sums():
    """The two copied public measurement files and the serving-load transcription are kept as they
    are: their digests are in hardware_db/measurements/SHA256SUMS (inside the repository, so a bare
    clone checks them)."""
    import hashlib
    folder = measurements.measurements_dir()
    sums = dict(reversed(line.split()) for line in (folder / "SHA256SUMS").read_text().splitlines() if line.strip())
    assert sorted(sums) == ["decode_measurements_public.csv", "serving_load_measurements_public.csv",
                            "specdec_measurements_public.csv"]
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_refit_reproduces_the_stored_defaults(report):
    tol = {"a100-80gb.mem_efficiency": 0.005, "gpt-fast.kernel_launch_us": 0.05, "gpt-fast.step_overhead_us": 0.5,
           "gpt-fast.int8_stream_factor": 0.005, "gpt-fast.int4_stream_factor": 0.005,
           "a100-80gb.link_latency_us": 0.005,
           "eager.kernel_launch_us": 0.05, "graphs.mla_extra_kernels": 0.05,
           "graphs.roofline_p": 0.0, "COMPUTE_EFFICIENCY_FACTOR.fp8": 0.0,
           "graphs.request_overhead_us": 50.0, "graphs.sequence_overhead_us": 0.5,
           "eager.tree_kernels_per_layer": 0.05, "eager.draft_step_overhead_us": 0.5,
           "sglang.spec_schedule_us": 1.0, "vllm.spec_schedule_us": 1.0, "vllm.draft_step_overhead_us": 1.0,
           "rocm-vllm.kernel_launch_us": 0.05, "rocm-vllm.sequence_overhead_us": 0.5,
           "nodes.active_idle_fraction": 0.0005, "nodes.onchip_pj_per_dram_bit": 0.05,
           "nodes.operand_delivery_factor": 0.005}
    assert set(report["refit"]) == set(tol)
    for key, t in tol.items():
        assert abs(report["refit"][key] - report["stored"][key]) <= t + 1e-9, key


def test_fit_step_is_the_step_evaluate_uses():
    db = load_database()
    for c in measurements.cases(db):
        if c.metric != "decode_ms" or c.design.get("batch", 1) != 1 or c.design.get("continuous"):
            continue      # the fit's step is the batch-1 static decode step
        ms = evaluate_design(db=db, **c.design)["baseline_ms_per_token"]
        s = fits._decode_step_s(c.design, db, {}, fits._factor(c.design, db))
        assert s * 1e3 == pytest.approx(ms, rel=1e-12), c.id


def test_unmapped_rows_become_not_modelled(tmp_path):
    """A row with hardware the mapping does not know is reported with its reason, not dropped."""
    import shutil
    db_root = tmp_path / "hw"
    shutil.copytree(load_database().root, db_root)
    extra = db_root / "measurements" / measurements.FILES["extra"]
    with open(extra, newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows.append({**rows[0], "hardware": "Some New GPU", "source": "test"})
    with open(extra, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    from dse.catalog.database import Database
    out = comparison.compare(db=Database(db_root))
    last = [r for r in out if r["id"].startswith("extra:")][-1]
    assert last["role"] == "not modelled" and "Some New GPU" in last["note"]


def test_cli_validate_json_matches_api(report):
    res = CliRunner().invoke(main, ["validate", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["summary"] == json.loads(json.dumps(report["summary"]))
    text = CliRunner().invoke(main, ["validate"])
    assert text.exit_code == 0 and text.output.strip() == comparison.format_report(report).strip()


def test_doc_table_is_what_dse_validate_prints(report):
    """docs/calibration.md quotes `dse validate`; refresh with `python -m dse.validation.comparison docs/calibration.md`."""
    assert comparison.doc_block(DOC) == comparison.format_report(report)


def test_eagle_gpt_fast_rows_are_a_chain_of_three():
    # specdec:16-17 (EAGLE + gpt-fast, README of SafeAILab/EAGLE, January 2024): the eaglefast
    # branch drafts a chain of 3 tokens (model/ea_model.py chaintopK_genrate(sk=3)), not the tree.
    # Its alpha is the top-1 rate whose best 25-node depth-5 tree under EAGLE's measured rank
    # profile has the paper's tau 3.9: 0.7293 (the geometric limit said 0.6076; EAGLE's Table 2
    # gives this model a 0-alpha of 0.77); the chain's tau is then 1 + a + a^2 + a^3
    # = 1 + 0.7293 + 0.5319 + 0.3879 = 2.649
    rows = {c.id: c for c in measurements.cases()}
    for rid, baseline in (("specdec:16", 30.1), ("specdec:17", 21.1)):
        c = rows[rid]
        assert c.metric == "speedup" and c.role == "held-out"
        assert (c.design["k"], c.design["draft"], c.design["runtime"]) == (3, "eagle", "gpt-fast")
        assert "tree_nodes" not in c.design and "tau" not in c.design
        assert c.design["alpha"] == pytest.approx(0.7293, abs=1e-4)
        assert c.design["baseline_ms"] == baseline
        r = evaluate_design(**c.design)
        assert r["tau"] == pytest.approx(2.649, abs=1e-3)
        assert r["baseline_ms_per_token"] == pytest.approx(baseline)
    # and the alpha is what it claims: the best 25-node depth-5 tree at 0.7293 has tau 3.9
    r = evaluate_design(hw="a100-80gb", target="llama-2-13b", draft="eagle", alpha=0.7293, k=5, tree_nodes=25)
    assert r["tau"] == pytest.approx(3.90, abs=2e-3) and r["rank_profile"] == "eagle"


#: a specdec_measurements_public.csv row with every column, for the mapping tests below
_ROW = dict(source="test", target_model="LLaMA2-Chat 13B", draft_method="", hardware="1x A100", precision="FP16",
            batch_size="1", context_or_prompt_len="", k_or_tree="", acceptance_rate_alpha="",
            mean_accepted_length_tau="", target_ms_per_token="", draft_ms_per_token="", measured_speedup="2.0",
            dataset_task="MT-bench", notes="")


@pytest.mark.parametrize("method, shape, extra, want", [
    # EAGLE on the Hugging Face backend: the static default tree (4+8+8+3+2 = 25 nodes, depth 5), eager runtime
    ("EAGLE (HF backend)", "EAGLE default tree", dict(mean_accepted_length_tau="3.8"),
     dict(draft="eagle", k=5, tree_nodes=25, tau=3.8, runtime="eager")),
    # Medusa: heads from the text, tree and depth from k_or_tree, anchored at the published step
    ("Medusa-1 (4 heads), Hugging Face", "tree of 63 nodes, depth 4",
     dict(mean_accepted_length_tau="2.6", target_ms_per_token="25.0"),
     dict(draft="medusa:4", k=4, tree_nodes=63, tau=2.6, runtime="eager", baseline_ms=25.0)),
    # Medusa without a head count: Medusa-1's five released heads, depth = heads
    ("Medusa", "64 nodes", dict(acceptance_rate_alpha="0.6"), dict(draft="medusa:5", k=5, tree_nodes=64, alpha=0.6)),
    # Hydra: sequentially dependent heads, drafted one depth a step (hydra:H)
    ("Hydra++", "64 nodes, depth 4", dict(mean_accepted_length_tau="3.1"),
     dict(draft="hydra:5", k=4, tree_nodes=64, tau=3.1)),
    # retrieval: REST's tree, prompt lookup's chain
    ("REST (datastore retrieval)", "32 nodes, depth 5", dict(mean_accepted_length_tau="2.3"),
     dict(draft="ngram", k=5, tree_nodes=32, tau=2.3)),
    ("prompt lookup decoding", "gamma=10", dict(acceptance_rate_alpha="0.5"), dict(draft="ngram", k=10, alpha=0.5)),
])
def test_tree_method_rows_map_to_their_drafters(method, shape, extra, want):
    c = measurements._specdec_case("specdec:99", {**_ROW, "draft_method": method, "k_or_tree": shape, **extra})
    assert c.metric == "speedup" and c.role == "held-out" and c.measured == 2.0
    got = {k: c.design.get(k) for k in want}
    assert got == want
    assert ("tree_nodes" in c.design) == ("tree_nodes" in want)
    assert evaluate_design(**c.design)["speedup"] > 0     # the design evaluates


@pytest.mark.parametrize("method, shape, extra, why", [
    ("Medusa-1", "64 nodes", {}, "no acceptance rate or tau"),
    ("REST", "64 nodes", dict(mean_accepted_length_tau="2.0"), "depth not given"),
    ("REST", "depth 4", dict(mean_accepted_length_tau="2.0"), "tree size not given"),
])
def test_tree_method_rows_without_what_they_need_are_not_modelled(method, shape, extra, why):
    with pytest.raises(measurements._NotModelled, match=why):
        measurements._specdec_case("specdec:99", {**_ROW, "draft_method": method, "k_or_tree": shape, **extra})


def test_moe_and_mla_rows_with_the_kernels_of_their_layers(report):
    """decode_measurements_moe.csv: TensorRT-LLM's DeepSeek-R1 on 8 B200 without MTP (111 tokens/s
    per user, tech blog 1) is the fit row of mla_extra_kernels; the others are held out. With one
    kernel count for every layer (8, the dense GQA layer's) they were far above the model: the
    B200 row at 4.69 ms against 9.01 (-48%), the same machine's first software (67 tokens/s) -68%,
    SGLang's DeepSeek-V3 on 8 H200 (30.29 tokens/s) -84%, Baseten's Mixtral int8 on an A100
    (81 tokens/s) -25%. Counting the MLA and MoE kernels halves every one of these errors or better."""
    rows = {r["id"]: r for r in report["rows"] if r["id"].startswith("moe:")}
    assert [rows[f"moe:{i}"]["role"] for i in range(1, 5)] == ["fit", "held-out", "held-out", "held-out"]
    assert rows["moe:1"]["design"]["ep"] == 4 and rows["moe:2"]["design"]["ep"] == 8
    assert rows["moe:1"]["measured"] == pytest.approx(1000 / 111, rel=1e-3)
    assert abs(rows["moe:1"]["rel_error"]) < 0.01                    # fitted: one row, one unknown
    before = {"moe:2": -0.68, "moe:3": -0.84, "moe:4": -0.25}
    for rid, old in before.items():
        assert rows[rid]["rel_error"] < 0                            # still under: kernels of their day
        assert abs(rows[rid]["rel_error"]) < abs(old) - 0.08, rid


def test_trees_as_measured_on_spec_bench(report):
    """Issue 17: with the eager runtime's tree costs fitted on two rows (Vicuna-7B EAGLE-1 and
    Medusa-1), the other Spec-Bench tree rows (EAGLE-1/2/3, Hydra, Medusa, REST on Vicuna-7B/13B/33B)
    are within 35%, their median within 10%, and not all on one side; so are the chains (PLD, SpS).
    Without the tree costs every tree row comes out 12-52% above its measurement."""
    rows = {r["id"]: r for r in report["rows"] if r["id"].startswith("specbench:") and r["role"] == "held-out"}
    trees = {i: r for i, r in rows.items() if r["design"].get("tree_nodes")}
    chains = {i: r for i, r in rows.items() if not r["design"].get("tree_nodes")}
    assert len(trees) == 14 and len(chains) == 6
    for group in (trees, chains):
        errs = [r["rel_error"] for r in group.values()]
        assert max(abs(e) for e in errs) <= 0.35
        assert sorted(abs(e) for e in errs)[len(errs) // 2] <= 0.10
        assert min(errs) < 0 < max(errs)
    before = []
    for r in trees.values():
        d = dict(r["design"], set_fields={"tree_kernels_per_layer": 0.0, "draft_step_overhead_us": 0.0})
        before.append(evaluate_design(**d)["speedup"] / r["measured"] - 1.0)
    assert 0.12 <= min(before) and max(before) <= 0.52


def test_fitted_tree_costs_by_hand():
    """eager: 10.1 extra kernels a layer at 23.5 us in a tree-masked verify pass; Vicuna-7B has
    32 layers: 32 x 10.1 x 23.5 us = 7.595 ms. An EAGLE head step pays 1,717.6 us besides its kernels."""
    kw = dict(hw="a100-80gb", target="vicuna-7b", dtype="fp16", runtime="eager", prompt=350, draft="medusa:5",
              tau=2.31, k=4, tree_nodes=63)
    with_cost = evaluate_design(**kw)["verify_ms_per_iter"]
    without = evaluate_design(**kw, set_fields={"tree_kernels_per_layer": 0})["verify_ms_per_iter"]
    assert with_cost - without == pytest.approx(32 * 10.1 * 0.0235, rel=1e-9)
    e = dict(kw, draft="eagle", tau=3.58, k=5, tree_nodes=25)
    d1 = evaluate_design(**e)["draft_ms_per_iter"]
    d0 = evaluate_design(**e, set_fields={"draft_step_overhead_us": 0})["draft_ms_per_iter"]
    assert d1 - d0 == pytest.approx(5 * 1.7176, rel=1e-9)           # five depths, five head steps


def test_energy_per_token_against_ml_energy(report):
    """Issue 17 item 7: the ML.ENERGY leaderboard's energy per output token (v3.0: H100 and B200, Llama-3.1
    8B/70B/405B and Qwen3 8B/14B/32B, 8-2,048 sequences in flight; energy_measurements_public.csv). Fitted on
    four H100 Llama-3.1-8B rows, the held-out rows' median error is within 20% (it was -66%: 3x low). No H100 batch
    band is off by more than 10% on its median (-7% and -11% in the upper two while an H100's power limit was the
    energy model's 587 W, not its 700 W TDP; now +1%, +3%), no B200 band by more than 20%: capped at its 1,000 W
    TDP (the estimate's 1,291 W was the limit), the B200's upper bands read -16% and -17%, as the model's
    throughput there is 2-3.6x the measured (vLLM 0.11.1 on one B200: 5,589 tokens/s for Llama-3.1-8B at 64
    sequences, dse 11,551) while its draw, 1,000 W, is above the measured 450-690 W."""
    s = report["summary"]["energy"]
    assert s["fit"]["n"] == 4 and s["held-out"]["n"] >= 80
    assert s["held-out"]["median_abs_error"] <= 0.20
    bands = report["summary"]["energy_by_batch"]
    assert len(bands) == 6 and all(b["n"] >= 5 for b in bands), bands
    for b in bands:
        assert abs(b["median_error"]) <= (0.10 if b["hw"] == "h100-sxm" else 0.20), b
    text = comparison.format_report(report)
    assert "energy per token: fit" in text and "held-out median signed error by batch" in text


def test_idle_power_from_two_engines_by_hand(report):
    """The v2.0 row energy:120 (vLLM 0.5.4: Llama-3.1-8B on one H100, batch 64, 0.1711 J/token at 1,784.7 tokens/s,
    as transcribed) and its v3.0 partner energy:13 (vLLM 0.11.1: 0.1186 J at 5,147.2 tokens/s): the same work took
    0.5602 - 0.1943 ms a token longer for 0.0525 J more, a GPU waiting between kernels at 143.4 W. The eight pairs'
    mean, 142.6 W, is the H100's busy floor: 56.98 W leakage + 0.162 x (586.67 - 56.98) W = 142.79 W."""
    rows = {r["id"]: r for r in report["rows"]}
    by_hand = (0.1711 - 0.1186) / (1 / 1784.7 - 1 / 5147.2)
    assert by_hand == pytest.approx(143.44, abs=0.05)
    assert rows["energy:120"]["measured"] == pytest.approx(by_hand, rel=2e-3)       # the CSV's 4 decimals
    idle = [rows[f"energy:{i}"]["measured"] for i in range(120, 128)]
    assert 110 < min(idle) and max(idle) < 165
    assert sum(idle) / 8 == pytest.approx(56.98 + report["refit"]["nodes.active_idle_fraction"] * (586.67 - 56.98),
                                          rel=1e-3)
    assert rows["energy:120"]["predicted"] == pytest.approx(56.98 + 0.162 * (586.67 - 56.98), rel=1e-9)


def test_b200_gpqa_rows_are_reported_not_modelled(report):
    """ML.ENERGY v3.0's B200 GPQA runs wait on something outside the GPU (Qwen3-8B at 8 sequences: 32.5 ms a token
    on the B200 against 9.7 ms on the H100): reported with the reason, never dropped; the H100 GPQA rows are held out."""
    rows = [r for r in report["rows"] if r["id"].startswith("energy:") and "gpqa" in r["label"]]
    b200 = [r for r in rows if r["label"].startswith("B200")]
    assert len(b200) == 15 and all(r["role"] == "not modelled" and "32.5 ms" in r["note"] for r in b200)
    assert all(r["role"] == "held-out" for r in rows if r["label"].startswith("H100"))



def test_serving_load_rows_are_loaded(report):
    """Every row of serving_load_measurements_public.csv is reported: the closed-loop rows at a stated
    concurrency and fixed lengths as one held-out case per published metric, the rest not modelled
    with why."""
    rows = {r["id"]: r for r in report["rows"] if r["id"].startswith("load:")}
    assert len({i.split("/")[0] for i in rows}) == 81
    modelled = {int(i.split(":")[1].split("/")[0]) for i, r in rows.items() if r["role"] != "not modelled"}
    # NIM's sweep (13-20), TensorRT-LLM's DeepSeek-R1 max-throughput rows with attention DP (21-23) and
    # min-latency rows with MTP (24-25), InferenceX's DeepSeek-R1 H200 (53-56) and B200 (57-61) sweeps,
    # vLLM's blog (69-70); OCI's MI300X static batches (71-79: vLLM benchmark_latency, output tok/s per GPU, the rocm-vllm runtime's fit)
    static = set(range(71, 80))
    assert modelled == set(range(13, 26)) | set(range(53, 62)) | {69, 70} | static
    for i in static:
        r = rows[f"load:{i}/tput"]
        assert r["role"] == "fit" and r["fit_group"] == "rocm" and r["design"].get("continuous") is None
        assert r["design"]["batch"] == [1, 2, 4, 8, 16, 32, 64, 128, 256][i - 71] and r["design"]["hw"] == "mi300x"
    modelled -= static
    for i in modelled:
        # the B200 sweep's TPOT row was not transcribed: TTFT and throughput only; 21-25: throughput only
        want = {"tput"} if 21 <= i <= 25 else {"ttft", "tput"} if 57 <= i <= 61 else {"ttft", "tpot", "tput"}
        assert {k.split("/")[1] for k in rows if k.split("/")[0] == f"load:{i}"} == want, i
    for i, r in rows.items():
        if r["role"] != "not modelled" and int(i.split(":")[1].split("/")[0]) not in static:
            assert r["role"] == "held-out" and r["fit_group"] == "" and "held out" in r["note"]
            assert r["design"]["continuous"] is True
    why = {i: rows[f"load:{i}"]["note"] for i in (1, 9, 62)}
    assert why[1].startswith("open loop") and why[9].startswith("no concurrency")
    # "MTP 3 layers": DeepSeek-R1's MTP module chained 3 times, its acceptance from the table
    assert rows["load:24/tput"]["design"]["draft"] == rows["load:25/tput"]["design"]["draft"] == "mtp:3"
    # TensorRT-LLM's attention DP: one rank a GPU (--dp 8), its max_num_tokens per rank
    d21 = rows["load:21/tput"]["design"]
    assert (d21["dp"], d21["ep"], d21["batch"], d21["max_batched_tokens"]) == (8, 8, 7168, 8 * 2048)
    assert "split over the 16 GPUs is not stated" in why[62]
    # NIM at concurrency >= 100: 100 x 5,500 tokens of Llama-3.3-70B's 16-bit KV cache (80 layers x 8 heads x
    # 128 x 2 x 2 B = 327,680 B a token) = 180 GB beside 70 GB of fp8 weights on two 80 GB H100s: the model
    # says it does not fit; NIM caps the requests in flight and queues the rest (its ITL stops at ~93 ms)
    for i in (17, 18, 19, 20):
        assert rows[f"load:{i}/ttft"]["predicted"] is None and rows[f"load:{i}/ttft"]["note"].endswith(
            "does not fit in memory")


def test_serving_load_designs_by_hand():
    """The cases of hand-checked rows of serving_load_measurements_public.csv: row 69 (vLLM blog, Table 4: one H100, Llama-3.1-8B
    bf16, concurrency 8, ~20k in / ~2k out, 450.3 output tok/s), row 70 (the same with an fp8 KV cache),
    row 13 (NIM: 2 H100s, fp8, concurrency 1, 51.67 tok/s for the whole group = 25.835 a GPU) and row
    57 (InferenceX: 8 B200s, nvfp4, TP8 EP8)."""
    cs = {c.id: c for c in measurements.cases() if c.id.startswith("load:")}
    d69 = dict(hw="h100-sxm", target="llama-3.1-8b", chips=1, dtype="bf16", kv_dtype="bf16", prompt=20000,
               output=2000, batch=8, continuous=True, pp=1)
    assert cs["load:69/ttft"].design == d69
    assert (cs["load:69/ttft"].measured, cs["load:69/tpot"].measured, cs["load:69/tput"].measured) == (763.6, 15.18, 450.3)
    assert cs["load:69/tpot"].metric == "decode_ms" and cs["load:69/tput"].metric == "throughput_tok_s_gpu"
    assert cs["load:70/ttft"].design == {**d69, "kv_dtype": "fp8"}
    c13 = cs["load:13/tput"]
    assert c13.measured == pytest.approx(51.67 / 2)
    assert {k: c13.design[k] for k in ("hw", "chips", "dtype", "batch", "prompt", "output")} == dict(
        hw="h100-sxm", chips=2, dtype="fp8-head16", batch=1, prompt=5000, output=500)
    c57 = cs["load:57/ttft"]
    assert (c57.design["hw"], c57.design["target"], c57.design["dtype"], c57.design["chips"], c57.design["ep"],
            c57.design["batch"]) == ("b200", "deepseek-v3", "nvfp4", 8, 8, 4)
    assert "ep" not in cs["load:53/ttft"].design            # SGLang's H200 recipe: TP8, EP1


def test_max_batched_tokens_sets_the_token_budget():
    """evaluate_design(max_batched_tokens=...) is Workload.max_batched_tokens: a 20,000-token prompt at
    batch 8 is served in chunks of C = N - 8 tokens, so a budget of 2,048 (20000/2040 = 9.8 iterations) takes
    longer to first token than 8,192 (20000/8184 = 2.4), the decode step alike; outside 1..1e7 it is bad input."""
    from dse.errors import SpecError
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", batch=8, continuous=True, prompt=20000, output=2000)
    big, small = evaluate_design(**kw), evaluate_design(**kw, max_batched_tokens=2048)
    assert evaluate_design(**kw, max_batched_tokens=8192)["ttft_ms"] == big["ttft_ms"]
    assert small["ttft_ms"] > big["ttft_ms"]
    assert small["baseline_ms_per_token"] == big["baseline_ms_per_token"]
    for bad in (0, 10**8):
        with pytest.raises(SpecError, match="--max-batched-tokens"):
            evaluate_design(**kw, max_batched_tokens=bad)
    res = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--batch", "8",
                                    "--continuous", "--prompt", "20000", "--output", "2000",
                                    "--max-batched-tokens", "2048", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["ttft_ms"] == small["ttft_ms"]
    assert CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b",
                                     "--max-batched-tokens", "0"]).exit_code == 2


def test_serving_load_ttft_ratio_in_its_measured_band(report):
    """TTFT model/measured on the held-out rows of hardware_db/measurements/serving_load_measurements_public.csv
    (docs/calibration.md, 'Serving under load'). Dense models (NIM's Llama-3.3-70B sweep at 1-50 in flight,
    vLLM's Llama-3.1-8B at 8): median 0.89 over 6 rows, within 0.75-1.33. DeepSeek-R1 on SGLang (InferenceX):
    0.005-0.13, which pulls the median over all 15 rows to 0.13 (a known gap, not fitted: a ~200 ms floor the
    model lacks); a model change that moves either band must update the paragraph."""
    import statistics
    ttft = [r for r in report["rows"] if r["id"].startswith("load:") and r["metric"] == "ttft_ms"
            and r["rel_error"] is not None]
    dense = [1 + r["rel_error"] for r in ttft if r["design"]["target"] != "deepseek-v3"]
    assert len(dense) == 6 and 0.75 <= statistics.median(dense) <= 1.33
    s = report["summary"]["load"]["ttft_ms"]
    assert s["n"] == 15 and 0.08 <= s["median_ratio"] <= 0.2
    assert s["median_ratio"] == pytest.approx(statistics.median(1 + r["rel_error"] for r in ttft))


def test_speculation_as_serving_stacks_run_it(report):
    """Issue 28: SGLang's EAGLE-3 and vLLM V1's EAGLE chains (specdec_serving_measurements.csv). The sglang
    runtime's unoverlapped host work is fitted on 4 rows (AngelSlim issue 163, Qwen3-30B-A3B on 4 H100s),
    vllm's on 6 (issue 20780, K = 2, 4, 6); the held-out rows -- Qwen3-30B-A3B on 2 H100s (SpecForge
    issue 339, where every setting was slower than plain decoding), batch 4, Llama-3.3-70B's 63-node tree
    on 8 H100s, vLLM's K = 3, 5, 7 and Llama-3-8B -- are within 30%, their median within 15%, on both
    sides. As the graphs runtime (an engine that overlaps its host work) the same SGLang rows are credited
    20% or more too much: the measured MoE slowdowns (0.72-0.93x) come out as speedups. TensorRT-LLM's
    DeepSeek-R1 MTP chains on 8 B200s (tech blog 1, nextn 1-5 over the 111 TPS/user of moe:1), held out
    on the graphs runtime, are within 15%."""
    rows = [r for r in report["rows"] if r["id"].startswith("servingspec:")]
    held = [r for r in rows if r["role"] == "held-out"]
    assert len(held) == 23 and sum(r["role"] == "fit" for r in rows) == 10
    errs = [r["rel_error"] for r in held]
    assert max(abs(e) for e in errs) <= 0.30
    assert sorted(abs(e) for e in errs)[len(errs) // 2] <= 0.15
    assert min(errs) < 0 < max(errs)
    moe = [r for r in held if r["design"]["target"] == "qwen3-30b-a3b" and r["design"]["chips"] == 2]
    assert len(moe) == 8 and all(r["predicted"] < 1.0 for r in moe)          # slower than plain decoding, as measured
    graphs = [evaluate_design(**dict(r["design"], runtime="graphs"))["speedup"] / r["measured"] - 1.0 for r in moe]
    assert sorted(graphs)[len(graphs) // 2] >= 0.20 and all(g > 0 for g in graphs)
    mtp = [r for r in held if r["design"].get("draft", "").startswith("mtp:")]
    assert [r["design"]["draft"] for r in mtp] == [f"mtp:{n}" for n in range(1, 6)]
    assert all(r["design"]["runtime"] == "graphs" and r["design"]["hw"] == "b200" for r in mtp)
    assert max(abs(r["rel_error"]) for r in mtp) <= 0.15
    # the rows the batch drains are reported, not modelled
    drained = {r["id"] for r in rows if r["role"] == "not modelled"}
    assert drained == {"servingspec:14", "servingspec:15", "servingspec:16"}
