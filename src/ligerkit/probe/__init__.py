"""Probes: the decision table as code (Liger's replacements, their reference math), the math probes,
and the model-level probes (in-place writes, runnable models, the gradient-parity rule)."""
