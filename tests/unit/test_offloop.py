"""sbemu.offloop: work on a worker thread, one run at a time, failures reported to the owner."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from sbemu.offloop import OffLoopJob


def test_one_run_at_a_time_and_failures_reach_the_owner() -> None:
    async def run() -> None:
        failures: list[BaseException] = []
        release = threading.Event()
        ran: list[int] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            job = OffLoopJob(asyncio.get_running_loop(), pool, failures.append)

            def work(n: int) -> None:
                release.wait(10)
                ran.append(n)

            assert job.start(work, 1) and job.running
            assert not job.start(work, 2)  # one under way: nothing started
            release.set()
            await job.wait()
            await asyncio.sleep(0)  # the done callback runs on the loop
            assert ran == [1] and not job.running and failures == []

            def fail() -> None:
                raise OSError("disk gone")

            assert job.start(fail)
            await job.wait()
            await asyncio.sleep(0)
            assert [str(e) for e in failures] == ["disk gone"] and not job.running
            assert job.start(work, 3)  # a failed run does not block the next
            await job.wait()
            assert ran == [1, 3]

    asyncio.run(run())
