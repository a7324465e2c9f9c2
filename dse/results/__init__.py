"""Results: the column vocabulary (:mod:`.columns`), the DataFrame of one batch of designs
(:mod:`.frame`), Parquet written and read: one file with its metadata, written atomically
(:mod:`.store`), a dataset directory's manifest (:mod:`.manifest`) and a sweep's side files
(:mod:`.side_files`: ``_pareto.parquet``, ``_front.parquet``), the parts of a dataset read as one
without pandas (:mod:`.dataset`) and into a DataFrame (:mod:`.load`); what a dataset is
(:mod:`.identity`: fingerprints and part digests) and what a write may replace (:mod:`.guard`).

Import the submodules directly; this package imports nothing, so the study parser can
read the vocabulary without loading pandas and pyarrow.
"""
