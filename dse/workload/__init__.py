"""The workload: what is served and how it is drafted (drafter, acceptance, k, lengths, batch), parsed and
cross-checked once for `dse eval` and studies (:mod:`.spec`).
"""
