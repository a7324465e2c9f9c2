"""The process a long run lives in: progress and notes on stderr (:mod:`.progress`), SIGINT and SIGTERM
handled alike so that finished work is kept (:mod:`.interrupt`), and the process's place in a SLURM
job array (:mod:`.slurm`).

Imports nothing of dse but the errors: every layer above may use it.
"""
