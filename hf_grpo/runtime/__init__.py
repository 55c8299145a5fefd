"""Runtime: the processes of one run.

* `distributed`: what DDP, DeepSpeed ZeRO and FSDP2 need beyond `accelerator.prepare`;
* `checkpoints`: atomic checkpoints and the state an exact resume needs;
* `time_budget`: the training clock (``max_train_minutes``, ``save_every_minutes``);
* `host_memory`: freed host memory back to the OS between steps;
* `peer_watch`: one line when another training process dies from a signal;
* `nodes`: several machines: which process writes which checkpoint files, checked before the first step;
* `launching`: the command each node of a multi-node run executes (`hf-grpo plan`).
"""
