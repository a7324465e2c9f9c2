"""Searching a study's space with Optuna: running a study or its array tasks (:mod:`.runner`), the
batched ask/tell loop (:mod:`.asktell`), the workers of a shared study and their liveness
(:mod:`.workers`), the sampler a study names and its distributions (:mod:`.sampler_setup`), the study's
trials as the results frame (:mod:`.trials`), the seeds of sampler ``auto`` (:mod:`.seeds`) from the
numpy pre-search (:mod:`.presearch`), the breeder of sampler ``auto`` (:mod:`.breeder`), fronts thinned
to a budget (:mod:`.thinning`) and the memoised genetic samplers (:mod:`.samplers`).
"""
