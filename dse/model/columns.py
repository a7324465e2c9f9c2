"""The results vocabulary: every column name with its unit (the schema version is
dse.results.store.SCHEMA_VERSION).

A leaf of the results package: readers and writers, the study parser (which metrics may be
optimised) and the report all take column names from here.
"""

from __future__ import annotations

from .evaluate import METRIC_COLUMNS

#: hardware columns (display units): per chip, except cost_usd, power_w and total_die_area_mm2, which
#: are whole-system (target chips + draft chips). The group totals of capacity are the model's
#: memory_capacity_gb and draft_memory_capacity_gb (the fit's denominators), hence chip_ here.
HARDWARE_COLUMNS = ("buildable", "chips", "tp", "pp", "mem_bw_tb_s", "chip_memory_capacity_gb", "peak_tflops", "die_area_mm2",
                    "chip_cost_usd", "chip_power_w", "draft_chips", "draft_mem_bw_tb_s", "draft_chip_memory_capacity_gb",
                    "draft_peak_tflops", "draft_die_area_mm2", "draft_chip_cost_usd", "draft_chip_power_w",
                    "cost_usd", "power_w", "total_die_area_mm2", "chip_price_usd", "price_usd")
#: derived per-resource metrics: what the speculative gain costs in dollars, watts and silicon
#: usd_per_mtok: USD per million output tokens at the best operating point under the workload's SLA
#: (dse.model.economics: the manufacturing cost estimate cost_usd, the same estimator for known and
#: synthesised chips, over the technology's serving_life_years, plus energy at usd_per_kwh and pue)
DERIVED_COLUMNS = ("tokens_per_s_per_kusd", "tokens_per_s_per_w", "tokens_per_s_per_cm2", "speedup_per_kusd",
                   "usd_per_mtok")
#: roofline bound of each phase as text ("memory", "compute", "overhead"); null where the design does not fit
BOUND_COLUMNS = ("baseline_bound", "verify_bound", "draft_bound")
#: text metric columns besides the bounds (tree_shape: nodes per depth, '3-6-6-5-6'; rank_profile: the
#: rank profile a tree's acceptance came from, 'eagle', 'geometric' or 'given'; '' for a chain;
#: acceptance_source: where the row's acceptance comes from, 'given', 'table', 'model', 'table+model' or 'none';
#: sla_speculation: what speculation the SLA point uses, 'none', 'off' or '<draft> k=<k>' / 'tree=<nodes>';
#: sla_serving: 'agg' or 'disagg', '' where no point meets the SLA or there is none)
TEXT_METRICS = ("tree_shape", "rank_profile", "acceptance_source", "sla_speculation", "sla_serving")
#: integer metric columns (draft_tp: the tensor parallel of the draft's steps, dse.model.drafters.draft_tp)
INT_METRICS = ("k", "tree_nodes", "draft_tp")
#: model metrics in `dse eval --json` order
MODEL_METRICS = tuple(name for name, _, _ in METRIC_COLUMNS)
#: what a study may optimise or constrain
NUMERIC_METRICS = tuple(dict.fromkeys(
    [n for n in MODEL_METRICS if n not in BOUND_COLUMNS + TEXT_METRICS and n != "fits"] + list(HARDWARE_COLUMNS[1:])
    + list(DERIVED_COLUMNS)))
#: names of the constraint columns set on every Optuna trial, in constraint_values order
BASE_CONSTRAINTS = ("memory_fit_gb", "buildable")
#: columns every results row has besides params_* (in file order)
ID_COLUMNS = ("study", "trial", "state", "sampler", "seed")
#: (is_pareto / pareto_rank: null in a sweep's part files, whose global flags are in the dataset's
#: _pareto.parquet, dse.results.side_files.PARETO_FILE, joined by load_results)
TAIL_COLUMNS = ("feasible", "infeasible_reason", "constraint_violation", "is_pareto", "pareto_rank", "duplicate_of", "datetime_start",
                "datetime_complete")

