"""Regenerate every documented output, count and claim from real runs of the code.

    python docs/generate.py              # every block: cheap ones and those that run a study or a sweep
    python docs/generate.py --cheap      # only the cheap blocks (a second or less each)
    python docs/generate.py --measured   # also the timings (the README's quickstart command, as given)
    python docs/generate.py --check      # write nothing; list the blocks whose text differs, exit 1 if any
    python docs/generate.py --measured --only docs/peers.md   # one file (here: re-run the peers benchmark)

Idempotent: a second run changes nothing. README.md, every docs/**/*.md page and studies/*.yaml hold markers
(HTML comments, invisible once rendered) around what the code prints:

    <!-- gen:sh dse eval --hw h200 ... -->        a fenced block: `$ COMMAND` and its output
    <!-- /gen -->                                 (stdout and stderr; a failing command adds `exit N`)
    <!-- gen:sh-stdout dse run STUDY -->          the same, stdout only (no progress lines)
    <!-- gen:py -->                               the output of the ```python block just above
    <!-- gen:setup dse sweep STUDY -->            a command run for the blocks after it (prints nothing)
    <!-- gen:val NAME -->text<!-- /gen -->        a number or a claim, computed by VALUES[NAME] (inline)
    <!-- gen:constants -->                        docs/model.md's table of constants and sources
    <!-- gen:figure SRC DST -->                   copy a figure made above (e.g. by dse report) into the docs
    <!-- gen:measured CMD -->                     a benchmark's output, run in the checkout: --measured only

and docs/knobs.md is written whole from the knob tables (dse/study/spec.py); docs/calibration.md's
`dse validate` table and docs/acceptance.md's `dse acceptance fit` block (and its figure) sit between
markers of their own, written by dse.validation.calibration and dse.acceptance.fit. Commands run in a
scratch folder holding a copy of studies/, with the `dse` of this Python, COLUMNS=120. Blocks that
run a search, a sweep, a report or `dse validate` are "expensive" (seconds each): `--cheap` leaves
them as they are, and tests/test_docs.py compares them only with DSE_SLOW_TESTS=1 (or in CI).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the files whose markers are regenerated: the README, every page under docs/ (in any folder) and the
#: studies' comments. Files are processed in this order, in one scratch folder: a page that reads what a
#: command made (results/quickstart.parquet, a sweep) runs that command in a gen:setup marker of its own,
#: so that it regenerates alone too (--only).
TARGETS = ("README.md", "docs/**/*.md", "studies/*.yaml")
#: the whole files written from the code
KNOBS_PAGE = ROOT / "docs" / "knobs.md"

_BLOCK = re.compile(r"<!-- gen:(?P<kind>[a-z-]+)(?P<args>[^>]*?)-->(?P<body>.*?)<!-- /gen -->", re.S)
#: commands whose run costs seconds: compared only in the slow check
_EXPENSIVE = re.compile(r"^(dse (run|sweep|report|pareto|validate|export)|python)\b")


@dataclass
class Block:
    file: str
    kind: str
    args: str
    old: str
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.file}: gen:{self.kind} {self.args}".rstrip()

    @property
    def expensive(self) -> bool:
        if self.kind in ("py", "setup", "figure"):
            return True
        if self.kind in ("sh", "sh-stdout"):
            return bool(_EXPENSIVE.match(self.args))
        if self.kind == "val":
            return self.args not in CHEAP_VALUES
        return self.kind == "measured"


# --------------------------------------------------------------------------- running things

class Runner:
    """A scratch folder with a copy of studies/, where documented commands run as a user runs them."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="dse-docs-"))
        self.figures: list[tuple[Path, Path]] = []     # (made here, where the docs show it)
        shutil.copytree(ROOT / "studies", self.dir / "studies")
        bin_dir = str(Path(sys.executable).parent)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DSE_WORKER"))}
        self.env.update(PATH=f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}", COLUMNS="120",
                        PYTHONHASHSEED="0", MPLBACKEND="Agg")

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def sh(self, cmd: str, stdout_only: bool = False) -> tuple[str, int]:
        r = subprocess.run(["bash", "-c", cmd], cwd=self.dir, env=self.env, text=True, timeout=1800,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if stdout_only else subprocess.STDOUT)
        return r.stdout, r.returncode

    def py(self, code: str) -> str:
        r = subprocess.run([sys.executable, "-c", code], cwd=self.dir, env=self.env, text=True, timeout=1800,
                           capture_output=True)
        if r.returncode:
            raise RuntimeError(f"a documented Python block failed:\n{code}\n{r.stderr}")
        return r.stdout


def _fence(text: str, lang: str = "") -> str:
    return f"\n```{lang}\n{text.rstrip()}\n```\n"


def render_sh(runner: Runner, cmd: str, stdout_only: bool) -> str:
    out, rc = runner.sh(cmd, stdout_only)
    tail = f"\nexit {rc}" if rc and "|" not in cmd else ""
    return _fence(f"$ {cmd}\n{out.rstrip()}{tail}")


def _python_above(text: str, pos: int) -> str:
    """The body of the last ```python fence that ends before ``pos``."""
    fences = list(re.finditer(r"```python\n(.*?)```", text[:pos], re.S))
    if not fences:
        raise RuntimeError("a gen:py marker with no ```python block above it")
    return fences[-1].group(1)


# --------------------------------------------------------------------------- values (inline claims)

def _db():
    from dse.catalog.database import load_database
    return load_database()


def v_devices() -> str:
    return str(len(_db().names("device")))


def v_models() -> str:
    return str(len(_db().names("model")))


def v_acceptance_rows() -> str:
    from dse.catalog.acceptance import load_table
    return f"{len(load_table()):,}"


def _constants():
    """(name, value, estimate, source) of every constant in hardware_db/technology and runtimes."""
    from dse.catalog.yamlio import load_yaml
    rows = []

    def walk(node, path):
        if isinstance(node, dict) and "value" in node:
            src = node.get("source") or node.get("reason") or ""
            rows.append((path, node["value"], bool(node.get("estimate")), str(src)))
            return
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in ("notes", "schema_version", "description"):
                    walk(v, f"{path}.{k}" if path else k)
    for f in sorted((ROOT / "hardware_db" / "technology").glob("*.yaml")):
        walk(load_yaml(f), f.stem)
    for f in sorted((ROOT / "hardware_db" / "runtimes").glob("*.yaml")):
        raw = load_yaml(f)
        est = set(raw.get("estimates") or [])
        for key, src in (raw.get("sources") or {}).items():
            if key in raw:
                rows.append((f"runtimes.{raw['name']}.{key}", raw[key], key in est, str(src)))
    return rows


def v_constants_estimated() -> str:
    rows = [r for r in _constants() if r[0].split(".")[0] in ("nodes", "memory", "links")]
    return f"{sum(r[2] for r in rows)} of {len(rows)}"


def v_constants_table() -> str:
    lines = ["", "| constant | value | estimate | source or reason |", "|---|---|---|---|"]
    for name, value, est, src in _constants():
        text = " ".join(src.split()).replace("|", "/")
        lines.append(f"| `{name}` | {value} | {'estimate' if est else ''} | {text} |")
    return "\n".join(lines) + "\n"


def v_grid_points_quickstart() -> str:
    from dse.campaign.grid import grid_plan
    from dse.study import load_study
    return f"{grid_plan(load_study(ROOT / 'studies' / 'quickstart.yaml')).total:,}"


def _tree_best(batch: int):
    """The best tree size (tau-maximising speedup) of tree-size.yaml's grid on an H100 at ``batch``."""
    import dse
    best = None
    for nodes in (0, 8, 16, 32, 64, 128, 256):
        r = dse.evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, batch=batch,
                                prompt=512, output=256, tree_nodes=nodes)
        if r["fits"] and (best is None or r["speedup"] > best[1]):
            best = (nodes, r["speedup"])
    return best[0]


def v_tree_claim() -> str:
    """The tree-size study's answer on an H100 (re-derived from the model, not typed)."""
    sizes = {b: _tree_best(b) for b in (1, 4, 16, 64)}

    def say(n):
        return "a chain" if n == 0 else f"{n} nodes"
    parts = [f"{say(n)} at batch {b}" for b, n in sizes.items()]
    return f"the best EAGLE tree at alpha 0.7 is {', '.join(parts[:-1])} and {parts[-1]}"


def v_tree_rechosen() -> str:
    """EAGLE-3's tree re-chosen for the batch (70B fp8 on an H200) against its published tree."""
    import dse
    kw = dict(hw="h200", target="llama-3.1-70b", dtype="fp8", draft="eagle3")
    parts = []
    for b in (1, 4, 32, 128):
        r = dse.evaluate_design(**kw, batch=b)
        p = dse.evaluate_design(**kw, batch=b, tree_nodes="published")
        article = "an" if str(r["tree_nodes"]).startswith(("8", "11", "18")) else "a"
        what = (f"{article} {r['tree_nodes']}-node tree" if r["tree_nodes"] else f"a chain of {r['k']}" if r["k"] else
                "no speculation")
        parts.append(f"batch {b}: {what}, {r['speedup']:.2f}x ({p['speedup']:.2f}x with the published tree)")
    return "; ".join(parts)


def v_batch_crossover_k4() -> str:
    """batch-crossover.yaml's answer at k = 4, from the model on its grid."""
    import dse
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    cross, oom = {}, {}
    for hw in ("h100-sxm", "h200", "b200", "mi300x", "a100-80gb", "l40s"):
        for b in batches:
            r = dse.evaluate_design(hw=hw, target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4, batch=b,
                                    prompt=512, output=256)
            if not r["fits"]:
                oom[hw] = b
                break
            if r["speedup"] < 1:
                cross[hw] = b
                break
    by_batch: dict[int, list[str]] = {}
    for hw, b in cross.items():
        by_batch.setdefault(b, []).append(hw)
    parts = [f"{b} on {' and '.join(sorted(h))}" for b, h in sorted(by_batch.items())]
    text = "speculation stops paying at batch " + ", ".join(parts)
    if oom:
        names = sorted(oom)
        text += (f"; {' and '.join(names)} run{'s' if len(names) == 1 else ''} out of memory first (at batch "
                 f"{' and '.join(str(oom[h]) for h in names)})")
    return text


def v_calibration() -> str:
    """The README's summary of `dse validate` (docs/calibration.md): median absolute errors."""
    from dse.validation import comparison
    s = comparison.summary(comparison.report()["rows"])

    def med(fam, role):
        d = s[fam][role]
        return f"{100 * d['median_abs_error']:.1f}%", d["n"]
    (df, nf), (dh, nh) = med("decode", "fit"), med("decode", "held-out")
    (t, nt), (r, nr) = med("ttft", "held-out"), med("throughput", "held-out")
    (sp, ns), (en, ne) = med("speculative", "held-out"), med("energy", "held-out")
    return (f"median absolute error on decode latency {df} on the {nf} fitted rows and {dh} on the {nh} held-out "
            f"rows; time to first token {t} held out (n={nt}); large-batch request latency {r} held out (n={nr}); "
            f"speculative {sp} on the {ns} held-out rows; energy per token {en} on the {ne} held-out rows")


_CODESIGN: dict = {}


def _codesign() -> dict:
    """The grid sweep of studies/draft-codesign.yaml (seconds), read once: its counts and its answer."""
    if _CODESIGN:
        return _CODESIGN
    import pandas as pd

    from dse.results.pareto import first_of_equal, pareto_mask
    with tempfile.TemporaryDirectory(prefix="dse-docs-codesign-") as tmp:
        out = Path(tmp) / "sweep.parquet"
        r = subprocess.run([str(Path(sys.executable).parent / "dse"), "sweep",
                            str(ROOT / "studies" / "draft-codesign.yaml"), "--out", str(out), "--quiet"],
                           capture_output=True, text=True, timeout=1800)
        if r.returncode:
            raise RuntimeError(f"dse sweep studies/draft-codesign.yaml failed:\n{r.stdout}{r.stderr}")
        m = re.search(r"([\d,]+) designs from ([\d,]+) grid points", r.stdout + r.stderr)
        df = pd.read_parquet(out)
    f = df[df["feasible"]].copy()
    f["does"] = f["params_draft"].where(f["k"] > 0, "none").astype(str)        # k = 0: no speculation
    obj = ["spec_ms_per_token", "cost_usd", "energy_j_per_token"]
    v = f[obj].to_numpy(dtype=float)
    fr = f[first_of_equal(v, pareto_mask(v, ["minimize"] * 3))]
    on_chip = f["params_draft_chip_enabled"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    own, chip = f[~on_chip], f[on_chip]           # the drafts on the target's own chips; on a draft chip

    def best(g):
        return g.loc[g["spec_ms_per_token"].idxmin()]

    def name(d):
        return {"none": "no speculation", "llama-3.2-1b": "the 1B", "llama-3.2-3b": "the 3B", "llama-3.1-8b": "the 8B",
                "eagle3": "EAGLE-3", "medusa:4": "Medusa", "ngram": "prompt lookup", "early-exit": "an early exit"}[d]
    wins: dict[str, list] = {}
    for _, g in own.groupby(["params_target_chip_memory", "params_batch"]):
        w = best(g)
        wins.setdefault(w["does"], []).append(float(w["speedup"]))
    b1 = own[(own["params_target_chip_memory"] == "hbm3e") & (own["params_batch"] == 1)]
    lat = b1.groupby("does")["spec_ms_per_token"].min().sort_values()
    en = b1.groupby("does")["energy_j_per_token"].min().sort_values()
    cells = [(mem, int(b), best(g)) for (mem, b), g in chip.groupby(["params_target_chip_memory", "params_batch"])]
    pays = [c for c in cells if c[2]["k"] > 0]
    off = [f"{mem.upper()} at batch {b}" for mem, b, w in cells if w["k"] == 0]
    top = max(pays, key=lambda c: c[2]["speedup"]) if pays else None
    counts = fr["does"].value_counts()
    g = f[f["params_draft"] != "eagle3"]
    v = g[obj].to_numpy(dtype=float)
    alt = g[first_of_equal(v, pareto_mask(v, ["minimize"] * 3))]["does"].value_counts()

    def num(x):
        return f"{int(x.replace(',', '')):,}"
    _CODESIGN.update(
        counts=f"{num(m.group(1))} distinct designs of {num(m.group(2))} grid points" if m else "?",
        front=f"{len(fr)} designs: " + ", ".join(f"{n} {name(d)}" for d, n in counts.items()),
        front_without_eagle3=f"{alt.sum()} designs: " + ", ".join(f"{n} {name(d)}" for d, n in alt.items()),
        wins="; ".join(f"{name(d)} in {len(x)} of {sum(len(y) for y in wins.values())} "
                       f"({min(x):.2f}-{max(x):.2f}x)" for d, x in wins.items()),
        batch1_latency=f"{name(lat.index[0])} {lat.iloc[0]:.2f} ms/token; then "
                       + ", ".join(f"{name(d)} {t:.2f}" for d, t in lat.iloc[1:].items()),
        batch1_energy=f"{name(en.index[0])}'s {en.iloc[0]:.2f} J, then "
                      + ", ".join(f"{name(d)} {e:.2f}" for d, e in en.iloc[1:].items()),
        draft_chip=(f"its best is {name(top[2]['does'])} on {top[0].upper()} at batch {top[1]} "
                    f"({top[2]['speedup']:.2f}x)" if top is not None else "it never pays")
                   + (f"; its fastest design switches speculation off on {', '.join(off)}" if off else ""),
    )
    return _CODESIGN


def _study_rows(verb: str, study: str):
    """The rows `dse run` or `dse sweep` (``verb``) writes for studies/``study``, read from a temporary
    directory; RuntimeError with its output where it fails."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="dse-docs-") as tmp:
        out = Path(tmp) / ("run.parquet" if verb == "run" else "sweep")
        r = subprocess.run([str(Path(sys.executable).parent / "dse"), verb, str(ROOT / "studies" / study),
                            "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=1800)
        if r.returncode:
            raise RuntimeError(f"dse {verb} studies/{study} failed:\n{r.stdout}{r.stderr}")
        return pd.read_parquet(out)


def v_sram_answer() -> str:
    """Where SRAM-only chips land on studies/sram-vs-hbm.yaml's front (its `dse run`, seed 0), and why,
    from the model's own columns."""

    df = _study_rows("run", "sram-vs-hbm.yaml")
    f = df[df["feasible"]]
    fr = f[f["is_pareto"].astype(bool)]
    mem = fr["params_target_chip_memory"].astype(str)
    sram, other = fr[mem == "sram"], fr[mem != "sram"]
    fast = sram.loc[sram["spec_ms_per_token"].idxmin()] if len(sram) else None
    best_other = other.loc[other["spec_ms_per_token"].idxmin()] if len(other) else None
    cheap = fr.loc[fr["cost_usd"].idxmin()]
    on = fr["params_draft_chip_enabled"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    tried = int(f["params_draft_chip_enabled"].astype("boolean").fillna(False).sum())
    if fast is None:
        return f"On its front of {len(fr)} designs no SRAM-only chip survives."
    layers = 80                           # Llama-3.1-70B
    sync_ms = layers * 15.5e-3
    return (f"On its front ({len(fr)} of {len(f):,} feasible designs, 2,000 trials) SRAM-only chips hold the fast "
            f"end: {len(sram)} designs, the fastest {fast['spec_ms_per_token']:.2f} ms/token ({int(fast['chips'])} chips "
            f"of {fast['chip_memory_capacity_gb']:.1f} GB in {int(fast['pp'])} stages, "
            f"${fast['cost_usd'] / 1e3:,.0f}k, {fast['energy_j_per_token']:.1f} J/token), against "
            + (f"{best_other['spec_ms_per_token']:.2f} ms/token for the fastest "
               f"{str(best_other['params_target_chip_memory']).upper()} design (${best_other['cost_usd'] / 1e3:,.0f}k, "
               f"{best_other['energy_j_per_token']:.1f} J/token)" if best_other is not None else "no other memory")
            + f"; the cheapest design on the front costs ${cheap['cost_usd'] / 1e3:,.1f}k "
            f"({str(cheap['params_target_chip_memory']).upper()}). Why, from the model: 70 GB of fp8 weights need "
            f"tens of GB of SRAM, at its cost per mm², and a pass over SRAM crosses 80 layers in turn, each on its "
            f"region of a chip: at that aggregate bandwidth the layer-sequential bound is small, and what is left "
            f"is the dataflow runtime's layer syncs (80 x 15.5 us = {sync_ms:.2f} ms a pass) over the tokens a "
            f"pass accepts. "
            + (f"The SRAM draft chip was tried in {tried:,} feasible design{'s' if tried != 1 else ''} and is on in "
               f"{int(on.sum())} of the front's (compare the fronts with and without it on "
               f"`params_draft_chip_enabled`)." if tried else
               "The search never switched the SRAM draft chip on, so this front cannot say whether it pays."))


def v_serving_answer() -> str:
    """studies/serving-sla.yaml's answer on its grid (`dse sweep`, seconds), with 8 H200s for scale."""

    from dse.api import evaluate_design
    df = _study_rows("sweep", "serving-sla.yaml")
    f = df[df["feasible"] & df["sla_tokens_per_s_per_chip"].notna()]

    def name(row):
        return (f"{row['params_target_chip_peak_tflops']:,.0f} TFLOP/s, {int(row['params_target_chip_memory_stacks'])} "
                f"{str(row['params_target_chip_memory']).upper()} stacks, {int(row['params_target_chip_chips'])} "
                f"chip{'s' if int(row['params_target_chip_chips']) > 1 else ''}")
    fast = f.loc[f["sla_tokens_per_s_per_chip"].idxmax()]
    cheap = f.loc[f["usd_per_mtok"].idxmin()]
    plain = f[f["params_draft"].astype(str) == "none"]["sla_tokens_per_s_per_chip"].max()
    h200 = evaluate_design(hw="h200", chips=8, target="llama-3.1-70b", dtype="fp8", kv_dtype="fp8", prompt=4000,
                           output=500, sla_ttft_ms=1000, sla_tpot_ms=20)
    serving = {"agg": "one pool", "disagg": "disaggregated"}
    return (f"On its grid ({len(df):,} designs, {len(f)} of them feasible and meeting the SLA) the most output tokens/s "
            f"per chip is {fast['sla_tokens_per_s_per_chip']:,.0f} ({name(fast)}; {fast['sla_speculation']} at "
            f"concurrency {int(fast['sla_concurrency'])}, {serving[str(fast['sla_serving'])]}, "
            f"{fast['usd_per_mtok']:.3f} USD per million tokens) and the cheapest token costs "
            f"{cheap['usd_per_mtok']:.3f} USD per million ({name(cheap)}, {cheap['sla_tokens_per_s_per_chip']:,.0f} "
            f"tokens/s per chip); without speculation the best is {plain:,.0f} tokens/s per chip. The eight H200s "
            f"above, with the study's fp8 KV cache, serve {h200['sla_tokens_per_s_per_chip']:,.0f} per chip at "
            f"{h200['usd_per_mtok']:.3f} USD.")


def _scaleout() -> dict:
    """trials/s per (storage, workers) of the bench_scaleout run quoted in docs/benchmarks.md."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    rate = {(m.group(1), int(m.group(2))): float(m.group(3))
            for m in re.finditer(r"^(tasks|journal)\s+workers=(\d+)\s+\d+ trials in\s+[\d.]+ s\s+([\d.]+) trials/s",
                                 text, re.M)}
    if not rate:
        raise RuntimeError("docs/benchmarks.md quotes no bench_scaleout run")
    return rate


def v_scaleout_tasks() -> str:
    r = _scaleout()
    return f"1 process {r[('tasks', 1)]:.0f} trials/s, 2 processes {r[('tasks', 2)]:.0f}/s"


def v_scaleout_journal() -> str:
    r = _scaleout()
    return f"journal file: {r[('journal', 1)]:.0f} trials/s (1 worker), {r[('journal', 2)]:.0f}/s (2)"


def _timed(cmd: str, runner: Runner) -> float:
    t = time.perf_counter()
    out, rc = runner.sh(cmd)
    if rc:
        raise RuntimeError(f"{cmd} failed:\n{out}")
    return time.perf_counter() - t


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f}"
    except OSError:
        return "load unknown"


def v_quickstart_timing() -> str:
    """Wall time of the README's quickstart command exactly as given (a fresh venv, `pip install .`,
    `dse run`) in a fresh copy of the checkout, and of the `dse run` part alone."""
    load = _load()
    runner = Runner()
    try:
        common = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build", ".pytest_cache",
                                        ".ruff_cache")

        def ignore(folder, names):            # a user's results/ at the top, not the dse.results package
            return set(common(folder, names)) | ({"results", "report"} & set(names) if Path(folder) == ROOT else set())
        shutil.copytree(ROOT, runner.dir / "clone", ignore=ignore)
        runner.dir = runner.dir / "clone"
        env_path = runner.env["PATH"].split(os.pathsep, 1)[1]
        runner.env["PATH"] = env_path                   # the command makes its own venv
        install = _timed("python3 -m venv .venv && . .venv/bin/activate && pip install -q .", runner)
        run = _timed(". .venv/bin/activate && dse run studies/quickstart.yaml > /dev/null 2>&1", runner)
    finally:
        shutil.rmtree(runner.dir.parent, ignore_errors=True)
    return (f"about {round((install + run) / 60, 1):g} min here, {load} on 2 cores at the start: the venv and "
            f"`pip install .` {install:.0f} s (most of it downloading and building wheels), `dse run` {run:.1f} s")


def v_quickstart_run() -> str:
    """Wall time of `dse run studies/quickstart.yaml` (default journal beside the output)."""
    load = _load()
    runner = Runner()
    try:
        run = _timed("dse run studies/quickstart.yaml > /dev/null 2>&1", runner)
    finally:
        runner.close()
    return f"{run:.0f} s ({load} at the start)"


def v_search_quality() -> str:
    """sampler auto's HV ratios at 1,000 trials (seeds 0-2) in docs/search-quality.json, the full
    run of benchmarks/bench_search_quality.py: the shipped studies' range, then the new studies'."""
    import json
    res = json.loads((ROOT / "docs" / "search-quality.json").read_text())["studies"]

    def span(names):
        v = [r["hv_ratio"] for n in names if n in res for r in res[n]["rows"]
             if r["sampler"] == "auto" and r["trials"] == 1000]
        return f"{min(v):.4f}-{max(v):.4f}"
    shipped = [n for n in res if n in ("quickstart", "draft-chip")]
    new = [n for n in res if n not in shipped]
    return (f"{span(shipped)} of the best known front's hypervolume on the shipped studies ({', '.join(shipped)}) "
            f"and {span(new)} on {len(new)} larger ones ({', '.join(new)}), seeds 0-2")


VALUES: dict[str, Callable[[], str]] = {
    "devices": v_devices, "models": v_models, "acceptance_rows": v_acceptance_rows, "constants_estimated": v_constants_estimated,
    "grid_points_quickstart": v_grid_points_quickstart, "tree_claim": v_tree_claim, "tree_rechosen": v_tree_rechosen,
    "batch_crossover_k4": v_batch_crossover_k4, "calibration": v_calibration, "scaleout_tasks": v_scaleout_tasks,
    "scaleout_journal": v_scaleout_journal, "search_quality": v_search_quality,
    "quickstart_timing": v_quickstart_timing, "quickstart_run": v_quickstart_run, "sram_answer": v_sram_answer,
    "serving_answer": v_serving_answer,
    **{f"codesign_{k}": (lambda k=k: _codesign()[k])
       for k in ("counts", "front", "front_without_eagle3", "wins", "batch1_latency", "batch1_energy", "draft_chip")},
}
#: values computed in well under a second each (the rest: seconds, or measured timings)
CHEAP_VALUES = {"devices", "models", "acceptance_rows", "constants_estimated", "grid_points_quickstart", "tree_claim", "tree_rechosen",
                "batch_crossover_k4", "scaleout_tasks", "scaleout_journal", "search_quality"}
#: values that are timings: regenerated with --measured only, never compared
MEASURED_VALUES = {"quickstart_timing", "quickstart_run",
                   # a 2,000-trial search (half a minute): regenerated with --measured, kept out of CI's drift check
                   "sram_answer"}


# --------------------------------------------------------------------------- the knob reference

def knobs_page() -> str:
    """docs/knobs.md: every study knob, its kind, range or choices and default, from dse/study/spec.py
    and the database (categorical choices)."""
    from dse.catalog.technology import load_technology
    from dse.study import spec
    db = _db()
    tech = load_technology(db.root)
    choices = {"device": db.names("device"), "memory": list(tech.memory_names), "process_node": list(tech.node_names)}

    def allowed(name, d):
        if d.kind == "bool":
            return "true, false"
        if d.kind == "cat":
            return ", ".join(choices.get(name, [])) or "(see the database)"
        hi = "unbounded" if d.hi == float("inf") else f"{d.hi:g}"
        return f"{d.lo:g} to {hi}"

    def table(title, knobs, note=""):
        out = [f"## {title}", ""] + ([note, ""] if note else [])
        out += ["| knob | kind | allowed | default | meaning |", "|---|---|---|---|---|"]
        for name, d in knobs.items():
            default = "-" if d.default is None else str(d.default).lower() if isinstance(d.default, bool) else d.default
            out.append(f"| `{name}` | {d.kind} | {allowed(name, d)} | {default} | {d.desc} |")
        return out + [""]
    lines = ["# Study knobs and their allowed values", "",
             "<!-- generated by `python docs/generate.py` from dse/study/spec.py and hardware_db/; do not edit -->", "",
             "A knob is one design variable of a study (a property of the hypothetical chip, of an optional",
             "draft chip, or of the workload). In a study it is a fixed value, a list of choices, or a range",
             "`{low, high}` (with `log: true` for a geometric range and `step: S` for a grid of steps). A value",
             "outside the allowed range is refused with one line naming the file, the key and the range (exit 2).",
             "A knob that does not act on a design (docs/model.md section 5; `dse/study/space.py`) is not sampled",
             "and is null in the results.",
             "",
             "The words below: **k** is the tokens the draft proposes per speculative iteration (a tree's depth",
             "bound); an **MoE** target is a mixture-of-experts model, whose experts expert parallel (EP) splits",
             "over ranks; a **trial** is one design a search evaluates, and the **front** (Pareto front) the",
             "feasible designs that no other design beats in every objective. All terms: [glossary.md](glossary.md).",
             ""]
    lines += table("space.target_chip", spec.CHIP_KNOBS,
                   "A synthesised chip (`peak_tflops` required), or known parts with `device: [NAME or FILE.yaml, ...]` "
                   "(a YAML file with the fields of hardware_db/devices, read from the study's folder).")
    lines += table("space.draft_chip", spec.DRAFT_CHIP_KNOBS,
                   "A colocated chip that holds the draft model (`enabled: [true, false]` compares both).")
    lines += table("workload (sizes that may be knobs)", spec.WORKLOAD_KNOBS,
                   "Each a fixed value or a list / range searched per design.")
    extra = {"k (space.k, or workload.k)": spec.K_KNOB, "workload.tree_nodes": spec.TREE_NODES_KNOB,
             "workload.ep": spec.EP_KNOB}
    lines += table("speculation", {k: v for k, v in extra.items()},
                   "`workload.k: auto` (the default) picks the best k per design; `space.k` searches it.")
    lines += ["## Other study keys", "",
              f"- top level: {', '.join(f'`{k}`' for k in sorted(spec.TOP_KEYS))}",
              f"- workload: {', '.join(f'`{k}`' for k in sorted(spec.WORKLOAD_KEYS))}",
              f"- search.sampler: {', '.join(f'`{s}`' for s in spec.SAMPLERS)} (default `auto`: a front found in numpy "
              "as the first trials, then trials bred from the front and screened in numpy; `presearch_s` caps "
              "the numpy pre-search, reference CPU seconds counted from the model's work)",
              f"- search defaults: {', '.join(f'`{k}: {v}`' for k, v in spec.SEARCH_DEFAULTS.items())}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the generator

def targets() -> list[Path]:
    out = []
    for pat in TARGETS:
        out += sorted(ROOT.glob(pat))
    return [p for p in out if p != KNOBS_PAGE]


def blocks(text: str, file: str) -> list[Block]:
    return [Block(file, m.group("kind"), m.group("args").strip(), m.group("body"), m.start("body"), m.end("body"))
            for m in _BLOCK.finditer(text)]


def render(block: Block, text: str, runner: Runner) -> str:
    k = block.kind
    if k in ("sh", "sh-stdout"):
        return render_sh(runner, block.args, k == "sh-stdout")
    if k == "setup":
        out, rc = runner.sh(block.args)
        if rc:
            raise RuntimeError(f"setup {block.args!r} failed:\n{out}")
        return "\n"
    if k == "py":
        return _fence(runner.py(_python_above(text, block.start)))
    if k == "val":
        if block.args not in VALUES:
            raise RuntimeError(f"{block.name}: no value named {block.args!r} (VALUES in docs/generate.py)")
        return VALUES[block.args]()
    if k == "constants":
        return v_constants_table()
    if k == "figure":           # SRC (made by a setup command above) -> DST in the checkout
        src, dst = block.args.split()
        runner.figures.append((runner.dir / src, ROOT / dst))
        return "\n"
    if k == "measured":         # a benchmark run: in the checkout, its own output as printed
        stamp = f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {_load()} at the start"
        r = subprocess.run(["bash", "-c", block.args], cwd=ROOT, env=runner.env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=3600)
        return _fence(f"$ {block.args}   {stamp}\n{r.stdout.rstrip()}")
    raise RuntimeError(f"{block.name}: unknown marker kind {k!r}")


def regenerate(text: str, file: str, runner: Runner, cheap: bool, measured: bool) -> tuple[str, list[str]]:
    """``text`` with its blocks regenerated; the names of the blocks that changed."""
    out, pos, changed = [], 0, []
    for b in blocks(text, file):
        skip = (cheap and b.expensive) or ((b.args in MEASURED_VALUES or b.kind == "measured") and not measured)
        new = b.old if skip else render(b, text, runner)
        if new != b.old:
            changed.append(f"{b.name}\n--- documented\n{b.old.strip()}\n+++ the code prints\n{new.strip()}")
        out += [text[pos:b.start], new]
        pos = b.end
    out.append(text[pos:])
    return "".join(out), changed


def run(cheap: bool = False, measured: bool = False, write: bool = True, texts: dict | None = None,
        only: str | None = None, files: tuple[str, ...] | None = None, pages: bool | None = None) -> list[str]:
    """Regenerate every target (or check them: ``write`` False); ``texts`` {relative path: text}
    replaces files' contents (the drift test plants a stale number this way); ``only``: the files
    whose path contains it; ``files``: these relative paths; ``pages``: the knob page and the
    calibration and acceptance blocks too (by default only when neither narrows the files).
    Returns what changed."""
    runner = Runner()
    changed = []
    pages = (only is None and files is None) if pages is None else pages
    try:
        for path in targets():
            rel = str(path.relative_to(ROOT))
            if (only and only not in rel) or (files is not None and rel not in files):
                continue
            text = (texts or {}).get(rel, path.read_text())
            new, diff = regenerate(text, rel, runner, cheap, measured)
            changed += diff
            if write and new != text:
                path.write_text(new)
        if write:
            for src, dst in runner.figures:
                shutil.copyfile(src, dst)
        if not pages:
            return changed
        if not cheap:           # docs/calibration.md quotes `dse validate` (python -m dse.validation.comparison FILE)
            from dse.validation import comparison
            doc = ROOT / "docs" / "calibration.md"
            want = comparison.format_report(comparison.report())
            if comparison.doc_block(doc) != want:
                changed.append("docs/calibration.md: the dse validate block")
                if write:
                    comparison.update_doc(doc, want)
        # docs/acceptance.md quotes `dse acceptance fit` (python -m dse.acceptance.fit PAGE FIGURE); the stored
        # fit makes it cheap
        from dse.acceptance import fit as acceptance_fit
        doc, img = ROOT / "docs" / "acceptance.md", ROOT / "docs" / "img" / "acceptance-fit.png"
        text = doc.read_text()
        have = text[text.index(acceptance_fit._BEGIN) + len(acceptance_fit._BEGIN):text.index(acceptance_fit._END)]
        want = "\n```text\n" + acceptance_fit.format_report(acceptance_fit.report(acceptance_fit.stored_fit())) + "\n```\n"
        if have != want:
            changed.append(f"docs/acceptance.md: the dse acceptance fit block\n--- documented\n{have.strip()}\n"
                           f"+++ the code prints\n{want.strip()}")
            if write:
                acceptance_fit.update_doc(doc, img)
        page = knobs_page()
        old = KNOBS_PAGE.read_text() if KNOBS_PAGE.is_file() else ""
        if old != page:
            changed.append(f"docs/knobs.md\n--- documented\n(differs)\n+++ the code prints\n{page[:400]}")
            if write:
                KNOBS_PAGE.write_text(page)
    finally:
        runner.close()
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cheap", action="store_true", help="only the blocks that take under a second")
    ap.add_argument("--measured", action="store_true", help="also the timings (minutes: installs a fresh venv)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a block differs")
    ap.add_argument("--only", metavar="TEXT", help="only the files whose path contains TEXT (e.g. docs/peers.md)")
    args = ap.parse_args(argv)
    changed = run(cheap=args.cheap, measured=args.measured, write=not args.check, only=args.only)
    for c in changed:
        print(c, end="\n\n")
    print(f"{len(changed)} block{'s' if len(changed) != 1 else ''} {'differ' if args.check else 'regenerated'}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
