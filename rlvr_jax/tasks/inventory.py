"""A goal-state task on the `api` environment (env.kind=api, envs/worlds/api.py): change an
inventory that the agent can see only through the API, judged by the final database.

    double B4   ->  B4's stock is twice what it was     (restock by the current stock)
    clear B4    ->  B4's stock is 0                     (sell the current stock)

The stock is seeded into the episode's SQLite database and appears nowhere in the prompt:
the agent reads it (`get_product`), then writes (`restock` / `sell`). The reward is the
environment's final-state verdict: every product's (sku, name, price, stock) against the
goal rows, by content (the other products must be left as they were). A policy that never
reads guesses a stock in 1..`max_stock`; one whose writes are lost
(experiments/stateful/controls.py: drop_writes) leaves the database as it began. The
demonstrated episode:

    <get_product>B4</get_product><r>{"sku": "B4", ..., "stock": 23}</r>
    <restock>{"sku":"B4","quantity":23}</restock><r>{..., "stock": 46}</r>46
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from rlvr_jax.config.choices import _check
from rlvr_jax.tasks.base import JudgedByItsWorld, ProceduralSplit
from rlvr_jax.tasks.registry import TaskSpec, register

NAMES = ("bolt", "nut", "gear", "cog", "pin", "cam", "rod", "hub")
OPS = ("double", "clear")


@dataclass
class InventoryTaskConfig:
    """`double SKU` / `clear SKU` over a seeded inventory (tasks/inventory.py), env.kind=api."""

    name: str = "inventory"
    products: int = 3  # in each episode's database
    max_stock: int = 49
    heldout_fraction: float = 0.1
    split_seed: int = 0

    def check(self, key: str = "task") -> None:
        _check(1 <= self.products <= 9, f"{key}.products", "must be in [1, 9]")
        _check(2 <= self.max_stock <= 999, f"{key}.max_stock", "must be in [2, 999]")
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction",
               "must be in (0, 1)")


@dataclass(frozen=True)
class Problem:
    op: str  # "double" | "clear"
    target: int  # index into products
    products: tuple  # ((sku, name, price, stock), ...)

    @property
    def sku(self) -> str:
        return self.products[self.target][0]

    @property
    def stock(self) -> int:
        return self.products[self.target][3]

    def goal(self) -> list:
        new = self.stock * 2 if self.op == "double" else 0
        return [[s, n, p, new if i == self.target else q]
                for i, (s, n, p, q) in enumerate(self.products)]


def product_json(sku: str, name: str, price: int, stock: int) -> str:
    """What `get_product` returns, as the environment shows it (session_env._text)."""
    return json.dumps({"sku": sku, "name": name, "price": price, "stock": stock})


@dataclass(frozen=True)
class InventoryTask(JudgedByItsWorld, ProceduralSplit[Problem]):
    products: int = 3
    max_stock: int = 49
    heldout_fraction: float = 0.1
    split_seed: int = 0

    heldout_salt: ClassVar[int] = 0x1A7E

    def key(self, problem: Problem) -> str:
        return f"{self.prompt(problem)}|{problem.products}"

    def draw(self, rng: np.random.Generator, count: int) -> list[Problem]:
        out = []
        for _ in range(count):
            skus = rng.choice(26 * 9, size=self.products, replace=False)
            rows = tuple((chr(65 + int(s) // 9) + str(int(s) % 9 + 1),
                          NAMES[int(rng.integers(len(NAMES)))], int(rng.integers(100, 1000)),
                          int(rng.integers(1, self.max_stock + 1))) for s in skus)
            out.append(Problem(OPS[int(rng.integers(len(OPS)))],
                               int(rng.integers(self.products)), rows))
        return out

    def prompt(self, problem: Problem) -> str:
        return f"{problem.op} {problem.sku}\n"

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return max(count_tokens(f"{op} Z9\n") for op in OPS)

    @staticmethod
    def tool_context(problem: Problem) -> dict:
        return {"setup": {"products": [list(p) for p in problem.products]},
                "goal": {"products": problem.goal()}}

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        """An answer without acting (the world is unchanged: WRONG whatever it says)."""
        return str(problem.stock * 2 if problem.op == "double" else 0)

    def tool_demonstration(self, problem: Problem, rng: np.random.Generator) -> dict:
        """Read the stock, then write it: two calls (warmstart.py)."""
        sku, name, price, stock = problem.products[problem.target]
        new = stock * 2 if problem.op == "double" else 0
        write = "restock" if problem.op == "double" else "sell"
        return {"calls": [("get_product", {"sku": sku}, product_json(sku, name, price, stock)),
                          (write, {"sku": sku, "quantity": stock},
                           product_json(sku, name, price, new))],
                "answer": str(new)}


def build(t: InventoryTaskConfig, tokenizer) -> InventoryTask:
    return InventoryTask(t.products, t.max_stock, t.heldout_fraction, t.split_seed)


SPEC = register(TaskSpec("inventory", InventoryTaskConfig, build, verifiers=("inprocess",),
                         environment="api", reward_parts=("rows_right",)))
