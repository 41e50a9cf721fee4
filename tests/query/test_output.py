"""SPEC section 7: submit_output, every accepted schema form, the exclusive batch; an
end_turn under an output contract; ``output_format`` (SPEC 11)."""
import dataclasses
import json
from dataclasses import dataclass, field
from typing import List, Optional, TypedDict

import pytest
from helpers import (
    reply,
    result_text,
    results_of,
    scripted,
    tool_use,
)

from lattice import (
    SUBMIT_OUTPUT_TOOL_NAME,
    Agent,
    MissingOutputError,
    OutputSchema,
    Tool,
)
from lattice.testing import ScriptedModelClient, assert_well_formed


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


# -- SPEC 7 conformance ----------------------------------------------------------------------


def only_results(agent, index=2):
    return results_of(agent.get_history()[index])


SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"]}


def test_submit_output_tool_injected_and_ends_query():
    agent, client = scripted([reply(submit({"answer": 42}))], output_schema=SCHEMA)
    messages = list(agent.query("hi"))
    r = messages[-1]
    assert r.subtype == "success" and r.is_error is False
    assert r.structured_result == {"answer": 42}
    assert json.loads(r.result) == {"answer": 42}
    [definition] = [t for t in client.requests[0].tools if t["name"] == "submit_output"]
    assert definition["input_schema"] == SCHEMA
    assert len(client.requests) == 1
    assert_well_formed(agent.get_history())


def test_invalid_payload_is_error_and_loop_continues():
    agent, client = scripted([reply(submit({"answer": "lots"}, "s1")),
                              reply(submit({"answer": 7}, "s2"))], output_schema=SCHEMA)
    r = agent.prompt("go")
    [block] = only_results(agent)
    assert block.get("is_error") is True and "answer" in result_text(block)
    assert r.structured_result == {"answer": 7} and len(client.requests) == 2


def test_missing_output_even_if_text_is_json():
    agent, _ = scripted(['{"answer": 1}'], output_schema=SCHEMA)
    r = agent.prompt("go")
    assert r.subtype == "error_missing_output" and r.is_error is True
    assert isinstance(r.error, MissingOutputError)
    assert r.structured_result is None


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def test_dataclass_output_is_parsed_into_the_dataclass():
    agent, client = scripted([reply(submit({"x": 3, "y": 4}))], output_schema=Point)
    r = agent.prompt("go")
    assert r.structured_result == Point(3, 4)
    schema = [t for t in client.requests[0].tools if t["name"] == "submit_output"][0]
    assert set(schema["input_schema"]["properties"]) == {"x", "y"}


def test_dataclass_output_rejects_wrong_types():
    agent, _ = scripted([reply(submit({"x": "no"}, "s1")), reply(submit({"x": 1}, "s2"))],
                        output_schema=Point)
    assert agent.prompt("go").structured_result == Point(1, 0)
    assert only_results(agent)[0].get("is_error") is True


def test_typeddict_output():
    agent, _ = scripted([reply(submit({"title": "Alien"}, "s1")),
                         reply(submit({"title": "Alien", "year": 1979}, "s2"))],
                        output_schema=Movie)
    r = agent.prompt("go")
    assert r.structured_result == {"title": "Alien", "year": 1979}
    assert only_results(agent)[0].get("is_error") is True


class ParseSchema:
    def json_schema(self):
        return {"type": "object", "properties": {"n": {"type": "integer"}}}

    def parse(self, value):
        if value["n"] < 0:
            raise ValueError("n must be positive-ish")
        return ("parsed", value["n"])


def test_object_with_parse_and_json_schema():
    agent, client = scripted([reply(submit({"n": -1}, "s1")), reply(submit({"n": 5}, "s2"))],
                             output_schema=ParseSchema())
    r = agent.prompt("go")
    assert r.structured_result == ("parsed", 5)
    [block] = only_results(agent)
    assert block.get("is_error") is True and "n must be positive-ish" in result_text(block)
    tools = [t for t in client.requests[0].tools if t["name"] == "submit_output"]
    assert tools[0]["input_schema"] == ParseSchema().json_schema()


class FakePydanticModel:
    def __init__(self, **data):
        self.data = data

    def __eq__(self, other):
        return isinstance(other, FakePydanticModel) and other.data == self.data

    @classmethod
    def model_json_schema(cls):
        return {"type": "object", "properties": {"name": {"type": "string"}},
                "required": ["name"]}

    @classmethod
    def model_validate(cls, value):
        if value["name"] == "bad":
            raise ValueError("name may not be bad")
        return cls(**value)


def test_model_validate_class():
    agent, _ = scripted([reply(submit({"name": "bad"}, "s1")), reply(submit({"name": "ok"}, "s2"))],
                        output_schema=FakePydanticModel)
    r = agent.prompt("go")
    assert r.structured_result == FakePydanticModel(name="ok")
    assert "name may not be bad" in result_text(only_results(agent)[0])


def test_submit_output_must_be_alone_in_its_batch():
    calls = []
    other = Tool("other", "Other.", {"type": "object"}, lambda i: calls.append(i) or "x")
    agent, client = scripted([
        reply(submit({"answer": 1}, "s1"), tool_use("other", {}, "o1")),
        reply(submit({"answer": 2}, "s2"), submit({"answer": 3}, "s3")),
        reply(submit({"answer": 4}, "s4")),
    ], output_schema=SCHEMA, tools=[other])
    r = agent.prompt("go")
    assert calls == []
    history = agent.get_history()
    for index in (2, 4):
        blocks = results_of(history[index])
        assert len(blocks) == 2
        for block in blocks:
            assert block.get("is_error") is True
            assert "submit_output_exclusive_batch" in result_text(block)
    assert r.structured_result == {"answer": 4} and len(client.requests) == 3


def test_truncated_submit_output_is_not_accepted():
    agent, client = scripted([reply(submit({"answer": 1}, "s1"), stop_reason="max_tokens"),
                              reply(submit({"answer": 2}, "s2"))], output_schema=SCHEMA)
    r = agent.prompt("go")
    assert r.structured_result == {"answer": 2} and len(client.requests) == 2
    assert "max_tokens" in result_text(only_results(agent)[0])


@dataclasses.dataclass
class Wrapper:
    point: Point
    label: str


def test_nested_dataclass_output():
    agent, _ = scripted([reply(submit({"point": {"x": 1, "y": 2}, "label": "p"}))],
                        output_schema=Wrapper)
    r = agent.prompt("go")
    assert r.structured_result == Wrapper(Point(1, 2), "p")


def test_end_turn_with_an_output_contract_is_missing_output():
    ender = Tool("ender", "E.", {"type": "object"},
                 lambda a: __import__("lattice").ToolResult("stop here", end_turn=True))
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("ender", id="1"))]), tools=[ender],
        output_schema={"type": "object"})
    result = agent.prompt("go")
    assert result.subtype == "error_missing_output" and result.result == "stop here"


def test_output_format_validates_the_final_text_and_retries():
    client = ScriptedModelClient(["not json", '{"city": 5}', '{"city": "Paris"}'])
    agent = Agent(model="m", model_client=client,
                  output_format={"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]})
    result = agent.prompt("go")
    assert result.subtype == "success" and result.structured_result == {"city": "Paris"}
    assert client.requests[0].output_format["required"] == ["city"]
    assert client.requests[0].tools == []  # no submit_output tool
    feedback = [m["content"] for m in agent.get_history() if m["role"] == "user"][1:]
    assert "JSON" in feedback[0] and "city" in feedback[1]


def test_output_format_refusal_and_retry_limit():
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply("no", stop_reason="refusal")]), output_format={"type": "object"})
    assert agent.prompt("go").subtype == "error_missing_output"
    agent = Agent(model="m", model_client=ScriptedModelClient(["a", "b"]),
                  output_format={"type": "object"}, max_output_retries=1)
    result = agent.prompt("go")
    assert result.subtype == "error_max_output_retries" and result.structured_result is None
    with pytest.raises(ValueError, match="not both"):
        Agent(model="m", model_client=ScriptedModelClient([]), output_format={"type": "object"},
              output_schema={"type": "object"})
