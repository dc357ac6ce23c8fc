"""What the Prefect UI shows of a pipeline run: its events (flows/runpage/events.py), its
artifacts (flows/runpage/artifacts.py, the stage table and outputs kept current in
flows/runpage/live.py, charts and metrics) and the promotion's table and events beside the
promoted pointer (flows/runpage/promotion.py). The flow
(flows/pipeline.py) decides how the run goes and tells the page; what a terminal shows of the
same run is flows/console/."""
