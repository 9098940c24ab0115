"""Writers creating distinct skills in one scope at once: what the scope's name register costs
them (docs/validation.md, "Two writers at one instant": every commit that creates a name
writes the register, so creators of unrelated names in one scope retry one another).

    python -m bench.creators                 # 8 threads x 50 skills and 1 x 400, 5 runs each

Each thread has a store object of its own (its own connections), all in this process; SQLite
on a temporary file and a Redis started here. Prints the median wall time of each shape.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import skillfs
from bench import common

SHARED = skillfs.Scope.shared("bench")
SHAPES = [(8, 50), (1, 400)]


def skill(name: str) -> dict[str, bytes]:
    return {"SKILL.md": f"---\nname: {name}\ndescription: Does {name}.\n---\n# {name}\n".encode()}


def once(url: str, threads: int, each: int) -> float:
    """Seconds for `threads` writers to create `each` skills apiece in one scope."""
    stores = [skillfs.open_store(url) for _ in range(threads)]
    try:
        stores[0].publish(SHARED, "seed", skill("seed"))

        def work(i: int) -> None:
            for j in range(each):
                stores[i].publish(SHARED, f"s{i}-{j}", skill(f"s{i}-{j}"))

        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(threads)))
        took = time.perf_counter() - started
        assert len(stores[0].skills(SHARED)) == threads * each + 1
        return took
    finally:
        for s in stores:
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        redis, _ = common.redis_server(tmp / "redis", stack)
        urls: dict[str, Callable[[], str]] = {
            "SQLite": lambda: f"sqlite:///{tmp}/{uuid.uuid4().hex}.db",
            "Redis": lambda: f"{redis.url}?prefix=b{uuid.uuid4().hex[:8]}/",
        }
        print(common.machine())
        print(common.row("writers x skills", urls))
        print(common.row("---", ["---"] * len(urls)))
        for threads, each in SHAPES:
            cells = [
                f"{statistics.median(once(make(), threads, each) for _ in range(runs)):.2f} s"
                for make in urls.values()
            ]
            print(common.row(f"{threads} x {each}", cells))


if __name__ == "__main__":
    main()
