"""The bare ``requests`` loop for the Responses API rows of ``http_loop.py``: the same
growing conversation, sent as ``input`` items (the reply's output items appended as
returned, reasoning included, then one ``function_call_output`` per call), reading the
JSON reply or the ``response.*`` SSE events up to ``response.completed``."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import requests
from _floor import floor_session


def _read_sse(response: requests.Response) -> List[Dict[str, Any]]:
    for line in response.iter_lines(chunk_size=1 << 16):
        if line.startswith(b"data:"):
            event = json.loads(line[5:])
            if event["type"] == "response.completed":
                return event["response"]["output"]  # type: ignore[no-any-return]
    raise RuntimeError("stream ended before response.completed")


def bare_responses_loop(url: str, turns: int, stream: bool, tools: List[Dict[str, Any]],
                        *, key: str, model: str) -> None:
    session = floor_session()  # as lattice's session: no proxy lookups, its timeouts
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    functions = [{"type": "function", "name": t["name"], "description": t["description"],
                  "parameters": t["input_schema"], "strict": False} for t in tools]
    items: List[Dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    for turn in range(1, turns + 1):
        body: Dict[str, Any] = {"model": model, "input": items, "tools": functions,
                                "max_output_tokens": 8192, "store": False,
                                "include": ["reasoning.encrypted_content"]}
        if stream:
            body["stream"] = True
        data = json.dumps(body, separators=(",", ":")).encode()
        if stream:
            with session.post(url + "/v1/responses", data=data, headers=headers,
                              stream=True) as response:
                output = _read_sse(response)
        else:
            output = session.post(url + "/v1/responses", data=data,
                                  headers=headers).json()["output"]
        items += output
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            assert turn == turns, turn
            break
        items += [{"type": "function_call_output", "call_id": call["call_id"],
                   "output": json.loads(call["arguments"])["text"]} for call in calls]
    session.close()
