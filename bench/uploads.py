"""Publishing a skill of 2,000 small files through `grpc://` against the store itself: the
upload of its blobs is what a skillfs server adds (docs/server.md, "Blobs and hashes").

    python -m bench.uploads

`skillfs serve` over memory:// and over a SQLite file, each in its own process started here,
and a SQLite file directly;
each publish a new skill of 2,000 distinct files of ~20 bytes (the median of five).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import skillfs
from bench import common
from skillfs.model import Scope
from support.grpc_servers import ADMIN, ServerProcess

SCOPE = Scope.shared("support-bot")
FILES, RUNS = 2_000, 5


def files(run: int) -> dict[str, bytes]:
    skill = f"many-files-{run}"
    notes = {f"references/note-{i:04d}.md": b"note %d of %d\n" % (i, run) for i in range(1, FILES)}
    return {
        "SKILL.md": f"---\nname: {skill}\ndescription: many small files\n---\n".encode(),
        **notes,
    }


def publishes(store: skillfs.Store) -> list[float]:
    seconds = []
    for run in range(RUNS):
        fs = files(run)
        t0 = time.perf_counter()
        store.publish(SCOPE, f"many-files-{run}", fs)
        seconds.append(time.perf_counter() - t0)
    return seconds


def main() -> None:
    results: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, url in [("memory://", "memory://"), ("SQLite", f"sqlite:///{tmp}/served.db")]:
            with (
                ServerProcess(url, Path(tmp) / label) as server,
                skillfs.open_store(f"grpc://{server.address}", token=ADMIN) as store,
            ):
                results.append((f"grpc://, skillfs serve over {label}", publishes(store)))
        with skillfs.open_store(f"sqlite:///{tmp}/skills.db") as store:
            results.append(("SQLite directly", publishes(store)))
    print(common.machine())
    for label, seconds in results:
        runs = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"{label}: median {statistics.median(seconds):.2f} s ({runs})")


if __name__ == "__main__":
    main()
