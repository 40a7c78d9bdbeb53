"""Drives `long_task(n, delay_ms)` with the official Python MCP SDK and prints one JSON line.

usage: drive_long_task.py URL N DELAY_MS TIMEOUT_S

The SDK reconnects by itself (GET + Last-Event-ID) when a stream breaks. The output records what
the *client* saw, for the Rust test to assert on:
  progress      progress values delivered to the call's progress callback, in order
  notified      progress values seen by the session's message handler (every notification)
  result        the tool's structured result, or null
  error         the exception text if the call failed or timed out
  transport_log the SDK transport's log lines (reconnects, HTTP errors)
"""

import json
import logging
import sys
from datetime import timedelta

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


async def main(url: str, n: int, delay_ms: int, timeout_s: float) -> dict:
    capture = Capture()
    log = logging.getLogger("mcp.client.streamable_http")
    log.setLevel(logging.DEBUG)
    log.addHandler(capture)

    progress, notified = [], []
    out = {"progress": progress, "notified": notified, "result": None, "error": None}

    async def on_progress(value, total, message):
        progress.append(value)

    async def on_message(message):
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ProgressNotification
        ):
            notified.append(message.root.params.progress)

    try:
        async with streamable_http_client(url) as (read, write, _session_id):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                result = await session.call_tool(
                    "long_task",
                    {"n": n, "delay_ms": delay_ms},
                    read_timeout_seconds=timedelta(seconds=timeout_s),
                    progress_callback=on_progress,
                )
                out["result"] = result.structuredContent
                out["is_error"] = result.isError
    except BaseException as exc:  # noqa: BLE001 - report anything, including timeouts in groups
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["transport_log"] = capture.lines
    return out


if __name__ == "__main__":
    url, n, delay_ms, timeout_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    print(json.dumps(anyio.run(main, url, n, delay_ms, timeout_s)), flush=True)
