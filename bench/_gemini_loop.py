"""The bare ``requests`` loop for the Gemini rows of ``http_loop.py``: the same growing
conversation as ``contents`` (each reply's parts appended as returned, then one
``functionResponse`` per call), reading the JSON reply or the SSE chunks
(``:streamGenerateContent?alt=sse``) to the end of the stream."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import requests
from _floor import floor_session


def _read_sse(response: requests.Response) -> List[Dict[str, Any]]:
    """The reply's parts: streamed text pieces joined, other parts as they came."""
    parts: List[Dict[str, Any]] = []
    for line in response.iter_lines(chunk_size=1 << 16):
        if not line.startswith(b"data:"):
            continue
        chunk = json.loads(line[5:])
        for n, part in enumerate(chunk["candidates"][0]["content"].get("parts") or ()):
            if n == 0 and parts and "text" in part and set(parts[-1]) == {"text"}:
                parts[-1]["text"] += part["text"]
            else:
                parts.append(part)
    return parts


def bare_gemini_loop(url: str, turns: int, stream: bool, tools: List[Dict[str, Any]],
                     *, key: str, model: str) -> None:
    session = floor_session()  # as lattice's session: no proxy lookups, its timeouts
    headers = {"x-goog-api-key": key, "content-type": "application/json"}
    declarations = [{"functionDeclarations": [
        {"name": t["name"], "description": t["description"],
         "parametersJsonSchema": t["input_schema"]} for t in tools]}]
    contents: List[Dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run the steps."}]}]
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    target = f"{url}/v1beta/models/{model}:{method}"
    for turn in range(1, turns + 1):
        body = {"contents": contents, "tools": declarations,
                "generationConfig": {"maxOutputTokens": 8192}}
        data = json.dumps(body, separators=(",", ":")).encode()
        if stream:
            with session.post(target, data=data, headers=headers, stream=True) as response:
                parts = _read_sse(response)
        else:
            reply = session.post(target, data=data, headers=headers).json()
            parts = reply["candidates"][0]["content"]["parts"]
        contents.append({"role": "model", "parts": parts})
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        if not calls:
            assert turn == turns, turn
            break
        contents.append({"role": "user", "parts": [
            {"functionResponse": {"name": c["name"], "response": {"result": c["args"]["text"]}}}
            for c in calls]})
    session.close()
