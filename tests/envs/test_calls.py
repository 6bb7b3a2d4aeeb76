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


def test_the_tag_format_needs_single_string_argument_tools():
    with pytest.raises(ValueError, match="one string argument"):
        CALL_FORMATS["tag"].stop_texts(["calculator", "sort"])
