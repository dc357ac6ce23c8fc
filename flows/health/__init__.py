"""The training sentinel: detectors over a run's per-step metrics, and what their findings do
(a warning, a held promotion, a stopped training)."""
