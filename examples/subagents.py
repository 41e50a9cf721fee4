"""Agents that delegate: a research agent hands reading to a cheaper summariser on another
provider, and a publishing step whose tool needs a person's approval inside the child.

Runs offline: the bundled mock server on 127.0.0.1 answers both agents, the researcher over
the Anthropic Messages API and the summariser over OpenAI Chat Completions (the same
server speaks both). docs/subagents.md explains every step.

    python examples/subagents.py
"""
from __future__ import annotations

import json
from typing import Any, Dict

from lattice import Agent, OpenAIChatClient, tool
from lattice.testing import MockMessagesServer

ARTICLE = ("Lattice runs an agent loop synchronously. Subagents are tools that run a child "
           "query: the parent's abort, budget, tracer and approvals reach the child, and "
           "the child's usage and messages come back up.")


@tool
def fetch(url: str) -> str:
    """Fetch a web page as text.

    Args:
        url: The page's address.
    """
    return ARTICLE


published = []


@tool(requires_approval=True)
def publish(title: str, body: str) -> str:
    """Publish a note on the team's wiki (a person approves each one)."""
    published.append(title)
    return f"published {title!r}"


def mock_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """The offline stand-in for the three agents' models (told apart by their system
    prompts)."""
    system = json.dumps(body.get("system") or "")
    last = body["messages"][-1]["content"]
    results = last if isinstance(last, list) else []
    said = " ".join(str(b.get("content")) for b in results if b.get("type") == "tool_result")
    usage = {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": 20}
    if "Summarise" in system:
        return {"content": "Subagents carry abort, budget, traces and approvals down, "
                           "usage and messages up.", "usage": usage}
    if "Publish" in system:
        if not results:
            return {"content": [{"type": "tool_use", "id": "toolu_pub", "name": "publish",
                                 "input": {"title": "Subagents", "body": last}}],
                    "usage": usage}
        return {"content": f"Done: {said}", "usage": usage}
    # the researcher
    if not results:
        return {"content": [{"type": "tool_use", "id": "toolu_fetch", "name": "fetch",
                             "input": {"url": "https://example.org/lattice"}}], "usage": usage}
    if results[0]["tool_use_id"] == "toolu_fetch":
        return {"content": [{"type": "tool_use", "id": "toolu_sum", "name": "summariser",
                             "input": {"prompt": f"Summarise: {said}"}}], "usage": usage}
    if results[0]["tool_use_id"] == "toolu_sum":
        return {"content": [{"type": "tool_use", "id": "toolu_post", "name": "publisher",
                             "input": {"prompt": said}}], "usage": usage}
    return {"content": f"Research done. {said}", "usage": usage}


def main() -> None:
    with MockMessagesServer([mock_model], repeat=True) as server:
        print(f"(offline: mock server at {server.base_url})")
        summariser = Agent(
            name="summariser", system="Summarise what you are given in one sentence.",
            model="small-model",
            model_client=OpenAIChatClient("offline-mock-key", base_url=server.base_url + "/v1"))
        publisher = Agent(name="publisher", system="Publish the note you are given.",
                          model="mock-model", base_url=server.base_url,
                          api_key="offline-mock-key", tools=[publish])
        researcher = Agent(name="researcher", system="Research the question.",
                           model="mock-model", base_url=server.base_url,
                           api_key="offline-mock-key",
                           tools=[fetch, summariser.as_tool(), publisher.as_tool()])

        for message in researcher.query("What are subagents in lattice?",
                                        include_subagent_messages=True):
            who = message.parent_tool_use_id or "researcher"
            if message.type == "assistant":
                for use in message.tool_uses:
                    print(f"  [{who}] -> {use['name']}")
                if message.text and message.parent_tool_use_id == "toolu_sum":
                    print(f"summariser (via Chat Completions) said: {message.text}")
            elif message.type == "result":
                result = message

        print(f"ended: {result.subtype}")
        split = {model: usage.input_tokens for model, usage in result.usage.by_model.items()}
        print(f"usage by model: {split} (of {result.usage.input_tokens} input tokens)")
        for call in result.pending_approvals:
            print(f"waiting for approval: {call.name} {call.input['title']!r}, "
                  f"path {call.path}")
        decisions = {call.id: True for call in researcher.pending_approvals()}
        final = researcher.prompt(approvals=decisions)
        print(f"answer: {final.result}")
        print(f"published: {published == ['Subagents']}")


if __name__ == "__main__":
    main()
