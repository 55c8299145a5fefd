"""The embedded tasks, generated rather than downloaded (``dataset_name`` sources of `hf_grpo.data.loading`):
one-step arithmetic (the quickstart), three-digit multiplication with a calculator (the agent demo), stdin/stdout
code problems (the code recipe) and coloured shapes in images (the vision demo)."""
