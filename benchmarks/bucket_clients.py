"""S3 client libraries compared: ranged GETs with N requests in flight, and a LIST.

Which client the Loader's bucket reads use, and how many requests they keep in
flight, comes from these figures. Run from the repository root (a study, not a
test: it times, never asserts)::

    .venv/bin/python -m benchmarks.bucket_clients               # about a minute here
    .venv/bin/python -m benchmarks.bucket_clients --latency 0   # no added latency

A moto S3 server on 127.0.0.1 holds ``--objects`` objects of ``--size`` bytes
(98 of 256 KiB: the chunks of 100,000 x 64 float32 in chunks of 1,024 rows);
between client and server sits a small HTTP proxy of this script that waits
``--latency`` seconds (20 ms) before forwarding each request, as a remote
bucket's round trip does. Each client then fetches every object (whole-object
GETs, and ranged GETs of the whole length) with N requests in flight (N = 1, 4,
16, 64), and lists the prefix. Best of ``--repeat``; the proxy counts requests.

Clients: obstore (Rust ``object_store``, asyncio), s3fs (fsspec, aiobotocore,
asyncio), pyarrow's ``S3FileSystem`` (C++ AWS SDK, blocking calls: N threads).

Last measured (2026-11-29, 2-core machine, proxy and moto in this process, 20 ms
per request, 98 x 256 KiB, best of 2; ``benchmarks/results/bucket-clients-cpu.md``):
with 16 in flight obstore 0.27-0.30 s (82-90 MiB/s, GETs only), s3fs 0.56-0.78 s
(a HEAD before each whole-object GET, at most 10 in flight), pyarrow 0.56-0.65 s
(a HEAD before every GET); with 1 in flight obstore 2.46-2.66 s (about 25 ms a
request), the others 2.56-5.21 s; 64 in flight was slower than 16 for obstore
and s3fs. Chosen: obstore, 16 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BUCKET = "bench-bucket"
KEY, SECRET, REGION = "testing", "testing", "us-east-1"


class LatencyProxy:
    """An HTTP proxy on 127.0.0.1 that waits ``latency`` seconds before forwarding a request.

    Counts the requests by method and the most in flight at once.
    """

    def __init__(self, target: str, latency: float) -> None:
        self.target, self.latency = target, latency
        self.requests = 0
        self.by_method: dict[str, int] = {}
        self.in_flight = self.max_in_flight = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait()

    def _run(self) -> None:
        from aiohttp import ClientSession, TCPConnector, web

        asyncio.set_event_loop(self.loop)

        async def handle(request: web.Request) -> web.StreamResponse:
            if request.path == "/__stats":  # the counts, for a process that runs the proxy
                counts = {
                    "requests": self.requests,
                    "by_method": self.by_method,
                    "max_in_flight": self.max_in_flight,
                }
                if request.query.get("reset"):
                    self.reset()
                return web.json_response(counts)
            self.requests += 1
            self.by_method[request.method] = self.by_method.get(request.method, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.latency)
                body = await request.read()
                headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
                headers["Host"] = request.headers.get("Host", "")
                async with self.session.request(
                    request.method,
                    self.target + request.path_qs,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    auto_decompress=False,
                ) as r:
                    data = await r.read()
                    out = {
                        k: v
                        for k, v in r.headers.items()
                        if k.lower() not in ("transfer-encoding", "content-length", "connection")
                    }
                    if request.method == "HEAD":  # no body: its length is the object's
                        out["Content-Length"] = r.headers.get("Content-Length", "0")
                        return web.Response(status=r.status, headers=out)
                    return web.Response(status=r.status, headers=out, body=data)
            finally:
                self.in_flight -= 1

        async def start() -> None:
            self.session = ClientSession(connector=TCPConnector(limit=0))
            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        self.loop.run_until_complete(start())
        self.ready.set()
        self.loop.run_forever()

    @property
    def endpoint(self) -> str:
        """The proxy's URL."""
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Count from zero again."""
        self.requests, self.by_method, self.max_in_flight = 0, {}, 0


def _obstore(endpoint: str) -> Any:
    from obstore.store import S3Store

    return S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id=KEY,
        secret_access_key=SECRET,
        region=REGION,
        client_options={"allow_http": True},
    )


async def _bounded(n: int, jobs: list[Callable[[], Any]]) -> list[Any]:
    gate = asyncio.Semaphore(n)

    async def one(job: Callable[[], Any]) -> Any:
        async with gate:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


def run_obstore(endpoint: str, keys: list[str], size: int, n: int, ranged: bool) -> int:
    import obstore

    store = _obstore(endpoint)

    async def whole(key: str) -> int:
        return len(await (await obstore.get_async(store, key)).bytes_async())

    async def part(key: str) -> int:
        return len(await obstore.get_range_async(store, key, start=0, end=size))

    fetch = part if ranged else whole
    return sum(asyncio.run(_bounded(n, [lambda k=k: fetch(k) for k in keys])))


def run_s3fs(endpoint: str, keys: list[str], size: int, n: int, ranged: bool) -> int:
    import s3fs

    async def go() -> int:
        fs = s3fs.S3FileSystem(
            key=KEY,
            secret=SECRET,
            client_kwargs={"endpoint_url": endpoint, "region_name": REGION},
            asynchronous=True,
            skip_instance_cache=True,
        )
        session = await fs.set_session()
        try:
            jobs = [
                (lambda k=k: fs._cat_file(f"{BUCKET}/{k}", start=0, end=size))
                if ranged
                else (lambda k=k: fs._cat_file(f"{BUCKET}/{k}"))
                for k in keys
            ]
            return sum(map(len, await _bounded(n, jobs)))
        finally:
            await session.close()

    return asyncio.run(go())


def run_pyarrow(endpoint: str, keys: list[str], size: int, n: int, ranged: bool) -> int:
    from pyarrow import fs as pafs

    host = endpoint.removeprefix("http://")
    s3 = pafs.S3FileSystem(
        access_key=KEY, secret_key=SECRET, region=REGION, endpoint_override=host, scheme="http"
    )

    def one(key: str) -> int:
        with s3.open_input_file(f"{BUCKET}/{key}") as f:
            return len(f.read_at(size, 0) if ranged else f.read())

    with ThreadPoolExecutor(n) as pool:
        return sum(pool.map(one, keys))


def list_obstore(endpoint: str) -> int:
    import obstore

    return sum(len(b) for b in obstore.list(_obstore(endpoint), "chunks/"))


def list_s3fs(endpoint: str) -> int:
    import s3fs

    fs = s3fs.S3FileSystem(
        key=KEY,
        secret=SECRET,
        client_kwargs={"endpoint_url": endpoint, "region_name": REGION},
        skip_instance_cache=True,
    )
    return len(fs.ls(f"{BUCKET}/chunks/", detail=True))


def list_pyarrow(endpoint: str) -> int:
    from pyarrow import fs as pafs

    s3 = pafs.S3FileSystem(
        access_key=KEY,
        secret_key=SECRET,
        region=REGION,
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
    )
    return len(s3.get_file_info(pafs.FileSelector(f"{BUCKET}/chunks/")))


class RemoteProxy:
    """A moto server and a `LatencyProxy` in a process of their own (the GIL left to the reader).

    The same counts as `LatencyProxy` (read from the proxy's ``/__stats``).
    """

    def __init__(self, latency: float) -> None:
        import subprocess
        import sys

        code = (
            "import sys, time; from moto.server import ThreadedMotoServer\n"
            "from benchmarks.bucket_clients import LatencyProxy\n"
            "s = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); s.start()\n"
            "t = f'http://127.0.0.1:{s._server.server_port}'\n"
            f"p = LatencyProxy(t, {latency!r})\n"
            "print(t, p.endpoint, flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.process.stdout is not None
        self.target, self.endpoint = self.process.stdout.readline().split()
        self.requests, self.by_method, self.max_in_flight = 0, {}, 0

    def _stats(self, reset: bool) -> None:
        import urllib.request

        url = self.endpoint + "/__stats" + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url) as r:
            counts = json.loads(r.read())
        self.requests, self.by_method = counts["requests"], counts["by_method"]
        self.max_in_flight = counts["max_in_flight"]

    def reset(self) -> None:
        """Count from zero again."""
        self._stats(reset=True)

    def read(self) -> None:
        """Read the counts since the last reset into the attributes."""
        self._stats(reset=False)

    def stop(self) -> None:
        """End the server's process."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


CLIENTS = {
    "obstore": (run_obstore, list_obstore),
    "s3fs": (run_s3fs, list_s3fs),
    "pyarrow": (run_pyarrow, list_pyarrow),
}


def write_reference(name: str, lines: list[str], args: Any, rows: list[dict[str, Any]]) -> None:
    """The table and the rows of a run, as ``benchmarks/results/<name>-cpu.{md,json}``."""
    out = Path(__file__).parent / "results"
    (out / f"{name}-cpu.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}-cpu.json").write_text(
        json.dumps({"schema": 1, "args": vars(args), "rows": rows}, indent=1) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=98)
    parser.add_argument("--size", type=int, default=1024 * 64 * 4)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    target = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    client = boto3.client(
        "s3",
        endpoint_url=target,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    )
    client.create_bucket(Bucket=BUCKET)
    keys = [f"chunks/{i}" for i in range(args.objects)]
    payload = bytes(range(256)) * (args.size // 256)
    for key in keys:
        client.put_object(Bucket=BUCKET, Key=key, Body=payload)
    proxy = LatencyProxy(target, args.latency)
    rows: list[dict[str, Any]] = []
    for n in args.in_flight:
        for ranged in (False, True):
            for name, (run, _) in CLIENTS.items():
                times = []
                for _ in range(args.repeat):
                    proxy.reset()
                    t = time.perf_counter()
                    got = run(proxy.endpoint, keys, args.size, n, ranged)
                    times.append(time.perf_counter() - t)
                    assert got == args.objects * args.size, (name, got)
                rows.append(
                    {
                        "client": name,
                        "get": "range" if ranged else "whole",
                        "in_flight": n,
                        "best_s": min(times),
                        "median_s": statistics.median(times),
                        "requests": proxy.requests,
                        "by_method": dict(proxy.by_method),
                        "max_in_flight": proxy.max_in_flight,
                        "MiB_per_s": args.objects * args.size / min(times) / 2**20,
                    }
                )
                print(json.dumps(rows[-1]))
    for name, (_, listing) in CLIENTS.items():
        times = []
        for _ in range(args.repeat):
            proxy.reset()
            t = time.perf_counter()
            assert listing(proxy.endpoint) == args.objects
            times.append(time.perf_counter() - t)
        rows.append(
            {
                "client": name,
                "get": "list",
                "in_flight": 1,
                "best_s": min(times),
                "median_s": statistics.median(times),
                "requests": proxy.requests,
                "by_method": dict(proxy.by_method),
                "max_in_flight": proxy.max_in_flight,
                "MiB_per_s": 0.0,
            }
        )
        print(json.dumps(rows[-1]))
    lines = [
        f"# S3 clients, {args.objects} x {args.size // 1024} KiB, {args.latency * 1000:.0f} ms "
        "added per request (moto on 127.0.0.1)",
        "",
        "`python -m benchmarks.bucket_clients`; best of "
        f"{args.repeat}; requests counted at the proxy (last round).",
        "",
        "| client | GET | in flight | best s | MiB/s | requests | most in flight |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        methods = ", ".join(f"{k} {v}" for k, v in sorted(r["by_method"].items()))
        lines.append(
            f"| {r['client']} | {r['get']} | {r['in_flight']} | {r['best_s']:.3f} | "
            f"{r['MiB_per_s']:.0f} | {methods} | {r['max_in_flight']} |"
        )
    print("\n".join(lines))
    if args.reference:
        write_reference("bucket-clients", lines, args, rows)
    server.stop()


if __name__ == "__main__":
    main()
