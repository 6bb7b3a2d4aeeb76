"""Reading a turn that ended on a call: both formats, and every way a call can be bad (an
observation for the policy, never an exception)."""

import pytest

from rlvr_jax.envs.calls import CALL_FORMATS
from rlvr_jax.verify.toolbox import check_call

TOOLS = ["calculator", "python"]


@pytest.mark.parametrize("fmt", ["tag", "hermes"])
def test_a_rendered_call_reads_back(fmt):
    f = CALL_FORMATS[fmt]
    text = "let me compute " + f.render("calculator", {"expression": "12*34"})
    assert any(text.endswith(s) for s in f.stop_texts(TOOLS))
    assert f.parse(text, TOOLS) == ("calculator", {"expression": "12*34"})


@pytest.mark.parametrize("turn,why", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+"</tool_call>',
     "not valid JSON"),
    ("<tool_call>" + "[" * 5000 + "</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "calculator", "args": {}}</tool_call>', "a call is"),
    ('{"name": "calculator"}</tool_call>', "has no <tool_call>"),
    ("just an answer", "no tool call found"),
    ("<tool_call>" + "1" * 30_000 + "</tool_call>", "too long"),
])
def test_malformed_hermes_calls_say_why(turn, why):
    got = CALL_FORMATS["hermes"].parse(turn, TOOLS)
    assert isinstance(got, str) and why in got, got


def test_arguments_as_a_json_string_are_read():
    turn = '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"x=1\\"}"}</tool_call>'
    assert CALL_FORMATS["hermes"].parse(turn, TOOLS) == ("python", {"code": "x=1"})


@pytest.mark.parametrize("name,args,why", [
    ("search", {"q": "x"}, "not available"),
    (["calculator"], {}, "not available"),
    ("calculator", {"expression": 5}, "must be a string, not int"),
    ("calculator", {"expression": True}, "must be a string, not bool"),
    ("calculator", {}, "missing ['expression']"),
    ("calculator", {"expression": "1", "extra": 1}, "unexpected ['extra']"),
    ("calculator", "1+1", "must be a JSON object"),
    ("sort", {"items": [1]}, "not available"),  # a known tool this environment does not offer
])
def test_bad_calls_are_named(name, args, why):
    assert why in check_call(name, args, TOOLS)


SCHEMAS = {
    "get": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
    "restock": {"type": "object", "properties": {"sku": {"type": "string"},
                                                 "quantity": {"type": "integer"}},
                "required": ["sku", "quantity"]},
    "list": {"type": "object", "properties": {}, "required": []},
}


@pytest.mark.parametrize("tool,args,text", [
    ("get", {"sku": 'A7 {"x"}'}, '<get>A7 {"x"}</get>'),  # one string argument: raw
    ("restock", {"sku": "A7", "quantity": 3}, '<restock>{"sku":"A7","quantity":3}</restock>'),
    ("list", {}, "<list></list>"),
])
def test_the_tag_format_takes_other_tools_arguments_as_json(tool, args, text):
    f = CALL_FORMATS["tag"]
    assert f.render(tool, args, SCHEMAS) == text
    assert text.endswith(f.stop_texts(list(SCHEMAS), SCHEMAS)[list(SCHEMAS).index(tool)])
    assert f.parse("ok " + text, list(SCHEMAS), SCHEMAS) == (tool, args)


@pytest.mark.parametrize("text,why", [
    ('<restock>{"sku": "A7", </restock>', "not valid JSON"),
    ("<restock>[1, 2]</restock>", "must be a JSON object"),
    ('<restock>{"sku": "A7", "quantity": "3"}</restock>', "must be an integer"),
    ('<list>{"x": 1}</list>', "unexpected ['x']"),
])
def test_bad_tag_arguments_are_named(text, why):
    got = CALL_FORMATS["tag"].parse(text, list(SCHEMAS), SCHEMAS)
    if isinstance(got, tuple):
        got = check_call(*got, list(SCHEMAS), SCHEMAS)
    assert why in got, got
