"""Lesson 8's facts: the decode-time model's inputs (`decode_model`), for `bytesup check` to refit on its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from bytesup.store.facts.base import stated


class ModelSteps(BaseModel):
    """One model as the decode-time model sees it: its weights, and its median step (ms) and the steps' robust
    spread (interquartile range ÷ median) at each number of sequences P measured, keyed by P as text."""
    model_config = ConfigDict(extra="forbid")

    name: str
    weight_bytes: float
    n_params: float
    n_layer: int = 1  # its blocks
    weight_type: str
    step_ms: dict[str, float]
    step_spread: dict[str, float] = {}


@stated("decode_model")
class DecodeModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    form: str  # the model's equation, in words
    tolerance: float  # a model left out is predicted within this (predicted ÷ measured tokens/s − 1)
    widths: list[ModelSteps]
