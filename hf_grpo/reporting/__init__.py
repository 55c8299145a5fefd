"""Reporting: what a run tells the people watching it.

* `metrics`: step metrics, averaged (or summed) over micro-batches and processes;
* `step_log`: a round's rollout metrics and the step log;
* `callbacks`: the progress bar, training curves and the rollout log;
* `completions`, `completions_table`, `completions_wandb`, `completions_hub`: TRL's ``log_completions``
  (a printed table, parquet files, a W&B table, a Hub dataset);
* `model_card`: the README pushed with checkpoints;
* `run_setup`: the line a run starts with: distributed backend, mixed precision, what trains, what generates.
"""
