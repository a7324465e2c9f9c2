"""dse's serving-under-an-SLA operating points next to NVIDIA AIConfigurator's, from one command.

Run:  python benchmarks/peers/serving_peers.py [--venv DIR] [--case NAME] [--json FILE]
 (or: python benchmarks/peers/run_peers.py --serving)

Installs AIConfigurator (PyPI ``aiconfigurator==0.12.0``, with its ``aiconfigurator-core`` and the
performance tables that package ships) into a throwaway virtual environment outside the repository
(default: <temp folder>/dse-aic-venv; never vendored, never imported by dse), runs its SLA search
``aiconfigurator cli default`` (aggregated and disaggregated, TensorRT-LLM backend) for each case
below, reads the best row of each mode from the ``best_config_topn.csv`` it saves, and runs
``dse eval ... --sla-ttft-ms --sla-tpot-ms --json`` on the same case twice: as given (``--chips`` =
the case's GPUs, dse's defaults) and at the best of the layouts AIConfigurator also searches
(--chips 1, 2, 4, 8 up to the case's GPUs; --ep = --chips too for an MoE) with the KV cache at
AIConfigurator's KV dtype. Prints the figures side by side and dse / AIConfigurator per mode.

Not run by CI or tests (it installs packages and takes minutes); tests/test_serving_peers.py checks
only the parsing, on a stored AIConfigurator output sample (benchmarks/peers/fixtures/).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
AIC = "aiconfigurator==0.12.0"
#: AIConfigurator's bundled Hugging Face config of Qwen3-30B-A3B (hardware_db has no Qwen3-30B-A3B;
#: dse reads the same config.json, the architecture only)
QWEN3_MOE_CONFIG = "Qwen--Qwen3-30B-A3B_config.json"

#: name, AIConfigurator model / system, dse hw / target / dtype, GPUs, ISL, OSL, TTFT ms, TPOT ms, and
#: the KV dtype AIConfigurator assumes (its quant inference: fp8 KV for an FP8 checkpoint, else bf16)
CASES = [
    dict(name="llama70-fp8-h200x8", label="Llama-3.1-70B fp8, 8 x H200", aic_model="nvidia/Llama-3.1-70B-Instruct-FP8",
         system="h200_sxm", hw="h200", target="llama-3.1-70b", dtype="fp8", kv="fp8", gpus=8, isl=4000, osl=500,
         ttft=1000, tpot=20, moe=False),
    dict(name="llama8-bf16-h100x2-tight", label="Llama-3.1-8B bf16, 2 x H100-SXM", aic_model="meta-llama/Meta-Llama-3.1-8B",
         system="h100_sxm", hw="h100-sxm", target="llama-3.1-8b", dtype="bf16", kv="bf16", gpus=2, isl=1024, osl=256,
         ttft=200, tpot=10, moe=False),
    dict(name="llama8-bf16-h100x2-loose", label="Llama-3.1-8B bf16, 2 x H100-SXM", aic_model="meta-llama/Meta-Llama-3.1-8B",
         system="h100_sxm", hw="h100-sxm", target="llama-3.1-8b", dtype="bf16", kv="bf16", gpus=2, isl=1024, osl=256,
         ttft=1000, tpot=30, moe=False),
    dict(name="qwen3-30b-a3b-fp8-h200x8", label="Qwen3-30B-A3B (MoE) fp8, 8 x H200", aic_model="Qwen/Qwen3-30B-A3B-FP8",
         system="h200_sxm", hw="h200", target=QWEN3_MOE_CONFIG, dtype="fp8", kv="fp8", gpus=8, isl=4000, osl=500,
         ttft=1000, tpot=20, moe=True),
]
MODES = ("agg", "disagg")


def short_layout(parallel: str) -> str:
    """'tp4pp1dp1etp1ep1' -> 'tp4'; the parts that are 1 are dropped ('tp1' when all are)."""
    parts = [f"{k}{n}" for k, n in re.findall(r"([a-z]+)(\d+)", parallel) if n != "1"]
    return " ".join(parts) or "tp1"


def parse_best_config(text: str, mode: str) -> dict:
    """The best row (highest tokens/s/gpu) of an AIConfigurator ``best_config_topn.csv``; lines that
    start with '#' are skipped. Concurrency is per replica, as the file gives it (agg: the worker's
    batch; disagg: the decode workers' batch x their count)."""
    rows = list(csv.DictReader(io.StringIO("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))))
    if not rows:
        raise ValueError(f"no {mode} rows in AIConfigurator output")
    best = max(rows, key=lambda r: float(r["tokens/s/gpu"]))
    out = {"tokens_per_s_per_gpu": float(best["tokens/s/gpu"]), "tokens_per_s_per_user": float(best["tokens/s/user"]),
           "concurrency": int(float(best["concurrency"])), "ttft_ms": float(best["ttft"]), "tpot_ms": float(best["tpot"]),
           "gpus_per_replica": int(float(best["num_total_gpus"])), "backend": best.get("backend") or best.get("(d)backend"),
           "version": best.get("version") or best.get("(d)version")}
    if mode == "agg":
        out["layout"] = short_layout(best["parallel"])
    else:
        out["layout"] = (f"{best['(p)workers']} x {short_layout(best['(p)parallel'])} prefill + "
                         f"{best['(d)workers']} x {short_layout(best['(d)parallel'])} decode")
    return out


def peer_bin(venv: Path) -> Path:
    """The throwaway environment's ``aiconfigurator`` command, created and filled on first use."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    have = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True).stdout.lower()
    if AIC not in have:
        subprocess.run([str(py), "-m", "pip", "install", "-q", AIC], check=True)
    return venv / "bin" / "aiconfigurator"


def model_config_dir(venv: Path) -> Path:
    """AIConfigurator's bundled Hugging Face model configs in the throwaway environment."""
    found = sorted(venv.glob("lib/python*/site-packages/aiconfigurator_core/model_configs"))
    if not found:
        raise RuntimeError(f"no aiconfigurator_core/model_configs under {venv}")
    return found[0]


def aic_command(aic: Path, case: dict, save_dir: Path) -> list[str]:
    return [str(aic), "cli", "default", "--model", case["aic_model"], "--system", case["system"], "--backend", "trtllm",
            "--total-gpus", str(case["gpus"]), "--isl", str(case["isl"]), "--osl", str(case["osl"]),
            "--ttft", str(case["ttft"]), "--tpot", str(case["tpot"]), "--top-n", "3", "--no-color",
            "--log-level", "WARNING", "--save-dir", str(save_dir)]


def run_aic(aic: Path, case: dict) -> dict:
    """AIConfigurator's best aggregated and disaggregated rows for ``case`` ({'error': ...} per mode
    when it gives none)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = aic_command(aic, case, Path(tmp))
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        out = {}
        for mode in MODES:
            files = sorted(Path(tmp).glob(f"**/{mode}/best_config_topn.csv"))
            if run.returncode or not files:
                tail = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
                out[mode] = {"error": tail if run.returncode else f"no {mode} configuration meets the SLA"}
                continue
            try:
                out[mode] = parse_best_config(files[0].read_text(), mode)
            except (ValueError, KeyError) as exc:
                out[mode] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def dse_command(case: dict, target: str, chips: int, ep: int = 1, kv: str | None = None) -> list[str]:
    cmd = ["dse", "eval", "--hw", case["hw"], "--chips", str(chips), "--target", target, "--dtype", case["dtype"],
           "--prompt", str(case["isl"]), "--output", str(case["osl"]), "--sla-ttft-ms", str(case["ttft"]),
           "--sla-tpot-ms", str(case["tpot"])]
    if ep > 1:
        cmd += ["--ep", str(ep)]
    if kv:
        cmd += ["--kv-dtype", kv]
    return cmd + ["--json"]


def run_dse(cmd: list[str]) -> dict:
    """dse's sla_points for one ``dse eval`` command (this checkout's dse, in this interpreter)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", "import sys; from dse.cli import main; sys.exit(main())", *cmd[1:]],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    if run.returncode:
        return {m: {"error": (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]} for m in MODES}
    pts = json.loads(run.stdout)["sla_points"]
    return {m: (pts[m] if pts.get(m) and pts[m].get("met") else {"error": "no point meets the SLA"}) for m in MODES}


def dse_side(case: dict, target: str) -> dict:
    """dse as given (--chips = the case's GPUs) and the best of the layouts AIConfigurator searches."""
    given_cmd = dse_command(case, target, case["gpus"])
    given = run_dse(given_cmd)
    best = {m: {"error": "no layout meets the SLA"} for m in MODES}
    for chips in (c for c in (1, 2, 4, 8) if c <= case["gpus"]):
        for ep in sorted({1, chips} if case["moe"] else {1}):
            cmd = dse_command(case, target, chips, ep, case["kv"])
            got = run_dse(cmd)
            for m in MODES:
                p = got[m]
                if "error" not in p and p["tokens_per_s_per_chip"] > best[m].get("tokens_per_s_per_chip", -1.0):
                    best[m] = {**p, "chips": chips, "ep": ep, "command": " ".join(cmd)}
    return {"given": given, "given_command": " ".join(given_cmd), "best": best}


def fmt_row(mode: str, tool: str, p: dict, tput_key: str, layout: str, ratio: str = "") -> str:
    if "error" in p:
        return f"{mode:<7}{tool:<34}{p['error']}"
    return (f"{mode:<7}{tool:<34}{p[tput_key]:>10.1f}{p['concurrency']:>6}{p['ttft_ms']:>9.1f}{p['tpot_ms']:>9.2f}"
            f"{p['tokens_per_s_per_user']:>11.1f}  {layout:<36}{ratio}").rstrip()


def ratio(d: dict, a: dict) -> str:
    if "error" in d or "error" in a:
        return "-"
    return f"{d['tokens_per_s_per_chip'] / a['tokens_per_s_per_gpu']:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=str(Path(tempfile.gettempdir()) / "dse-aic-venv"))
    ap.add_argument("--case", action="append", choices=[c["name"] for c in CASES], help="only these cases")
    ap.add_argument("--json", help="also write every number and command to this file")
    args = ap.parse_args(argv)
    venv = Path(args.venv)
    aic = peer_bin(venv)
    cases = [c for c in CASES if not args.case or c["name"] in args.case]
    results, summary = [], []
    ver = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", "aiconfigurator-core"],
                         capture_output=True, text=True).stdout
    core = next((ln.split()[-1] for ln in ver.splitlines() if ln.startswith("Version:")), "?")
    print(f"AIConfigurator {AIC.split('==')[1]} (aiconfigurator-core {core}), `cli default`, TensorRT-LLM backend; "
          "dse: this checkout")
    print("tok/s/GPU: output tokens/s per GPU (dse: per chip); conc: requests in flight per replica (AIConfigurator) "
          "or per instance (dse)")
    for case in cases:
        target = case["target"]
        if target == QWEN3_MOE_CONFIG:
            target = str(model_config_dir(venv) / QWEN3_MOE_CONFIG)
        a = run_aic(aic, case)
        d = dse_side(case, target)
        results.append({"case": case, "aiconfigurator": a, "aiconfigurator_command": " ".join(
            aic_command(Path("aiconfigurator"), case, Path("DIR"))), "dse": d})
        print(f"\n{case['label']}, ISL {case['isl']} / OSL {case['osl']}, SLA TTFT <= {case['ttft']} ms, "
              f"TPOT <= {case['tpot']} ms")
        print(f"{'mode':<7}{'tool':<34}{'tok/s/GPU':>10}{'conc':>6}{'TTFT ms':>9}{'TPOT ms':>9}{'tok/s/user':>11}  "
              f"{'layout':<36}dse/AIC")
        for m in MODES:
            am, dg, db = a[m], d["given"][m], d["best"][m]
            print(fmt_row(m, "AIConfigurator", am, "tokens_per_s_per_gpu", am.get("layout", "")))
            lay = (f"tp{case['gpus']}" if m == "agg" else f"tp{case['gpus']} instances, prefill share "
                   f"{dg.get('prefill_share') or 0:.2f}")
            print(fmt_row(m, f"dse --chips {case['gpus']}", dg, "tokens_per_s_per_chip", lay, ratio(dg, am)))
            if "error" not in db:
                lay = f"tp{db['chips']}" + (f" ep{db['ep']}" if db["ep"] > 1 else "")
                if m == "disagg":
                    lay += f" instances, prefill share {db.get('prefill_share') or 0:.2f}"
            else:
                lay = ""
            print(fmt_row(m, f"dse best layout, kv {case['kv']}", db, "tokens_per_s_per_chip", lay, ratio(db, am)))
            summary.append((case["name"], m, ratio(dg, am), ratio(db, am)))
    print("\ndse / AIConfigurator, output tokens/s per GPU at the best point meeting the SLA")
    print(f"{'case':<28}{'mode':<8}{'dse as given':>13}{'dse best layout':>17}")
    for name, m, r1, r2 in summary:
        print(f"{name:<28}{m:<8}{r1:>13}{r2:>17}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
