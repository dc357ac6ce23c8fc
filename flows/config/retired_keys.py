"""Keys a profile may still carry from an earlier version: refused with the key that
replaces it (flows/config/loading.py names them with their fix)."""

from __future__ import annotations

# Keys a profile may still carry from an earlier version: refused with the key that replaces it.
RETIRED_KEYS: dict[str, tuple[str, str]] = {
    "gke.nodepool_count": (
        "was removed: the slice count is gke.num_slices alone (one TPU node pool per slice; "
        "two fields let the cluster be built with one count and planned and billed with the "
        "other)", "remove gke.nodepool_count and set gke.num_slices to the number of slices"),
    "gke.price_table": (
        "was replaced by gke.prices: one price per capacity mode, each with its source and "
        "date", "write gke.prices: {on-demand: {usd_per_chip_hour: 2.70, source: "
        "https://cloud.google.com/tpu/pricing, as_of: 2024-12-11}} (flows/config/capacity.py "
        "has the defaults)"),
    "gke.price_tier": (
        "was replaced by gke.capacity (reservation | flex-start | spot | on-demand), whose "
        "price gke.prices gives", "remove gke.price_tier; set gke.capacity, and a committed "
        "rate as gke.prices.reservation"),
}
