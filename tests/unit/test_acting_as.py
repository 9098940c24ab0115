"""`store.quotas.acting_as` in a gRPC streaming call: the server runs the call's handler, an
async generator, inside it, and a client that goes away has the generator closed by another
task, whose context never held the credential. Before, resetting it there raised ValueError,
which the server logged as an internal error of the call (seen in `Watch`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from skillfs.store.quotas import Credential, acting_as, current


def test_a_stream_closed_by_another_task_ends_quietly() -> None:
    async def stream() -> AsyncIterator[Credential | None]:
        with acting_as(Credential(name="alice")):
            yield current()
            yield current()

    async def serve_then_go_away() -> Credential | None:
        calls = stream()
        first: Credential | None = await calls.__anext__()
        await asyncio.create_task(calls.aclose())  # another task: a context of its own
        return first

    first = asyncio.run(serve_then_go_away())
    assert first is not None and first.name == "alice"
