"""The `tpurl` subcommands besides `run`, each one job on a profile: its plan (plan.py), what
exists and costs now (status.py), the archive a failed first contact needs
(support_bundle.py), and the clean-up flow (teardown.py, a Prefect flow deployable beside
the pipeline). All but teardown only read."""
