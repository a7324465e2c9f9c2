"""Counts of the model's work, for budgets that must not depend on the machine's speed.

``COUNTS["steps"]``: calls of roofline.step_cost; ``COUNTS["rows"]``: design rows (x k columns)
those calls priced; ``COUNTS["tables"]``: tree tables asked for (specdec.tree_table, cached or
not). They only grow; a caller reads them before and after some work (dse.search.presearch turns the
difference into reference CPU seconds, so its time cap gives the same designs on any machine).
"""

COUNTS = {"steps": 0, "rows": 0, "tables": 0}
