"""tpu-rl-pipeline: RL post-training of LLMs with MaxText on GKE TPUs, orchestrated by Prefect."""
