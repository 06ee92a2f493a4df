"""Before a one-line error, the programs wait for the library threads still at work, but not
for the idle workers of thread pools (the interpreter shuts those down at exit): orbax keeps
one, and waiting for it held every failed run's exit for the whole 30-second timeout."""

import threading
from concurrent.futures import ThreadPoolExecutor

from jaxtrans.programs.cli import finish_background_threads


def test_an_idle_pool_worker_is_not_waited_for_and_a_working_thread_is(monkeypatch):
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idle_pool")
    pool.submit(lambda: None).result()  # its worker now waits for more work
    release = threading.Event()
    working = threading.Thread(target=release.wait, name="still_at_work")
    working.start()

    joined = []
    join = threading.Thread.join

    def recorded_join(thread, timeout=None):
        joined.append(thread.name)
        if thread is working:
            release.set()  # the work ends while it is waited for
        join(thread, timeout)

    monkeypatch.setattr(threading.Thread, "join", recorded_join)
    try:
        finish_background_threads(timeout=10.0)
    finally:
        monkeypatch.undo()
        release.set()
        pool.shutdown()

    assert "still_at_work" in joined
    assert not [name for name in joined if name.startswith("idle_pool")]
    assert not working.is_alive()
