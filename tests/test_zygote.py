"""The zygote's executable behaves as ``python`` does for what the suite asks of it (tests/helpers/zygote.py): the
program gets its arguments, working directory, environment and standard streams, its exit code and the signal that
ended it come back, signals sent to the executable reach the program, killing the executable kills the program, and
a command line the zygote cannot take runs a real interpreter."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import zygote
from tests.helpers.launch import launched_env


@pytest.fixture(scope="module")
def python():
    return zygote.shared(launched_env()).python


def test_arguments_directory_environment_streams_and_exit_code(python, tmp_path):
    code = (
        "import os, sys; print(os.getcwd(), os.environ['PROBE'], sys.argv[1:], sys.stdin.read().upper()); sys.exit(3)"
    )
    env = {**os.environ, "PROBE": "seen"}
    done = subprocess.run(
        [python, "-c", code, "a", "b"], cwd=tmp_path, env=env, input="in", capture_output=True, text=True
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == [str(tmp_path), "seen", "['a',", "'b']", "IN"]
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(sys.argv, __name__)\nraise ValueError('from the script')\n")
    done = subprocess.run([python, "-u", str(script), "x"], capture_output=True, text=True)
    assert done.returncode == 1 and "ValueError: from the script" in done.stderr
    assert done.stdout.strip() == f"[{str(script)!r}, 'x'] __main__"
    done = subprocess.run([python, "-m", "json.tool"], input='{"a": 1}', capture_output=True, text=True)
    assert done.returncode == 0 and '"a": 1' in done.stdout


def test_the_program_is_a_fork_of_the_preloaded_process(python):
    """torch is imported before the program runs a line; ``sys.executable`` is the zygote's executable only where
    ``PYTHON_EXEC`` asks for descendants forked too (torchrun's variable)."""
    code = "import sys; print('torch' in sys.modules, sys.executable)"
    plain = subprocess.run([python, "-c", code], capture_output=True, text=True, env=os.environ).stdout.split()
    assert plain == ["True", sys.executable]
    env = {**os.environ, "PYTHON_EXEC": python}
    asked = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env).stdout.split()
    assert asked == ["True", python]
    real = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True).stdout.split()
    assert real == ["False", sys.executable], "a flag the zygote does not take must start a real interpreter"


def test_signals_reach_the_program_and_come_back(python, tmp_path):
    done = subprocess.run([python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert done.returncode == -signal.SIGTERM
    pid_file = tmp_path / "pid"
    sleeper = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    # SIGTERM, not SIGINT: under pytest-xdist the workers ignore SIGINT, and an ignored signal stays ignored in what
    # they start, forked or exec'd alike (a real interpreter then installs no KeyboardInterrupt handler either).
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pid_file.unlink(missing_ok=True)
        proc = subprocess.Popen([python, "-c", sleeper])
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        program = psutil.Process(int(pid_file.read_text()))
        assert program.pid != proc.pid
        proc.send_signal(sig)
        # SIGTERM is forwarded to the program, which it ends; after SIGKILL of the executable the program is killed.
        assert proc.wait(timeout=30) == -sig
        program.wait(timeout=10)
        assert not program.is_running()
