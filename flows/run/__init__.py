"""One run of the pipeline flow (flows/pipeline.py), what the flow itself owns beside its
body: the result it returns and keeps (result.py), and how a user's cancel ends the running
stage (cancel.py). Here, not in the run page, because the page only shows a run: the CLI,
the trackers and the reference pages read the result type without importing the page or
the flow (which loads Prefect's engines)."""
