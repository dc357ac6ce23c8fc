"""Announcements of new datasets and base-model revisions, and the dispatcher that turns
each into at most one waiting retrain run (no announcement is lost)."""
