"""The console at 10,000 skills: how large a scope page is and how long a browser takes to show it.

    python -m bench.console                  # 10,000 skills; prints one row
    python -m bench.console --skills 400 --runs 5

A memory store gets one agent-shared scope of N skills (a SKILL.md each, one commit per
1,000), the console serves it (`skillfs.console.serve`) and Debian's headless chromium
(Playwright, never its own browser download) signs in and opens the scope page `runs` times.
Reported, as medians: the HTML's size, the server's time to the last byte (navigation start
to responseEnd), the load event (navigation start to loadEventEnd), first contentful paint,
and the page's height in pixels.
"""

from __future__ import annotations

import argparse
import statistics

from playwright.sync_api import sync_playwright

import skillfs
from skillfs.console import make_app, serve
from skillfs.model import File, Put, Remove, Scope

CHROMIUM = "/usr/bin/chromium"
TOKEN = "bench-console-token-0123456789"
SCOPE = Scope.shared("support-bot")

TIMING = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  return {response: nav.responseEnd, load: nav.loadEventEnd,
          fcp: fcp ? fcp.startTime : null, height: document.documentElement.scrollHeight};
}"""


def fill(store: skillfs.Store, n: int) -> None:
    for start in range(0, n, 1000):
        puts: list[Put | Remove] = []
        for i in range(start, min(n, start + 1000)):
            name = f"skill-{i:05d}"
            md = f"---\nname: {name}\ndescription: Skill number {i}, a benchmark.\n---\n# {i}\n"
            puts.append(Put(SCOPE, name, {"SKILL.md": File(md.encode())}))
        store.commit(puts)


def measure(skills: int, runs: int) -> dict[str, float]:
    store = skillfs.open_store("memory://")
    fill(store, skills)
    server = serve(make_app(store, admin_token=TOKEN))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(base_url=server.url)
            page.goto("/")
            page.fill("#token", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_selector("h1")
            samples: dict[str, list[float]] = {"bytes": [], "response": [], "load": []}
            samples.update(fcp=[], height=[])
            for _ in range(runs):
                resp = page.goto(f"/{SCOPE.prefix}", wait_until="load")
                assert resp is not None and resp.ok
                samples["bytes"].append(len(resp.body()))
                got = page.evaluate(TIMING)
                for key in ("response", "load", "fcp", "height"):
                    if got[key] is not None:
                        samples[key].append(float(got[key]))
            browser.close()
    finally:
        server.stop()
        store.close()
    return {k: statistics.median(v) for k, v in samples.items() if v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    r = measure(args.skills, args.runs)
    print(
        f"{args.skills} skills: HTML {r['bytes'] / 1024:.0f} KiB, "
        f"last byte {r['response']:.0f} ms, "
        f"load event {r['load']:.0f} ms, first contentful paint {r.get('fcp', 0):.0f} ms, "
        f"page {r['height']:.0f} px high"
    )


if __name__ == "__main__":
    main()
