"""Validation against public measurements and the fit behind the defaults (`dse validate`): the measured
rows as cases (:mod:`.measurements`), the fits (:mod:`.fits`), and predicted against measured with the report
(:mod:`.comparison`).
"""
