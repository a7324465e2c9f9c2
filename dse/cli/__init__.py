"""The `dse` command line: a thin shell over the public functions, with plain-text tables for the
terminal (:mod:`.text`). ``dse = dse.cli:main``.

:mod:`.commands` holds the group ``main``, `dse eval` and the helpers the command modules share;
the other commands are defined by concept, in :mod:`.campaign` (run, sweep, export,
storage-proxy), :mod:`.results` (pareto, report) and :mod:`.catalog` (hw, models, runtimes,
acceptance, validate), and added to ``main`` here, so that no command module imports the group
and the group's module imports none of them.
"""

from .campaign import export_cmd, run_cmd, storage_proxy_cmd, sweep_cmd
from .catalog import acceptance_group, hw_group, models_group, runtimes_group, validate_cmd
from .commands import main
from .results import pareto_cmd, report_cmd

for _command in (run_cmd, sweep_cmd, export_cmd, storage_proxy_cmd, pareto_cmd, report_cmd,
                 hw_group, models_group, runtimes_group, acceptance_group, validate_cmd):
    main.add_command(_command)
del _command

__all__ = ["main"]
