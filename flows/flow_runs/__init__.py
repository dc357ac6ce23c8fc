"""What the flows share about the run they are in: who runs it (run_origin.py), who created
it as Prefect recorded it (run_creator.py), what its Logs tab shows of a diagnosed failure
(run_log.py) and how often it tells Prefect it is alive (heartbeat.py)."""
