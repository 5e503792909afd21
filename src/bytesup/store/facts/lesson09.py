"""Lesson 9's facts: the default model whole against split across rpc-servers."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel

from bytesup.store.facts.base import Record, stated


class WholeAndSplit(Record):
    """One speed's medians in tokens/s: the model in one process, and split across the rpc-servers."""
    whole: float
    split: float


@stated("decode_tokens_per_s")
class DecodeSpeeds(WholeAndSplit):
    pass


@stated("prefill_tokens_per_s")
class PrefillSpeeds(WholeAndSplit):
    pass


@stated("weights_bytes_per_node")
class WeightsPerNode(RootModel[list[int]]):
    """Bytes of weights each rpc-server holds, from the server's log."""


@stated("network_bytes_per_token")
class NetworkBytesPerToken(RootModel[int]):
    """Bytes that cross the network per decoded token: the activations at each hand-over and the logits."""


@stated("predicted_split_decode_tokens_per_s")
class PredictedSplitDecode(RootModel[float]):
    """The bytes model with a network term: the split's decode it predicts, tokens/s."""


@stated("split_topology")
class SplitTopology(RootModel[dict[str, Any]]):
    """Where the split server placed its weights (`llama.topology`'s record)."""
