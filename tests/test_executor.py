"""The notebook executor (`tfbook.build.notebooks.execute_notebook`): kernels that are made to stall are
detected and the notebook reruns in a fresh kernel; silent computation is not a stall; a notebook
that really fails still fails; shutdown is bounded and leaves no process behind."""
import os
import signal
import sys
import time

import nbformat
import psutil
import pytest
from nbclient.exceptions import CellExecutionError

from tfbook.build import notebooks

pytestmark = pytest.mark.slow
STALL_S = 2.0  # short stall threshold so the tests run in seconds


def notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def run(nb, folder, **kw):
    lines = []
    result = notebooks.execute_notebook(nb, folder, path="test.ipynb", stall_seconds=STALL_S, log=lines.append, **kw)
    return result, lines


def test_kernel_runs_on_this_interpreter_and_one_line_is_printed(tmp_path):
    result, lines = run(notebook("import sys; print(sys.executable)", "print(6 * 7)"), tmp_path)
    assert text(result.nb.cells[0]).strip() == sys.executable
    assert text(result.nb.cells[1]) == "42\n" and result.restarts == 0 and result.stalls == []
    assert len(lines) == 1 and lines[0].startswith("tfbook.build.notebooks: executed test.ipynb in ")
    assert lines[0].endswith(" s, restarts 0")


def test_a_request_never_acknowledged_is_a_stall(tmp_path):
    """The kernel is stopped (SIGSTOP) just before the second cell's request is sent: the request is
    never acknowledged, the kernel uses no CPU; the notebook reruns in a fresh kernel."""
    pid_file, mark = tmp_path / "pid", tmp_path / "stopped-once"

    def stop_kernel_once(cell, cell_index):
        if cell_index == 1 and not mark.exists():
            mark.touch()
            os.kill(int(pid_file.read_text()), signal.SIGSTOP)

    nb = notebook(f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))", "print('second cell')")
    start = time.perf_counter()
    result, lines = run(nb, tmp_path, on_cell_execute=stop_kernel_once)
    assert mark.exists() and result.restarts == 1 and text(result.nb.cells[1]) == "second cell\n"
    assert [s.phase for s in result.stalls] == ["execution"] and "never acknowledged" in result.stalls[0].detail
    assert "restarting in a fresh kernel (1 of 2)" in lines[0] and lines[-1].endswith("restarts 1")
    assert time.perf_counter() - start < 30  # the stall cost seconds, not the cell timeout
    assert max(result.shutdown_seconds) < notebooks.SHUTDOWN_SECONDS + 1  # a stopped kernel is killed


def test_a_reply_lost_after_idle_is_a_stall(tmp_path):
    """The kernel drops its execute_reply (it still reports idle): the client would wait forever."""
    mark = tmp_path / "dropped-once"
    drop = f"""
import os
if not os.path.exists({str(mark)!r}):
    open({str(mark)!r}, "w").close()
    _kernel = get_ipython().kernel
    _send = _kernel.session.send
    def _drop_reply(stream, msg_or_type, *args, **kwargs):
        if msg_or_type == "execute_reply":
            _kernel.session.send = _send
            return None
        return _send(stream, msg_or_type, *args, **kwargs)
    _kernel.session.send = _drop_reply
print("first")"""
    result, lines = run(notebook(drop, "print('second')"), tmp_path)
    assert result.restarts == 1 and "reported idle, no reply" in result.stalls[0].detail
    assert text(result.nb.cells[0]) == "first\n" and text(result.nb.cells[1]) == "second\n"


def test_silent_computation_is_not_a_stall(tmp_path):
    """Busy and quiet for several stall thresholds (sleeping, and computing): no restart."""
    nb = notebook(f"import time; time.sleep({3 * STALL_S})", f"t = time.time()\nwhile time.time() - t < {2 * STALL_S}: pass",
                  "print('done')")
    result, lines = run(nb, tmp_path)
    assert result.restarts == 0 and result.stalls == [] and text(result.nb.cells[2]) == "done\n"


def test_a_failing_notebook_fails_without_restarts(tmp_path):
    lines = []
    with pytest.raises(CellExecutionError, match="ValueError"):
        notebooks.execute_notebook(notebook("print(1)", "raise ValueError('really broken')"), tmp_path,
                                   stall_seconds=STALL_S, log=lines.append)
    assert lines == []  # no restart announced


def test_a_slow_cell_hits_its_timeout_and_is_not_restarted(tmp_path):
    from nbclient.exceptions import CellTimeoutError

    lines = []
    with pytest.raises(CellTimeoutError):
        notebooks.execute_notebook(notebook("import time; time.sleep(30)"), tmp_path, timeout=3,
                                   stall_seconds=STALL_S, log=lines.append)
    assert lines == []


def test_a_kernel_that_always_stalls_gives_up(tmp_path):
    pid_file = tmp_path / "pid"

    def stop_kernel(cell, cell_index):
        if cell_index == 1:
            os.kill(int(pid_file.read_text()), signal.SIGSTOP)

    nb = notebook(f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))", "print('never')")
    lines = []
    with pytest.raises(notebooks.KernelStall):
        notebooks.execute_notebook(nb, tmp_path, stall_seconds=STALL_S, max_restarts=1, log=lines.append,
                                   on_cell_execute=stop_kernel)
    assert len(lines) == 2 and "giving up" in lines[-1]


def test_no_kernel_process_survives(tmp_path):
    """The kernel and a child it started (ignoring SIGTERM) are gone when execution returns."""
    pid_file = tmp_path / "pids"
    nb = notebook("import os, signal, subprocess, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                  f"open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')")
    result, _ = run(nb, tmp_path)
    for pid in map(int, pid_file.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert max(result.shutdown_seconds) < notebooks.SHUTDOWN_SECONDS + 1


def test_environment_reaches_the_kernel_and_arguments_are_validated(tmp_path):
    result, _ = run(notebook("import os; print(os.environ['TFBOOK_TEST_VALUE'])"), tmp_path,
                    env={"TFBOOK_TEST_VALUE": "seen"})
    assert text(result.nb.cells[0]) == "seen\n" and "TFBOOK_TEST_VALUE" not in os.environ
    with pytest.raises(ValueError, match="max_restarts"):
        notebooks.execute_notebook(notebook("1"), tmp_path, max_restarts=-1)
    with pytest.raises(ValueError, match="stall_seconds"):
        notebooks.execute_notebook(notebook("1"), tmp_path, stall_seconds=0)
    with pytest.raises(ValueError, match="jobs"):
        notebooks.execute_many([], jobs=0)


def test_build_copy_leaves_the_stored_notebooks_alone(tmp_path):
    """A book of one notebook is executed into a copy with execution off in its config."""
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    (root / "_static").mkdir()
    (root / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: force\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/page\n")
    (root / "book" / "intro.md").write_text("# Intro\n")
    stored = notebook("print(1 + 1)")
    nbformat.write(stored, root / "book" / "page.ipynb")
    before = (root / "book" / "page.ipynb").read_text()
    dest = notebooks.build_copy(tmp_path / "copy", jobs=1, root=root)
    assert (root / "book" / "page.ipynb").read_text() == before
    executed = nbformat.read(dest / "book" / "page.ipynb", as_version=4)
    assert text(executed.cells[0]) == "2\n"
    assert 'execute_notebooks: "off"' in (dest / "_config.yml").read_text()
    assert (dest / "book" / "claims.md").exists()


def test_quick_seconds_are_recorded_with_hysteresis():
    nb = notebook("1")
    notebooks.record_quick_seconds(nb, 12.4)
    assert nb.metadata["tfbook"]["quick_seconds"] == 12
    notebooks.record_quick_seconds(nb, 20.0)  # within a factor 2: kept
    assert nb.metadata["tfbook"]["quick_seconds"] == 12
    notebooks.record_quick_seconds(nb, 30.0)
    assert nb.metadata["tfbook"]["quick_seconds"] == 30


def test_a_missed_socket_wake_up_is_delivered_without_a_restart(tmp_path):
    """The client's shell socket is made deaf to its file descriptor before the second cell (as when
    pyzmq misses an edge-triggered wake-up): the watchdog hands the reply over after a quiet second."""
    import asyncio

    # the later cells sleep, so their replies arrive after the client started waiting on the deaf socket
    nb = notebook("print('first')", "import time; time.sleep(1); print('second')", "time.sleep(1); print('third')")
    client = None

    def deafen_shell_socket(cell, cell_index):
        if cell_index == 1:
            asyncio.get_running_loop().remove_reader(client.kc.shell_channel.socket.FD)

    client = notebooks.WatchedClient(nb, kernel_manager_class=notebooks.InterpreterKernelManager,
                                     kernel_name="python3", stall_seconds=STALL_S * 5, iopub_timeout=10,
                                     shutdown_kernel="immediate", on_cell_execute=deafen_shell_socket,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    assert [text(c) for c in nb.cells] == ["first\n", "second\n", "third\n"]
    assert client.stalls == [] and len(client.deliveries) >= 1  # a reply that waited on the deaf socket
    # the deaf shell socket's replies come through the watchdog; under load an iopub message may too
    assert any("shell message delivered" in d for d in client.deliveries)
