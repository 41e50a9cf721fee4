"""SPEC section 7: submit_output, every accepted schema form, the exclusive batch."""
import json
from dataclasses import dataclass, field
from typing import List, Optional

import pytest
from helpers import reply, tool_use

from lattice import SUBMIT_OUTPUT_TOOL_NAME, Agent, MissingOutputError, OutputSchema, Tool
from lattice.testing import ScriptedModelClient, assert_well_formed

try:
    from typing import TypedDict
except ImportError:  # pragma: no cover
    from typing_extensions import TypedDict


@dataclass
class Address:
    city: str
    zip: Optional[str] = None


@dataclass
class Person:
    name: str
    age: int
    addresses: List[Address] = field(default_factory=list)


class Movie(TypedDict):
    title: str
    year: int


def submit(payload, id="s1"):
    return tool_use(SUBMIT_OUTPUT_TOOL_NAME, payload, id)


def run(schema, replies, **options):
    client = ScriptedModelClient(replies)
    agent = Agent(model="m", model_client=client, output_schema=schema, **options)
    return agent, client, agent.prompt("extract")


def test_json_schema_dict_valid_payload():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    agent, client, result = run(schema, [reply(submit({"n": 3}))])
    assert result.subtype == "success" and result.structured_result == {"n": 3}
    assert json.loads(result.result) == {"n": 3}
    tools = client.requests[0].tools
    assert tools[0]["name"] == "submit_output" and tools[0]["input_schema"] == schema
    assert "once" in tools[0]["description"] and "alone" in tools[0]["description"]
    assert_well_formed(agent.get_history())


def test_dataclass_parsed_into_instances():
    payload = {"name": "Ada", "age": 36, "addresses": [{"city": "London"}]}
    _, client, result = run(Person, [reply(submit(payload))])
    assert result.structured_result == Person("Ada", 36, [Address("London")])
    assert isinstance(result.structured_result.addresses[0], Address)
    assert client.requests[0].tools[0]["input_schema"]["type"] == "object"


def test_typeddict():
    _, _, result = run(Movie, [reply(submit({"title": "Alien", "year": 1979}))])
    assert result.structured_result == {"title": "Alien", "year": 1979}


def test_parse_plus_json_schema_object():
    class Upper:
        def json_schema(self):
            return {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}

        def parse(self, data):
            if data["s"] == "bad":
                raise ValueError("s must not be 'bad'")
            return data["s"].upper()

    _, client, result = run(Upper(), [reply(submit({"s": "bad"}, "a")), reply(submit({"s": "ok"}, "b"))])
    assert result.structured_result == "OK"
    assert "s must not be 'bad'" in str(client.requests[1].messages[-1]["content"])


def test_model_validate_class_without_pydantic():
    class Fake:
        @classmethod
        def model_json_schema(cls):
            return {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}

        @classmethod
        def model_validate(cls, data):
            obj = cls()
            obj.x = data["x"]
            return obj

    _, _, result = run(Fake, [reply(submit({"x": 1.5}))])
    assert isinstance(result.structured_result, Fake) and result.structured_result.x == 1.5


def test_real_pydantic_model_when_installed():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        tags: List[str] = []

    _, client, result = run(Item, [reply(submit({"name": 5}, "a")),
                                   reply(submit({"name": "pen", "tags": ["x"]}, "b"))])
    assert result.structured_result == Item(name="pen", tags=["x"])
    assert "name" in str(client.requests[1].messages[-1]["content"])


def test_invalid_payload_lists_errors_and_loop_continues():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
              "required": ["n", "s"]}
    agent, client, result = run(schema, [reply(submit({"n": "x"}, "a")),
                                         reply(submit({"n": 1, "s": "y"}, "b"))])
    assert result.subtype == "success" and result.structured_result == {"n": 1, "s": "y"}
    error = client.requests[1].messages[-1]["content"][0]
    assert error["is_error"] and "n" in error["content"] and "s" in error["content"]


def test_missing_output_when_model_just_answers():
    _, _, result = run({"type": "object"}, ['{"looks": "like json"}'])
    assert result.subtype == "error_missing_output" and result.is_error
    assert isinstance(result.error, MissingOutputError) and result.structured_result is None


@pytest.mark.parametrize("batch", [
    [submit({"n": 1}, "a"), tool_use("other", {}, "b")],
    [submit({"n": 1}, "a"), submit({"n": 2}, "b")],
])
def test_exclusive_batch_refused_whole(batch):
    ran = []
    other = Tool("other", "O.", {"type": "object"}, lambda a: ran.append(1) or "ran")
    agent, client, result = run({"type": "object"}, [reply(*batch), reply(submit({"n": 3}, "c"))],
                                tools=[other])
    assert ran == [] and result.structured_result == {"n": 3}
    refused = client.requests[1].messages[-1]["content"]
    assert len(refused) == 2
    assert all(b["is_error"] and "submit_output_exclusive_batch" in b["content"] for b in refused)


def test_max_output_retries():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    bad = [reply(submit({"n": "x"}, f"s{i}")) for i in range(5)]
    agent, client, result = run(schema, bad, max_output_retries=2)
    assert result.subtype == "error_max_output_retries" and result.is_error
    assert len(client.requests) == 3
    assert_well_formed(agent.get_history())


def test_non_object_schema_is_wrapped():
    schema = {"type": "array", "items": {"type": "integer"}}
    _, client, result = run(schema, [reply(submit({"value": [1, 2]}))])
    assert result.structured_result == [1, 2]
    assert client.requests[0].tools[0]["input_schema"]["properties"]["value"] == schema


def test_bad_output_schema():
    with pytest.raises(ValueError, match="output_schema"):
        Agent(model="m", model_client=ScriptedModelClient([]), output_schema=42)
    with pytest.raises(ValueError):
        Agent(model="m", model_client=ScriptedModelClient([]),
              output_schema={"type": "object", "properties": {"x": {"type": "nonsense"}}})


def test_output_schema_object_passthrough():
    schema = OutputSchema({"type": "object"}, parse=lambda d: sorted(d), description="Custom.")
    _, client, result = run(schema, [reply(submit({"b": 1, "a": 2}))])
    assert result.structured_result == ["a", "b"]
    assert client.requests[0].tools[0]["description"] == "Custom."


def test_an_invalid_output_schema_names_its_own_path_not_the_wrapper():
    import pytest

    from lattice import Agent, SchemaError
    from lattice.testing import ScriptedModelClient

    with pytest.raises(SchemaError, match=r"invalid output_schema at #/items/type") as info:
        Agent(model="m", model_client=ScriptedModelClient([]),
              output_schema={"type": "array", "items": {"type": "nope"}})
    assert "value" not in str(info.value)


def test_a_wrapped_schema_keeps_its_defs_at_the_root():
    from helpers import reply, tool_use

    from lattice import Agent
    from lattice.testing import ScriptedModelClient

    schema = {"$defs": {"item": {"type": "integer"}}, "type": "array",
              "items": {"$ref": "#/$defs/item"}}
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("submit_output", {"value": ["x"]}, id="1")),
         reply(tool_use("submit_output", {"value": [1, 2]}, id="2"))]), output_schema=schema)
    result = agent.prompt("go")
    assert result.structured_result == [1, 2]
    assert "Invalid output" in agent.get_history()[2]["content"][0]["content"]
