"""Results: the column vocabulary (:mod:`.columns`), the DataFrame of one batch of designs
(:mod:`.frame`) and Parquet written and read in one place (:mod:`.store`).

Import the submodules directly; this package imports nothing, so the study parser can
read the vocabulary without loading pandas and pyarrow.
"""
