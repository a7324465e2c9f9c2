"""Synthesising a hypothetical chip from knobs (MODEL.md section 5).

Pure numpy, vectorised over designs: every function takes 1-D arrays (one element per design,
or broadcastable scalars) and the technology constants (``dse.techdb.TechConstants`` and its
``memory_table()`` / ``node_table()``), and returns arrays. No per-design Python branches; the
one Python ``if`` is on a global constant (the yield model). Every constant comes from
``hardware_db/technology/*.yaml`` (see ``dse.techdb``); the only literals here are pi, 8 bits
per byte and the display->SI factors of the knobs (TFLOP/s 1e12, MB 1e6, GB/s 1e9, as in
``dse/units.py``).

Knob semantics (``synthesize_chip``):
- ``memory_stacks`` counts HBM stacks for ``hbm`` types and devices (GDDR x32 device, LPDDR x64
  package) for ``device`` types; ``stack_height`` applies to HBM only and is ignored otherwise.
- memory type ``sram``: the chip has no external memory. Capacity is the on-die SRAM (``sram_mb``)
  and bandwidth is ``sram_mb`` x the type's bandwidth per MB; ``memory_stacks`` and
  ``stack_height`` are ignored (no PHY, no shoreline, no memory price: the SRAM is paid for as
  silicon area).
- the same function serves a draft chip (for example an SRAM-only draft accelerator): there is
  no separate ``synthesize_draft_chip``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from ..units import FACTOR

if TYPE_CHECKING:   # type names only: importing dse.catalog.technology would pull in yaml
    from dse.catalog.technology import MemoryTable, NodeTable, TechConstants

_BITS_PER_BYTE = 8.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipArrays:
    """A batch of synthesised chips: one element per design, SI units.

    float64 unless stated: ``num_dies`` and ``memory_units`` are int64 counts, ``shoreline_ok``
    and ``stack_height_ok`` are bool feasibility flags (a design that fails them still gets its
    numbers; the caller turns the flags into constraints).
    """

    mem_bw_bytes_s: np.ndarray        # peak memory bandwidth (HBM/GDDR/LPDDR, or SRAM)
    capacity_bytes: np.ndarray        # memory capacity (SRAM capacity for type sram)
    peak_bf16_flop_s: np.ndarray      # dense BF16
    peak_fp8_flop_s: np.ndarray       # dense FP8 = fp8_per_bf16 x BF16
    sram_bytes: np.ndarray            # on-die SRAM
    link_bw_bytes_s: np.ndarray       # scale-up link, both directions added
    memory_units: np.ndarray          # int64: stacks / devices actually attached (0 for sram)
    stack_height_ok: np.ndarray       # bool: the HBM height is one the type allows
    compute_area_mm2: np.ndarray
    sram_area_mm2: np.ndarray
    phy_area_mm2: np.ndarray
    die_area_mm2: np.ndarray          # total silicon over all dies, incl. fixed and die-to-die
    num_dies: np.ndarray              # int64: dies needed to stay within the reticle
    area_per_die_mm2: np.ndarray
    shoreline_need_mm: np.ndarray
    shoreline_avail_mm: np.ndarray
    shoreline_ok: np.ndarray          # bool: the stacks / devices fit the dies' memory edges
    dies_per_wafer: np.ndarray        # gross dies per wafer (floored)
    yield_fraction: np.ndarray        # per die
    silicon_cost_usd: np.ndarray
    memory_cost_usd: np.ndarray
    packaging_cost_usd: np.ndarray
    cost_usd: np.ndarray              # silicon + memory + packaging (manufacturing, not price)
    compute_power_w: np.ndarray
    memory_power_w: np.ndarray
    static_power_w: np.ndarray
    link_power_w: np.ndarray
    power_w: np.ndarray               # design (TDP-like) power, see ``power_w``

    @property
    def n(self) -> int:
        return int(self.cost_usd.shape[0])

    def take(self, idx) -> ChipArrays:
        """Rows ``idx`` (an int, slice, index array or mask) as a new ChipArrays."""
        idx = np.atleast_1d(np.arange(self.n)[idx])
        return ChipArrays(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


# -- memory -------------------------------------------------------------------------------

def memory_units(mem: MemoryTable, memory_idx, memory_stacks) -> np.ndarray:
    """Stacks or devices attached: ``memory_stacks``, or 0 for memory type ``sram``.

    Args:
        mem: memory lookup table. memory_idx: (n,) int memory codes.
        memory_stacks: (n,) stacks (HBM) or devices / packages (GDDR, LPDDR).
    Returns:
        (n,) int64.
    """
    return np.where(mem.is_sram[memory_idx], 0, memory_stacks).astype(np.int64)


def memory_bandwidth_bytes_s(mem: MemoryTable, memory_idx, units, sram_bytes) -> np.ndarray:
    """Peak memory bandwidth, bytes/s (MODEL.md section 5: "from the memory table").

    BW = units x bw_per_unit (product rate per stack / device, hardware.md 1.1-1.2), or for
    memory type sram BW = sram_bytes x bw_per_byte (DERIVED from Groq's 80 TB/s over 230 MB).
    """
    return np.where(mem.is_sram[memory_idx],
                    sram_bytes * mem.sram_bw_bytes_s_per_byte[memory_idx],
                    units * mem.bw_bytes_s[memory_idx])


def memory_capacity_bytes(mem: MemoryTable, memory_idx, units, stack_height, sram_bytes
                          ) -> np.ndarray:
    """Memory capacity, bytes.

    HBM: units x stack_height x bytes_per_layer (e.g. HBM3E 24 Gb dies: 8-high = 24 GB/stack);
    GDDR / LPDDR: units x bytes_per_device (stack_height ignored); SRAM: sram_bytes.
    """
    per_unit = np.where(mem.is_hbm[memory_idx],
                        stack_height * mem.bytes_per_layer[memory_idx],
                        mem.bytes_per_device[memory_idx])
    return np.where(mem.is_sram[memory_idx], sram_bytes, units * per_unit)


def stack_height_ok(mem: MemoryTable, memory_idx, stack_height) -> np.ndarray:
    """True where the HBM stack height is one the memory type lists (always True otherwise)."""
    h = np.asarray(stack_height)
    in_range = (h >= 0) & (h < mem.height_allowed.shape[1]) & (h == np.round(h))
    hi = np.clip(np.round(h), 0, mem.height_allowed.shape[1] - 1).astype(np.int64)
    allowed = mem.height_allowed[memory_idx, hi]
    return np.where(mem.is_hbm[memory_idx], in_range & allowed, True)


def memory_cost_usd(mem: MemoryTable, memory_idx, capacity_bytes) -> np.ndarray:
    """External memory cost = $/byte x capacity (hardware.md 1.3, all ESTIMATES).

    Zero for memory type sram: on-die SRAM is paid for through its silicon area.
    """
    return mem.usd_per_byte[memory_idx] * capacity_bytes


# -- area ---------------------------------------------------------------------------------

def compute_area_mm2(nodes: NodeTable, node_idx, peak_bf16_flop_s) -> np.ndarray:
    """Compute area = dense BF16 FLOP/s / (FLOP/s per mm^2 at the node) (hardware.md 2.3)."""
    return peak_bf16_flop_s / nodes.flop_s_per_mm2[node_idx]


def sram_area_mm2(nodes: NodeTable, node_idx, sram_bytes) -> np.ndarray:
    """SRAM area = bytes / usable macro density at the node (hardware.md 2.1)."""
    return sram_bytes / nodes.sram_bytes_per_mm2[node_idx]


def phy_area_mm2(mem: MemoryTable, memory_idx, units) -> np.ndarray:
    """Memory PHY + controller area = units x area per stack / device (hardware.md 2.2 ESTIMATE)."""
    return units * mem.phy_area_mm2[memory_idx]


def split_dies(base_area_mm2, reticle_limit_mm2: float, d2d_area_mm2_per_die: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Dies needed and total silicon when one die would exceed the reticle (MODEL.md section 5).

    base = compute + SRAM + PHY + fixed area. If base <= reticle: 1 die of area base. Otherwise
    num_dies = ceil(base / (reticle - d2d)) and every die also carries a die-to-die interface,
    so total = base + num_dies x d2d and each die (total / num_dies) stays within the reticle.

    Returns:
        (num_dies int64 (n,), total silicon mm^2 (n,)).
    """
    base = np.asarray(base_area_mm2, dtype=np.float64)
    multi = np.ceil(base / (reticle_limit_mm2 - d2d_area_mm2_per_die))
    num = np.where(base <= reticle_limit_mm2, 1.0, np.maximum(multi, 2.0))
    total = base + np.where(num > 1, num * d2d_area_mm2_per_die, 0.0)
    return num.astype(np.int64), total


def shoreline_mm(mem: MemoryTable, memory_idx, units, area_per_die_mm2, num_dies,
                 aspect_ratio: float, memory_edges_per_die: int) -> tuple[np.ndarray, np.ndarray]:
    """Die edge the memory needs and the edge available (MODEL.md section 5 "shoreline").

    need = units x shoreline per stack / device. Each die is taken as a rectangle of the given
    long/short aspect ratio (the reticle's 33:26), with memory on ``memory_edges_per_die`` long
    edges: avail = num_dies x edges x sqrt(area_per_die x aspect). Multi-die chips join their
    dies along the short edges (B200-style), so every die keeps its long edges.

    Returns:
        (need_mm, avail_mm), each (n,).
    """
    need = units * mem.shoreline_mm[memory_idx]
    avail = num_dies * memory_edges_per_die * np.sqrt(area_per_die_mm2 * aspect_ratio)
    return need, avail


# -- yield and cost -----------------------------------------------------------------------

def dies_per_wafer(die_area_mm2, wafer_diameter_mm: float) -> np.ndarray:
    """Gross dies per wafer with the standard edge-loss term, floored.

    DPW = pi (d/2)^2 / A - pi d / sqrt(2 A)   (d wafer diameter, A die area, both in mm).
    """
    a = np.asarray(die_area_mm2, dtype=np.float64)
    d = wafer_diameter_mm
    gross = np.pi * (d / 2.0) ** 2 / a - np.pi * d / np.sqrt(2.0 * a)
    return np.maximum(np.floor(gross), 0.0)


def yield_fraction(die_area_mm2, defects_per_mm2, model: str) -> np.ndarray:
    """Fraction of good dies (MODEL.md section 5), with x = D0 x A:

    Poisson: Y = exp(-x).  Murphy: Y = ((1 - exp(-x)) / x)^2 (-> 1 as x -> 0).
    ``model`` is the global ``yield_model`` constant (nodes.yaml).
    """
    x = np.asarray(defects_per_mm2 * np.asarray(die_area_mm2, dtype=np.float64))
    if model == "poisson":
        return np.exp(-x)
    if model == "murphy":
        safe = np.where(x > 0, x, 1.0)
        return np.where(x > 0, (-np.expm1(-safe) / safe) ** 2, 1.0)
    raise ValueError(f"yield model {model!r}: expected 'murphy' or 'poisson'")


def silicon_cost_usd(wafer_cost_usd, dpw, yield_frac, num_dies) -> np.ndarray:
    """Silicon = num_dies x wafer cost / (dies per wafer x yield) (cost per good die)."""
    return num_dies * wafer_cost_usd / (dpw * yield_frac)


def packaging_cost_usd(tech: TechConstants, is_hbm, units, num_dies, die_area_mm2) -> np.ndarray:
    """Packaging and test, USD (MODEL.md section 5 "packaging"; every constant an ESTIMATE):

    cost = base (substrate, assembly)
         + interposer_base        if the chip has HBM or several dies (CoWoS-style)
         + per_hbm_stack x HBM stacks + per_extra_die x (num_dies - 1)
         + test_per_mm2 x silicon area
    The H100-class split follows stratrix's ~$750 packaging and ~$920 test (hardware.md 1.3).
    """
    stacks = np.where(is_hbm, units, 0)
    interposer = (stacks > 0) | (num_dies > 1)
    return (tech.packaging_base_usd + np.where(interposer, tech.interposer_base_usd, 0.0)
            + tech.packaging_usd_per_hbm_stack * stacks
            + tech.packaging_usd_per_extra_die * (num_dies - 1)
            + tech.test_usd_per_mm2 * die_area_mm2)


# -- power --------------------------------------------------------------------------------

#: bytes a 16-bit matrix-vector product takes in per FLOP (a 2-byte weight feeds one multiply-add, 2
#: FLOPs): the lowest arithmetic intensity any step runs at, so no step draws memory faster than
#: its dense BF16 FLOP/s x this
_GEMV16_BYTES_PER_FLOP = 2.0 / 2.0


def usable_bandwidth_bytes_s(mem_bw_bytes_s, peak_bf16_flop_s):
    """The memory bandwidth a chip can use: min(BW, peak BF16 FLOP/s x 1 B/FLOP). A byte read is only
    used if a multiply-add consumes it, and a 16-bit matrix-vector product (decode at batch 1, the lowest
    arithmetic intensity) consumes one byte per FLOP; any other step takes fewer bytes per FLOP.
    Binds for SRAM-only chips, whose aggregate bank bandwidth can exceed what the compute takes in
    (a 500 MB SRAM chip of 100 TFLOP/s: 175 TB/s aggregate, 100 TB/s usable); never for DRAM parts."""
    return np.minimum(mem_bw_bytes_s, np.asarray(peak_bf16_flop_s) * _GEMV16_BYTES_PER_FLOP)


def power_w(tech: TechConstants, *, peak_bf16_flop_s, j_per_flop, mem_bw_bytes_s, j_per_bit,
            die_area_mm2, static_w_per_mm2, link_bw_bytes_s
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Provisioned power (a TDP-like figure, for power caps), W (MODEL.md section 5):

    P = u_tdp x FLOP/s x J/FLOP          (dense BF16 GEMM at the utilisation a TDP is sized for)
      + BW_usable x 8 x J/bit            (memory at the bandwidth it can use, usable_bandwidth_bytes_s)
      + static W/mm^2 x silicon area     (leakage and always-on logic)
      + link BW x 8 x link J/bit         (scale-up SerDes at full rate)

    It is the sustained package power with compute at ``tdp_compute_utilization`` of peak and
    memory and links saturated at once: a sizing figure comparable to a vendor TDP, not a
    measured draw. Energy per token is computed from each step's traffic instead (model/latency.py)
    and is capped at it: no chip draws more than its provisioned power. Memory is charged at the
    bandwidth the compute can take in, not an SRAM's full aggregate: a 500 MB SRAM-only chip of 100
    TFLOP/s at n5 was 762 W (175 TB/s x 8 x 0.5 pJ/bit), now 142 W; Cerebras WSE-3 111 kW, now 21.8
    kW against its 23 kW (with the SRAM's 0.1 pJ/bit and the wafer's 15.6 PFLOP/s dense, hardware_db).

    Returns:
        (total, compute, memory, static, link), each (n,).
    """
    compute = tech.tdp_compute_utilization * peak_bf16_flop_s * j_per_flop
    memory = usable_bandwidth_bytes_s(mem_bw_bytes_s, peak_bf16_flop_s) * _BITS_PER_BYTE * j_per_bit
    static = static_w_per_mm2 * die_area_mm2
    link = link_power_w(tech, link_bw_bytes_s)
    return compute + memory + static + link, compute, memory, static, link


def link_power_w(tech: TechConstants, link_bw_bytes_s) -> np.ndarray:
    """Scale-up SerDes at full rate: link BW x 8 x link J/bit (the last term of power_w)."""
    return link_bw_bytes_s * _BITS_PER_BYTE * tech.link_j_per_bit


def energy_constants(tech: TechConstants, *, j_per_bit, is_sram, j_per_flop, static_w, power_w
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chip's energy constants for energy per token (MODEL.md section 5; fitted terms in
    docs/calibration.md section 5d): (J per byte from its memory, J per BF16 FLOP of an inference
    step, W while busy), elementwise:

    J/byte = 8 x (memory pJ/bit + onchip_pj_per_dram_bit for off-chip DRAM, 0 for SRAM-only)
    J/FLOP = node pJ/FLOP x (1 + operand_delivery_factor)
    idle W = leakage + active_idle_fraction x (provisioned power - leakage)

    The DRAM term is the logic die's path of a streamed byte (PHY, network-on-chip, L2, shared memory,
    registers), the FLOP term operand delivery at decode's shapes, the idle term what a clocked chip
    burns between and under its kernels (clock tree, control, PHYs); each is fitted on H100 rows of the
    ML.ENERGY leaderboard. An H100 (HBM3 5.5 pJ/bit, n4 0.5 pJ/FLOP, 57 W leakage of 587 W) gets
    8 x (5.5 + 12.3) = 142.4 pJ/byte, 0.5 x 2.4 = 1.2 pJ/FLOP and 57 + 0.157 x 530 = 140 W."""
    mem = np.asarray(j_per_bit, dtype=np.float64) + np.where(is_sram, 0.0, tech.onchip_j_per_dram_bit)
    idle = static_w + tech.active_idle_fraction * (np.asarray(power_w, dtype=np.float64) - static_w)
    return mem * _BITS_PER_BYTE, np.asarray(j_per_flop, dtype=np.float64) * (1.0 + tech.operand_delivery_factor), idle


# -- the whole chip -----------------------------------------------------------------------

def synthesize_chip(tech: TechConstants, *, node_idx, peak_tflops, memory_idx, memory_stacks,
                    stack_height, sram_mb, link_bw_gb_s) -> ChipArrays:
    """Synthesise chips from knobs (MODEL.md section 5), vectorised over designs.

    Args:
        tech: technology constants (``dse.techdb.load_technology``).
        node_idx: (n,) int codes into ``tech.node_names``.
        peak_tflops: (n,) dense BF16 TFLOP/s per chip.
        memory_idx: (n,) int codes into ``tech.memory_names``.
        memory_stacks: (n,) HBM stacks, or GDDR / LPDDR devices; ignored for ``sram``.
        stack_height: (n,) HBM stack height (dies per stack); ignored for non-HBM types.
        sram_mb: (n,) on-die SRAM, MB (for type ``sram`` it is also the memory).
        link_bw_gb_s: (n,) scale-up link bandwidth, GB/s, both directions added.
        Scalars broadcast against the arrays.

    Returns:
        ChipArrays of length n.

    Raises:
        ValueError: a negative or non-finite knob, or a non-integer code.
    """
    mem, nodes = tech.memory_table(), tech.node_table()
    node_idx, peak_tflops, memory_idx, memory_stacks, stack_height, sram_mb, link_bw_gb_s = (
        np.atleast_1d(a) for a in np.broadcast_arrays(
            node_idx, peak_tflops, memory_idx, memory_stacks, stack_height, sram_mb,
            link_bw_gb_s))
    _check_knobs(node_idx=node_idx, memory_idx=memory_idx, peak_tflops=peak_tflops,
                 memory_stacks=memory_stacks, stack_height=stack_height, sram_mb=sram_mb,
                 link_bw_gb_s=link_bw_gb_s)
    node_idx = node_idx.astype(np.int64)
    memory_idx = memory_idx.astype(np.int64)

    # knobs in SI through the units table
    peak_bf16 = peak_tflops.astype(np.float64) * FACTOR["tflops"]
    sram_bytes = sram_mb.astype(np.float64) * FACTOR["mb"]
    link_bw = link_bw_gb_s.astype(np.float64) * FACTOR["gb_s"]
    height = stack_height.astype(np.float64)

    units = memory_units(mem, memory_idx, memory_stacks)
    bw = memory_bandwidth_bytes_s(mem, memory_idx, units, sram_bytes)
    cap = memory_capacity_bytes(mem, memory_idx, units, height, sram_bytes)
    h_ok = stack_height_ok(mem, memory_idx, height)

    a_compute = compute_area_mm2(nodes, node_idx, peak_bf16)
    a_sram = sram_area_mm2(nodes, node_idx, sram_bytes)
    a_phy = phy_area_mm2(mem, memory_idx, units)
    base = a_compute + a_sram + a_phy + tech.fixed_die_area_mm2
    num_dies, total = split_dies(base, tech.reticle_limit_mm2, tech.d2d_area_mm2_per_die)
    per_die = total / num_dies
    need, avail = shoreline_mm(mem, memory_idx, units, per_die, num_dies,
                               tech.die_aspect_ratio, tech.memory_edges_per_die)

    dpw = dies_per_wafer(per_die, tech.wafer_diameter_mm)
    y = yield_fraction(per_die, nodes.defects_per_mm2[node_idx], tech.yield_model)
    c_si = silicon_cost_usd(nodes.wafer_cost_usd[node_idx], dpw, y, num_dies)
    c_mem = memory_cost_usd(mem, memory_idx, cap)
    c_pkg = packaging_cost_usd(tech, mem.is_hbm[memory_idx], units, num_dies, total)

    p_total, p_compute, p_mem, p_static, p_link = power_w(
        tech, peak_bf16_flop_s=peak_bf16, j_per_flop=nodes.j_per_flop[node_idx],
        mem_bw_bytes_s=bw, j_per_bit=mem.j_per_bit[memory_idx], die_area_mm2=total,
        static_w_per_mm2=nodes.static_w_per_mm2[node_idx], link_bw_bytes_s=link_bw)

    f64 = np.float64
    return ChipArrays(
        mem_bw_bytes_s=bw.astype(f64), capacity_bytes=cap.astype(f64),
        peak_bf16_flop_s=peak_bf16, peak_fp8_flop_s=peak_bf16 * tech.fp8_per_bf16,
        sram_bytes=sram_bytes, link_bw_bytes_s=link_bw, memory_units=units,
        stack_height_ok=np.asarray(h_ok, dtype=bool),
        compute_area_mm2=a_compute.astype(f64), sram_area_mm2=a_sram.astype(f64),
        phy_area_mm2=a_phy.astype(f64), die_area_mm2=total, num_dies=num_dies,
        area_per_die_mm2=per_die, shoreline_need_mm=need.astype(f64), shoreline_avail_mm=avail,
        shoreline_ok=need <= avail, dies_per_wafer=dpw, yield_fraction=y,
        silicon_cost_usd=c_si, memory_cost_usd=c_mem.astype(f64),
        packaging_cost_usd=c_pkg.astype(f64), cost_usd=(c_si + c_mem + c_pkg).astype(f64),
        compute_power_w=p_compute, memory_power_w=p_mem.astype(f64), static_power_w=p_static,
        link_power_w=p_link, power_w=p_total.astype(f64),
    )


def _check_knobs(*, node_idx, memory_idx, **values) -> None:
    counts = (("node_idx", node_idx), ("memory_idx", memory_idx),
              ("memory_stacks", values["memory_stacks"]))
    for name, idx in counts:
        idx = np.asarray(idx, dtype=np.float64)
        if not np.all(idx == np.round(idx)):
            raise ValueError(f"{name}: expected integers, got {idx[idx != np.round(idx)][:5]!r}")
    for name, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        bad = ~np.isfinite(v) | (v < 0)
        if np.any(bad):
            raise ValueError(f"{name}: expected finite values >= 0, got {v[bad][:5]!r}")


# -- known parts: the same cost estimate from their own silicon (MODEL.md sections 5-6) ------

#: HBM stacks of known parts whose capacity and bandwidth do not fix the count
#: (hardware_db/reference/accelerators.csv, column hbm_stacks)
KNOWN_HBM_STACKS = {"a100-80gb": 5, "h100-sxm": 5, "h100-pcie": 5, "h200": 6, "b200": 8, "b300": 8, "gb200": 8,
                    "mi250x": 8, "mi300x": 8, "mi325x": 8, "mi355x": 8, "gaudi-2": 6, "gaudi-3": 8}


def node_code(tech: TechConstants, process_node: str) -> int:
    """A vendor's process name -> node code, or -1 when the table has no such node.

    'TSMC 4N' / '4NP' -> n4; 'N5' / '5nm' -> n5; 'N6' / '7nm' / 'N7' -> n7 (N6 is an N7-family
    node); 'N3P' / '3nm' -> n3; the first node named counts ('N5 + N6' -> n5). Older nodes
    (8-14 nm) are outside the table: -1.
    """
    import re
    m = re.search(r"(?<![0-9])([2-7])\s*(?:nm|N|NP|P)?(?![0-9])|N([2-7])", str(process_node))
    if not m:
        return -1
    digit = int(m.group(1) or m.group(2))
    name = {2: "n2", 3: "n3", 4: "n4", 5: "n5", 6: "n7", 7: "n7"}[digit]
    return tech.node_names.index(name) if name in tech.node_names else -1


def memory_code(tech: TechConstants, memory_type: str) -> int:
    """A device's memory_type -> memory code, or -1 when the table has no such type."""
    name = str(memory_type).lower()
    return tech.memory_names.index(name) if name in tech.memory_names else -1


def known_part_cost_usd(tech: TechConstants, *, node_idx, memory_idx, units, capacity_bytes,
                        die_area_mm2) -> np.ndarray:
    """Manufacturing cost of a chip from its silicon area, node, memory and stacks, with the
    functions ``synthesize_chip`` uses (MODEL.md sections 5-6): silicon (split at the reticle,
    wafer cost / good dies) + memory ($/byte x capacity) + packaging. NaN where the node or the
    memory type is not in the technology tables. An ESTIMATE, like every synthesised cost.
    """
    mem, nodes = tech.memory_table(), tech.node_table()
    node_idx, memory_idx, units, capacity_bytes, die_area_mm2 = (
        np.atleast_1d(np.asarray(a, dtype=np.float64)) for a in np.broadcast_arrays(
            node_idx, memory_idx, units, capacity_bytes, die_area_mm2))
    ok = (node_idx >= 0) & (memory_idx >= 0) & (die_area_mm2 > 0)
    n_i, m_i = np.where(ok, node_idx, 0).astype(np.int64), np.where(ok, memory_idx, 0).astype(np.int64)
    area = np.where(ok, die_area_mm2, 1.0)
    num_dies, total = split_dies(area, tech.reticle_limit_mm2, tech.d2d_area_mm2_per_die)
    per_die = total / num_dies
    dpw = dies_per_wafer(per_die, tech.wafer_diameter_mm)
    y = yield_fraction(per_die, nodes.defects_per_mm2[n_i], tech.yield_model)
    c_si = silicon_cost_usd(nodes.wafer_cost_usd[n_i], dpw, y, num_dies)
    c_mem = memory_cost_usd(mem, m_i, capacity_bytes)
    c_pkg = packaging_cost_usd(tech, mem.is_hbm[m_i], np.where(mem.is_hbm[m_i], units, 0), num_dies, total)
    return np.where(ok, c_si + c_mem + c_pkg, np.nan)


def _known_part_shape(tech: TechConstants, dev) -> tuple[int, int, int, float, dict]:
    """(node code, memory code, memory units, silicon mm^2, how) of a database device, as
    ``synthesize_chip`` would see it (see ``known_part_estimate``); codes are -1 when the node or
    the memory type is not in the tables, and then units and area are 0."""
    node, mem_i = node_code(tech, dev.process_node), memory_code(tech, dev.memory_type)
    how = {"node": tech.node_names[node] if node >= 0 else None,
           "memory": tech.memory_names[mem_i] if mem_i >= 0 else None}
    if node < 0 or mem_i < 0:
        return node, mem_i, 0, 0.0, how
    mem, nodes = tech.memory_table(), tech.node_table()
    cap = dev.memory_bytes
    if mem.is_hbm[mem_i]:
        units = KNOWN_HBM_STACKS.get(dev.name) or int(np.ceil(cap / (8 * mem.bytes_per_layer[mem_i])))
    elif mem.is_sram[mem_i]:
        units = 0
    else:
        units = int(np.ceil(cap / mem.bytes_per_device[mem_i]))
    area = dev.die_area_mm2
    if not area:
        area = float(compute_area_mm2(nodes, node, dev.peak_bf16_flop_s) + sram_area_mm2(nodes, node, dev.sram_bytes)
                     + phy_area_mm2(mem, mem_i, units) + tech.fixed_die_area_mm2)
        how["die_area_mm2"] = "derived"
    how["units"] = units
    return node, mem_i, units, float(area), how


def known_part_estimate(tech: TechConstants, dev) -> tuple[float, dict]:
    """(cost_usd, how) for a database device (a ``DeviceSpec``): the known part priced like a
    synthesised one. Die area: the device's own, else compute + SRAM + PHY + fixed area from
    its BF16 rate and the node's densities (as ``synthesize_chip`` derives it). HBM stacks:
    ``KNOWN_HBM_STACKS``, else capacity / (3 GiB x 8) rounded up; GDDR/LPDDR devices:
    capacity / bytes per device. ``how`` says what was assumed; cost is NaN without a node or
    memory type in the tables (e.g. 8-14 nm parts, generic 'hbm')."""
    node, mem_i, units, area, how = _known_part_shape(tech, dev)
    if node < 0 or mem_i < 0:
        return float("nan"), how
    cost = known_part_cost_usd(tech, node_idx=node, memory_idx=mem_i, units=units, capacity_bytes=dev.memory_bytes,
                               die_area_mm2=area)
    return float(cost[0]), how


def known_part_model_power_w(tech: TechConstants, dev) -> float:
    """A database device's provisioned power from the energy model synthesised chips get (``power_w``:
    70% of the BF16 peak at the node's J/FLOP + peak bandwidth at the memory's J/bit + leakage per
    mm^2 of its silicon + its link at the link J/bit; MODEL.md section 5), W; NaN where its node or
    memory type is outside the technology tables."""
    node, mem_i, _, area, _ = _known_part_shape(tech, dev)
    if node < 0 or mem_i < 0:
        return float("nan")
    mem, nodes = tech.memory_table(), tech.node_table()
    return float(power_w(tech, peak_bf16_flop_s=dev.peak_bf16_flop_s, j_per_flop=nodes.j_per_flop[node],
                         mem_bw_bytes_s=dev.mem_bw_bytes_s, j_per_bit=mem.j_per_bit[mem_i], die_area_mm2=area,
                         static_w_per_mm2=nodes.static_w_per_mm2[node], link_bw_bytes_s=dev.link_bw_bytes_s)[0])


def known_part_power_w(tech: TechConstants, dev) -> tuple[float, str]:
    """(power_w, basis) for a database device: the energy model's estimate (``known_part_model_power_w``),
    so that fronts mixing known and synthesised chips compare like with like, basis "estimate",
    bounded by the vendor's TDP (``tdp_w``, with its source in the device file): P = min(estimate,
    TDP), basis "tdp" where the TDP binds (B200: 1,291 W estimated, 1,000 W TDP; MI300X 853 W, 750 W).
    Where the node or the memory type is outside the technology tables the model cannot run: the
    TDP, basis "tdp"; else NaN, basis "".
    """
    est = known_part_model_power_w(tech, dev)
    if dev.tdp_w and not est <= dev.tdp_w:          # the TDP binds, or stands in for a missing estimate
        return float(dev.tdp_w), "tdp"
    return est, "estimate" if est == est else ""


def known_part_power_limit_w(tech: TechConstants, dev) -> float:
    """The most a known part draws, W: its vendor TDP where the device file has one (the board
    power the part is built and shipped to sustain: nvidia-smi's default power limit of an SXM
    part), else its provisioned power (``known_part_power_w``). An H100 SXM may draw 700 W though
    the energy model provisions it 586.67 W: ML.ENERGY measured 610-690 W on one at batch
    64-256 (hardware_db/measurements/energy_measurements_public.csv)."""
    return float(dev.tdp_w) if dev.tdp_w else known_part_power_w(tech, dev)[0]


def known_part_energy(tech: TechConstants, dev) -> dict[str, float]:
    """Per-chip energy constants of a database device from the tables synthesised chips use (MODEL.md
    section 5, ``energy_constants``): ``mem_j_per_byte`` (its memory's pJ/bit, plus the on-chip path
    of a DRAM bit, x 8), ``j_per_flop`` (a BF16 FLOP of an inference step at its node), ``static_w``
    (its node's leakage per mm^2 x its silicon, as in ``power_w``), ``power_w`` (its provisioned power,
    ``known_part_power_w``: the estimate bounded by the TDP), ``idle_w`` (what it burns while busy
    whatever it computes, from ``power_w``), ``power_limit_w`` (the most it draws,
    ``known_part_power_limit_w``: the vendor TDP where known) and ``link_j_per_byte`` (the SerDes
    pJ/bit x 8). NaN for what the tables cannot give (a node or memory type outside them): energy per
    token is then undefined, not guessed."""
    node, mem_i, _, area, _ = _known_part_shape(tech, dev)
    nan = float("nan")
    if node < 0 or mem_i < 0 or area <= 0:
        return {"mem_j_per_byte": nan, "j_per_flop": nan, "static_w": nan, "power_w": nan, "idle_w": nan,
                "power_limit_w": nan, "link_j_per_byte": tech.link_j_per_bit * _BITS_PER_BYTE}
    mem, nodes = tech.memory_table(), tech.node_table()
    static = float(nodes.static_w_per_mm2[node]) * area
    provisioned = known_part_power_w(tech, dev)[0]
    j_byte, j_flop, idle = energy_constants(tech, j_per_bit=mem.j_per_bit[mem_i], is_sram=mem.is_sram[mem_i],
                                            j_per_flop=nodes.j_per_flop[node], static_w=static, power_w=provisioned)
    return {"mem_j_per_byte": float(j_byte), "j_per_flop": float(j_flop), "static_w": static, "power_w": provisioned,
            "idle_w": float(idle), "power_limit_w": known_part_power_limit_w(tech, dev),
            "link_j_per_byte": tech.link_j_per_bit * _BITS_PER_BYTE}
