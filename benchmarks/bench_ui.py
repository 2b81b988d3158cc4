"""Speed targets of `gpuplan ui`: the page's first paint (formerly 1 s) and a train estimate's
round trip through the server (formerly 200 ms: the request, the command run with --json, the
figures and the table, the answer parsed), as ratios to the reference workload timed in the same
run (reference.py).

First paint is Chromium's first-contentful-paint of `/` in a fresh page (headless, the system's
`chromium` driven by Playwright, as in the browser tests), after one visit warmed the server's
caches; the round trip is timed in the browser (fetch of /api/train and its JSON) for plans of
growing size, each a new request shape. Both: best of several runs.

Run: .venv/bin/python benchmarks/bench_ui.py   (exits 1 if a target is missed; 2 without a browser)
"""

from __future__ import annotations

import os
import shutil
import sys
import threading

from reference import ratio, reference_s, verdict

PAINT_TARGET_RATIO = ratio(1.0)
ROUND_TRIP_TARGET_RATIO = ratio(0.2)
PLANS = [  # (model, query): each a shape the server has not answered yet
    ("llama-3.1-8b", "gpus=8&zero=1"),
    ("llama-3.1-70b", "gpus=64&tp=8&pp=2&zero=1&seq_len=8192&global_batch=512&tokens=2T&recompute=selective"),
    ("llama-3.1-70b", "gpus=128&tp=8&pp=4&zero=1&seq_len=8192&global_batch=1024&tokens=2T"),
    ("mixtral-8x7b", "gpus=32&tp=2&ep=8&zero=1&global_batch=256"),
    ("llama-3.1-405b", "gpus=1024&tp=8&pp=16&zero=1&seq_len=8192&global_batch=2048&recompute=full"),
]


def main() -> int:
    chromium = os.environ.get("GPUPLAN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if not chromium:
        print("no Chromium or no playwright: apt-get install chromium; pip install playwright")
        return 2
    from gpuplan.cli.web.server import make_server, warm

    srv = make_server(0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    warm().join()  # as a user finds it: started, not still warming up
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)  # the first visit fills the server's caches (page, plotly.js)
        paints, ready = [], []
        for _ in range(5):
            pg = browser.new_page()
            pg.goto(url)
            pg.wait_for_function("document.body.dataset.state === 'ready'")
            paints.append(pg.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime") / 1e3)
            ready.append(pg.evaluate("performance.getEntriesByName('gpuplan-forms-ready')[0].startTime") / 1e3)
            pg.close()
        trips = []
        for model, query in PLANS:
            seconds = page.evaluate(
                """async (path) => { const t0 = performance.now(); const r = await fetch(path);
                   const res = await r.json(); if (!res.doc) throw new Error(JSON.stringify(res.error));
                   return (performance.now() - t0) / 1e3; }""",
                f"/api/train?model={model}&{query}",
            )
            trips.append((seconds, model, query))
        browser.close()
    srv.shutdown()
    ref = reference_s()
    ok = True
    _, passed, text = verdict(min(paints), ref, PAINT_TARGET_RATIO)
    ok &= passed
    print(f"first paint of the page: {min(paints) * 1e3:.0f} ms (forms ready {min(ready) * 1e3:.0f} ms) = {text}")
    for seconds, model, query in trips:
        print(f"  train round trip {model} {query}: {seconds * 1e3:.1f} ms")
    worst = max(s for s, _, _ in trips)
    _, passed, text = verdict(worst, ref, ROUND_TRIP_TARGET_RATIO)
    ok &= passed
    print(f"train estimate round trip, slowest of {len(trips)} new plans: {worst * 1e3:.1f} ms = {text}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
