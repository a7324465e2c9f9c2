"""Studies: the validated description of a design space and what to optimise in it.

Owns the study vocabulary (:mod:`.spec`: knob tables, Knob, Objective, Constraint,
StudySpec) and its parsing, one parser per section: knob values and the file's error
collector (:mod:`.knob_values`), ``workload:`` (:mod:`.workload_section`), ``space:``
(:mod:`.space_section`), ``objectives:`` and ``constraints:`` (:mod:`.objectives`), and
:mod:`.parse` (header, technology and search, the cross-section checks, ``parse_study`` for a
mapping, ``load_study`` for a file). :mod:`.space` says which knobs act on a design. A
StudySpec holds one :class:`dse.workload.spec.Workload`.
"""

from .parse import load_study, open_study, parse_study
from .spec import SAMPLERS, Constraint, Knob, KnobDef, Objective, StudySpec

__all__ = ["Constraint", "Knob", "KnobDef", "Objective", "SAMPLERS", "StudySpec", "load_study", "open_study",
           "parse_study"]
