"""How a policy writes a tool call, and how the text of a turn that ended on one is read back.

  hermes  <tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>
          Qwen2.5 / Hermes chat models' format; the turn ends on `</tool_call>`.
  tag     <calculator>2*3</calculator>   <restock>{"sku":"A7","quantity":3}</restock>
          Short enough for a tiny model: a tool with one string argument takes it raw, any
          other its arguments as a JSON object (empty for none); the turn ends on the tool's
          closing tag.

`parse` never raises: it returns (tool, arguments) or a reason the policy will read.
`schemas` (tool -> JSON schema): the environment's tools, the built-in ones by default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from rlvr_jax.verify.toolbox import SCHEMAS

MAX_CALL_CHARS = 20_000  # a call longer than this is malformed (never parsed)


@dataclass(frozen=True)
class CallFormat:
    name: str
    stop_texts: Callable[..., tuple[str, ...]]  # (tools, schemas=None)
    render: Callable[..., str]  # (tool, arguments, schemas=None)
    parse: Callable[..., "tuple[str, dict] | str"]  # (turn, tools, schemas=None)
    observation_prefix: str
    observation_suffix: str


def _single_argument(tool: str, schemas=None) -> str | None:
    schema = (SCHEMAS if schemas is None else schemas).get(tool, {})
    props = schema.get("properties", {})
    if len(props) == 1 and next(iter(props.values()))["type"] == "string":
        return next(iter(props))
    return None


def _tag_parse(turn: str, tools: list[str], schemas=None):
    for tool in tools:
        end = f"</{tool}>"
        if turn.endswith(end):
            start = turn.rfind(f"<{tool}>")
            if start < 0:
                return f"a call ends with {end} but has no <{tool}>"
            body = turn[start + len(tool) + 2: len(turn) - len(end)]
            if len(body) > MAX_CALL_CHARS:
                return "the call is too long"
            raw = _single_argument(tool, schemas)
            if raw is not None:
                return tool, {raw: body}
            if not body.strip():
                return tool, {}
            try:
                arguments = json.loads(body)
            except (ValueError, RecursionError) as e:
                return (f"<{tool}> takes its arguments as a JSON object "
                        f"(not valid JSON: {type(e).__name__})")
            return tool, arguments  # not an object: check_call says so
    return "no tool call found"


def _tag_render(tool: str, arguments: dict, schemas=None) -> str:
    if _single_argument(tool, schemas) is not None:
        return f"<{tool}>{next(iter(arguments.values()))}</{tool}>"
    body = json.dumps(arguments, separators=(",", ":")) if arguments else ""
    return f"<{tool}>{body}</{tool}>"


def _tag_stops(tools: list[str], schemas=None) -> tuple[str, ...]:
    return tuple(f"</{t}>" for t in tools)


HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _hermes_parse(turn: str, tools: list[str], schemas=None):
    if not turn.endswith(HERMES_CLOSE):
        return "no tool call found"
    start = turn.rfind(HERMES_OPEN)
    if start < 0:
        return f"a call ends with {HERMES_CLOSE} but has no {HERMES_OPEN}"
    body = turn[start + len(HERMES_OPEN): len(turn) - len(HERMES_CLOSE)].strip()
    if len(body) > MAX_CALL_CHARS:
        return "the call is too long"
    try:
        call = json.loads(body)
    except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
        return f"the call is not valid JSON ({type(e).__name__})"
    if not isinstance(call, dict) or set(call) - {"name", "arguments"} or "name" not in call:
        return 'a call is {"name": tool, "arguments": {...}}'
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return "the arguments are not valid JSON"
    return call["name"], arguments


def _hermes_render(tool: str, arguments: dict, schemas=None) -> str:
    return f"{HERMES_OPEN}\n{json.dumps({'name': tool, 'arguments': arguments})}\n{HERMES_CLOSE}"


CALL_FORMATS = {
    "tag": CallFormat("tag", _tag_stops, _tag_render, _tag_parse, "<r>", "</r>"),
    "hermes": CallFormat("hermes", lambda tools, schemas=None: (HERMES_CLOSE,), _hermes_render,
                         _hermes_parse, "\n<tool_response>\n", "\n</tool_response>\n"),
}
