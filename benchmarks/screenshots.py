"""Screenshots of what a user sees (issue 31), in headless Chromium (Debian's, installed or fetched: `slm.browser`): pages of the Ray
dashboard (token auth on: the session cookie the dashboard's own login sets, set through the DevTools
protocol), TensorBoard or any local URL, each saved as a PNG.

    .venv/bin/python benchmarks/screenshots.py --ray http://127.0.0.1:8265 \\
        docs/usage/dashboard_jobs.png='#/jobs' docs/usage/dashboard_actors.png='#/actors'
    .venv/bin/python benchmarks/screenshots.py docs/usage/tensorboard.png=http://127.0.0.1:6006/#timeseries

A target is PATH=URL; with --ray, a URL starting with '#' is a dashboard page. --wait seconds for the
page's own requests before the shot (the dashboard polls its API).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp  # Ray's dependency: a WebSocket client for the DevTools protocol

from slm.browser import chromium


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevTools:
    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})


async def shoot(targets: list[tuple[Path, str]], ray: str | None, width: int, height: int, wait: float) -> None:
    port = free_port()
    profile = tempfile.mkdtemp(prefix="slm-chromium-")
    browser = chromium().popen(f"--remote-debugging-port={port}", "about:blank", profile=profile,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=1).read())
                page = next(p for p in pages if p["type"] == "page")
                break
            except (OSError, StopIteration):
                time.sleep(0.2)
        async with aiohttp.ClientSession() as session, session.ws_connect(page["webSocketDebuggerUrl"],
                                                                          max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Network.enable")
            await tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                             mobile=False)
            if ray:  # what the dashboard's token box does: the token in its HttpOnly cookie
                token = (Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")).expanduser()
                         .read_text().strip())
                await tools.call("Network.setCookie", name="ray-authentication-token", value=token, url=ray,
                                 httpOnly=True, sameSite="Strict")
            for path, url in targets:
                full = f"{ray.rstrip('/')}/{url}" if ray and url.startswith("#") else url
                await tools.call("Page.navigate", url=full)
                await asyncio.sleep(wait)
                shot = await tools.call("Page.captureScreenshot", format="png")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(base64.b64decode(shot["data"]))
                print(f"{path}: {full}", flush=True)
    finally:
        browser.terminate()
        browser.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("targets", nargs="+", help="PATH=URL")
    p.add_argument("--ray", help="the Ray dashboard's URL: its token (~/.ray/auth_token) set as the login cookie")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=900)
    p.add_argument("--wait", type=float, default=6.0)
    args = p.parse_args()
    targets = [(Path(t.split("=", 1)[0]), t.split("=", 1)[1]) for t in args.targets]
    asyncio.run(shoot(targets, args.ray, args.width, args.height, args.wait))


if __name__ == "__main__":
    main()
