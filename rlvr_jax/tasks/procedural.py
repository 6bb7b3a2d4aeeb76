"""Procedural task generators and standard-format loaders for the SQL, tool-use, logic and
retrieval verifiers. Each returns verifier jobs without a `completion` (the policy supplies
it) plus a `question` to prompt with; all are pure functions of their seed.

Loaders:
  sql        JSONL {"question", "query" (gold SQL), "schema" (SQL script) | "db_path" (.sqlite)}:
             the gold query runs here, on the host (trusted), to give the expected rows
  tool       JSONL {"question", "expected", "tools"?}
  logic      JSONL {"premises": [...], "target"?, "question"?}
  retrieval  SQuAD v1.1/v2.0 JSON ({"data": [{"paragraphs": [{"context", "qas": [...]}]}]});
             unanswerable v2 questions are skipped
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from rlvr_jax.data.loaders import DatasetError

NAMES = ["ann", "bo", "cy", "di", "ed", "flo", "gus", "hal", "ivy", "jo"]
CITIES = ["paris", "rome", "oslo", "lima"]


# ----------------------------------------------------------------------------- SQL
def _run_gold(schema: str, query: str, where: str) -> list:
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(schema)
        return [list(r) for r in con.execute(query).fetchall()]
    except sqlite3.Error as e:
        raise DatasetError(f"{where}: the gold query fails: {e}") from None
    finally:
        con.close()


def sql_tasks(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 0x5C1])
    out = []
    for _ in range(count):
        rows = [(n, int(rng.integers(18, 70)), CITIES[int(rng.integers(len(CITIES)))])
                for n in rng.choice(NAMES, size=6, replace=False)]
        schema = "CREATE TABLE people(name TEXT, age INT, city TEXT);\n" + "".join(
            f"INSERT INTO people VALUES ('{n}', {a}, '{c}');\n" for n, a, c in rows)
        age, city = int(rng.integers(20, 60)), CITIES[int(rng.integers(len(CITIES)))]
        if rng.random() < 0.5:
            q = f"Names of people older than {age}, alphabetically."
            gold, ordered = f"SELECT name FROM people WHERE age > {age} ORDER BY name", True
        else:
            q = f"How many people live in {city}?"
            gold, ordered = f"SELECT COUNT(*) FROM people WHERE city = '{city}'", False
        out.append({"question": q, "schema": schema, "ordered": ordered,
                    "expected": _run_gold(schema, gold, "generated")})
    return out


def load_sql(path: str) -> list[dict]:
    out = []
    for n, row in _jsonl(path):
        where = f"{path}:{n}"
        if "db_path" in row:
            con = sqlite3.connect(f"file:{row['db_path']}?mode=ro", uri=True)
            schema = "\n".join(con.iterdump())
            con.close()
        else:
            schema = _need(row, "schema", where)
        query = _need(row, "query", where)
        out.append({"question": _need(row, "question", where), "schema": schema,
                    "ordered": "order by" in query.lower(),
                    "expected": _run_gold(schema, query, where)})
    return out


# ----------------------------------------------------------------------------- tool use
def tool_tasks(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 0x7001])
    out = []
    for _ in range(count):
        a, b, c = (int(x) for x in rng.integers(2, 50, size=3))
        if rng.random() < 0.5:
            out.append({"question": f"Use a tool: what is ({a} + {b}) * {c}?",
                        "tools": ["calculator"], "expected": (a + b) * c})
        else:
            items = [int(x) for x in rng.integers(0, 100, size=5)]
            out.append({"question": f"Use a tool to sort {items} in descending order.",
                        "tools": ["sort"], "expected": sorted(items, reverse=True)})
    return out


def load_tool(path: str) -> list[dict]:
    return [{"question": _need(r, "question", f"{path}:{n}"),
             "expected": _need(r, "expected", f"{path}:{n}"),
             "tools": r.get("tools", ["calculator", "python", "sort"])} for n, r in _jsonl(path)]


# ----------------------------------------------------------------------------- logic
def logic_tasks(count: int, seed: int, chain: int = 3, distractors: int = 2) -> list[dict]:
    """An implication chain v0 -> v1 -> ... with v0 given, plus distractor implications; the
    target is the chain's end, or its negation when the last link is `-> ~end` (half of the
    tasks, so naming the variable the question asks about is right only half the time)."""
    rng = np.random.default_rng([seed, 0x1061])
    out = []
    for _ in range(count):
        names = [f"p{i}" for i in rng.permutation(10)[: chain + 1 + distractors]]
        end = ("~" if rng.integers(2) else "") + names[chain]
        premises = [f"{names[i]} -> {names[i + 1]}" for i in range(chain - 1)]
        premises += [f"{names[chain - 1]} -> {end}", names[0]]
        for d in range(distractors):
            premises.append(f"{names[chain + 1 + d]} -> {names[int(rng.integers(chain))]}")
        rng.shuffle(premises)
        out.append({"question": "Premises: " + "; ".join(premises)
                    + f". What follows about {names[chain]}?",
                    "premises": premises, "target": end})
    return out


def load_logic(path: str) -> list[dict]:
    out = []
    for n, r in _jsonl(path):
        premises = _need(r, "premises", f"{path}:{n}")
        out.append({"question": r.get("question", "Premises: " + "; ".join(premises)),
                    "premises": premises, "target": r.get("target")})
    return out


# ----------------------------------------------------------------------------- retrieval
def retrieval_tasks(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 0x2E7])
    out = []
    for _ in range(count):
        people = rng.choice(NAMES, size=4, replace=False)
        facts = {str(p): (CITIES[int(rng.integers(len(CITIES)))], int(rng.integers(1900, 2000)))
                 for p in people}
        doc = " ".join(f"{p.title()} was born in {c.title()} in {y}." for p, (c, y) in
                       facts.items())
        who = str(people[int(rng.integers(len(people)))])
        out.append({"question": f"In which year was {who.title()} born? Quote the document.",
                    "document": doc, "answer": [str(facts[who][1])]})
    return out


def load_squad(path: str) -> list[dict]:
    try:
        with open(path) as f:
            data = json.load(f)["data"]
    except (OSError, ValueError, KeyError) as e:
        raise DatasetError(f"{path}: not a SQuAD JSON file ({e})") from None
    out = []
    for article in data:
        for para in article.get("paragraphs", []):
            for qa in para.get("qas", []):
                answers = [a["text"] for a in qa.get("answers", [])]
                if qa.get("is_impossible") or not answers:
                    continue
                out.append({"question": qa["question"], "document": para["context"],
                            "answer": answers})
    return out


# ----------------------------------------------------------------------------- helpers
def _jsonl(path: str):
    try:
        f = open(path)
    except OSError as e:
        raise DatasetError(f"{path}: {e.strerror}") from None
    with f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetError(f"{path}:{n}: not valid JSON ({e.msg})") from None


def _need(row: dict, key: str, where: str):
    if key not in row:
        raise DatasetError(f"{where}: missing field {key!r}")
    return row[key]
