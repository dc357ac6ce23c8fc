"""Team budgets across runs: a run's check, estimate and metered spend in its team's ledger.

A package of its own because it reads storage of any backend (``flows.backends.storage_for``)
and the run's result (``flows.run.result``): inside ``flows.run`` that would make the run's
record depend on the backends, which depend on the run page, which reads the run's record.
"""
