"""Recipe validation: structure, config and wiring asserts shared by every recipe, and ``check``."""
