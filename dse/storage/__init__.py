"""Shared-study storages: the URL a user gives (``--storage``) opened as an Optuna storage with retries and
pools (:mod:`.backends`), and its secrets kept out of everything dse shows or writes (:mod:`.credentials`).
"""
