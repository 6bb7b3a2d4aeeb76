"""Propositional logic: is a claimed conclusion entailed by the premises?

Formulas: variables `[A-Za-z_][A-Za-z0-9_]*`, `~`/`!`/`not`/`¬`, `&`/`and`/`&&`/`∧`,
`|`/`or`/`||`/`∨`, `->`/`=>`/`→`/`⇒`, `<->`/`<=>`/`↔`/`⇔`, parentheses, `T`/`F` (true, false),
markup and punctuation around the claim ignored (`**r**`, `$r$`, `r.`); precedence not > and >
or > -> > <-> (`->` and `<->` right-associative). Entailment is decided exhaustively over truth
tables (at most `MAX_VARIABLES` variables). A job may name a `target` (the task asks what
follows about it): then the claim must be about the target, be entailed by the premises *and*
imply the target on its own (claim |= target). About the target: each of its `&`-parts names
only the target's variables or is a fact (a variable or its negation; the entailment checks it
is true). So a tautology such as `p | ~p`, a restated premise, or all of them joined by `&`
(which implies every target the premises entail: it passed for any of them) earn nothing; for
target `r`, `r`, `~~r` and `q & r` (a derived fact beside it) pass.
Without a target, a tautology earns nothing either: it is entailed by any premises, so it
says nothing about them; any other entailed claim passes (restated premises too), so a task
whose answer is one conclusion names it as the target.
"""

from __future__ import annotations

import itertools
import re
import time

from rlvr_jax.types import Status, Verdict

MAX_VARIABLES = 14
# Bounds that keep a claim's check short and the parser's recursion shallow whatever the text:
# a formula of at most MAX_TOKENS tokens (a truth table of 2^14 rows over it stays ~1 s) nested
# at most MAX_NESTING deep (parentheses, negations, implications).
MAX_TOKENS = 256
MAX_NESTING = 50
_TOKEN = re.compile(r"\s*(<->|->|[()~!&|]|[A-Za-z_][A-Za-z0-9_]*)")
_WORDS = {"not": "~", "and": "&", "or": "|", "!": "~"}
# Other ways the operators are written (the longer first: `<=>` before `=>`)
_SPELLINGS = [("<=>", "<->"), ("⇔", "<->"), ("⟺", "<->"), ("↔", "<->"), ("=>", "->"),
              ("⇒", "->"), ("⟹", "->"), ("→", "->"), ("¬", "~"), ("∧", "&"), ("&&", "&"),
              ("∨", "|"), ("||", "|")]
# Markup and punctuation around a claim (`**r**`, `$r$`, `` `r` ``, `r.`): not part of it
# (str.strip: a pattern anchored at the end retried every start of a long run, quadratic)
_MARKUP, _PUNCTUATION = " \t\r\n\f\v*`$", ".,;"


class ParseError(ValueError):
    pass


def tokenize(text: str) -> list[str]:
    out, pos = [], 0
    for spelled, op in _SPELLINGS:
        text = text.replace(spelled, op)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise ParseError(f"unexpected {text[pos:pos + 10]!r}")
        tok = m.group(1)
        out.append(_WORDS.get(tok, tok))
        pos = m.end()
    return out


def parse(text: str, max_tokens: int | None = None):
    """Formula -> nested tuples: ("var", name) | ("const", bool) | (op, a[, b]). A formula
    longer than `max_tokens` (None: no bound) or nested past MAX_NESTING is a ParseError."""
    toks = tokenize(text)
    if max_tokens is not None and len(toks) > max_tokens:
        raise ParseError(f"{len(toks)} tokens (at most {max_tokens})")
    pos = 0
    nesting = 0

    def nested(build):
        """build() one level deeper."""
        nonlocal nesting
        nesting += 1
        if nesting > MAX_NESTING:
            raise ParseError(f"nested deeper than {MAX_NESTING}")
        node = build()
        nesting -= 1
        return node

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take(expected=None):
        nonlocal pos
        tok = peek()
        if tok is None or (expected and tok != expected):
            raise ParseError(f"expected {expected or 'a formula'}, got {tok!r}")
        pos += 1
        return tok

    def iff():
        left = imp()
        if peek() == "<->":
            take()
            return nested(lambda: ("<->", left, iff()))
        return left

    def imp():
        left = disj()
        if peek() == "->":
            take()
            return nested(lambda: ("->", left, imp()))
        return left

    def disj():
        left = conj()
        while peek() == "|":
            take()
            left = ("|", left, conj())
        return left

    def conj():
        left = unary()
        while peek() == "&":
            take()
            left = ("&", left, unary())
        return left

    def unary():
        tok = peek()
        if tok == "~":
            take()
            return nested(lambda: ("~", unary()))
        if tok == "(":
            take()
            inner = nested(iff)
            take(")")
            return inner
        tok = take()
        if tok in ("T", "F"):
            return ("const", tok == "T")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            raise ParseError(f"unexpected {tok!r}")
        return ("var", tok)

    if not toks:
        raise ParseError("empty formula")
    tree = iff()
    if pos != len(toks):
        raise ParseError(f"trailing {toks[pos]!r}")
    return tree


def variables(tree) -> set[str]:
    if tree[0] == "var":
        return {tree[1]}
    if tree[0] == "const":
        return set()
    return set().union(*(variables(t) for t in tree[1:]))


def evaluate(tree, env: dict) -> bool:
    op = tree[0]
    if op == "var":
        return env[tree[1]]
    if op == "const":
        return tree[1]
    if op == "~":
        return not evaluate(tree[1], env)
    a, b = evaluate(tree[1], env), evaluate(tree[2], env)
    return {"&": a and b, "|": a or b, "->": (not a) or b, "<->": a == b}[op]


def entails(premises: list, conclusion) -> bool:
    names = sorted(set().union(variables(conclusion), *(variables(p) for p in premises)))
    if len(names) > MAX_VARIABLES:
        raise ParseError(f"{len(names)} variables (at most {MAX_VARIABLES})")
    for values in itertools.product((False, True), repeat=len(names)):
        env = dict(zip(names, values))
        if all(evaluate(p, env) for p in premises) and not evaluate(conclusion, env):
            return False
    return True


def _conjuncts(tree) -> list:
    """The `&`-parts of a formula, nested conjunctions flattened."""
    return _conjuncts(tree[1]) + _conjuncts(tree[2]) if tree[0] == "&" else [tree]


def _is_literal(tree) -> bool:
    return tree[0] == "var" or (tree[0] == "~" and tree[1][0] == "var")


def extract_claim(completion: str) -> str | None:
    """The text after the last 'Conclusion:' (case-insensitive), else the last line, without
    the markup and punctuation around it."""
    m = list(re.finditer(r"conclusion\s*:\s*(.+)", completion, re.I))
    if m:
        return _undecorated(m[-1].group(1))
    lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
    return _undecorated(lines[-1]) if lines else None


def _undecorated(claim: str) -> str:
    return claim.lstrip(_MARKUP).rstrip(_MARKUP + _PUNCTUATION)


def check(job: dict) -> Verdict:
    t0 = time.perf_counter()
    try:
        premises = [parse(p) for p in job["premises"]]
        target = parse(job["target"]) if job.get("target") else None
    except ParseError as e:
        return Verdict(Status.SANDBOX_ERROR, f"bad task: {e}")  # the task, not the answer
    claim_text = extract_claim(job["completion"])
    try:
        claim = parse(claim_text or "", max_tokens=MAX_TOKENS)
        about = variables(target) if target is not None else None
        beyond = [part for part in _conjuncts(claim) if about is not None
                  and not variables(part) <= about and not _is_literal(part)]
        if beyond:
            return Verdict(Status.WRONG, f"{claim_text!r} holds a part that is neither about "
                           "the target nor a fact", time.perf_counter() - t0)
        entailed = entails(premises, claim)
        # no target: the claim must still say something (a tautology holds without premises)
        implies = (not entails([], claim)) if target is None else (
            entailed and entails([claim], target))
    except ParseError as e:
        return Verdict(Status.UNPARSEABLE, f"claim {claim_text!r}: {e}", time.perf_counter() - t0)
    if not entailed:
        detail = f"{claim_text!r} is not entailed by the premises"
    elif target is None:
        detail = f"{claim_text!r} is entailed by the premises" + (
            "" if implies else " but is a tautology (true without them: it earns nothing)")
    elif implies:
        detail = f"{claim_text!r} is entailed by the premises and implies the target"
    else:
        detail = (f"{claim_text!r} is entailed by the premises but does not imply the target "
                  "(a tautology or a restated premise earns nothing)")
    return Verdict(Status.PASS if entailed and implies else Status.WRONG, detail,
                   time.perf_counter() - t0)
