"""Structured output: what a payload is checked against, and the output contract.

``output_schema`` may be a JSON Schema dict, a dataclass or TypedDict type, an object with
``parse(input)`` and ``json_schema()``/``model_json_schema()``, or a pydantic-style class
(``model_validate`` + ``model_json_schema``; pydantic itself is never imported here).

``OutputContract`` holds the rules of SPEC 7 and 11 (``submit_output`` as a tool, or
``output_format`` native): for each reply or submission the loop asks it, and it answers
with a ``Verdict``: end here, or feed this back (or both: a submission's tool_use is
always answered before the query ends).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Tuple, TypeVar

from ..errors import MissingOutputError
from ..messages import text_of, tool_result
from ..tools.calls import not_run
from .endings import Ending

__all__ = ["SUBMIT_OUTPUT_TOOL_NAME", "OutputSchema", "resolve_output_schema",
           "OutputContract", "Verdict", "SchemaObject", "ModelSchemaObject"]

_T_co = TypeVar("_T_co", covariant=True)


class SchemaObject(Protocol[_T_co]):
    """An ``output_schema`` object: ``parse(input)`` gives the value, ``json_schema()`` the
    schema."""

    def parse(self, input: Any) -> _T_co: ...

    def json_schema(self) -> Dict[str, Any]: ...


class ModelSchemaObject(Protocol[_T_co]):
    """An ``output_schema`` object with ``model_json_schema()`` instead of ``json_schema()``."""

    def parse(self, input: Any) -> _T_co: ...

    def model_json_schema(self) -> Dict[str, Any]: ...

SUBMIT_OUTPUT_TOOL_NAME = "submit_output"

DESCRIPTION = ("Submit the final answer. Call this exactly once, alone (no other tool calls "
               "in the same turn), when the task is done; the input is the answer itself. "
               "If it is rejected, fix what the errors say and call it again.")

_WRAP_KEY = "value"


class OutputSchema:
    """A checked output schema: ``json_schema`` for the tool, ``parse`` for the payload.

    ``parse(payload)`` returns the structured result or raises (its message is shown to the
    model). A schema that is not an object is wrapped as ``{"value": schema}``, because a
    tool's input must be an object; the wrapper is removed before ``parse``.
    """

    def __init__(self, json_schema: Dict[str, Any],
                 parse: Optional[Callable[[Any], Any]] = None, *,
                 description: str = DESCRIPTION) -> None:
        from .. import schema

        if not isinstance(json_schema, dict):
            raise ValueError(f"output_schema must give a JSON Schema dict, got {json_schema!r}")
        self.wrapped = json_schema.get("type") != "object"
        self.json_schema = _wrap(json_schema) if self.wrapped else json_schema
        try:
            self.validator = schema.compile(self.json_schema)
        except schema.SchemaError as exc:  # name the user's schema, not our wrapper
            from ..schema._errors import relocate

            prefix = ["properties", _WRAP_KEY] if self.wrapped else []
            raise relocate(exc, prefix, "output_schema") from None
        self.parse = parse
        self.description = description

    def tool_definition(self) -> Dict[str, Any]:
        return {"name": SUBMIT_OUTPUT_TOOL_NAME, "description": self.description,
                "input_schema": self.json_schema}

    def check_text(self, text: str) -> Tuple[bool, Any]:
        """``output_format``: the final reply's text, parsed as JSON, then ``check``."""
        try:
            payload = json.loads(text)
        except ValueError as exc:
            return False, ("Invalid output: the answer must be only the JSON value the "
                           f"output format describes ({exc}). Answer again.")
        ok, value = self.check(payload)
        if ok:
            return ok, value
        return False, value.replace("submit again", "answer again")

    def check(self, payload: Any) -> Tuple[bool, Any]:
        """``(True, result)`` for a valid payload, else ``(False, text for the model)``."""
        from ..schema import ValidationError

        if not isinstance(payload, dict):
            return False, "Invalid output: the input must be a JSON object."
        try:
            self.validator.validate(payload)
        except ValidationError as exc:
            return False, f"Invalid output, fix these and submit again:\n{exc}"
        value = payload[_WRAP_KEY] if self.wrapped else payload
        if self.parse is None:
            return True, value
        try:
            return True, self.parse(value)
        except Exception as exc:
            return False, (f"Invalid output, fix this and submit again:\n"
                           f"{type(exc).__name__}: {exc}")


class Verdict(NamedTuple):
    """The contract's answer: ``feed`` (the content of a user message to write: feedback, or
    the answer to a submission) and/or ``end`` (how the query ends); both None: go on."""

    feed: Optional[Any] = None
    end: Optional[Ending] = None



class OutputContract:
    """One query's output rules: which reply ends the query, which gets feedback, and how
    many bad outputs are allowed (``max_output_retries``: N feedbacks, then the end).

    Without an output schema, every final reply is a success and no tool is special.
    """

    __slots__ = ("output", "native", "retries", "bad")

    def __init__(self, output: Optional[OutputSchema], native: bool,
                 retries: Optional[int]) -> None:
        self.output = output
        self.native = native and output is not None
        self.retries = retries
        self.bad = 0  # invalid outputs so far, this query

    @classmethod
    def of(cls, output: Optional[OutputSchema], native: bool,
           retries: Optional[int]) -> OutputContract:
        """The contract of a query's output settings. Without an output schema it has no
        state (``bad`` is counted only against a schema): one instance serves all."""
        if output is None:
            return _NO_OUTPUT
        return cls(output, native, retries)

    def submits(self, uses: List[Dict[str, Any]]) -> bool:
        """Whether a batch holds a ``submit_output`` call (then it is the contract's, not a
        batch of tools)."""
        return self.output is not None and not self.native and any(
            u.get("name") == SUBMIT_OUTPUT_TOOL_NAME for u in uses)

    def final(self, reply: Dict[str, Any]) -> Verdict:
        """A reply without tool calls: the answer, or what is missing from it."""
        text = text_of(reply["content"])
        output = self.output
        if output is None:
            return Verdict(end=Ending("success", result=text))
        if not self.native:
            return Verdict(end=_missing(text, "the model ended its turn without calling "
                                                 "submit_output"))
        if reply.get("stop_reason") == "refusal":
            return Verdict(end=_missing(text, "the model refused to give the output"))
        ok, value = output.check_text(text)
        if ok:
            return Verdict(end=Ending("success", result=text, structured_result=value))
        end = self._bad_output()
        return Verdict(end=end) if end is not None else Verdict(feed=value)

    def submission(self, uses: List[Dict[str, Any]]) -> Verdict:
        """A batch holding ``submit_output``: alone and valid ends the query; anything else
        is answered with ``is_error`` results and counts as a bad output."""
        output = self.output
        assert output is not None
        if len(uses) > 1:
            return Verdict([not_run(u["id"], "exclusive") for u in uses], self._bad_output())
        use = uses[0]
        ok, value = output.check(use.get("input"))
        if not ok:
            return Verdict([tool_result(use["id"], value, is_error=True)], self._bad_output())
        return Verdict([tool_result(use["id"], "Output accepted.")], Ending(
            "success", structured_result=value,
            result=json.dumps(use.get("input"), ensure_ascii=False)))

    def tool_ended(self, text: str) -> Ending:
        """A tool ended the turn (``end_turn``): a success, unless an output was due."""
        if self.output is not None:
            return _missing(text, "a tool ended the turn before an output was given")
        return Ending("success", result=text)

    def _bad_output(self) -> Optional[Ending]:
        self.bad += 1
        limit = self.retries
        if limit is not None and self.bad > limit:
            return Ending("error_max_output_retries", error=MissingOutputError(
                f"no valid output after {self.bad} attempts (max_output_retries={limit})"))
        return None


_NO_OUTPUT = OutputContract(None, False, None)


def _missing(text: str, why: str) -> Ending:
    return Ending("error_missing_output", result=text, error=MissingOutputError(why))


def _wrap(json_schema: Dict[str, Any]) -> Dict[str, Any]:
    """A tool's input must be an object: ``{"value": schema}``. Keywords that belong at the
    root (``$schema``, ``$defs``, ``definitions``) stay there, so ``#/$defs/...`` still
    resolves."""
    root_keys = ("$schema", "$defs", "definitions")
    inner = {k: v for k, v in json_schema.items() if k not in root_keys}
    wrapper: Dict[str, Any] = {k: json_schema[k] for k in root_keys if k in json_schema}
    wrapper.update({"type": "object", "properties": {_WRAP_KEY: inner},
                    "required": [_WRAP_KEY], "additionalProperties": False})
    return wrapper


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__") \
        and hasattr(tp, "__total__")


def resolve_output_schema(value: Any) -> Optional[OutputSchema]:
    """Turn any accepted ``output_schema`` form into an ``OutputSchema`` (None stays None)."""
    from ..schema import schema_from_type

    if value is None or isinstance(value, OutputSchema):
        return value
    if isinstance(value, dict):
        return OutputSchema(value)
    if isinstance(value, type) and callable(getattr(value, "model_validate", None)) \
            and callable(getattr(value, "model_json_schema", None)):
        make, parse = value.model_json_schema, value.model_validate  # type: ignore[attr-defined]
        return OutputSchema(make(), parse)
    parse = getattr(value, "parse", None)
    if callable(parse) and not isinstance(value, type):
        for name in ("json_schema", "model_json_schema"):
            make = getattr(value, name, None)
            if callable(make):
                return OutputSchema(make(), parse)
    if isinstance(value, type) and dataclasses.is_dataclass(value):
        return OutputSchema(schema_from_type(value), lambda data: build(value, data))
    if _is_typeddict(value):
        return OutputSchema(schema_from_type(value))
    raise ValueError(
        "output_schema must be a JSON Schema dict, a dataclass or TypedDict type, an object "
        "with parse() and json_schema(), or a class with model_validate() and "
        f"model_json_schema(); got {value!r}")


def build(tp: Any, data: Any) -> Any:
    """Build ``tp`` from validated JSON data: dataclasses (nested too), lists, tuples, sets,
    dicts, Optional/Union of those, Enums; everything else as is."""
    from ..schema._hints import class_hints

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(data, dict):
        hints = class_hints(tp, include_extras=False)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: build(hints.get(k, Any), v) for k, v in data.items() if k in names})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)  # JSON has one number type; the dataclass asked for a float
    if origin in (list, set, frozenset) and isinstance(data, list):
        items = [build(args[0] if args else Any, v) for v in data]
        return origin(items) if origin is not list else items
    if origin is tuple and isinstance(data, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(build(args[0], v) for v in data)
        return tuple(build(a, v) for a, v in zip(args, data)) if args else tuple(data)
    if origin is dict and isinstance(data, dict) and len(args) == 2:
        return {k: build(args[1], v) for k, v in data.items()}
    if args and (origin is typing.Union or type(tp).__name__ == "UnionType"):
        if float in args and int not in args and type(data) is int:
            return float(data)  # Optional[float] too, as for a plain float
        for option in args:
            if option is type(None):
                if data is None:
                    return None
                continue
            if isinstance(option, type) and dataclasses.is_dataclass(option) \
                    and isinstance(data, dict):
                return build(option, data)
        return data
    return data
