"""The general claims of `bytesup check`, checked on every run from whatever lessons it holds, one module per lesson:

- lesson04: the server's probabilities are e^logprob, the tables show the server's answers, the top eight share at
  most 1, numpy's forward pass gives the server's token and (on f32) its probabilities, prefill beats decode;
- lesson05: the samplers re-implemented in numpy, and the streamed tokens on the client's clock;
- lesson05b: speculative decoding generates the plain tokens;
- lesson06: decode slows with context, the KV-cache bytes, the depth line;
- lesson07: the ridge point;
- lesson08: decode efficiency within [0, 1], the decode-time model, the course's title per width (a fail there is a
  finding about the machine), and lesson 8's verdict per width against the one check's own fits give;
- consistency: one quantity measured by several lessons agrees across them (the default model's decode at one
  sequence, its prefill of 128 tokens), or the claim names the lessons and the settings that differ;
- common: the lessons' ids, a claim's group (bytesup.check.verdicts.GROUPS), a prediction's status, and the
  busy-machine rule: a claim that judges timings (`@timing`, or `unless_busy` for one that reads several lessons) is
  inconclusive where a lesson it reads recorded a busy machine (bytesup.course.busy).

Each claim is computed with check's own arithmetic from raw records: the server's recorded
answers (lesson 4's logprobs and post-sampling probabilities), measurements read by name, the
facts lessons state (`ctx.fact`) and the model's GGUF hyperparameters. Nothing here calls the
lessons' helpers or `bytesup.course.formulas`, so a lesson that computes a number wrongly fails the
check instead of agreeing with itself.
"""

from __future__ import annotations

from typing import Callable

from bytesup.check.claims import consistency, lesson04, lesson05, lesson05b, lesson06, lesson07, lesson08
from bytesup.check.claims.common import prediction_status
from bytesup.check.claims.lesson04 import EXP_RELATIVE_TOLERANCE
from bytesup.check.claims.lesson05b import first_difference
from bytesup.check.claims.lesson06 import CACHE_TYPE_BYTES, DEPTH_LINE_TOLERANCE, depth_line_check
from bytesup.check.claims.lesson08 import decode_model_check, fit_step_terms
from bytesup.check.verdicts import ClaimResult
from bytesup.store.runs import Run

__all__ = ["CACHE_TYPE_BYTES", "DEPTH_LINE_TOLERANCE", "EXP_RELATIVE_TOLERANCE", "GENERAL_CLAIMS",
           "decode_model_check", "depth_line_check", "first_difference", "fit_step_terms",
           "prediction_status"]

GENERAL_CLAIMS: list[Callable[[Run], list[ClaimResult]]] = [
    lesson04.claim_probability_is_exp_logprob,
    lesson04.claim_top_tokens_match_server,
    lesson04.claim_top8_share_at_most_one,
    lesson04.claim_numpy_top_token_is_the_servers,
    lesson04.claim_numpy_f32_within_rounding,
    lesson04.claim_prefill_faster_than_decode,
    lesson06.claim_decode_slows_with_context,
    lesson06.claim_kv_bytes_formula,
    lesson05.claim_sampler_matches_server,
    lesson05b.claim_speculative_equals_plain,
    lesson05.claim_stream_causality,
    lesson05.claim_stream_clocks_agree,
    lesson08.claim_decode_efficiency_in_unit_interval,
    lesson07.claim_ridge_point,
    lesson08.claim_decode_model_predicts_every_width,
    lesson08.claim_decode_memory_bound_per_width,
    lesson08.claim_verdict_per_width_as_refitted,
    lesson06.claim_depth_line_predicts_deeper_depths,
    consistency.claim_default_decode_agrees_across_lessons,
    consistency.claim_prefill_agrees_across_lessons,
]
