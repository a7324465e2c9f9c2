"""Searching a study's space with Optuna: the study runner and its workers (:mod:`.runner`), the numpy
pre-search that seeds it (:mod:`.presearch`), the breeder of sampler ``auto`` (:mod:`.breeder`), fronts
thinned to a budget (:mod:`.thinning`) and the memoised genetic samplers (:mod:`.samplers`).
"""
