"""Designs -> model -> metric columns: a study's knob values become arrays of designs, the model evaluates
them, and the results become named columns, constraints and objectives (:mod:`.designs`).

The one evaluation behind run, sweep, report and validation; it never loads Optuna.
"""
