"""What a validated study is: knob tables, knobs, objectives, constraints and StudySpec."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..catalog.links import SCALE_UP_CLASSES
from ..storage.credentials import redact_url
from ..workload.spec import DEFAULT_BUDGET_TOKENS, K_LIMIT, TREE_NODES_MAX, DrafterSpec, Workload

#: "auto" (the default): a front found in numpy (dse.search.presearch) as the first trials, then trials bred
#: from the front and screened in numpy (dse.search.breeder)
SAMPLERS = ("auto", "nsga2", "nsga3", "tpe", "gp", "random", "qmc")


@dataclass(frozen=True)
class KnobDef:
    """What a knob may be: kind 'int' | 'float' | 'cat' | 'bool', range or choices, default."""

    kind: str
    lo: float = 0.0
    hi: float = math.inf
    default: Any = None
    choices: tuple = ()
    desc: str = ""


#: knobs of a synthesised chip (MODEL.md section 5); `device` instead picks known parts.
#: A knob whose default is None is absent unless the study gives it: mem_efficiency and
#: compute_efficiency then follow the rule known parts follow (docs/calibration.md section 4:
#: DRAM 0.83, SRAM 0.9; compute 0.66), runtime is the workload's, the fixed costs are the
#: runtime's and the link's latency its class's (evaluation.chip_group).
CHIP_KNOBS = {
    "device": KnobDef("cat", desc="known parts from hardware_db/devices (instead of technology knobs)"),
    "process_node": KnobDef("cat", default="n5", desc="process node from hardware_db/technology/nodes.yaml"),
    "peak_tflops": KnobDef("float", 0.0, 1e5, None, desc="dense BF16 TFLOP/s per chip (FP8 = 2x)"),
    "memory": KnobDef("cat", default="hbm3e", desc="memory type from hardware_db/technology/memory.yaml"),
    "memory_stacks": KnobDef("int", 1, 64, 4, desc="HBM stacks, or GDDR/LPDDR devices"),
    "stack_height": KnobDef("int", 1, 16, 8, desc="HBM dies per stack"),
    "sram_mb": KnobDef("float", 0.0, 1e6, 0.0, desc="on-die SRAM"),
    "chips": KnobDef("int", 1, 1024, 1, desc="chips in the group: pp stages of chips/pp in tensor parallel"),
    "pp": KnobDef("int", 1, 1024, None, desc="pipeline stages of the target's chips (divides chips, at most the "
                                             "layers); absent = auto: 1 where the chips split the heads, else the "
                                             "fewest stages (the most on an SRAM part)"),
    "link_bw_gb_s": KnobDef("float", 0.0, 1e5, 900.0, desc="scale-up link, both directions added"),
    "link_class": KnobDef("cat", default=None, choices=SCALE_UP_CLASSES,
                          desc="kind of scale-up link: its latency per ring step and efficiency "
                               "(hardware_db/technology/links.yaml); absent = nvlink, a scale-up fabric"),
    "link_latency_us": KnobDef("float", 0.0, 1e3, None, desc="per-step collective latency; absent = the link class's"),
    "scale_up_domain": KnobDef("int", 1, 1e5, 8, desc="chips one scale-up link joins (8: an HGX board); a group "
                                                      "beyond it is whole domains on the scale-out network"),
    "scale_out_bw_gb_s": KnobDef("float", 0.0, 1e5, 100.0, desc="network per chip between scale-up domains, both "
                                                               "directions added (100: one 400 Gb/s NIC per chip)"),
    "mem_efficiency": KnobDef("float", 0.01, 1.0, None, desc="achievable fraction of peak bandwidth; absent = the "
                                                             "known parts' rule: DRAM 0.83, SRAM 0.9"),
    "compute_efficiency": KnobDef("float", 0.01, 1.0, None, desc="achievable fraction of peak FLOP/s; absent = 0.66"),
    "runtime": KnobDef("cat", default=None, desc="software stack from hardware_db/runtimes (graphs, eager, "
                                                 "dataflow, ...); absent = workload.runtime"),
    "kernel_launch_us": KnobDef("float", 0.0, 1000.0, None, desc="fixed cost per kernel: 0 (compiled dataflow) to "
                                                                 "23.5 (PyTorch eager); absent = the runtime's"),
    "step_overhead_us": KnobDef("float", 0.0, 1e5, None, desc="fixed cost per forward step: 0 to 3000 (eager); "
                                                              "absent = the runtime's"),
    "spec_overhead_us": KnobDef("float", 0.0, 1e5, None, desc="fixed cost per speculative iteration: 0 to 1500 "
                                                              "(eager); absent = the runtime's"),
}
#: knobs a known part (device: NAME) does not take: it brings its own memory, compute,
#: efficiencies, link and scale-up domain, and keeps its runtime (workload.runtime, else its
#: default_runtime)
DEVICE_OWNED_KNOBS = ("process_node", "peak_tflops", "memory", "memory_stacks", "stack_height", "sram_mb",
                      "mem_efficiency", "compute_efficiency", "link_latency_us", "link_class", "scale_up_domain",
                      "scale_out_bw_gb_s", "runtime", "kernel_launch_us", "step_overhead_us", "spec_overhead_us")
#: the default scale-up domain and scale-out network of a synthesised chip
DEFAULT_SCALE_UP_DOMAIN = CHIP_KNOBS["scale_up_domain"].default
DEFAULT_SCALE_OUT_GB_S = CHIP_KNOBS["scale_out_bw_gb_s"].default
DRAFT_CHIP_KNOBS = {"enabled": KnobDef("bool", default=False, desc="a colocated draft chip holds the draft"),
                    **{k: v for k, v in CHIP_KNOBS.items() if k not in ("spec_overhead_us", "pp")},
                    "chips": KnobDef("int", 1, 1024, 1, desc="draft chips, in tensor parallel"),
                    "memory": KnobDef("cat", default="lpddr5x", desc="memory type of the draft chip"),
                    "memory_stacks": KnobDef("int", 1, 64, 2, desc="stacks or devices"),
                    "link_bw_gb_s": KnobDef("float", 0.0, 1e5, 128.0, desc="link between target and draft chip")}
WORKLOAD_KNOBS = {
    "batch": KnobDef("int", 1, 1e6, 1),
    "prompt_tokens": KnobDef("int", 0, 1e7, 2048),
    "output_tokens": KnobDef("int", 1, 1e7, 256),
}
K_KNOB = KnobDef("int", 1, K_LIMIT, None)
#: workload.tree_nodes given as a list or {low, high}: searched per design (0 in a list = a chain)
TREE_NODES_KNOB = KnobDef("int", 0, TREE_NODES_MAX, None, desc="nodes of the best draft tree (depth <= k); 0 = a "
                          "chain; published = each tree method's published tree [default: each tree method's tree "
                          "chosen per design]")

#: workload.ep given as a list: expert-parallel ranks searched per design (each must divide the experts; a
#: row whose chip count its value does not divide is infeasible: dse.evaluation.designs.invalid_combinations)
EP_KNOB = KnobDef("int", 1, 1e5, 1, desc="expert-parallel ranks of an MoE target (1 = tensor parallel)")
WORKLOAD_KEYS = {"target", "draft", "dtype", "kv_dtype", "batch", "prompt_tokens", "output_tokens", "temperature",
                 "acceptance", "k", "runtime", "overlap", "tree_nodes", "k_max", "continuous", "ep", "rank_profile",
                 "task", "sla", "serving", "max_batched_tokens", "dp", "arrivals", "tree"}
TOP_KEYS = {"name", "description", "workload", "space", "objectives", "constraints", "search", "grid", "output",
            "storage", "technology", "schema_version"}
SEARCH_DEFAULTS = {"sampler": "auto", "n_trials": 2000, "batch_size": 64, "seed": 0, "presearch_s": 10.0}


@dataclass(frozen=True)
class Knob:
    """One searched or fixed knob. ``name`` is its column stem (params_<name>)."""

    name: str
    section: str            # target_chip | draft_chip | workload | k
    key: str                # the key inside the section
    kind: str               # int | float | cat | bool
    fixed: Any = None       # set when not searched
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    #: acts on some designs only (dse.study.space): a knob the draft decides (k, tree_nodes, the
    #: draft chip's enabled, draft_exit_layer) when the draft itself is a knob
    conditional: bool = False

    @property
    def searched(self) -> bool:
        return self.fixed is None


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str          # minimize | maximize


@dataclass(frozen=True)
class Constraint:
    metric: str
    max: float | None = None
    min: float | None = None


class DraftChoices:
    """The study's drafter(s): one, or the choices of the knob `draft` (an early-exit range is
    the choice 'early-exit' with the knob `draft_exit_layer`). Each row's draft gets its own
    Workload (``workload``): its acceptance from the study (the same for every draft) or from the
    published table or the acceptance model (dse.acceptance.fit, for the study's task and
    temperature), and, when the study fixes neither k nor a tree size (``default_trees`` True), the
    fastest of a chain, smaller trees and the method's published tree per design with k = auto
    (DrafterSpec.tree_choices, dse.model.tree_choice); with ``default_trees`` 'published'
    (workload.tree_nodes: published) the published tree (dse.workload.spec.DEFAULT_SHAPES) with k =
    auto up to its depth. Memoised per (label, layer)."""

    def __init__(self, *, base: Workload, choices: tuple, acceptance_given: bool, default_trees: bool | str,
                 exit_range: tuple[int, int] | None, db, rank_profile=None):
        self.base, self.choices, self.acceptance_given = base, choices, acceptance_given
        self.default_trees, self.exit_range, self.db = default_trees, exit_range, db
        self.rank_profile = rank_profile     # workload.rank_profile; None: each draft kind's own (rank_profiles.yaml)
        self._memo: dict[tuple, Workload] = {}

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self.choices)

    def kind(self, label: str) -> str:
        """The drafter kind of a choice ('early-exit' for the range)."""
        d = dict(self.choices)[label]
        return "early-exit" if d is None else d.kind

    def drafter(self, label: str, exit_layer: int = 0) -> DrafterSpec:
        d = dict(self.choices)[label]
        if d is None:
            return DrafterSpec(kind="early-exit", label=f"early-exit:{int(exit_layer)}", exit_layer=int(exit_layer))
        return d

    def workload(self, label: str, exit_layer: int = 0) -> Workload:
        key = (label, int(exit_layer) if dict(self.choices)[label] is None else 0)
        if key not in self._memo:
            from ..acceptance.resolve import resolved_workload, with_chain_acceptance
            d = self.drafter(*key)
            from ..catalog.rank_profiles import load_rank_profiles
            profile = self.rank_profile or load_rank_profiles(self.db.root).for_drafter(d.kind)
            w = dataclasses.replace(self.base, drafter=d, k_max=min(self.base.k_max, d.k_cap)
                                    if d.k_cap else self.base.k_max,
                                    rank_profile=None if profile.geometric else profile)
            tree = self.base.tree
            if tree is not None and d.kind != "none":       # the framework's tree (or chain): its size and depth
                w = dataclasses.replace(w, tree_nodes=tree.nodes, k_max=max(w.k_max, tree.depth))
            else:
                w = dataclasses.replace(w, tree=None)
            shape = d.default_shape() if self.default_trees and d.kind != "none" and tree is None else None
            if shape is not None:       # the acceptance of the published tree (the table's rows measured on it)
                w = dataclasses.replace(w, tree_nodes=shape.nodes, k_max=shape.depth,
                                        tree=shape.tree if self.default_trees == "published" else None)
            if d.kind == "none":
                w = dataclasses.replace(w, acceptance_source="none")
            elif not self.acceptance_given:
                w = resolved_workload(w, self.db)[0]
            if shape is not None and self.default_trees != "published":
                # the tree (and k, up to the study's k_max) re-chosen per design (dse.model.tree_choice)
                w = dataclasses.replace(w, k_max=min(self.base.k_max, d.k_cap) if d.k_cap
                                        else self.base.k_max, tree_choices=d.tree_choices())
                if not self.acceptance_given:       # the chain candidate's own acceptance (EAGLE-3's chain term)
                    w = with_chain_acceptance(w, self.db)[0]
            self._memo[key] = w
        return self._memo[key]


@dataclass(frozen=True)
class StudySpec:
    """A validated study file."""

    name: str
    description: str
    path: str
    workload: Workload
    runtime: str | None          # workload.runtime; None: known parts keep their default_runtime, synthesised graphs
    knobs: tuple[Knob, ...]
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...]
    sampler: str
    n_trials: int
    batch_size: int
    seed: int
    grid_points: int
    output: str
    storage: str | None
    technology: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    tech: Any = None        # the resolved TechConstants (database constants + overrides)
    drafts: Any = None      # DraftChoices: the Workload of each row's draft
    #: sampler auto: the numpy pre-search stops after this many seconds (dse.search.presearch)
    presearch_s: float = SEARCH_DEFAULTS["presearch_s"]

    # the workload's fields, read through (the study holds one Workload, not copies)
    target = property(lambda self: self.workload.target)
    drafter = property(lambda self: self.workload.drafter)
    acceptance = property(lambda self: self.workload.acceptance)
    dtype = property(lambda self: self.workload.dtype)
    kv_dtype = property(lambda self: self.workload.kv_dtype)
    temperature = property(lambda self: self.workload.temperature)
    overlap = property(lambda self: self.workload.overlap)
    tree_nodes = property(lambda self: self.workload.tree_nodes)
    k_max = property(lambda self: self.workload.k_max)
    continuous = property(lambda self: self.workload.continuous)
    ep = property(lambda self: self.workload.ep)

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    @property
    def searched(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if k.searched)

    @property
    def has_draft_chip(self) -> bool:
        en = self.knob("draft_chip_enabled")
        return en is not None and (en.searched or en.fixed is True)

    def resolved(self) -> dict:
        """The study as plain data, with defaults filled in (stored in result metadata and in a
        shared study's attributes): its storage URL without a password."""
        def knob(k: Knob):
            if k.fixed is not None:
                return k.fixed
            if k.choices:
                return list(k.choices)
            out = {"low": k.low, "high": k.high}
            if k.log:
                out["log"] = True
            if k.step is not None:
                out["step"] = k.step
            return out
        acc = self.acceptance
        acc_d = ({"alpha": acc.alpha} if acc.kind == "alpha" else
                 {"per_position": list(acc.per_position)} if acc.kind == "per_position" else
                 {"rank": [list(r) for r in acc.rank]} if acc.kind == "rank" else {"tau": acc.tau})
        if self.drafts is not None and not self.drafts.acceptance_given:
            acc_d = None        # from the table or the acceptance model, per draft
        return {
            "name": self.name, "description": self.description, "file": self.path,
            "workload": {"target": self.target.name, "draft": self.drafter.label, "dtype": self.dtype,
                         "kv_dtype": self.kv_dtype, "temperature": self.temperature, "acceptance": acc_d,
                         "task": self.workload.task.plain(),
                         "overlap": self.overlap, "runtime": self.runtime,
                         # None: each tree method's tree re-chosen per design; 'published': its
                         # published tree (DraftChoices.default_trees)
                         "tree_nodes": self.drafts.default_trees if self.drafts is not None and
                         self.drafts.default_trees == "published" else None if self.drafts is not None
                         and self.drafts.default_trees else None if self.drafts is not None
                         and self.drafts.base.tree is not None else self.tree_nodes,
                         "k_max": self.k_max, "continuous": self.continuous,
                         **({"ep": self.ep} if self.ep != 1 else {}),
                         **({"tree": self.drafts.base.tree.label} if self.drafts is not None
                            and self.drafts.base.tree is not None else {}),
                         **({"dp": self.workload.dp} if self.workload.dp != 1 else {}),
                         **({"arrivals": self.workload.arrivals} if self.workload.arrivals != "closed" else {}),
                         # the serving search's settings, where they differ from none (a study without
                         # them keeps its stored identity and fingerprint)
                         **({"sla": {"ttft_ms": round(self.workload.sla.ttft_s * 1e3, 9),
                                     "tpot_ms": round(self.workload.sla.tpot_s * 1e3, 9)},
                             "serving": self.workload.serving} if self.workload.sla is not None else {}),
                         **({"max_batched_tokens": self.workload.max_batched_tokens}
                            if self.workload.max_batched_tokens != DEFAULT_BUDGET_TOKENS else {})},
            "knobs": {k.name: knob(k) for k in self.knobs},
            "objectives": [{"metric": o.metric, "direction": o.direction} for o in self.objectives],
            "constraints": [{k: v for k, v in vars(c).items() if v is not None} for c in self.constraints],
            "search": {"sampler": self.sampler, "n_trials": self.n_trials, "batch_size": self.batch_size,
                       "seed": self.seed, "presearch_s": self.presearch_s},
            "grid": {"points": self.grid_points}, "output": self.output,
            "storage": None if self.storage is None else redact_url(self.storage),
            "technology": self.technology,
        }
