#!/usr/bin/env python3
"""Time from spawn to the first frame (the input box drawn) of a talaria binary in a raw PTY,
with no MCP config or with an MCP server whose start-up takes 5 s (it never answers).

    scripts/first_frame_mcp.py target/debug/talaria 15 none
    scripts/first_frame_mcp.py target/debug/talaria 15 slow

Each run uses a fresh TALARIA_HOME and no API key (the demo model), 120x40."""
import os, pty, time, sys, select, signal, statistics, tempfile
binary = sys.argv[1]; runs = int(sys.argv[2]); slow = sys.argv[3] == "slow"
res = []
for i in range(runs):
    home = tempfile.mkdtemp()
    if slow:
        open(os.path.join(home, "config.toml"), "w").write('[mcp.servers.slow]\ncommand = "sh"\nargs = ["-c", "sleep 5; exec cat"]\n')
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(TALARIA_HOME=home, TERM="xterm-256color")
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(binary, [binary], env)
    t0 = time.monotonic(); buf = b""; got = None
    import fcntl, termios, struct
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    while time.monotonic() - t0 < 10:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try: buf += os.read(fd, 65536)
            except OSError: break
            if b" message " in buf:
                got = (time.monotonic() - t0) * 1000; break
    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); os.close(fd)
    res.append(got)
ok = [r for r in res if r is not None]
print(f"{'slow MCP server' if slow else 'no MCP config'}: n={len(ok)}/{runs} min {min(ok):.1f} median {statistics.median(ok):.1f} max {max(ok):.1f} ms")
