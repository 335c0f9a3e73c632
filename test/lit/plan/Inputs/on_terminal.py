"""Run a command with its standard output (and error) on a pseudo-terminal and print
what it wrote, so that a test can see what a user at a terminal sees."""
import os, pty, subprocess, sys

master, slave = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
os.close(slave)
out = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
p.wait()
sys.stdout.write(out.decode(errors="replace").replace("\r\n", "\n"))
sys.exit(p.returncode)
