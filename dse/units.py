"""The only table of unit factors: display suffix -> SI factor (MODEL.md section 0).

1 GB = 1e9 bytes and 1 TB/s = 1e12 bytes/s (vendors' convention), except DRAM capacity:
vendors size HBM, GDDR and LPDDR in binary units ("80 GB" H100 = 80 GiB), so a device's
memory_capacity_gb and the memory table's per-stack/per-device capacity are read with
GIB (DeviceSpec.memory_bytes, techdb). Outputs (`_gb` columns) are always 1e9 bytes.
"""

#: bytes in a vendor's DRAM "GB" (a GiB)
GIB = 2.0 ** 30

FACTOR = {
    "": 1.0,
    "b": 1e9,          # billions (parameter counts, `params_b`)
    "gb": 1e9,
    "gib": GIB,
    "mb": 1e6,
    "tb_s": 1e12,
    "gb_s": 1e9,
    "tflops": 1e12,
    "tops": 1e12,
    "ms": 1e-3,
    "us": 1e-6,
    "s": 1.0,
    "w": 1.0,
    "usd": 1.0,
    "kusd": 1e3,
    "mm2": 1.0,        # areas stay in mm^2 (die sizes are quoted so)
    "cm2": 100.0,      # in mm^2
    "pj": 1e-12,
}


def to_si(value: float, unit: str) -> float:
    """Display value -> SI (e.g. 3.35 tb_s -> 3.35e12 bytes/s)."""
    return value * FACTOR[unit]


def from_si(value, unit: str):
    """SI -> display value; works on numpy arrays."""
    return value / FACTOR[unit]
