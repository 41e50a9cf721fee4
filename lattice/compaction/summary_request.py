"""What a compaction summary request carries: the transcript of the messages to summarise,
as plain text, and the instruction (``DEFAULT_COMPACTION_PROMPT`` unless the policy gives
one). Pure functions; ``lattice.compaction`` re-exports the public ones.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Sequence

__all__ = ["DEFAULT_COMPACTION_PROMPT", "summary_messages"]

Message = Dict[str, Any]

DEFAULT_COMPACTION_PROMPT = """\
Write a summary of the conversation transcript above. The summary will replace that part \
of the conversation: from now on the assistant sees only this summary and the most recent \
messages, so anything left out of the summary is lost. Write it so that the assistant can \
carry on with the work without asking the user to repeat anything.

Cover, wherever the transcript has them:
- The user's task and overall goal, in the user's own terms, and any change of direction.
- The user's stated preferences, constraints and requirements (style, tools or approaches \
to use or avoid, limits, things they asked not to do).
- Decisions made and why, including approaches that were tried and rejected.
- Progress so far: what has been done and the current state of the work.
- Exact file names, paths, identifiers (functions, classes, variables, ids), URLs, \
commands, configuration values and numbers. Copy them verbatim; never paraphrase them.
- Errors encountered, with their exact messages when short, and how each was resolved \
(or that it is still unresolved).
- What tool calls returned that still matters later (findings, data, outputs), reduced to \
the facts needed.
- Open questions, pending items and the immediate next steps, including what the \
assistant was in the middle of doing when the transcript ends.

If the transcript starts with an earlier summary, carry forward everything in it that is \
still relevant.

Be dense and factual; use short sections and bullet points. Do not invent anything that is \
not in the transcript. Write only the summary: no preamble, no commentary, no closing \
remarks."""

# A single oversized tool result is the usual reason a history overflows, so the summary
# request must not carry it whole. Head and tail are kept: errors and totals tend to sit
# at the end of tool output.
_CLIP_CHARS = 4_000
_CLIP_HEAD = 3_000


def _clip(text: str) -> str:
    if len(text) <= _CLIP_CHARS:
        return text
    tail = _CLIP_CHARS - _CLIP_HEAD
    omitted = len(text) - _CLIP_CHARS
    return f"{text[:_CLIP_HEAD]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def _result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (_render_block(b) for b in content)))
    return json.dumps(content, ensure_ascii=False, default=str)


def _render_block(block: Any) -> str:
    """One content block as transcript text; "" for blocks the summary should not see."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("thinking", "redacted_thinking"):
        # Private reasoning: bulky, and the conclusions show up in the text anyway.
        return ""
    if kind in ("image", "document"):
        return f"[{kind}]"
    if kind in ("tool_use", "server_tool_use"):
        arguments = json.dumps(block.get("input"), ensure_ascii=False, default=str)
        return f"[tool call {block.get('name')} (id {block.get('id')})] {_clip(arguments)}"
    if kind == "tool_result":
        label = "tool error" if block.get("is_error") else "tool result"
        body = _clip(_result_text(block.get("content")))
        return f"[{label} (id {block.get('tool_use_id')})] {body}"
    if "content" in block:  # provider-side tool results (web search and the like)
        return f"[{kind}] {_clip(_result_text(block.get('content')))}"
    return f"[{kind}]"


def _render_message(message: Mapping[str, Any]) -> str:
    role = "User" if message.get("role") == "user" else "Assistant"
    body = _result_text(message.get("content"))  # renders a block list block by block
    return f"{role}:\n{body or '(no text)'}"


def summary_messages(to_summarise: Sequence[Mapping[str, Any]], prompt: str
                     ) -> List[Message]:
    """The ``messages`` of the summary request: one user message, transcript then prompt.

    The transcript is plain text, so the request is valid whatever shape the summarised
    messages had (tool pairs, consecutive user messages, thinking blocks); the request is
    meant to be sent with no tools.
    """
    if not to_summarise:
        raise ValueError("there are no messages to summarise")
    transcript = "\n\n".join(_render_message(m) for m in to_summarise)
    text = (f"Here is the transcript of the conversation so far.\n\n<transcript>\n"
            f"{transcript}\n</transcript>\n\n{prompt}")
    return [{"role": "user", "content": text}]
