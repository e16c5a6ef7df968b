"""A run on disk: its folder (``folder``), checkpoints and their manifest (``checkpoint``, ``manifest``),
what a checkpoint may hold when read back (``safe_load``), the random streams (``rng``), and a resume
that continues the same run or refuses (``resume``)."""
