"""A persistent Python session: variables, imports and functions defined by one call are
there for the next. A call's prints come back, then the value of its last expression (as
the interactive interpreter shows it), or the error. Time and memory per call and per
episode are the session's limits (env.session). The task's verifier judges the final answer
(no final-state check); `setup(variables=...)` can seed the session's globals."""

import ast as _ast

_SCOPE = {"__name__": "__main__"}


def python(code: str) -> str:
    """Run Python code in a persistent session; prints and the last expression's value come
    back, and everything defined stays for later calls."""
    tree = _ast.parse(code, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<call>", "exec"), _SCOPE)
    if last is not None:
        value = eval(compile(last, "<call>", "eval"), _SCOPE)
        if value is not None:
            return repr(value)
    return ""


def setup(variables: dict = None):
    _SCOPE.update(variables or {})
