"""What an output token costs a deployment: its price spread over a stated life plus the energy
it draws at a stated electricity price and PUE (technology constants serving_life_years,
usd_per_kwh and pue, with their sources in hardware_db/technology/nodes.yaml).

usd_per_mtok = 1e6 x (price per chip / life / tokens/s per chip + J/token x PUE x USD/J): the chip
busy all its life at the operating point (a fleet sized for its load).
"""

from __future__ import annotations

import numpy as np


def usd_per_mtok(tech, price_usd_per_chip, tokens_per_s_per_chip, energy_j_per_token) -> np.ndarray:
    """USD per million output tokens at an operating point (module docstring); NaN where the price,
    throughput or energy is unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        capital = np.asarray(price_usd_per_chip, dtype=np.float64) / tech.serving_life_s \
            / np.asarray(tokens_per_s_per_chip, dtype=np.float64)
        energy = np.asarray(energy_j_per_token, dtype=np.float64) * tech.pue * tech.usd_per_j
        return 1e6 * (capital + energy)
