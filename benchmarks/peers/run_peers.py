"""dse next to two published analytic LLM-inference models, from one command (issue 11, item 5).

Run:  python benchmarks/peers/run_peers.py [--venv DIR] [--grid 1000]
      python benchmarks/peers/run_peers.py --serving [...]   # serving under an SLA next to AIConfigurator:
                                                              # benchmarks/peers/serving_peers.py, its options

Installs llm-analysis 0.2.2 and GenZ (genz-llm 0.0.16) from PyPI into a throwaway virtual
environment outside the repository (default: <temp folder>/dse-peers-venv; their code is never
vendored), runs benchmarks/peers/peer_driver.py there, and prints each tool's prediction next to
dse's for the same workload: Llama-3.1-70B on 2 x H100-SXM (tensor parallel), batch 1, a
4,096-token prompt, 256 generated tokens, bf16 and fp8; the speculative case with a
Llama-3.1-8B draft, k = 4, alpha = 0.7; and evaluations per second on a hardware grid
(--grid designs; GenZ, at tens of milliseconds a design, runs 50 of them).

Units: every figure in decimal GB (1e9 bytes; GenZ reports MiB and is converted) and ms. What
each decode latency includes: dse = roofline at its fitted efficiencies (eta_m 0.80 / eta_c 0.70
for H100, hardware_db) plus per-kernel and per-step fixed costs and all-reduce latency, at the
mean context prompt + output/2; dse (ideal) = the same model with efficiencies 1 and no fixed
costs, which is what GenZ computes (system_eff 1); llm-analysis = its roofline at its own
default efficiencies, at context = prompt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

PEERS = ["llm-analysis==0.2.2", "genz-llm==0.0.16"]
#: Llama-3.1-70B for llm-analysis (hardware_db/models/llama-3.1-70b.yaml): its MLP is 2 matrices of
#: ffn_embed_dim, so the gated 3 x 28672 becomes 2 x 43008 (5.25 x 8192): the same bytes and FLOPs
LLAMA70_FOR_LLM_ANALYSIS = {"name": "llama-3.1-70b", "num_layers": 80, "n_head": 64, "hidden_dim": 8192,
                            "vocab_size": 128256, "max_seq_len": 131072, "num_key_value_heads": 8,
                            "ffn_embed_dim": 43008, "expansion_ratio": 5.25, "model_type": "llama"}
#: Llama-2-70B (hardware_db/models/llama-2-70b.yaml) the same way, for the published anchor
LLAMA2_70_FOR_LLM_ANALYSIS = {**LLAMA70_FOR_LLM_ANALYSIS, "name": "llama-2-70b", "vocab_size": 32000,
                              "max_seq_len": 4096}
#: the published anchor (hardware_db/measurements/decode_measurements_public.csv, gpt-fast README): Llama-2-70B
#: bf16, 2 x A100-SXM4-80GB (power-limited 330 W) tensor parallel, batch 1: 21.32 tok/s = 46.904 ms/token
ANCHOR_MS = 46.904
CASE = {"batch": 1, "prompt": 4096, "output": 256, "k": 4, "alpha": 0.7}
IDEAL = {"mem_efficiency": 1.0, "compute_efficiency": 1.0, "kernel_launch_us": 0.0, "step_overhead_us": 0.0,
         "spec_overhead_us": 0.0}


def peer_python(venv: Path) -> Path:
    """The throwaway environment's python, created and filled on first use."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    have = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True).stdout.lower()
    if not all(p.split("==")[0].replace("-", "_") in have.replace("-", "_") for p in PEERS):
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PEERS], check=True)
    return py


def llm_analysis_rate(venv: Path, grid: int = 1000) -> float:
    """llm-analysis configurations per second (``grid`` calls of its ``infer``, peer_driver.py) in the
    throwaway environment ``venv`` (created and filled when missing); for benchmarks/bench_search.py."""
    py = peer_python(venv)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "llama-3.1-70b.json"
        model.write_text(json.dumps(LLAMA70_FOR_LLM_ANALYSIS))
        anchor = Path(tmp) / "llama-2-70b.json"
        anchor.write_text(json.dumps(LLAMA2_70_FOR_LLM_ANALYSIS))
        case = {**CASE, "grid": grid, "genz_grid": 1, "llm_analysis_model": str(model),
                "llm_analysis_anchor_model": str(anchor)}
        run = subprocess.run([str(py), str(HERE / "peer_driver.py"), json.dumps(case)], capture_output=True,
                             text=True, cwd=tmp)
    if run.returncode:
        raise RuntimeError(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}")
    la = json.loads(run.stdout.strip().splitlines()[-1]).get("llm-analysis", {})
    if "evals_per_s" not in la:
        raise RuntimeError(la.get("error", "no rate"))
    return float(la["evals_per_s"])


def dse_numbers(grid: int) -> dict:
    import dse
    from dse.catalog.database import load_database
    from dse.evaluation.designs import evaluate_study
    from dse.model.transformer import total_params
    from dse.search.variation import sample_knob
    from dse.study import open_study
    db = load_database()
    out = {}
    base = dict(hw="h100-sxm", chips=2, target="llama-3.1-70b", batch=CASE["batch"], prompt=CASE["prompt"],
                output=CASE["output"])
    params = total_params(db.model("llama-3.1-70b"))
    for dtype, nbytes in (("bf16", 2), ("fp8", 1)):
        r = dse.evaluate_design(**base, dtype=dtype)
        ideal = dse.evaluate_design(**base, dtype=dtype, set_fields=IDEAL)
        spec = dse.evaluate_design(**base, dtype=dtype, draft="llama-3.1-8b", k=CASE["k"], alpha=CASE["alpha"])
        spec_ideal = dse.evaluate_design(**base, dtype=dtype, draft="llama-3.1-8b", k=CASE["k"], alpha=CASE["alpha"],
                                         set_fields=IDEAL)
        out[dtype] = {"decode_ms": r["baseline_ms_per_token"], "decode_ideal_ms": ideal["baseline_ms_per_token"],
                      "spec_ideal_ms_per_token": spec_ideal["spec_ms_per_token"],
                      "weights_gb_per_chip": params * nbytes / 2 / 1e9, "fits_with_draft": spec["fits"],
                      "memory_required_with_draft_gb": spec["memory_required_gb"],
                      "spec_ms_per_token": spec["spec_ms_per_token"], "spec_tau": spec["tau"]}
    anchor = dict(hw="a100-80gb", chips=2, target="llama-2-70b", prompt=5, output=200)
    out["anchor_ms"] = dse.evaluate_design(**anchor)["baseline_ms_per_token"]
    out["anchor_ideal_ms"] = dse.evaluate_design(**anchor, set_fields=IDEAL)["baseline_ms_per_token"]
    study, db, tech = open_study(ROOT / "studies" / "quickstart.yaml")
    rng = np.random.default_rng(0)
    kn = {k.name: sample_knob(k, grid, rng) for k in study.searched}
    evaluate_study(study, kn, grid, db, tech)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        evaluate_study(study, kn, grid, db, tech)
        times.append(time.perf_counter() - t)
    out["evals_per_s"] = grid / float(np.median(times))
    return out


def main() -> int:
    if "--serving" in sys.argv[1:]:
        import serving_peers
        return serving_peers.main([a for a in sys.argv[1:] if a != "--serving"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=str(Path(tempfile.gettempdir()) / "dse-peers-venv"))
    ap.add_argument("--grid", type=int, default=1000)
    args = ap.parse_args()
    py = peer_python(Path(args.venv))
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "llama-3.1-70b.json"
        model.write_text(json.dumps(LLAMA70_FOR_LLM_ANALYSIS))
        anchor = Path(tmp) / "llama-2-70b.json"
        anchor.write_text(json.dumps(LLAMA2_70_FOR_LLM_ANALYSIS))
        case = {**CASE, "grid": args.grid, "genz_grid": 50, "llm_analysis_model": str(model),
                "llm_analysis_anchor_model": str(anchor)}
        run = subprocess.run([str(py), str(HERE / "peer_driver.py"), json.dumps(case)], capture_output=True, text=True,
                             cwd=tmp)
    if run.returncode:
        print(run.stderr, file=sys.stderr)
        return 1
    peers = json.loads(run.stdout.strip().splitlines()[-1])
    mine = dse_numbers(args.grid)
    la, gz = peers.get("llm-analysis", {}), peers.get("GenZ", {})
    for name, p in (("llm-analysis", la), ("GenZ", gz)):
        if "error" in p:
            print(f"{name}: {p['error']}")
    print(f"Llama-3.1-70B on 2 x H100-SXM, batch {CASE['batch']}, prompt {CASE['prompt']}, output {CASE['output']}; "
          f"draft Llama-3.1-8B, k = {CASE['k']}, alpha = {CASE['alpha']}")
    print(f"{'quantity':<40}{'dse':>10}{'dse ideal':>11}{'llm-analysis':>14}{'GenZ':>10}")

    def cell(p, dtype, key):
        v = p.get(dtype, {}).get(key) if isinstance(p.get(dtype), dict) else None
        return "-" if v is None else f"{v:.2f}"
    for dtype in ("bf16", "fp8"):
        m = mine[dtype]
        print(f"{'decode ms/token ' + dtype:<40}{m['decode_ms']:>10.2f}{m['decode_ideal_ms']:>11.2f}"
              f"{cell(la, dtype, 'decode_ms'):>14}{cell(gz, dtype, 'decode_ms'):>10}")
        print(f"{'weights GB per chip ' + dtype:<40}{m['weights_gb_per_chip']:>10.2f}{'':>11}"
              f"{cell(la, dtype, 'weights_gb_per_chip'):>14}{cell(gz, dtype, 'weights_gb_per_chip'):>10}")
        spec = "no fit" if not m["fits_with_draft"] else f"{m['spec_ms_per_token']:.2f}"
        ideal = "no fit" if m["spec_ideal_ms_per_token"] is None else f"{m['spec_ideal_ms_per_token']:.2f}"
        print(f"{'speculative ms/token ' + dtype:<40}{spec:>10}{ideal:>11}{'-':>14}{cell(gz, dtype, 'spec_ms_per_token'):>10}")
        tau = f"{m['spec_tau']:.3f}" if m["spec_tau"] is not None else "-"
        print(f"{'tokens per target pass ' + dtype:<40}{tau:>10}{'':>11}{'-':>14}"
              f"{cell(gz, dtype, 'spec_tokens_per_iter'):>10}")
        if not m["fits_with_draft"]:
            print(f"  ({dtype}: dse needs {m['memory_required_with_draft_gb']:.1f} GB with the draft, of 160 GB)")
    print(f"{'anchor: Llama-2-70B bf16 2 x A100 ms/token':<40}{mine['anchor_ms']:>10.2f}{mine['anchor_ideal_ms']:>11.2f}"
          f"{la.get('anchor_decode_ms', float('nan')):>14.2f}{'-':>10}")
    print(f"  (published, gpt-fast on 2 x A100-SXM4-80GB: {ANCHOR_MS} ms/token; GenZ has no Llama-2-70B)")
    print(f"{'evaluations per second':<40}{mine['evals_per_s']:>10,.0f}{'':>11}"
          f"{la.get('evals_per_s', float('nan')):>14,.0f}{gz.get('evals_per_s', float('nan')):>10,.1f}")
    print(f"  (dse: {args.grid:,} synthesised designs of studies/quickstart.yaml in one numpy call, median of 5; "
          f"llm-analysis: {la.get('grid_designs', '-')} calls; GenZ: {gz.get('grid_designs', '-')} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
