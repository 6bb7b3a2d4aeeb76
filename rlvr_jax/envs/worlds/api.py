"""A staging inventory API over the episode's own SQLite database (seeded from the task):
its endpoints are the tools; a bad request (an unknown product, a negative stock) is an
error the agent reads. The reward compares the final database with the task's goal state by
content, as tau2-bench does: every product's (sku, name, price, stock), order-free.

Task context: {"setup": {"products": [[sku, name, price, stock], ...]},
               "goal": {"products": [[sku, name, price, stock], ...]}}"""

import sqlite3

ARTIFACTS = ["inventory.db"]
_DB = {"conn": None}


def _db():
    if _DB["conn"] is None:
        _DB["conn"] = sqlite3.connect("inventory.db", isolation_level=None)
    return _DB["conn"]


def _row(sku):
    row = _db().execute("SELECT sku, name, price, stock FROM products WHERE sku = ?",
                        (sku,)).fetchone()
    if row is None:
        raise KeyError(f"no product {sku!r}")
    return {"sku": row[0], "name": row[1], "price": row[2], "stock": row[3]}


def list_products() -> list:
    """Every product's sku and name."""
    return [{"sku": s, "name": n} for s, n in
            _db().execute("SELECT sku, name FROM products ORDER BY sku")]


def get_product(sku: str) -> dict:
    """One product: sku, name, price, stock."""
    return _row(sku)


def restock(sku: str, quantity: int) -> dict:
    """Add `quantity` (> 0) units to a product's stock."""
    if quantity <= 0:
        raise ValueError("quantity must be > 0")
    _row(sku)
    _db().execute("UPDATE products SET stock = stock + ? WHERE sku = ?", (quantity, sku))
    return _row(sku)


def sell(sku: str, quantity: int) -> dict:
    """Remove `quantity` (> 0) units from a product's stock (never below 0)."""
    item = _row(sku)
    if quantity <= 0 or quantity > item["stock"]:
        raise ValueError(f"quantity must be in 1..{item['stock']}")
    _db().execute("UPDATE products SET stock = stock - ? WHERE sku = ?", (quantity, sku))
    return _row(sku)


def set_price(sku: str, price: int) -> dict:
    """Set a product's price (cents, >= 0)."""
    if price < 0:
        raise ValueError("price must be >= 0")
    _row(sku)
    _db().execute("UPDATE products SET price = ? WHERE sku = ?", (price, sku))
    return _row(sku)


def setup(products: list = ()):
    db = _db()
    db.execute("CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT, price INTEGER, "
               "stock INTEGER)")
    db.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", [tuple(p) for p in products])


def check(files, goal):
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "inventory.db")
        with open(path, "wb") as f:
            f.write(files["inventory.db"])
        db = sqlite3.connect(path)
        got = sorted(tuple(r) for r in db.execute(
            "SELECT sku, name, price, stock FROM products"))
    want = sorted(tuple(r) for r in goal["products"])
    # Beside the pass/fail score, the share of the goal's rows present as they should be (a
    # reward component the inventory task declares: reward.weights.rows_right).
    right = len(set(want) & set(got)) / max(len(want), 1)
    return {"score": float(want == got), "parts": {"rows_right": right}}
