"""What the trainer does to hold less memory: activation checkpointing per layer (``checkpointing``), and
Liger's outputs made again in backward from what its kernels keep (``saved_recompute``: the hooks;
``glu_recompute``: gated products; ``norm_recompute`` and ``norm_kernel``: RMSNorm outputs and the
rotary over them)."""
