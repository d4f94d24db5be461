"""Issue 13, item 1: the native reader drained (GIL released) while scrape threads read its
aggregates and launch shapes, with a producer writing: once a segfault 3 runs of 3 (the launch
shapes were a table the drain grew). Run in a child process, so that a crash is a failed test."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import threading, time
    import numpy as np
    from gpuobs import _native
    from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE, Segment

    directory = __import__("sys").argv[1]
    writer = _native.Writer(directory, event_ring_records=1 << 12, launch_ring_records=1 << 10, kernel_slots=65536,
                            name_arena_bytes=1 << 22)
    for slot in range(2000):
        writer.register_kernel(f"kernel_{slot}")
    segment = Segment(writer.path, batch_records=512)
    stop = threading.Event()
    events = np.zeros(64, dtype=EVENT_DTYPE)
    events["kind"] = 1
    launch = np.zeros(1, dtype=LAUNCH_DTYPE)
    launch["kind"] = 1
    seen = {"events": 0, "scrapes": 0}

    def produce():
        slot = 0
        while not stop.is_set():
            slot = (slot + 7) % 2000
            events["kernel_slot"] = slot
            writer.put_events(0, events)
            launch["kernel_slot"] = slot
            writer.write_launch(launch)
            writer.count_launch(slot, [slot % 97 + 1, 1, 1], [128, 1, 1])
            writer.publish()

    def drain():
        while not stop.is_set():
            seen["events"] += len(segment.read_events(0))
            segment.read_launches()

    def scrape():
        while not stop.is_set():
            segment.reader.launch_shapes()
            segment.aggregates()
            segment.counters()
            seen["scrapes"] += 1

    threads = [threading.Thread(target=f) for f in (produce, drain, scrape, scrape)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join()
    assert seen["events"] > 0 and seen["scrapes"] > 0, seen
    print("ok", seen)
""")


def test_drain_and_scrapes_on_other_threads_do_not_crash(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("ok")
