"""Campaigns on clusters: the exhaustive grid swept in shards (:mod:`.grid`), shards and array tasks as Dask
tasks (:mod:`.on_dask`), and a shared study exported while workers run (:mod:`.export`).
"""
