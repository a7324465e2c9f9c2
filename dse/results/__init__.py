"""Results: the column vocabulary (:mod:`.columns`), the DataFrame of one batch of designs
(:mod:`.frame`), Parquet written and read in one place (:mod:`.store`), what a dataset is
(:mod:`.identity`: fingerprints and part digests) and what a write may replace (:mod:`.guard`).

Import the submodules directly; this package imports nothing, so the study parser can
read the vocabulary without loading pandas and pyarrow.
"""
