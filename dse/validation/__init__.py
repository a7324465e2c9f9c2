"""Validation against public measurements and the fit behind the defaults (`dse validate`): the measured
rows as cases, the fits and the report (:mod:`.calibration`).
"""
