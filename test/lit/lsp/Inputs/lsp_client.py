"""A scripted Language Server Protocol client for `moec lsp` tests.

Usage: lsp_client.py SCRIPT.py [--timeout SECONDS] -- COMMAND...
Starts COMMAND with pipes, then runs SCRIPT with `client` (a Client) in scope.
The script sends requests and notifications and asserts on the answers; any
failed assertion, protocol error or timeout exits with status 1. The timeout
bounds the whole session (default 60 s): it catches a server that hangs.
"""
import json
import os
import subprocess
import sys
import threading


class Client:
    def __init__(self, argv, timeout=60):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 1
        self.pending = []  # notifications read while waiting for a response
        self.timer = threading.Timer(timeout, self._timeout)
        self.timer.daemon = True
        self.timer.start()
        self.timed_out = False

    def _timeout(self):
        self.timed_out = True
        self.proc.kill()

    # --- framing -----------------------------------------------------------
    def send_raw(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        body = json.dumps(message).encode("utf-8")
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def read(self):
        length = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("server closed its output" + (" (timeout)" if self.timed_out else ""))
            line = line.rstrip(b"\r\n")
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        assert length is not None, "response without Content-Length"
        body = self.proc.stdout.read(length)
        return json.loads(body.decode("utf-8"))

    # --- JSON-RPC ----------------------------------------------------------
    def request(self, method, params=None):
        rid = self.next_id
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response(rid)

    def response(self, rid):
        while True:
            m = self.read()
            if "method" in m and "id" not in m:
                self.pending.append(m)
                continue
            assert m.get("id") == rid, "expected the answer to %r, got %r" % (rid, m)
            return m

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def notification(self, method):
        """The next notification of `method` (read from the stream if none is pending)."""
        while True:
            for i, m in enumerate(self.pending):
                if m.get("method") == method:
                    return self.pending.pop(i)["params"]
            m = self.read()
            assert "id" not in m or "method" in m, "unexpected response %r" % m
            self.pending.append(m)

    def finish(self):
        self.proc.stdin.close()
        code = self.proc.wait()
        self.timer.cancel()
        return code


def uri(path):
    from urllib.parse import quote
    return "file://" + quote(os.path.abspath(path))


def pos(line, character):
    return {"line": line, "character": character}


def rng(l1, c1, l2, c2):
    return {"start": pos(l1, c1), "end": pos(l2, c2)}


def apply_edits(text, edits):
    """Applies LSP TextEdits (ASCII text) to text."""
    lines = text.split("\n")
    offsets = [0]
    for l in lines:
        offsets.append(offsets[-1] + len(l) + 1)
    def off(p):
        return offsets[p["line"]] + p["character"]
    for e in sorted(edits, key=lambda e: off(e["range"]["start"]), reverse=True):
        s, t = off(e["range"]["start"]), off(e["range"]["end"])
        text = text[:s] + e["newText"] + text[t:]
    return text


def main():
    split = sys.argv.index("--")
    script, argv = sys.argv[1], sys.argv[split + 1:]
    options = sys.argv[2:split]
    timeout = float(options[options.index("--timeout") + 1]) if "--timeout" in options else 60
    client = Client(argv, timeout)
    env = {"client": client, "uri": uri, "pos": pos, "rng": rng, "apply_edits": apply_edits, "json": json}
    try:
        with open(script) as f:
            exec(compile(f.read(), script, "exec"), env)
    except AssertionError as e:
        client.proc.kill()
        print("FAIL:", e, file=sys.stderr)
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
