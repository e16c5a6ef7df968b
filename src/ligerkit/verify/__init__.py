"""The decision table as code: Liger's replacements, their reference math, probes, ``suggest``."""
