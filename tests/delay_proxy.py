#!/usr/bin/env python3
"""A TCP proxy that adds latency: delay_proxy.py LISTEN_PORT TARGET_PORT MS.
Every chunk is forwarded MS/2 ms after it arrived, in each direction, so a
round trip through it takes MS ms more (no tc netem here: PLATFORM.md). It
does not limit the bandwidth. Prints "ready" once it listens."""
import asyncio
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(1 << 20)
            queue.put_nowait((loop.time() + delay, data or None))
            if not data:
                break
    except ConnectionError:
        queue.put_nowait((loop.time(), None))
    try:
        await sender
    except ConnectionError:
        pass


async def main():
    listen, target, ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    delay = ms / 2000.0

    async def serve(cr, cw):
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, tw, delay), pipe(tr, cw, delay), return_exceptions=True)

    server = await asyncio.start_server(serve, "127.0.0.1", listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
