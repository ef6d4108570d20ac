#!/usr/bin/env python3
"""soak -- a bounded loopback load harness against one real daemon.

    soak.py INFERD [--requests N] [--warmup W] [--concurrency C] [--max-seconds S]
                   [--model FILE] [--seed X]

Starts `inferd serve` on 127.0.0.1 (tests/api/daemon.py), then C client
threads send N requests of a fixed-seed random mix, and stop by themselves
(after N requests or S seconds, whichever is first; a run cut by S fails):
  completions without and with streaming; n > 1; logprobs; echo; stop
  strings; response_format (json_object and a small schema: a choice that
  ends "stop" must be one JSON object); seeds (a seeded request seen again must give the same text: the
  engine is batch-invariant, DESIGN.md); token-id and multi-prompt prompts;
  clients that close mid-stream, right after sending, or before reading a
  non-streamed answer; 400s for bad bodies; bodies of 20-45 KB, valid or
  not, that go through the parse worker pool; /health, /v1/models,
  /metrics, /tokenize.
Every response is checked (status, JSON shape, one finish_reason per choice,
logprob arrays of one length, usage sums, no stop string in the text, SSE
framing ending with [DONE]); a bad one is a failure.
Figures, printed at the end: requests by kind, req/s, the daemon's RSS after
the warm-up (W requests) and at the end, its open file descriptors before the
load and after it, running sequences and used KV blocks after it. Passes when
RSS grew at most 5 % after warm-up, the fds are back to their start, no
sequence runs, no KV block is used, and every response was well-formed.
Exit 0 pass, 1 fail, 77 skip (no model).
"""
import argparse
import json
import os
import random
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
sys.dont_write_bytecode = True
import daemon as D  # noqa: E402

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park.",
           "One day, a girl named Sue", "He was very happy because", "The sun",
           "Bob had a big red ball. He", "Mom said"]
STOPS = [".", " the", "\n", "e", "He", "ball", "!", ", "]
# response_format in the mix: a choice that ends "stop" holds one JSON value
RFORMATS = [{"type": "json_object"},
            {"type": "json_schema", "json_schema": {"name": "s", "schema": {
                "type": "object", "properties": {"who": {"type": "string", "maxLength": 16},
                                                 "n": {"type": "integer"},
                                                 "ok": {"type": ["boolean", "null"]}},
                "required": ["who"]}}},
            # a tagged union with integer ranges (jsonc: JSONC_TAGGED, INTEGER ranges)
            {"type": "json_schema", "json_schema": {"name": "t", "schema": {"anyOf": [
                {"type": "object", "properties": {"k": {"const": "a"},
                                                  "n": {"type": "integer", "minimum": -5,
                                                        "maximum": 90}},
                 "required": ["k", "n"]},
                {"type": "object", "properties": {"k": {"enum": ["b", "c"]},
                                                  "m": {"type": "integer", "exclusiveMinimum": 7}},
                 "required": ["k"]}]}}}]


def check_json(req, gen, fin, what):
    """A constrained choice that ended "stop" is one JSON value (an object)."""
    if not req.get("response_format") or fin != "stop" or gen is None:
        return
    try:
        v = json.loads(gen)
    except ValueError as e:
        need(False, "%s: not JSON (%s): %r" % (what, e, gen))
        return
    need(isinstance(v, dict), "%s: JSON but not an object: %r" % (what, gen))
    if req["response_format"].get("json_schema", {}).get("name") != "t":
        return
    if v.get("k") == "a":
        need(list(v) == ["k", "n"] and -5 <= v["n"] <= 90, "%s: outside its schema: %r" % (what, gen))
    else:
        need(v["k"] in ("b", "c") and set(v) <= {"k", "m"} and v.get("m", 8) > 7,
             "%s: outside its schema: %r" % (what, gen))


class Bad(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Bad(what)


def proc_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def send(port, method, path, body=None, headers=""):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s" % (method, path, headers)
    if data is not None:
        req += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    s.sendall(req.encode() + b"\r\n" + (data or b""))
    return s


def whole(port, method, path, body=None):
    s = send(port, method, path, body)
    try:
        return D.parse_response(D.read_response_bytes(s))
    finally:
        s.close()


def check_logprobs(lp, what):
    need(isinstance(lp, dict), "%s: logprobs not an object" % what)
    n = len(lp["tokens"])
    need(len(lp["token_logprobs"]) == n and len(lp["top_logprobs"]) == n and
         len(lp["text_offset"]) == n, "%s: logprob arrays of different lengths" % what)
    need(all(isinstance(t, str) for t in lp["tokens"]), "%s: a logprob token is not a string" % what)
    need(all(lp["text_offset"][i] <= lp["text_offset"][i + 1] for i in range(n - 1)),
         "%s: text_offset not sorted" % what)


def completion_part(req, text, i):
    """The generated part of choice i's text (echo: without its prompt), or
    None when it cannot be told (echo of a token-id prompt)."""
    if not req.get("echo"):
        return text
    p = req["prompt"]
    if isinstance(p, list) and p and isinstance(p[0], str):
        p = p[i // req.get("n", 1)]
    if not isinstance(p, str):
        return None
    need(text.startswith(p), "echo text does not start with the prompt")
    return text[len(p):]


def check_body(req, j, n_prompts):
    need(j.get("object") == "text_completion", "object %r" % j.get("object"))
    ch = j["choices"]
    n = req.get("n", 1)
    need(len(ch) == n * n_prompts, "%d choices, wanted %d" % (len(ch), n * n_prompts))
    for i, c in enumerate(ch):
        need(c["index"] == i, "choice index %r at %d" % (c["index"], i))
        need(isinstance(c["text"], str), "text not a string")
        need(c["finish_reason"] in ("stop", "length"), "finish_reason %r" % c["finish_reason"])
        if "logprobs" in req:
            check_logprobs(c["logprobs"], "choice %d" % i)
        else:
            need(c["logprobs"] is None, "logprobs without asking")
        stops = req.get("stop") or []
        gen = completion_part(req, c["text"], i)
        for s in ([stops] if isinstance(stops, str) else stops):
            need(gen is None or s not in gen, "stop string %r in the text %r" % (s, gen))
        check_json(req, gen, c["finish_reason"], "choice %d" % i)
    u = j["usage"]
    need(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "usage sums")
    need(u["completion_tokens"] <= n * n_prompts * req["max_tokens"], "too many completion tokens")
    return [c["text"] for c in ch]


def check_stream(req, raw, n_prompts):
    st, hd, b = D.parse_response(raw)
    need(st == 200, "stream status %d: %r" % (st, b[:200]))
    need(hd.get("content-type", "").startswith("text/event-stream"), "stream content-type")
    evs = D.sse_events(b)
    need(evs and evs[-1] == "[DONE]", "stream does not end with [DONE]")
    n = req.get("n", 1) * n_prompts
    texts, fins = [""] * n, [None] * n
    usage = None
    for e in evs[:-1]:
        j = json.loads(e)
        need("error" not in j, "error event %r" % j)
        if not j["choices"]:
            usage = j.get("usage")
            continue
        for c in j["choices"]:
            i = c["index"]
            need(0 <= i < n, "index %r" % i)
            texts[i] += c["text"]
            if c["finish_reason"] is not None:
                need(fins[i] is None, "two finish_reasons for choice %d" % i)
                fins[i] = c["finish_reason"]
            if "logprobs" in req:
                check_logprobs(c["logprobs"], "stream choice %d" % i)
    need(all(f in ("stop", "length") for f in fins), "finish_reasons %r" % fins)
    if req.get("stream_options", {}).get("include_usage"):
        need(usage is not None, "no usage chunk")
    stops = req.get("stop") or []
    for i, t in enumerate(texts):
        gen = completion_part(req, t, i)
        for s in ([stops] if isinstance(stops, str) else stops):
            need(gen is None or s not in gen, "stop string %r in the streamed text" % s)
        check_json(req, gen, fins[i], "stream choice %d" % i)
    return texts


class Soak:
    def __init__(self, d, args):
        self.d = d
        self.port = d.port
        self.args = args
        self.lock = threading.Lock()
        self.next_i = 0
        self.counts = {}
        self.bad = []
        self.seeded = {}
        self.mismatch = 0
        self.repeats = 0
        self.rss_warm = None
        self.t_warm = None
        self.done = 0
        self.deadline = time.time() + args.max_seconds
        self.cut = False
        st, _, b = whole(self.port, "GET", "/v1/models")
        self.model = json.loads(b.decode())["data"][0]["id"]

    def take(self):
        with self.lock:
            if self.next_i >= self.args.requests:
                return None
            if time.time() > self.deadline:
                self.cut = True
                return None
            i = self.next_i
            self.next_i += 1
            return i

    def finish_one(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.done += 1
            if self.done == self.args.warmup:
                self.rss_warm = proc_rss_kb(self.d.proc.pid)
                self.t_warm = time.time()

    def remember(self, req, texts):
        key = json.dumps(req, sort_keys=True)
        with self.lock:
            old = self.seeded.setdefault(key, texts)
            if old is not texts:
                self.repeats += 1
            if old != texts:
                self.mismatch += 1
                self.bad.append("seeded request gave a different text: %s" % key[:200])

    def one(self, i):
        r = random.Random(self.args.seed * 1000003 + i)
        k = r.random()
        req = {"model": self.model, "prompt": r.choice(PROMPTS), "max_tokens": r.randrange(1, 33)}
        n_prompts = 1
        if r.random() < 0.3:
            req["n"] = r.randrange(2, 5)
        if r.random() < 0.25:
            req["logprobs"] = r.randrange(0, 4)
        if r.random() < 0.2:
            req["echo"] = True
        if r.random() < 0.35:
            req["stop"] = r.sample(STOPS, r.randrange(1, 4)) if r.random() < 0.7 else r.choice(STOPS)
        if r.random() < 0.5:
            req["temperature"] = r.choice([0.0, 0.7, 1.0, 1.3])
            req["seed"] = r.randrange(8)  # few seeds: repeats are checked
        if r.random() < 0.12:  # (a stop string could cut the JSON: none then)
            req.pop("stop", None)
            req["response_format"] = r.choice(RFORMATS)
        if r.random() < 0.1:
            req["prompt"] = [r.randrange(3, 500) for _ in range(r.randrange(1, 12))]
        elif r.random() < 0.08:
            n_prompts = r.randrange(2, 4)
            req["prompt"] = r.sample(PROMPTS, n_prompts)
        if k < 0.30:
            self.plain(req, n_prompts)
        elif k < 0.58:
            req["stream"] = True
            if r.random() < 0.5:
                req["stream_options"] = {"include_usage": True}
            self.stream(req, n_prompts)
        elif k < 0.70:
            req["stream"] = True
            req["max_tokens"] = r.randrange(16, 200)
            req["ignore_eos"] = True
            self.stream_cancel(req, r.randrange(0, 6), r)
        elif k < 0.76:
            req["max_tokens"] = r.randrange(32, 200)
            req["ignore_eos"] = True
            self.close_early(req)
        elif k < 0.82:
            self.bad_request(r)
        elif k < 0.86:
            self.big_body(req, r)
        else:
            self.misc(r)

    def plain(self, req, n_prompts):
        st, _, b = whole(self.port, "POST", "/v1/completions", req)
        need(st == 200, "status %d: %r for %r" % (st, b[:300], req))
        texts = check_body(req, json.loads(b.decode()), n_prompts)
        if "seed" in req or req.get("temperature", 1) == 0:
            self.remember(req, texts)
        self.finish_one("json")

    def stream(self, req, n_prompts):
        s = send(self.port, "POST", "/v1/completions", req)
        try:
            raw = D.read_response_bytes(s)
        finally:
            s.close()
        texts = check_stream(req, raw, n_prompts)
        if "seed" in req or req.get("temperature", 1) == 0:
            plain = dict(req)
            plain.pop("stream")
            plain.pop("stream_options", None)
            self.remember(plain, texts)  # streamed == the same request not streamed
        self.finish_one("stream")

    def stream_cancel(self, req, events, r):
        s = send(self.port, "POST", "/v1/completions", req)
        try:
            buf = b""
            while buf.count(b"data: {") < events:
                x = s.recv(65536)
                if not x:
                    break
                buf += x
            if buf:
                need(buf.startswith(b"HTTP/1.1 200"), "cancel stream status %r" % buf[:40])
        finally:
            if r.random() < 0.5:  # RST
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        self.finish_one("stream-cancel")

    def close_early(self, req):
        s = send(self.port, "POST", "/v1/completions", req)
        s.close()
        self.finish_one("close-early")

    def bad_request(self, r):
        body = r.choice([b"{", b"[]", b'{"prompt":"x","max_tokens":-1}', b'{"prompt":""}',
                         b'{"prompt":"x","n":100000}', b'{"prompt":"x","temperature":"hot"}',
                         b'{"prompt":[1,2,-5]}', b'{"prompt":"x","stop":[""]}',
                         b'{"prompt":"x","logit_bias":{"abc":1}}', b'{"prompt":"x"} trailing'])
        st, hd, b = whole(self.port, "POST", "/v1/completions", body)
        need(st == 400, "bad body %r got %d" % (body, st))
        e = json.loads(b.decode())["error"]
        need(isinstance(e["message"], str) and e["message"], "error without a message")
        self.finish_one("400")

    def big_body(self, req, r):
        """A body past the parse pool's threshold (api/parse_pool.h): a valid
        request padded with an unknown field, or a prompt over n_ctx (400);
        some of them closed right after sending."""
        if r.random() < 0.5:
            req["pad"] = ["x" * 64] * r.randrange(300, 700)
            want = 200
        else:
            req["prompt"] = "Once upon a time " * r.randrange(1200, 2500)
            want = 400
        req.pop("stream", None)
        if r.random() < 0.3:
            s = send(self.port, "POST", "/v1/completions", req)
            s.close()
            self.finish_one("big-close-early")
            return
        st, _, b = whole(self.port, "POST", "/v1/completions", req)
        need(st == want, "big body: %d, wanted %d: %r" % (st, want, b[:200]))
        if want == 200:
            p = req["prompt"]
            n_prompts = len(p) if isinstance(p, list) and p and isinstance(p[0], str) else 1
            check_body(req, json.loads(b.decode()), n_prompts)
        self.finish_one("big")

    def misc(self, r):
        k = r.randrange(4)
        if k == 0:
            st, _, b = whole(self.port, "GET", "/health")
            need(st == 200, "/health %d" % st)
        elif k == 1:
            st, _, b = whole(self.port, "GET", "/v1/models")
            need(st == 200 and json.loads(b.decode())["data"], "/v1/models %d" % st)
        elif k == 2:
            st, _, b = whole(self.port, "GET", "/metrics")
            need(st == 200 and b"inferd_kv_blocks_used" in b, "/metrics %d" % st)
        else:
            text = r.choice(PROMPTS)
            st, _, b = whole(self.port, "POST", "/tokenize", {"prompt": text})
            need(st == 200 and isinstance(json.loads(b.decode()).get("tokens"), list), "/tokenize %d %r" % (st, b[:200]))
        self.finish_one("misc")

    def worker(self):
        while True:
            i = self.take()
            if i is None:
                return
            try:
                self.one(i)
            except (Bad, ValueError, KeyError, TypeError, AssertionError, OSError) as ex:
                with self.lock:
                    self.bad.append("request %d: %s: %s" % (i, type(ex).__name__, ex))
                    self.done += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inferd")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--warmup", type=int, default=0, help="default: 10%% of the requests")
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--max-seconds", type=float, default=3000)
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=12)
    a = ap.parse_args()
    if not os.path.exists(a.inferd):
        print("skip: no inferd binary")
        return 77
    if a.warmup <= 0:
        a.warmup = max(1, a.requests // 10)
    model = a.model or D.model_path("stories260K.gguf")
    d = D.Daemon(a.inferd, model=model,
                 args=["--n-ctx", "512", "--max-seqs", "16", "--queue-len", "256",
                       "--max-connections", "256", "--max-connections-per-ip", "128",
                       "--log-level", "warn"])
    rc = 1
    try:
        pid = d.proc.pid
        time.sleep(0.3)  # the readiness probe's connection closes
        fds0, rss0 = proc_fds(pid), proc_rss_kb(pid)
        s = Soak(d, a)
        t0 = time.time()
        ths = [threading.Thread(target=s.worker) for _ in range(a.concurrency)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        dt = time.time() - t0
        # let canceled sequences and closing sockets settle
        if d.proc.poll() is not None:
            print("soak: the daemon exited (status %s) under the load:\n%s"
                  % (d.proc.returncode, d.log()[-4000:]))
            return 1
        m, t_end = d.metrics(), time.time() + 10
        while time.time() < t_end:
            m = d.metrics()
            if (m["inferd_running_sequences"] == 0 and m["inferd_kv_blocks_used"] == 0 and
                    m["inferd_waiting_requests"] == 0 and m["inferd_open_connections"] <= 1 and
                    proc_fds(pid) <= fds0):
                break
            time.sleep(0.1)
        fds1, rss1 = proc_fds(pid), proc_rss_kb(pid)
        rss_w = s.rss_warm or rss1
        growth = (rss1 - rss_w) * 100.0 / rss_w
        print("soak: %d requests in %.1f s (%.0f req/s), concurrency %d%s"
              % (s.done, dt, s.done / dt, a.concurrency, " (CUT by --max-seconds)" if s.cut else ""))
        print("soak: by kind %s" % json.dumps(dict(sorted(s.counts.items()))))
        print("soak: seeded/greedy requests: %d distinct, %d repeats compared, %d mismatches"
              % (len(s.seeded), s.repeats, s.mismatch))
        print("soak: RSS %d kB at start, %d kB after %d warm-up requests, %d kB at end (%+.2f %%)"
              % (rss0, rss_w, a.warmup, rss1, growth))
        print("soak: fds %d at start, %d at end; running %d, waiting %d, KV blocks used %d of %d, "
              "client disconnects %d" % (fds0, fds1, m["inferd_running_sequences"],
                                        m["inferd_waiting_requests"], m["inferd_kv_blocks_used"],
                                        m["inferd_kv_blocks_capacity"], m["inferd_client_disconnects_total"]))
        print("soak: malformed or failed responses: %d" % len(s.bad))
        for b in s.bad[:10]:
            print("  " + b)
        fails = []
        if s.bad:
            fails.append("%d bad responses" % len(s.bad))
        if s.cut:
            fails.append("cut by --max-seconds before %d requests" % a.requests)
        if growth > 5.0:
            fails.append("RSS grew %.2f %% after warm-up" % growth)
        if fds1 != fds0:
            fails.append("fds %d -> %d" % (fds0, fds1))
        if m["inferd_running_sequences"] or m["inferd_kv_blocks_used"] or m["inferd_waiting_requests"]:
            fails.append("sequences or KV blocks left")
        code = d.stop()
        if code != 0:
            fails.append("daemon exit status %s" % code)
        print("soak: %s" % ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
        if fails:
            print(d.log()[-3000:])
        rc = 0 if not fails else 1
    finally:
        d.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
