"""A campaign on a SLURM cluster through Dask (pip install 'specdec-dse[dask]' dask-jobqueue).

dask-jobqueue submits the workers as SLURM jobs; dse runs the grid shards and the array tasks
as Dask tasks on them, writing the same datasets the sbatch recipes write. Run it from a login
node or a notebook: python examples/slurm/dask_jobqueue_campaign.py
"""

from dask_jobqueue import SLURMCluster

from dse.campaign.on_dask import sweep_on_dask, tasks_on_dask

cluster = SLURMCluster(cores=1, processes=1, memory="4GB", walltime="01:00:00")
cluster.scale(jobs=16)                       # 16 single-core workers
address = cluster.scheduler_address

rows, parts = sweep_on_dask(address, "studies/quickstart.yaml", 64, out="results/quickstart-sweep")
print(f"sweep: {rows} grid points in {parts} part files")
trials = tasks_on_dask(address, "studies/quickstart.yaml", 16, out="results/quickstart-tasks")
print(f"tasks: {trials} trials in 16 parts; dse pareto results/quickstart-tasks")
cluster.close()
