"""The vector model: each row evaluated alone equals its batch row; imports stay light."""

import subprocess
import sys

import numpy as np

from dse.api import hardware_arrays
from dse.model import DesignBatch, evaluate
from dse.workload.spec import Workload, make_acceptance, parse_drafter


def _batch(db, n, rng):
    dev, rt = db.device("h100-sxm"), db.runtime("graphs")
    hw = hardware_arrays(dev, rt, np.ones(n, dtype=int), "bf16")
    hw = type(hw)(**{**{f: getattr(hw, f) for f in hw.__slots__},
                     "mem_bw_bytes_s": rng.uniform(1e12, 8e12, n), "peak_flop_s": rng.uniform(1e14, 2e15, n)})
    return DesignBatch(target=hw, draft=hw, draft_on_chip=np.zeros(n, bool), draft_link_bw_bytes_s=0.0,
                       draft_link_latency_s=0.0, batch=rng.integers(1, 256, n), prompt_tokens=rng.integers(1, 4096, n),
                       output_tokens=rng.integers(1, 1024, n), k=rng.integers(0, 8, n))


def test_rows_alone_equal_batch_rows(db):
    rng = np.random.default_rng(1)
    tgt = db.model("llama-3.1-8b")
    w = Workload(target=tgt, drafter=parse_drafter("llama-3.2-1b", tgt, db), acceptance=make_acceptance(0.75))
    batch = _batch(db, 40, rng)
    full = evaluate(batch, w).columns()
    for i in (0, 7, 39):
        one = DesignBatch(target=batch.target.take([i]), draft=batch.draft.take([i]),
                          draft_on_chip=batch.draft_on_chip[[i]], draft_link_bw_bytes_s=0.0, draft_link_latency_s=0.0,
                          batch=batch.batch[[i]], prompt_tokens=batch.prompt_tokens[[i]],
                          output_tokens=batch.output_tokens[[i]], k=batch.k[[i]])
        alone = evaluate(one, w).columns()
        for name, col in full.items():
            assert col[i] == alone[name][0] or (col[i] != col[i] and alone[name][0] != alone[name][0]), name


def test_model_package_imports_only_numpy():
    code = ("import sys, dse.model; bad = [m for m in ('pandas', 'optuna', 'yaml', 'click', 'pyarrow', "
            "'matplotlib') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_eval_path_does_not_import_optuna_or_pandas():
    code = ("import sys; from dse.cli import main; from dse.api import evaluate_design; "
            "evaluate_design(hw='h100-sxm', target='llama-3.1-8b'); "
            "print([m for m in ('optuna', 'pandas', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
