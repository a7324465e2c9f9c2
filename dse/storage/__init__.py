"""Shared-study storages: the URL a user gives (``--storage``) opened as an Optuna storage with pools
(:mod:`.backends`), its calls retried when the connection drops (:mod:`.retries`), a database served to
many workers over gRPC (:mod:`.proxy`), and its secrets kept out of everything dse shows or writes
(:mod:`.credentials`).
"""
