"""Acceptance from published data: the table's rows as the rate the model uses, the ridge logit model fitted
on them for pairs the table does not hold, and its leave-one-source-out error and band (:mod:`.fit`); a
workload's acceptance from them (:mod:`.resolve`; an MTP drafter from the table alone).

Reading the table itself stays in :mod:`dse.catalog.acceptance`.
"""
