"""A request's output text as its tokens arrive: what is new since the last chunk, and where a stop
string ends it.

The whole output is decoded again each round (a token's text can depend on its neighbours: byte
fallback, merged spaces), and text is held back while it could still change: an incomplete UTF-8
character at the end, or an ending that could be the start of a stop string (it would be cut).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

INCOMPLETE = "\ufffd"  # what a decoder shows for the first bytes of a character not yet whole


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stops = tuple(stops)
        self._sent = 0  # characters of text handed out so far
        self.stopped = False  # a stop string was found: the text ends before it

    def advance(self, output_ids: list[int], *, final: bool) -> str:
        """The text to send now, given every output token so far; `final`: no more tokens come."""
        if self.stopped:
            return ""
        text = self._decode(output_ids)
        cut = self._stop_at(text)
        if cut is not None:
            text, final, self.stopped = text[:cut], True, True
        end = len(text) if final else len(text) - self._held_back(text)
        new = text[self._sent:end] if end > self._sent else ""
        self._sent = max(self._sent, end)
        return new

    def _stop_at(self, text: str) -> int | None:
        """Where the earliest stop string begins, in text not yet sent or overlapping it."""
        found = [i for i in (text.find(s, max(0, self._sent - len(s) + 1)) for s in self._stops) if i >= 0]
        return min(found) if found else None

    def _held_back(self, text: str) -> int:
        held = len(text) - len(text.rstrip(INCOMPLETE))
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:n]):
                    held = max(held, n)
                    break
        return held
