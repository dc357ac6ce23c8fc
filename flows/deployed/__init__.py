"""A deployment's run against its deployment: what the deployment declared (declared.py),
and the run refused when it chose anything else that runs on the worker (run_choices.py).
Below the flows and the dispatcher, above the configuration: both flows and the
announcement dispatcher call it first."""
