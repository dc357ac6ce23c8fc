"""The team's own stack: experiment trackers and model registries the pipeline
reports to. Every integration is optional and only reports: none of them ever fails a stage
(``reporting.report`` turns a failure into a warning after its retries)."""
