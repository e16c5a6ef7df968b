"""Proof of a recipe's Liger wiring: recipe asserts, ``check`` (CPU), gradient parity, ``smoke`` and ``bench`` (GPU)."""
