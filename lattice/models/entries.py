"""Each history entry's request bytes, encoded once (issue 28).

A tool loop sends the whole conversation on every request; encoding it all again each
turn makes a long conversation's per-turn cost grow with its length. The loop hands the
client the same message dicts turn after turn and never edits them (SPEC 6: a hook gets
a copy, cache marks go on copies), so a client may keep the JSON of each one:

* ``EntryBytes.dump(body, key, messages, translate)`` is ``dump(body)`` with ``body[key]``
  the JSON list of the wire items of ``messages`` (``translate(message)`` gives one
  entry's items; ``lead`` items go first, e.g. Chat's system message). The rest of the
  body is encoded around a marker (``MARK`` in ``body[key]``); the entries' bytes, each
  encoded once, are joined in. Byte for byte the same
  as encoding the whole body (the encoder writes a list as its items joined by ``,``).
* The last request's body is kept: a request whose messages start with the same dicts
  (by identity, a C-speed check), or with all of them but the last (that one was a
  marked copy), copies that part of it; other entries are looked up by identity
  (``by_id``, bounded, holding each dict so its id stays unique) or encoded.

Any new dict (a hook's copy, a marked copy, a compacted or replaced history) is simply
not found, so it is encoded: nothing stale can be sent. ``last`` is replaced whole (one
atomic store), so threads sharing a client never see half of one.
"""

from __future__ import annotations

import json
import operator
import uuid
from typing import Any, Callable, Dict, List, Sequence, Tuple

__all__ = ["EntryBytes", "MARK", "dump", "dump_items"]

_CACHE_MAX = 16384
MARK = "\x00lattice-entries-" + uuid.uuid4().hex  # where the entries go, while encoding

Translate = Callable[[Any], Sequence[Any]]  # one entry -> its wire items


def dump(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, as every codec sends it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_MARK_JSON = dump(MARK)


def dump_items(items: Sequence[Any]) -> bytes:
    """``items`` as the inside of a JSON list (no brackets; empty for no items)."""
    return b",".join([dump(item) for item in items])


class EntryBytes:
    """One client's encoded history entries (see the module docstring)."""

    __slots__ = ("by_id", "last")

    def __init__(self) -> None:
        self.by_id: Dict[int, Tuple[Any, bytes]] = {}
        # (messages, body, start, end, cut): body[start:end] holds the messages' entries,
        # body[start:cut] those of all but the last one.
        self.last: Tuple[Tuple[Any, ...], bytes, int, int, int] = ((), b"", 0, 0, 0)

    def dump(self, body: Dict[str, Any], key: str, messages: List[Any], translate: Translate,
             lead: Sequence[Any] = ()) -> bytes:
        """``dump(body)`` with ``body[key]`` the list of ``lead`` and each message's items
        (``translate(message)``); ``body[key]`` must be ``MARK`` (if the caller's
        ``extra`` replaced it, the body is encoded as it is: theirs wins)."""
        if body.get(key) is not MARK:
            return dump(body)
        parts = dump(body).split(_MARK_JSON)
        if len(parts) != 2:  # the marker's text elsewhere in the body: no joining
            items = [item for message in messages for item in translate(message)]
            return dump({**body, key: [*lead, *items]})
        head, tail = parts
        pieces, region, cut = self._pieces(messages, translate)
        out = [head, b"["]
        first = dump_items(lead)
        if first:
            out.append(first)
            if pieces:
                out.append(b",")
        start = len(head) + 1 + sum(map(len, out[2:]))
        for index, piece in enumerate(pieces):
            if index:
                out.append(b",")
            out.append(piece)
        out.append(b"]")
        out.append(tail)
        data = b"".join(out)
        self.last = (tuple(messages), data, start, start + region, start + cut)
        return data

    def _pieces(self, messages: List[Any], translate: Translate) -> Tuple[List[Any], int, int]:
        """The non-empty pieces to join (the old body's reusable part as one memoryview),
        their joined length, and that length without the last message's piece."""
        old, body, start, end, cut = self.last
        if old and len(messages) >= len(old) and all(map(operator.is_, old, messages)):
            done, stop = len(old), end
            if done == len(messages):  # the same messages again
                return [memoryview(body)[start:end]] if end > start else [], end - start, \
                    cut - start
        elif len(old) > 1 and len(messages) >= len(old) and \
                all(map(operator.is_, old[:-1], messages)):  # the last one was a copy
            done, stop = len(old) - 1, cut
        else:
            done, stop = 0, start
        pieces: List[Any] = [memoryview(body)[start:stop]] if stop > start else []
        region = stop - start
        last = b""
        by_id = self.by_id
        for message in messages[done:]:
            hit = by_id.get(id(message))
            if hit is not None and hit[0] is message:
                last = hit[1]
            else:
                last = dump_items(translate(message))
                if len(by_id) >= _CACHE_MAX:
                    by_id.clear()
                by_id[id(message)] = (message, last)
            if last:
                region += len(last) + (1 if pieces else 0)
                pieces.append(last)
        cut = region
        if last:
            cut -= len(last) + (1 if len(pieces) > 1 else 0)
        return pieces, region, cut
