"""The course's arithmetic: formulas, the bandwidth ceiling, the generation loop and its latency model, the samplers
and their check against the server, speculative decoding, the capstone's memory-bound rules, the decode-time model,
the rule for judging samples, the client clock and the published figures. Pure functions and constants; imports
nothing of bytesup but errors."""
