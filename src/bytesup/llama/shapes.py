"""Server shapes, in one place: what a server a lesson starts for itself looks like, in the manner of llama.cpp's
`ServerPreset` (tools/server/tests/utils.py). A lesson asks for "this model, P slots, a context of C tokens, these
other flags" as one typed `ServerShape`; the shape gives the server's flags (`argv`) and the record a run keeps of
it (`to_json`), and says itself in words on a page (`text`).

A shape holds what the lesson decides. The user's own server flags (threads, GPU layers, cache types) are added by
the lesson API (`LessonContext.inherited_flags`), and the port by the server's start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup.llama import process

# Flags a shape owns as fields (slots, context, model) or that the start sets (port, host): never among its extras.
OWNED = frozenset({"--parallel", "--ctx-size", "--model", "--port", "--host"})


@dataclass(frozen=True)
class ServerShape:
    """One server of a lesson's own: the model it loads, its slots (sequences decoded at once, --parallel), its whole
    context in tokens (--ctx-size, shared by the slots: each slot holds context ÷ slots), other llama-server flags,
    and whether it must be the native build (`native`, as RPC needs)."""

    model: Path | None
    slots: int
    context: int
    extra: tuple[str, ...] = ()
    native: bool = False

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"a server has at least one slot, not {self.slots}")
        if self.context < self.slots:
            raise ValueError(f"a context of {self.context} tokens cannot be shared by {self.slots} slots")
        owned = sorted(OWNED & set(process.parse_flags(list(self.extra))))
        if owned:
            raise ValueError(f"{', '.join(owned)} belong to the shape's own fields (model, slots, context) or to the "
                             "server's start, not to its extra flags")

    @classmethod
    def per_slot(cls, model: Path | None, slots: int, context_per_slot: int, extra: tuple[str, ...] = (),
                 native: bool = False) -> "ServerShape":
        """A shape whose every slot holds `context_per_slot` tokens (the context is their sum)."""
        return cls(model, slots, context_per_slot * slots, tuple(extra), native)

    @property
    def context_per_slot(self) -> int:
        return self.context // self.slots

    def argv(self) -> list[str]:
        """The server's flags of this shape (the model goes to start_server apart)."""
        return ["-c", str(self.context), "--parallel", str(self.slots), *self.extra]

    def to_json(self) -> dict[str, Any]:
        """The recorded form: these keys, in this order."""
        return {"model": None if self.model is None else self.model.name, "slots": self.slots, "context": self.context,
                "extra": list(self.extra), "native": self.native}

    def text(self) -> str:
        """The shape in words, for a page: `2 slots, context 1,024 (512 per slot)`."""
        slots = f"{self.slots} slot{'s' if self.slots != 1 else ''}"
        per = f" ({self.context_per_slot:,} per slot)" if self.slots > 1 else ""
        extra = f", {' '.join(self.extra)}" if self.extra else ""
        return f"{slots}, context {self.context:,}{per}{extra}" + (", native build" if self.native else "")
