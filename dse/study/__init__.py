"""Studies: the validated description of a design space and what to optimise in it.

Owns the study vocabulary (:mod:`.spec`: knob tables, Knob, Objective, Constraint,
StudySpec) and its parsing (:mod:`.parse`: one parser per section, ``parse_study`` for a
mapping, ``load_study`` for a file). A StudySpec holds one :class:`dse.workload.spec.Workload`.
"""

from .parse import load_study, open_study, parse_study
from .spec import SAMPLERS, Constraint, Knob, KnobDef, Objective, StudySpec

__all__ = ["Constraint", "Knob", "KnobDef", "Objective", "SAMPLERS", "StudySpec", "load_study", "open_study",
           "parse_study"]
