"""The `python` tool's sandbox: prints come back; a busy loop, a sleep, a huge allocation, the network, a write
outside the working folder, a package outside the standard library and a new process all end in a one-line
ToolError (or an ImportError the model reads); no process and no folder is left behind."""
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from backend.tools import sandbox
from backend.tools.sandbox import ToolError, run_python


@pytest.fixture(autouse=True)
def marker(monkeypatch):
    """A prefix of this test's own call folders (in the child's command line): what is left is ours."""
    prefix = f"tool-python-test-{uuid.uuid4().hex[:10]}-"
    monkeypatch.setattr(sandbox, "WORK_PREFIX", prefix)
    yield prefix
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(prefix in a for a in p.info["cmdline"] or ())]
    assert not left, f"processes left behind: {left}"
    assert not list(Path(tempfile.gettempdir()).glob(prefix + "*")), "the call's folder was not deleted"


def run(code: str, **limits) -> str:
    return run_python(code, **{"timeout_s": 20.0, "cpu_s": 5.0, "memory_mb": 256, "max_output_chars": 2000,
                               **limits})


def test_prints_come_back_cut_to_the_limit_and_silence_says_so():
    assert run("print('hello')\nprint(2 + 3)") == "hello\n5"
    assert run("x = 1") == "(no output)"
    out = run("print('x' * 10_000_000)", max_output_chars=100)  # 10 MB printed: drained, not kept
    assert len(out) <= 100 and out.endswith("… (cut)") and out.startswith("xxx")


def test_a_program_that_raises_returns_its_output_and_the_end_of_its_traceback():
    out = run("def f():\n    return 1 / 0\nprint('before')\nf()")
    assert out.startswith("before\n") and out.endswith("ZeroDivisionError: division by zero")
    assert 'File "<program>", line 2, in f' in out and "sandbox.py" not in out  # its own frames only


def test_a_syntax_error_names_its_line():
    with pytest.raises(ToolError, match=r"^SyntaxError: expected ':' \(line 3\)$"):
        run("x = 1\ny = 2\nif x\n    pass")


def test_a_busy_loop_ends_at_the_cpu_limit():
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"^the program ran longer than 1 s \(CPU time\)$"):
        run("while True:\n    pass", cpu_s=1.0)
    assert time.monotonic() - t0 < 1.0 + 2.0


def test_a_sleeping_program_ends_at_the_wall_limit():
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"^the program ran longer than 1.5 s \(wall time\)$"):
        run("import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.1)", timeout_s=1.5)
    assert time.monotonic() - t0 < 1.5 + 2.0


def test_a_huge_allocation_fails_with_the_memory_limit():
    with pytest.raises(ToolError, match=r"^MemoryError: the program needed more than 256 MB$"):
        run("b = bytearray(10 * 1024**3)\nprint('allocated')")


@pytest.mark.parametrize("code, event", [
    ("import socket\ns = socket.socket()", "socket.socket"),
    ("import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=1)", "socket.getaddrinfo"),
    ("import socket\ntry:\n    socket.socket()\nexcept BaseException:\n    print('caught')", "socket.socket"),  # no
    ("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:PORT/')", "urllib.Request"),
])
def test_the_network_is_refused(code, event):
    with socket.socket() as server:  # a real listener: a connection that got through would be accepted
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.3)
        with pytest.raises(ToolError, match=rf"^the program tried to use the network \({event}\), which is not "
                                            r"allowed$"):
            run(code.replace("PORT", str(server.getsockname()[1])))
        with pytest.raises(socket.timeout):
            server.accept()


@pytest.mark.parametrize("code", [
    "open(TARGET, 'w').write('x')",
    "import os\nos.close(os.open(TARGET, os.O_WRONLY | os.O_CREAT))",
    "import pathlib\npathlib.Path(TARGET).write_text('x')",
    "import os\nopen(os.path.relpath(TARGET), 'a').write('x')",  # ../../outside-…: resolved first
    "import os\nos.symlink(TARGET, 'link')\nopen('link', 'w').write('x')",  # through a link in its folder
])
def test_a_write_outside_the_working_folder_is_refused(code):
    target = Path(tempfile.gettempdir()) / f"outside-{uuid.uuid4().hex}"
    try:
        with pytest.raises(ToolError, match=rf"^the program tried to write outside its working folder "
                                            rf"\({target}\)$"):
            run(code.replace("TARGET", repr(str(target))))
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_a_write_inside_the_working_folder_works_and_the_folder_goes_afterwards():
    out = run("import os, tempfile\nopen('a.txt', 'w').write('hi')\nos.makedirs('d/e')\n"
              "with tempfile.NamedTemporaryFile(dir=None) as f:\n    f.write(b'x')\n"
              "print(open('a.txt').read(), sorted(os.listdir('.')))\nprint(os.getcwd())")
    first, folder = out.splitlines()
    assert first == "hi ['a.txt', 'd']"
    assert Path(folder).name == "work" and not Path(folder).exists()


def test_only_the_standard_library_imports():
    assert "pytest" in sys.modules  # importable here; not there
    for name in ("numpy", "pytest"):
        assert run(f"import {name}").endswith(f"ModuleNotFoundError: No module named '{name}'")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    with pytest.raises(ToolError, match=r"^the program tried to import from outside the standard library"):
        run(f"import sys\nsys.path.append({site!r})\nimport pytest")
    assert run("import json, asyncio, decimal, threading\nasyncio.run(asyncio.sleep(0))\n"
               "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
               "print(json.dumps({'a': decimal.Decimal('1.5') * 2}, default=str))") == 'thread\n{"a": "3.0"}'


@pytest.mark.parametrize("code, event", [
    ("import subprocess\nsubprocess.run(['touch', MARK])", "subprocess.Popen"),
    ("import os\nos.system('touch ' + MARK)", "os.system"),
    ("import os\nif os.fork() == 0:\n    open(MARK, 'w')", "os.fork"),
    ("import os\nos.execv('/usr/bin/touch', ['touch', MARK])", "os.exec"),
    ("import _posixsubprocess\n_posixsubprocess.fork_exec()", "_posixsubprocess.fork_exec"),
    ("import os\nos.kill(os.getppid(), 0)", "os.kill"),
])
def test_a_new_process_is_refused(code, event, tmp_path):
    mark = tmp_path / "started"
    with pytest.raises(ToolError, match=rf"^the program tried to start or signal another process \({event}\)"):
        run(code.replace("MARK", repr(str(mark))))
    assert not mark.exists()


def test_the_repository_and_the_callers_environment_cannot_be_read_the_standard_library_can():
    readme = Path(sandbox.__file__).resolve().parents[2] / "README.md"
    with pytest.raises(ToolError, match=rf"^the program tried to read outside .*\({readme}\)$"):
        run(f"print(open({str(readme)!r}).read())")
    with pytest.raises(ToolError, match=rf"^the program tried to read outside .*\(/proc/{os.getpid()}/environ\)$"):
        run("import os\nprint(open(f'/proc/{os.getppid()}/environ').read())")
    with pytest.raises(ToolError, match=r"^the program tried to load native code \(ctypes\)"):
        run("import ctypes")
    assert run("import json\nprint('def loads' in open(json.__file__).read())") == "True"


def test_the_limits_are_set_and_a_file_past_the_size_limit_fails_in_the_program():
    out = run("import resource as r\n"
              "print([r.getrlimit(x) for x in (r.RLIMIT_CPU, r.RLIMIT_AS, r.RLIMIT_FSIZE, r.RLIMIT_NOFILE)])",
              cpu_s=2.5, memory_mb=300)
    assert out == f"[(3, 4), ({300 * 2**20}, {300 * 2**20}), ({10 * 2**20}, {10 * 2**20}), (64, 64)]"
    assert run("open('big', 'wb').write(b'x' * (11 * 2**20))").endswith("OSError: [Errno 27] File too large")
