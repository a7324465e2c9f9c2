"""The physics: numpy arrays of designs in, arrays out (MODEL.md). Imports only numpy and dse.specs."""

from .arrays import DesignBatch, HardwareArrays
from .evaluate import METRIC_COLUMNS, Metrics, evaluate

__all__ = ["DesignBatch", "HardwareArrays", "METRIC_COLUMNS", "Metrics", "evaluate"]
