"""Imports the encoder's norm by name at import time: a stale binding once the kit patches it."""

from toy_models.modeling_encoder import EncoderRMSNorm  # noqa: F401
