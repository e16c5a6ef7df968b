"""Tiny modeling modules used by the CPU tests (custom and composite routes)."""
